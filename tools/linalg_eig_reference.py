#!/usr/bin/env python3
"""Writes spec/fixtures/linalg_eig_reference.json: torch.linalg.eig and
torch.linalg.eigvals values and gradients in float64 (read by
spec/tensor/linalg_eig_spec.lua).

    /usr/bin/python3 tools/linalg_eig_reference.py     (torch 1.13 or later)

Eigenvectors are unique only up to a complex phase (and the order of the
eigenvalues is LAPACK's), so the fixture holds what does not depend on
either: the eigenvalues, |V| (both compared after matching eigenvalues),
and gradients of losses that are sums over eigenpairs of phase-invariant
terms:
    loss_l = sum(L.real^2 + L.imag^2 * L.real)
    loss_v = sum(w * |V|^4),  w[i, j] = 1 + sin(i) / 2 (row i, 1-based)
grad_l: of loss_l through eig; grad_lv: of loss_l + loss_v through eig;
grad_eigvals: of loss_l through eigvals. Run from the repository root.
"""
import json
import math

import torch

torch.set_default_dtype(torch.float64)


def flat(t):
    return [float(v) for v in t.reshape(-1).tolist()]


def loss_l(L):
    return (L.real ** 2 + L.imag ** 2 * L.real).sum()


def loss_v(V):
    n = V.shape[-1]
    w = torch.tensor([1 + math.sin(i + 1) / 2 for i in range(n)]).reshape(n, 1)
    return (w * V.abs() ** 4).sum()


REAL = [[4, 1, 2], [0.5, 3, 1], [0.2, 0.1, 1]]                     # real, distinct
PAIR = [[0.5, -2, 0.3], [1.5, 0.2, -0.4], [0.1, 0.7, 1.1]]         # one complex pair
TWO_PAIRS = [[0.3, -1.2, 0.5, 0.1], [1.4, 0.1, -0.2, 0.6],
             [-0.3, 0.4, 0.8, -1.5], [0.2, -0.1, 1.3, 0.6]]
BATCH = [PAIR, [[1.5, 0.3, -0.7], [0.9, -0.4, 1.2], [-0.6, 0.8, 0.25]]]
ONE = [[2.5]]

out = {'torch': torch.__version__, 'cases': []}
for name, a in [('real', REAL), ('pair', PAIR), ('two_pairs', TWO_PAIRS), ('batch', BATCH),
                ('one', ONE)]:
    x = torch.tensor(a, requires_grad=True)
    L, V = torch.linalg.eig(x)
    (gl,) = torch.autograd.grad(loss_l(L), [x], retain_graph=True)
    (glv,) = torch.autograd.grad(loss_l(L) + loss_v(V), [x])
    (ge,) = torch.autograd.grad(loss_l(torch.linalg.eigvals(x)), [x])
    out['cases'].append({
        'name': name, 'A': a, 'shape': list(x.shape),
        'L_re': flat(L.real), 'L_im': flat(L.imag), 'V_abs': flat(V.abs()),
        'grad_l': flat(gl), 'grad_lv': flat(glv), 'grad_eigvals': flat(ge)})
with open('spec/fixtures/linalg_eig_reference.json', 'w') as f:
    json.dump(out, f, indent=1)
    f.write('\n')
print('wrote spec/fixtures/linalg_eig_reference.json')

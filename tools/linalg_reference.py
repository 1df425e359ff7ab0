#!/usr/bin/env python3
"""Writes spec/fixtures/linalg_reference.json: torch.linalg.matrix_sqrth and
torch.linalg.polar values and gradients in float64 (both are new in PyTorch
2.x, so the reference is committed rather than computed at test time; read
by spec/tensor/linalg_polar_spec.lua).

    /path/to/python-with-torch-2.x tools/linalg_reference.py

Gradients are of sum over outputs of sum(y * sin(1..numel(y))). Run from the
repository root.
"""
import json

import torch

torch.set_default_dtype(torch.float64)


def flat(t):
    return [float(v) for v in t.reshape(-1).tolist()]


def weighted(ys):
    return sum((y * torch.arange(1, y.numel() + 1).reshape(y.shape).sin()).sum() for y in ys)


SPD = [[4, 1, 0.5], [1, 3, 0.2], [0.5, 0.2, 2]]
BATCH = [SPD, [[2, -0.3, 0.1], [-0.3, 1, 0.4], [0.1, 0.4, 5]]]
CLAMPED = [[1, 0.5], [0.5, -4]]          # a negative eigenvalue: clamped to 0
TALL = [[1.2, -0.7, 0.3], [0.4, 2.0, -1.1], [-0.5, 0.9, 1.5], [0.3, 0.1, -0.2], [1.0, 0.0, 0.6]]
SQUARE = [[0.1, 2.0, 1.0], [3.0, -1.0, 0.5], [1.0, 1.0, 4.0]]
PBATCH = [TALL[:4], [[0.5, 1.0, -2.0], [1.5, 0.2, 0.3], [-0.4, 2.2, 1.0], [0.9, -0.6, 0.1]]]

out = {'torch': torch.__version__, 'matrix_sqrth': [], 'polar': []}
for a in [SPD, BATCH, CLAMPED]:
    x = torch.tensor(a, requires_grad=True)
    X = torch.linalg.matrix_sqrth(x)
    (g,) = torch.autograd.grad(weighted([X]), [x])
    case = {'A': a, 'X': flat(X)}
    if torch.isfinite(g).all():      # not for the clamped case (a zero root: infinite)
        case['grad'] = flat(g)
    out['matrix_sqrth'].append(case)
for a in [TALL, SQUARE, PBATCH]:
    x = torch.tensor(a, requires_grad=True)
    U, H = torch.linalg.polar(x)
    (g,) = torch.autograd.grad(weighted([U, H]), [x])
    out['polar'].append({'A': a, 'U': flat(U), 'H': flat(H), 'grad': flat(g)})
with open('spec/fixtures/linalg_reference.json', 'w') as f:
    json.dump(out, f, indent=1)
    f.write('\n')
print('wrote spec/fixtures/linalg_reference.json')

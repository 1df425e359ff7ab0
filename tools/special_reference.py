#!/usr/bin/env python3
"""Writes spec/fixtures/special_reference.json: torch.special values (and
gradients where PyTorch has them) in float64 at points that include the
tails, for spec/numerics/special_spec.lua.

    /path/to/python-with-torch-2.x tools/special_reference.py

PyTorch 2.x is needed for the Bessel/Airy/polynomial functions (1.13 lacks
them; missing ones are skipped with a message). Run from the repository root.
"""
import json
import math
import sys

import torch

torch.set_default_dtype(torch.float64)
S = torch.special

def fin(v):
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return repr(v)          # JSON has no inf/nan: 'inf', '-inf', 'nan'
    return v

def values(t):
    return [fin(float(v)) for v in t.reshape(-1).tolist()]

BESSEL_X = [1e-5, 0.5, 1.0, 4.9, 5.1, 10.0, 25.0, 100.0, 1e4]
MOD_X = [1e-5, 0.5, 1.0, 2.0, 5.0, 8.5, 20.0, 100.0, 500.0]
POLY_X = [-1.0, -0.6, 0.0, 0.3, 0.9, 1.0, 1.7]
POLY_N = [0.0, 1.0, 2.0, 5.0, 10.0]
HERM_X = [-3.0, -0.5, 0.0, 0.5, 2.5]

UNARY = {
    'erfcx': [-26.0, -10.0, -5.0, -1.0, -1e-3, 0.0, 1e-5, 0.5, 1.0, 3.0, 10.0, 30.0, 60.0, 1e3, 1e8],
    'erfinv': [-0.999999, -0.9, -0.5, -1e-8, 0.0, 1e-3, 0.3, 0.7, 0.99, 0.9999999999],
    'gammaln': [1e-8, 0.1, 0.5, 1.0, 2.0, 2.5, 10.0, 100.5, 1e5, 1e10, -0.5, -2.5],
    'digamma': [1e-6, 0.1, 1.0, 1.5, 10.0, 100.0, 1e6, -0.5, -2.3],
    'i0': [-30.0, -8.5, -3.0, -1e-3, 0.0, 0.5, 2.0, 7.9, 8.1, 20.0, 100.0, 700.0],
    'i0e': [-30.0, -8.5, -3.0, -1e-3, 0.0, 0.5, 2.0, 7.9, 8.1, 20.0, 100.0, 1e4],
    'i1': [-30.0, -8.5, -3.0, -1e-3, 0.0, 0.5, 2.0, 7.9, 8.1, 20.0, 100.0, 700.0],
    'i1e': [-30.0, -8.5, -3.0, -1e-3, 0.0, 0.5, 2.0, 7.9, 8.1, 20.0, 100.0, 1e4],
    'ndtri': [1e-300, 1e-20, 1e-5, 0.01, 0.135, 0.5, 0.8, 0.99, 1 - 1e-10],
    'log_ndtr': [-1e3, -40.0, -20.0, -5.0, -1.0, 0.0, 1.0, 5.0, 10.0, 40.0],
    'ndtr': [-40.0, -20.0, -5.0, -1.0, 0.0, 1.0, 5.0, 9.0],
    'bessel_j0': [-7.0] + BESSEL_X, 'bessel_j1': [-7.0] + BESSEL_X,
    'bessel_y0': BESSEL_X, 'bessel_y1': BESSEL_X,
    'modified_bessel_i0': [-3.0] + MOD_X, 'modified_bessel_i1': [-3.0] + MOD_X,
    'modified_bessel_k0': MOD_X, 'modified_bessel_k1': MOD_X,
    'scaled_modified_bessel_k0': MOD_X, 'scaled_modified_bessel_k1': MOD_X,
    'spherical_bessel_j0': [-10.0, -1e-3, 0.0, 0.3, 0.7, 5.0, 100.0],
    'airy_ai': [-50.0, -10.0, -2.5, -1.0, 0.0, 0.5, 2.0, 5.0, 20.0, 100.0],
    'erf': [-6.0, -1.0, -1e-9, 0.0, 0.3, 2.0, 6.0],
    'erfc': [-6.0, -1.0, 0.0, 0.3, 2.0, 6.0, 26.0],
    'expit': [-800.0, -30.0, -1.0, 0.0, 2.0, 40.0],
    'logit': [1e-12, 0.1, 0.5, 0.9, 1 - 1e-9],
    'exp2': [-1074.0, -10.5, 0.0, 0.5, 3.0, 1023.0],
    'expm1': [-50.0, -1e-10, 0.0, 1e-8, 1.0, 700.0],
    'log1p': [-0.999999, -1e-12, 0.0, 1e-10, 3.0, 1e300],
    'entr': [-1.0, 0.0, 1e-300, 0.2, 1.0, 7.5],
    'sinc': [-2.5, -1e-9, 0.0, 0.3, 1.0, 100.25],
    'psi': [0.1, 3.0],
}
BINARY = {
    'zeta': ([1.5, 2.0, 3.0, 10.0], [0.5, 1.0, 2.0, 10.0]),
    'gammainc': ([0.5, 1.0, 3.0, 20.0, 200.0], [0.01, 0.5, 2.0, 20.0, 250.0]),
    'gammaincc': ([0.5, 1.0, 3.0, 20.0, 200.0], [0.01, 0.5, 2.0, 20.0, 250.0]),
    'xlogy': ([0.0, 0.5, 2.0], [0.0, 1e-300, 3.0]),
    'xlog1py': ([0.0, 0.5, 2.0], [-1.0, 1e-12, 3.0]),
}
for n in ['chebyshev_polynomial_t', 'chebyshev_polynomial_u', 'chebyshev_polynomial_v',
          'chebyshev_polynomial_w', 'legendre_polynomial_p']:
    BINARY[n] = (POLY_X, POLY_N)
for n in ['shifted_chebyshev_polynomial_t', 'shifted_chebyshev_polynomial_u',
          'shifted_chebyshev_polynomial_v', 'shifted_chebyshev_polynomial_w']:
    BINARY[n] = ([0.0, 0.2, 0.5, 0.8, 1.0, 1.3], POLY_N)
for n in ['hermite_polynomial_h', 'hermite_polynomial_he', 'laguerre_polynomial_l']:
    BINARY[n] = (HERM_X, POLY_N)

GRAD_UNARY = ['erfcx', 'erfinv', 'gammaln', 'digamma', 'i0', 'i0e', 'i1', 'i1e', 'ndtri',
              'log_ndtr', 'ndtr', 'logit', 'entr', 'sinc', 'exp2']
GRAD_POINTS = {
    'erfcx': [-3.0, -0.5, 0.0, 0.7, 5.0, 80.0], 'erfinv': [-0.99, -0.2, 0.0, 0.5, 0.999],
    'gammaln': [0.3, 1.0, 4.5, 50.0], 'digamma': [0.3, 1.0, 4.5, 50.0],
    'i0': [-4.0, 0.0, 1.5, 9.0], 'i0e': [-4.0, -0.5, 0.5, 9.0, 40.0],
    'i1': [-4.0, 0.0, 1.5, 9.0], 'i1e': [-4.0, -0.5, 0.0, 0.5, 9.0, 40.0],
    'ndtri': [1e-10, 0.1, 0.5, 0.95], 'log_ndtr': [-30.0, -2.0, 0.0, 3.0],
    'ndtr': [-6.0, -1.0, 0.0, 2.0], 'logit': [0.05, 0.5, 0.9], 'entr': [0.1, 1.0, 3.0],
    'sinc': [-1.5, 0.25, 2.75], 'exp2': [-3.0, 0.0, 2.5],
}

def main():
    out = {'torch': torch.__version__, 'unary': {}, 'binary': {}, 'polygamma': {},
           'grad': {}, 'grad_binary': {}, 'other': {}}
    for name, xs in UNARY.items():
        f = getattr(S, name, None)
        if f is None:
            print('skipped (not in torch %s): %s' % (torch.__version__, name), file=sys.stderr)
            continue
        out['unary'][name] = {'x': xs, 'y': values(f(torch.tensor(xs)))}
    for name, (xs, ys) in BINARY.items():
        f = getattr(S, name, None)
        if f is None:
            print('skipped (not in torch %s): %s' % (torch.__version__, name), file=sys.stderr)
            continue
        a = torch.tensor(xs).reshape(-1, 1)
        b = torch.tensor(ys).reshape(1, -1)
        out['binary'][name] = {'x': xs, 'y': ys, 'z': values(f(a, b))}
    px = [0.1, 1.0, 2.5, 10.0, 100.0]
    for n in [1, 2, 3, 5]:
        out['polygamma'][str(n)] = {'x': px, 'y': values(S.polygamma(n, torch.tensor(px)))}
    for name in GRAD_UNARY:
        xs = GRAD_POINTS[name]
        x = torch.tensor(xs, requires_grad=True)
        getattr(S, name)(x).sum().backward()
        out['grad'][name] = {'x': xs, 'g': values(x.grad)}
    for n in [1, 2]:
        x = torch.tensor(px, requires_grad=True)
        S.polygamma(n, x).sum().backward()
        out['grad']['polygamma%d' % n] = {'x': px, 'g': values(x.grad)}
    for name, (a, x) in {'zeta': ([2.0, 3.5], [0.5, 4.0]), 'gammainc': ([0.5, 3.0], [0.7, 2.0]),
                         'gammaincc': ([0.5, 3.0], [0.7, 2.0])}.items():
        xt = torch.tensor(x, requires_grad=True)
        getattr(S, name)(torch.tensor(a), xt).sum().backward()
        out['grad_binary'][name] = {'a': a, 'x': x, 'g': values(xt.grad)}
    v = torch.tensor([[1.0, -2.0, 3.5, 700.0], [0.0, -1e3, 2.0, 1.0]])
    out['other']['input'] = v.tolist()
    out['other']['softmax'] = values(S.softmax(v, 1))
    out['other']['log_softmax'] = values(S.log_softmax(v, 1))
    out['other']['logsumexp'] = values(S.logsumexp(v, 1))
    mx = torch.tensor([1.5, 2.0, 10.0, 100.0])
    out['other']['multigammaln_x'] = mx.tolist()
    out['other']['multigammaln3'] = values(S.multigammaln(mx, 3))
    rx = torch.tensor([0.125, 2.675, -1.005, 12.5, 13.5])
    out['other']['round_x'] = rx.tolist()
    out['other']['round0'] = values(S.round(rx))
    out['other']['round2'] = values(S.round(rx, decimals=2))
    with open('spec/fixtures/special_reference.json', 'w') as f:
        json.dump(out, f, indent=0, sort_keys=True)
        f.write('\n')
    print('wrote spec/fixtures/special_reference.json (torch %s)' % torch.__version__)

if __name__ == '__main__':
    main()

#!/usr/bin/env python3
"""Writes spec/fixtures/distributions_reference.json: torch.distributions
values in float64 for the distributions and transforms that
spec/numerics/distributions_more_spec.lua checks (GeneralizedPareto needs
PyTorch 2.x, so the reference is committed rather than computed at test
time).

    /path/to/python-with-torch-2.x tools/distributions_reference.py

Each case is (name, constructor, {method: argument}); the spec builds the same
distributions in Lua from the JSON's parameters. Run from the repository root.
"""
import json
import math

import torch
import torch.distributions as D
import torch.distributions.transforms as Tr

torch.set_default_dtype(torch.float64)
def T(v):
    return torch.tensor(v, dtype=torch.float64)


def fin(v):
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return repr(v)
    return v


def values(t):
    return [fin(float(v)) for v in t.reshape(-1).tolist()]


# name -> (params (lists), value for log_prob/cdf, p for icdf, properties)
CASES = [
    ('ContinuousBernoulli', [[0.2, 0.5, 0.9, 0.4995]], [0.3, 0.6, 0.9, 0.2],
     ['log_prob', 'mean', 'variance', 'entropy', 'cdf', 'icdf']),
    ('Kumaraswamy', [[0.5, 2, 5], [3, 2, 0.7]], [0.3, 0.5, 0.9],
     ['log_prob', 'mean', 'variance', 'entropy', 'cdf', 'icdf']),
    ('FisherSnedecor', [[3, 5, 10], [5, 7, 12]], [0.3, 1.2, 2.5], ['log_prob', 'mean', 'variance']),
    ('NegativeBinomial', [[3, 5, 10], [0.3, 0.5, 0.8]], [0, 3, 7], ['log_prob', 'mean', 'variance']),
    ('GeneralizedPareto', [[0, 1, -1], [1, 2, 0.5], [0.2, 0, -0.3]], [0.3, 1.2, -0.5],
     ['log_prob', 'mean', 'variance', 'entropy', 'cdf', 'icdf']),
    ('VonMises', [[0.5, -1, 0], [2, 0.3, 30]], [0.3, 2, -3], ['log_prob', 'mean', 'variance']),
    ('LogisticNormal', [[0.1, -0.5], [1, 2]], [0.2, 0.3, 0.5], ['log_prob']),
]
P = [0.1, 0.5, 0.9, 0.3]
KL = [('ContinuousBernoulli', [[0.2, 0.7]], [[0.5, 0.1]]),
      ('Beta', [[0.5, 3], [2, 1]], 'ContinuousBernoulli', [[0.3, 0.8]]),
      ('Uniform', [[0.1, 0.0], [0.6, 0.5]], 'ContinuousBernoulli', [[0.3, 0.8]]),
      ('ContinuousBernoulli', [[0.2, 0.7]], 'Exponential', [[0.5, 2]]),
      ('ContinuousBernoulli', [[0.2, 0.7]], 'Normal', [[0.5, -1], [1, 2]]),
      ('ContinuousBernoulli', [[0.2, 0.7]], 'Uniform', [[-0.5, 0.2], [1.5, 2]]),
      ('Normal', [[0, 1], [1, 2]], 'ContinuousBernoulli', [[0.3, 0.8]])]

out = {'cases': [], 'kl': [], 'transforms': []}
for name, params, value, props in CASES:
    d = getattr(D, name)(*[T(p) for p in params])
    row = {'name': name, 'params': params, 'value': value, 'p': P[:len(value)]}
    for prop in props:
        if prop in ('log_prob', 'cdf'):
            row[prop] = values(getattr(d, prop)(T(value)))
        elif prop == 'icdf':
            row[prop] = values(d.icdf(T(P[:len(value)])))
        elif prop == 'entropy':
            row[prop] = values(d.entropy())
        else:
            row[prop] = values(getattr(d, prop))
    out['cases'].append(row)
for k in KL:
    pn, p, qn, q = (k[0], k[1], k[0], k[2]) if len(k) == 3 else k
    dp = getattr(D, pn)(*[T(v) for v in p])
    dq = getattr(D, qn)(*[T(v) for v in q])
    out['kl'].append({'p_name': pn, 'p': p, 'q_name': qn, 'q': q, 'kl': values(D.kl_divergence(dp, dq))})

X = [[0.1, -0.4, 2.0], [-1.5, 0.3, 0.7]]
TRANSFORMS = [
    ('SoftplusTransform', lambda: Tr.SoftplusTransform()),
    ('StickBreakingTransform', lambda: Tr.StickBreakingTransform()),
    ('CatTransform', lambda: Tr.CatTransform([Tr.ExpTransform(), Tr.SoftplusTransform()], 1, [1, 2])),
    ('StackTransform', lambda: Tr.StackTransform([Tr.ExpTransform(), Tr.SoftplusTransform(),
                                                  Tr.SigmoidTransform()], 1)),
    ('IndependentTransform', lambda: Tr.IndependentTransform(Tr.ExpTransform(), 1)),
    ('CumulativeDistributionTransform', lambda: Tr.CumulativeDistributionTransform(D.Normal(T(0.5), T(2.0)))),
    ('ReshapeTransform', lambda: Tr.ReshapeTransform((3,), (3, 1))),
]
for name, make in TRANSFORMS:
    t = make()
    x = T(X)
    y = t(x)
    out['transforms'].append({'name': name, 'x': X, 'y': values(y), 'inv': values(t.inv(y)),
                              'ladj': values(t.log_abs_det_jacobian(x, y))})
M = [[0.3, 1.0, 0.0], [0.5, -0.2, 0.0], [1.0, 2.0, 0.1]]
out['lower_cholesky'] = {'x': M, 'y': values(Tr.LowerCholeskyTransform()(T(M))),
                         'pd': values(Tr.PositiveDefiniteTransform()(T(M)))}

with open('spec/fixtures/distributions_reference.json', 'w') as f:
    json.dump(out, f, indent=1)
    f.write('\n')
print('wrote spec/fixtures/distributions_reference.json with torch', torch.__version__)

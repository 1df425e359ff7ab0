#!/usr/bin/env python3
"""Writes spec/fixtures/torch_names.txt: the public names of PyTorch's
extended ring (torch.fft, torch.special, torch.linalg, torch.distributions),
one "ring name" a line, for tools/name_coverage.lua. Run from the repository
root with a PyTorch 2.x python (`/path/to/python3 tools/torch_names.py`)."""
import inspect
import torch
import torch.distributions as D

SKIP = {'Tensor', 'torch', 'sys', 'common_notes', 'LinAlgError', 'Callable', 'Optional',
        'Union', 'List', 'Tuple', 'Number', 'math', 'warnings'}

def public(mod):
    names = getattr(mod, '__all__', None) or [n for n in dir(mod) if not n.startswith('_')]
    out = []
    for n in names:
        if n in SKIP or n.startswith('_'):
            continue
        v = getattr(mod, n, None)
        if v is None or (inspect.ismodule(v) and mod is not D):
            continue
        out.append(n)
    return sorted(set(out))

rings = {'fft': torch.fft, 'special': torch.special, 'linalg': torch.linalg, 'distributions': D}
with open('spec/fixtures/torch_names.txt', 'w') as f:
    f.write('# torch %s public names, from tools/torch_names.py\n' % torch.__version__)
    for ring, mod in rings.items():
        for n in public(mod):
            f.write('%s %s\n' % (ring, n))
print('wrote spec/fixtures/torch_names.txt')

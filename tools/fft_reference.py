#!/usr/bin/env python3
"""Writes spec/fixtures/fft_reference.json: torch.fft transforms (values and
gradients, float64 / complex128) for spec/numerics/fft_transforms_spec.lua.

    /usr/bin/python3 tools/fft_reference.py      # Debian's python3-torch (1.13)

Every 1-D transform for each norm mode at even, odd, prime (Bluestein) and
composite sizes, with n trimming and padding; the 2-D and n-D transforms
with s and dim. Each case stores the input, the output as (re, im) pairs
(view_as_real) and the gradient of sum(view_as_real(out) * w) for a fixed
weight w (torch's convention: dL/dre + i dL/dim for complex inputs).
Dims are written 1-based, as flow takes them. Run from the repository root.
"""
import json

import torch

torch.manual_seed(23)
F = torch.fft


def flat(t):
    return [float("%.12g" % v) for v in t.reshape(-1).tolist()]   # 12 digits: a small file


def realview(t):
    return torch.view_as_real(t.resolve_conj()) if t.is_complex() else t


def case(op, x, kw, multi=False):
    x = x.clone().requires_grad_(True)
    y = getattr(F, op)(x, **kw)
    yr = realview(y)
    w = torch.randn(yr.shape, dtype=torch.float64)
    (yr * w).sum().backward()
    g = realview(x.grad)
    c = {"op": op, "complex": x.is_complex(), "shape": list(x.shape),
         "x": flat(realview(x.detach())), "out_shape": list(yr.shape), "out": flat(yr),
         "w": flat(w), "grad": flat(g)}
    for k, v in kw.items():
        if k == "dim":
            v = [d + 1 if d >= 0 else d for d in v] if isinstance(v, (list, tuple)) else (
                v + 1 if v >= 0 else v)
        c[k] = list(v) if isinstance(v, tuple) else v
    return c


def rin(*shape):
    return torch.randn(*shape, dtype=torch.float64)


def cin(*shape):
    return torch.randn(*shape, dtype=torch.complex128)


cases = []
NORMS = [None, "backward", "ortho", "forward"]
for n in [1, 2, 5, 8, 12, 17, 21, 30, 49]:
    for norm in NORMS:
        kw = {} if norm is None else {"norm": norm}
        cases.append(case("fft", cin(n), kw))
        cases.append(case("ifft", cin(n), kw))
        cases.append(case("rfft", rin(n), kw))
        cases.append(case("ihfft", rin(n), kw))
        m = n // 2 + 1
        if n > 1:
            cases.append(case("irfft", cin(m), dict(kw, n=n)))
            cases.append(case("hfft", cin(m), dict(kw, n=n)))
# n trimming and padding, dims, real input to fft
cases.append(case("fft", cin(10), {"n": 6}))
cases.append(case("fft", cin(10), {"n": 13}))
cases.append(case("fft", rin(9), {}))
cases.append(case("ifft", cin(4, 6), {"dim": 0, "n": 7}))
cases.append(case("rfft", rin(3, 11), {"n": 8}))
cases.append(case("rfft", rin(6, 4), {"dim": 0, "norm": "ortho"}))
cases.append(case("irfft", cin(3, 6), {}))
cases.append(case("irfft", cin(3, 6), {"n": 7, "norm": "forward"}))
cases.append(case("hfft", cin(5, 4), {"dim": 0}))
cases.append(case("ihfft", rin(2, 9), {"n": 12}))
# 2-D and n-D
for norm in NORMS:
    kw = {} if norm is None else {"norm": norm}
    cases.append(case("fft2", cin(3, 4, 5), kw))
    cases.append(case("ifft2", cin(3, 4, 5), kw))
    cases.append(case("rfft2", rin(3, 4, 6), kw))
    cases.append(case("irfft2", cin(3, 4, 4), kw))
    cases.append(case("fftn", cin(3, 4, 5), kw))
    cases.append(case("ifftn", cin(2, 3, 7), kw))
    cases.append(case("rfftn", rin(3, 5, 4), kw))
    cases.append(case("irfftn", cin(3, 4, 3), kw))
cases.append(case("fft2", cin(3, 4, 5), {"s": (5, 3)}))
cases.append(case("fft2", cin(3, 4, 5), {"dim": (0, 2)}))
cases.append(case("fftn", cin(3, 4, 5), {"s": (2, 6), "dim": (2, 0)}))
cases.append(case("fftn", cin(3, 4, 5), {"s": (6, 3)}))
cases.append(case("rfftn", rin(3, 4, 5), {"dim": (0, 1)}))
cases.append(case("rfft2", rin(4, 9), {"s": (3, 10)}))
cases.append(case("irfftn", cin(3, 4, 5), {"s": (5, 9)}))
cases.append(case("irfft2", cin(4, 5), {"s": (4, 7), "norm": "ortho"}))
cases.append(case("ifftn", cin(6, 5), {"dim": (1,)}))

with open("spec/fixtures/fft_reference.json", "w") as f:
    json.dump({"torch": torch.__version__, "cases": cases}, f, separators=(",", ":"))
print(len(cases), "cases")

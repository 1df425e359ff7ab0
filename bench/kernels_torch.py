"""kernels_torch.py -- the PyTorch side of bench/kernels.lua: times the same
cases on the same shapes and prints one line per case, `name seconds`
(the best time of one call), then `version V`.
  python3 bench/kernels_torch.py THREADS REPEATS CASE...
"""
import os
import sys
import time

import torch
import torch.nn.functional as F

threads, repeats, cases = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
# METRIC=cpu: the calling thread's CPU time (as bench/kernels.lua)
clock = time.thread_time if os.environ.get('METRIC') == 'cpu' else time.perf_counter
torch.set_num_threads(threads)
torch.manual_seed(0)

R, M = int(os.environ.get('ROWS', '4096')), 1024   # rows x row length of the row-kernel cases
N_EW = 16 * 1024 * 1024     # floats of the elementwise cases


def rows(dt):
    return (torch.randn(R, M) * 2 + 0.5).to(dt)


def make(name):
    """name -> (setup-free closure to time, iterations per timing)"""
    op, dts = name.rsplit('_', 1)
    dt = {'f32': torch.float32, 'bf16': torch.bfloat16}[dts]
    x = rows(dt)
    w, b = torch.randn(M, dtype=dt), torch.randn(M, dtype=dt)
    g = torch.randn(R, M).to(dt)
    # batch_norm: the rows as [R / 64, 64, 32, 32] (as bench/kernels.lua)
    C4 = 64
    w4, b4 = torch.randn(C4).to(dt), torch.randn(C4).to(dt)
    rm, rv = torch.zeros(C4, dtype=dt), torch.ones(C4, dtype=dt)
    if op == 'layer_norm':
        return lambda: F.layer_norm(x, (M,), w, b, 1e-5)
    if op == 'batch_norm_eval':
        x4 = x.view(R // C4, C4, 32, 32)
        return lambda: F.batch_norm(x4, rm, rv, w4, b4, False, 0.1, 1e-5)
    if op == 'batch_norm_train':
        x4 = x.view(R // C4, C4, 32, 32)
        return lambda: F.batch_norm(x4, rm, rv, w4, b4, True, 0.1, 1e-5)
    if op in ('bias_gelu', 'bias_gelu_graph'):
        return lambda: F.gelu(x + b)
    if op == 'softmax':
        return lambda: torch.softmax(x, -1)
    if op == 'log_softmax':
        return lambda: torch.log_softmax(x, -1)
    if op == 'cross_entropy':
        t = torch.randint(0, M, (R,))
        return lambda: F.cross_entropy(x, t)
    rms = (lambda a, v: F.rms_norm(a, (M,), v, 1e-6)) if hasattr(F, 'rms_norm') else \
        (lambda a, v: a * torch.rsqrt(a.pow(2).mean(-1, keepdim=True) + 1e-6) * v)
    if op in ('layer_norm_bwd', 'rms_norm_bwd', 'softmax_bwd', 'log_softmax_bwd', 'cross_entropy_bwd',
              'gelu_bwd', 'silu_bwd', 'batch_norm_bwd'):
        xg = x.clone().requires_grad_()
        wg, bg = w.clone().requires_grad_(), b.clone().requires_grad_()
        x4g = xg.view(R // C4, C4, 32, 32)
        w4g, b4g = w4.clone().requires_grad_(), b4.clone().requires_grad_()
        fwd = {'layer_norm_bwd': lambda: F.layer_norm(xg, (M,), wg, bg, 1e-5),
               'batch_norm_bwd': lambda: F.batch_norm(x4g, rm, rv, w4g, b4g, True, 0.1, 1e-5).view(R, M),
               'rms_norm_bwd': lambda: rms(xg, wg),
               'softmax_bwd': lambda: torch.softmax(xg, -1),
               'log_softmax_bwd': lambda: torch.log_softmax(xg, -1),
               'gelu_bwd': lambda: F.gelu(xg),
               'silu_bwd': lambda: F.silu(xg),
               'cross_entropy_bwd': lambda: F.cross_entropy(xg, torch.randint(0, M, (R,)))}[op]
        scalar = op == 'cross_entropy_bwd'

        def step():
            xg.grad = wg.grad = bg.grad = w4g.grad = b4g.grad = None
            if scalar:
                fwd().backward()
            else:
                fwd().backward(g)
        return step
    if op in ('exp', 'tanh', 'sigmoid', 'erf', 'relu'):
        return lambda f=getattr(torch, op): f(x)
    if op == 'log':
        xp = x.abs() + 0.1
        return lambda: torch.log(xp)
    if op == 'logsumexp':
        return lambda: x.logsumexp(-1)
    if op == 'gelu':
        return lambda: F.gelu(x)
    if op == 'silu':
        return lambda: F.silu(x)
    if op == 'rms_norm':
        # PyTorch 1.13 has no F.rms_norm: its closed form (2.4's is composed the same way)
        return lambda: rms(x, w)
    if op == 'dropout':
        return lambda: F.dropout(x, 0.5, True)
    if op == 'sum_all':
        return lambda: x.sum()
    if op == 'sum_rows':
        return lambda: x.sum(0)
    if op == 'mean_last':
        return lambda: x.mean(-1)
    if op == 'add_out':
        a = torch.full((N_EW,), 1.0, dtype=dt)
        c = torch.full((N_EW,), 2.0, dtype=dt)
        o = torch.zeros(N_EW, dtype=dt)
        return lambda: torch.add(a, c, out=o)
    raise SystemExit('kernels_torch: unknown case ' + name)


for name in cases:
    try:
        fn = make(name)
        for _ in range(3):
            fn()
    except (RuntimeError, NotImplementedError) as e:   # a case this version lacks: no line
        print('kernels_torch: %s: %s' % (name, str(e).splitlines()[0]), file=sys.stderr)
        continue
    best = float('inf')
    for _ in range(repeats):
        t0 = clock()
        fn()
        best = min(best, clock() - t0)
    print(name, '%.9f' % best, flush=True)
print('version', torch.__version__)

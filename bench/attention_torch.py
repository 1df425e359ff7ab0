"""attention_torch.py -- the PyTorch side of bench/attention.lua: times
forward + backward of scaled-dot-product attention on [B, H, L, 64] float32
and prints `time L seconds` (best of REPEATS) per length, or, with MEM=1,
`mem L bytes` for one length: the growth of the process's peak RSS (VmHWM)
over one forward + backward, after the inputs exist.
  python3 bench/attention_torch.py THREADS REPEATS B H L...
METRIC=cpu times by the process's CPU time (all threads), as bench/attention.lua.
PyTorch 2.x runs F.scaled_dot_product_attention (its CPU flash kernel);
1.13 has no public one and runs the reference math (softmax(q k^T / 8) v).
"""
import os
import sys
import time

import torch
import torch.nn.functional as F

threads, repeats, B, H = (int(a) for a in sys.argv[1:5])
lengths = [int(a) for a in sys.argv[5:]]
torch.set_num_threads(threads)
torch.manual_seed(0)
E = 64
sdpa = getattr(F, 'scaled_dot_product_attention', None)
clock = time.process_time if os.environ.get('METRIC') == 'cpu' else time.perf_counter


def attend(q, k, v):
    if sdpa is not None:
        return sdpa(q, k, v)
    return torch.softmax(q @ k.transpose(-2, -1) / 8, -1) @ v


def hwm():
    with open('/proc/self/status') as f:
        for line in f:
            if line.startswith('VmHWM:'):
                return int(line.split()[1]) * 1024
    return 0


for L in lengths:
    q, k, v = (torch.randn(B, H, L, E).requires_grad_() for _ in range(3))
    g = torch.randn(B, H, L, E)

    def step():
        q.grad = k.grad = v.grad = None
        attend(q, k, v).backward(g)

    if os.environ.get('MEM') == '1':
        base = hwm()
        step()
        print('mem', L, hwm() - base)
        continue
    step()
    best = float('inf')
    for _ in range(repeats):
        t0 = clock()
        step()
        best = min(best, clock() - t0)
    print('time', L, best)
print('version', torch.__version__)

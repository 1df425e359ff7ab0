"""torch side of bench/fft.lua: one round of torch.fft timings, CPU seconds
(time.process_time) per call, as 'name seconds' lines.
    python bench/fft_torch.py THREADS REPS"""
import sys
import time

import torch

threads, reps = int(sys.argv[1]), int(sys.argv[2])
torch.set_num_threads(threads)
torch.manual_seed(0)
x1 = torch.randn(1 << 20)
x2 = torch.randn(1024, 1024)
c1 = torch.randn(1 << 20, dtype=torch.complex64)
c2 = torch.randn(1024, 1024, dtype=torch.complex64)
cases = [("fft 2^20 c64", lambda: torch.fft.fft(c1)),
         ("rfft 2^20 f32", lambda: torch.fft.rfft(x1)),
         ("fft2 1024x1024 c64", lambda: torch.fft.fft2(c2)),
         ("rfft2 1024x1024 f32", lambda: torch.fft.rfft2(x2))]
for name, f in cases:
    f()
    t0 = time.process_time()
    for _ in range(reps):
        f()
    print(name, (time.process_time() - t0) / reps)
print("version", torch.__version__)

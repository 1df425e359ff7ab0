# r50_bf16_torch.py -- PyTorch's side of bench/r50_bf16.lua: torchvision's
# ResNet-50 (eval, no_grad) at batch 1, 224x224, in float32 and under
# torch.autocast('cpu', dtype=torch.bfloat16).
#   python3 bench/r50_bf16_torch.py THREADS CALLS  -> "version V", "float32 MS", "autocast MS" (medians)
import sys
import time

import torch
import torchvision

threads, calls = int(sys.argv[1]), int(sys.argv[2])
torch.set_num_threads(threads)
torch.manual_seed(0)
model = torchvision.models.resnet50().eval()
x = torch.randn(1, 3, 224, 224)


def median_ms(fn):
    for _ in range(3):
        fn()
    t = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        t.append(time.perf_counter() - t0)
    t.sort()
    return t[len(t) // 2] * 1e3


def autocast():
    with torch.autocast('cpu', dtype=torch.bfloat16):
        model(x)


with torch.no_grad():
    f32 = median_ms(lambda: model(x))
    bf = median_ms(autocast)
print('version', torch.__version__)
print('float32 %.3f' % f32)
print('autocast %.3f' % bf)

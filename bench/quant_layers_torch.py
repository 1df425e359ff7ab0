# bench/quant_layers_torch.py -- PyTorch's side of bench/quant_layers.lua:
# the same int8 convolutions (quantized Conv2d + ReLU fused, channels-last
# quint8 inputs in [0, 127], per-channel qint8 weights), median of 5 x 20
# calls each; prints "engine NAME" then "i ms" per layer.
#   python3 bench/quant_layers_torch.py batch threads
import sys
import time
import warnings

import torch

warnings.filterwarnings('ignore')
N, threads = int(sys.argv[1]), int(sys.argv[2])
torch.set_num_threads(threads)
engines = torch.backends.quantized.supported_engines
engine = next(e for e in ('x86', 'fbgemm', 'onednn', 'qnnpack') if e in engines)
torch.backends.quantized.engine = engine
print('engine', engine)
try:
    import torch.ao.nn.intrinsic.quantized as nniq
except ImportError:
    import torch.nn.intrinsic.quantized as nniq
shapes = [(1, 64, 28, 3, 1, 1), (64, 64, 28, 3, 1, 1), (64, 128, 28, 3, 2, 1), (64, 128, 28, 1, 2, 0),
          (128, 128, 14, 3, 1, 1), (256, 256, 7, 3, 1, 1), (512, 512, 4, 3, 1, 1)]
with torch.no_grad():
    for i, (ci, co, hw, k, st, pd) in enumerate(shapes, 1):
        m = nniq.ConvReLU2d(ci, co, k, stride=st, padding=pd)
        w = torch.quantize_per_channel(torch.randint(-127, 128, (co, ci, k, k)).float() * 0.001,
                                       torch.full((co,), 0.001, dtype=torch.double),
                                       torch.zeros(co, dtype=torch.long), 0, torch.qint8)
        m.set_weight_bias(w, torch.randn(co))
        m.scale, m.zero_point = 0.5, 3
        x = torch.quantize_per_tensor(torch.randint(0, 128, (N, ci, hw, hw)).float() * 0.03 - 1.8, 0.03, 60,
                                      torch.quint8).contiguous(memory_format=torch.channels_last)
        for _ in range(3):
            m(x)
        ts = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(20):
                m(x)
            ts.append((time.perf_counter() - t0) / 20 * 1e3)
        ts.sort()
        print(i, '%.4f' % ts[2])

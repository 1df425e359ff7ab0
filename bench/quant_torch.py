"""PyTorch's side of the "Model optimisation" figures (doc/benchmarks.md):
the same Fashion-MNIST LeNet or ResNet-18 (weights exported by
examples/quantization/ptq.lua [--model resnet18] --export DIR: the file
DIR/lenet_fp32.pt or DIR/resnet18_fp32.pt says which; the ResNet is
torchvision.models.quantization.resnet18 with the same CIFAR-style stem),
fp32 vs int8 through
torch.ao.quantization (fuse, HistogramObserver/per-channel qconfig of the
engine, calibration on the same batches, convert): accuracy, size of the
saved state dict and median forward time at a batch size.

    python3 bench/quant_torch.py DIR [batch] [iters] [threads]

METRIC=cpu: the calling thread's CPU time (as ptq.lua; meaningful at 1
thread on a loaded machine).
"""
import copy
import io
import os
import sys
import time

import torch
import torch.nn as nn
import torch.ao.quantization as tq


class QLeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.quant = tq.QuantStub()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.relu1 = nn.ReLU()
        self.pool1 = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.relu2 = nn.ReLU()
        self.pool2 = nn.MaxPool2d(2)
        self.fc1 = nn.Linear(64 * 7 * 7, 128)
        self.relu3 = nn.ReLU()
        self.fc2 = nn.Linear(128, 10)
        self.dequant = tq.DeQuantStub()

    def forward(self, x):
        x = self.pool1(self.relu1(self.conv1(self.quant(x))))
        x = self.pool2(self.relu2(self.conv2(x)))
        x = self.relu3(self.fc1(x.flatten(1)))
        return self.dequant(self.fc2(x))


def resnet18():
    import torchvision.models.quantization as qv
    m = qv.resnet18(num_classes=10)
    m.conv1 = nn.Conv2d(1, 64, 3, 1, 1, bias=False)
    m.maxpool = nn.Identity()
    return m


def accuracy(m, x, y):
    with torch.no_grad():
        return sum((m(x[i:i + 256]).argmax(1) == y[i:i + 256]).sum().item()
                   for i in range(0, len(x), 256)) / len(x)


def size(m):
    b = io.BytesIO()
    torch.save(m.state_dict(), b)
    return len(b.getvalue())


def main():
    d = sys.argv[1]
    batch = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    iters = int(sys.argv[3]) if len(sys.argv) > 3 else 50
    torch.set_num_threads(int(sys.argv[4]) if len(sys.argv) > 4 else 2)
    engines = torch.backends.quantized.supported_engines
    engine = next(e for e in ('x86', 'fbgemm', 'onednn', 'qnnpack') if e in engines)
    torch.backends.quantized.engine = engine
    is_resnet = os.path.exists(d + '/resnet18_fp32.pt')
    m = resnet18() if is_resnet else QLeNet()
    m.load_state_dict(torch.load(d + ('/resnet18_fp32.pt' if is_resnet else '/lenet_fp32.pt')), strict=False)
    m.eval()
    data = torch.load(d + '/data.pt')
    if is_resnet:
        f = copy.deepcopy(m)
        f.fuse_model()
    else:
        f = tq.fuse_modules(m, [['conv1', 'relu1'], ['conv2', 'relu2'], ['fc1', 'relu3']])
    f.qconfig = tq.get_default_qconfig(engine)
    p = tq.prepare(f)
    t = time.perf_counter()
    with torch.no_grad():
        cal = data['calib']
        for i in range(0, len(cal), 64):
            p(cal[i:i + 64])
    q = tq.convert(p)
    t_ptq = time.perf_counter() - t
    x = data['test_x'][:batch]
    clock = time.thread_time if os.environ.get('METRIC') == 'cpu' else time.perf_counter
    times = {'fp32': [], 'int8': []}
    with torch.no_grad():
        for mm in (m, q):
            for _ in range(3):
                mm(x)
        for _ in range(5):
            for name, mm in (('fp32', m), ('int8', q)):
                t = clock()
                for _ in range(iters):
                    mm(x)
                times[name].append((clock() - t) / iters * 1e3)
    for name, mm in (('fp32', m), ('int8', q)):
        ms = sorted(times[name])[2]
        print('torch %s %s engine=%s accuracy %.2f%% size %.1f KiB batch %d %.3f ms' % (
            torch.__version__, name, engine, 100 * accuracy(mm, data['test_x'], data['test_y']),
            size(mm) / 1024, batch, ms))
    print('torch %s PTQ %.2f s' % (torch.__version__, t_ptq))


if __name__ == '__main__':
    main()

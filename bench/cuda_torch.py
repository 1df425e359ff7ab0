"""bench/cuda_torch.py -- PyTorch's side of bench/cuda.lua: the same workloads
(add, softmax, layer_norm forward and forward+backward, gemm, ResNet-50's
convolutions, ResNet-50 training with AMP and channels-last), timed the same
way (median of CUDA-event timings after 3 warm-up runs), under the same
names, so tools/device_check.sh can put the two side by side.

  python3 bench/cuda_torch.py [--batch N] [--quick] [--json PATH]

Without torch or without a usable GPU it says why, writes
{"available": false, "why": ...} and exits with 0.
"""
import argparse
import json
import os
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--hbm", type=float, default=4800)
    a = ap.parse_args()
    figures = {}
    out = {"available": False, "why": "", "figures": figures}

    def write():
        if a.json:
            tmp = a.json + ".tmp"
            with open(tmp, "w") as f:
                json.dump(out, f)
            os.replace(tmp, a.json)

    try:
        import torch
    except Exception as e:  # no torch here: nothing to compare
        out["why"] = "cannot import torch: %s" % e
        print("bench/cuda_torch.py: " + out["why"])
        write()
        return
    out["torch"] = torch.__version__
    out["torch_cuda"] = torch.version.cuda
    if not torch.cuda.is_available():
        out["why"] = "torch %s: no usable GPU" % torch.__version__
        print("bench/cuda_torch.py: " + out["why"])
        write()
        return
    out["available"] = True
    out["device"] = torch.cuda.get_device_name(0)
    print("torch %s (CUDA %s, cuDNN %s) on %s" % (torch.__version__, torch.version.cuda,
          torch.backends.cudnn.version(), out["device"]))
    torch.backends.cuda.matmul.allow_tf32 = False

    def time_ms(fn, reps=20):
        if a.quick:
            reps = 5 if reps >= 20 else 3
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(reps):
            e0 = torch.cuda.Event(enable_timing=True)
            e1 = torch.cuda.Event(enable_timing=True)
            e0.record()
            fn()
            e1.record()
            e1.synchronize()
            times.append(e0.elapsed_time(e1))
        times.sort()
        return times[reps // 2]

    def row(name, ms, nbytes=None, flops=None):
        f = {"ms": ms}
        if nbytes:
            f["gbs"] = nbytes / (ms * 1e-3) / 1e9
        if flops:
            f["tflops"] = flops / (ms * 1e-3) / 1e12
        figures[name] = f
        print("| %-34s | %9.3f | %9s | %8s |" % (name, ms,
              "%.0f" % f["gbs"] if "gbs" in f else "", "%.1f" % f["tflops"] if "tflops" in f else ""))

    dev = "cuda"
    torch.manual_seed(0)
    n = 64 * 1024 * 1024
    x0, y0 = torch.randn(n, device=dev), torch.randn(n, device=dev)
    row("add fwd (2 x 256 MiB in)", time_ms(lambda: x0 + y0), 3 * 4 * n)
    xr = x0.detach().requires_grad_(True)
    row("add fwd+bwd", time_ms(lambda: (xr + y0).backward(y0)), 6 * 4 * n)
    del x0, y0, xr

    F = torch.nn.functional
    for shape in ((8192, 1024), (4096, 4096), (65536, 128)):
        x = torch.randn(shape, device=dev)
        tag = "[%d, %d]" % shape
        nb = 2 * 4 * x.numel()
        row("softmax fwd " + tag, time_ms(lambda: x.softmax(1)), nb)
        xr = x.detach().requires_grad_(True)
        g = torch.randn(shape, device=dev)
        row("softmax fwd+bwd " + tag, time_ms(lambda: xr.softmax(1).backward(g)), 5 * 4 * x.numel())
        w, b = torch.ones(shape[1], device=dev), torch.zeros(shape[1], device=dev)
        row("layer_norm fwd " + tag, time_ms(lambda: F.layer_norm(x, (shape[1],), w, b)), nb)
        row("layer_norm fwd+bwd " + tag,
            time_ms(lambda: F.layer_norm(xr, (shape[1],), w, b).backward(g)), 5 * 4 * x.numel())

    m = 8192
    for dt, tf32 in (("float32", False), ("float32", True), ("float16", False), ("bfloat16", False)):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        p = torch.randn(m, m, device=dev).to(getattr(torch, dt))
        q = torch.randn(m, m, device=dev).to(getattr(torch, dt))
        row("gemm %d^3 %s%s" % (m, dt, " tf32" if tf32 else ""),
            time_ms(lambda: torch.matmul(p, q), 10), None, 2 * m ** 3)
        del p, q
    torch.backends.cuda.matmul.allow_tf32 = False

    torch.backends.cudnn.benchmark = True
    bt = a.batch
    for c in ((bt, 64, 56, 64, 3, 1, 1), (bt, 256, 56, 64, 1, 1, 0), (bt, 128, 28, 128, 3, 1, 1),
              (bt, 512, 7, 512, 3, 1, 1), (bt, 3, 224, 64, 7, 2, 3)):
        for dt, cl in (("float16", True), ("float32", False)):
            x = torch.randn(c[0], c[1], c[2], c[2], device=dev).to(getattr(torch, dt))
            w = torch.randn(c[3], c[1], c[4], c[4], device=dev).to(getattr(torch, dt))
            if cl:
                x = x.to(memory_format=torch.channels_last)
                w = w.to(memory_format=torch.channels_last)
            ms = time_ms(lambda: F.conv2d(x, w, None, stride=c[5], padding=c[6]), 10)
            name = "conv %dx%d %d->%d @%d s%d %s %s" % (c[4], c[4], c[1], c[3], c[2], c[5],
                                                       "NHWC" if cl else "NCHW", dt)
            figures[name] = {"ms": ms}
            print("| %-42s | %7.3f |" % (name, ms))
            del x, w

    try:
        import torchvision
        net = torchvision.models.resnet50().to(dev).to(memory_format=torch.channels_last)
        opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        x = torch.randn(bt, 3, 224, 224, device=dev).to(memory_format=torch.channels_last)
        y = torch.randint(0, 1000, (bt,), device=dev)
        scaler = torch.amp.GradScaler("cuda")

        def step():
            opt.zero_grad()
            with torch.autocast("cuda"):
                loss = F.cross_entropy(net(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        ms = time_ms(step, 10)
        name = "resnet50 train batch %d channels-last amp" % bt
        figures[name] = {"ms": ms, "img_s": bt / (ms * 1e-3)}
        print("ResNet-50 training, batch %d, channels-last, AMP: %.1f ms/step, %.0f img/s" % (
            bt, ms, bt / (ms * 1e-3)))
    except Exception as e:  # torchvision missing or too old: the rest still counts
        print("ResNet-50 training: not run: %s" % e)
        out["resnet_why"] = str(e)
    write()


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Real models for the ONNX import spec (spec/onnx/import_spec.lua).

    python3 spec/onnx/torch_models.py export OUTDIR name...   (Debian's python3-torch + torchvision;
        bert_base: a python with transformers, e.g. spec/text/setup_sentence_transformers.sh's)
    $ONNX_PYTHON spec/onnx/torch_models.py ort OUTDIR name... (onnx-venv: onnxruntime)

export: builds the torchvision model with torch.manual_seed(0), gives the
BatchNorm layers random affine parameters and running statistics and
zero-initialised Linear layers random weights (so every layer matters in the
comparison), and writes OUTDIR/<name>.onnx (torch.onnx,
opset 17, dynamic batch) and OUTDIR/<name>.in.safetensors ('input', 2x3x224x224).
ort: runs OUTDIR/<name>.onnx with onnxruntime's CPU provider on that input and
writes OUTDIR/<name>.ort.safetensors ('output'), printing the median seconds of 5 runs.
Safetensors is written and read by hand (struct + json): no extra package.
"""
import json
import struct
import sys
import time


def write_st(path, tensors):
    header, blobs, off = {}, [], 0
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    import os
    os.replace(path + ".tmp", path)


def read_st(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        body = f.read()
    out = {}
    for name, v in header.items():
        if name == "__metadata__":
            continue
        a, b = v["data_offsets"]
        out[name] = (v["shape"], body[a:b])
    return out


def onnx_export(*args, **kwargs):
    """torch.onnx.export; on PyTorch 2.x its TorchScript exporter (dynamo=False:
    the torch.export-based default of 2.9+ needs onnxscript), which writes the
    same opset-17 graphs as 1.13."""
    import torch
    if int(torch.__version__.split(".")[0]) >= 2:
        kwargs["dynamo"] = False
    torch.onnx.export(*args, **kwargs)


def export_bert(outdir, name):
    """BERT-base (Hugging Face transformers' BertModel with BertConfig()'s sizes:
    12 layers, hidden 768, 12 heads, vocabulary 30522; random weights, seed 0),
    exported with input_ids and attention_mask (2x128, the second row padded
    after 100 tokens) and dynamic batch and sequence axes."""
    import torch
    import transformers
    torch.manual_seed(0)
    cfg = transformers.BertConfig()
    m = transformers.BertModel(cfg).eval()
    ids = torch.randint(0, cfg.vocab_size, (2, 128))
    mask = torch.ones(2, 128, dtype=torch.int64)
    mask[1, 100:] = 0
    axes = {"batch": 0, "seq": 1}
    onnx_export(m, (ids, mask), f"{outdir}/{name}.onnx", opset_version=17,
                      input_names=["input_ids", "attention_mask"],
                      output_names=["output", "pooler_output"],
                      dynamic_axes={k: {v: n for n, v in axes.items()} for k in ("input_ids", "attention_mask", "output")})
    write_st(f"{outdir}/{name}.in.safetensors", {
        "input_ids": ("I64", ids.shape, ids.numpy().tobytes()),
        "attention_mask": ("I64", mask.shape, mask.numpy().tobytes())})
    print("exported", name, "with torch", torch.__version__)


def export(outdir, names):
    for name in names:
        if name == "bert_base":
            export_bert(outdir, name)
    names = [n for n in names if n != "bert_base"]
    if not names:
        return
    import torch
    import torchvision
    for name in names:
        torch.manual_seed(0)
        m = getattr(torchvision.models, name)()
        # deep residual stacks grow with unit BatchNorm scales: keep ResNet's small
        lo, hi = (0.2, 0.4) if name.startswith("resnet") else (0.5, 1.5)
        with torch.no_grad():
            for mod in m.modules():
                if isinstance(mod, torch.nn.Linear) and not mod.weight.any():
                    mod.weight.normal_(0, mod.in_features ** -0.5)   # ViT's zero-initialised head
                if isinstance(mod, torch.nn.BatchNorm2d):
                    mod.weight.uniform_(lo, hi)
                    mod.bias.uniform_(-0.2, 0.2)
                    mod.running_mean.uniform_(-0.1, 0.1)
                    mod.running_var.uniform_(0.5, 1.5)
        m.eval()
        x = torch.randn(2, 3, 224, 224)
        onnx_export(m, x, f"{outdir}/{name}.onnx", opset_version=17, input_names=["input"],
                          output_names=["output"], dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
        write_st(f"{outdir}/{name}.in.safetensors", {"input": ("F32", x.shape, x.numpy().tobytes())})
        print("exported", name, "with torch", torch.__version__)


def ort(outdir, names):
    import numpy as np
    import onnxruntime
    for name in names:
        opts = onnxruntime.SessionOptions()
        opts.intra_op_num_threads = 2
        sess = onnxruntime.InferenceSession(f"{outdir}/{name}.onnx", opts, providers=["CPUExecutionProvider"])
        st = read_st(f"{outdir}/{name}.in.safetensors")
        feed = {}
        for i in sess.get_inputs():   # float32 images, int64 token ids and masks
            shape, data = st[i.name]
            dt = np.int64 if i.type == "tensor(int64)" else np.float32
            feed[i.name] = np.frombuffer(data, dtype=dt).reshape(shape)
        y = sess.run(["output"], feed)[0]
        times = []
        for _ in range(5):
            t0 = time.time()
            sess.run(["output"], feed)
            times.append(time.time() - t0)
        dt = sorted(times)[2]
        y = np.ascontiguousarray(y, dtype=np.float32)
        write_st(f"{outdir}/{name}.ort.safetensors", {"output": ("F32", y.shape, y.tobytes())})
        print(f"ort {name} {dt:.4f}")


if __name__ == "__main__":
    mode, outdir, names = sys.argv[1], sys.argv[2], sys.argv[3:]
    {"export": export, "ort": ort}[mode](outdir, names)

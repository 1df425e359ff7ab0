#!/usr/bin/env python3
"""Export torchvision reference models for the flowvision.models specs.

    python3 tools/export_torchvision.py OUTDIR name...            weights + I/O
    python3 tools/export_torchvision.py --shapes OUTDIR name...   names/shapes only
    options: --seed S (default 0), --size N (input side; default per model),
             --num-classes K (default 1000)

For each model `name` (a torchvision.models builder: resnet18, mobilenet_v2, ...):

* default mode: builds it with torch.manual_seed(S), randomises the BatchNorm
  affine parameters and ConvNeXt's layer scales, sets the BatchNorm running
  statistics from a few random batches (so activations keep their scale and
  the comparison exercises every layer), switches to eval mode, and writes
    OUTDIR/<name>.safetensors     the state_dict (parameters and buffers)
    OUTDIR/<name>.io.safetensors  'input' (1x3xNxN, seeded randn) and 'output'
* --shapes: builds it without initialising anything (cheap even for
  regnet_y_128gf) and writes OUTDIR/<name>.shapes.json:
    {"parameters": [[name, [shape...]], ...], "buffers": [[name, [shape...], dtype], ...]}

Safetensors is written by hand (the package is not needed): an 8-byte
little-endian header length, the JSON header (padded with spaces to a multiple
of 8), then the raw little-endian tensor data. Nothing is downloaded.
"""
import argparse
import json
import os
import struct
import sys

import torch
import torchvision

# input side per model where 64 is too small for the architecture
DEFAULT_SIZE = {'inception_v3': 96}
DTYPES = {torch.float32: 'F32', torch.float64: 'F64', torch.int64: 'I64', torch.int32: 'I32',
          torch.float16: 'F16', torch.uint8: 'U8', torch.bool: 'BOOL'}


def save_safetensors(tensors, path):
    """tensors: dict name -> tensor, written as one safetensors file."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous().cpu()
        data = t.numpy().tobytes() if t.dtype != torch.bool else t.to(torch.uint8).numpy().tobytes()
        header[name] = {'dtype': DTYPES[t.dtype], 'shape': list(t.shape),
                        'data_offsets': [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(',', ':')).encode('utf-8')
    text += b' ' * ((8 - len(text) % 8) % 8)
    tmp = path + '.tmp'
    with open(tmp, 'wb') as f:
        f.write(struct.pack('<Q', len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def build(name, num_classes):
    kwargs = {'num_classes': num_classes}
    if name in ('googlenet', 'inception_v3'):
        kwargs.update(aux_logits=True, init_weights=True)
    return torchvision.models.__dict__[name](**kwargs)


@torch.no_grad()
def perturb(model, side):
    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for m in bns:
        m.weight.uniform_(0.5, 1.5)
        m.bias.normal_(0, 0.1)
        m.momentum, m.saved_momentum = None, m.momentum   # cumulative average
        m.reset_running_stats()
    for m in model.modules():
        if hasattr(m, 'layer_scale') and isinstance(m.layer_scale, torch.nn.Parameter):
            m.layer_scale.uniform_(0.1, 0.5)
    if bns:
        aux = getattr(model, 'AuxLogits', None)   # needs 299x299 inputs in training mode
        if aux is not None:
            model.AuxLogits = None
        model.train()
        for _ in range(2):
            model(torch.randn(4, 3, side, side))
        if aux is not None:
            model.AuxLogits = aux
    for m in bns:
        m.momentum = m.saved_momentum
        del m.saved_momentum


def export(name, outdir, seed, size, num_classes):
    torch.manual_seed(seed)
    model = build(name, num_classes)
    side = size or DEFAULT_SIZE.get(name, 64)
    perturb(model, side)
    model.eval()
    x = torch.randn(1, 3, side, side)
    with torch.no_grad():
        y = model(x)
    save_safetensors(model.state_dict(), os.path.join(outdir, name + '.safetensors'))
    save_safetensors({'input': x, 'output': y}, os.path.join(outdir, name + '.io.safetensors'))


class NoInit:
    """Within it, parameter initialisers do nothing (shape-only builds)."""
    NAMES = ['uniform_', 'normal_', 'constant_', 'ones_', 'zeros_', 'kaiming_normal_', 'kaiming_uniform_',
             'xavier_uniform_', 'xavier_normal_', 'trunc_normal_']

    def __enter__(self):
        nn = torch.nn
        self.saved = [(nn.init, n, getattr(nn.init, n)) for n in self.NAMES]
        for cls in (nn.modules.conv._ConvNd, nn.Linear, nn.modules.batchnorm._NormBase, nn.LayerNorm):
            self.saved.append((cls, 'reset_parameters', cls.__dict__['reset_parameters']))
        for obj, n, _ in self.saved:
            setattr(obj, n, lambda *a, **k: a[0] if a else None)
        return self

    def __exit__(self, *exc):
        for obj, n, fn in self.saved:
            setattr(obj, n, fn)


def export_shapes(name, outdir, num_classes):
    with NoInit():
        model = build(name, num_classes)
    res = {'parameters': [[n, list(p.shape)] for n, p in model.named_parameters()],
           'buffers': [[n, list(b.shape), DTYPES[b.dtype]] for n, b in model.named_buffers()]}
    with open(os.path.join(outdir, name + '.shapes.json'), 'w') as f:
        json.dump(res, f)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('outdir')
    ap.add_argument('names', nargs='+')
    ap.add_argument('--shapes', action='store_true', help='names and shapes only (no weights)')
    ap.add_argument('--seed', type=int, default=0)
    ap.add_argument('--size', type=int, default=None)
    ap.add_argument('--num-classes', type=int, default=1000)
    a = ap.parse_args(argv)
    os.makedirs(a.outdir, exist_ok=True)
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    for name in a.names:
        if name not in torchvision.models.__dict__:
            sys.exit(f'export_torchvision: unknown torchvision model {name!r}')
        if a.shapes:
            export_shapes(name, a.outdir, a.num_classes)
        else:
            export(name, a.outdir, a.seed, a.size, a.num_classes)


if __name__ == '__main__':
    main(sys.argv[1:])

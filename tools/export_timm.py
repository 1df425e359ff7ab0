#!/usr/bin/env python3
"""Reference exporter for the flowvision model specs (a developer tool, not a
test dependency).

    python3 tools/export_timm.py OUTDIR NAME [NAME ...]
    python3 tools/export_timm.py --list

For each NAME it builds the reference model (timm for the transformer and
MLP models, torchvision for detection/segmentation, the PyTorch example's
TransformerNet for stylenet) at the small configuration listed in CONFIGS,
perturbs every floating parameter and buffer with a fixed seed (so that
zero-initialised heads, LayerScale and gates do not hide mistakes), and
writes, by hand (struct + json; no safetensors package needed):

    OUTDIR/NAME.safetensors     the state dict (PyTorch/timm key names)
    OUTDIR/NAME.io.safetensors  'input' and the eval-mode outputs
                                ('output', or detections: 'boxes.I',
                                'scores.I', 'labels.I' per image I (0-based
                                here, the Lua side adds 1 to labels),
                                or 'out' / 'aux' for segmentation)

The ResNet-based references (Faster R-CNN, RetinaNet, FCN, DeepLabV3; see
DOUBLE) are computed in float64 from float32-stored weights: random deep
ResNet bodies amplify float32 rounding to ~1e-3 relative, which would hide
real mismatches. Their inputs and outputs are stored in float64.

Exit status 3 (with a message naming the missing package) when the
reference library for a NAME cannot be imported, so the specs can mark
their parity checks pending.
"""
import json
import os
import struct
import sys

DTYPES = {'float32': 'F32', 'float64': 'F64', 'int64': 'I64', 'int32': 'I32',
          'uint8': 'U8', 'int8': 'I8', 'bool': 'BOOL', 'float16': 'F16'}


def write_safetensors(path, tensors):
    """tensors: ordered dict name -> torch.Tensor (written contiguous, CPU)."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().cpu().contiguous()
        dt = DTYPES[str(t.dtype).replace('torch.', '')]
        data = t.numpy().tobytes()
        header[name] = {'dtype': dt, 'shape': list(t.shape), 'data_offsets': [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header['__metadata__'] = {'format': 'pt'}
    h = json.dumps(header, separators=(',', ':')).encode('utf-8')
    h += b' ' * ((8 - len(h) % 8) % 8)
    tmp = path + '.tmp'
    with open(tmp, 'wb') as f:
        f.write(struct.pack('<Q', len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def perturb(model, torch, seed=1):
    """Adds fixed-seed noise to every float parameter and buffer."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, t in list(model.named_parameters()) + list(model.named_buffers()):
            if not t.is_floating_point():
                continue
            if name.endswith('running_var'):
                t.copy_(torch.rand(t.shape, generator=g) + 0.5)
            elif name.endswith('running_mean'):
                t.copy_(torch.randn(t.shape, generator=g) * 0.1)
            elif name.endswith('attn_mask') or name.endswith('relative_position_index'):
                continue
            else:
                t.add_(torch.randn(t.shape, generator=g) * 0.02)


def calibrate_frozen_bn(model, x, torch):
    """Sets every FrozenBatchNorm2d's statistics to those of its input on x
    (one pass, in order), so random ResNet bodies without real BatchNorm
    keep activations O(1) and the detection heads see sensible features."""
    hooks = []

    def hook(mod, inp):
        t = inp[0]
        mod.running_mean.copy_(t.mean((0, 2, 3)))
        mod.running_var.copy_(t.var((0, 2, 3), unbiased=False) + 1e-3)

    for m in model.modules():
        if type(m).__name__ == 'FrozenBatchNorm2d':
            hooks.append(m.register_forward_pre_hook(hook))
    if hooks:
        with torch.no_grad():
            model(x)
        for h in hooks:
            h.remove()


def calibrate_convs(model, x, torch):
    """LSUV-style: rescales every Conv2d (in forward order, one pass) so its
    output has unit std; keeps a random VGG without BatchNorm from saturating
    the class softmax (which would make the reference's ranking all ties)."""
    hooks = []

    def hook(mod, inp, out):
        s = float(out.std())
        if s > 0:
            mod.weight.div_(s)
            if mod.bias is not None:
                mod.bias.div_(s)
            return out / s
        return out

    for m in model.modules():
        if isinstance(m, torch.nn.Conv2d):
            hooks.append(m.register_forward_hook(hook))
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()


# name -> (library, builder(lib), input shape)
def timm_model(name, **kw):
    return ('timm', lambda timm: timm.create_model(name, **kw))


CONFIGS = {
    # transformers / MLPs: small images, 10 classes; B-size models with 2 blocks
    'vit_tiny_patch16_224': timm_model('vit_tiny_patch16_224', img_size=32, num_classes=10) + ((2, 3, 32, 32),),
    'vit_small_patch16_224': timm_model('vit_small_patch16_224', img_size=32, num_classes=10, depth=4)
    + ((2, 3, 32, 32),),
    'vit_base_patch16_224': timm_model('vit_base_patch16_224', img_size=32, num_classes=10, depth=2) + ((2, 3, 32, 32),),
    'deit_tiny_patch16_224': timm_model('deit_tiny_patch16_224', img_size=32, num_classes=10) + ((2, 3, 32, 32),),
    'deit_tiny_distilled_patch16_224': timm_model('deit_tiny_distilled_patch16_224', img_size=32, num_classes=10)
    + ((2, 3, 32, 32),),
    'deit_small_distilled_patch16_224': timm_model('deit_small_distilled_patch16_224', img_size=32, num_classes=10,
                                                   depth=2) + ((2, 3, 32, 32),),
    'swin_tiny_patch4_window7_224': timm_model('swin_tiny_patch4_window7_224', img_size=32, num_classes=10)
    + ((2, 3, 32, 32),),
    'pvt_v2_b0': timm_model('pvt_v2_b0', num_classes=10) + ((2, 3, 64, 64),),
    'mixer_s16_224': timm_model('mixer_s16_224', img_size=32, num_classes=10) + ((2, 3, 32, 32),),
    'mixer_b16_224': ('timm', lambda timm: timm.models.mlp_mixer.MlpMixer(
        patch_size=16, num_blocks=2, embed_dim=768, img_size=32, num_classes=10), (2, 3, 32, 32)),
    'resmlp_12_224': timm_model('resmlp_12_224', img_size=32, num_classes=10) + ((2, 3, 32, 32),),
    'gmlp_s16_224': timm_model('gmlp_s16_224', img_size=32, num_classes=10) + ((2, 3, 32, 32),),
}


def tv_builder(fn):
    return lambda tv: fn(tv)


def add_torchvision_configs():
    """Detection / segmentation references (small images, few classes)."""
    def faster(tv):
        from torchvision.models.detection.faster_rcnn import FasterRCNN
        from torchvision.models.detection.backbone_utils import _resnet_fpn_extractor
        from torchvision.ops.misc import FrozenBatchNorm2d
        body = tv.models.resnet50(norm_layer=FrozenBatchNorm2d)
        return FasterRCNN(_resnet_fpn_extractor(body, 3), num_classes=5, min_size=96, max_size=128,
                          box_score_thresh=0.0, rpn_pre_nms_top_n_test=200, rpn_post_nms_top_n_test=50,
                          box_detections_per_img=20)

    def retina(tv):
        from torchvision.models.detection.retinanet import RetinaNet
        from torchvision.models.detection.backbone_utils import _resnet_fpn_extractor
        from torchvision.ops.feature_pyramid_network import LastLevelP6P7
        from torchvision.ops.misc import FrozenBatchNorm2d
        body = tv.models.resnet50(norm_layer=FrozenBatchNorm2d)
        backbone = _resnet_fpn_extractor(body, 3, returned_layers=[2, 3, 4], extra_blocks=LastLevelP6P7(256, 256))
        return RetinaNet(backbone, num_classes=5, min_size=96, max_size=128, score_thresh=0.0,
                         topk_candidates=100, detections_per_img=20)

    def ssd(tv):
        return tv.models.detection.ssd300_vgg16(weights=None, weights_backbone=None, num_classes=5,
                                                score_thresh=0.0, topk_candidates=50, detections_per_img=20)

    def ssdlite(tv):
        return tv.models.detection.ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None,
                                                                 num_classes=5, score_thresh=0.0,
                                                                 topk_candidates=50, detections_per_img=20)

    def fcn(tv):
        return tv.models.segmentation.fcn_resnet50(weights=None, weights_backbone=None, num_classes=5,
                                                   aux_loss=True)

    def deeplab(tv):
        return tv.models.segmentation.deeplabv3_resnet50(weights=None, weights_backbone=None, num_classes=5,
                                                         aux_loss=True)

    CONFIGS.update({
        'fasterrcnn_resnet50_fpn': ('torchvision', faster, (1, 3, 80, 96)),
        'retinanet_resnet50_fpn': ('torchvision', retina, (1, 3, 80, 96)),
        'ssd300_vgg16': ('torchvision', ssd, (1, 3, 300, 300)),
        'ssdlite320_mobilenet_v3_large': ('torchvision', ssdlite, (1, 3, 320, 320)),
        'fcn_resnet50': ('torchvision', fcn, (1, 3, 48, 48)),
        'deeplabv3_resnet50': ('torchvision', deeplab, (1, 3, 48, 48)),
        'stylenet': ('torch', stylenet, (1, 3, 32, 32)),
    })


def stylenet(_):
    """pytorch/examples fast_neural_style TransformerNet (flowvision's stylenet)."""
    import torch
    nn = torch.nn

    class ConvLayer(nn.Module):
        def __init__(self, i, o, k, s):
            super().__init__()
            self.reflection_pad = nn.ReflectionPad2d(k // 2)
            self.conv2d = nn.Conv2d(i, o, k, s)

        def forward(self, x):
            return self.conv2d(self.reflection_pad(x))

    class ResidualBlock(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.conv1 = ConvLayer(c, c, 3, 1)
            self.in1 = nn.InstanceNorm2d(c, affine=True)
            self.conv2 = ConvLayer(c, c, 3, 1)
            self.in2 = nn.InstanceNorm2d(c, affine=True)
            self.relu = nn.ReLU()

        def forward(self, x):
            out = self.relu(self.in1(self.conv1(x)))
            return self.in2(self.conv2(out)) + x

    class UpsampleConvLayer(nn.Module):
        def __init__(self, i, o, k, s, upsample=None):
            super().__init__()
            self.upsample = upsample
            self.reflection_pad = nn.ReflectionPad2d(k // 2)
            self.conv2d = nn.Conv2d(i, o, k, s)

        def forward(self, x):
            if self.upsample:
                x = nn.functional.interpolate(x, mode='nearest', scale_factor=self.upsample)
            return self.conv2d(self.reflection_pad(x))

    class TransformerNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = ConvLayer(3, 32, 9, 1)
            self.in1 = nn.InstanceNorm2d(32, affine=True)
            self.conv2 = ConvLayer(32, 64, 3, 2)
            self.in2 = nn.InstanceNorm2d(64, affine=True)
            self.conv3 = ConvLayer(64, 128, 3, 2)
            self.in3 = nn.InstanceNorm2d(128, affine=True)
            for i in range(1, 6):
                setattr(self, 'res%d' % i, ResidualBlock(128))
            self.deconv1 = UpsampleConvLayer(128, 64, 3, 1, upsample=2)
            self.in4 = nn.InstanceNorm2d(64, affine=True)
            self.deconv2 = UpsampleConvLayer(64, 32, 3, 1, upsample=2)
            self.in5 = nn.InstanceNorm2d(32, affine=True)
            self.deconv3 = ConvLayer(32, 3, 9, 1)
            self.relu = nn.ReLU()

        def forward(self, x):
            y = self.relu(self.in1(self.conv1(x)))
            y = self.relu(self.in2(self.conv2(y)))
            y = self.relu(self.in3(self.conv3(y)))
            for i in range(1, 6):
                y = getattr(self, 'res%d' % i)(y)
            y = self.relu(self.in4(self.deconv1(y)))
            y = self.relu(self.in5(self.deconv2(y)))
            return self.deconv3(y)

    return TransformerNet()


add_torchvision_configs()

# computed in float64 (deep random ResNet bodies amplify float32 rounding to
# ~1e-3 relative at P5, which would hide real mismatches); the weights are
# still stored as float32 and the reference uses exactly those values
DOUBLE = {'fasterrcnn_resnet50_fpn', 'retinanet_resnet50_fpn', 'fcn_resnet50', 'deeplabv3_resnet50',
          'ssdlite320_mobilenet_v3_large'}


def import_lib(lib):
    import torch  # noqa: F401  (every reference needs torch)
    if lib == 'timm':
        import timm
        return timm
    if lib == 'torchvision':
        import torchvision
        return torchvision
    return torch


def outputs_of(name, model, x, torch):
    with torch.no_grad():
        y = model(x)
    if isinstance(y, torch.Tensor):
        return {'output': y}
    if isinstance(y, dict):        # segmentation
        return {k: v for k, v in y.items()}
    res = {}                       # detection: list of dicts
    for i, d in enumerate(y):
        res['boxes.%d' % i] = d['boxes']
        res['scores.%d' % i] = d['scores']
        res['labels.%d' % i] = d['labels']
    return res


def export(name, outdir):
    lib, build, shape = CONFIGS[name]
    try:
        mod = import_lib(lib)
    except ImportError as e:
        print('export_timm: missing %s (%s)' % (lib, e), file=sys.stderr)
        sys.exit(3)
    import torch
    torch.manual_seed(0)
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    model = build(mod)
    perturb(model, torch)
    model.eval()
    gen = torch.Generator().manual_seed(0)
    if name.endswith('_fpn') or name.startswith('ssd'):
        x = torch.rand(shape, generator=gen)     # images in [0, 1], as the detectors expect
    else:
        x = torch.randn(shape, generator=gen)
    double = name in DOUBLE
    if double:
        model.double()
        x = x.double()
    calibrate_frozen_bn(model, x, torch)
    if name == 'ssd300_vgg16':
        calibrate_convs(model, x, torch)
    if double:
        # the weights are stored as float32: compute the reference with exactly those values
        model.float().double()
    sd = {k: (v.float() if v.is_floating_point() else v) for k, v in model.state_dict().items()}
    write_safetensors(os.path.join(outdir, name + '.safetensors'), sd)
    io = {'input': x}
    io.update(outputs_of(name, model, x, torch))
    write_safetensors(os.path.join(outdir, name + '.io.safetensors'), io)


def main(argv):
    if len(argv) >= 1 and argv[0] == '--list':
        for k in sorted(CONFIGS):
            print(k, CONFIGS[k][0], CONFIGS[k][2])
        return 0
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    outdir = argv[0]
    os.makedirs(outdir, exist_ok=True)
    for name in argv[1:]:
        if name not in CONFIGS:
            print('export_timm: unknown model %s; known: %s' % (name, ', '.join(sorted(CONFIGS))), file=sys.stderr)
            return 2
        export(name, outdir)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))

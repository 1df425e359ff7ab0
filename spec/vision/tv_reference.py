"""torchvision references for spec/vision/transforms_spec.lua.

Prints a JSON object of nested lists. The test image is a formula both sides
compute (no files). Exits with status 3 when torch/torchvision is missing,
so the spec can mark its parity tests pending.
"""
import json
import math
import sys

try:
    import torch
    import torchvision
    import torchvision.transforms.functional as TF
    from torchvision.transforms import InterpolationMode as IM
    from torchvision.utils import make_grid
except Exception:  # pragma: no cover
    sys.exit(3)


def image(c, h, w):
    t = torch.empty(c, h, w)
    for k in range(c):
        for y in range(h):
            for x in range(w):
                t[k, y, x] = ((k + 1) * (y * 31 + x * 17) + y * x * 3) % 256
    return t


u8 = image(3, 11, 14).to(torch.uint8)
f = u8.float() / 255
out = {"version": torchvision.__version__}


def put(name, t):
    out[name] = t.double().tolist()


put("resize_bilinear", TF.resize(f, [7, 9], interpolation=IM.BILINEAR))
put("resize_up", TF.resize(f, [15, 20], interpolation=IM.BILINEAR))
put("resize_short", TF.resize(f, 5, interpolation=IM.BILINEAR))
put("resize_nearest", TF.resize(f, [7, 9], interpolation=IM.NEAREST))
put("resize_u8", TF.resize(u8, [7, 9], interpolation=IM.BILINEAR))
put("resize_aa", torch.nn.functional.interpolate(f[None], size=[5, 6], mode="bilinear",
                                                 align_corners=False, antialias=True)[0])
put("center_crop", TF.center_crop(f, [6, 5]))
put("center_crop_pad", TF.center_crop(f, [14, 17]))
for mode in ["constant", "edge", "reflect", "symmetric"]:
    put("pad_" + mode, TF.pad(f, [1, 2, 3, 4], fill=0.5 if mode == "constant" else 0,
                              padding_mode=mode))
put("gray", TF.rgb_to_grayscale(f))
put("gray_u8", TF.rgb_to_grayscale(u8, 3))
for name, fn, v in [("brightness", TF.adjust_brightness, 1.3), ("contrast", TF.adjust_contrast, 0.6),
                    ("saturation", TF.adjust_saturation, 1.7), ("hue", TF.adjust_hue, 0.21),
                    ("hue_neg", TF.adjust_hue, -0.4), ("sharpness", TF.adjust_sharpness, 1.8),
                    ("gamma", TF.adjust_gamma, 0.7)]:
    put(name, fn(f, v))
    put(name + "_u8", fn(u8, v))
put("posterize_u8", TF.posterize(u8, 3))
put("solarize", TF.solarize(f, 0.4))
put("solarize_u8", TF.solarize(u8, 100))
put("autocontrast", TF.autocontrast(f))
put("autocontrast_u8", TF.autocontrast(u8))
put("equalize_u8", TF.equalize(u8))
put("invert_u8", TF.invert(u8))
put("blur", TF.gaussian_blur(f, [5, 3], [1.5, 0.8]))
put("blur_u8", TF.gaussian_blur(u8, [3, 3], [0.9, 0.9]))
put("rotate_nearest", TF.rotate(f, 33.0))
put("rotate_bilinear", TF.rotate(f, -21.0, interpolation=IM.BILINEAR))
put("rotate_expand", TF.rotate(f, 40.0, interpolation=IM.BILINEAR, expand=True, fill=[0.2, 0.4, 0.6]))
put("rotate_center_u8", TF.rotate(u8, 15.0, interpolation=IM.BILINEAR, center=[3, 4], fill=7))
put("affine", TF.affine(f, angle=12.0, translate=[2, -1], scale=1.1, shear=[5.0, -3.0],
                        interpolation=IM.BILINEAR))
put("affine_nearest_u8", TF.affine(u8, angle=-30.0, translate=[-1, 2], scale=0.8, shear=[10.0],
                                   interpolation=IM.NEAREST, fill=[10, 20, 30]))
put("convert_to_u8", TF.convert_image_dtype(f, torch.uint8))
put("convert_to_int32", TF.convert_image_dtype(u8, torch.int32))
put("normalize", TF.normalize(f, [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]))
put("erase", TF.erase(f, 2, 3, 4, 5, torch.tensor([0.1, 0.2, 0.3])[:, None, None]))
batch = torch.stack([f, 1 - f, f * 0.5])
put("grid", make_grid(batch, nrow=2, padding=1, pad_value=0.25))
put("grid_norm", make_grid(batch * 3 - 1, nrow=2, padding=2, normalize=True))
put("grid_range", make_grid(batch, nrow=3, padding=0, normalize=True, value_range=(0.2, 0.8),
                            scale_each=True))
put("grid_gray", make_grid(batch[:, :1], nrow=8, padding=2))

print(json.dumps(out))

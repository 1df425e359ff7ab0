"""The comparison server of bench/serve.sh: ResNet-18 (random init, eval) in
PyTorch eager, served by KServe's Python model server (`kserve` from PyPI)
over the same v2 protocol. torchvision is not needed: the network is written
out below as torchvision defines it.

usage: serve_kserve.py PORT   (PyTorch must be importable: bench/serve.sh
puts PyTorch 2.x's site-packages on PYTHONPATH)
"""
import sys

import kserve
import numpy as np
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + (self.down(x) if self.down is not None else x))


def resnet18():
    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for cout, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
        layers += [Block(cin, cout, stride), Block(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 1000)]
    return nn.Sequential(*layers).eval()


class ResNet(kserve.Model):
    def __init__(self, name):
        super().__init__(name)
        self.net = resnet18()
        self.ready = True

    def predict(self, payload, headers=None):
        x = payload.inputs[0].as_numpy()
        with torch.inference_mode():
            y = self.net(torch.from_numpy(np.ascontiguousarray(x))).numpy()
        out = kserve.InferOutput(name="OUTPUT__0", shape=list(y.shape), datatype="FP32")
        out.set_data_from_numpy(y, binary_data=True)
        return kserve.InferResponse(model_name=self.name, infer_outputs=[out], response_id=payload.id or "0")


if __name__ == "__main__":
    torch.set_num_threads(2)
    kserve.ModelServer(http_port=int(sys.argv[1]), workers=1, enable_grpc=False,
                       enable_latency_logging=False).start([ResNet("resnet18")])

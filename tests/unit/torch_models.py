#!/usr/bin/python3
"""PyTorch side of the vgg7 / resnet20 cases of tests/unit/test_vs_torch.c.

usage: torch_models.py DIR MODEL C H W STEPS BATCH LR
Reads DIR/images.u8 (N, C, H, W), DIR/labels.u8 and DIR/init.safetensors (gradmesh's
checkpoint of the initial model: parameters and batch-norm buffers under PyTorch's
names), loads it into the PyTorch definition of the model below with strict=True,
and writes:
  ref_eval0.f32   eval-mode logits of the first BATCH images, before training
  ref_losses.f64  the loss of each of STEPS SGD steps (train mode; the C side's batches)
  grad0_<name>.f32 every parameter's gradient in the first step
  ref_eval1.f32   eval-mode logits of the first BATCH images, after training
  final_<name>.f32 every state_dict entry after training, as float32
The models are the usual PyTorch definitions: torchvision-style VGG naming, and the
common CIFAR ResNet-20 (option A shortcuts as a LambdaLayer around F.pad).
"""
import json
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def load_safetensors(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", info
        b, e = info["data_offsets"]
        out[name] = torch.from_numpy(
            np.frombuffer(data[b:e], np.float32).copy().reshape(info["shape"]))
    return out


class VGG7(nn.Module):
    def __init__(self, c, hw, classes):
        super().__init__()
        layers, inc = [], c
        for v in [32, 32, "M", 64, 64, "M", 128, 128, "M"]:
            if v == "M":
                layers.append(nn.MaxPool2d(2))
            else:
                layers += [nn.Conv2d(inc, v, 3, padding=1, bias=False), nn.BatchNorm2d(v),
                           nn.ReLU(inplace=True)]
                inc = v
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(128 * (hw // 8) ** 2, classes)

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


class LambdaLayer(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


class BasicBlock(nn.Module):
    def __init__(self, in_planes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != planes:  # option A
            self.shortcut = LambdaLayer(lambda x: F.pad(
                x[:, :, ::2, ::2], (0, 0, 0, 0, planes // 4, planes // 4), "constant", 0))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet20(nn.Module):
    def __init__(self, c, classes):
        super().__init__()
        self.conv1 = nn.Conv2d(c, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        inp, stages = 16, []
        for planes, stride in ((16, 1), (32, 2), (64, 2)):
            blocks = []
            for s in (stride, 1, 1):
                blocks.append(BasicBlock(inp, planes, s))
                inp = planes
            stages.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3 = stages
        self.linear = nn.Linear(64, classes)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer3(self.layer2(self.layer1(out)))
        out = F.avg_pool2d(out, out.size()[3])
        return self.linear(out.view(out.size(0), -1))


def main():
    d, model = sys.argv[1], sys.argv[2]
    c, h, w, steps, B = (int(a) for a in sys.argv[3:8])
    lr = float(sys.argv[8])
    torch.set_num_threads(1)
    x = torch.from_numpy(np.fromfile(f"{d}/images.u8", np.uint8).reshape(-1, c, h, w))
    y = torch.from_numpy(np.fromfile(f"{d}/labels.u8", np.uint8).astype(np.int64))
    N = x.shape[0]
    net = VGG7(c, h, 10) if model == "vgg7" else ResNet20(c, 10)
    net.load_state_dict(load_safetensors(f"{d}/init.safetensors"), strict=True)
    first = x[:B].float() / 255.0
    net.eval()
    with torch.no_grad():
        net(first).numpy().astype(np.float32).tofile(f"{d}/ref_eval0.f32")
    net.train()
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9, nesterov=True,
                          weight_decay=5e-4)
    losses = []
    for s in range(steps):
        idx = torch.tensor([((s * B + i) * 37) % N for i in range(B)])
        loss = F.cross_entropy(net(x[idx].float() / 255.0), y[idx])
        opt.zero_grad()
        loss.backward()
        if s == 0:
            for name, prm in net.named_parameters():
                prm.grad.numpy().astype(np.float32).tofile(f"{d}/grad0_{name}.f32")
        opt.step()
        losses.append(loss.item())
    np.array(losses, np.float64).tofile(f"{d}/ref_losses.f64")
    net.eval()
    with torch.no_grad():
        net(first).numpy().astype(np.float32).tofile(f"{d}/ref_eval1.f32")
    for name, t in net.state_dict().items():
        t.detach().numpy().astype(np.float32).tofile(f"{d}/final_{name}.f32")


if __name__ == "__main__":  # bench/torch_peer.py imports the models
    main()

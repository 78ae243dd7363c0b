#!/usr/bin/python3
"""PyTorch side of tests/unit/test_vs_torch.c.

usage: torch_ref.py DIR MODEL OPTIM STEPS BATCH LR
Reads DIR/images.u8, DIR/labels.u8 and DIR/init_<param>.f32 (PyTorch layout),
trains STEPS steps on the same batches as the C side and writes
DIR/ref_losses.f64 and DIR/final_<param>.f32.
"""
import sys

import numpy as np
import torch
import torch.nn as nn

d, model, optim, steps, B, lr = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), \
    int(sys.argv[5]), float(sys.argv[6])
torch.set_num_threads(1)
x = torch.from_numpy(np.fromfile(f"{d}/images.u8", np.uint8).reshape(-1, 1, 28, 28))
y = torch.from_numpy(np.fromfile(f"{d}/labels.u8", np.uint8).astype(np.int64))
N = x.shape[0]
if model == "mlp":
    net = nn.Sequential(nn.Flatten(), nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10))
    names = ["fc1", "fc2"]
else:
    net = nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                        nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
                        nn.Linear(84, 10))
    names = ["conv1", "conv2", "fc1", "fc2", "fc3"]
layers = [m for m in net if isinstance(m, (nn.Linear, nn.Conv2d))]
with torch.no_grad():
    for n, l in zip(names, layers):
        l.weight.copy_(torch.from_numpy(
            np.fromfile(f"{d}/init_{n}.weight.f32", np.float32).reshape(l.weight.shape)))
        l.bias.copy_(torch.from_numpy(np.fromfile(f"{d}/init_{n}.bias.f32", np.float32)))
if optim == "adam":
    opt = torch.optim.Adam(net.parameters(), lr=lr)
else:
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9, nesterov=True,
                          weight_decay=1e-4)
losses = []
for s in range(steps):
    idx = torch.tensor([((s * B + i) * 37) % N for i in range(B)])
    loss = nn.functional.cross_entropy(net(x[idx].float() / 255.0), y[idx])
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
np.array(losses, np.float64).tofile(f"{d}/ref_losses.f64")
for n, l in zip(names, layers):
    l.weight.detach().numpy().astype(np.float32).tofile(f"{d}/final_{n}.weight.f32")
    l.bias.detach().numpy().astype(np.float32).tofile(f"{d}/final_{n}.bias.f32")

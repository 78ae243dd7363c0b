#!/usr/bin/python3
"""PyTorch peer for gradmesh benchmarks and accuracy comparisons.

Same recipe as a gradmesh job: the same architecture (PyTorch default init),
Fashion-MNIST IDX files decoded to uint8 tensors held in memory, images
converted to float (x/255) per batch, reshuffled every epoch, the same batch
size and optimizer, one thread.  This is the fastest plain PyTorch loop we know
for the job (no DataLoader workers, no per-sample Python): a fair peer.

Prints one JSON object: samples_per_s (training only), test_accuracy, ...
Run with Debian's python3 (/usr/bin/python3), where python3-torch imports.

--device cuda (bench/gpu_train_vs_torch.sh) trains on the GPU the way a PyTorch user
would make it fast: the whole uint8 dataset lives on the GPU and batches are indexed
there, cuDNN picks its algorithms per shape (cudnn.benchmark), and fp32 means fp32 (TF32
off for matmuls and convolutions, as gradmesh's CUDA backend).  The clock stops after a
torch.cuda.synchronize().  vgg7 / resnet20 are the definitions test_vs_torch checks
gradmesh's models against (tests/unit/torch_models.py), on images padded by --pad.
"""
import argparse
import gzip
import json
import os
import struct
import time

import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "unit"))


def read_idx(path):
    for p in (path, path + ".gz"):
        if os.path.exists(p):
            op = gzip.open if p.endswith(".gz") else open
            with op(p, "rb") as f:
                data = f.read()
            break
    else:
        raise SystemExit(f"missing {path}[.gz]")
    magic, = struct.unpack(">I", data[:4])
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def model_for(name, hidden, side=28):
    if name == "lenet5":
        return nn.Sequential(
            nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
            nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
            nn.Linear(84, 10))
    if name == "mlp":
        layers, prev = [nn.Flatten()], 784
        for h in hidden:
            layers += [nn.Linear(prev, h), nn.ReLU()]
            prev = h
        layers.append(nn.Linear(prev, 10))
        return nn.Sequential(*layers)
    if name in ("vgg7", "resnet20"):
        import torch_models
        if name == "vgg7":
            return torch_models.VGG7(1, side, 10)
        return torch_models.ResNet20(1, 10)
    raise SystemExit(f"unknown model {name}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="lenet5")
    ap.add_argument("--hidden", default="256")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--optim", default="adam")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-eval", action="store_true")
    ap.add_argument("--device", default="cpu", help="cpu | cuda")
    ap.add_argument("--pad", type=int, default=0, help="pixels of black border per side")
    ap.add_argument("--momentum", type=float, default=0.9, help="sgd")
    ap.add_argument("--max-steps", type=int, default=0, help="stop each epoch after N steps")
    args = ap.parse_args()
    dev = torch.device(args.device)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.benchmark = True

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    xtr = torch.from_numpy(read_idx(os.path.join(args.data, "train-images-idx3-ubyte")).copy())
    ytr = torch.from_numpy(read_idx(os.path.join(args.data, "train-labels-idx1-ubyte")).astype(np.int64))
    xte = torch.from_numpy(read_idx(os.path.join(args.data, "t10k-images-idx3-ubyte")).copy())
    yte = torch.from_numpy(read_idx(os.path.join(args.data, "t10k-labels-idx1-ubyte")).astype(np.int64))
    xtr = xtr.unsqueeze(1)
    xte = xte.unsqueeze(1)
    if args.pad > 0:
        xtr = F.pad(xtr, (args.pad,) * 4)
        xte = F.pad(xte, (args.pad,) * 4)
    xtr, ytr, xte, yte = xtr.to(dev), ytr.to(dev), xte.to(dev), yte.to(dev)

    model = model_for(args.model, [int(h) for h in args.hidden.split(",") if h],
                      xtr.shape[-1]).to(dev)
    if args.optim == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    lossf = nn.CrossEntropyLoss()
    n = xtr.shape[0]
    steps_per_epoch = n // args.batch
    if args.max_steps > 0:
        steps_per_epoch = min(steps_per_epoch, args.max_steps)
    train_time = 0.0
    steps = 0
    for epoch in range(args.epochs):
        perm = torch.randperm(n).to(dev)
        model.train()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for s in range(steps_per_epoch):
            idx = perm[s * args.batch:(s + 1) * args.batch]
            x = xtr[idx].float().div_(255.0)
            y = ytr[idx]
            opt.zero_grad(set_to_none=True)
            loss = lossf(model(x), y)
            loss.backward()
            opt.step()
            steps += 1
        if dev.type == "cuda":
            torch.cuda.synchronize()
        train_time += time.perf_counter() - t0
    acc = None
    if not args.no_eval:
        model.eval()
        correct = 0
        with torch.no_grad():
            for s in range(0, xte.shape[0], 1000):
                out = model(xte[s:s + 1000].float().div_(255.0))
                correct += (out.argmax(1) == yte[s:s + 1000]).sum().item()
        acc = 100.0 * correct / xte.shape[0]
    print(json.dumps({"peer": "pytorch " + torch.__version__, "model": args.model,
                      "device": (torch.cuda.get_device_name(dev) if dev.type == "cuda"
                                 else "cpu"),
                      "batch": args.batch, "epochs": args.epochs, "steps": steps,
                      "samples_per_s": steps * args.batch / train_time,
                      "train_s": train_time, "test_accuracy": acc,
                      "final_loss": float(loss.item())}))


if __name__ == "__main__":
    main()

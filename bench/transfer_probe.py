#!/usr/bin/python3
"""bench/transfer_probe.py - how linearly separable are Fashion-MNIST classes 5-9 in a resnet18's
features?  The diagnostic behind bench/transfer.sh's figures (docs/BENCHMARKS.md, "Transfer").

Loads a torchvision-named resnet18 safetensors file with 5 outputs (a pretrained file of
transfer.sh, kept with GM_TRANSFER_KEEP=1, or tools/torchvision_weights.py's random
initialisation), in eval mode (batch norms on their running statistics, as gradmesh's frozen
modules).  Draws K training images a class of classes 5-9 from the training file (numpy
default_rng(SEED)), takes the test file's 1000 a class, resizes both to SIZE x SIZE (PIL
bilinear, gray replicated to RGB, [0, 1]), and for the outputs of layer2, layer3 and layer4
(average-pooled over space) fits a multinomial logistic regression on the K-a-class features
to convergence (L-BFGS, L2 1e-3), then prints its test accuracy.  The layer4 figure is the
best a `freeze = backbone` head can reach on those K images; layer2/layer3 say how much of
what the backbone learnt is still general below it.

usage: bench/transfer_probe.py WEIGHTS.safetensors [--k 20] [--size 32] [--seed 1]
"""
import argparse
import gzip
import json
import os
import struct

import numpy as np
import torch
import torchvision
from PIL import Image


def load_weights(path):
    raw = open(path, "rb").read()
    hl = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + hl])
    sd = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        a, b = e["data_offsets"]
        t = torch.from_numpy(np.frombuffer(raw[8 + hl + a:8 + hl + b], "<f4").copy())
        t = t.reshape(e["shape"])
        sd[name] = t.long() if name.endswith("num_batches_tracked") else t
    return sd


def load_split(src, part):
    with gzip.open(os.path.join(src, f"{part}-images-idx3-ubyte.gz")) as f:
        imgs = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28)
    with gzip.open(os.path.join(src, f"{part}-labels-idx1-ubyte.gz")) as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)
    return imgs, labels


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("weights")
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--size", type=int, default=32)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--fmnist", default="/usr/share/datasets/fashion-mnist")
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = torchvision.models.resnet18(num_classes=5)
    model.load_state_dict(load_weights(args.weights), strict=True)
    model.eval()

    tr, trl = load_split(args.fmnist, "train")
    te, tel = load_split(args.fmnist, "t10k")

    def prep(imgs):
        a = np.stack([np.asarray(Image.fromarray(x, "L").resize((args.size, args.size),
                                                                 Image.BILINEAR))
                      for x in imgs]).astype(np.float32) / 255.0
        return torch.from_numpy(a)[:, None].expand(-1, 3, -1, -1).contiguous()

    rng = np.random.default_rng(args.seed)
    idx = np.concatenate([rng.choice(np.nonzero(trl == c)[0], args.k, replace=False)
                          for c in range(5, 10)])
    x_tr, y_tr = prep(tr[idx]), torch.from_numpy(trl[idx].astype(np.int64) - 5)
    sel = tel >= 5
    x_te, y_te = prep(te[sel]), torch.from_numpy(tel[sel].astype(np.int64) - 5)

    feats = {}
    for name in ("layer2", "layer3", "layer4"):
        getattr(model, name).register_forward_hook(
            lambda mod, i, o, name=name: feats.__setitem__(name, o.mean((2, 3))))

    def extract(x):
        out = {}
        with torch.no_grad():
            for i in range(0, len(x), 500):
                model(x[i:i + 500])
                for k, v in feats.items():
                    out.setdefault(k, []).append(v)
        return {k: torch.cat(v) for k, v in out.items()}

    f_tr, f_te = extract(x_tr), extract(x_te)
    for name in ("layer2", "layer3", "layer4"):
        w = torch.zeros(f_tr[name].shape[1], 5, requires_grad=True)
        b = torch.zeros(5, requires_grad=True)
        opt = torch.optim.LBFGS([w, b], max_iter=500)

        def closure():
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(f_tr[name] @ w + b, y_tr) + \
                1e-3 * (w ** 2).sum()
            loss.backward()
            return loss
        opt.step(closure)
        with torch.no_grad():
            acc = ((f_te[name] @ w + b).argmax(1) == y_te).float().mean().item() * 100
        print(f"{os.path.basename(args.weights)} k={args.k} size={args.size} seed={args.seed} "
              f"{name}: {acc:.2f}")


if __name__ == "__main__":
    main()

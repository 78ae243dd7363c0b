#!/usr/bin/env python3
"""Evaluates a gradmesh checkpoint with an independent NumPy forward pass.

usage: eval_checkpoint.py WEIGHTS.safetensors DATA_DIR
Loads the weights with the `safetensors` package (safetensors.numpy), rebuilds
the model from the tensor names (lenet5: conv1..2 + fc1..3; mlp: fc1..fcN) in
PyTorch layout (NCHW, conv (OC, IC, KH, KW), linear (OUT, IN)), runs the
Fashion-MNIST test set through it and prints one JSON line: accuracy, count,
model and the checkpoint metadata.
"""
import gzip
import json
import os
import struct
import sys

import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file


def read_idx(path):
    for p in (path, path + ".gz"):
        if os.path.exists(p):
            op = gzip.open if p.endswith(".gz") else open
            with op(p, "rb") as f:
                data = f.read()
            magic, = struct.unpack(">I", data[:4])
            nd = magic & 0xFF
            dims = struct.unpack(">" + "I" * nd, data[4:4 + 4 * nd])
            return np.frombuffer(data, np.uint8, offset=4 + 4 * nd).reshape(dims)
    raise SystemExit(f"missing {path}")


def conv(x, w, b, pad):
    n, c, h, wd = x.shape
    oc, _, k, _ = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = h + 2 * pad - k + 1, wd + 2 * pad - k + 1
    out = np.zeros((n, oc, oh, ow), np.float32)
    for i in range(k):
        for j in range(k):
            out += np.einsum("nchw,oc->nohw", xp[:, :, i:i + oh, j:j + ow], w[:, :, i, j])
    return out + b[None, :, None, None]


def pool(x):
    n, c, h, w = x.shape
    return x[:, :, :h // 2 * 2, :w // 2 * 2].reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))


def forward(P, x):
    relu = lambda a: np.maximum(a, 0)
    if "conv1.weight" in P:
        x = pool(relu(conv(x, P["conv1.weight"], P["conv1.bias"], 2)))
        x = pool(relu(conv(x, P["conv2.weight"], P["conv2.bias"], 0)))
    x = x.reshape(x.shape[0], -1)
    nfc = len([k for k in P if k.startswith("fc") and k.endswith(".weight")])
    for i in range(1, nfc + 1):
        x = x @ P[f"fc{i}.weight"].T + P[f"fc{i}.bias"]
        if i < nfc:
            x = relu(x)
    return x


def main():
    path, data = sys.argv[1], sys.argv[2]
    P = load_file(path)
    with safe_open(path, framework="numpy") as f:
        meta = f.metadata()
    x = read_idx(os.path.join(data, "t10k-images-idx3-ubyte")).astype(np.float32) / 255.0
    y = read_idx(os.path.join(data, "t10k-labels-idx1-ubyte"))
    x = x.reshape(-1, 1, 28, 28)
    correct = 0
    for s in range(0, len(y), 1000):
        correct += int((forward(P, x[s:s + 1000]).argmax(1) == y[s:s + 1000]).sum())
    print(json.dumps({"accuracy": 100.0 * correct / len(y), "count": len(y),
                      "model": meta.get("model"), "step": meta.get("step"),
                      "tensors": sorted(P)}))


if __name__ == "__main__":
    main()

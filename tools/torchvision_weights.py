#!/usr/bin/python3
"""Writes torchvision weights as a safetensors file that gradmesh's `[model] init` loads.

usage:
  torchvision_weights.py MODEL [--pth FILE] [--classes K] [--seed N] --out FILE.safetensors
  torchvision_weights.py MODEL --from FILE.safetensors --out FILE.pth

MODEL is a torchvision 0.14 model name gradmesh builds as well: resnet18, resnet34,
resnet50, mobilenet_v2, vgg11_bn, vgg16, vgg16_bn.

The first form builds torchvision.models.MODEL and writes its state_dict, every tensor
as float32 under its state_dict name (num_batches_tracked as a float scalar):
  --pth FILE    load these weights first (a torchvision .pth such as
                ~/.cache/torch/hub/checkpoints/resnet18-f37072fd.pth, or a checkpoint
                dict holding "state_dict"), strict: every name and shape must match.
                The class count is taken from the file's head.
  without --pth the model's random initialisation is written, drawn after
                torch.manual_seed(--seed, default 0): what the tests use, since nothing
                can be downloaded there.
  --classes K   the head's outputs without --pth (default 1000, ImageNet's).
The second form goes back: a gradmesh checkpoint or `checkpoint export` file is loaded
into torchvision's model with strict=True and saved with torch.save (a state_dict).

Needs /usr/bin/python3 with Debian's python3-torch and python3-torchvision.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np
import torch
import torchvision

FAMILIES = ("resnet18", "resnet34", "resnet50", "mobilenet_v2", "vgg11_bn", "vgg16",
            "vgg16_bn")
HEADS = {"resnet18": "fc", "resnet34": "fc", "resnet50": "fc", "mobilenet_v2": "classifier.1",
         "vgg11_bn": "classifier.6", "vgg16": "classifier.6", "vgg16_bn": "classifier.6"}


def write_safetensors(path, tensors):
    """tensors: ordered (name, float32 numpy array) pairs."""
    header, offset, blobs = {}, 0, []
    for name, a in tensors:
        b = np.ascontiguousarray(a, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def read_safetensors(path):
    raw = open(path, "rb").read()
    if len(raw) < 8:
        sys.exit(f"{path}: not a safetensors file")
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    kinds = {"F32": np.float32, "F64": np.float64, "F16": np.float16}
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        a = np.frombuffer(data[b:e], kinds[info["dtype"]]).astype(np.float32)
        out[name] = torch.from_numpy(a.reshape(info["shape"]).copy())
    return out


def build(name, classes):
    return getattr(torchvision.models, name)(weights=None, num_classes=classes)


def to_torchvision_dict(model, sd):
    """sd (float32 tensors) as model.state_dict() dtypes: num_batches_tracked is int64."""
    ref = model.state_dict()
    return {k: v.to(ref[k].dtype) if k in ref else v for k, v in sd.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", choices=FAMILIES)
    ap.add_argument("--pth")
    ap.add_argument("--from", dest="src")
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    head = HEADS[a.model]
    if a.src is not None:
        sd = read_safetensors(a.src)
        if f"{head}.weight" not in sd:
            sys.exit(f"{a.src}: no {head}.weight: not a {a.model} file")
        m = build(a.model, sd[f"{head}.weight"].shape[0])
        m.load_state_dict(to_torchvision_dict(m, sd), strict=True)
        torch.save(m.state_dict(), a.out)
        return
    if a.pth is not None:
        sd = torch.load(a.pth, map_location="cpu")
        if isinstance(sd, dict) and "state_dict" in sd:
            sd = sd["state_dict"]
        if f"{head}.weight" not in sd:
            sys.exit(f"{a.pth}: no {head}.weight: not a {a.model} state_dict")
        m = build(a.model, sd[f"{head}.weight"].shape[0])
        m.load_state_dict(sd, strict=True)
    else:
        torch.manual_seed(a.seed)
        m = build(a.model, a.classes)
    write_safetensors(a.out, [(k, v.detach().float().numpy())
                              for k, v in m.state_dict().items()])


if __name__ == "__main__":
    main()

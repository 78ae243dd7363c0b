#!/usr/bin/python3
"""tests/unit/torchvision_augment_ref.py - torchvision 0.14's transforms on the photos
tests/unit/test_augment_vs_torch.c transformed, compared with gradmesh's tensors.

usage: torchvision_augment_ref.py DIR   (DIR/cases.txt, DIR/ours.f32 written by the C test)

cases.txt, one case a line:
  crop PATH SIZE TOP LEFT H W FLIP NORM   RandomResizedCrop's resized_crop with our box + hflip
  eval PATH SIZE RESIZE NORM              Resize(RESIZE) + CenterCrop(SIZE)
  stretch PATH SIZE NORM                  Resize((SIZE, SIZE)) (the eager reader's resize)
  fallback W H SCALE0 SCALE1 X Y BW BH    RandomResizedCrop.get_params when no attempt fits
NORM: imagenet or none.  ours.f32: the tensors of the first three kinds, in order, float32 CHW.
Every tensor is compared before normalisation ((x * std + mean), in 1/255 units): the bound is
one level, since PIL rounds its horizontal pass to 8 bits and uses fixed-point weights where
gradmesh keeps floats.  Prints the largest difference per kind; exit 1 past the bound.
"""
import sys

import numpy as np
import torch
import torchvision.transforms as T
import torchvision.transforms.functional as F
from PIL import Image

MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)


def main():
    d = sys.argv[1]
    ours = np.fromfile(f"{d}/ours.f32", dtype=np.float32)
    off = 0
    worst = {}
    failed = 0
    bil = T.InterpolationMode.BILINEAR
    for line in open(f"{d}/cases.txt"):
        f = line.split()
        kind = f[0]
        if kind == "fallback":
            w, h, s0, s1, x, y, bw, bh = int(f[1]), int(f[2]), float(f[3]), float(f[4]), *map(int, f[5:])
            img = Image.new("RGB", (w, h))
            i, j, th, tw = T.RandomResizedCrop.get_params(img, [s0, s1], [3 / 4, 4 / 3])
            if (i, j, th, tw) != (y, x, bh, bw):
                print(f"FAIL fallback {w}x{h}: torchvision ({j},{i},{tw},{th}) ours ({x},{y},{bw},{bh})")
                failed += 1
            continue
        img = Image.open(f[1]).convert("RGB")  # torchvision's ImageFolder loader
        size = int(f[2])
        if kind == "crop":
            top, left, ch, cw, flip = map(int, f[3:8])
            t = F.resized_crop(img, top, left, ch, cw, [size, size], bil)
            if flip:
                t = F.hflip(t)
            norm = f[8]
        elif kind == "eval":
            t = T.CenterCrop(size)(T.Resize(int(f[3]), bil)(img))
            norm = f[4]
        else:
            t = T.Resize((size, size), bil)(img)
            norm = f[3]
        ref = F.to_tensor(t)
        n = ref.numel()
        mine = torch.from_numpy(ours[off:off + n].copy()).view(ref.shape)
        off += n
        if norm == "imagenet":
            mine = mine * STD + MEAN
        diff = float((mine - ref).abs().max()) * 255
        worst[kind] = max(worst.get(kind, 0), diff)
        if diff > 1 + 1e-3:
            print(f"FAIL {line.strip()}: {diff:.3f} levels apart")
            failed += 1
    if off != ours.size:
        print(f"FAIL: {ours.size - off} floats left over")
        failed += 1
    print("largest difference in 1/255 levels: " + ", ".join(f"{k} {v:.3f}" for k, v in sorted(worst.items())))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

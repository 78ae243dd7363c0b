#!/usr/bin/python3
"""tests/tools/make_photos.py - a deterministic photo folder for tests and benchmarks.

No photo dataset is packaged in Debian, so this renders one from Fashion-MNIST
(/usr/share/datasets/fashion-mnist, package dataset-fashion-mnist): each photo is one
Fashion-MNIST item of its class, scaled to 40-90% of the frame, placed with a random offset,
tinted a random colour over a random background colour with a little noise, and saved as JPEG
(quality 90) or, one photo in three, as PNG, in PyTorch's ImageFolder layout:

    OUT/t-shirt/00000.jpg  OUT/t-shirt/00001.png ...  OUT/ankle_boot/00041.jpg
    with --val N:  OUT/train/<class>/...  and  OUT/val/<class>/...

Sizes are drawn per photo in [--min, --max] for width and height separately (96-300 by
default), or fixed with --size.  Every choice comes from numpy's generator seeded by
(--seed, class, photo number), so the same arguments give the same bytes (Debian's PIL and
libjpeg); the items come from the test file (t10k), the i-th photo of a class from its
(i mod count)-th item.  Needs /usr/bin/python3 with numpy and PIL (python3-numpy,
python3-pil).

usage: make_photos.py OUT [--per-class N] [--val N] [--classes K] [--min PX] [--max PX]
                          [--size PX] [--seed S] [--png-every N] [--fmnist DIR]
"""
import argparse
import gzip
import os
import sys

import numpy as np
from PIL import Image

CLASSES = ["t-shirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker",
           "bag", "ankle_boot"]


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def find(dirname, stem):
    for name in (stem, stem + ".gz"):
        p = os.path.join(dirname, name)
        if os.path.exists(p):
            return p
    sys.exit(f"make_photos: {dirname}: no {stem}[.gz] (Debian: dataset-fashion-mnist)")


def render(item, w, h, rng):
    """One photo of w x h from a 28x28 item."""
    side = int(min(w, h) * rng.uniform(0.4, 0.9))
    glyph = Image.fromarray(item).resize((side, side), Image.BILINEAR)
    alpha = np.zeros((h, w), dtype=np.float32)
    x = int(rng.integers(0, w - side + 1))
    y = int(rng.integers(0, h - side + 1))
    alpha[y:y + side, x:x + side] = np.asarray(glyph, dtype=np.float32) / 255.0
    bg = rng.uniform(0, 255, size=3).astype(np.float32)
    fg = rng.uniform(0, 255, size=3).astype(np.float32)
    if abs(float(fg.mean() - bg.mean())) < 60:  # keep the item visible
        fg = 255.0 - bg
    img = bg * (1 - alpha[..., None]) + fg * alpha[..., None]
    img += rng.normal(0, 6, size=img.shape).astype(np.float32)
    return Image.fromarray(np.clip(img + 0.5, 0, 255).astype(np.uint8), "RGB")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--per-class", type=int, default=20)
    ap.add_argument("--val", type=int, default=0, help="validation photos per class (train/ and val/)")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--min", type=int, default=96)
    ap.add_argument("--max", type=int, default=300)
    ap.add_argument("--size", type=int, default=0, help="every photo SIZE x SIZE")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--png-every", type=int, default=3, help="every N-th photo a PNG (0: none)")
    ap.add_argument("--fmnist", default="/usr/share/datasets/fashion-mnist")
    a = ap.parse_args()
    if not 1 <= a.classes <= 10 or a.per_class < 1 or a.min < 8 or a.max < a.min:
        sys.exit("make_photos: bad arguments")
    images = read_idx(find(a.fmnist, "t10k-images-idx3-ubyte"))
    labels = read_idx(find(a.fmnist, "t10k-labels-idx1-ubyte"))
    splits = [("train", a.per_class, 0), ("val", a.val, a.per_class)] if a.val > 0 else \
        [("", a.per_class, 0)]
    total = 0
    for k in range(a.classes):
        items = images[labels == k]
        for split, count, first in splits:
            d = os.path.join(a.out, split, CLASSES[k]) if split else os.path.join(a.out, CLASSES[k])
            os.makedirs(d, exist_ok=True)
            for i in range(first, first + count):
                rng = np.random.default_rng([a.seed, k, i])
                if a.size > 0:
                    w = h = a.size
                else:
                    w, h = (int(v) for v in rng.integers(a.min, a.max + 1, size=2))
                img = render(items[i % len(items)], w, h, rng)
                if a.png_every > 0 and i % a.png_every == a.png_every - 1:
                    img.save(os.path.join(d, f"{i:05d}.png"))
                else:
                    img.save(os.path.join(d, f"{i:05d}.jpg"), quality=90)
                total += 1
    print(f"make_photos: {total} photos in {a.out}")


if __name__ == "__main__":
    main()

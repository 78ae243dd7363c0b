#!/usr/bin/env bash
# `gradmesh train --local` on the other dataset kinds, end to end, with small
# synthetic sets whose labels are learnable (a bright square whose position
# encodes the class):
#   cifar10: the six binary batch files (3x32x32 records), LeNet-5;
#   folder:  dir/<class>/*.png (written by a tiny PNG encoder below), 3
#            classes, resized 20x20 -> 16x16 grayscale, the MLP.
# Each must train to well above chance and write loadable weights.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/integration/lib.bash

python3 - "$WORK" <<'PY'
import os, random, struct, sys, zlib
root = sys.argv[1]
rnd = random.Random(5)

def image(label, side, classes, channels):
    # noise plus a bright block at a class-dependent place
    px = [[rnd.randrange(0, 90) for _ in range(side * side)] for _ in range(channels)]
    cell = side // 4
    r, c = divmod(label % 16, 4)
    for ch in range(channels):
        for y in range(r * cell, r * cell + cell):
            for x in range(c * cell, c * cell + cell):
                px[ch][y * side + x] = 200 + rnd.randrange(0, 55)
    return px

# cifar10: 6 files x 300 records of 1 label byte + 3072 bytes (CHW)
os.makedirs(f"{root}/cifar")
for name in [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]:
    with open(f"{root}/cifar/{name}", "wb") as f:
        for _ in range(300):
            lab = rnd.randrange(10)
            f.write(bytes([lab]) + bytes(v for ch in image(lab, 32, 10, 3) for v in ch))

def png(path, w, h, gray):
    raw = b"".join(b"\0" + bytes(gray[y * w:(y + 1) * w]) for y in range(h))
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))

for k, cls in enumerate(["boot", "coat", "shirt"]):
    os.makedirs(f"{root}/folder/{cls}")
    for i in range(60):
        png(f"{root}/folder/{cls}/{i:03d}.png", 20, 20, image(k * 5, 20, 3, 1)[0])
PY

job_ini "$WORK/cifar.ini" cifar job.model=lenet5 job.epochs=3 job.out="$WORK/cifar.safetensors" \
    data.kind=cifar10 data.dir="$WORK/cifar" optim.lr=0.002 optim.batch=32
job_ini "$WORK/folder.ini" folder job.epochs=8 job.out="$WORK/folder.safetensors" model.hidden=32 \
    data.kind=folder data.dir="$WORK/folder" data.image_size=16 data.channels=1 data.test_split=0.2 \
    optim.name=sgd optim.lr=0.05 optim.momentum=0.9 optim.batch=16

for j in cifar folder; do
    "$GM" train --local "$WORK/$j.ini" --no-progress --summary-json "$WORK/$j.json" 2>"$WORK/$j.log" \
        || { cat "$WORK/$j.log"; fail "$j training failed"; }
    grep 'event=start' "$WORK/$j.log"
    acc=$(python3 -c "import json;print(json.load(open('$WORK/$j.json'))['test_accuracy'])")
    python3 -c "import sys; sys.exit(0 if $acc >= 80 else 1)" || { cat "$WORK/$j.log"; fail "$j: accuracy $acc < 80"; }
    python3 -c "from safetensors.numpy import load_file; print(sorted(load_file('$WORK/$j.safetensors')))" \
        || fail "$j: weights do not load"
    pass "$j trains to $acc% test accuracy (chance: 10% / 33%)"
done
grep -q 'input=3x32x32 classes=10' "$WORK/cifar.log" || fail "cifar: wrong input shape"
grep -q 'train=144 test=36 input=1x16x16 classes=3' "$WORK/folder.log" || fail "folder: wrong split or shape"

#!/usr/bin/env bash
# bench/transfer.sh - issue 20's transfer benchmark: does starting from pretrained weights with
# a frozen backbone beat training from scratch, at equal steps?
#
#  1. Pretrain torchvision's resnet18 on Fashion-MNIST classes 0-4 (T-shirt, trouser, pullover,
#     dress, coat), seed 1.  The images go through a photo folder ([data] kind = folder,
#     image_size = 32, channels = 3): 28x28 gray PNGs, resized to 32x32 and replicated to RGB
#     by the loader, so the network is torchvision's own (a 3-channel stem; no 1-channel
#     variant exists there).  Its output file is torchvision-named safetensors.
#  2. That file's head (fc, 5 outputs for classes 0-4) is drawn afresh, U(+-1/sqrt(512)) for
#     weight and bias as torch.nn.Linear does, seeded per run, so the new task starts from the
#     backbone alone (the classes match in number, so `init` would otherwise keep the old head).
#  3. Classes 5-9 (sandal, shirt, sneaker, bag, ankle boot), a small set: FT_PER_CLASS images a
#     class from the training files, half held out for testing (test_split = 0.5).  Two runs
#     per seed (1, 2, 3), same data, steps, optimizer and schedule: `init` = the pretrained
#     file with `freeze = backbone`, and from scratch (torchvision's initialisation, all of it
#     training).  Test accuracy after every epoch; the curves, their means over the seeds and
#     the gap at equal steps are printed.
#
# Environment: GM_TRANSFER_DIR (work folder, default a fresh mktemp -d, removed at the end
# unless GM_TRANSFER_KEEP=1), PRE_PER_CLASS (2000), PRE_EPOCHS (3), FT_PER_CLASS (400),
# FT_TEST_SPLIT (0.5), FT_EPOCHS (8), SEEDS ("1 2 3"), PRETRAINED (a pretrained file from an
# earlier run to start from instead of pretraining again).  Needs /usr/bin/python3 with numpy and PIL (Debian) and the
# dataset at /usr/share/datasets/fashion-mnist.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
FMNIST=${FMNIST:-/usr/share/datasets/fashion-mnist}
PRE_PER_CLASS=${PRE_PER_CLASS:-2000}
PRE_EPOCHS=${PRE_EPOCHS:-3}
FT_PER_CLASS=${FT_PER_CLASS:-400}
FT_EPOCHS=${FT_EPOCHS:-8}
FT_TEST_SPLIT=${FT_TEST_SPLIT:-0.5}
PRETRAINED=${PRETRAINED:-}
SEEDS=${SEEDS:-1 2 3}
if [ ! -f "$FMNIST/train-images-idx3-ubyte.gz" ]; then
    echo "transfer.sh: no Fashion-MNIST at $FMNIST (Debian's dataset-fashion-mnist)" >&2
    exit 77
fi
make --no-print-directory -s CUDA=0 gradmesh
W=${GM_TRANSFER_DIR:-$(mktemp -d)}
mkdir -p "$W"
if [ "${GM_TRANSFER_KEEP:-0}" != 1 ] && [ -z "${GM_TRANSFER_DIR:-}" ]; then
    trap 'rm -rf "$W"' EXIT
fi
echo "# $(date -u +%FT%TZ) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); work dir $W"

# the two photo folders: classes 0-4 (pretraining), 5-9 (the new task), first images of each
/usr/bin/python3 - "$FMNIST" "$W" "$PRE_PER_CLASS" "$FT_PER_CLASS" <<'EOF'
import gzip, os, sys
import numpy as np
from PIL import Image
src, out, pre_n, ft_n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
with gzip.open(os.path.join(src, "train-images-idx3-ubyte.gz")) as f:
    imgs = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28)
with gzip.open(os.path.join(src, "train-labels-idx1-ubyte.gz")) as f:
    labels = np.frombuffer(f.read(), np.uint8, offset=8)
for name, classes, n in (("pre", range(0, 5), pre_n), ("ft", range(5, 10), ft_n)):
    for c in classes:
        d = os.path.join(out, name, f"class{c}")
        os.makedirs(d, exist_ok=True)
        for i, j in enumerate(np.nonzero(labels == c)[0][:n]):
            Image.fromarray(imgs[j], "L").save(os.path.join(d, f"{i:05d}.png"))
EOF

job() { # name seed data_dir epochs out [init] [freeze]
    cat <<EOF
[job]
name    = $1
model   = resnet18
epochs  = $4
seed    = $2
threads = 1
out     = $5
checkpoint_dir = $W/ckpt-$1

[data]
kind       = folder
dir        = $3
image_size = 32
channels   = 3
test_split = $( [ "$1" = pre ] && echo 0.1 || echo "$FT_TEST_SPLIT" )

[model]
${6:+init = $6}
${7:+freeze = $7}

[optim]
name     = sgd
lr       = 0.01
batch    = 32
momentum = 0.9

[schedule]
kind = constant
EOF
}

run() { # name: trains $W/$1.ini, keeps its log, prints "steps accuracy" per evaluated epoch
    "$ROOT/gradmesh" train --local "$W/$1.ini" > "$W/$1.log" 2>&1 || {
        echo "transfer.sh: $1 failed:" >&2
        tail -5 "$W/$1.log" >&2
        exit 1
    }
    sed -n 's/.*event=epoch epoch=\([0-9]*\) steps=\([0-9]*\) .*test_accuracy=\([0-9.]*\).*/\2 \3/p' \
        "$W/$1.log" > "$W/$1.curve"
}

t0=$(date +%s)
if [ -n "$PRETRAINED" ]; then
    cp "$PRETRAINED" "$W/pre.safetensors"
    echo "pretrained: $PRETRAINED (from an earlier run)"
else
    job pre 1 "$W/pre" "$PRE_EPOCHS" "$W/pre.safetensors" > "$W/pre.ini"
    run pre
    echo "pretrain (classes 0-4, $((PRE_PER_CLASS * 5)) images, 10% held out, $PRE_EPOCHS epochs):" \
        "test accuracy $(tail -1 "$W/pre.curve" | cut -d' ' -f2)% after $(tail -1 "$W/pre.curve" | cut -d' ' -f1) steps" \
        "($(($(date +%s) - t0)) s)"
fi
echo "classes 5-9: $FT_PER_CLASS images a class, test_split $FT_TEST_SPLIT, $FT_EPOCHS epochs, batch 32, sgd lr 0.01 momentum 0.9"

for s in $SEEDS; do
    # the pretrained backbone with a fresh head, drawn from this seed
    /usr/bin/python3 - "$W/pre.safetensors" "$W/init-$s.safetensors" "$s" <<'EOF'
import json, struct, sys
import numpy as np
src, dst, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
raw = open(src, "rb").read()
hl = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + hl])
data = bytearray(raw[8 + hl:])
rng = np.random.default_rng(seed)
bound = 1.0 / np.sqrt(512.0)
for name in ("fc.weight", "fc.bias"):
    e = head[name]
    assert e["dtype"] == "F32", e
    a, b = e["data_offsets"]
    n = (b - a) // 4
    data[a:b] = rng.uniform(-bound, bound, n).astype("<f4").tobytes()
open(dst, "wb").write(raw[:8 + hl] + bytes(data))
EOF
    job "ft-$s" "$s" "$W/ft" "$FT_EPOCHS" "$W/ft-$s.safetensors" "$W/init-$s.safetensors" \
        backbone > "$W/ft-$s.ini"
    job "scratch-$s" "$s" "$W/ft" "$FT_EPOCHS" "$W/scratch-$s.safetensors" > "$W/scratch-$s.ini"
    run "ft-$s"
    run "scratch-$s"
done

/usr/bin/python3 - "$W" "$SEEDS" <<'EOF'
import sys
w, seeds = sys.argv[1], sys.argv[2].split()
def curve(name):
    return [tuple(float(v) for v in l.split()) for l in open(f"{w}/{name}.curve")]
print(f"\nclasses 5-9, test accuracy (%) after each epoch, seeds {' '.join(seeds)}:")
print(f"{'steps':>6} " + " ".join(f"{'ft s' + s:>8} {'scr s' + s:>8}" for s in seeds)
      + f" {'ft mean':>8} {'scr mean':>8} {'gap':>6}")
ft = {s: curve(f"ft-{s}") for s in seeds}
sc = {s: curve(f"scratch-{s}") for s in seeds}
gaps = []
for k in range(len(ft[seeds[0]])):
    steps = ft[seeds[0]][k][0]
    assert all(ft[s][k][0] == steps and sc[s][k][0] == steps for s in seeds), "unequal steps"
    fm = sum(ft[s][k][1] for s in seeds) / len(seeds)
    sm = sum(sc[s][k][1] for s in seeds) / len(seeds)
    gaps.append(fm - sm)
    print(f"{steps:6.0f} " + " ".join(f"{ft[s][k][1]:8.2f} {sc[s][k][1]:8.2f}" for s in seeds)
          + f" {fm:8.2f} {sm:8.2f} {fm - sm:+6.2f}")
print(f"gap at the last step: {gaps[-1]:+.2f} points (bar: >= +5); smallest over the curve: "
      f"{min(gaps):+.2f}")
EOF
echo "total $(($(date +%s) - t0)) s"

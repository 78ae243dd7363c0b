#!/usr/bin/env bash
# bench/transfer.sh - issue 20's transfer benchmark: does starting from pretrained weights with
# a frozen backbone beat training from scratch, at equal steps, in the situation of the issue's
# users (a small folder of their own photos, a few dozen a class)?
#
#  1. Pretrain torchvision's resnet18 on Fashion-MNIST classes 0-4 (T-shirt, trouser, pullover,
#     dress, coat): every training image of those classes (PRE_PER_CLASS, 6000 a class), 5% held
#     out, PRE_EPOCHS epochs, seed 1.  The images go through a photo folder ([data] kind =
#     folder, image_size = IMAGE_SIZE, channels = 3): 28x28 gray PNGs, resized and replicated
#     to RGB by the loader, so the network is torchvision's own (a 3-channel stem; no 1-channel
#     variant exists there).  Its output file is torchvision-named safetensors.
#  2. That file's head (fc, 5 outputs for classes 0-4) is drawn afresh, U(+-1/sqrt(512)) for
#     weight and bias as torch.nn.Linear does, seeded per run, so the new task starts from the
#     backbone alone (the classes match in number, so `init` would otherwise keep the old head).
#  3. The new task, classes 5-9 (sandal, shirt, sneaker, bag, ankle boot): per seed (1, 2, 3),
#     FT_PER_CLASS training images a class drawn at random (by that seed) from the training
#     file, the user's small photo folder; the test set is every image of those classes in the
#     separate test file (1000 a class, so one seed's accuracy is within about +-1 point).
#     Per seed, runs with the same data, steps, optimizer, schedule and evaluation, differing
#     only in [model]:
#       frozen    init = the pretrained file, freeze = backbone (only fc trains): the main row
#       partial   init = the pretrained file, freeze = conv1 bn1 layer1 layer2
#       full      init = the pretrained file, nothing frozen
#       random    init = torchvision's random initialisation, freeze = backbone: the control
#                 (what a linear head on features nobody trained gives)
#       scratch   no init, nothing frozen (torchvision's initialisation, all of it trains)
#     Test accuracy every FT_EVAL_EVERY epochs; the curves, their means over the seeds and
#     the gap of each row to scratch at equal steps are printed.
#
# Environment: GM_TRANSFER_DIR (work folder, default a fresh mktemp -d, removed at the end
# unless GM_TRANSFER_KEEP=1), IMAGE_SIZE (32), PRE_PER_CLASS (6000), PRE_EPOCHS (1),
# FT_PER_CLASS (20), FT_EPOCHS (30), FT_EVAL_EVERY (6), ROWS ("frozen partial full
# random scratch"), SEEDS ("1 2 3"), PAR (runs at a time, 1), PRETRAINED (the pretrained file of an
# earlier run with the same IMAGE_SIZE, PRE_PER_CLASS and PRE_EPOCHS, instead of pretraining
# again: training is deterministic per seed, so it is the same file).  Needs /usr/bin/python3
# with numpy and PIL (Debian) and the dataset at /usr/share/datasets/fashion-mnist.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
FMNIST=${FMNIST:-/usr/share/datasets/fashion-mnist}
IMAGE_SIZE=${IMAGE_SIZE:-32}
PRE_PER_CLASS=${PRE_PER_CLASS:-6000}
PRE_EPOCHS=${PRE_EPOCHS:-1}
FT_PER_CLASS=${FT_PER_CLASS:-20}
FT_EPOCHS=${FT_EPOCHS:-30}
FT_EVAL_EVERY=${FT_EVAL_EVERY:-6}
ROWS=${ROWS:-frozen partial full random scratch}
PRETRAINED=${PRETRAINED:-}
SEEDS=${SEEDS:-1 2 3}
PAR=${PAR:-1}
LR=0.01
if [ ! -f "$FMNIST/train-images-idx3-ubyte.gz" ]; then
    echo "transfer.sh: no Fashion-MNIST at $FMNIST (Debian's dataset-fashion-mnist)" >&2
    exit 77
fi
case " $ROWS " in *" scratch "*) ;; *) echo "transfer.sh: ROWS must hold scratch" >&2; exit 2 ;; esac
make --no-print-directory -s CUDA=0 gradmesh
W=${GM_TRANSFER_DIR:-$(mktemp -d)}
mkdir -p "$W"
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    if [ "${GM_TRANSFER_KEEP:-0}" != 1 ] && [ -z "${GM_TRANSFER_DIR:-}" ]; then rm -rf "$W"; fi
}
trap cleanup EXIT
echo "# $(date -u +%FT%TZ) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); work dir $W"

# the photo folders: pre/ (classes 0-4), per seed ft-S/train (FT_PER_CLASS a class of 5-9,
# drawn by S) and ft-S/val (the test file's classes 5-9, hard links to test/)
/usr/bin/python3 - "$FMNIST" "$W" "$PRE_PER_CLASS" "$FT_PER_CLASS" "$SEEDS" <<'EOF'
import gzip, os, sys
import numpy as np
from PIL import Image
src, out, pre_n, ft_n, seeds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), \
    [int(s) for s in sys.argv[5].split()]
def load(part):
    with gzip.open(os.path.join(src, f"{part}-images-idx3-ubyte.gz")) as f:
        imgs = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28)
    with gzip.open(os.path.join(src, f"{part}-labels-idx1-ubyte.gz")) as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)
    return imgs, labels
def write(d, imgs):
    os.makedirs(d, exist_ok=True)
    for i, a in enumerate(imgs):
        Image.fromarray(a, "L").save(os.path.join(d, f"{i:05d}.png"))
tr, trl = load("train")
te, tel = load("t10k")
for c in range(0, 5):
    write(os.path.join(out, "pre", f"class{c}"), tr[trl == c][:pre_n])
for c in range(5, 10):
    write(os.path.join(out, "test", f"class{c}"), te[tel == c])
for s in seeds:
    rng = np.random.default_rng(s)
    for c in range(5, 10):
        pool = tr[trl == c]
        write(os.path.join(out, f"ft-{s}", "train", f"class{c}"),
              pool[np.sort(rng.choice(len(pool), ft_n, replace=False))])
        d = os.path.join(out, f"ft-{s}", "val", f"class{c}")
        os.makedirs(d)
        for n in sorted(os.listdir(os.path.join(out, "test", f"class{c}"))):
            os.link(os.path.join(out, "test", f"class{c}", n), os.path.join(d, n))
EOF

job() { # name seed epochs out eval_every [init] [freeze]
    local data
    if [ "$1" = pre ]; then
        data="dir        = $W/pre
test_split = 0.05"
    else
        data="dir        = $W/ft-$2
train_dir  = train
val_dir    = val"
    fi
    cat <<EOF
[job]
name    = $1
model   = resnet18
epochs  = $3
seed    = $2
threads = 1
eval_every = $5
out     = $4
checkpoint_dir = $W/ckpt-$1

[data]
kind       = folder
image_size = $IMAGE_SIZE
channels   = 3
$data

[model]
${6:+init = $6}
${7:+freeze = $7}

[optim]
name     = sgd
lr       = $LR
batch    = 32
momentum = 0.9

[schedule]
kind = constant
EOF
}

run() { # name: trains $W/$1.ini, keeps its log, writes "steps accuracy" per evaluation
    "$ROOT/gradmesh" train --local "$W/$1.ini" --no-tensorboard > "$W/$1.log" 2>&1 || {
        echo "transfer.sh: $1 failed:" >&2
        tail -5 "$W/$1.log" >&2
        return 1
    }
    sed -n 's/.*event=epoch epoch=\([0-9]*\) steps=\([0-9]*\) .*test_accuracy=\([0-9.]*\).*/\2 \3/p' \
        "$W/$1.log" > "$W/$1.curve"
}

newhead() { # src dst seed: src with fc drawn afresh from seed
    /usr/bin/python3 - "$@" <<'EOF'
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
}

t0=$(date +%s)
if [ -n "$PRETRAINED" ]; then
    cp "$PRETRAINED" "$W/pre.safetensors"
    echo "pretrained: $PRETRAINED (from an earlier run)"
else
    job pre 1 "$PRE_EPOCHS" "$W/pre.safetensors" 1 > "$W/pre.ini"
    run pre
    echo "pretrain (classes 0-4, $PRE_PER_CLASS images a class, 5% held out, $PRE_EPOCHS epochs," \
        "${IMAGE_SIZE}x$IMAGE_SIZE): test accuracy $(tail -1 "$W/pre.curve" | cut -d' ' -f2)%" \
        "after $(tail -1 "$W/pre.curve" | cut -d' ' -f1) steps ($(($(date +%s) - t0)) s)"
fi
echo "classes 5-9: $FT_PER_CLASS training images a class (drawn per seed), the test file's" \
    "1000 a class; $FT_EPOCHS epochs, batch 32, sgd lr $LR momentum 0.9, constant; rows: $ROWS"

t1=$(date +%s)
for s in $SEEDS; do
    for r in $ROWS; do
        case $r in
        frozen) newhead "$W/pre.safetensors" "$W/init-$r-$s.safetensors" "$s"
            job "$r-$s" "$s" "$FT_EPOCHS" "$W/$r-$s.safetensors" "$FT_EVAL_EVERY" \
                "$W/init-$r-$s.safetensors" backbone ;;
        partial) newhead "$W/pre.safetensors" "$W/init-$r-$s.safetensors" "$s"
            job "$r-$s" "$s" "$FT_EPOCHS" "$W/$r-$s.safetensors" "$FT_EVAL_EVERY" \
                "$W/init-$r-$s.safetensors" "conv1 bn1 layer1 layer2" ;;
        full) newhead "$W/pre.safetensors" "$W/init-$r-$s.safetensors" "$s"
            job "$r-$s" "$s" "$FT_EPOCHS" "$W/$r-$s.safetensors" "$FT_EVAL_EVERY" \
                "$W/init-$r-$s.safetensors" ;;
        random) /usr/bin/python3 tools/torchvision_weights.py resnet18 --classes 5 --seed "$s" \
                --out "$W/init-$r-$s.safetensors" > /dev/null
            job "$r-$s" "$s" "$FT_EPOCHS" "$W/$r-$s.safetensors" "$FT_EVAL_EVERY" \
                "$W/init-$r-$s.safetensors" backbone ;;
        scratch) job "$r-$s" "$s" "$FT_EPOCHS" "$W/$r-$s.safetensors" "$FT_EVAL_EVERY" ;;
        *) echo "transfer.sh: unknown row $r" >&2; exit 2 ;;
        esac > "$W/$r-$s.ini"
        if [ "${#pids[@]}" -ge "$PAR" ]; then
            wait "${pids[0]}"
            pids=("${pids[@]:1}")
        fi
        run "$r-$s" &
        pids+=($!)
    done
done
for p in "${pids[@]}"; do wait "$p"; done
pids=()

/usr/bin/python3 - "$W" "$SEEDS" "$ROWS" <<'EOF'
import sys
w, seeds, rows = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
def curve(name):
    return [tuple(float(v) for v in l.split()) for l in open(f"{w}/{name}.curve")]
c = {(r, s): curve(f"{r}-{s}") for r in rows for s in seeds}
n = len(c[rows[0], seeds[0]])
assert all(len(v) == n for v in c.values()), "unequal curves"
steps = [c[rows[0], seeds[0]][k][0] for k in range(n)]
assert all(v[k][0] == steps[k] for v in c.values() for k in range(n)), "unequal steps"
mean = {r: [sum(c[r, s][k][1] for s in seeds) / len(seeds) for k in range(n)] for r in rows}
print(f"\nclasses 5-9, test accuracy (%) per seed, seeds {' '.join(seeds)}:")
print(f"{'steps':>6} " + "  ".join(" ".join(f"{r[:7] + ' ' + s:>9}" for s in seeds) for r in rows))
for k in range(n):
    print(f"{steps[k]:6.0f} " + "  ".join(" ".join(f"{c[r, s][k][1]:9.2f}" for s in seeds)
                                          for r in rows))
others = [r for r in rows if r != "scratch"]
print(f"\nmean of the seeds, and each row's gap to scratch (points):")
print(f"{'steps':>6} " + " ".join(f"{r:>8}" for r in rows) + " " +
      " ".join(f"{r[:7] + '-scr':>11}" for r in others))
for k in range(n):
    print(f"{steps[k]:6.0f} " + " ".join(f"{mean[r][k]:8.2f}" for r in rows) + " " +
          " ".join(f"{mean[r][k] - mean['scratch'][k]:+11.2f}" for r in others))
for r in others:
    g = [mean[r][k] - mean["scratch"][k] for k in range(n)]
    print(f"{r}: gap at the last step {g[-1]:+.2f} points, smallest {min(g):+.2f}, largest"
          f" {max(g):+.2f} (bar for frozen: >= +5 at equal steps)")
EOF
echo "total $(($(date +%s) - t0)) s (fine-tuning $(($(date +%s) - t1)) s, $PAR at a time);" \
    "load $(cut -d' ' -f1-3 /proc/loadavg)"

#!/usr/bin/env bash
# GPU training speed: gradmesh's CUDA backend against PyTorch on the same GPU in the same run.
# Same model, data (Fashion-MNIST, padded to 32x32 for vgg7 / resnet20), batch (128), fp32
# (TF32 off on both sides), cuDNN on both sides, SGD with momentum 0.9, lr 0.05, one epoch
# each; ROUNDS rounds alternating the two, median samples/s of training (evaluation not
# counted) and the ratio gradmesh / PyTorch.  Targets (issue 12): >= 1.0x, >= 1.3x on LeNet-5.
#   bench/gpu_train_vs_torch.sh [GRADMESH_BINARY]
#   ROUNDS=3  DATA=/usr/share/datasets/fashion-mnist  MODELS="lenet5 vgg7 resnet20"  BATCH=128
#   PYTHON: a python3 whose torch sees the GPU (default: the first of /usr/bin/python3 and
#   python3 that does)
# Exits 77 when no GPU answers (gradmesh's own probe), or PyTorch cannot use one.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-./gradmesh}
rounds=${ROUNDS:-3}
data=${DATA:-/usr/share/datasets/fashion-mnist}
models=${MODELS:-lenet5 vgg7 resnet20}
batch=${BATCH:-128}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

py=""
for p in ${PYTHON:-} /usr/bin/python3 python3; do
    if "$p" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
        py=$p
        break
    fi
done
if [ -z "$py" ]; then
    echo "gpu_train_vs_torch: SKIP: no python3 whose PyTorch sees a GPU (set PYTHON)"
    exit 77
fi
if [ ! -e "$data/train-images-idx3-ubyte.gz" ] && [ ! -e "$data/train-images-idx3-ubyte" ]; then
    echo "gpu_train_vs_torch: no Fashion-MNIST in $data (set DATA)" >&2
    exit 1
fi

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
field() { "$py" -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"; }

printf '%-9s %12s %12s %8s %8s\n' model gradmesh/s pytorch/s ratio target
for model in $models; do
    pad=2
    target=1.0
    [ "$model" = lenet5 ] && pad=0 && target=1.3
    cat >"$tmp/job.ini" <<EOF
[job]
name      = gpu-bench-$model
model     = $model
epochs    = 1
seed      = 1
device    = cuda
log_every = 100000
out       = $tmp/w.safetensors
[data]
kind = idx
dir  = $data
pad  = $pad
[optim]
name     = sgd
lr       = 0.05
momentum = 0.9
batch    = $batch
EOF
    : >"$tmp/gm"
    : >"$tmp/pt"
    for _ in $(seq "$rounds"); do
        if ! "$bin" train --local "$tmp/job.ini" --no-progress --no-tensorboard \
            --summary-json "$tmp/s.json" 2>"$tmp/gm.log"; then
            cat "$tmp/gm.log" >&2
            exit 1
        fi
        if [ "$(field "$tmp/s.json" device)" = cpu ]; then
            echo "gpu_train_vs_torch: gradmesh trained on the CPU:" >&2
            grep -i 'device' "$tmp/gm.log" >&2 || true
            exit 77
        fi
        field "$tmp/s.json" samples_per_s >>"$tmp/gm"
        "$py" bench/torch_peer.py --model "$model" --pad "$pad" --epochs 1 --batch "$batch" \
            --optim sgd --lr 0.05 --momentum 0.9 --device cuda --no-eval --data "$data" \
            >"$tmp/p.json"
        field "$tmp/p.json" samples_per_s >>"$tmp/pt"
    done
    gm=$(median <"$tmp/gm")
    pt=$(median <"$tmp/pt")
    printf '%-9s %12.0f %12.0f %7.2fx %7s\n' "$model" "$gm" "$pt" \
        "$(awk -v a="$gm" -v b="$pt" 'BEGIN { print a / b }')" ">=${target}x"
done
echo "(median of $rounds rounds; batch $batch; SGD momentum 0.9 lr 0.05; fp32, no TF32; 1 epoch"
echo " Fashion-MNIST; GPU: $(field "$tmp/p.json" device); peer: $("$py" -c 'import torch; print("PyTorch", torch.__version__)'))"

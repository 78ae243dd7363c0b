#!/usr/bin/env bash
# What checkpoints cost the training loop (docs/BENCHMARKS.md, "Checkpoint writes"): an MLP
# 784-1024-10 with Adam (a 9.8 MB checkpoint: weights and both moments) on Fashion-MNIST, one
# epoch, batch 64, one thread, `train --local`, with a checkpoint every 25 steps against the
# same run without checkpoints (the peer), rounds alternating the two.  The trainer copies the
# state and a writer thread writes it (train/trainer.c), so the loop waits for the copy only.
# Prints per round both runs' training samples/s and wall seconds, and the median copy_ms
# (what a step waits for) and write_ms (write, fsync, rename, read back, hash) of the
# checkpoints; then the median ratio of samples/s with checkpoints to without.
# Usage: bench/ckpt_stall.sh [BIN] (ROUNDS=n, default 3)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-./gradmesh}
rounds=${ROUNDS:-3}
data=/usr/share/datasets/fashion-mnist
[ -r "$data/train-images-idx3-ubyte.gz" ] || { echo "skip: $data missing"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

job() { # NAME CHECKPOINT_EVERY
    cat >"$tmp/$1.ini" <<JOB
[job]
name = $1
model = mlp
epochs = 1
seed = 1
threads = 1
log_every = 100000
checkpoint_every = $2
checkpoint_keep = 2
checkpoint_dir = $tmp/$1.checkpoints
out = $tmp/$1.safetensors
[model]
hidden = 1024
[data]
kind = idx
dir = $data
[optim]
name = adam
lr = 0.001
batch = 64
JOB
}
job with 25
job without 0
field() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }
ratios=()
for i in $(seq "$rounds"); do
    for c in with without; do
        OPENBLAS_NUM_THREADS=1 "$bin" train --local "$tmp/$c.ini" --summary-json "$tmp/$c.json" \
            2>"$tmp/$c.log" >/dev/null
        rm -rf "$tmp/$c.checkpoints"
    done
    cms=$(grep -o 'copy_ms=[0-9.]*' "$tmp/with.log" | cut -d= -f2 | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    wms=$(grep -o 'write_ms=[0-9.]*' "$tmp/with.log" | cut -d= -f2 | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    n=$(grep -c 'event=checkpoint step=' "$tmp/with.log")
    sw=$(field "$tmp/with.json" samples_per_s)
    so=$(field "$tmp/without.json" samples_per_s)
    r=$(python3 -c "print('%.3f' % ($sw / $so))")
    ratios+=("$r")
    printf 'round %d: with %d checkpoints %.0f samples/s (wall %.1f s, copy_ms median %s, write_ms median %s); without %.0f samples/s (wall %.1f s); ratio %s\n' \
        "$i" "$n" "$sw" "$(field "$tmp/with.json" wall_s)" "$cms" "$wms" "$so" "$(field "$tmp/without.json" wall_s)" "$r"
done
printf '%s\n' "${ratios[@]}" | sort -n | awk '{a[NR]=$1} END {print "median ratio (with / without checkpoints): " a[int((NR+1)/2)]}'

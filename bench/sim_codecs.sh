#!/usr/bin/env bash
# Codec study with simulated workers (docs/BENCHMARKS.md, "Gradient codecs"):
# LeNet-5 on Fashion-MNIST, batch 64 per worker, Adam 1e-3, 5 epochs, 4
# workers; one run per codec, plus PowerSGD without error feedback as the
# negative control.  Prints one line per run: codec, test accuracy, bytes
# sent by all ranks, bytes of the last (steady-state) round, wall seconds.
# Usage: bench/sim_codecs.sh [BIN] [WORKERS] [EPOCHS] [CASES...]
#   cases: fp32 fp16 powersgd powersgd-noef diloco diloco8 (default: all); SEED=n (default 1)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-./gradmesh}
workers=${2:-4}
epochs=${3:-5}
shift $(( $# < 3 ? $# : 3 ))
cases=${*:-fp32 fp16 powersgd powersgd-noef diloco diloco8}
data=/usr/share/datasets/fashion-mnist
[ -r "$data/train-images-idx3-ubyte.gz" ] || { echo "skip: $data missing"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for c in $cases; do
    codec=${c%-noef}
    extra=()
    [ "$c" = powersgd-noef ] && extra=(--no-error-feedback)
    comm="codec = $codec"
    [ "$codec" = powersgd ] && comm+=$'\nrank = 2'
    case $codec in diloco | diloco8) comm+=$'\nlocal_steps = 16\nouter_lr = 0.7\nouter_momentum = 0.9' ;; esac
    cat >"$tmp/$c.ini" <<JOB
[job]
name = sim-$c
model = lenet5
epochs = $epochs
seed = ${SEED:-1}
log_every = 100000
out = $tmp/$c.safetensors
[data]
kind = idx
dir = $data
[optim]
name = adam
lr = 0.001
batch = 64
[comm]
$comm
JOB
    t0=$(date +%s.%N)
    "$bin" train --local "$tmp/$c.ini" --no-progress --simulate-workers "$workers" \
        --summary-json "$tmp/$c.json" "${extra[@]}" 2>"$tmp/$c.log" || {
        echo "FAIL $c"; tail -5 "$tmp/$c.log"; exit 1; }
    t1=$(date +%s.%N)
    last=$(grep -o 'last_round_bytes=[0-9]*' "$tmp/$c.log" | cut -d= -f2)
    rounds=$(grep -o ' rounds=[0-9]*' "$tmp/$c.log" | cut -d= -f2)
    python3 - "$tmp/$c.json" "$c" "$last" "$rounds" "$t0" "$t1" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
print("%-14s acc=%.2f bytes_sent=%d rounds=%s last_round_bytes=%s steps=%d wall_s=%.1f" % (
    sys.argv[2], s["test_accuracy"], s["bytes_sent"], sys.argv[4], sys.argv[3], s["steps"],
    float(sys.argv[6]) - float(sys.argv[5])))
PY
done

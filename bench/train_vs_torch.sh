#!/usr/bin/env bash
# Single-machine training speed: gradmesh vs PyTorch (Debian python3-torch),
# same model, data, batch (64), optimizer (Adam 1e-3), one thread each,
# one epoch of Fashion-MNIST.  Runs ROUNDS rounds alternating the two (so
# load on the machine hits both alike) and reports the median samples/s of
# each and their ratio, plus gradmesh's peak RSS on LeNet-5.
#   bench/train_vs_torch.sh [GRADMESH_BINARY]     ROUNDS=3 by default
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-./gradmesh}
rounds=${ROUNDS:-3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

printf '%-8s %14s %14s %8s %12s\n' model gradmesh/s pytorch/s ratio gm_rss_mb
for model in lenet5 mlp; do
    hidden=256
    : >"$tmp/gm" ; : >"$tmp/pt"; : >"$tmp/rss"
    for r in $(seq "$rounds"); do
        "$bin" train --local "bench/jobs/$model.ini" --no-progress \
            --summary-json "$tmp/s.json" 2>"$tmp/gm.log" || { cat "$tmp/gm.log"; exit 1; }
        python3 -c "import json;d=json.load(open('$tmp/s.json'));print(d['samples_per_s'])" >>"$tmp/gm"
        python3 -c "import json;d=json.load(open('$tmp/s.json'));print(d['peak_rss_mb'])" >>"$tmp/rss"
        /usr/bin/python3 bench/torch_peer.py --model "$model" --hidden "$hidden" --epochs 1 \
            --batch 64 --threads 1 --no-eval >"$tmp/p.json"
        python3 -c "import json;print(json.load(open('$tmp/p.json'))['samples_per_s'])" >>"$tmp/pt"
    done
    gm=$(median <"$tmp/gm"); pt=$(median <"$tmp/pt"); rss=$(sort -g "$tmp/rss" | tail -1)
    printf '%-8s %14.0f %14.0f %7.2fx %12.1f\n' "$model" "$gm" "$pt" \
        "$(awk -v a="$gm" -v b="$pt" 'BEGIN { print a / b }')" "$rss"
done
echo "(median of $rounds rounds each; 1 thread; batch 64; Adam lr 1e-3; 1 epoch Fashion-MNIST;"
echo " peer: $(/usr/bin/python3 -c 'import torch; print("PyTorch", torch.__version__)'))"

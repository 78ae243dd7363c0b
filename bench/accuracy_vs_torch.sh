#!/usr/bin/env bash
# Accuracy against PyTorch with the same recipe: Fashion-MNIST, Adam lr 1e-3,
# batch 64, 5 epochs, LeNet-5 and the MLP (784-256-10), seeds 1..10.  Prints
# each run and the means; checks issue 2's bars (LeNet-5 >= 88.0%, MLP >=
# 86.5%, each within 0.5 points of PyTorch's mean) and exits 1 if one fails.
# Ten seeds by default: one run moves by about +-1 point with the seed, so a
# 3-seed mean (the issue's minimum; SEEDS="1 2 3") carries noise the size of
# the bars (docs/BENCHMARKS.md has both).  ~25 minutes on 2 quiet cores.
#   bench/accuracy_vs_torch.sh [GRADMESH_BINARY]   SEEDS="1 ... 10" EPOCHS=5 MODELS="lenet5 mlp"
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-./gradmesh}
seeds=${SEEDS:-1 2 3 4 5 6 7 8 9 10}
epochs=${EPOCHS:-5}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

status=0
for model in ${MODELS:-lenet5 mlp}; do
    gm_sum=0 pt_sum=0 n=0
    for seed in $seeds; do
        sed -e "s/^seed .*/seed      = $seed/; s/^epochs .*/epochs    = $epochs/" \
            "bench/jobs/$model.ini" >"$tmp/job.ini"
        "$bin" train --local "$tmp/job.ini" --no-progress --summary-json "$tmp/s.json" \
            --out "$tmp/w.safetensors" 2>"$tmp/log" || { cat "$tmp/log"; exit 1; }
        gm=$(python3 -c "import json;print(json.load(open('$tmp/s.json'))['test_accuracy'])")
        pt=$(/usr/bin/python3 bench/torch_peer.py --model "$model" --hidden 256 --epochs "$epochs" \
            --batch 64 --seed "$seed" --threads 1 |
            python3 -c "import json,sys;print(json.load(sys.stdin)['test_accuracy'])")
        printf '%-7s seed %s  gradmesh %6.2f%%  pytorch %6.2f%%\n' "$model" "$seed" "$gm" "$pt"
        gm_sum=$(awk -v a="$gm_sum" -v b="$gm" 'BEGIN { print a + b }')
        pt_sum=$(awk -v a="$pt_sum" -v b="$pt" 'BEGIN { print a + b }')
        n=$((n + 1))
    done
    bar=88.0; [ "$model" = mlp ] && bar=86.5
    verdict=$(awk -v g="$gm_sum" -v p="$pt_sum" -v n="$n" -v bar="$bar" 'BEGIN {
        gm = g / n; pt = p / n; d = gm - pt;
        ok = (gm >= bar && d <= 0.5 && d >= -0.5) ? "ok" : "FAIL";
        printf "%s mean: gradmesh %.2f%%  pytorch %.2f%%  diff %+.2f  (bar %.1f%%, |diff| <= 0.5) %s",
               "'"$model"'", gm, pt, d, bar, ok }')
    echo "$verdict"
    case "$verdict" in *FAIL) status=1 ;; esac
done
exit $status

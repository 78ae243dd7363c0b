#!/usr/bin/env bash
# make bench: every benchmark, each printing a ratio against a peer measured
# in the same run.  Usage: bench/run.sh [GRADMESH_BINARY]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-./gradmesh}
bash .ci/deps.sh bench
bash bench/train_vs_torch.sh "$bin"
for b in bench/bench_*.sh; do
    [ -e "$b" ] || continue
    bash "$b" "$bin"
done

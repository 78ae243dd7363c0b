#!/usr/bin/env bash
# bench/dist_train.sh - data-parallel training speed on loopback (issue 10,
# "Done when" 4): LeNet-5 on Fashion-MNIST, batch 64 per worker, Adam 1e-3,
# one thread per worker, each worker pinned to its own core (taskset -c RANK),
# 2 workers against 1, for
#   gradmesh  2 agents running one job (`gradmesh submit`) vs 1 agent (see
#             gradmesh_train below: TO FILL once jobs land on main); bar >= 1.6x;
#   pytorch   DDP over gloo, 2 processes vs 1 plain process
#             (bench/torch_ddp.py; measured before at about 1.01x), for contrast.
# samples/s = workers x 64 x timed steps / the slowest worker's time, after
# $WARMUP untimed steps.  Each round runs 1 then 2 workers of each side, back
# to back; reported: the median samples/s and the median of the rounds' own
# 2/1 ratios (the machine is shared, and a round's two runs see similar load).
#
# Usage: bench/dist_train.sh [GRADMESH_BINARY]     ROUNDS=3 STEPS=400 WARMUP=20 MODEL=lenet5
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-./gradmesh}
rounds=${ROUNDS:-3}
steps=${STEPS:-400}
warmup=${WARMUP:-20}
model=${MODEL:-lenet5}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
ncpu=$(getconf _NPROCESSORS_ONLN)
[ "$ncpu" -ge 2 ] || { echo "SKIP: needs 2 cores to pin 2 workers apart"; exit 77; }

# pytorch_train N: prints samples/s of N workers, worker r on core r.
pytorch_train() {
    local n=$1 r pids=() rc=0
    rm -f "$tmp/rdv"
    for r in $(seq 0 $((n - 1))); do
        timeout 300 taskset -c "$r" /usr/bin/python3 bench/torch_ddp.py --model "$model" --world "$n" \
            --rank "$r" --rdv "$tmp/rdv" --steps "$steps" --warmup "$warmup" \
            >"$tmp/pt$r.json" 2>"$tmp/pt$r.err" &
        pids+=($!)
    done
    for r in "${!pids[@]}"; do wait "${pids[$r]}" || rc=$?; done
    if [ $rc -ne 0 ]; then cat "$tmp"/pt*.err >&2; return 1; fi
    python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['samples_per_s'])" "$tmp/pt0.json"
}

# --- gradmesh side: TO FILL ---------------------------------------------------
# Contract: gradmesh_train N prints the samples/s of one LeNet-5 job (batch 64
# per agent, Adam 1e-3, $steps timed steps after $warmup) run by N agents on
# loopback, agent r started under `taskset -c r` with one thread, each with
# its own config and state directory (init, token create, join; then
# `gradmesh submit` and the job's samples_per_s from `status --json` or the
# summary).  N=1 is one agent running the same job alone.
# Until jobs are on main this returns 77 and the gradmesh row shows "-".
gradmesh_train() { # N
    : "$bin"
    echo "gradmesh distributed training: not built yet (needs gradmesh submit)" >&2
    return 77
}
# -----------------------------------------------------------------------------

echo "# $(date -u +%FT%TZ) $ncpu cores, load $(cut -d' ' -f1-3 /proc/loadavg)," \
    "$(/usr/bin/python3 -c 'import torch; print("PyTorch", torch.__version__)'), $model," \
    "batch 64/worker, $steps steps after $warmup"
for r in $(seq "$rounds"); do
    for impl in gradmesh pytorch; do
        for n in 1 2; do
            rc=0
            sps=$("${impl}_train" "$n" 2>"$tmp/err") || rc=$?
            if [ $rc -eq 77 ]; then
                [ "$r" -gt 1 ] || [ "$n" -gt 1 ] || sed 's/^/# /' "$tmp/err"
                continue
            fi
            [ $rc -eq 0 ] || { echo "$impl with $n workers failed:"; cat "$tmp/err"; exit 1; }
            printf 'round %d: %-8s %d worker(s) %10.0f samples/s\n' "$r" "$impl" "$n" "$sps"
            echo "$impl $n $sps $r" >>"$tmp/all"
        done
    done
done

python3 - "$tmp/all" "$rounds" <<'PY'
import statistics, sys
v, per = {}, {}
for line in open(sys.argv[1]):
    impl, n, sps, r = line.split()
    v.setdefault((impl, int(n)), []).append(float(sps))
    per.setdefault((impl, r), {})[int(n)] = float(sps)
m = {k: statistics.median(x) for k, x in v.items()}
print(f"\nmedians of {sys.argv[2]} round(s)")
print(f"{'':<9} {'1 worker':>10} {'2 workers':>10} {'2/1':>7} {'rounds 2/1':>24}")
for impl, bar in (("gradmesh", " (bar >= 1.6x)"), ("pytorch", " (DDP gloo, contrast)")):
    one, two = m.get((impl, 1)), m.get((impl, 2))
    rs = sorted(d[2] / d[1] for (i, _), d in per.items() if i == impl and 1 in d and 2 in d)
    r = f"{statistics.median(rs):.2f}x" if rs else "-"
    f = lambda x: f"{x:.0f}" if x else "-"
    print(f"{impl:<9} {f(one):>10} {f(two):>10} {r:>7} {' '.join(f'{x:.2f}' for x in rs) or '-':>24}{bar}")
print("2/1: median of the per-round ratios")
PY

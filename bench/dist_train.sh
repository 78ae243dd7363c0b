#!/usr/bin/env bash
# bench/dist_train.sh - data-parallel training speed on loopback (issue 10,
# "Done when" 4): LeNet-5 on Fashion-MNIST, batch 64 per worker, Adam 1e-3,
# one thread per worker, each worker pinned to its own core (taskset -c RANK),
# 2 workers against 1, for
#   gradmesh  2 agents running one job (`gradmesh submit`) vs 1 agent, one
#             epoch (see gradmesh_train below); bar >= 1.6x;
#   pytorch   DDP over gloo, 2 processes vs 1 plain process
#             (bench/torch_ddp.py; measured before at about 1.01x), for contrast.
# PyTorch: samples/s = workers x 64 x timed steps / the slowest worker's time,
# after $WARMUP untimed steps; gradmesh: the job summary's (one epoch; see
# below).  Each round runs 1 then 2 workers of each side, back
# to back; reported: the median samples/s and the median of the rounds' own
# 2/1 ratios (the machine is shared, and a round's two runs see similar load).
#
# Usage: bench/dist_train.sh [GRADMESH_BINARY]     ROUNDS=3 STEPS=400 WARMUP=20 MODEL=lenet5
#   IMPLS="gradmesh pytorch" (either alone to time one side)
#   PIN=0 starts the agents unpinned (a diagnosis, not the issue's setup); KEEP=1 keeps
#   the agents' configs and logs.  DEVICE=cuda trains gradmesh's job on the GPU ([job]
#   device; bench/gpu_check.sh's dist part), DATA another Fashion-MNIST folder.
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

# --- gradmesh: real agents on loopback --------------------------------------
# Two clusters, made once per run: "solo" (one agent, a0) and "duo" (d0, which
# inits and coordinates, and d1, which joins with a token); each agent has its
# own config and state directory under $tmp and runs under `taskset -c RANK`
# (all its threads: loop, trainer, libuv pool on that core).  A measurement is
# one `gradmesh submit --follow` of $tmp/jobN.ini (bench/jobs/$model.ini
# without its out line, so the weights land in the coordinator's state
# directory, and with global_batch = 64 N): one epoch, 64 per agent,
# threads = 1.  samples/s is the job summary's (rank 0: steps x global batch /
# training seconds, evaluation excluded), printed by submit.
agent_pids=()
gm_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
gm_poll() { # DESC CMD...: polls every 50 ms for up to 30 s
    local desc=$1 i; shift
    for i in $(seq 600); do "$@" >/dev/null 2>&1 && return 0; sleep 0.05; done
    echo "timed out waiting for $desc (logs under $tmp)" >&2
    tail -n 20 "$tmp"/*.log >&2
    return 1
}
gm_members_up() { # NODE N: NODE lists N other members up
    "$bin" status --json --config "$tmp/$1.conf" | python3 -c 'import json,sys
d = json.load(sys.stdin)
sys.exit(0 if sum(m["state"] == "up" for m in d["members"]) >= int(sys.argv[1]) else 1)' "$2"
}
gm_agent() { # NODE CORE
    local pin=(taskset -c "$2")
    [ "${PIN:-1}" = 1 ] || pin=()
    "${pin[@]}" "$bin" agent --config "$tmp/$1.conf" 2>>"$tmp/$1.log" &
    agent_pids+=($!)
    gm_poll "agent $1" "$bin" status --config "$tmp/$1.conf"
}
gm_setup() { # in the main shell (not $(...)): agent_pids must reach gm_stop
    local tok
    case "$bin" in /*) ;; *) bin=$PWD/$bin ;; esac
    # 64 per agent, said as the global batch: the agents' trainer fixes the global batch
    # when it starts, before the first group tells it the world size
    local edit=(-e '/^out /d')
    [ -z "${DEVICE:-}" ] || edit+=(-e "s|^\[job\]|[job]\ndevice = $DEVICE|")
    [ -z "${DATA:-}" ] || edit+=(-e "s|^dir .*|dir  = $DATA|")
    sed "${edit[@]}" -e 's/^batch .*/global_batch = 64/' "bench/jobs/$model.ini" >"$tmp/job1.ini"
    sed "${edit[@]}" -e 's/^batch .*/global_batch = 128/' "bench/jobs/$model.ini" >"$tmp/job2.ini"
    "$bin" init --metrics off --cluster solo --node a0 --config "$tmp/a0.conf" --state "$tmp/a0" \
        --listen "127.0.0.1:$(gm_port)" --multicast off >/dev/null 2>>"$tmp/setup.log"
    gm_agent a0 0
    "$bin" init --metrics off --cluster duo --node d0 --config "$tmp/d0.conf" --state "$tmp/d0" \
        --listen "127.0.0.1:$(gm_port)" --multicast off >/dev/null 2>>"$tmp/setup.log"
    gm_agent d0 0
    tok=$("$bin" token create --config "$tmp/d0.conf")
    "$bin" join --metrics off "$tok" --node d1 --peer "$(sed -n '/^\[node\]/,/^\[/s/^listen *= *//p' "$tmp/d0.conf")" \
        --config "$tmp/d1.conf" --state "$tmp/d1" --listen "127.0.0.1:$(gm_port)" \
        --multicast off >/dev/null 2>>"$tmp/setup.log"
    gm_agent d1 1
    gm_poll "d0 and d1 linked" gm_members_up d0 1 && gm_poll "d1 and d0 linked" gm_members_up d1 1
}
gm_stop() {
    local p
    for p in "${agent_pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${agent_pids[@]}"; do wait "$p" 2>/dev/null || true; done
    agent_pids=()
}
gradmesh_train() { # N: samples/s of one job on N agents
    local node=a0 line
    [ "$1" -eq 1 ] || node=d0
    "$bin" submit "$tmp/job$1.ini" --follow --config "$tmp/$node.conf" >"$tmp/submit.out" ||
        { cat "$tmp/submit.out" >&2; return 1; }
    # N agents at 64 each take 60000 / (64 N) steps an epoch: proof that all N trained
    line=$(grep " done: .*, $((60000 / (64 * $1))) steps, " "$tmp/submit.out") ||
        { cat "$tmp/submit.out" >&2; return 1; }
    sed -n 's/.*steps, \([0-9.]*\) samples\/s.*/\1/p' <<<"$line"
}
# -----------------------------------------------------------------------------
trap 'gm_stop; if [ "${KEEP:-0}" = 1 ]; then echo "kept $tmp" >&2; else rm -rf "$tmp"; fi' EXIT

echo "# $(date -u +%FT%TZ) $ncpu cores, load $(cut -d' ' -f1-3 /proc/loadavg)," \
    "$(/usr/bin/python3 -c 'import torch; print("PyTorch", torch.__version__)'), $model," \
    "batch 64/worker, $steps steps after $warmup"
gm_setup
for r in $(seq "$rounds"); do
    for impl in ${IMPLS:-gradmesh pytorch}; do
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

#!/usr/bin/env bash
# bench/chaos.sh - gray and crash failures against a running job (issue 23): 4 agents train one
# job (LeNet-5 on Fashion-MNIST, 6 epochs of global batch 192: about a minute on a loaded 2-core
# machine) undisturbed, under a disturbance, and undisturbed again, on a fresh cluster per run; bench/chaos.py drives
# the disturbance and prints the figures. Modes:
#   kill           every 20 s one agent drawn at random (the chief included) gets SIGKILL and is
#                  restarted 4 s later (PERIOD, DOWN)
#   freeze-member  10 s in (START), a member that is not the chief gets SIGSTOP for 20 s (FREEZE)
#   freeze-chief   the same with the chief
#   partition      10 s in, a member that is not the chief is cut off for 20 s: its eth0 goes
#                  down in its network namespace (the 4 agents on one bridge, one namespace
#                  each; root and `ip netns`, else this mode is skipped)
# Each run prints: completed or not, accuracy against the undisturbed run, goodput (undisturbed
# wall / disturbed wall, each from submit to the job's end seen on its coordinator; undisturbed:
# the mean of the runs before and after, as the load of a shared machine drifts), steps
# recomputed, per failure the time to detect it (the first survivor's link-down naming the
# node) and to the survivors' next step (the first step after a group formed after it),
# chiefs seen (term:node) and whether each term had one; and the load average.
#
#   bench/chaos.sh [GRADMESH_BINARY]     MODES="kill freeze-member freeze-chief partition"
#   RUNS=1 (runs per mode, seeds 1..RUNS)  EPOCHS=6  KEEP=1 keeps the logs; OUT=DIR collects
#   one JSON per run (default: a temporary folder, removed).
# The machine is shared: every run's load average is printed beside its figures.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
GM=${1:-./gradmesh}
case "$GM" in /*) ;; *) GM="$PWD/$GM" ;; esac
[ -x "$GM" ] || { echo "no gradmesh binary at $GM"; exit 1; }
MODES=${MODES:-kill freeze-member freeze-chief partition}
RUNS=${RUNS:-1}
EPOCHS=${EPOCHS:-6}
DATA=${GM_DATASET:-/usr/share/datasets/fashion-mnist}
[ -r "$DATA/train-images-idx3-ubyte.gz" ] || { echo "SKIP: no Fashion-MNIST at $DATA"; exit 77; }
BASE=$(mktemp -d /tmp/gm-chaos.$$.XXXXXX)
OUT=${OUT:-$BASE/out}
mkdir -p "$OUT"
PIDS=()
WORK=$BASE # netns.bash keeps its logs here
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill -CONT "$p" 2>/dev/null; kill "$p" 2>/dev/null; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
    if [ "${KEEP:-0}" = 1 ]; then echo "kept $BASE"; else rm -rf "$BASE"; fi
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# up D NAME N: NAME's status lists N members up
up() { "$GM" status --json --config "$1/$2.conf" 2>/dev/null |
    python3 -c 'import json,sys; d=json.load(sys.stdin); sys.exit(0 if sum(m["state"]=="up" for m in d["members"])=='"$3"' else 1)'; }
poll() { local n=$1 i; shift; for i in $(seq "$n"); do "$@" && return 0; sleep 0.1; done; return 1; }

NETNS=0
case " $MODES " in *" partition "*)
    if [ "$(id -u)" -eq 0 ] && ip netns add "chaosprobe$$" 2>/dev/null; then
        ip netns del "chaosprobe$$"
        NB_PREFIX=chaos$$-
        . tests/integration/netns.bash
        nb_require
        nb_bridge lan
        i=1
        for h in a b c d; do nb_host $h; nb_lan lan $h eth0 10.74.23.$i/24; i=$((i + 1)); done
        NETNS=1
    else
        echo "partition: SKIP (needs root and ip netns)"
    fi ;;
esac

# start D NAME NETNS: the agent of D/NAME.conf, in namespace host NETNS ("-": none)
start() {
    if [ "$3" = - ]; then
        "$GM" agent --config "$1/$2.conf" 2>>"$1/$2.log" &
        PIDS+=($!)
        echo "$2 $1/$2.conf $1/$2.log - $!" >>"$1/agents"
    else
        nb_spawn "$3" "$1/$2.log" "$GM" agent --config "$1/$2.conf"
        PIDS+=("$NB_LAST_PID")
        echo "$2 $1/$2.conf $1/$2.log $(nb_ns "$3") $NB_LAST_PID" >>"$1/agents"
    fi
    poll 200 "$GM" status --config "$1/$2.conf" >/dev/null 2>&1 || fail "agent $2 did not start"
}
# in_host HOST CMD...: CMD in namespace host HOST ("-": here)
in_host() { local h=$1; shift; if [ "$h" = - ]; then "$@"; else nb_exec "$h" "$@"; fi; }
# cluster D NETNS(0|1): a, b, c, d, every agent started, all linked
cluster() {
    local d=$1 ns=$2 h listen i=1 tok x=-
    for h in a b c d; do
        if [ "$ns" = 1 ]; then listen=10.74.23.$i:7452; x=$h; else listen=127.0.0.1:$(free_port); fi
        if [ $h = a ]; then
            in_host "$x" "$GM" init --metrics off --cluster chaos --node a --config "$d/a.conf" \
                --state "$d/a" --listen "$listen" --multicast off >/dev/null 2>>"$d/cli.log" || fail "init"
        else
            tok=$("$GM" token create --config "$d/a.conf" 2>>"$d/cli.log") || fail "token"
            in_host "$x" "$GM" join --metrics off "$tok" --peer "$(sed -n 's/^listen *= *//p' "$d/a.conf" | head -n 1)" \
                --node $h --config "$d/$h.conf" --state "$d/$h" --listen "$listen" --multicast off \
                >/dev/null 2>>"$d/cli.log" || fail "join $h"
        fi
        start "$d" $h "$x"
        i=$((i + 1))
    done
    for h in a b c d; do poll 600 up "$d" $h 3 || fail "$h not linked to the 3 others"; done
}

for seed in $(seq "$RUNS"); do # every mode once, then again: a run cut short still has each
    for mode in $MODES; do
        ns=0
        if [ "$mode" = partition ]; then
            [ "$NETNS" = 1 ] || continue
            ns=1
        fi
        d=$BASE/$mode-$seed
        mkdir -p "$d"
        cluster "$d" $ns
        cat >"$d/job.ini" <<EOF
[job]
name = chaos
model = lenet5
epochs = $EPOCHS
seed = 1
threads = 1
log_every = 1
checkpoint_every = 100
[data]
kind = idx
dir = $DATA
[optim]
name = adam
lr = 0.001
global_batch = 192
[schedule]
kind = cosine
[comm]
codec = fp32
EOF
        echo "== $mode, run $seed ($(uptime | sed 's/.*load/load/'))"
        python3 bench/chaos.py "$mode" "$GM" "$d/agents" "$d/job.ini" "$OUT/$mode-$seed.json" "$seed" \
            2>"$d/chaos.err" || { cat "$d/chaos.err"; echo "$mode run $seed: the driver failed"; }
        # every agent of this run stops before the next (the driver stopped its own restarts)
        for p in "${PIDS[@]}"; do kill -CONT "$p" 2>/dev/null; kill "$p" 2>/dev/null; done
        for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
        PIDS=()
    done
done
echo "figures: $OUT"

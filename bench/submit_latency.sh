#!/usr/bin/env bash
# What the coordinator's checks at submit cost (issue 23): the trainer's own check of the job
# (gm_trainer_check: Fashion-MNIST opened as the run opens it, the model built once) runs on
# the threadpool beside the members' dataset hashing.  Two agents on loopback per binary; the
# time from `gradmesh submit JOB` (without --follow: it returns once the job runs) to its
# return, the job cancelled at once, ROUNDS rounds, the two binaries interleaved round by round.
# Prints each round, the medians and the ratio A/B, and the load (uptime) before and after.
#   bench/submit_latency.sh [A_BINARY [B_BINARY]]   ROUNDS=5
#   A: ./gradmesh (this tree); B: a baseline build (e.g. of the commit before the check)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
A=$(realpath "${1:-./gradmesh}")
B=$(realpath "${2:?give a baseline binary as the second argument}")
ROUNDS=${ROUNDS:-5}
DATA=${GM_DATASET:-/usr/share/datasets/fashion-mnist}
W=$(mktemp -d /tmp/gm-bench-submit.XXXXXX)
PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
    rm -rf "$W"
}
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
up() { "$1" status --json --config "$2" 2>/dev/null | python3 -c 'import json,sys; sys.exit(0 if any(m["state"]=="up" for m in json.load(sys.stdin)["members"]) else 1)'; }

# cluster X BIN: two agents of BIN under $W/X, linked
cluster() {
    local x=$1 bin=$2 tok
    "$bin" init --metrics off --cluster "bench${x,,}" --node a --config "$W/$x/a.conf" --state "$W/$x/a" \
        --listen 127.0.0.1:"$(port)" --multicast off >/dev/null 2>"$W/$x/init.err" || { cat "$W/$x/init.err"; exit 1; }
    "$bin" agent --config "$W/$x/a.conf" 2>"$W/$x/a.log" &
    PIDS+=($!)
    for i in $(seq 100); do "$bin" status --config "$W/$x/a.conf" >/dev/null 2>&1 && break; sleep 0.1; done
    tok=$("$bin" token create --config "$W/$x/a.conf" 2>/dev/null) || exit 1
    "$bin" join --metrics off "$tok" --node b --peer "$(sed -n '/^\[node\]/,/^\[/s/^listen *= *//p' "$W/$x/a.conf")" \
        --config "$W/$x/b.conf" --state "$W/$x/b" --listen 127.0.0.1:"$(port)" --multicast off >/dev/null 2>&1 || exit 1
    "$bin" agent --config "$W/$x/b.conf" 2>"$W/$x/b.log" &
    PIDS+=($!)
    for i in $(seq 200); do up "$bin" "$W/$x/a.conf" && up "$bin" "$W/$x/b.conf" && break; sleep 0.1; done
}
mkdir -p "$W/A" "$W/B"
cluster A "$A"
cluster B "$B"
cat >"$W/job.ini" <<EOF
[job]
name = lat
model = lenet5
epochs = 50
[data]
kind = idx
dir = $DATA
[optim]
name = adam
lr = 0.001
global_batch = 128
[comm]
codec = fp32
EOF

# once BIN X: seconds from submit to its return (the job running), then the job cancelled
once() {
    local bin=$1 x=$2 t0 t1 id
    t0=$(date +%s.%N)
    "$bin" submit "$W/job.ini" --config "$W/$x/a.conf" >"$W/out" 2>&1 || { cat "$W/out"; exit 1; }
    t1=$(date +%s.%N)
    id=$(sed -n 's/^job \([0-9a-f]*\) submitted.*/\1/p' "$W/out")
    "$bin" cancel "$id" --config "$W/$x/a.conf" >/dev/null 2>&1
    for i in $(seq 300); do
        "$bin" jobs --json --config "$W/$x/a.conf" | python3 -c 'import json,sys; sys.exit(0 if all(j["state"] not in ("checking","running") for j in json.load(sys.stdin)["jobs"]) else 1)' && break
        sleep 0.1
    done
    python3 -c "print(f'{$t1 - $t0:.3f}')"
}
echo "load before: $(uptime)"
ta=() tb=()
for r in $(seq "$ROUNDS"); do
    a=$(once "$A" A); b=$(once "$B" B)
    ta+=("$a"); tb+=("$b")
    echo "round $r: A $a s  B $b s"
done
echo "load after: $(uptime)"
python3 - "${ta[*]}" "${tb[*]}" <<'EOF'
import statistics, sys
a = [float(x) for x in sys.argv[1].split()]
b = [float(x) for x in sys.argv[2].split()]
ma, mb = statistics.median(a), statistics.median(b)
print(f"submit to running, median of {len(a)}: A {ma:.3f} s  B {mb:.3f} s  A/B {ma / mb:.2f}")
EOF

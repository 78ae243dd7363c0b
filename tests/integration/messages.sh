#!/usr/bin/env bash
# tests/integration/messages.sh - the messages a person reads when something is wrong say what
# is wrong and what to do (issue 24's list), and a terminal gets no event=... line first.
#
#   a1 (admitter, loopback)  <-  joins that fail in each way
#
# - train --resume /nonexistent: names the path and what to give instead (exit 78), not
#   "no readable .sha256 file";
# - join --peer at a closed port: "nothing accepts connections at ..." (not "Connection
#   refused: Connection refused (no detail)"); --peer nohost: wants HOST:PORT; an unresolvable
#   host: "cannot resolve" (not "Invalid argument");
# - join with a node name the cluster has: says so and names --node (not "File exists: ...");
# - a used token: on a terminal (script(1)) the readable line alone, no event=... err=-4007
#   line before it; with stderr to a file, the event line is still there (logs keep it);
# - a CPU-only run on a machine without a driver does not log the CUDA runtime's "driver
#   version is insufficient".
set -uo pipefail
cd "$(dirname "$0")/../.."
. tests/integration/lib.bash

# --- train --resume of nothing ------------------------------------------------------------------
DATA=${GM_DATASET:-/usr/share/datasets/fashion-mnist}
job_ini "$WORK/t.ini" msg-mlp model.hidden=8 optim.batch=256
"$GM" train --local "$WORK/t.ini" --resume /nonexistent --no-tensorboard >"$WORK/resume.out" 2>&1; rc=$?
[ $rc -eq 78 ] || fail "--resume /nonexistent: exit $rc $(cat "$WORK/resume.out")"
grep -q "gradmesh train: --resume /nonexistent: No such file or directory; give a checkpoint file or the directory" "$WORK/resume.out" ||
    fail "--resume /nonexistent said: $(cat "$WORK/resume.out")"
grep -q "sha256" "$WORK/resume.out" && fail "--resume /nonexistent still talks of .sha256: $(cat "$WORK/resume.out")"
pass "--resume /nonexistent: $(cat "$WORK/resume.out")"

make_cluster mlab a1
A1=$(sed -n '/^\[node\]/,/^\[/s/^listen *= *//p' "$WORK/a1.conf")
tok() { "$GM" token create --config "$WORK/a1.conf" 2>>"$WORK/cli.log"; }
# join_msg NAME TOKEN ARGS...: a join of node x (exit status in rc, stderr in NAME.err)
join_msg() {
    local name=$1 t=$2; shift 2
    "$GM" join "$t" --config "$WORK/$name.conf" --state "$WORK/$name" --node x \
        --listen 127.0.0.1:"$(free_port)" --multicast off --metrics off "$@" >"$WORK/$name.out" 2>"$WORK/$name.err"
    rc=$?
}

# --- unreachable and malformed --peer --------------------------------------------------------
T=$(tok) || fail "token"
closed=$(free_port)
join_msg refused "$T" --peer 127.0.0.1:$closed
[ $rc -eq 1 ] || fail "closed --peer: exit $rc"
grep -qx "gradmesh join: nothing accepts connections at 127.0.0.1:$closed: is the admitter's agent running (gradmesh agent), and is 127.0.0.1:$closed its \[node\] listen address?" "$WORK/refused.err" ||
    fail "closed --peer said: $(cat "$WORK/refused.err")"
grep -q "Connection refused: Connection refused" "$WORK/refused.err" && fail "closed --peer: the old words"
join_msg nohost "$T" --peer nohost
[ $rc -ne 0 ] && grep -qx "gradmesh join: --peer nohost: want HOST:PORT, the admitter's \[node\] listen address (e.g. 10.8.0.1:7450)" "$WORK/nohost.err" ||
    fail "--peer nohost: exit $rc $(cat "$WORK/nohost.err")"
join_msg unres "$T" --peer nohost.invalid:7450
[ $rc -ne 0 ] && grep -q "^gradmesh join: --peer nohost.invalid:7450: cannot resolve 'nohost.invalid': check the name" "$WORK/unres.err" ||
    fail "--peer nohost.invalid:7450: exit $rc $(cat "$WORK/unres.err")"
grep -q "Invalid argument" "$WORK/nohost.err" "$WORK/unres.err" && fail "--peer: still 'Invalid argument'"
pass "unreachable, malformed and unresolvable --peer say what is wrong and what to do"

# --- a node name the cluster has -------------------------------------------------------------
"$GM" join "$T" --config "$WORK/dup.conf" --state "$WORK/dup" --node a1 --peer "$A1" \
    --listen 127.0.0.1:"$(free_port)" --multicast off --metrics off >"$WORK/dup.out" 2>"$WORK/dup.err"; rc=$?
[ $rc -ne 0 ] || fail "a duplicate node name joined"
grep -qx "gradmesh join: the cluster already has a node named a1: choose another name with --node NAME (or leave --node out for a random one)" "$WORK/dup.err" ||
    fail "duplicate name said: $(cat "$WORK/dup.err")"
grep -q "File exists" "$WORK/dup.err" && fail "duplicate name: still 'File exists'"
pass "a duplicate node name: $(tail -1 "$WORK/dup.err")"

# --- a used token, on a terminal and to a file --------------------------------------------------
T1=$(tok) || fail "token"
join_msg ok1 "$T1" --peer "$A1"
[ $rc -eq 0 ] || fail "first use of a token: exit $rc $(cat "$WORK/ok1.err")"
command -v script >/dev/null || fail "no script(1) (util-linux)"
# script(1) gives the join a terminal; its transcript is what a person would see
script -qec "'$GM' join '$T1' --config '$WORK/used.conf' --state '$WORK/used' --node y --peer '$A1' --listen 127.0.0.1:$(free_port) --multicast off --metrics off" \
    /dev/null </dev/null >"$WORK/used.tty" 2>&1
tr -d '\r' <"$WORK/used.tty" >"$WORK/used.txt"
grep -q "event=" "$WORK/used.txt" && fail "a terminal got event= lines: $(cat "$WORK/used.txt")"
grep -qx "gradmesh join: the admitter refused the invite token (already used): make a new one with \`gradmesh token create\` on a voter" "$WORK/used.txt" ||
    fail "used token on a terminal said: $(cat "$WORK/used.txt")"
"$GM" join "$T1" --config "$WORK/used2.conf" --state "$WORK/used2" --node z --peer "$A1" \
    --listen 127.0.0.1:"$(free_port)" --multicast off --metrics off >/dev/null 2>"$WORK/used2.err"
grep -q "event=join-refused .*err=-4007" "$WORK/used2.err" || fail "the log lost the refusal event: $(cat "$WORK/used2.err")"
pass "a used token: a terminal reads one line ($(cat "$WORK/used.txt")); a log keeps the event"

# --- a CPU-only run says why it is on the CPU in words ----------------------------------------
if have_fashion_mnist; then
    job_ini "$WORK/cpu.ini" cpu-mlp model.hidden=8 optim.batch=6000
    "$GM" train --local "$WORK/cpu.ini" --no-tensorboard --no-progress --out "$WORK/cpu.safetensors" >"$WORK/cpu.log" 2>&1 ||
        fail "CPU run: $(tail -3 "$WORK/cpu.log")"
    grep -q "driver version is insufficient" "$WORK/cpu.log" && fail "CPU-only run: $(grep event=device "$WORK/cpu.log")"
    pass "a run on the CPU: $(grep -m1 "event=device" "$WORK/cpu.log")"
fi
stop_agents

#!/usr/bin/env bash
# tests/integration/dist_shares_loss.sh - issue 25, "Done when" 5: a rank that dies while the
# shares change.  Three agents train one job with [job] shares = auto; gamma and beta are made
# slow by CPU quotas (cgroup v1 cpu controller, 50 ms periods: gamma 1 ms of CPU a period, beta
# 15 ms), so the coordinator changes the shares: from the speed probe, before the first group
# (gamma, 50x slower, left out as a spare; beta, 0.3 core, kept with a smaller share), or, where
# a probe is missing, after the first group's dwell.  The moment alpha logs the change of shares
# (event=shares-change: a group of beta and alpha at least), beta's agent is killed (-9), so the
# group being formed with the new shares loses a rank while it forms (the test says whether beta
# had taken the new group, which it does not require: the kill races it).
#
#   alpha (coordinator, rank 0) --TLS-- beta (rank 1, cgroup: 0.3 core; kill -9 at the change)
#        \                                  /
#         `------TLS------ gamma (rank 2, cgroup: 0.02 core)
#
# The job: LeNet-5, Adam, global batch 128, one epoch of 25600 images (200 steps), fp32,
# shares = auto.  What must hold:
#   - a clear message: alpha logs event=job-member-lost node=beta after the change, then
#     re-forms the group without beta (event=job-group ... reason="a member was lost");
#   - no lost step: the job ends done with all 200 steps, every group's ranks started it at the
#     same step (event=group ... step=S: one S per generation), and the group formed after the
#     loss started at a step no later than alpha's step when beta died plus the step alpha was
#     in (the step that failed is taken again from rank 0's state, not skipped);
#   - every rank that trained to the end holds the same parameters (event=job-final-hash);
#   - alpha's `jobs --json` shows the shares of the last group summing to 128, one per rank of
#     it, and the reason.
# Cleans up its cgroup and agents on any exit.  Needs root (the cgroup): else skip (77).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. tests/integration/lib.bash

need_fashion_mnist
cpu_cgroup CGG gamma 1000
cpu_cgroup CGB beta 15000
# start_in CGROUP NAME: NAME's agent inside CGROUP (joined before exec: its threads follow)
start_in() {
    sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$1" "$GM" agent --config "$WORK/$2.conf" \
        2>>"$WORK/$2.log" &
    PIDS+=($!)
    eval "PID_$2=$!"
    wait_for "agent $2" "$GM" status --config "$WORK/$2.conf"
    grep -q "${1##*/}" "/proc/$!/cgroup" || fail "$2's agent is not in its cgroup"
}

TOOLS="python3 $PWD/tests/integration/dist_tools.py"
$TOOLS subset "$DATA" "$WORK/data" 25600 1000 || fail "making the data subset"
job_ini "$WORK/job.ini" sloss job.model=lenet5 job.log_every=50 job.shares=auto \
    data.dir="$WORK/data" optim.global_batch=128 comm.codec=fp32

make_cluster sloss alpha beta gamma
start_in "$CGB" beta
start_in "$CGG" gamma
for n in alpha beta gamma; do wait_until 60 "$n's links" links_up $n 2; done
pass "three agents linked, beta at 0.3 core, gamma at 0.02"

# the watcher: one process reading alpha's log as it grows (every 2 ms, no process started per
# look) kills beta (-9) the moment the coordinator's change of shares is there; the new group
# forms over TLS with a broadcast of rank 0's state to beta
python3 - "$WORK/alpha.log" "$PID_beta" 600 >"$WORK/watch.out" 2>&1 <<'PY' &
import os, re, signal, sys, time
path, pid, end = sys.argv[1], int(sys.argv[2]), time.monotonic() + float(sys.argv[3])
pat = re.compile(rb'event=shares-change job=')
with open(path, 'rb') as f:
    buf = b''
    while time.monotonic() < end:
        chunk = f.read()
        if chunk:
            buf = buf[-4096:] + chunk
            if pat.search(buf):
                os.kill(pid, signal.SIGKILL)
                print('killed')
                sys.exit(0)
        else:
            time.sleep(0.002)
sys.exit(1)
PY
watch=$!
PIDS+=($watch)
timeout 900 "$GM" submit "$WORK/job.ini" --follow --config "$WORK/alpha.conf" >"$WORK/submit.out" 2>&1 &
follow=$!
PIDS+=($follow)
wait_until 60 "the job to be submitted" grep -q "^job [0-9a-f]* submitted" "$WORK/submit.out"
id=$(sed -n 's/^job \([0-9a-f]*\) submitted.*/\1/p' "$WORK/submit.out")

wait "$watch" || fail "no change of shares in 600 s"
reap_agent beta
change=$(grep -E "event=shares-change job=$id " "$WORK/alpha.log" | head -1)
cgen=$(($(sed -n 's/.* generation=\([0-9]*\) .*/\1/p' <<<"$change") + 1)) # the group it forms
kill_step=$(step_of alpha "$id") || fail "alpha does not list job $id"
pass "beta killed at the coordinator's decision (alpha at step $kill_step when asked just after): ${change#*event=}"

wait "$follow" || { cat "$WORK/submit.out"; fail "the submit --follow"; }
[ "$(job_get alpha "$id" 'j["state"]')" = done ] || fail "job $id not done: $(job_get alpha "$id" 'j["error"]')"
[ "$(job_get alpha "$id" 'j["summary"]["steps"]')" = 200 ] || fail "job $id: not 200 steps"

# the clear message: beta's loss named, after the change, and the group re-formed for it
lost=$(grep -n "event=job-member-lost job=$id node=beta" "$WORK/alpha.log" | head -1)
[ -n "$lost" ] || fail "alpha logged no event=job-member-lost for beta"
cline=$(grep -nE "event=shares-change job=$id " "$WORK/alpha.log" | head -1 | cut -d: -f1)
[ "${lost%%:*}" -gt "$cline" ] || fail "beta's loss was logged before the change: $lost"
grep -q "event=job-group job=$id .*reason=\"a member was lost\"" "$WORK/alpha.log" ||
    fail "alpha did not re-form the group for the lost member"
pass "alpha said so: ${lost#*event=}"

# did beta take the changed group before it died?  (said, not required: the kill races it)
if grep -q "event=group generation=$cgen rank=" "$WORK/beta.log"; then
    took="beta had taken group $cgen (the changed shares) when it died"
else
    took="beta died before it took group $cgen (the changed shares)"
fi

# no lost step: each generation started at one step on every rank, and the first group after
# the loss started no later than the step alpha was at when beta died, plus the step it was in
gens=$(grep -h "event=group generation=" "$WORK/alpha.log" | sed -n 's/.*generation=\([0-9]*\) .*/\1/p' | sort -un)
for g in $gens; do
    steps=$(grep -h "event=group generation=$g rank=" "$WORK"/{alpha,beta,gamma}.log |
        sed -n 's/.* step=\([0-9]*\).*/\1/p' | sort -u)
    [ "$(wc -l <<<"$steps")" = 1 ] || fail "group $g started at different steps: $(echo $steps)"
done
lgen=$(grep -h "event=job-group job=$id .*reason=\"a member was lost\"" "$WORK/alpha.log" | head -1 |
    sed -n 's/.*generation=\([0-9]*\) .*/\1/p')
lstep=$(grep -h "event=group generation=$lgen rank=0 " "$WORK/alpha.log" | sed -n 's/.* step=\([0-9]*\).*/\1/p')
[ -n "$lstep" ] || fail "alpha did not take group $lgen, formed after the loss"
[ "$lstep" -le $((kill_step + 1)) ] ||
    fail "the group after the loss started at step $lstep, past alpha's step $kill_step at the kill"
pass "no lost step: every group started at one step on every rank; group $lgen (after the loss) at step $lstep; $took"

ha=$(final_hash alpha "$id")
[ -n "$ha" ] || fail "alpha logged no final hash"
if [ -n "$(final_hash gamma "$id")" ]; then
    [ "$(final_hash gamma "$id")" = "$ha" ] || fail "gamma's final parameters differ from alpha's"
    same="gamma trained to the end with alpha's parameters"
else
    [ "$(job_get alpha "$id" '[s["node"] for s in j["spares"]]')" = "['gamma']" ] ||
        fail "gamma neither ended with a final hash nor is listed as a spare"
    same="gamma left out as a spare"
fi
shares=$(job_get alpha "$id" '":".join(str(s["samples"]) for s in j["shares"])')
python3 -c "import sys; sys.exit(0 if sum(map(int, sys.argv[1].split(':'))) == 128 else 1)" "$shares" ||
    fail "jobs --json shares $shares do not sum to 128"
[ "$(job_get alpha "$id" 'bool(j["shares_reason"])')" = True ] || fail "no shares_reason"
pass "done, 200 steps; $same; jobs shows shares $shares"
stop_agents

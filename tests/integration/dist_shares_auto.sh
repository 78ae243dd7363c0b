#!/usr/bin/env bash
# tests/integration/dist_shares_auto.sh - issue 25: [job] shares = auto on loopback, with a slow
# machine made by a CPU quota (cgroup v1 cpu controller: beta gets 0.02 of a core; alpha is not
# capped), and the refusals of shares that do not fit.
#
#   alpha (coordinator, rank 0) --TLS-- beta (rank 1, cgroup: 1 ms of CPU every 50 ms)
#
# The job: LeNet-5, Adam, global batch 128, one epoch of 25600 images (200 steps), shares = auto.
# Before the first group every rank times its own passes of the model (the speed probe,
# event=shares-probe on each); beta is at least 5x slower than alpha however loaded this machine
# is (alpha gets more than 0.1 of a core among the other engineers' work), so the coordinator
# must act, and from the probe, before the first step: either give alpha the larger share
# (event=shares-change generation=0 step=0 to=A:B with A > B, reason "probe: ...") or leave beta
# out as a spare (event=shares-spare step=0, the first group alpha alone).  Either way:
#   - the job ends done, 200 steps, and every rank that trained to the end holds the same
#     parameters (event=job-final-hash);
#   - every rank of the group that followed the change started it at the same step (each
#     logs event=group generation=G rank=R world=W step=S: the same S for every R);
#   - alpha's `jobs --json` shows the shares of the last group, summing to 128, and the
#     reason; with a spare, beta is listed with its reason.
# Live: a second job starts with beta uncapped and caps it at step 60; the coordinator's first
# change of shares (or spare) after that comes within 30 steps.  Before the cap, `doctor`
# (text and --json) shows the shares auto would choose, every rank's speed fitted.
# Then the refusals, at submit (exit 78, one clear line): fixed shares naming 3 ranks with 2
# up; a global batch smaller than the workers with shares = auto; a share that rounds to no
# sample.  Cleans up its cgroup and agents on any exit.  Needs root (the cgroup): else skip.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. tests/integration/lib.bash

need_fashion_mnist
cpu_cgroup CGB beta 1000

TOOLS="python3 $PWD/tests/integration/dist_tools.py"
$TOOLS subset "$DATA" "$WORK/data" 25600 1000 || fail "making the data subset"
job_ini "$WORK/auto.ini" auto job.model=lenet5 job.log_every=50 job.shares=auto \
    data.dir="$WORK/data" optim.global_batch=128

make_cluster shares alpha beta
sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$CGB" "$GM" agent --config "$WORK/beta.conf" \
    2>>"$WORK/beta.log" &
PIDS+=($!)
wait_for "agent beta" "$GM" status --config "$WORK/beta.conf"
grep -q "${CGB##*/}" "/proc/${PIDS[-1]}/cgroup" || fail "beta's agent is not in its cgroup"
wait_for "alpha-beta link" links_up alpha 1
wait_for "beta-alpha link" links_up beta 1
# beta follows raft as a spare (raft standby): a voter at 0.02 of a core answers heartbeats
# 0.4-0.5 s late while it probes, so in a 2-voter cluster the chief - and with it the job's
# coordination - could move to beta in the middle of the job's check (seen once in CI). Chief
# elections under load are chief.sh's and silent_*.sh's subject; this test is about shares, from
# one coordinator: alpha, the only voter.
log_has alpha "event=chief-assign node=beta raft_role=voter"
"$GM" role beta spare --config "$WORK/alpha.conf" >"$WORK/role.out" 2>&1 && grep -q committed "$WORK/role.out" ||
    fail "role beta spare: $(cat "$WORK/role.out")"
log_has alpha "event=chief-assign node=beta raft_role=standby"

timeout 600 "$GM" submit "$WORK/auto.ini" --follow --config "$WORK/alpha.conf" >"$WORK/auto.submit" 2>&1 ||
    { cat "$WORK/auto.submit"; fail "submit"; }
id=$(sed -n 's/^job \([0-9a-f]*\) submitted.*/\1/p' "$WORK/auto.submit")
[ "$(job_get alpha "$id" 'j["state"]')" = done ] || fail "job $id not done"
[ "$(job_get alpha "$id" 'j["summary"]["steps"]')" = 200 ] || fail "job $id: not 200 steps"

change=$(grep "event=shares-change job=$id" "$WORK/alpha.log" | head -1)
spare=$(grep "event=shares-spare job=$id" "$WORK/alpha.log" | head -1)
[ -n "$change$spare" ] || fail "the coordinator neither re-balanced nor left the slow rank out"
if [ -n "$change" ]; then
    to=$(sed -n 's/.* to=\([0-9:]*\) .*/\1/p' <<<"$change")
    python3 -c "import sys; a,b=map(int,sys.argv[1].split(':')); sys.exit(0 if a>b and a+b==128 else 1)" "$to" ||
        fail "the first change gave $to: not more to the fast rank ($change)"
    pass "shares re-balanced toward the fast rank: $(sed 's/.*from=//; s/ reason=.*//' <<<"$change")"
fi
if [ -n "$spare" ]; then
    grep -q "node=beta" <<<"$spare" || fail "the spare is not beta: $spare"
    [ "$(job_get alpha "$id" '[s["node"] for s in j["spares"]]')" = "['beta']" ] ||
        fail "jobs --json does not list beta as a spare"
    pass "beta left out as a spare: $(sed 's/.*reason=//' <<<"$spare")"
fi

# the speed probe: both ranks timed their passes before the job's first group, and the first
# decision (the change, or beta left out) came from it, before the first step: generation 1
# already ran it (a change logs generation=0 step=0, no group yet; a spare: the first group has
# world 1)
grep -q "event=shares-probe job=$id node=alpha ms=" "$WORK/alpha.log" || fail "alpha logged no probe"
grep -q "event=shares-probe job=$id node=beta ms=" "$WORK/beta.log" || fail "beta logged no probe"
first=$(grep -h -E "event=shares-(change|spare) job=$id " "$WORK/alpha.log" | head -1)
grep -q " step=0 " <<<"$first" && grep -q 'probe' <<<"$first" ||
    fail "the first decision was not the probe's, before the first step: $first"
if [ -n "$change" ]; then
    grep -q "generation=0 step=0" <<<"$change" || fail "the probe's shares are not the first group's: $change"
else
    grep -q "event=job-group job=$id generation=1 world=1 " "$WORK/alpha.log" ||
        fail "beta, left out by the probe, is in the first group"
fi
pass "the probe decided before the first group: $(sed 's/.*event=//; s/ reason=.*//' <<<"$first"); probes: $(grep -h -o "event=shares-probe job=$id node=[a-z]* ms=[0-9]*" "$WORK/alpha.log" "$WORK/beta.log" | sed 's/.*node=//' | tr '\n' ' ')"

# every rank of each group formed after the first started it at the same step
for g in $(grep -h "event=job-group job=$id" "$WORK/alpha.log" | sed -n 's/.*generation=\([0-9]*\) .*/\1/p'); do
    [ "$g" = 1 ] && continue
    steps=$(grep -h "event=group generation=$g rank=" "$WORK/alpha.log" "$WORK/beta.log" |
        sed -n 's/.* step=\([0-9]*\).*/\1/p' | sort -u)
    [ "$(wc -l <<<"$steps")" = 1 ] || fail "group $g started at different steps: $(echo $steps)"
done
pass "every rank started each new group at the same step"

ha=$(final_hash alpha "$id")
[ -n "$ha" ] || fail "alpha logged no final hash"
if [ -z "$spare" ]; then
    [ "$(final_hash beta "$id")" = "$ha" ] || fail "beta's final parameters differ from alpha's"
fi
shares=$(job_get alpha "$id" '":".join(str(s["samples"]) for s in j["shares"])')
python3 -c "import sys; sys.exit(0 if sum(map(int, sys.argv[1].split(':'))) == 128 else 1)" "$shares" ||
    fail "jobs --json shares $shares do not sum to 128"
[ "$(job_get alpha "$id" 'j["shares_mode"]')" = auto ] || fail "shares_mode is not auto"
[ "$(job_get alpha "$id" 'bool(j["shares_reason"])')" = True ] || fail "no shares_reason"
pass "done, 200 steps, the same final parameters; jobs shows shares $shares and why"

# --- live: beta slows down mid-run ------------------------------------------------------------
# The same job over 57600 images (450 steps) with beta's cgroup uncapped; once alpha is past
# step 60, beta's quota drops to 0.02 core.  The coordinator must follow: its first change of
# shares (or spare) after the cap comes within 30 steps of it (the issue's bound; the rule needs
# about 10 steps for the averages to move and 3 ticks of 200 ms to confirm).
echo -1 >"$CGB/cpu.cfs_quota_us" || fail "uncapping beta"
$TOOLS subset "$DATA" "$WORK/data-long" 57600 1000 || fail "making the long subset"
job_ini "$WORK/live.ini" live job.model=lenet5 job.log_every=50 job.shares=auto \
    data.dir="$WORK/data-long" optim.global_batch=128
timeout 900 "$GM" submit "$WORK/live.ini" --follow --config "$WORK/alpha.conf" >"$WORK/live.submit" 2>&1 &
follow=$!
PIDS+=($follow)
wait_until 60 "the live job" grep -q "^job [0-9a-f]* submitted" "$WORK/live.submit"
lid=$(sed -n 's/^job \([0-9a-f]*\) submitted.*/\1/p' "$WORK/live.submit")
wait_until 300 "step 60 of the live job" job_is alpha "$lid" 'j["step"] >= 60'
# doctor shows the shares auto would choose (the coordinator's own balance of its models)
doctor_would() {
    "$GM" doctor --json --config "$WORK/alpha.conf" 2>/dev/null | python3 -c '
import json, sys
s = [x for x in json.load(sys.stdin)["shares"] if x["id"] == sys.argv[1]]
b = s[0]["shares_balanced"] if s else None
sys.exit(0 if s and s[0]["shares_mode"] == "auto" and isinstance(b, list) and len(b) == 2 and
         sum(b) == 128 and min(b) >= 1 and all(r["fit_samples_per_s"] > 0 for r in s[0]["shares"]) else 1)' "$lid"
}
wait_until 60 "doctor --json showing the shares auto would choose" doctor_would
"$GM" doctor --config "$WORK/alpha.conf" >"$WORK/doctor.out" 2>&1
grep -q "^shares of the global batch" "$WORK/doctor.out" && grep -q "auto would choose" "$WORK/doctor.out" ||
    { cat "$WORK/doctor.out"; fail "doctor does not show the shares auto would choose"; }
pass "doctor shows the shares auto would choose: $(grep -A4 '^shares of the global batch' "$WORK/doctor.out" | tail -2 | tr -s ' ' | tr '\n' ';')"
echo 1000 >"$CGB/cpu.cfs_quota_us" || fail "capping beta"
cap_step=$(step_of alpha "$lid")
wait "$follow" || { cat "$WORK/live.submit"; fail "the live job's submit"; }
[ "$(job_get alpha "$lid" 'j["state"]')" = done ] || fail "live job $lid not done"
first=$(grep -h -E "event=shares-(change|spare) job=$lid " "$WORK/alpha.log" |
    sed -n 's/.* step=\([0-9]*\) .*/\1/p' | awk -v c="$cap_step" '$1 >= c' | head -1)
[ -n "$first" ] || fail "no change of shares after beta was capped at step $cap_step"
[ "$first" -le $((cap_step + 30)) ] ||
    fail "the shares followed at step $first, more than 30 steps after the cap at $cap_step"
pass "beta capped at step $cap_step: the coordinator acted at step $first"

# --- refusals at submit ----------------------------------------------------------------------
# refused NAME WANT KEY=VALUE...: the submit exits 78 with WANT in its message
refused() {
    local name=$1 want=$2 rc; shift 2
    job_ini "$WORK/$name.ini" "$name" job.model=lenet5 data.dir="$WORK/data" "$@"
    "$GM" submit "$WORK/$name.ini" --config "$WORK/alpha.conf" >"$WORK/$name.out" 2>&1
    rc=$?
    [ $rc = 78 ] || { cat "$WORK/$name.out"; fail "$name: exit $rc, want 78"; }
    grep -qF -- "$want" "$WORK/$name.out" || { cat "$WORK/$name.out"; fail "$name: no '$want'"; }
    pass "$name refused: $(grep -F -- "$want" "$WORK/$name.out" | head -1)"
}
refused three "[job] shares name 3 ranks" job.shares=1:1:1 optim.global_batch=96
refused small "is smaller than the 2 workers up" job.shares=auto optim.global_batch=1
refused zero "[job] shares name 2 ranks, each with at least one sample" job.shares=1000:1 \
    optim.global_batch=100
stop_agents

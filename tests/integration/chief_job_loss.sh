#!/usr/bin/env bash
# tests/integration/chief_job_loss.sh - issue 13, "Done when" 2 (first case): three agents
# train one job coordinated by the chief; the chief is killed (-9) mid-epoch; the two
# survivors elect a new chief, which takes the job over from their identical state at the
# last finished step (no rollback) and the job completes on them.
#
#   alpha (init: the first chief, coordinator, rank 0) --TLS-- beta, gamma
#   kill -9 alpha at step >= 100 of 624 (seen in its log); beta or gamma becomes chief and coordinator
#
# Checked: a job-takeover on the new chief and a world-2 group from a step > 0; the job ends
# done with all 624 steps on the new chief; beta's and gamma's final parameters are identical;
# the test accuracy is within 1 point of an undisturbed run of the same job (seed 1; why the
# bar holds for this job: dist_peer_loss.sh); a valid newest committed checkpoint (step 624,
# checkpoint_every = 200: committed in the replicated state, verified, and exported it gives
# the reported accuracy); exactly one chief per term in the logs.  How
# long training paused (the kill to the first step the survivors take) is printed, not
# asserted (tests do not fail on a slow machine; issue 13 asks for 5 s on loopback).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. tests/integration/lib.bash

need_fashion_mnist
STEPS=624
KILL_STEP=100
JOB_TIMEOUT=${JOB_TIMEOUT:-600}

job_ini "$WORK/job.ini" cl job.model=lenet5 job.epochs=2 job.log_every=50 job.checkpoint_every=200 \
    optim.global_batch=192 schedule.kind=cosine comm.codec=fp32

KEY=$(job_key "$WORK/job.ini")
# the undisturbed run writes no checkpoints (the same training; another job text, so the run
# under test does not resume from its checkpoints)
grep -v '^checkpoint_every' "$WORK/job.ini" >"$WORK/ref.ini"
make_cluster cl alpha beta gamma
start_agent beta
start_agent gamma
for n in alpha beta gamma; do wait_for "$n's links" links_up $n 2; done
wait_until 60 "alpha to be chief" chief_is alpha alpha
pass "three agents linked, alpha is chief"

# --- the undisturbed run -------------------------------------------------------------------
timeout "$JOB_TIMEOUT" "$GM" submit "$WORK/ref.ini" --follow --config "$WORK/alpha.conf" \
    >"$WORK/ref.submit" 2>&1 || { cat "$WORK/ref.submit"; fail "undisturbed run"; }
REF=$(sed -n 's/^job \([0-9a-f]*\) submitted.*/\1/p' "$WORK/ref.submit")
job_is alpha "$REF" 'j["state"] == "done" and j["summary"]["steps"] == '$STEPS ||
    fail "undisturbed run $REF not done after $STEPS steps"
ACC_REF=$(job_get alpha "$REF" 'j["summary"]["test_accuracy"]')
pass "undisturbed run: $STEPS steps on 3 ranks, test accuracy $ACC_REF%"

# --- the chief is lost -----------------------------------------------------------------------
LINES0=$(wc -l <"$WORK/alpha.log")
"$GM" submit "$WORK/job.ini" --config "$WORK/alpha.conf" >"$WORK/run.submit" 2>&1 ||
    { cat "$WORK/run.submit"; fail "submit"; }
ID=$(sed -n 's/^job \([0-9a-f]*\) submitted.*/\1/p' "$WORK/run.submit")
[ -n "$ID" ] || fail "no job id in: $(cat "$WORK/run.submit")"
# the kill is timed from alpha's own log (grep is cheap; a CLI poll is slow on a loaded
# machine and could let the job run to its end first): its first event=train of this job at a
# step >= KILL_STEP (log_every = 50)
at_kill_step() { tail -n +"$((LINES0 + 1))" "$WORK/alpha.log" |
    awk -v k="$KILL_STEP" '/event=train step=/ { split($2, a, "="); if (a[2] + 0 >= k) { print a[2]; exit } }'; }
reached() { [ -n "$(at_kill_step)" ]; }
wait_until "$JOB_TIMEOUT" "step $KILL_STEP" reached
kill9_agent alpha
T0=$(date +%s.%N)
AT=$(at_kill_step)
[ "$AT" -lt "$STEPS" ] || fail "the job reached step $AT of $STEPS before the kill"
pass "alpha (chief, coordinator) killed (-9) at about step $AT of $STEPS"

# the survivors elect a chief; it takes the job over and forms world 2
took_over() { grep -qF "event=job-takeover job=$ID lost=alpha" "$WORK/beta.log" "$WORK/gamma.log"; }
wait_until 60 "a survivor to take the job over" took_over
NEW=$(grep -lF "event=job-takeover job=$ID lost=alpha" "$WORK/beta.log" "$WORK/gamma.log" |
    head -n 1 | sed 's#.*/\(.*\)\.log#\1#')
OTHER=beta
[ "$NEW" = beta ] && OTHER=gamma
moving() { job_is "$NEW" "$ID" 'j["world"] == 2 and j["step"] > '$AT; }
wait_until "$JOB_TIMEOUT" "training on 2 ranks" moving
PAUSE=$(python3 -c "import time; print('%.1f' % (time.time() - $T0))")
log_has "$OTHER" "event=job-coordinator-new job=$ID coordinator=$NEW lost=alpha"
S2=$(sed -n "s/.*event=group generation=[0-9]* rank=0 world=2 step=\([0-9]*\)\$/\1/p" "$WORK/$NEW.log" | tail -n 1)
[ -n "$S2" ] && [ "$S2" -gt 0 ] || fail "$NEW formed no world-2 group from a step > 0"
grep -q "event=group generation=[0-9]* rank=1 world=2 step=$S2\$" "$WORK/$OTHER.log" ||
    fail "$OTHER did not resync at $NEW's step $S2"
pass "$NEW (the new chief) took the job over at step $S2 with $OTHER; training went on $PAUSE s after the kill"

wait_until "$JOB_TIMEOUT" "the job to end" job_is "$NEW" "$ID" 'j["state"] != "running"'
job_is "$NEW" "$ID" 'j["state"] == "done" and j["summary"]["steps"] == '$STEPS' and j["world"] == 2' ||
    fail "job $ID: $(job_get "$NEW" "$ID" 'j')"
ACC=$(job_get "$NEW" "$ID" 'j["summary"]["test_accuracy"]')
HN=$(final_hash "$NEW" "$ID")
HO=$(final_hash "$OTHER" "$ID")
[ -n "$HN" ] && [ "$HN" = "$HO" ] || fail "final parameters differ: $NEW '$HN', $OTHER '$HO'"
pass "job done on $NEW and $OTHER: $STEPS steps, identical parameters (sha256 ${HN:0:16}...)"
python3 -c "import sys; sys.exit(0 if abs($ACC - $ACC_REF) <= 1.0 else 1)" ||
    fail "test accuracy $ACC% is not within 1 point of the undisturbed run's $ACC_REF%"
pass "test accuracy $ACC% vs $ACC_REF% undisturbed: within 1 point"
if grep -l "replicas_differ" "$WORK"/*.log; then fail "a log reports replicas_differ"; fi
check_newest_committed "$NEW" "$KEY" "$STEPS" "$ACC" "$DATA"

check_one_chief_per_term

stop_agents

#!/usr/bin/env bash
# tests/integration/dist_peer_loss.sh - issue 10, "Done when" 2: three agents train one
# job; the member with the highest node id is killed (-9) mid-epoch; the job goes on with
# two ranks; the member's agent restarts, rejoins at a step boundary, and ends with the
# same weights as the others; the test accuracy is within 1 point of an undisturbed run
# of the same job.
#
#   alpha (init; coordinator, rank 0) --TLS-- beta (rank 1)
#        \                                    /
#         `---------------TLS------- gamma (rank 2): kill -9 at step >= 60 of epoch 1,
#                                     then restarted with the same config and state
#   every agent on 127.0.0.1 with its own config and state directory
#
# The job: LeNet-5 on Fashion-MNIST (60000 / 10000), Adam lr 1e-3 with a cosine schedule,
# global_batch = 192 (64 per rank with 3, 96 with 2: the same samples per step whatever
# the world, train/trainer.h), 2 epochs = 624 steps, seed 1, fp32.
#
# Why "within 1 point" holds, and why this job: the disturbed run takes the same samples
# at every step as the undisturbed one; only float rounding differs (the partial means
# over 64 or 96 samples, resyncs are exact copies of rank 0's state).  Rounding grows
# over a run (dist_equivalence.sh), so what the bar measures is how much final test
# accuracy moves under rounding-level perturbations.  Measured on one process (1 and 3
# simulated ranks, lr moved by an ulp or 3e-7): 77.27-77.52% with this cosine schedule,
# a spread of 0.25 points, so 1 point has a 4x margin.  With a constant lr the same
# perturbations moved it over 80.0-81.4% (the last steps still jump), too close to the
# bar; hence the cosine schedule.  Two epochs give accuracy room to mean something (77%
# on 10 classes) and the rejoin room to happen (~450 steps after the kill).
#
# Same weights: when its last step is taken, every rank logs event=job-final-hash with
# the SHA-256 of its parameters (agent/jobs/rank.h); the restarted gamma's must equal alpha's
# and beta's, and all equal the hash of the weights file alpha wrote, recomputed here in
# Python.  Nothing here is timed: every wait polls a condition (deadlines only keep a hung
# run from hanging CI).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. tests/integration/lib.bash

need_fashion_mnist
need_numpy
TOOLS="python3 $PWD/tests/integration/dist_tools.py"
STEPS=624
KILL_STEP=60
JOB_TIMEOUT=${JOB_TIMEOUT:-600}

job_ini "$WORK/job.ini" pl job.model=lenet5 job.epochs=2 job.log_every=50 optim.global_batch=192 \
    schedule.kind=cosine comm.codec=fp32

make_cluster pl alpha beta gamma
start_agent beta
start_agent gamma
for n in alpha beta gamma; do wait_for "$n's links" links_up $n 2; done
pass "three agents linked"

# one_final_hash NAME ID: lib.bash's final_hash, of which there must be exactly one (a killed
# rank never reaches the end); in FINAL_HASH (a fail inside $(...) would only end the subshell)
one_final_hash() {
    FINAL_HASH=$(final_hash "$1" "$2")
    [ "$(echo "$FINAL_HASH" | grep -c .)" = 1 ] || fail "$1: want one job-final-hash line for $2, got: '$FINAL_HASH'"
}

# check_final_weights ID: every rank logged the same hash, and it is the weights file's
check_final_weights() {
    local id=$1 ha hb hg hf w
    one_final_hash alpha "$id"; ha=$FINAL_HASH
    one_final_hash beta "$id"; hb=$FINAL_HASH
    one_final_hash gamma "$id"; hg=$FINAL_HASH
    w=$(job_get alpha "$id" 'j["weights"]')
    hf=$($TOOLS sha256 "$w") || fail "hashing $w"
    [ "$ha" = "$hb" ] && [ "$ha" = "$hg" ] ||
        fail "job $id: final parameters differ: alpha $ha beta $hb gamma $hg"
    [ "$ha" = "$hf" ] || fail "job $id: ranks' hash $ha is not the weights file's $hf"
    pass "job $id: alpha, beta and gamma end with the same parameters (sha256 ${ha:0:16}..., = the weights file)"
}

# --- the undisturbed run -------------------------------------------------------------------
timeout "$JOB_TIMEOUT" "$GM" submit "$WORK/job.ini" --follow --config "$WORK/alpha.conf" \
    >"$WORK/ref.submit" 2>&1 || { cat "$WORK/ref.submit"; fail "undisturbed run"; }
REF=$(sed -n 's/^job \([0-9a-f]*\) submitted.*/\1/p' "$WORK/ref.submit")
job_is alpha "$REF" 'j["state"] == "done" and j["summary"]["steps"] == '$STEPS ||
    fail "undisturbed run $REF not done after $STEPS steps"
ACC_REF=$(job_get alpha "$REF" 'j["summary"]["test_accuracy"]')
check_final_weights "$REF"
pass "undisturbed run: $STEPS steps on 3 ranks, test accuracy $ACC_REF%"

# --- the disturbed run -------------------------------------------------------------------------
"$GM" submit "$WORK/job.ini" --config "$WORK/alpha.conf" >"$WORK/run.submit" 2>&1 ||
    { cat "$WORK/run.submit"; fail "submit"; }
ID=$(sed -n 's/^job \([0-9a-f]*\) submitted.*/\1/p' "$WORK/run.submit")
[ -n "$ID" ] || fail "no job id in: $(cat "$WORK/run.submit")"
wait_until "$JOB_TIMEOUT" "step $KILL_STEP" job_is alpha "$ID" 'j["step"] >= '$KILL_STEP
job_is alpha "$ID" 'j["world"] == 3 and j["state"] == "running"' || fail "not running on 3 ranks"
kill9_agent gamma
AT=$(step_of alpha "$ID")
pass "gamma killed (-9) at about step $AT of $STEPS (epoch 1 of 2)"

# The coordinator re-forms without gamma; alpha and beta resync at one step boundary.
# Usually generation 2; if beta's report of the failed operation reached alpha before
# alpha saw its own link to gamma break, a world-3 generation came (and failed) first.
log_has alpha "world=2 reason=\"a member was lost\""
G2=$(sed -n "s/.*event=job-group job=$ID generation=\([0-9]*\) world=2 reason=\"a member was lost\".*/\1/p" \
    "$WORK/alpha.log" | head -n 1)
[ -n "$G2" ] || fail "no generation of world 2 for job $ID"
log_has alpha "event=group generation=$G2 rank=0 world=2 step="
log_has beta "event=group generation=$G2 rank=1 world=2 step="
S2=$(sed -n "s/.*event=group generation=$G2 rank=0 world=2 step=\([0-9]*\)\$/\1/p" "$WORK/alpha.log")
grep -q "event=group generation=$G2 rank=1 world=2 step=$S2\$" "$WORK/beta.log" ||
    fail "beta did not resync at alpha's step $S2"
[ "$S2" -gt 0 ] && [ "$S2" -lt 312 ] || fail "generation $G2 at step $S2, not mid-epoch 1"
# ... and the job goes on with two ranks
wait_until "$JOB_TIMEOUT" "progress on 2 ranks" job_is alpha "$ID" \
    'j["world"] == 2 and j["step"] >= '$((S2 + 20))' and j["state"] == "running"'
pass "generation $G2: world 2 from step $S2 (alpha and beta), and training goes on"

# gamma comes back: the same config and state directory
start_agent gamma
rejoined() { # gamma's log: a group of world 3, a generation after G2, from a step > 0
    sed -n 's/.*event=group generation=\([0-9]*\) rank=2 world=3 step=\([0-9]*\)$/\1 \2/p' \
        "$WORK/gamma.log" | awk -v g="$G2" '$1 > g && $2 > 0 {ok = 1} END {exit !ok}'
}
wait_until "$JOB_TIMEOUT" "gamma to rejoin" rejoined
GEN=$(sed -n 's/.*event=group generation=\([0-9]*\) rank=2 world=3 step=\([0-9]*\)$/\1 \2/p' \
    "$WORK/gamma.log" | awk -v g="$G2" '$1 > g && $2 > 0' | tail -n 1)
grep -q "event=job-group job=$ID generation=${GEN% *} world=3 " "$WORK/alpha.log" ||
    fail "alpha formed no generation ${GEN% *} of world 3"
pass "gamma rejoined: generation ${GEN% *}, world 3, from step ${GEN#* } (its log and alpha's)"
# the group's start sends rank 0's state only where it is needed (agent/jobs/rank_train.c):
# the first group (every rank from the same seed) holds the same state and skips the
# broadcast; gamma, back from a restart at an older step, does not.  The world-2 group after
# the loss skips it when alpha and beta stopped at the same step; the loss can also cut a
# step's all-reduce after one of them had all of it and before the other had (a ring's last
# chunks), and then their steps differ and the broadcast must run.  Each logs its own step
# before the resync (step=), so a broadcast between equal steps (diverged replicas) fails.
for h in alpha beta gamma; do
    grep -q "event=resync generation=1 bytes=[0-9]* same=1" "$WORK/$h.log" ||
        fail "$h: the first group did not skip the broadcast: $(grep 'event=resync' "$WORK/$h.log" | head -n 1)"
done
own_step() { sed -n "s/.*event=resync generation=$G2 bytes=[0-9]* same=\([01]\) step=\([0-9]*\).*/\1 \2/p" "$WORK/$1.log" | tail -n 1; }
RA=$(own_step alpha) RB=$(own_step beta)
[ -n "$RA" ] && [ -n "$RB" ] || fail "generation $G2: no resync logged by alpha ($RA) or beta ($RB)"
[ "${RA% *}" = "${RB% *}" ] || fail "generation $G2: alpha and beta disagree on the resync: $RA / $RB"
if [ "${RA% *}" = 1 ]; then
    [ "${RA#* }" = "${RB#* }" ] || fail "generation $G2: the broadcast skipped between steps ${RA#* } and ${RB#* }"
    SKIP2="skipped (both at step ${RA#* })"
else
    [ "${RA#* }" != "${RB#* }" ] ||
        fail "alpha: the group after the loss did not skip the broadcast, both at step ${RA#* }"
    SKIP2="sent (the loss cut a step: alpha at ${RA#* }, beta at ${RB#* })"
fi
grep -q "event=resync generation=${GEN% *} bytes=[0-9]* same=0" "$WORK/gamma.log" ||
    fail "gamma: its rejoin took no broadcast: $(grep 'event=resync' "$WORK/gamma.log" | tail -n 1)"
pass "resync: the first group's broadcast skipped, generation $G2's $SKIP2, sent to the rejoining gamma"

wait_until "$JOB_TIMEOUT" "the job to end" job_is alpha "$ID" 'j["state"] != "running"'
job_is alpha "$ID" 'j["state"] == "done" and j["summary"]["steps"] == '$STEPS' and j["world"] == 3' ||
    fail "job $ID: $(job_get alpha "$ID" 'j')"
wait_until 60 "gamma's rank to end" job_is gamma "$ID" 'j["state"] == "done"'
ACC=$(job_get alpha "$ID" 'j["summary"]["test_accuracy"]')
# No re-form storm around the return: a returning member answers the dataset check only
# once it has links to every rank, and groups that keep failing back off (agent/jobs/job.c).
# Before that, each group formed ahead of the gamma-beta link failed at once and was
# re-formed, 3 to 20 times here (180 seen elsewhere).  One quick failure is allowed: the
# two ends of the gamma-beta link may see it up a moment apart.  The world-3 group gamma
# joined must be the last, world 3, and come after the loss.
REASONS=$(sed -n "s/.*event=job-group job=$ID generation=[0-9]* world=[0-9]* reason=\"\(.*\)\"/\1/p" \
    "$WORK/alpha.log" | paste -sd '|')
AFTER=${REASONS##*a member came (back)}
case "$REASONS" in
*"|a member was lost|"*"a member came (back)"*) ;;
*) fail "generations: want the loss, then the return; got $REASONS" ;;
esac
[ "$(echo "$AFTER" | tr '|' '\n' | grep -c .)" -le 1 ] ||
    fail "generations after the return: ${AFTER#|} (a re-form storm)"
LAST=$(grep "event=job-group job=$ID " "$WORK/alpha.log" | tail -n 1)
case "$LAST" in *" generation=${GEN% *} world=3 "*) ;; *) fail "gamma's group $GEN is not the last: $LAST" ;; esac
pass "job done: $STEPS steps, generations: ${REASONS//|/, }; test accuracy $ACC%"

check_final_weights "$ID"
python3 -c "import sys; sys.exit(0 if abs($ACC - $ACC_REF) <= 1.0 else 1)" ||
    fail "test accuracy $ACC% is not within 1 point of the undisturbed run's $ACC_REF%"
pass "test accuracy $ACC% vs $ACC_REF% undisturbed: within 1 point"
if grep -l "replicas_differ" "$WORK"/*.log; then fail "a log reports replicas_differ"; fi

stop_agents

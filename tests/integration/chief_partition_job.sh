#!/usr/bin/env bash
# tests/integration/chief_partition_job.sh - issue 13, "Done when" 2 (the split): a job across
# a 2|1 split in network namespaces, first with a member cut off, then with the chief cut off.
# No majority, no training: the minority pauses, says why, and catches up when the split heals.
#
#   a (init: the chief, coordinator, rank 0) --- sw-lan --- b      one bridge, 10.74.14.0/24,
#                                                  |              each agent in its namespace,
#                                                  c              every eth0 shaped to 100 Mbit/s
#   split 1: c's eth0 down (a member cut off), then up again
#   split 2: the chief's eth0 down (a, or whoever is chief then), then up again
#
# The job: an MLP (hidden 256: 0.8 MB of gradients, so 100 Mbit/s paces the steps whatever the
# CPU) on Fashion-MNIST, Adam, global_batch 192, 2 epochs = 624 steps, seed 1, fp32,
# checkpoint_every = 100.  peer_timeout = 6 s, so links to a cut-off agent close quickly.
#  0. the undisturbed run of the same job (another name, so other checkpoints) on the same
#     cluster: its test accuracy;
#  1. split 1: the majority re-forms without c (world 2) and trains on; c stops stepping (its
#     step does not move while the majority's does), `jobs --json` says the job is paused
#     because there is no majority, and so does `status`; c never forms a group of its own;
#  2. heal: c rejoins at a step boundary (a group of world 3 in which c resyncs at rank 0's
#     step, a later one than where it stopped);
#  3. split 2: the chief is cut off; the majority elects a new chief in a newer term, which
#     takes the job over (event=job-takeover) and trains on at world 2; the old chief stops
#     coordinating (event=job-paused), stops stepping, forms no 1-rank group, and says
#     paused: no majority;
#  4. heal: the old chief follows the new one and rejoins at a step boundary;
#  5. the job completes (done, 624 steps); all three end with identical parameters
#     (event=job-final-hash); test accuracy within 1 point of the undisturbed run; the new
#     chief's newest committed checkpoint (members --json) is step 624, verified by
#     `checkpoint list` (state ok) and its .sha256; exactly one chief per term in the logs.
# Every wait polls a condition with a deadline; nothing is timed.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. tests/integration/lib.bash
NB_PREFIX=split$$-
. tests/integration/netns.bash
nb_require python3 tc

need_fashion_mnist
STEPS=624
JOB_TIMEOUT=${JOB_TIMEOUT:-900}

job_ini "$WORK/job.ini" split job.epochs=2 job.log_every=100 job.checkpoint_every=100 job.checkpoint_keep=2 \
    model.hidden=256 optim.global_batch=192 comm.codec=fp32
KEY=$(job_key "$WORK/job.ini")

# hold_still HOST OTHER N: OTHER's job takes N steps while HOST's stays at the step it is at
# (checked at every poll; fails at once when it moves); that step in HELD
hold_still() {
    local s0 end=$((SECONDS + 120)) min s
    s0=$(step_of "$1" "$ID") || fail "$1 lists no job $ID"
    min=$(($(step_of "$2" "$ID") + $3))
    while ! job_is "$2" "$ID" 'j["step"] >= '$min; do
        s=$(step_of "$1" "$ID")
        [ "$s" = "$s0" ] || fail "$1 trained on while cut off: step $s0, then $s"
        [ $SECONDS -lt $end ] || fail "timed out waiting for $2 to reach step $min"
        sleep 0.1
    done
    s=$(step_of "$1" "$ID")
    [ "$s" = "$s0" ] || fail "$1 trained on while cut off: step $s0, then $s"
    HELD=$s0
}
# paused_no_majority HOST: jobs --json and status on HOST say the job is paused: no majority
paused_no_majority() {
    job_is "$1" "$ID" 'j["state"] == "paused" and "no majority" in (j["paused_reason"] or "")' &&
        "$GM" status --config "$WORK/$1.conf" | grep "^job paused: no chief: no majority" >/dev/null
}
# resynced HOST AFTER: HOST's log has a world-3 group from a step > AFTER; prints "gen step"
resynced() {
    sed -n 's/.*event=group generation=\([0-9]*\) rank=[0-9] world=3 step=\([0-9]*\)$/\1 \2/p' \
        "$WORK/$1.log" | awk -v a="$2" '$2 > a' | tail -n 1 | grep .
}

nb_bridge lan
i=1
for h in a b c; do
    nb_host $h
    nb_lan lan $h eth0 10.74.14.$i/24
    nb_rate $h eth0 100mbit
    i=$((i + 1))
done
nb_exec a "$GM" init --cluster split --node a --config "$WORK/a.conf" --state "$WORK/a" \
    --listen 10.74.14.1:7451 --multicast off >/dev/null 2>>"$WORK/cli.log" || fail "init a"
sed -i 's/^peer_timeout = .*/peer_timeout = 6/' "$WORK/a.conf"
ns_agent a
wait_for "agent a" "$GM" status --config "$WORK/a.conf"
i=2
for h in b c; do
    TOKEN=$("$GM" token create --config "$WORK/a.conf" 2>>"$WORK/cli.log") || fail "token for $h"
    nb_exec $h "$GM" join "$TOKEN" --peer 10.74.14.1:7451 --node $h --config "$WORK/$h.conf" \
        --state "$WORK/$h" --listen 10.74.14.$i:7451 --multicast off >/dev/null 2>>"$WORK/cli.log" ||
        fail "join $h"
    sed -i 's/^peer_timeout = .*/peer_timeout = 6/' "$WORK/$h.conf"
    ns_agent $h
    i=$((i + 1))
done
for h in a b c; do wait_until 60 "$h's links" links_up $h 2; done
VOTERS='sorted((m["node"], m["raft"]) for m in d["members"]) == [("a","voter"), ("b","voter"), ("c","voter")]'
for h in a b c; do wait_until 60 "$h: chief a, three voters" members_is $h "d['chief'] == 'a' and $VOTERS"; done
T1=$(members_get a 'd["term"]')
pass "three agents in namespaces, a is the chief of term $T1, b and c voters"

# --- 0. the undisturbed run ---------------------------------------------------------------
sed 's/^name = split$/name = split-ref/' "$WORK/job.ini" >"$WORK/ref.ini" # own checkpoints
timeout "$JOB_TIMEOUT" "$GM" submit "$WORK/ref.ini" --follow --config "$WORK/a.conf" \
    >"$WORK/ref.submit" 2>&1 || { cat "$WORK/ref.submit"; fail "undisturbed run"; }
REF=$(sed -n 's/^job \([0-9a-f]*\) submitted.*/\1/p' "$WORK/ref.submit")
job_is a "$REF" 'j["state"] == "done" and j["summary"]["steps"] == '$STEPS ||
    fail "undisturbed run $REF not done after $STEPS steps"
ACC_REF=$(job_get a "$REF" 'j["summary"]["test_accuracy"]')
pass "undisturbed run: $STEPS steps on 3 ranks, test accuracy $ACC_REF%"

# --- 1. split 1: the member c is cut off ---------------------------------------------------
"$GM" submit "$WORK/job.ini" --config "$WORK/a.conf" >"$WORK/run.submit" 2>&1 ||
    { cat "$WORK/run.submit"; fail "submit"; }
ID=$(sed -n 's/^job \([0-9a-f]*\) submitted.*/\1/p' "$WORK/run.submit")
[ -n "$ID" ] || fail "no job id in: $(cat "$WORK/run.submit")"
wait_until "$JOB_TIMEOUT" "step 30 on c" job_is c "$ID" 'j["step"] >= 30 and j["world"] == 3'
nb_exec c ip link set eth0 down || fail "cutting c off"
pass "c cut off at about step $(step_of c "$ID")"
wait_until 90 "a to train on without c" job_is a "$ID" 'j["world"] == 2 and j["state"] == "running"'
wait_until 90 "c: paused, no majority" paused_no_majority c
hold_still c a 30
SC=$HELD
REASON=$(job_get c "$ID" 'j["paused_reason"]')
pass "majority a+b trains on at world 2 (step $(step_of a "$ID")); c stopped at step $SC and says: $REASON"
"$GM" status --config "$WORK/c.conf" | grep "^job $ID split: paused, step $SC/$STEPS" >/dev/null ||
    fail "status on c: $("$GM" status --config "$WORK/c.conf")"
"$GM" jobs --config "$WORK/c.conf" | grep "^$ID .* paused .*no majority" >/dev/null ||
    fail "jobs on c: $("$GM" jobs --config "$WORK/c.conf")"
if grep "event=group generation=[0-9]* rank=0 " "$WORK/c.log"; then fail "c formed a group of its own"; fi
pass "status and jobs on c say paused: no majority; c formed no group of its own"

# --- 2. heal: c rejoins ----------------------------------------------------------------------
nb_exec c ip link set eth0 up || fail "healing split 1"
wait_until 120 "c to rejoin" resynced c "$SC"
read -r G1 S1 < <(resynced c "$SC")
# the same group on the coordinator: its rank logs it at its own step boundary, which may
# come a little after c's (a checkpoint being written, say)
wait_until 30 "c's group $G1 at step $S1 on a too" \
    grep "event=group generation=$G1 rank=0 world=3 step=$S1\$" "$WORK/a.log"
job_is c "$ID" 'j["state"] == "running"' || fail "c: $(job_get c "$ID" 'j')"
pass "healed: c rejoined at a step boundary (generation $G1, step $S1 > $SC)"

# --- 3. split 2: the chief is cut off --------------------------------------------------------
OLD=$(chief_of a)
[ "$OLD" = a ] || fail "chief is '$OLD', not a"
wait_until 120 "step $((S1 + 10)) on a" job_is a "$ID" 'j["step"] >= '$((S1 + 10))
LA=$(($(wc -l <"$WORK/a.log") + 1))
nb_exec a ip link set eth0 down || fail "cutting a off"
pass "the chief a cut off at about step $(step_of a "$ID")"
took_over() { grep -l "event=job-takeover job=$ID " "$WORK/b.log" "$WORK/c.log" | grep . >/dev/null; }
wait_until 90 "b or c to take the job over" took_over
NEW=$(grep -l "event=job-takeover job=$ID " "$WORK/b.log" "$WORK/c.log" | head -n 1 | sed 's#.*/\(.*\)\.log#\1#')
OTHER=b
[ "$NEW" = b ] && OTHER=c
T2=$(members_get "$NEW" 'd["term"]')
[ "$(chief_of "$NEW")" = "$NEW" ] && [ "$T2" -gt "$T1" ] || fail "$NEW took over but is not the chief of a newer term"
wait_until 90 "$NEW to train on at world 2" job_is "$NEW" "$ID" 'j["world"] == 2 and j["state"] == "running" and j["coordinator"] == "'$NEW'"'
log_has a "event=job-paused job=$ID "
wait_until 90 "a: paused, no majority" paused_no_majority a
hold_still a "$NEW" 30
SO=$HELD
if tail -n +"$LA" "$WORK/a.log" | grep "event=group generation=[0-9]* rank=0 "; then
    fail "a, cut off, formed a group"
fi
pass "$NEW (chief of term $T2) took the job over and trains on with $OTHER; a stopped at step $SO: $(job_get a "$ID" 'j["paused_reason"]')"

# --- 4. heal: the old chief rejoins ----------------------------------------------------------
nb_exec a ip link set eth0 up || fail "healing split 2"
wait_until 120 "a to rejoin" resynced a "$SO"
read -r G2 S2 < <(resynced a "$SO")
wait_until 30 "a's group $G2 at step $S2 on $NEW too" \
    grep "event=group generation=$G2 rank=0 world=3 step=$S2\$" "$WORK/$NEW.log"
[ "$(chief_of a)" = "$NEW" ] || fail "a does not follow $NEW"
log_has a "event=job-coordinator-new job=$ID coordinator=$NEW lost=a"
pass "healed: a follows chief $NEW and rejoined at a step boundary (generation $G2, step $S2 > $SO)"

# --- 5. the end ------------------------------------------------------------------------------
wait_until "$JOB_TIMEOUT" "the job to end" job_is "$NEW" "$ID" 'j["state"] not in ("running", "paused", "checking")'
job_is "$NEW" "$ID" 'j["state"] == "done" and j["summary"]["steps"] == '$STEPS' and j["world"] == 3' ||
    fail "job $ID: $(job_get "$NEW" "$ID" 'j')"
for h in a b c; do wait_until 60 "$h: job done" job_is $h "$ID" 'j["state"] == "done"'; done
HN=$(final_hash "$NEW" "$ID")
[ -n "$HN" ] || fail "$NEW logged no final hash"
for h in a b c; do
    [ "$(final_hash $h "$ID")" = "$HN" ] || fail "final parameters differ: $h '$(final_hash $h "$ID")', $NEW '$HN'"
done
pass "job done: $STEPS steps; a, b and c end with identical parameters (sha256 ${HN:0:16}...)"
ACC=$(job_get "$NEW" "$ID" 'j["summary"]["test_accuracy"]')
python3 -c "import sys; sys.exit(0 if abs($ACC - $ACC_REF) <= 1.0 else 1)" ||
    fail "test accuracy $ACC% is not within 1 point of the undisturbed run's $ACC_REF%"
pass "test accuracy $ACC% vs $ACC_REF% undisturbed (seed 1): within 1 point"
if grep -l "replicas_differ" "$WORK"/*.log; then fail "a log reports replicas_differ"; fi

# the newest committed checkpoint: step 624 in the replicated state, valid on the chief
wait_until 60 "step $STEPS committed" members_is "$NEW" "max([c['step'] for c in d['state']['checkpoints'] if c['job'] == '$KEY'] or [0]) == $STEPS"
CSHA=$(members_get "$NEW" "[c['sha256'] for c in d['state']['checkpoints'] if c['job'] == '$KEY' and c['step'] == $STEPS][0]")
F=$WORK/$NEW/checkpoints/$KEY/$(printf 'step-%010d' $STEPS).safetensors
[ "$(sha256sum <"$F" | cut -d' ' -f1)" = "$CSHA" ] || fail "$F is not the committed $CSHA"
(cd "$(dirname "$F")" && sha256sum --quiet -c "$(basename "$F").sha256") || fail "sha256sum -c $F"
"$GM" checkpoint list --json --config "$WORK/$NEW.conf" | python3 -c '
import json, sys
l = json.load(sys.stdin)
c = [c for c in l if c["step"] == int(sys.argv[1])]
assert c and c[0]["state"] == "ok", l' $STEPS || fail "checkpoint list on $NEW"
pass "newest committed checkpoint: step $STEPS, sha256 ${CSHA:0:16}..., ok on $NEW"

check_one_chief_per_term
ns_stop_agents a b c

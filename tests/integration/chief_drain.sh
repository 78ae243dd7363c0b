#!/usr/bin/env bash
# tests/integration/chief_drain.sh - issue 13's drain: SIGTERM on the chief finishes the step,
# hands leadership over and exits; SIGTERM on another member is a plain peer loss.
#
#   alpha (init: the first chief, coordinator, rank 0) --TLS-- beta, gamma
#   1. SIGTERM to alpha at step >= 40 of 312: alpha exits 0 after its step; its log shows the
#      drain and the transfer; beta or gamma is chief (the time it took is printed, not
#      asserted); that chief takes the job over from the step the survivors share (a world-2
#      group from a step >= the one alpha left at: no rollback) and the job ends done with
#      every step on the two survivors, with identical parameters
#   2. alpha restarts; a second job on the new chief; SIGTERM to the member that is not the
#      chief: it exits 0 at once (no drain), and the job ends done on the two left
#   3. exactly one chief per term in the logs
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. tests/integration/lib.bash

need_fashion_mnist
STEPS=312
TERM_STEP=40
JOB_TIMEOUT=${JOB_TIMEOUT:-600}

job_ini "$WORK/job.ini" drain job.log_every=50 optim.global_batch=192 comm.codec=fp32

# term_agent NAME [sent]: SIGTERM to NAME's agent (unless sent already); waits up to 120 s
# for it to exit; sets RC.
term_agent() {
    local p=PID_$1 q keep=() i
    [ "${2:-}" = sent ] || kill -TERM "${!p}" || fail "kill -TERM $1"
    for i in $(seq 1200); do kill -0 "${!p}" 2>/dev/null || break; sleep 0.1; done
    kill -0 "${!p}" 2>/dev/null && fail "$1 still runs 120 s after SIGTERM"
    wait "${!p}"
    RC=$?
    for q in "${PIDS[@]}"; do [ "$q" = "${!p}" ] || keep+=("$q"); done
    PIDS=("${keep[@]}")
}
submit() { # NAME: submits the job on NAME, prints its id
    "$GM" submit "$WORK/job.ini" --config "$WORK/$1.conf" >"$WORK/submit.out" 2>&1 ||
        fail "submit on $1: $(cat "$WORK/submit.out")"
    sed -n 's/^job \([0-9a-f]*\) submitted.*/\1/p' "$WORK/submit.out"
}

make_cluster dr alpha beta gamma
start_agent beta
start_agent gamma
for n in alpha beta gamma; do wait_for "$n's links" links_up $n 2; done
three_voters='sorted(m["role"] for m in d["members"]) == ["voter"] * 3 and d["chief"] == "alpha"'
wait_until 60 "alpha chief of three voters" members_is alpha "$three_voters"
T1=$(members_get alpha 'd["term"]')
pass "three voters linked, alpha is chief (term $T1)"

# --- 1. SIGTERM to the chief mid-job ------------------------------------------------------------
ID=$(submit alpha)
[ -n "$ID" ] || fail "no job id"
wait_until "$JOB_TIMEOUT" "step $TERM_STEP" job_is beta "$ID" 'j["step"] >= '$TERM_STEP
AT=$(step_of beta "$ID")
T0=$(date +%s.%N)
elected() { grep -h "event=chief-elected node=" "$WORK/beta.log" "$WORK/gamma.log" |
    awk -v t="$T1" '{ for (i = 1; i <= NF; i++) if ($i ~ /^term=/) { split($i, a, "="); if (a[2] > t) { print; exit } } }'; }
kill -TERM "$PID_alpha"
for i in $(seq 1200); do [ -n "$(elected)" ] && break; sleep 0.025; done
T_CHIEF=$(date +%s.%N)
[ -n "$(elected)" ] || fail "no new chief 30 s after SIGTERM to alpha"
term_agent alpha sent
[ "$RC" = 0 ] || fail "alpha exited $RC after SIGTERM"
T_EXIT=$(date +%s.%N)
for e in "event=signal signal=15 action=drain" "event=drain-start node=alpha" \
    "event=job-left job=$ID" "event=drain-step-done node=alpha" "event=chief-transfer to=" \
    'how="leadership handed over"'; do
    grep -qF -- "$e" "$WORK/alpha.log" || fail "alpha's log lacks '$e'"
done
NEW=$(elected | sed 's/.*node=\([^ ]*\).*/\1/')
grep -qF "event=chief-transfer to=$NEW " "$WORK/alpha.log" || fail "alpha handed over to another than $NEW"
LEFT=$(sed -n "s/.*event=job-left job=$ID step=\([0-9]*\).*/\1/p" "$WORK/alpha.log")
OTHER=beta
[ "$NEW" = beta ] && OTHER=gamma
python3 -c "print('alpha: SIGTERM at about step $AT, left after step $LEFT; %s chief %.2f s after SIGTERM; alpha exited 0 after %.2f s' % ('$NEW', $T_CHIEF - $T0, $T_EXIT - $T0))"
pass "alpha drained: step finished, leadership handed to $NEW, exit 0"

took_over() { grep -qF "event=job-takeover job=$ID lost=alpha" "$WORK/$NEW.log"; }
wait_until 60 "$NEW to take the job over" took_over
PAUSE=$(python3 -c "import time; print('%.1f' % (time.time() - $T0))")
S2=$(sed -n "s/.*event=group generation=[0-9]* rank=0 world=2 step=\([0-9]*\)\$/\1/p" "$WORK/$NEW.log" | tail -n 1)
[ -n "$S2" ] && [ "$S2" -ge "$LEFT" ] || fail "$NEW's world-2 group starts at step '$S2', before alpha's last step $LEFT"
grep -q "event=group generation=[0-9]* rank=1 world=2 step=$S2\$" "$WORK/$OTHER.log" ||
    fail "$OTHER did not join $NEW's group at step $S2"
pass "$NEW took the job over at step $S2 (alpha left after step $LEFT: no rollback); takeover seen $PAUSE s after SIGTERM"
wait_until "$JOB_TIMEOUT" "the job to end" job_is "$NEW" "$ID" 'j["state"] != "running"'
job_is "$NEW" "$ID" 'j["state"] == "done" and j["summary"]["steps"] == '$STEPS' and j["world"] == 2' ||
    fail "job $ID: $(job_get "$NEW" "$ID" 'j')"
HN=$(final_hash "$NEW" "$ID" | tail -n 1)
HO=$(final_hash "$OTHER" "$ID" | tail -n 1)
[ -n "$HN" ] && [ "$HN" = "$HO" ] || fail "final parameters differ: $NEW '$HN', $OTHER '$HO'"
pass "job $ID done on $NEW and $OTHER: $STEPS steps, identical parameters, accuracy $(job_get "$NEW" "$ID" 'j["summary"]["test_accuracy"]')%"

# --- 2. SIGTERM to a member that is not the chief ----------------------------------------------
start_agent alpha
for n in alpha beta gamma; do wait_for "$n's links" links_up $n 2; done
wait_until 60 "alpha back as a voter" members_is "$NEW" '[m["raft"] for m in d["members"] if m["node"] == "alpha"] == ["voter"]'
CH=$(chief_of "$NEW")
[ -n "$CH" ] || fail "no chief after alpha came back"
VICTIM=alpha
[ "$CH" = alpha ] && VICTIM=$OTHER
ID2=$(submit "$CH")
wait_until "$JOB_TIMEOUT" "step $TERM_STEP of job 2" job_is "$CH" "$ID2" 'j["step"] >= '$TERM_STEP' and j["world"] == 3'
T0=$(date +%s.%N)
term_agent "$VICTIM"
[ "$RC" = 0 ] || fail "$VICTIM exited $RC after SIGTERM"
grep -qF "event=signal signal=15 action=stop" "$WORK/$VICTIM.log" || fail "$VICTIM did not stop at once"
python3 -c "print('$VICTIM (not the chief) exited 0 %.2f s after SIGTERM' % ($(date +%s.%N) - $T0))"
wait_until "$JOB_TIMEOUT" "job 2 to end" job_is "$CH" "$ID2" 'j["state"] != "running"'
job_is "$CH" "$ID2" 'j["state"] == "done" and j["summary"]["steps"] == '$STEPS' and j["world"] == 2' ||
    fail "job $ID2: $(job_get "$CH" "$ID2" 'j')"
[ "$(chief_of "$CH")" = "$CH" ] || fail "the chief changed when a member left"
pass "SIGTERM on $VICTIM (not the chief): exit 0, the job went on without it and is done"

# --- 3. one chief per term -----------------------------------------------------------------------
check_one_chief_per_term

stop_agents

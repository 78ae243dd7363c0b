# tests/integration/silent.bash - sourced by silent_member.sh and silent_chief.sh (after
# lib.bash): four agents linked with alpha chief, one LeNet-5 job (named $1) submitted on
# alpha and trained past FREEZE_STEP (alpha's log), the helpers since/at_step/reached, and an
# EXIT trap that resumes every agent first (a frozen agent ignores SIGTERM until it runs).
# silent_start JOBNAME
silent_start() {
    need_fashion_mnist
    # long enough that the others are still training when the frozen agent wakes, on a quiet
    # machine too (ci: 624 steps ended 8 s into a 10 s freeze and nobody was left to rejoin)
    STEPS=1248
    FREEZE_STEP=${FREEZE_STEP:-60}
    FREEZE_S=${FREEZE_S:-6}
    DETECT_MAX_S=${DETECT_MAX_S:-10}
    JOB_TIMEOUT=${JOB_TIMEOUT:-600}

    # a frozen agent ignores SIGTERM until it runs again: resume every agent before lib's cleanup
    trap 'for p in "${PIDS[@]}"; do kill -CONT "$p" 2>/dev/null; done; cleanup' EXIT

    job_ini "$WORK/job.ini" "$1" job.model=lenet5 job.epochs=4 job.log_every=20 optim.global_batch=192 \
        schedule.kind=cosine comm.codec=fp32
    make_cluster cl alpha beta gamma delta
    start_agent beta
    start_agent gamma
    start_agent delta
    for n in alpha beta gamma delta; do wait_for "$n's links" links_up $n 3; done
    wait_until 60 "alpha to be chief" chief_is alpha alpha
    pass "four agents linked, alpha is chief"

    LINES0=$(wc -l <"$WORK/alpha.log")
    "$GM" submit "$WORK/job.ini" --config "$WORK/alpha.conf" >"$WORK/run.submit" 2>&1 ||
        fail "submit: $(cat "$WORK/run.submit")"
    ID=$(sed -n 's/^job \([0-9a-f]*\) submitted.*/\1/p' "$WORK/run.submit")
    [ -n "$ID" ] || fail "no job id in: $(cat "$WORK/run.submit")"
    since() { tail -n +"$((LINES0 + 1))" "$WORK/alpha.log"; }
    at_step() { since | awk -v k="$1" '/event=train step=/ { split($2, a, "="); if (a[2] + 0 >= k) { print a[2]; exit } }'; }
    reached() { [ -n "$(at_step "$FREEZE_STEP")" ]; }
    wait_until "$JOB_TIMEOUT" "step $FREEZE_STEP on alpha" reached
}

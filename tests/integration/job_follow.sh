#!/usr/bin/env bash
# tests/integration/job_follow.sh - attach to a running job from any member, detach with
# Ctrl-C, cancel from a member.
#
#   a1 (admitter, chief: coordinates) <--TLS loopback--> a2, a3 (members)
#
# - `submit --follow` on a1, interrupted by SIGINT once it shows progress: exit 130, one line
#   "job ID keeps running; gradmesh cancel ID stops it", and the job does run on;
# - `jobs --follow` on a2 (no id: the running job) attaches: progress lines with an ETA;
#   SIGTERM detaches the same way; `jobs --follow ID` and `jobs --follow` of no job say why;
# - `cancel ID` typed on a2 is forwarded to the coordinator (it used to answer "coordinated by
#   a1: cancel it there"): the job ends cancelled on both;
# - a follower on a1 reads "member a3 lost at step N; world 3 -> 2" when a3 is killed and
#   "member a3 back at step N; world 2 -> 3" when it returns;
# - the same job submitted again goes on from its checkpoint, and its follower reads
#   "resuming from step N (checkpoint ...)" before any progress line.
set -uo pipefail
cd "$(dirname "$0")/../.."
. tests/integration/lib.bash
need_fashion_mnist

# runs a command with SIGINT at its default: bash starts background commands with it ignored
with_sigint() { exec python3 -c 'import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp(sys.argv[1], sys.argv[1:])' "$@"; }

make_cluster flab a1 a2 a3
start_agent a2
start_agent a3
wait_for "a1 linked to a2 and a3" links_up a1 2
wait_for "a chief" chief_is a1 a1
"$GM" jobs --follow --config "$WORK/a2.conf" >"$WORK/none.out" 2>"$WORK/none.err"; rc=$?
[ $rc -eq 1 ] && grep -q "no job is running" "$WORK/none.err" || fail "jobs --follow with no job: exit $rc $(cat "$WORK/none.err")"
"$GM" jobs --follow 0123456789abcdef --config "$WORK/a2.conf" >/dev/null 2>"$WORK/nojob.err"; rc=$?
[ $rc -eq 1 ] && grep -q "knows no job 0123456789abcdef" "$WORK/nojob.err" || fail "jobs --follow of an unknown id: exit $rc $(cat "$WORK/nojob.err")"

# long enough to attach twice; cancelled at the end
job_ini "$WORK/job.ini" follow-mlp job.epochs=40 model.hidden=1024 optim.name=sgd optim.lr=0.05 \
    optim.global_batch=96 comm.codec=fp32 job.checkpoint_every=100
with_sigint "$GM" submit "$WORK/job.ini" --follow --config "$WORK/a1.conf" >"$WORK/submit.out" 2>"$WORK/submit.err" &
SUB=$!
wait_until 120 "progress from submit --follow" grep -q "step [0-9]*/[0-9]* " "$WORK/submit.out"
ID=$(sed -n 's/^job \([0-9a-f]*\) submitted.*/\1/p' "$WORK/submit.out")
[ -n "$ID" ] || fail "no job id: $(cat "$WORK/submit.out")"
kill -INT $SUB; wait $SUB; rc=$?
[ $rc -eq 130 ] || fail "submit --follow after SIGINT: exit $rc, want 130"
grep -qx "job $ID keeps running; gradmesh cancel $ID stops it" "$WORK/submit.err" ||
    fail "submit --follow said on SIGINT: $(cat "$WORK/submit.err")"
s1=$(step_of a1 "$ID")
wait_until 60 "job $ID to go on after the detach" job_is a1 "$ID" 'j["state"] == "running" and j["step"] > '"$s1"
pass "Ctrl-C on submit --follow detaches (exit 130, says so); job $ID runs on"

"$GM" jobs --follow --config "$WORK/a2.conf" >"$WORK/follow.out" 2>"$WORK/follow.err" &
FOL=$!
wait_until 60 "progress with an ETA from jobs --follow on a2" grep -q "ETA [0-9dhms]*$" "$WORK/follow.out"
grep -q "^following job $ID (follow-mlp, coordinator a1); Ctrl-C detaches, the job runs on$" "$WORK/follow.out" ||
    fail "jobs --follow on a2: $(head -3 "$WORK/follow.out")"
kill -TERM $FOL; wait $FOL; rc=$?
[ $rc -eq 130 ] || fail "jobs --follow after SIGTERM: exit $rc"
grep -qx "job $ID keeps running; gradmesh cancel $ID stops it" "$WORK/follow.err" ||
    fail "jobs --follow said: $(cat "$WORK/follow.err")"
job_is a1 "$ID" 'j["state"] == "running"' || fail "job $ID stopped when a2 detached"
pass "jobs --follow on the member a2 attaches to job $ID (progress, ETA) and detaches"

# --- members lost and back, as a follower reads them --------------------------------------------
"$GM" jobs --follow "$ID" --config "$WORK/a1.conf" >"$WORK/loss.out" 2>"$WORK/loss.err" &
FOL=$!
wait_until 60 "the follower's progress" grep -q "step [0-9]*/" "$WORK/loss.out"
kill9_agent a3
wait_until 60 "the follower to read a3 lost" grep -q "^member a3 lost at step [0-9]*; world 3 -> 2$" "$WORK/loss.out"
start_agent a3
wait_until 120 "the follower to read a3 back" grep -q "^member a3 back at step [0-9]*; world 2 -> 3$" "$WORK/loss.out"
kill -TERM $FOL; wait $FOL
pass "a follower reads $(grep -m1 "lost at" "$WORK/loss.out") and $(grep -m1 "back at" "$WORK/loss.out")"

"$GM" cancel "$ID" --config "$WORK/a2.conf" >"$WORK/cancel.out" 2>"$WORK/cancel.err" ||
    fail "cancel on a2: exit $? $(cat "$WORK/cancel.err")"
grep -qx "job $ID cancelled (by its coordinator a1)" "$WORK/cancel.out" ||
    fail "cancel on a2 said: $(cat "$WORK/cancel.out" "$WORK/cancel.err")"
wait_until 30 "job $ID cancelled on a1" job_is a1 "$ID" 'j["state"] == "cancelled"'
job_is a1 "$ID" '"a2" in j["error"]' || fail "a1 does not say who cancelled: $(job_get a1 "$ID" 'j["error"]')"
pass "cancel typed on the member a2 is forwarded: job $ID cancelled on a1 ($(job_get a1 "$ID" 'j["error"]'))"

# --- the same job again: it goes on from its newest checkpoint and says so ------------------------
"$GM" submit "$WORK/job.ini" --follow --config "$WORK/a1.conf" >"$WORK/resume.out" 2>"$WORK/resume.err" &
SUB=$!
wait_until 120 "progress of the resumed job" grep -q "step [0-9]*/" "$WORK/resume.out"
kill -TERM $SUB; wait $SUB
ID2=$(sed -n 's/^job \([0-9a-f]*\) submitted.*/\1/p' "$WORK/resume.out")
grep -q "^resuming from step [1-9][0-9]* (checkpoint .*/step-[0-9]*\.safetensors)$" "$WORK/resume.out" ||
    fail "the resubmitted job did not say it resumes: $(head -5 "$WORK/resume.out")"
first_progress=$(grep -n "step [0-9]*/" "$WORK/resume.out" | head -1 | cut -d: -f1)
resumed_line=$(grep -n "^resuming from" "$WORK/resume.out" | cut -d: -f1)
[ "$resumed_line" -lt "$first_progress" ] || fail "the resume line came after progress: $(head -6 "$WORK/resume.out")"
grep -q "step 0/0" "$WORK/resume.out" && fail "a step 0/0 progress line: $(head -6 "$WORK/resume.out")"
"$GM" cancel "$ID2" --config "$WORK/a1.conf" >/dev/null || fail "cancel $ID2"
pass "the same job again: $(grep "^resuming from" "$WORK/resume.out")"

# --- tables in units people read; --json keeps the raw numbers -------------------------------------
"$GM" jobs --config "$WORK/a1.conf" >"$WORK/jobs.txt" || fail "jobs"
grep -Eq "^    link a2 +sent +[0-9.]+ (kB|MB|GB)  received +[0-9.]+ (kB|MB|GB)$" "$WORK/jobs.txt" ||
    fail "jobs table bytes: $(cat "$WORK/jobs.txt")"
job_is a1 "$ID" 'isinstance(j["links"][0]["bytes_sent"], int) and j["links"][0]["bytes_sent"] > 1000' ||
    fail "jobs --json lost the raw bytes"
"$GM" token create --ttl 24h --config "$WORK/a1.conf" >/dev/null || fail "token create"
"$GM" token list --config "$WORK/a1.conf" >"$WORK/tokens.txt" || fail "token list"
grep -Eq "^[0-9a-f]{16} +1/1 +(24h|23h59m)  valid$" "$WORK/tokens.txt" || fail "token list: $(cat "$WORK/tokens.txt")"
"$GM" checkpoint list --config "$WORK/a1.conf" >"$WORK/ckpts.txt" || fail "checkpoint list"
grep -Eq " [0-9.]+ (kB|MB) +ok " "$WORK/ckpts.txt" || fail "checkpoint list: $(cat "$WORK/ckpts.txt")"
pass "tables: $(grep -m1 "link a2" "$WORK/jobs.txt" | sed 's/^ *//'); token expiry $(grep -Eo "(24h|23h59m)" "$WORK/tokens.txt" | head -1); checkpoints in MB"
# under sanitizers: the commands' own reports (a leak at a detach, say) land in these files
if grep -l "Sanitizer" "$WORK"/*.out "$WORK"/*.err 2>/dev/null; then fail "sanitizer report from a command"; fi
stop_agents

#!/usr/bin/env bash
# tests/integration/job_failures.sh - a job that fails while it runs is told truthfully (issue
# 23, "Job failures told truthfully"): the rank's own error line, the one `train --local`
# prints, reaches `submit --follow`, `jobs` and `status` on every member as state failed, and
# the job's history is the same on every node (the chief's replicated state holds it).
#
#   alpha (init; chief, coordinator, rank 0) --TLS-- beta (rank 1) --TLS-- gamma (rank 2)
#         `-------------------------------TLS------------------------------'
#   every agent on 127.0.0.1 with its own config and state directory
#
# The job: an MLP on Fashion-MNIST, SGD with lr = 1e30, global_batch 192: every rank's loss is
# NaN at its first steps, which `train --local` refuses to go on with ("event=diverged ...:
# the loss is not finite; lower [optim] lr").  Submitted on beta (a member: forwarded to the
# coordinator) with --follow.  Checked:
#   - submit --follow: exit 1, one line: "gradmesh submit: job ID failed: rank on NODE stopped:
#     <train --local's line>";
#   - `jobs --json` on each of the three: state failed, the same error, that line;
#     `status` on each: "job failed: <the same>"; never "cancelled", never a reason that says
#     "success", nor the bare name of an error code ("numeric error");
#   - `members --json` on each: the replicated state holds the job as failed, with that reason.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. tests/integration/lib.bash

need_fashion_mnist
JOB_TIMEOUT=${JOB_TIMEOUT:-300}

make_cluster failures alpha beta gamma
start_agent beta
start_agent gamma
for n in alpha beta gamma; do wait_for "$n's links" links_up $n 2; done
pass "three agents linked"

job_ini "$WORK/nan.ini" nan optim.name=sgd optim.lr=1e30 optim.global_batch=192 comm.codec=fp32

# what train --local says of this job: its one error line
"$GM" train --local "$WORK/nan.ini" --no-tensorboard --no-progress --out "$WORK/local.safetensors" \
    >/dev/null 2>"$WORK/local.err"
rc=$?
LOCAL=$(sed -n 's/^error: //p' "$WORK/local.err")
echo "  train --local: exit $rc: $LOCAL"
[ $rc = 78 ] || [ $rc = 1 ] || fail "train --local: exit $rc"
[[ $LOCAL == "event=diverged step="*": the loss is not finite; lower [optim] lr" ]] ||
    fail "train --local's line: $LOCAL"
# the same line but for the step and the loss's sign: every rank diverges at its own first steps
PAT='event=diverged step=[0-9]+ epoch=1 loss=-?nan: the loss is not finite; lower \[optim\] lr'

timeout "$JOB_TIMEOUT" "$GM" submit "$WORK/nan.ini" --follow --config "$WORK/beta.conf" \
    >"$WORK/follow.out" 2>"$WORK/follow.err"
rc=$?
echo "  submit --follow: exit $rc: $(cat "$WORK/follow.err")"
[ $rc = 1 ] || fail "submit --follow: exit $rc, want 1"
ID=$(sed -n 's/^job \([0-9a-f]*\) submitted.*/\1/p' "$WORK/follow.out")
[ -n "$ID" ] || fail "no job id: $(cat "$WORK/follow.out")"
[ "$(wc -l <"$WORK/follow.err")" = 1 ] || fail "submit --follow: not one line: $(cat "$WORK/follow.err")"
grep -Eq "^gradmesh submit: job $ID failed: rank on (alpha|beta|gamma) stopped: $PAT$" "$WORK/follow.err" ||
    fail "submit --follow does not give the rank's line: $(cat "$WORK/follow.err")"
REASON=$(sed -n "s/^gradmesh submit: job $ID failed: //p" "$WORK/follow.err")
pass "submit --follow on beta: failed, with the rank's own line"

# ended_as NAME: job ID is failed with REASON in NAME's jobs --json, status and replicated state
ended_as() {
    "$GM" jobs --json --config "$WORK/$1.conf" | python3 -c '
import json, sys
j = [o for o in json.load(sys.stdin)["jobs"] if o["id"] == sys.argv[1]]
sys.exit(0 if len(j) == 1 and j[0]["state"] == "failed" and j[0]["error"] == sys.argv[2] else 1)' "$ID" "$REASON" ||
        return 1
    "$GM" status --config "$WORK/$1.conf" | grep -qxF "job failed: $REASON" || return 1
    "$GM" members --json --config "$WORK/$1.conf" | python3 -c '
import json, sys
d = json.load(sys.stdin)
j = [j for j in d["state"]["jobs"] if j["job"] == sys.argv[1]]
sys.exit(0 if j and j[0]["state"] == "failed" and j[0].get("error") == sys.argv[2] and j[0].get("name") == "nan" else 1)' "$ID" "$REASON"
}
for n in alpha beta gamma; do wait_for "job $ID failed with the rank's line on $n" ended_as $n; done
pass "jobs, status and the replicated state: failed with the same line on alpha, beta and gamma"

for n in alpha beta gamma; do
    "$GM" jobs --json --config "$WORK/$n.conf" | python3 -c '
import json, sys
for j in json.load(sys.stdin)["jobs"]:
    assert j["state"] != "cancelled", j
    assert "success" not in (j["error"] or "") and (j["error"] or "") != "numeric error", j' ||
        fail "$n lists a job cancelled, or with a reason that is no reason"
done
grep -Eh 'event=job[-a-z]* .*(err|reason|msg)="success"' "$WORK"/*.log &&
    fail "a job event says a failure was a success"
grep -h "event=job-end job=$ID " "$WORK/alpha.log" | grep -v "state=failed" &&
    fail "alpha ended the job other than failed (or twice)"
[ "$(grep -c "event=job-end job=$ID " "$WORK/alpha.log")" = 1 ] || fail "alpha ended job $ID more than once"
pass "one end, failed, everywhere: no cancelled, no \"success\""
stop_agents

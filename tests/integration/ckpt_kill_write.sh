#!/usr/bin/env bash
# tests/integration/ckpt_kill_write.sh - issue 13, "Done when" 2: kill -9 of the chief while
# it writes a checkpoint.  No partial file is ever committed, the survivors go on, and the
# job completes.
#
#   alpha (init: the first chief, coordinator, rank 0) --TLS-- beta, gamma
#   every agent on 127.0.0.1 with its own config and state directory
#
# The job: an MLP (hidden 1024: about 9.8 MB of weights and Adam moments a checkpoint, so a
# write takes measurable time) on Fashion-MNIST, 1 epoch = 312 steps of global batch 192,
# seed 3, fp32, a checkpoint every 25 steps, the newest 3 kept.
#  1. undisturbed run: its test accuracy, and how long alpha's checkpoint writes took;
#  2. the checkpoints removed everywhere, the same job again; a watcher polls alpha's
#     checkpoint directory (every 0.5 ms) and kills alpha (-9) the moment the temp file of a
#     checkpoint of step >= 50 appears ("step-N.safetensors.tmp.<alpha's pid>", made by
#     gm_safetensors_write before the first byte).  Nothing in gradmesh knows about the test.
#     Checked after the kill: the temp file is still there (the write was cut short), and
#     alpha holds no step-N file with a .sha256 (nothing of step N was committed by alpha);
#  3. beta or gamma becomes chief, takes the job over and it completes all 312 steps;
#     exactly one chief per term in the logs; accuracy within 1 point of the undisturbed run;
#  4. on the survivors, `checkpoint list --json` shows only complete, verified files (state
#     ok, sha256sum -c passes); every checkpoint the replicated state commits that a survivor
#     still holds hashes to the committed SHA-256 there; the newest committed one is the
#     job's last step, held by both survivors, and, exported, gives the reported accuracy in
#     a NumPy forward pass;
#  5. alpha restarted: its `checkpoint list` does not take the temp file for a checkpoint,
#     and lists nothing but verified files.
# Every wait polls a condition (deadlines only keep a hung run from hanging CI).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. tests/integration/lib.bash

need_fashion_mnist
need_numpy
STEPS=312
KILL_FROM=50
JOB_TIMEOUT=${JOB_TIMEOUT:-900}

job_ini "$WORK/job.ini" ckw job.seed=3 job.log_every=50 job.checkpoint_every=25 job.checkpoint_keep=3 \
    model.hidden=1024 optim.global_batch=192 comm.codec=fp32
KEY=$(job_key "$WORK/job.ini")

make_cluster ckw alpha beta gamma
start_agent beta
start_agent gamma
for n in alpha beta gamma; do wait_for "$n's links" links_up $n 2; done
wait_until 60 "alpha to be chief" chief_is alpha alpha
pass "three agents linked, alpha is chief"

# --- 1. the undisturbed run ----------------------------------------------------------------
timeout "$JOB_TIMEOUT" "$GM" submit "$WORK/job.ini" --follow --config "$WORK/alpha.conf" \
    >"$WORK/ref.submit" 2>&1 || { cat "$WORK/ref.submit"; fail "undisturbed run"; }
REF=$(sed -n 's/^job \([0-9a-f]*\) submitted.*/\1/p' "$WORK/ref.submit")
job_is alpha "$REF" 'j["state"] == "done" and j["summary"]["steps"] == '$STEPS || fail "run $REF not done"
ACC_REF=$(job_get alpha "$REF" 'j["summary"]["test_accuracy"]')
WMS=$(grep -o "event=checkpoint step=[0-9]* path=$WORK/alpha/checkpoints/$KEY/[^ ]* sha256=[0-9a-f]* write_ms=[0-9.]*" "$WORK/alpha.log" |
    sed 's/.*write_ms=//' | sort -n | awk '{a[NR]=$1} END {if (NR) print a[1] "/" a[int((NR+1)/2)] "/" a[NR]}')
[ -n "$WMS" ] || fail "alpha logged no checkpoint writes"
pass "undisturbed run: $STEPS steps, test accuracy $ACC_REF%; alpha's checkpoint writes took min/median/max $WMS ms"

# --- 2. the chief killed while it writes a checkpoint ---------------------------------------
for n in alpha beta gamma; do rm -rf "$WORK/$n/checkpoints/$KEY"; done
"$GM" submit "$WORK/job.ini" --config "$WORK/alpha.conf" >"$WORK/run.submit" 2>&1 ||
    { cat "$WORK/run.submit"; fail "submit"; }
ID=$(sed -n 's/^job \([0-9a-f]*\) submitted.*/\1/p' "$WORK/run.submit")
[ -n "$ID" ] || fail "no job id in: $(cat "$WORK/run.submit")"
ADIR="$WORK/alpha/checkpoints/$KEY"
TMP=$(timeout "$JOB_TIMEOUT" python3 - "$ADIR" "$PID_alpha" "$KILL_FROM" <<'PY'
import os, re, signal, sys, time
d, pid, first = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
pat = re.compile(r"^step-(\d{10})\.safetensors\.tmp\.%d$" % pid)
while True:
    try:
        names = os.listdir(d)
    except FileNotFoundError:
        names = []
    for n in names:
        m = pat.match(n)
        if m and int(m.group(1)) >= first:
            os.kill(pid, signal.SIGKILL)
            print(n)
            sys.exit(0)
    time.sleep(0.0005)
PY
) || fail "no checkpoint write of step >= $KILL_FROM seen on alpha"
reap_agent alpha
S=$(echo "$TMP" | sed 's/^step-0*\([0-9][0-9]*\)\.safetensors\.tmp\..*/\1/')
FINAL=$(printf 'step-%010d.safetensors' "$S")
[ -e "$ADIR/$TMP" ] || fail "alpha was killed after its write of step $S had ended ($TMP gone): not mid-write"
PARTIAL=$(stat -c %s "$ADIR/$TMP")
[ ! -e "$ADIR/$FINAL.sha256" ] || fail "alpha committed $FINAL although it was killed writing it"
pass "alpha (chief, rank 0) killed (-9) while writing the checkpoint of step $S: $TMP left with $PARTIAL bytes, no $FINAL.sha256"

# --- 3. the survivors go on -------------------------------------------------------------------
took_over() { grep -qF "event=job-takeover job=$ID lost=alpha" "$WORK/beta.log" "$WORK/gamma.log"; }
wait_until 60 "a survivor to take the job over" took_over
NEW=$(grep -lF "event=job-takeover job=$ID lost=alpha" "$WORK/beta.log" "$WORK/gamma.log" |
    head -n 1 | sed 's#.*/\(.*\)\.log#\1#')
OTHER=beta
[ "$NEW" = beta ] && OTHER=gamma
wait_until "$JOB_TIMEOUT" "the job to end on $NEW" job_is "$NEW" "$ID" 'j["state"] != "running"'
job_is "$NEW" "$ID" 'j["state"] == "done" and j["summary"]["steps"] == '$STEPS ||
    fail "job $ID: $(job_get "$NEW" "$ID" 'j')"
ACC=$(job_get "$NEW" "$ID" 'j["summary"]["test_accuracy"]')
python3 -c "import sys; sys.exit(0 if abs($ACC - $ACC_REF) <= 1.0 else 1)" ||
    fail "test accuracy $ACC% is not within 1 point of the undisturbed run's $ACC_REF%"
if grep -l "replicas_differ" "$WORK"/*.log; then fail "a log reports replicas_differ"; fi
pass "$NEW took the job over; done, $STEPS steps, accuracy $ACC% (undisturbed $ACC_REF%)"
check_one_chief_per_term

# --- 4. only complete, verified checkpoints; the committed ones hash right -------------------
"$GM" members --json --config "$WORK/$NEW.conf" >"$WORK/members.json" || fail "members on $NEW"
for n in "$NEW" "$OTHER"; do
    "$GM" checkpoint list --json --config "$WORK/$n.conf" >"$WORK/list.$n" || fail "list on $n"
    (cd "$WORK/$n/checkpoints/$KEY" && sha256sum --quiet -c ./*.sha256) || fail "$n: sha256sum -c"
    python3 - "$WORK/list.$n" "$WORK/members.json" "$KEY" "$WORK/$n/checkpoints/$KEY" "$STEPS" <<'PY' ||
import hashlib, json, os, sys
lst, members, key, d, steps = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3], sys.argv[4], int(sys.argv[5])
mine = [c for c in lst if c["id"].startswith(key + "-")]
assert mine, lst
for c in mine:
    assert c["state"] == "ok", c
    assert ".tmp" not in c["path"], c
committed = {c["step"]: c for c in members["state"]["checkpoints"] if c["job"] == key}
assert steps in committed, sorted(committed)
assert max(committed) == steps, sorted(committed)
held = 0
for step, c in committed.items():
    p = os.path.join(d, "step-%010d.safetensors" % step)
    if os.path.exists(p):
        held += 1
        got = hashlib.sha256(open(p, "rb").read()).hexdigest()
        assert got == c["sha256"], (p, got, c)
assert os.path.exists(os.path.join(d, "step-%010d.safetensors" % steps))
print(len(mine), held, file=sys.stderr)
PY
        fail "$n: checkpoints: $(cat "$WORK/list.$n")"
done
# (the python above: both survivors hold step $STEPS, hashing to what the state commits)
"$GM" checkpoint export "$KEY-$STEPS" "$WORK/last.safetensors" --config "$WORK/$OTHER.conf" >/dev/null ||
    fail "export of the newest committed checkpoint from $OTHER"
PY=$(python3 tests/integration/eval_checkpoint.py "$WORK/last.safetensors" "$DATA") || fail "eval"
PYACC=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['accuracy'])" "$PY")
python3 -c "import sys; sys.exit(0 if abs($PYACC - $ACC) <= 0.05 else 1)" || fail "NumPy $PYACC% vs reported $ACC%"
pass "survivors list only verified checkpoints; every committed one they hold hashes right; the newest committed (step $STEPS) exported gives $PYACC% (reported $ACC%)"

# --- 5. alpha back: the partial file is not a checkpoint ---------------------------------------
start_agent alpha
"$GM" checkpoint list --json --config "$WORK/alpha.conf" >"$WORK/list.alpha" || fail "list on alpha"
python3 - "$WORK/list.alpha" "$TMP" <<'PY' || fail "alpha's list: $(cat "$WORK/list.alpha")"
import json, sys
l = json.load(open(sys.argv[1]))
for c in l:
    assert sys.argv[2] not in c["path"] and ".tmp" not in c["path"], c
    assert c["state"] == "ok", c
PY
pass "alpha restarted: its list ($(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))))' "$WORK/list.alpha") checkpoints, all ok) does not take $TMP for a checkpoint"
stop_agents

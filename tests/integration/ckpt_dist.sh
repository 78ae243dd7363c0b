#!/usr/bin/env bash
# tests/integration/ckpt_dist.sh - checkpoints of a distributed job: written by rank 0 (the
# coordinator), replicated over the member links, listed and exported with the CLI, and a
# cluster killed (-9) mid-job and restarted resumes the job by itself from the newest
# committed checkpoint.
#
#   alpha (init; coordinator, rank 0) --TLS-- beta (rank 1)
#        \                                    /
#         `---------------TLS------- gamma (rank 2)
#   every agent on 127.0.0.1 with its own config and state directory
#
# The job: an MLP (hidden 64) on Fashion-MNIST, Adam lr 2e-3, global_batch 192, 2 epochs =
# 624 steps, seed 2, fp32, checkpoint_every = 100, checkpoint_keep = 2.
#  1. undisturbed run: alpha writes checkpoints 100..600 and 624; beta and gamma each receive
#     every one (event=checkpoint-received with alpha's SHA-256) and keep the newest 2, byte
#     for byte alpha's; alpha records 3 holders of step 624 (event=checkpoint-replicated);
#  2. `checkpoint list --json` on alpha: 600 and 624, state ok, holders alpha, beta, gamma;
#     the chief committed 624 (held by a majority of the voters) to the replicated state;
#     on beta: the same files, verified there;
#  3. `checkpoint export KEY-624 FILE` on beta (a replica): loads with safetensors.numpy and a
#     NumPy forward pass gives the test accuracy the job reported (within 0.05 points); an ID
#     that does not exist exits 1;
#  4. the checkpoints removed everywhere, the same job again; once two agents hold its checkpoint 200, all
#     three agents are killed (-9), each one's newest checkpoint is corrupted (one byte), all
#     three restart and nobody submits anything: the chief the restarted cluster elects finds
#     the job (its text, SHA-256-checked, and global batch) in the replicated state, waits for
#     every member, takes it again under its id (event=job-auto-resume) and resumes from the
#     newest raft-committed checkpoint it holds intact: its corrupt newest one is refused when
#     the cluster committed it (and skipped when not), the one before is used (event=resume),
#     the job completes, and its final parameters are bitwise those of the undisturbed run
#     (the same world, the same data order from the resumed step, rank 0's state broadcast
#     to the others); the newest committed checkpoint is then the resumed run's last step,
#     verified, and exported it gives the reported accuracy; one chief per term in the logs.
# Nothing here is timed: every wait polls a condition (deadlines only keep a hung run from
# hanging CI).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. tests/integration/lib.bash

need_fashion_mnist
need_numpy
STEPS=624
JOB_TIMEOUT=${JOB_TIMEOUT:-600}

job_ini "$WORK/job.ini" ckd job.epochs=2 job.seed=2 job.log_every=100 job.checkpoint_every=100 \
    job.checkpoint_keep=2 model.hidden=64 optim.lr=0.002 optim.global_batch=192 comm.codec=fp32
KEY=$(job_key "$WORK/job.ini")

make_cluster ckd alpha beta gamma
start_agent beta
start_agent gamma
for n in alpha beta gamma; do wait_for "$n's links" links_up $n 2; done
pass "three agents linked"

ckpt_sha() { # NAME STEP: the SHA-256 NAME's .sha256 records for STEP
    cut -d' ' -f1 "$WORK/$1/checkpoints/$KEY/$(printf 'step-%010d' "$2").safetensors.sha256" 2>/dev/null
}

# --- 1. the undisturbed run --------------------------------------------------------------
timeout "$JOB_TIMEOUT" "$GM" submit "$WORK/job.ini" --follow --config "$WORK/alpha.conf" \
    >"$WORK/ref.submit" 2>&1 || { cat "$WORK/ref.submit"; fail "undisturbed run"; }
REF=$(sed -n 's/^job \([0-9a-f]*\) submitted.*/\1/p' "$WORK/ref.submit")
job_is alpha "$REF" 'j["state"] == "done" and j["summary"]["steps"] == '$STEPS || fail "run $REF not done"
ACC=$(job_get alpha "$REF" 'j["summary"]["test_accuracy"]')
HREF=$(final_hash alpha "$REF")
[ -n "$HREF" ] || fail "no final hash"
for s in 100 200 300 400 500 600 624; do
    grep -q "event=checkpoint step=$s path=$WORK/alpha/checkpoints/$KEY/" "$WORK/alpha.log" || fail "alpha: no checkpoint at $s"
done
SHA624=$(ckpt_sha alpha 624)
[ -n "$SHA624" ] || fail "alpha has no committed checkpoint 624"
for n in beta gamma; do
    log_has $n "event=checkpoint-received peer=alpha key=$KEY step=624 "
    grep -q "event=checkpoint-received peer=alpha key=$KEY step=624 .*sha256=$SHA624" "$WORK/$n.log" || fail "$n: wrong hash for 624"
    [ "$(grep -c "event=checkpoint-received peer=alpha key=$KEY " "$WORK/$n.log")" -eq 7 ] || fail "$n: not 7 checkpoints received"
    got=$(cd "$WORK/$n/checkpoints/$KEY" && ls *.safetensors | xargs)
    [ "$got" = "step-0000000600.safetensors step-0000000624.safetensors" ] || fail "$n keeps '$got'"
    for s in 600 624; do
        f=$(printf 'step-%010d.safetensors' $s)
        cmp "$WORK/alpha/checkpoints/$KEY/$f" "$WORK/$n/checkpoints/$KEY/$f" || fail "$n: $f differs"
    done
    (cd "$WORK/$n/checkpoints/$KEY" && sha256sum --quiet -c *.sha256) || fail "$n: sha256sum -c"
done
log_has alpha "event=checkpoint-replicated peer=gamma key=$KEY step=624 sha256=$SHA624 holders="
grep -q "event=checkpoint-replicated .* step=624 .*holders=3" "$WORK/alpha.log" || fail "alpha: 624 not held by 3"
pass "7 checkpoints written by alpha, each replicated to beta and gamma (newest 2 kept, byte-identical), accuracy $ACC%"

# --- 2. list ---------------------------------------------------------------------------------
"$GM" checkpoint list --json --config "$WORK/alpha.conf" >"$WORK/list.alpha" || fail "list on alpha"
python3 - "$WORK/list.alpha" "$KEY" <<'PY' || fail "alpha's list: $(cat "$WORK/list.alpha")"
import json, sys
l = json.load(open(sys.argv[1]))
assert [c["step"] for c in l] == [600, 624], l
for c in l:
    assert c["state"] == "ok" and c["job"] == "ckd" and c["model"] == "mlp" and c["id"] == f"{sys.argv[2]}-{c['step']}", c
assert sorted(l[1]["holders"]) == ["alpha", "beta", "gamma"], l[1]
PY
"$GM" checkpoint list --config "$WORK/beta.conf" >"$WORK/list.beta" || fail "list on beta"
[ "$(grep -c " ok " "$WORK/list.beta")" -eq 2 ] || fail "beta's list: $(cat "$WORK/list.beta")"
pass "checkpoint list: 600 and 624 ok, 624 held by alpha, beta and gamma"

# the chief commits a checkpoint held by a majority of the voters to the replicated state, on
# every member's copy of it (gradmesh members --json: state.checkpoints)
for n in alpha gamma; do
    "$GM" members --json --config "$WORK/$n.conf" >"$WORK/members.$n" || fail "members on $n"
    python3 - "$WORK/members.$n" "$KEY" "$SHA624" <<'PY' || fail "$n's replicated checkpoints: $(cat "$WORK/members.$n")"
import json, sys
m = json.load(open(sys.argv[1]))
ck = {c["step"]: c for c in m["state"]["checkpoints"] if c["job"] == sys.argv[2]}
assert 624 in ck, ck
c = ck[624]
assert c["sha256"] == sys.argv[3] and c["term"] >= 1, c
assert len(c["holders"]) >= 2 and set(c["holders"]) <= {"alpha", "beta", "gamma"}, c
PY
done
pass "the chief committed step 624 (held by a majority) to the replicated state, seen on alpha and gamma"

# --- 3. export from a replica ----------------------------------------------------------------
"$GM" checkpoint export "$KEY-624" "$WORK/exported.safetensors" --config "$WORK/beta.conf" \
    >"$WORK/export.out" || fail "export: $(cat "$WORK/export.out")"
PY=$(python3 tests/integration/eval_checkpoint.py "$WORK/exported.safetensors" "$DATA") || fail "eval"
PYACC=$(python3 -c "import json,sys;d=json.loads(sys.argv[1]);assert d['tensors']==['fc1.bias','fc1.weight','fc2.bias','fc2.weight'],d;print(d['accuracy'])" "$PY") \
    || fail "exported tensors: $PY"
python3 -c "import sys; sys.exit(0 if abs($PYACC - $ACC) <= 0.05 else 1)" || fail "NumPy $PYACC% vs reported $ACC%"
"$GM" checkpoint export "$KEY-999" "$WORK/nope.safetensors" --config "$WORK/beta.conf" 2>/dev/null && fail "export of a missing ID"
pass "exported from beta: NumPy forward pass $PYACC% (reported $ACC%)"

# --- 4. all agents killed mid-job, restarted, the job resumed ---------------------------------
for n in alpha beta gamma; do rm -rf "$WORK/$n/checkpoints/$KEY"; done
declare -A L0 # each log's length before this run: its lines after that are this run's
for n in alpha beta gamma; do L0[$n]=$(wc -l <"$WORK/$n.log"); done
# Two agents have received the writer's checkpoint 200 of this run, so every agent holds two
# (100 and 200).  Read from the logs, not `gradmesh jobs`: under load one CLI poll takes half
# a second, and the job runs from step 300 to its end in about one.
replicas_at() {
    local c=0 n
    for n in alpha beta gamma; do
        tail -n +$((L0[$n] + 1)) "$WORK/$n.log" | grep -q "event=checkpoint-received peer=[^ ]* key=$KEY step=$1 " && c=$((c + 1))
    done
    [ $c -ge 2 ]
}
"$GM" submit "$WORK/job.ini" --config "$WORK/alpha.conf" >"$WORK/run.submit" 2>&1 || fail "submit"
ID=$(sed -n 's/^job \([0-9a-f]*\) submitted.*/\1/p' "$WORK/run.submit")
wait_until "$JOB_TIMEOUT" "checkpoint 200 replicated" replicas_at 200
for n in alpha beta gamma; do kill9_agent $n; done
# Whichever agent the restarted cluster elects chief coordinates the job and resumes from its
# own copy, so every agent's newest committed checkpoint is corrupted (a kill during a write or
# a transfer may leave a newer one uncommitted, or a replica one behind).
declare -A NEWEST BEFORE
for n in alpha beta gamma; do
    NEWEST[$n]=$(cd "$WORK/$n/checkpoints/$KEY" && ls step-*.sha256 | sort | tail -1 | sed 's/.sha256$//')
    BEFORE[$n]=$(cd "$WORK/$n/checkpoints/$KEY" && ls step-*.sha256 | sort | tail -2 | head -1 | sed 's/.sha256$//')
    [ "${NEWEST[$n]}" != "${BEFORE[$n]}" ] || fail "$n holds one checkpoint only"
    size=$(stat -c %s "$WORK/$n/checkpoints/$KEY/${NEWEST[$n]}")
    printf '\x55' | dd of="$WORK/$n/checkpoints/$KEY/${NEWEST[$n]}" bs=1 seek=$((size - 7)) conv=notrunc status=none
done
pass "all three agents killed (-9) after checkpoint 200; each one's newest checkpoint corrupted (alpha's ${NEWEST[alpha]})"
for n in alpha beta gamma; do start_agent $n; done
for n in alpha beta gamma; do wait_for "$n's links" links_up $n 2; done
# nobody submits: the elected chief resumes the job it finds in the replicated state
auto_resumed() { grep -l "event=job-auto-resume job=$ID " "$WORK"/{alpha,beta,gamma}.log 2>/dev/null | head -1; }
has_auto_resumed() { [ -n "$(auto_resumed)" ]; } # evaluated at every poll, not once
wait_until 120 "a chief to resume job $ID by itself" has_auto_resumed
C=$(basename "$(auto_resumed)" .log)
[ "$(grep -l "event=job-auto-resume job=$ID " "$WORK"/{alpha,beta,gamma}.log | wc -l)" -eq 1 ] || fail "more than one agent resumed $ID"
grep -q "event=job-auto-resume job=$ID .* missing=none" "$WORK/$C.log" || fail "$C resumed $ID without every member"
wait_until "$JOB_TIMEOUT" "resumed job $ID done on $C" job_is $C "$ID" 'j["state"] in ("done", "failed", "refused")'
job_is $C "$ID" 'j["state"] == "done" and j["summary"]["steps"] == '$STEPS || fail "resumed run not done: $(job_get $C "$ID" j)"
NEW_C=${NEWEST[$C]}
BEF_C=${BEFORE[$C]}
file_step() { echo "$1" | sed 's/^step-0*\([0-9][0-9]*\)\.safetensors$/\1/'; } # step-0000000600.safetensors: 600
# what the cluster committed for the job, as the chief's replicated state holds it
"$GM" members --json --config "$WORK/$C.conf" >"$WORK/members.res" || fail "members on $C"
COMMITTED=$(python3 -c '
import json, sys
m = json.load(open(sys.argv[1]))
print(" ".join(str(c["step"]) for c in m["state"]["checkpoints"] if c["job"] == sys.argv[2]))' "$WORK/members.res" "$KEY")
case " $COMMITTED " in *" $(file_step "$BEF_C") "*) ;; *) fail "$BEF_C is not committed ($COMMITTED)";; esac
case " $COMMITTED " in
*" $(file_step "$NEW_C") "*)
    grep -q "event=checkpoint-refused path=$WORK/$C/checkpoints/$KEY/$NEW_C reason=\"corrupt" "$WORK/$C.log" ||
        fail "$C (the coordinator): its corrupt committed $NEW_C not refused";;
esac
grep -q "event=resume path=$WORK/$C/checkpoints/$KEY/$BEF_C " "$WORK/$C.log" || fail "$C: not resumed from $BEF_C"
HRES=$(final_hash $C "$ID")
[ "$HRES" = "$HREF" ] || fail "resumed run ends with $HRES, the undisturbed one with $HREF"
for n in alpha beta gamma; do [ "$(final_hash $n "$ID")" = "$HREF" ] || fail "$n's final parameters differ"; done
pass "restarted cluster: chief $C resumed job $ID by itself from the committed $BEF_C (committed: $COMMITTED; the corrupt $NEW_C not used): final parameters bitwise the undisturbed run's"
check_newest_committed "$C" "$KEY" "$STEPS" "$(job_get $C "$ID" 'j["summary"]["test_accuracy"]')" "$DATA"
check_one_chief_per_term
stop_agents

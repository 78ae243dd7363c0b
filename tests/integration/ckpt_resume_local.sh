#!/usr/bin/env bash
# Checkpoints of `gradmesh train --local` and --resume, on the real Fashion-MNIST files.
# An MLP (hidden 64, dropout 0.1, Adam, cosine schedule with warm-up: the dropout masks and
# the learning rate depend on the step), batch 256, 3 epochs (702 steps), seed 5,
# checkpoint_every = 100.  Every run works in its own directory with the same job file
# (checkpoints go to ./NAME.checkpoints, and a checkpoint names its job by the SHA-256 of
# the job text).
#  1. run A, uninterrupted: checkpoints at 100..700 and at the end (702); checkpoint_keep = 3
#     leaves 600, 700 and 702; sha256sum -c accepts every .sha256;
#  2. resume from A's step 600 checkpoint file -> final weights byte-identical to A's;
#  3. run B stopped by SIGINT once its first checkpoint exists (exit 130, a checkpoint at
#     the step where it stopped), then `--resume DIR` -> byte-identical to A;
#  4. refusals: the newest checkpoint of a copy of A's directory corrupted (one byte) -> a
#     --resume of that directory falls back to the one before, logs why, ends identical to
#     A; a truncated file given by name falls back the same way; a checkpoint of another job
#     (another seed) is refused as foreign: exit 78, error lines naming the file and the key
#     that differs ("[job] seed (5 -> 6)"); a
#     checkpoint directory that cannot be written warns at every checkpoint and the run
#     still ends with the same weights;
#  5. the last checkpoint loads with Python's safetensors (safetensors.numpy) and a NumPy
#     forward pass gives the accuracy the run reported (within 0.05 points);
#  6. extending a finished run: a job that differs only in [job] epochs (1 -> 2; a constant
#     learning rate, so the longer run's steps do not depend on its length) resumes from the
#     finished run's last checkpoint (step 234), says "extending from 1 to 2 epochs", reaches
#     step 468 and ends byte-identical to a 2-epoch run from scratch; the same job with
#     another [optim] lr is refused (exit 78) with a message naming "[optim] lr (0.002 ->
#     0.003)"; a job of fewer epochs than the checkpoint's step is refused (exit 78).
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/integration/lib.bash # GM: an absolute path (the runs below work in directories of their own)
root=$PWD
need_fashion_mnist

epochs=3
[ -n "${GM_SAN:-}" ] && epochs=2 # ASan is ~4x slower; the resume is as strict either way
job() { # FILE SEED: the job file
    job_ini "$1" ck job.epochs=$epochs job.seed="$2" job.log_every=1000 job.checkpoint_every=100 job.checkpoint_keep=3 \
        model.hidden=64 model.dropout=0.1 optim.lr=0.002 optim.batch=256 schedule.kind=cosine schedule.warmup_steps=50
}
job "$WORK/job.ini" 5
total=$((60000 / 256 * epochs))
train() { # dir, extra args...
    local d=$1; shift
    mkdir -p "$d"
    (cd "$d" && "$GM" train --local "$WORK/job.ini" --no-progress --no-tensorboard "$@")
}

# --- 1. uninterrupted -----------------------------------------------------------------
train "$WORK/a" --out "$WORK/a.safetensors" --summary-json "$WORK/a.json" 2>"$WORK/a.log" \
    || { tail "$WORK/a.log"; fail "run A"; }
[ "$(grep -c 'event=checkpoint step=' "$WORK/a.log")" -eq $((total / 100 + 1)) ] \
    || fail "run A wrote $(grep -c 'event=checkpoint step=' "$WORK/a.log") checkpoints"
last=$(printf 'step-%010d.safetensors' "$total")
want=$(printf 'step-%010d.safetensors step-%010d.safetensors %s' \
    $(((total / 100 - 1) * 100)) $((total / 100 * 100)) "$last")
got=$(cd "$WORK/a/ck.checkpoints" && ls *.safetensors | xargs)
[ "$got" = "$want" ] || fail "kept checkpoints: '$got', want '$want'"
(cd "$WORK/a/ck.checkpoints" && sha256sum --quiet -c *.sha256) || fail "sha256sum -c"
ls "$WORK/a/ck.checkpoints" | grep -q tmp && fail "temp files left"
pass "run A: $((total / 100 + 1)) checkpoints written, kept: $got"

# --- 2. resume from a file ----------------------------------------------------------------
mid=$(printf '%s/a/ck.checkpoints/step-%010d.safetensors' "$WORK" $((total / 100 * 100 - 100)))
cp -r "$WORK/a/ck.checkpoints" "$WORK/keep"
train "$WORK/r1" --out "$WORK/r1.safetensors" --resume "$mid" 2>"$WORK/r1.log" \
    || { tail "$WORK/r1.log"; fail "resume from $mid"; }
grep -q "event=resume path=$mid step=$((total / 100 * 100 - 100))" "$WORK/r1.log" \
    || fail "no resume line"
cmp "$WORK/a.safetensors" "$WORK/r1.safetensors" || fail "resumed weights differ from run A"
pass "resumed at step $((total / 100 * 100 - 100)): final weights byte-identical"

# --- 3. SIGINT, then resume the directory ---------------------------------------------------
mkdir -p "$WORK/b"
(cd "$WORK/b" && exec "$GM" train --local "$WORK/job.ini" --no-progress --no-tensorboard \
    --out "$WORK/b.safetensors") 2>"$WORK/b.log" &
pid=$!
PIDS+=("$pid")
for _ in $(seq 1 600); do
    ls "$WORK/b/ck.checkpoints/"*.sha256 >/dev/null 2>&1 && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
done
kill -INT "$pid" 2>/dev/null || true
set +e
wait "$pid"
rc=$?
set -e
PIDS=()
[ $rc -eq 130 ] || { tail "$WORK/b.log"; fail "run B: exit $rc, want 130 (stopped)"; }
stop=$(sed -n 's/.*event=interrupted step=\([0-9]*\).*/\1/p' "$WORK/b.log")
[ -n "$stop" ] && [ "$stop" -lt "$total" ] || fail "run B did not stop early"
grep -q "event=checkpoint step=$stop " "$WORK/b.log" || fail "no checkpoint at the stop ($stop)"
train "$WORK/b" --out "$WORK/b.safetensors" --resume ck.checkpoints 2>"$WORK/b2.log" \
    || { tail "$WORK/b2.log"; fail "resume of B"; }
grep -q "event=resume path=ck.checkpoints/$(printf 'step-%010d' "$stop")" "$WORK/b2.log" \
    || fail "B did not resume from its newest checkpoint (step $stop)"
cmp "$WORK/a.safetensors" "$WORK/b.safetensors" || fail "stopped+resumed weights differ"
pass "stopped by SIGINT at step $stop, resumed from the directory: byte-identical"

# --- 4. refusals ------------------------------------------------------------------------------
newest=$WORK/keep/$last
size=$(stat -c %s "$newest")
printf '\x7f' | dd of="$newest" bs=1 seek=$((size - 5)) conv=notrunc status=none
train "$WORK/r2" --out "$WORK/r2.safetensors" --resume "$WORK/keep" 2>"$WORK/r2.log" \
    || { tail "$WORK/r2.log"; fail "resume with a corrupt newest"; }
grep -q "event=checkpoint-refused path=$newest reason=\"corrupt or truncated" "$WORK/r2.log" \
    || { cat "$WORK/r2.log"; fail "the corrupt checkpoint was not refused by name"; }
cmp "$WORK/a.safetensors" "$WORK/r2.safetensors" || fail "fallback resume differs"
pass "corrupt newest refused ($(grep -o 'reason="[^"]*"' "$WORK/r2.log" | head -1)), fell back"

prev=$(printf '%s/keep/step-%010d.safetensors' "$WORK" $((total / 100 * 100)))
truncate -s -100 "$prev"
train "$WORK/r3" --out "$WORK/r3.safetensors" --resume "$prev" 2>"$WORK/r3.log" \
    || { tail "$WORK/r3.log"; fail "resume of a truncated file"; }
grep -q "event=checkpoint-fallback refused=$prev" "$WORK/r3.log" || fail "no fallback line"
cmp "$WORK/a.safetensors" "$WORK/r3.safetensors" || fail "resume after truncation differs"
pass "truncated file refused, fell back to the one before"

job "$WORK/other.ini" 6
set +e
(cd "$WORK/a" && "$GM" train --local "$WORK/other.ini" --no-progress --no-tensorboard \
    --out "$WORK/o.safetensors" --resume "$WORK/a/ck.checkpoints/$last") >"$WORK/o.out" 2>"$WORK/o.log"
rc=$?
set -e
[ $rc -eq 78 ] || { cat "$WORK/o.log"; fail "foreign checkpoint: exit $rc, want 78"; }
grep -q "reason=\"foreign: job 'ck'" "$WORK/o.log" || { cat "$WORK/o.log"; fail "no foreign reason"; }
grep -q "^error: .*with other settings: \[job\] seed (5 -> 6);" "$WORK/o.log" || { cat "$WORK/o.log"; fail "the refusal does not name [job] seed"; }
[ -e "$WORK/o.safetensors" ] && fail "a refused resume trained anyway"
pass "foreign checkpoint refused: $(grep '^error: ' "$WORK/o.log" | tail -1)"

# a checkpoint that cannot be written does not stop training (ck.checkpoints is a file here)
mkdir -p "$WORK/nodir" && : >"$WORK/nodir/ck.checkpoints"
train "$WORK/nodir" --out "$WORK/nodir.safetensors" 2>"$WORK/nodir.log" \
    || { tail "$WORK/nodir.log"; fail "a run whose checkpoints cannot be written failed"; }
[ "$(grep -c 'event=checkpoint-failed' "$WORK/nodir.log")" -eq $((total / 100 + 1)) ] \
    || fail "want a checkpoint-failed warning per checkpoint"
cmp "$WORK/a.safetensors" "$WORK/nodir.safetensors" || fail "weights differ without checkpoints"
pass "checkpoints that cannot be written: $((total / 100 + 1)) warnings, training unchanged"

# --- 5. the checkpoint in Python ---------------------------------------------------------------
acc=$(python3 -c "import json;print(json.load(open('$WORK/a.json'))['test_accuracy'])")
py=$(python3 "$root/tests/integration/eval_checkpoint.py" "$WORK/a/ck.checkpoints/$last" "$DATA")
pyacc=$(python3 -c "import json,sys;print(json.loads(sys.argv[1])['accuracy'])" "$py")
python3 -c "import sys; sys.exit(0 if abs($pyacc - $acc) <= 0.05 else 1)" \
    || fail "NumPy accuracy $pyacc vs reported $acc"
pass "the last checkpoint in NumPy: $pyacc% (reported $acc%)"

# --- 6. extending a finished run ------------------------------------------------------------------
ext() { # FILE EPOCHS [SECTION.KEY=VALUE...]: the extension test's job (constant schedule)
    local f=$1 e=$2; shift 2
    job_ini "$f" ex job.epochs="$e" job.seed=5 job.log_every=1000 job.checkpoint_every=100 \
        model.hidden=64 model.dropout=0.1 optim.lr=0.002 optim.batch=256 "$@"
}
ext "$WORK/ex1.ini" 1
ext "$WORK/ex2.ini" 2
ext "$WORK/exlr.ini" 2 optim.lr=0.003
spe=$((60000 / 256))
runx() { # DIR JOB OUT LOG [args...]
    local d=$1 j=$2 o=$3 l=$4; shift 4
    mkdir -p "$d"
    (cd "$d" && "$GM" train --local "$j" --no-progress --no-tensorboard --out "$o" "$@") 2>"$l"
}
runx "$WORK/x" "$WORK/ex1.ini" "$WORK/x1.safetensors" "$WORK/x1.log" || { tail "$WORK/x1.log"; fail "1-epoch run"; }
runx "$WORK/x" "$WORK/ex2.ini" "$WORK/x2.safetensors" "$WORK/x2.log" --resume ex.checkpoints \
    || { tail "$WORK/x2.log"; fail "extended run"; }
grep -q "event=resume path=ex.checkpoints/$(printf 'step-%010d' $spe).safetensors step=$spe " "$WORK/x2.log" \
    || { cat "$WORK/x2.log"; fail "the extended run did not resume from step $spe"; }
grep -q "event=resume-extend .*: extending from 1 to 2 epochs" "$WORK/x2.log" || fail "no 'extending from 1 to 2 epochs'"
grep -q "event=done job=ex steps=$((2 * spe)) " "$WORK/x2.log" || fail "the extended run did not reach step $((2 * spe))"
runx "$WORK/xf" "$WORK/ex2.ini" "$WORK/xf.safetensors" "$WORK/xf.log" || { tail "$WORK/xf.log"; fail "2-epoch run"; }
cmp "$WORK/x2.safetensors" "$WORK/xf.safetensors" || fail "extended run differs from a 2-epoch run from scratch"
pass "1 epoch extended to 2: resumed at step $spe, ended at $((2 * spe)), byte-identical to a 2-epoch run"

set +e
runx "$WORK/x" "$WORK/exlr.ini" "$WORK/xlr.safetensors" "$WORK/xlr.log" --resume ex.checkpoints
rc=$?
set -e
[ $rc -eq 78 ] || { cat "$WORK/xlr.log"; fail "another lr: exit $rc, want 78"; }
grep -q "^error: .*a checkpoint of job 'ex' with other settings: \[optim\] lr (0.002 -> 0.003); only \[job\] epochs may change" \
    "$WORK/xlr.log" || { cat "$WORK/xlr.log"; fail "the refusal does not name [optim] lr"; }
[ -e "$WORK/xlr.safetensors" ] && fail "a refused resume trained anyway"
pass "another lr refused: $(grep 'other settings' "$WORK/xlr.log")"
set +e
runx "$WORK/x" "$WORK/ex1.ini" "$WORK/xs.safetensors" "$WORK/xs.log" --resume ex.checkpoints
rc=$?
set -e
[ $rc -eq 78 ] && grep -q "past this run's last step $spe" "$WORK/xs.log" \
    || { cat "$WORK/xs.log"; fail "fewer epochs than the checkpoint's step: exit $rc"; }
pass "fewer epochs than the checkpoint's step refused: $(grep -o "at step.*" "$WORK/xs.log")"
echo "PASS"

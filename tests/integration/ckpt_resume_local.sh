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
#     (another seed) is refused as foreign: exit 78, one error line naming the file; a
#     checkpoint directory that cannot be written warns at every checkpoint and the run
#     still ends with the same weights;
#  5. the last checkpoint loads with Python's safetensors (safetensors.numpy) and a NumPy
#     forward pass gives the accuracy the run reported (within 0.05 points).
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=$(realpath "${GM_BIN:-./gradmesh}")
root=$PWD
data=/usr/share/datasets/fashion-mnist
[ -r "$data/train-images-idx3-ubyte.gz" ] || { echo "skip: $data missing"; exit 77; }
tmp=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

epochs=3
[ -n "${GM_SAN:-}" ] && epochs=2 # ASan is ~4x slower; the resume is as strict either way
job() { # file seed
    cat >"$1" <<JOB
[job]
name = ck
model = mlp
epochs = $epochs
seed = $2
log_every = 1000
checkpoint_every = 100
checkpoint_keep = 3
[model]
hidden = 64
dropout = 0.1
[data]
kind = idx
dir = $data
[optim]
name = adam
lr = 0.002
batch = 256
[schedule]
kind = cosine
warmup_steps = 50
JOB
}
job "$tmp/job.ini" 5
total=$((60000 / 256 * epochs))
train() { # dir, extra args...
    local d=$1; shift
    mkdir -p "$d"
    (cd "$d" && "$bin" train --local "$tmp/job.ini" --no-progress --no-tensorboard "$@")
}

# --- 1. uninterrupted -----------------------------------------------------------------
train "$tmp/a" --out "$tmp/a.safetensors" --summary-json "$tmp/a.json" 2>"$tmp/a.log" \
    || { tail "$tmp/a.log"; fail "run A"; }
[ "$(grep -c 'event=checkpoint step=' "$tmp/a.log")" -eq $((total / 100 + 1)) ] \
    || fail "run A wrote $(grep -c 'event=checkpoint step=' "$tmp/a.log") checkpoints"
last=$(printf 'step-%010d.safetensors' "$total")
want=$(printf 'step-%010d.safetensors step-%010d.safetensors %s' \
    $(((total / 100 - 1) * 100)) $((total / 100 * 100)) "$last")
got=$(cd "$tmp/a/ck.checkpoints" && ls *.safetensors | xargs)
[ "$got" = "$want" ] || fail "kept checkpoints: '$got', want '$want'"
(cd "$tmp/a/ck.checkpoints" && sha256sum --quiet -c *.sha256) || fail "sha256sum -c"
ls "$tmp/a/ck.checkpoints" | grep -q tmp && fail "temp files left"
echo "ok: run A: $((total / 100 + 1)) checkpoints written, kept: $got"

# --- 2. resume from a file ----------------------------------------------------------------
mid=$(printf '%s/a/ck.checkpoints/step-%010d.safetensors' "$tmp" $((total / 100 * 100 - 100)))
cp -r "$tmp/a/ck.checkpoints" "$tmp/keep"
train "$tmp/r1" --out "$tmp/r1.safetensors" --resume "$mid" 2>"$tmp/r1.log" \
    || { tail "$tmp/r1.log"; fail "resume from $mid"; }
grep -q "event=resume path=$mid step=$((total / 100 * 100 - 100))" "$tmp/r1.log" \
    || fail "no resume line"
cmp "$tmp/a.safetensors" "$tmp/r1.safetensors" || fail "resumed weights differ from run A"
echo "ok: resumed at step $((total / 100 * 100 - 100)): final weights byte-identical"

# --- 3. SIGINT, then resume the directory ---------------------------------------------------
mkdir -p "$tmp/b"
(cd "$tmp/b" && exec "$bin" train --local "$tmp/job.ini" --no-progress --no-tensorboard \
    --out "$tmp/b.safetensors") 2>"$tmp/b.log" &
pid=$!
for _ in $(seq 1 600); do
    ls "$tmp/b/ck.checkpoints/"*.sha256 >/dev/null 2>&1 && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
done
kill -INT "$pid" 2>/dev/null || true
set +e
wait "$pid"
rc=$?
set -e
pid=
[ $rc -eq 130 ] || { tail "$tmp/b.log"; fail "run B: exit $rc, want 130 (stopped)"; }
stop=$(sed -n 's/.*event=interrupted step=\([0-9]*\).*/\1/p' "$tmp/b.log")
[ -n "$stop" ] && [ "$stop" -lt "$total" ] || fail "run B did not stop early"
grep -q "event=checkpoint step=$stop " "$tmp/b.log" || fail "no checkpoint at the stop ($stop)"
train "$tmp/b" --out "$tmp/b.safetensors" --resume ck.checkpoints 2>"$tmp/b2.log" \
    || { tail "$tmp/b2.log"; fail "resume of B"; }
grep -q "event=resume path=ck.checkpoints/$(printf 'step-%010d' "$stop")" "$tmp/b2.log" \
    || fail "B did not resume from its newest checkpoint (step $stop)"
cmp "$tmp/a.safetensors" "$tmp/b.safetensors" || fail "stopped+resumed weights differ"
echo "ok: stopped by SIGINT at step $stop, resumed from the directory: byte-identical"

# --- 4. refusals ------------------------------------------------------------------------------
newest=$tmp/keep/$last
size=$(stat -c %s "$newest")
printf '\x7f' | dd of="$newest" bs=1 seek=$((size - 5)) conv=notrunc status=none
train "$tmp/r2" --out "$tmp/r2.safetensors" --resume "$tmp/keep" 2>"$tmp/r2.log" \
    || { tail "$tmp/r2.log"; fail "resume with a corrupt newest"; }
grep -q "event=checkpoint-refused path=$newest reason=\"corrupt or truncated" "$tmp/r2.log" \
    || { cat "$tmp/r2.log"; fail "the corrupt checkpoint was not refused by name"; }
cmp "$tmp/a.safetensors" "$tmp/r2.safetensors" || fail "fallback resume differs"
echo "ok: corrupt newest refused ($(grep -o 'reason="[^"]*"' "$tmp/r2.log" | head -1)), fell back"

prev=$(printf '%s/keep/step-%010d.safetensors' "$tmp" $((total / 100 * 100)))
truncate -s -100 "$prev"
train "$tmp/r3" --out "$tmp/r3.safetensors" --resume "$prev" 2>"$tmp/r3.log" \
    || { tail "$tmp/r3.log"; fail "resume of a truncated file"; }
grep -q "event=checkpoint-fallback refused=$prev" "$tmp/r3.log" || fail "no fallback line"
cmp "$tmp/a.safetensors" "$tmp/r3.safetensors" || fail "resume after truncation differs"
echo "ok: truncated file refused, fell back to the one before"

job "$tmp/other.ini" 6
set +e
(cd "$tmp/a" && "$bin" train --local "$tmp/other.ini" --no-progress --no-tensorboard \
    --out "$tmp/o.safetensors" --resume "$tmp/a/ck.checkpoints/$last") >"$tmp/o.out" 2>"$tmp/o.log"
rc=$?
set -e
[ $rc -eq 78 ] || { cat "$tmp/o.log"; fail "foreign checkpoint: exit $rc, want 78"; }
grep -q "reason=\"foreign: job 'ck'" "$tmp/o.log" || { cat "$tmp/o.log"; fail "no foreign reason"; }
[ -e "$tmp/o.safetensors" ] && fail "a refused resume trained anyway"
echo "ok: foreign checkpoint refused: $(grep '^error: ' "$tmp/o.log" | tail -1)"

# a checkpoint that cannot be written does not stop training (ck.checkpoints is a file here)
mkdir -p "$tmp/nodir" && : >"$tmp/nodir/ck.checkpoints"
train "$tmp/nodir" --out "$tmp/nodir.safetensors" 2>"$tmp/nodir.log" \
    || { tail "$tmp/nodir.log"; fail "a run whose checkpoints cannot be written failed"; }
[ "$(grep -c 'event=checkpoint-failed' "$tmp/nodir.log")" -eq $((total / 100 + 1)) ] \
    || fail "want a checkpoint-failed warning per checkpoint"
cmp "$tmp/a.safetensors" "$tmp/nodir.safetensors" || fail "weights differ without checkpoints"
echo "ok: checkpoints that cannot be written: $((total / 100 + 1)) warnings, training unchanged"

# --- 5. the checkpoint in Python ---------------------------------------------------------------
acc=$(python3 -c "import json;print(json.load(open('$tmp/a.json'))['test_accuracy'])")
py=$(python3 "$root/tests/integration/eval_checkpoint.py" "$tmp/a/ck.checkpoints/$last" "$data")
pyacc=$(python3 -c "import json,sys;print(json.loads(sys.argv[1])['accuracy'])" "$py")
python3 -c "import sys; sys.exit(0 if abs($pyacc - $acc) <= 0.05 else 1)" \
    || fail "NumPy accuracy $pyacc vs reported $acc"
echo "ok: the last checkpoint in NumPy: $pyacc% (reported $acc%)"
echo "PASS"

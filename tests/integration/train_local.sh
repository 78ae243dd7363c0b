#!/usr/bin/env bash
# End-to-end `gradmesh train --local` on the real Fashion-MNIST files:
#  1. bad input: each case exits 78 with one error line naming the file;
#  2. LeNet-5 and the MLP (Adam 1e-3, batch 64, 5 epochs, seed 1) learn:
#     >= 85% test accuracy each.  One seed moves by about +-1 point (Adam's
#     last steps; seed 1 gives 86.1% / 86.6% here), so this bar only proves
#     the whole pipeline trains; the issue's bars (88.0% / 86.5% and within
#     0.5 points of PyTorch, means of 3 seeds) are measured by
#     bench/accuracy_vs_torch.sh.  Under sanitizers: 1 epoch, bar 80% (ASan
#     makes it ~4x slower; that run hunts memory bugs);
#  3. the checkpoint loads with Python's safetensors and an independent NumPy
#     forward pass reproduces the reported accuracy (within 0.05 points:
#     float summation order may flip an argmax or two);
#  4. SIGINT stops at a step boundary, saves the weights, exits 130.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/integration/lib.bash
need_fashion_mnist

job() { # NAME MODEL EPOCHS DIR [SECTION.KEY=VALUE...]: the job file $WORK/NAME.ini
    job_ini "$WORK/$1.ini" "$1" job.model="$2" job.epochs="$3" job.log_every=300 job.out="$WORK/$1.safetensors" \
        data.dir="$4" optim.batch=64 "${@:5}"
}

# --- 1. bad input ----------------------------------------------------------------
expect_config_error() { # description, file the message must name, command...
    local what=$1 file=$2; shift 2
    set +e
    "$@" >"$WORK/out" 2>"$WORK/err"
    local rc=$?
    set -e
    [ $rc -eq 78 ] || { cat "$WORK/err"; fail "$what: exit $rc, want 78"; }
    [ "$(grep -c '^error: ' "$WORK/err")" -eq 1 ] || { cat "$WORK/err"; fail "$what: want one error line"; }
    grep -q -F "$file" "$WORK/err" || { cat "$WORK/err"; fail "$what: error does not name $file"; }
    pass "$what -> $(grep '^error: ' "$WORK/err")"
}
expect_config_error "missing job file" "$WORK/nope.ini" "$GM" train --local "$WORK/nope.ini"
job badmodel lenet7 1 "$DATA"
expect_config_error "unknown model" "badmodel.ini" "$GM" train --local "$WORK/badmodel.ini"
job badbatch lenet5 1 "$DATA" optim.batch=-64
expect_config_error "negative batch" "badbatch.ini" "$GM" train --local "$WORK/badbatch.ini"
job badopt lenet5 1 "$DATA" optim.name=adagrad
expect_config_error "unknown optimizer" "badopt.ini" "$GM" train --local "$WORK/badopt.ini"
job nodata lenet5 1 "$WORK/no-such-dir"
expect_config_error "missing dataset" "$WORK/no-such-dir" "$GM" train --local "$WORK/nodata.ini"

mkdir -p "$WORK/trunc" "$WORK/magic" "$WORK/count"
for d in trunc magic count; do cp "$DATA"/*.gz "$WORK/$d/"; done
head -c 100000 "$DATA/train-images-idx3-ubyte.gz" >"$WORK/trunc/train-images-idx3-ubyte.gz"
job trunc lenet5 1 "$WORK/trunc"
expect_config_error "truncated images" "$WORK/trunc/train-images-idx3-ubyte" "$GM" train --local "$WORK/trunc.ini"
# labels file whose magic says "images" (0x803)
python3 - "$WORK/magic" <<'PY'
import gzip, sys
p = sys.argv[1] + "/t10k-labels-idx1-ubyte.gz"
d = bytearray(gzip.open(p).read()); d[3] = 3
gzip.open(p, "wb").write(bytes(d))
PY
job magic lenet5 1 "$WORK/magic"
expect_config_error "wrong IDX magic" "$WORK/magic/t10k-labels-idx1-ubyte" "$GM" train --local "$WORK/magic.ini"
grep -q 'wrong magic 0x00000803, expected 0x00000801' "$WORK/err" || fail "wrong magic: message"
# 9999 test labels for 10000 images
python3 - "$WORK/count" <<'PY'
import gzip, struct, sys
p = sys.argv[1] + "/t10k-labels-idx1-ubyte.gz"
d = gzip.open(p).read()
gzip.open(p, "wb").write(struct.pack(">II", 0x801, 9999) + d[8:8 + 9999])
PY
job count lenet5 1 "$WORK/count"
expect_config_error "image/label count mismatch" "$WORK/count" "$GM" train --local "$WORK/count.ini"

set +e; "$GM" train >/dev/null 2>&1; rc=$?; set -e
[ $rc -eq 2 ] || fail "train without --local: exit $rc, want 2"

# --- 2 + 3. accuracy and the checkpoint in Python ------------------------------------
if [ -n "${GM_SAN:-}" ]; then epochs=1; bar_lenet=80.0; bar_mlp=80.0; else epochs=5; bar_lenet=85.0; bar_mlp=85.0; fi
job lenet lenet5 $epochs "$DATA"
job mlp mlp $epochs "$DATA" model.hidden=256
for m in lenet mlp; do
    "$GM" train --local "$WORK/$m.ini" --no-progress --summary-json "$WORK/$m.json" 2>"$WORK/$m.log" \
        || { cat "$WORK/$m.log"; fail "$m training failed"; }
    grep 'event=epoch' "$WORK/$m.log"
    acc=$(python3 -c "import json;print(json.load(open('$WORK/$m.json'))['test_accuracy'])")
    bar=$bar_lenet; [ $m = mlp ] && bar=$bar_mlp
    python3 -c "import sys; sys.exit(0 if $acc >= $bar else 1)" || fail "$m: test accuracy $acc < $bar"
    pass "$m $epochs epochs: test accuracy $acc >= $bar"
    py=$(python3 tests/integration/eval_checkpoint.py "$WORK/$m.safetensors" "$DATA")
    echo "    python: $py"
    pyacc=$(python3 -c "import json,sys;print(json.loads(sys.argv[1])['accuracy'])" "$py")
    python3 -c "import sys; sys.exit(0 if abs($pyacc - $acc) <= 0.05 else 1)" \
        || fail "$m: NumPy forward of the checkpoint gives $pyacc, gradmesh reported $acc"
    pass "$m checkpoint reproduces $acc% in NumPy ($pyacc%)"
done

# --- 4. SIGINT saves and exits 130 ----------------------------------------------------
job sig lenet5 50 "$DATA" job.log_every=20
"$GM" train --local "$WORK/sig.ini" --no-progress 2>"$WORK/sig.log" &
pid=$!
PIDS+=("$pid")
for _ in $(seq 600); do grep -q 'event=train' "$WORK/sig.log" && break; sleep 0.1; done
grep -q 'event=train' "$WORK/sig.log" || fail "no progress line within 60 s"
kill -INT "$pid"
set +e; wait "$pid"; rc=$?; set -e
PIDS=()
[ $rc -eq 130 ] || { cat "$WORK/sig.log"; fail "SIGINT: exit $rc, want 130"; }
[ -s "$WORK/sig.safetensors" ] || fail "SIGINT: no weights written"
grep -q 'event=interrupted' "$WORK/sig.log" || fail "SIGINT: no interrupted event"
pass "SIGINT -> exit 130, weights saved"

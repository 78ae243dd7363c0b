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
bin=${GM_BIN:-./gradmesh}
data=/usr/share/datasets/fashion-mnist
[ -r "$data/train-images-idx3-ubyte.gz" ] || { echo "skip: $data missing"; exit 77; }
tmp=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

job() { # name model epochs dir [extra lines]
    cat >"$tmp/$1.ini" <<JOB
[job]
name = $1
model = $2
epochs = $3
seed = 1
log_every = 300
out = $tmp/$1.safetensors
[data]
kind = idx
dir = $4
[optim]
name = adam
lr = 0.001
batch = 64
${5:-}
JOB
}

# --- 1. bad input ----------------------------------------------------------------
expect_config_error() { # description, file the message must name, command...
    local what=$1 file=$2; shift 2
    set +e
    "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    set -e
    [ $rc -eq 78 ] || { cat "$tmp/err"; fail "$what: exit $rc, want 78"; }
    [ "$(grep -c '^error: ' "$tmp/err")" -eq 1 ] || { cat "$tmp/err"; fail "$what: want one error line"; }
    grep -q -F "$file" "$tmp/err" || { cat "$tmp/err"; fail "$what: error does not name $file"; }
    echo "ok: $what -> $(grep '^error: ' "$tmp/err")"
}
expect_config_error "missing job file" "$tmp/nope.ini" "$bin" train --local "$tmp/nope.ini"
job badmodel lenet7 1 "$data"
expect_config_error "unknown model" "badmodel.ini" "$bin" train --local "$tmp/badmodel.ini"
job badbatch lenet5 1 "$data"
sed -i 's/^batch = 64/batch = -64/' "$tmp/badbatch.ini"
expect_config_error "negative batch" "badbatch.ini" "$bin" train --local "$tmp/badbatch.ini"
job badopt lenet5 1 "$data"
sed -i 's/^name = adam/name = adagrad/' "$tmp/badopt.ini"
expect_config_error "unknown optimizer" "badopt.ini" "$bin" train --local "$tmp/badopt.ini"
job nodata lenet5 1 "$tmp/no-such-dir"
expect_config_error "missing dataset" "$tmp/no-such-dir" "$bin" train --local "$tmp/nodata.ini"

mkdir -p "$tmp/trunc" "$tmp/magic" "$tmp/count"
for d in trunc magic count; do cp "$data"/*.gz "$tmp/$d/"; done
head -c 100000 "$data/train-images-idx3-ubyte.gz" >"$tmp/trunc/train-images-idx3-ubyte.gz"
job trunc lenet5 1 "$tmp/trunc"
expect_config_error "truncated images" "$tmp/trunc/train-images-idx3-ubyte" "$bin" train --local "$tmp/trunc.ini"
# labels file whose magic says "images" (0x803)
python3 - "$tmp/magic" <<'PY'
import gzip, sys
p = sys.argv[1] + "/t10k-labels-idx1-ubyte.gz"
d = bytearray(gzip.open(p).read()); d[3] = 3
gzip.open(p, "wb").write(bytes(d))
PY
job magic lenet5 1 "$tmp/magic"
expect_config_error "wrong IDX magic" "$tmp/magic/t10k-labels-idx1-ubyte" "$bin" train --local "$tmp/magic.ini"
grep -q 'wrong magic 0x00000803, expected 0x00000801' "$tmp/err" || fail "wrong magic: message"
# 9999 test labels for 10000 images
python3 - "$tmp/count" <<'PY'
import gzip, struct, sys
p = sys.argv[1] + "/t10k-labels-idx1-ubyte.gz"
d = gzip.open(p).read()
gzip.open(p, "wb").write(struct.pack(">II", 0x801, 9999) + d[8:8 + 9999])
PY
job count lenet5 1 "$tmp/count"
expect_config_error "image/label count mismatch" "$tmp/count" "$bin" train --local "$tmp/count.ini"

set +e; "$bin" train >/dev/null 2>&1; rc=$?; set -e
[ $rc -eq 2 ] || fail "train without --local: exit $rc, want 2"

# --- 2 + 3. accuracy and the checkpoint in Python ------------------------------------
if [ -n "${GM_SAN:-}" ]; then epochs=1; bar_lenet=80.0; bar_mlp=80.0; else epochs=5; bar_lenet=85.0; bar_mlp=85.0; fi
job lenet lenet5 $epochs "$data"
job mlp mlp $epochs "$data" $'[model]\nhidden = 256'
for m in lenet mlp; do
    "$bin" train --local "$tmp/$m.ini" --no-progress --summary-json "$tmp/$m.json" 2>"$tmp/$m.log" \
        || { cat "$tmp/$m.log"; fail "$m training failed"; }
    grep 'event=epoch' "$tmp/$m.log"
    acc=$(python3 -c "import json;print(json.load(open('$tmp/$m.json'))['test_accuracy'])")
    bar=$bar_lenet; [ $m = mlp ] && bar=$bar_mlp
    python3 -c "import sys; sys.exit(0 if $acc >= $bar else 1)" || fail "$m: test accuracy $acc < $bar"
    echo "ok: $m $epochs epochs: test accuracy $acc >= $bar"
    py=$(python3 tests/integration/eval_checkpoint.py "$tmp/$m.safetensors" "$data")
    echo "    python: $py"
    pyacc=$(python3 -c "import json,sys;print(json.loads(sys.argv[1])['accuracy'])" "$py")
    python3 -c "import sys; sys.exit(0 if abs($pyacc - $acc) <= 0.05 else 1)" \
        || fail "$m: NumPy forward of the checkpoint gives $pyacc, gradmesh reported $acc"
    echo "ok: $m checkpoint reproduces $acc% in NumPy ($pyacc%)"
done

# --- 4. SIGINT saves and exits 130 ----------------------------------------------------
job sig lenet5 50 "$data"
sed -i 's/^log_every = 300/log_every = 20/' "$tmp/sig.ini"
"$bin" train --local "$tmp/sig.ini" --no-progress 2>"$tmp/sig.log" &
pid=$!
for _ in $(seq 600); do grep -q 'event=train' "$tmp/sig.log" && break; sleep 0.1; done
grep -q 'event=train' "$tmp/sig.log" || fail "no progress line within 60 s"
kill -INT "$pid"
set +e; wait "$pid"; rc=$?; set -e
pid=
[ $rc -eq 130 ] || { cat "$tmp/sig.log"; fail "SIGINT: exit $rc, want 130"; }
[ -s "$tmp/sig.safetensors" ] || fail "SIGINT: no weights written"
grep -q 'event=interrupted' "$tmp/sig.log" || fail "SIGINT: no interrupted event"
echo "ok: SIGINT -> exit 130, weights saved"

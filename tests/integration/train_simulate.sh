#!/usr/bin/env bash
# `gradmesh train --local JOB --simulate-workers N` end to end on Fashion-MNIST:
#  1. usage errors exit 2;
#  2. fp16, 2 workers, 1 epoch: the summary reports codec "fp16" and exactly
#     the ring's bytes: steps * 2(N-1) * params * 2 bytes; it learns (> 70%);
#  3. the run is deterministic: a second run writes byte-identical weights;
#  4. powersgd runs and sends far fewer bytes than fp16.
# Under sanitizers (GM_SAN set; ~4x slower) only 1 and 2 run: they cover the
# code, 3 and 4 repeat it.  Every run also passes the periodic parameter-hash
# check (replicas bitwise identical) or fails.
# Topology: none (one process, N ranks over the in-memory transport).
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${GM_BIN:-./gradmesh}
data=/usr/share/datasets/fashion-mnist
[ -r "$data/train-images-idx3-ubyte.gz" ] || { echo "skip: $data missing"; exit 77; }
tmp=$(mktemp -d)
cleanup() { rm -rf "$tmp"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

job() { # name codec
    cat >"$tmp/$1.ini" <<JOB
[job]
name = $1
model = lenet5
epochs = 1
seed = 1
log_every = 1000
out = $tmp/$1.safetensors
[data]
kind = idx
dir = $data
[optim]
name = adam
lr = 0.001
batch = 64
[comm]
codec = $2
JOB
}

job sim16 fp16
set +e
"$bin" train --local "$tmp/sim16.ini" --simulate-workers 0 2>/dev/null; rc=$?
set -e
[ $rc -eq 2 ] || fail "--simulate-workers 0 exited $rc, want 2"

"$bin" train --local "$tmp/sim16.ini" --no-progress --simulate-workers 2 \
    --summary-json "$tmp/a.json" 2>"$tmp/a.log" || { tail "$tmp/a.log"; fail "fp16 run"; }
cp "$tmp/sim16.safetensors" "$tmp/first.safetensors"
python3 - "$tmp/a.json" <<'PY' || fail "fp16 summary"
import json, sys
s = json.load(open(sys.argv[1]))
want = s["steps"] * 2 * (2 - 1) * s["params"] * 2
assert s["codec"] == "fp16", s["codec"]
assert s["bytes_sent"] == want, (s["bytes_sent"], want)
assert s["steps"] == 60000 // 2 // 64, s["steps"]
assert s["test_accuracy"] > 70, s["test_accuracy"]
PY
grep -q 'hash_checks=[1-9]' "$tmp/a.log" || fail "no parameter-hash check ran"
if [ -n "${GM_SAN:-}" ]; then
    echo "ok (sanitizers: fp16 run only)"
    exit 0
fi

"$bin" train --local "$tmp/sim16.ini" --no-progress --simulate-workers 2 2>"$tmp/b.log" ||
    fail "second fp16 run"
cmp -s "$tmp/sim16.safetensors" "$tmp/first.safetensors" || fail "two runs differ"

job simp powersgd
"$bin" train --local "$tmp/simp.ini" --no-progress --simulate-workers 2 \
    --summary-json "$tmp/p.json" 2>"$tmp/p.log" || { tail "$tmp/p.log"; fail "powersgd run"; }
python3 - "$tmp/a.json" "$tmp/p.json" <<'PY' || fail "powersgd summary"
import json, sys
a, p = (json.load(open(f)) for f in sys.argv[1:3])
assert p["codec"] == "powersgd", p["codec"]
assert p["bytes_sent"] * 10 < a["bytes_sent"], (p["bytes_sent"], a["bytes_sent"])
assert p["test_accuracy"] > 60, p["test_accuracy"]
PY
echo "ok"

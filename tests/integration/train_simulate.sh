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
. tests/integration/lib.bash
need_fashion_mnist

job() { # NAME CODEC: the job file $WORK/NAME.ini
    job_ini "$WORK/$1.ini" "$1" job.model=lenet5 job.log_every=1000 job.out="$WORK/$1.safetensors" optim.batch=64 \
        comm.codec="$2"
}

job sim16 fp16
set +e
"$GM" train --local "$WORK/sim16.ini" --simulate-workers 0 2>/dev/null; rc=$?
set -e
[ $rc -eq 2 ] || fail "--simulate-workers 0 exited $rc, want 2"

"$GM" train --local "$WORK/sim16.ini" --no-progress --simulate-workers 2 \
    --summary-json "$WORK/a.json" 2>"$WORK/a.log" || { tail "$WORK/a.log"; fail "fp16 run"; }
cp "$WORK/sim16.safetensors" "$WORK/first.safetensors"
python3 - "$WORK/a.json" <<'PY' || fail "fp16 summary"
import json, sys
s = json.load(open(sys.argv[1]))
want = s["steps"] * 2 * (2 - 1) * s["params"] * 2
assert s["codec"] == "fp16", s["codec"]
assert s["bytes_sent"] == want, (s["bytes_sent"], want)
assert s["steps"] == 60000 // 2 // 64, s["steps"]
assert s["test_accuracy"] > 70, s["test_accuracy"]
PY
grep -q 'hash_checks=[1-9]' "$WORK/a.log" || fail "no parameter-hash check ran"
if [ -n "${GM_SAN:-}" ]; then
    echo "ok (sanitizers: fp16 run only)"
    exit 0
fi

"$GM" train --local "$WORK/sim16.ini" --no-progress --simulate-workers 2 2>"$WORK/b.log" ||
    fail "second fp16 run"
cmp -s "$WORK/sim16.safetensors" "$WORK/first.safetensors" || fail "two runs differ"

job simp powersgd
"$GM" train --local "$WORK/simp.ini" --no-progress --simulate-workers 2 \
    --summary-json "$WORK/p.json" 2>"$WORK/p.log" || { tail "$WORK/p.log"; fail "powersgd run"; }
python3 - "$WORK/a.json" "$WORK/p.json" <<'PY' || fail "powersgd summary"
import json, sys
a, p = (json.load(open(f)) for f in sys.argv[1:3])
assert p["codec"] == "powersgd", p["codec"]
assert p["bytes_sent"] * 10 < a["bytes_sent"], (p["bytes_sent"], a["bytes_sent"])
assert p["test_accuracy"] > 60, p["test_accuracy"]
PY
echo "ok"

#!/usr/bin/env bash
# `gradmesh train --local JOB --simulate-workers N` end to end on Fashion-MNIST:
#  1. usage errors exit 2;
#  2. fp16, 2 workers, 1 epoch: the summary reports codec "fp16" and exactly
#     the ring's bytes: steps * 2(N-1) * params * 2 bytes; it learns (> 70%);
#  3. the run is deterministic: a second run writes byte-identical weights;
#  4. powersgd runs and sends far fewer bytes than fp16;
#  5. --simulate-resize (DiLoCo re-sizes replayed): its usage errors; a blocking diloco run
#     re-sized to the same H at a round boundary is deterministic and not the run without the
#     re-size (its outer momentum restarts there, as the agents'); an overlapped run re-sized
#     twice (H 8 -> 16 -> 8 with 8-bit deltas) takes both at round boundaries and passes its
#     hash checks.
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

# 5. re-sizes replayed
dl() { # NAME OVERLAP
    job_ini "$WORK/$1.ini" "$1" job.out="$WORK/$1.safetensors" model.hidden=32 optim.batch=64 \
        comm.codec=diloco comm.local_steps=8 comm.overlap="$2"
}
dl dlb false
dl dlo true
for bad in "0:8" "10:0" "10:8:4" "20:8,10:8" "10:8," "x"; do
    set +e
    "$GM" train --local "$WORK/dlb.ini" --simulate-workers 2 --simulate-resize "$bad" 2>"$WORK/e.log"
    rc=$?
    set -e
    [ $rc -eq 2 ] && grep -q -- "--simulate-resize '$bad'" "$WORK/e.log" ||
        fail "--simulate-resize '$bad' exited $rc, want 2 with a reason: $(cat "$WORK/e.log")"
done
set +e
"$GM" train --local "$WORK/dlb.ini" --simulate-resize 200:8 2>/dev/null; rc=$?
set -e
[ $rc -eq 2 ] || fail "--simulate-resize without --simulate-workers exited $rc, want 2"
set +e
"$GM" train --local "$WORK/sim16.ini" --simulate-workers 2 --simulate-resize 200:8 2>"$WORK/e.log"
rc=$?
set -e
[ $rc -eq 78 ] && grep -q 'simulate-resize-refused' "$WORK/e.log" ||
    fail "--simulate-resize with fp16 exited $rc, want 78"
for run in none 200:8 200:8; do
    args=()
    [ "$run" = none ] || args=(--simulate-resize "$run")
    "$GM" train --local "$WORK/dlb.ini" --no-progress --no-tensorboard --simulate-workers 2 \
        "${args[@]}" 2>"$WORK/dl.log" || { tail "$WORK/dl.log"; fail "diloco run ($run)"; }
    [ -e "$WORK/dlb-${run/:/-}.safetensors" ] && run=$run-again
    cp "$WORK/dlb.safetensors" "$WORK/dlb-${run/:/-}.safetensors"
done
grep -q 'event=simulate-resize step=200 h=8 bits=16' "$WORK/dl.log" ||
    fail "the re-size is not in the log"
cmp -s "$WORK/dlb-200-8.safetensors" "$WORK/dlb-200-8-again.safetensors" ||
    fail "two runs with the same re-size differ"
cmp -s "$WORK/dlb-none.safetensors" "$WORK/dlb-200-8.safetensors" &&
    fail "re-sized to the same H: the run without the re-size (the momentum did not restart)"
"$GM" train --local "$WORK/dlo.ini" --no-progress --no-tensorboard --simulate-workers 2 \
    --simulate-resize 100:16,300:8:8 2>"$WORK/dlo.log" || { tail "$WORK/dlo.log"; fail "overlapped re-sizes"; }
for want in 'event=simulate-resize step=104 h=16 bits=16' 'event=simulate-resize step=304 h=8 bits=8' \
    'local_steps=16 .*start_step=104' 'local_steps=8 .*codec=q8 .*start_step=304'; do
    grep -q "$want" "$WORK/dlo.log" || fail "overlapped re-sizes: no '$want' in the log"
done
grep -q 'hash_checks=[1-9]' "$WORK/dlo.log" || fail "overlapped re-sizes: no hash check passed"
echo "ok"

#!/usr/bin/env bash
# bench/forming.sh - issue 23 "Load": how long N agents on loopback take to link and agree on a
# chief, for two gradmesh binaries, their runs interleaved (A, B, A, B, ...) so that both see
# the same machine.  Each run is tests/integration/load16.sh with LOAD_N=N (16: the test as in
# make test, with its job; another number: forming only).  Prints each run's figures with the
# load average, then per binary the median time to "all linked" and to "all name one chief",
# and B's chief time over A's.  A benchmark, not a test: a run that fails load16's assertions
# after forming still counts (its FAIL line is printed: main before the controller ran at commit
# speed fails the chief's lag); exits 1 when a run failed before forming (its output printed).
#
# Usage: bench/forming.sh BINARY_A BINARY_B     PAIRS=3 LOAD_N=16
# e.g. an old build against this one:  bench/forming.sh /tmp/gradmesh-main ./gradmesh
# Needs the Fashion-MNIST files (load16.sh skips, 77, without them).  Run it on a quiet
# machine for figures to quote (docs/BENCHMARKS.md, "Load").
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
[ $# = 2 ] || { echo "usage: $0 BINARY_A BINARY_B" >&2; exit 2; }
A=$(realpath "$1") B=$(realpath "$2")
PAIRS=${PAIRS:-3}
N=${LOAD_N:-16}
OUT=$(mktemp -d /tmp/gm-forming.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
rc=0

for i in $(seq "$PAIRS"); do
    for side in A B; do
        bin=$A
        [ "$side" = A ] || bin=$B
        f="$OUT/$side.$i"
        echo "== pair $i, $side ($bin), $(date -u +%H:%M:%S) UTC, $(uptime | sed 's/.*load/load/')"
        GM_BIN=$bin LOAD_N=$N bash tests/integration/load16.sh >"$f" 2>&1
        if ! grep -q "^from the last start" "$f"; then # no figures: a real failure
            echo "   run failed before forming:"
            cat "$f"
            rc=1
            continue
        fi
        # a binary older than the test's assertions (one raft step a tick) fails them: its
        # figures still count, and its FAIL line is shown
        grep -E "^from the last start|^one chief named|^ok: .*elected|^FAIL" "$f" | sed 's/^/   /'
    done
done

python3 - "$OUT" "$PAIRS" <<'PY'
import re, statistics, sys
out, pairs = sys.argv[1], int(sys.argv[2])
med = {}
for side in "AB":
    chief, linked = [], []
    for i in range(1, pairs + 1):
        try:
            t = open("%s/%s.%d" % (out, side, i)).read()
        except OSError:
            continue
        m = re.search(r"agree on chief \S+ at ([\d.]+) s; all \d+ linked \(\d+ up each\) at ([\d.]+) s", t)
        if m:
            chief.append(float(m.group(1)))
            linked.append(float(m.group(2)))
    if chief:
        med[side] = statistics.median(chief)
        print("%s: %d runs; all linked, median %.1f s; one chief, median %.1f s (runs: %s)" % (
            side, len(chief), statistics.median(linked), med[side],
            ", ".join("%.1f" % c for c in chief)))
if len(med) == 2 and med["A"] > 0:
    print("B/A, time to one chief (medians): %.2f" % (med["B"] / med["A"]))
PY
echo "load at the end: $(uptime)"
exit $rc

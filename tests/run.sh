#!/usr/bin/env bash
# Runs every test kind `make test` covers and prints one tally line:
#   the layering check, unit binaries (args), tests/integration/*.sh, short libFuzzer runs.
# Exit status 77 means "skipped" (no GPU, no namespaces, ...).
# Environment: GM_BIN (the gradmesh binary), GM_BUILD, GM_SAN, FUZZ_SECONDS.
set -uo pipefail
cd "$(dirname "$0")/.."

pass=0 fail=0 skip=0
failed=()
logdir=${GM_BUILD:-build}/test-logs
mkdir -p "$logdir"

report() { # name, exit status, seconds, log: the tally and one line (a failure's log tail)
    local name=$1 rc=$2 secs=$3 log=$4
    if [ "$rc" -eq 0 ]; then
        pass=$((pass + 1)); printf 'PASS  %-40s %3ss\n' "$name" "$secs"
    elif [ "$rc" -eq 77 ]; then
        skip=$((skip + 1)); printf 'SKIP  %-40s %s\n' "$name" "$(tail -n 1 "$log")"
    else
        fail=$((fail + 1)); failed+=("$name")
        printf 'FAIL  %-40s (exit %d, log %s)\n' "$name" "$rc" "$log"
        tail -n 30 "$log" | sed 's/^/      /'
    fi
}

run_one() { # name, command...
    local name=$1; shift
    local log="$logdir/$(basename "$name").log"
    local t0=$SECONDS rc
    "$@" >"$log" 2>&1
    rc=$?
    report "$name" $rc $((SECONDS - t0)) "$log"
}

# The one-way arrows between modules and agent/'s rooms (docs/ARCHITECTURE.md), and a check
# that the checker refuses upward includes.
run_one "layering" bash tests/layering.sh
run_one "layering-selftest" bash tests/layering.sh --selftest

for t in "$@"; do
    run_one "unit/$(basename "$t")" "$t"
done

for t in tests/integration/*.sh; do
    [ -e "$t" ] || continue
    run_one "integration/$(basename "$t" .sh)" bash "$t"
done

# Fuzzers: a short run each from the seed corpus (long runs: see tests/fuzz/README.md), as
# many at once as there are cores (FUZZ_JOBS): each is one process on one core with a fixed
# time, so running them side by side keeps each one's fuzzing and shortens `make test`.
fuzz_one() { # binary: runs it on a copy of its corpus; its exit status in $logdir/NAME.rc
    local f=$1 name work corpus t0=$SECONDS rc
    name=$(basename "$f")
    corpus=tests/fuzz/corpus/${name#fuzz_}
    work=$(mktemp -d)
    [ -d "$corpus" ] && cp -r "$corpus"/. "$work"/ 2>/dev/null
    # -error_exitcode: libFuzzer reports a finding with 77 by default, our "skipped"
    "$f" -max_total_time="${FUZZ_SECONDS:-10}" -rss_limit_mb=2048 -error_exitcode=1 \
        -artifact_prefix="$logdir/$name-" "$work" >"$logdir/$name.log" 2>&1
    rc=$?
    rm -rf "$work"
    echo "$rc $((SECONDS - t0))" >"$logdir/$name.rc"
}
if [ -z "${GM_SAN:-}" ] && ls tests/fuzz/fuzz_*.c >/dev/null 2>&1; then
    jobs_max=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}
    if command -v clang >/dev/null &&
        make --no-print-directory -s -j"$jobs_max" fuzz >"$logdir/fuzz-build.log" 2>&1; then
        for f in build-fuzz/fuzz_*; do
            while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n; done
            rm -f "$logdir/$(basename "$f").rc"
            fuzz_one "$f" &
        done
        wait
        for f in build-fuzz/fuzz_*; do # in order, as run_one reports
            name=$(basename "$f")
            read -r rc secs <"$logdir/$name.rc" 2>/dev/null || { rc=1 secs=0; }
            report "fuzz/$name" "$rc" "$secs" "$logdir/$name.log"
        done
    else
        fail=$((fail + 1)); failed+=("fuzz-build")
        echo "FAIL  fuzz build (log $logdir/fuzz-build.log)"; tail -n 20 "$logdir/fuzz-build.log"
    fi
fi

echo
[ ${#failed[@]} -gt 0 ] && echo "failed: ${failed[*]}"
echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]

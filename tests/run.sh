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

run_one() { # name, command...
    local name=$1; shift
    local log="$logdir/$(basename "$name").log"
    local t0=$SECONDS rc
    "$@" >"$log" 2>&1
    rc=$?
    if [ $rc -eq 0 ]; then
        pass=$((pass + 1)); printf 'PASS  %-40s %3ss\n' "$name" $((SECONDS - t0))
    elif [ $rc -eq 77 ]; then
        skip=$((skip + 1)); printf 'SKIP  %-40s %s\n' "$name" "$(tail -n 1 "$log")"
    else
        fail=$((fail + 1)); failed+=("$name")
        printf 'FAIL  %-40s (exit %d, log %s)\n' "$name" $rc "$log"
        tail -n 30 "$log" | sed 's/^/      /'
    fi
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

# Fuzzers: a short run each from the seed corpus (long runs: see tests/fuzz/README.md).
if [ -z "${GM_SAN:-}" ] && ls tests/fuzz/fuzz_*.c >/dev/null 2>&1; then
    if command -v clang >/dev/null && make --no-print-directory -s fuzz >"$logdir/fuzz-build.log" 2>&1; then
        for f in build-fuzz/fuzz_*; do
            name=$(basename "$f")
            corpus=tests/fuzz/corpus/${name#fuzz_}
            work=$(mktemp -d)
            [ -d "$corpus" ] && cp -r "$corpus"/. "$work"/ 2>/dev/null
            # -error_exitcode: libFuzzer reports a finding with 77 by default, our "skipped"
            run_one "fuzz/$name" "$f" -max_total_time="${FUZZ_SECONDS:-10}" -rss_limit_mb=2048 -error_exitcode=1 \
                -artifact_prefix="$logdir/$name-" "$work"
            rm -rf "$work"
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

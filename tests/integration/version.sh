#!/usr/bin/env bash
# tests/integration/version.sh - `gradmesh version` / `--version`, the Makefile's version
# sources, and each member's version in `status`.
#
#   a1 (admitter) <--TLS loopback--> a2      both this binary: one version, not mixed
#
# - `--version` prints what `version` prints; the commit is this tree's object (in a git
#   tree), the CUDA line matches the build's flags, the peer protocol is named;
# - the Makefile takes the version from a release tarball's VERSION file when there is no git
#   tree, and says "unknown" when there is neither (print-version on a copy of the Makefile);
# - `status` on a1 shows its version and a2's (from a2's hello), and no "mixed versions" line;
#   `status --json` has version, commit, cuda, proto and mixed_versions false.
# A hello from an older peer protocol is refused by name: tests/unit/test_agent.c.
set -uo pipefail
cd "$(dirname "$0")/../.."
. tests/integration/lib.bash
BUILD=${GM_BUILD:-build}

"$GM" --version >"$WORK/v1" || fail "--version exit $?"
"$GM" version >"$WORK/v2" || fail "version exit $?"
cmp -s "$WORK/v1" "$WORK/v2" || fail "--version and version differ: $(cat "$WORK/v1") / $(cat "$WORK/v2")"
ver=$(sed -n 's/^gradmesh \([^ ]*\)$/\1/p' "$WORK/v1")
commit=$(sed -n 's/^commit \([^ ]*\)$/\1/p' "$WORK/v1")
[ -n "$ver" ] && [ "$ver" != unknown ] || fail "no version line: $(cat "$WORK/v1")"
grep -qx "peer protocol [0-9]* (talks to peers of protocol [0-9]* and newer)" "$WORK/v1" ||
    fail "no peer protocol line: $(cat "$WORK/v1")"
if grep -q -- "-DGM_HAVE_CUDA=1" "$BUILD/.flags" 2>/dev/null; then want="build cuda (CUDA backend on)"; else want="build cpu-only (CUDA backend off)"; fi
grep -qxF "$want" "$WORK/v1" || fail "build line is not '$want': $(cat "$WORK/v1")"
if git rev-parse --git-dir >/dev/null 2>&1; then
    [[ $commit =~ ^[0-9a-f]{40}$ ]] && git cat-file -e "$commit^{commit}" 2>/dev/null ||
        fail "commit '$commit' is not an object of this tree"
    [ "$(make -s print-version | cut -d' ' -f2)" = "$commit" ] || fail "print-version names another commit"
fi
"$GM" version --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["version"] == sys.argv[1] and d["commit"] == sys.argv[2], d
assert isinstance(d["cuda"], bool) and d["options"] == ("cuda" if d["cuda"] else "cpu-only"), d
assert isinstance(d["proto"], int) and d["proto"] >= 2, d' "$ver" "$commit" || fail "version --json"
pass "version and --version agree: $ver ($commit), $(sed -n 3p "$WORK/v1")"

# the tarball fallback: VERSION filled by git archive's export-subst, or nothing at all
mkdir -p "$WORK/tarball"
cp Makefile "$WORK/tarball/"
printf '0123456789abcdef0123456789abcdef01234567 v2.3.4\n' >"$WORK/tarball/VERSION"
got=$(make -s -C "$WORK/tarball" print-version)
[ "$got" = "2.3.4 0123456789abcdef0123456789abcdef01234567" ] || fail "tarball VERSION gives '$got'"
printf '0123456789abcdef0123456789abcdef01234567 \n' >"$WORK/tarball/VERSION" # no tag
got=$(make -s -C "$WORK/tarball" print-version)
[[ $got == *-dev+g0123456" 0123456789abcdef0123456789abcdef01234567" ]] || fail "untagged tarball VERSION gives '$got'"
cp VERSION "$WORK/tarball/VERSION" # unfilled ($Format:...$): as if exported without export-subst
got=$(make -s -C "$WORK/tarball" print-version)
[[ $got == *"+unknown unknown" ]] || fail "an unfilled VERSION gives '$got'"
pass "without git: the tarball's VERSION ($got without one)"

make_cluster vlab a1 a2
start_agent a2
wait_for "a1 and a2 linked" links_up a1 1
"$GM" status --config "$WORK/a1.conf" >"$WORK/status.txt" || fail "status"
grep -qxF "version $ver  peer protocol $(sed -n 's/^peer protocol \([0-9]*\).*/\1/p' "$WORK/v1")" "$WORK/status.txt" ||
    fail "status does not show this node's version: $(cat "$WORK/status.txt")"
grep -q "^MEMBER .* VERSION$" "$WORK/status.txt" || fail "no VERSION column: $(cat "$WORK/status.txt")"
grep -q "^a2 .* $ver\$" "$WORK/status.txt" || fail "status does not show a2's version: $(cat "$WORK/status.txt")"
grep -q "mixed versions" "$WORK/status.txt" && fail "one build says mixed versions: $(cat "$WORK/status.txt")"
"$GM" status --json --config "$WORK/a1.conf" | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["version"] == sys.argv[1] and d["commit"] == sys.argv[2] and d["mixed_versions"] is False, d
assert [m["version"] for m in d["members"]] == [sys.argv[1]], d["members"]' "$ver" "$commit" ||
    fail "status --json: $("$GM" status --json --config "$WORK/a1.conf")"
pass "status shows a1's and a2's version ($ver), not mixed"
stop_agents

#!/usr/bin/env bash
# tests/integration/install_systemd.sh - issue 11's "systemd" and "Install" checks with the
# real tools:
#   1. `make install DESTDIR=$WORK/root PREFIX=/usr` places every file where the unit, the man
#      pages and the completion are looked for (Debian layout), nothing else;
#   2. `make install PREFIX=$WORK/prefix` (so ExecStart= and the man pages exist on this
#      machine): `systemd-analyze verify` passes on gradmesh@lab.service, Documentation=
#      included, and `systemd-analyze security --offline=yes` rates it <= 3.0;
#   3. `man --warnings -l` renders every page without a warning.
# Also: the sysusers/tmpfiles snippets parse (systemd-sysusers/systemd-tmpfiles --dry-run
# against the DESTDIR root).
set -uo pipefail
cd "$(dirname "$0")/../.."
. tests/integration/lib.bash

command -v systemd-analyze >/dev/null || { echo "no systemd-analyze (apt-get install systemd)"; exit 77; }
command -v man >/dev/null || { echo "no man (apt-get install man-db)"; exit 77; }

SANV=${GM_SAN:-}
mk() { make --no-print-directory -s ${SANV:+SAN=$SANV} "$@"; }

# --- 1. DESTDIR layout -------------------------------------------------------------------
mk install DESTDIR="$WORK/root" PREFIX=/usr >"$WORK/install.log" 2>&1 || fail "make install DESTDIR"
expect=(
    usr/bin/gradmesh
    usr/lib/systemd/system/gradmesh@.service
    usr/lib/sysusers.d/gradmesh.conf
    usr/lib/tmpfiles.d/gradmesh.conf
    usr/share/man/man1/gradmesh.1
    usr/share/man/man5/gradmesh.conf.5
    usr/share/man/man5/gradmesh-job.5
    usr/share/bash-completion/completions/gradmesh
    usr/share/doc/gradmesh/README.md
    usr/share/doc/gradmesh/docs/ARCHITECTURE.md
    usr/share/doc/gradmesh/docs/BENCHMARKS.md
    usr/share/doc/gradmesh/docs/MODELS.md
    usr/share/doc/gradmesh/docs/NETWORK.md
    usr/share/doc/gradmesh/docs/OPERATIONS.md
    usr/share/doc/gradmesh/examples/gradmesh.conf
    usr/share/doc/gradmesh/examples/fmnist-lenet5.ini
    usr/share/doc/gradmesh/examples/fmnist-mlp.ini
    usr/share/doc/gradmesh/examples/fmnist-resnet20.ini
    usr/share/doc/gradmesh/examples/fmnist-vgg7.ini
    usr/share/doc/gradmesh/examples/cifar10-resnet20.ini
    usr/share/doc/gradmesh/examples/cifar10-vgg7.ini
)
for f in "${expect[@]}"; do [ -f "$WORK/root/$f" ] || fail "make install did not place /$f"; done
got=$(cd "$WORK/root" && find . -type f | sed 's#^\./##' | sort)
want=$(printf '%s\n' "${expect[@]}" | sort)
[ "$got" = "$want" ] || fail "installed files differ: $(diff <(echo "$want") <(echo "$got") | tr '\n' ' ')"
[ -x "$WORK/root/usr/bin/gradmesh" ] || fail "binary not executable"
unit=$WORK/root/usr/lib/systemd/system/gradmesh@.service
grep -qx 'ExecStart=/usr/bin/gradmesh agent --config /etc/gradmesh/%i.conf' "$unit" ||
    fail "ExecStart does not name the installed binary: $(grep ExecStart "$unit")"
for m in $(sed -n 's/^Documentation=//p' "$unit"); do
    page=${m#man:}; name=${page%(*}; sec=${page#*(}; sec=${sec%)}
    [ -f "$WORK/root/usr/share/man/man$sec/$name.$sec" ] || fail "unit names $m, not installed"
done
"$WORK/root/usr/bin/gradmesh" --help | grep -q 'gradmesh COMMAND' || fail "installed binary runs"
pass "make install DESTDIR places ${#expect[@]} files (Debian layout)"

mk uninstall DESTDIR="$WORK/root" PREFIX=/usr >>"$WORK/install.log" 2>&1 || fail "make uninstall"
left=$(find "$WORK/root" -type f | wc -l)
[ "$left" -eq 0 ] || fail "uninstall left $left files"
pass "make uninstall removes them"

# --- 2. systemd-analyze on the installed unit --------------------------------------------
mk install PREFIX="$WORK/prefix" >>"$WORK/install.log" 2>&1 || fail "make install PREFIX"
cp "$WORK/prefix/lib/systemd/system/gradmesh@.service" "$WORK/gradmesh@lab.service"
MANPATH="$WORK/prefix/share/man" systemd-analyze verify "$WORK/gradmesh@lab.service" \
    >"$WORK/verify.log" 2>&1 || { cat "$WORK/verify.log"; fail "systemd-analyze verify"; }
[ -s "$WORK/verify.log" ] && { cat "$WORK/verify.log"; fail "systemd-analyze verify printed warnings"; }
pass "systemd-analyze verify gradmesh@lab.service: clean"

systemd-analyze security --offline=yes "$WORK/gradmesh@lab.service" >"$WORK/security.log" 2>&1
score=$(sed -n 's/.*Overall exposure level for gradmesh@lab.service: \([0-9.]*\).*/\1/p' "$WORK/security.log")
[ -n "$score" ] || { tail -n 5 "$WORK/security.log"; fail "no exposure level"; }
python3 -c "import sys; sys.exit(0 if float('$score') <= 3.0 else 1)" ||
    fail "exposure $score > 3.0"
pass "systemd-analyze security --offline=yes: $score (<= 3.0)"

# the snippets work: systemd-sysusers then systemd-tmpfiles against a scratch root
if command -v systemd-sysusers >/dev/null && command -v systemd-tmpfiles >/dev/null; then
    R=$WORK/sysroot
    mkdir -p "$R/etc" "$R/var/lib" "$R/run"
    systemd-sysusers --root="$R" "$WORK/prefix/lib/sysusers.d/gradmesh.conf" \
        >"$WORK/sysusers.log" 2>&1 || { cat "$WORK/sysusers.log"; fail "systemd-sysusers"; }
    grep -q '^gradmesh:x:[0-9]*:[0-9]*:gradmesh training agent:/var/lib/gradmesh:/usr/sbin/nologin$' \
        "$R/etc/passwd" || fail "sysusers did not create user gradmesh: $(cat "$R/etc/passwd")"
    systemd-tmpfiles --create --root="$R" "$WORK/prefix/lib/tmpfiles.d/gradmesh.conf" \
        >"$WORK/tmpfiles.log" 2>&1 || { cat "$WORK/tmpfiles.log"; fail "systemd-tmpfiles"; }
    [ -s "$WORK/tmpfiles.log" ] && { cat "$WORK/tmpfiles.log"; fail "systemd-tmpfiles warned"; }
    uid=$(awk -F: '$1 == "gradmesh" { print $3 }' "$R/etc/passwd")
    [ "$(stat -c '%a %u' "$R/var/lib/gradmesh")" = "700 $uid" ] || fail "state dir: $(stat -c '%a %u' "$R/var/lib/gradmesh")"
    [ "$(stat -c '%a %u' "$R/run/gradmesh")" = "750 $uid" ] || fail "runtime dir: $(stat -c '%a %u' "$R/run/gradmesh")"
    pass "sysusers.d makes user gradmesh; tmpfiles.d makes /var/lib/gradmesh 0700, /run/gradmesh 0750"
fi

# --- 3. man pages --------------------------------------------------------------------------
for p in "$WORK"/prefix/share/man/man*/*; do
    out=$(MANWIDTH=80 man --warnings -E UTF-8 -l "$p" 2>&1 >"$WORK/page.txt")
    [ -z "$out" ] || fail "man -l $(basename "$p") warns: $out"
    [ "$(wc -l <"$WORK/page.txt")" -gt 20 ] || fail "man -l $(basename "$p") rendered almost nothing"
done
pass "man -l renders gradmesh(1), gradmesh.conf(5), gradmesh-job(5) without warnings"

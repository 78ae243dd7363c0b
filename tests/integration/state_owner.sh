#!/usr/bin/env bash
# tests/integration/state_owner.sh - issue 23's systemd bullets that need no systemd, on one
# loopback agent run as user nobody (the part of the system user gradmesh):
#   1. `init` run as root over a state folder that belongs to another user (what
#      systemd-tmpfiles makes: /var/lib/gradmesh for gradmesh) writes every file there as that
#      user, the config (root's folder) as root, readable; the agent run as that user starts;
#   2. a root-owned node.key (what init wrote before): the agent names the file, its owner and
#      the chown, and exits 77 (EX_NOPERM, restarted by systemd), not 78 (never restarted);
#   3. `init` not run as root over someone else's folder names the folder and its owner;
#   4. the CLI tells "an agent whose socket is gone" (a live agent, its socket removed) from
#      "no agent is running" (the agent stopped).
#
#   root: gradmesh init --state $WORK/var/lab      $WORK/var (nobody, 0700)
#   nobody: gradmesh agent --config $WORK/lab.conf  127.0.0.1:P, socket $WORK/run/lab.sock
set -uo pipefail
cd "$(dirname "$0")/../.."
. tests/integration/lib.bash

[ "$(id -u)" = 0 ] || { echo "needs root (chown, setpriv)"; exit 77; }
command -v setpriv >/dev/null || { echo "no setpriv (util-linux)"; exit 77; }
NOBODY=65534
as_nobody() { setpriv --reuid=$NOBODY --regid=$NOBODY --clear-groups "$@"; }

# nobody must reach the binary and $WORK (mktemp made it 0700)
chmod 0711 "$WORK"
as_nobody test -x "$GM" || { echo "user nobody cannot run $GM (a folder above it is closed)"; exit 77; }

mkdir -m 0700 "$WORK/var" "$WORK/run"
chown $NOBODY:$NOBODY "$WORK/var" "$WORK/run"
P=$(free_port)

# --- 1. init as root writes the state for its owner ---------------------------------------
"$GM" init --metrics off --multicast off --cluster lab --node alpha --config "$WORK/lab.conf" \
    --state "$WORK/var/lab" --listen 127.0.0.1:$P >"$WORK/init.log" 2>&1 || fail "init"
sed -i "s#^control = .*#control = $WORK/run/lab.sock#" "$WORK/lab.conf"
grep -q "^control = $WORK/run/lab.sock" "$WORK/lab.conf" || fail "config has no control line to move"
bad=$(find "$WORK/var/lab" ! -user $NOBODY -printf '%p %u\n')
[ -z "$bad" ] || fail "init as root left files not owned by the state folder's owner: $bad"
n=$(find "$WORK/var/lab" -type f | wc -l)
[ "$n" -ge 5 ] || fail "init wrote $n files in the state folder"
[ "$(stat -c '%U %a' "$WORK/var/lab" "$WORK/var/lab/node.key" | tr '\n' ' ')" = "nobody 700 nobody 600 " ] ||
    fail "state folder, node.key: $(stat -c '%U %a' "$WORK/var/lab" "$WORK/var/lab/node.key" | tr '\n' ' ')"
[ "$(stat -c '%U %a' "$WORK/lab.conf")" = "root 644" ] || fail "config: $(stat -c '%U %a' "$WORK/lab.conf")"
pass "init as root over nobody's folder: $n files nobody's (node.key 0600), the config root's 0644"

# (setpriv itself in the background, not the function: $! is then the agent's pid)
setpriv --reuid=$NOBODY --regid=$NOBODY --clear-groups "$GM" agent --config "$WORK/lab.conf" \
    2>>"$WORK/agent.log" &
PIDS+=($!); APID=$!
wait_for "agent as nobody answers" "$GM" status --config "$WORK/lab.conf"
pass "the agent runs as the folder's owner"

# --- 4. socket gone vs no agent ------------------------------------------------------------
rm -f "$WORK/run/lab.sock"
"$GM" status --config "$WORK/lab.conf" >/dev/null 2>"$WORK/gone.err"; rc=$?
[ $rc -ne 0 ] || fail "status without a socket exited 0"
grep -q "the agent of $WORK/lab.conf is running (pid $APID) but does not answer at its control socket $WORK/run/lab.sock" "$WORK/gone.err" ||
    fail "socket gone: $(cat "$WORK/gone.err")"
grep -q "no agent is running" "$WORK/gone.err" && fail "socket gone reported as no agent"
kill $APID; wait $APID; rc=$?
[ $rc -eq 0 ] || fail "agent exited $rc on SIGTERM"
PIDS=()
"$GM" status --config "$WORK/lab.conf" >/dev/null 2>"$WORK/none.err"
grep -q "no agent is running for $WORK/lab.conf" "$WORK/none.err" || fail "stopped agent: $(cat "$WORK/none.err")"
pass "status: 'running (pid $APID) but ... socket' while it runs without its socket, 'no agent' once stopped"

# --- 2. a root-owned identity file ---------------------------------------------------------
chown root:root "$WORK/var/lab/node.key"
as_nobody "$GM" agent --config "$WORK/lab.conf" >"$WORK/perm.log" 2>&1; rc=$?
[ $rc -eq 77 ] || fail "root-owned node.key: agent exit $rc, want 77 (EX_NOPERM)"
grep -q "cannot read $WORK/var/lab/node.key: Permission denied; it belongs to root:root (mode 600) and must be nobody:nogroup's: chown -R nobody:nogroup $WORK/var/lab" "$WORK/perm.log" ||
    fail "message: $(cat "$WORK/perm.log")"
grep -q "configuration error\|exit 78" "$WORK/perm.log" && fail "reported as a configuration error"
pass "root-owned node.key: exit 77, the file, its owner and the chown named"

# the state folder itself root's
chown $NOBODY:$NOBODY "$WORK/var/lab/node.key"
chown root:root "$WORK/var/lab"
as_nobody "$GM" agent --config "$WORK/lab.conf" >"$WORK/perm2.log" 2>&1; rc=$?
[ $rc -eq 77 ] || fail "root-owned state folder: agent exit $rc, want 77"
grep -q "cannot write in $WORK/var/lab: Permission denied; it belongs to root:root (mode 700)" "$WORK/perm2.log" ||
    fail "message: $(cat "$WORK/perm2.log")"
chown $NOBODY:$NOBODY "$WORK/var/lab"
pass "root-owned state folder: exit 77, named"

# --- 3. init not as root over someone else's folder ---------------------------------------
mkdir -m 0755 "$WORK/rootvar"
as_nobody "$GM" init --metrics off --cluster lab2 --config "$WORK/var/lab2.conf" \
    --state "$WORK/rootvar/lab2" --listen 127.0.0.1:1 >/dev/null 2>"$WORK/init2.err"; rc=$?
[ $rc -eq 1 ] || fail "init by nobody in root's folder: exit $rc, want 1"
grep -q "cannot write the state directory $WORK/rootvar/lab2: Permission denied; it (or the folder above it) belongs to root (uid 0) and this command runs as uid $NOBODY" "$WORK/init2.err" ||
    fail "message: $(cat "$WORK/init2.err")"
pass "init as nobody in root's folder: the folder and its owner named"

# under sanitizers (GM_BIN=./gradmesh-san): no report from the agent or the CLI
if grep -l "Sanitizer\|runtime error:" "$WORK"/*.log "$WORK"/*.err 2>/dev/null; then
    fail "sanitizer report"
fi

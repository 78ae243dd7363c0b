#!/usr/bin/env bash
# tests/integration/state_lock.sh - one agent per state directory.
#
#   a1 (init, chief) <--TLS loopback--> a2
#   a1b: a1's config with another listen port and control socket, the same state directory
#
# - a1's agent holds STATE/agent.lock (flock) and records its PID and bound listen address
#   there;
# - `gradmesh agent` of a1b is refused at once: exit 78 (a configuration problem: systemd's
#   unit does not restart on it), one error line naming the holder's PID and listen address
#   and what to do; it binds nothing, creates no control socket, and a1's link to a2 stays up
#   without a single link-down or new link-up in either log;
# - after a1 is killed with -9 (no clean exit), its agent starts again on the same state
#   directory: the kernel dropped the lock with the process.
set -uo pipefail
cd "$(dirname "$0")/../.."
. tests/integration/lib.bash

make_cluster slock a1 a2
start_agent a2
wait_for "a1 linked to a2" links_up a1 1
wait_for "a2 linked to a1" links_up a2 1

lock=$WORK/a1/agent.lock
listen=$("$GM" status --json --config "$WORK/a1.conf" | python3 -c 'import json,sys; print(json.load(sys.stdin)["listen"])')
[ "$(cat "$lock")" = "$(printf 'pid=%s\nlisten=%s' "$PID_a1" "$listen")" ] ||
    fail "a1's lock file holds '$(cat "$lock")', want pid $PID_a1 and listen $listen"
pass "a1 holds $lock: pid $PID_a1, listen $listen"

before1=$(grep -c "event=link-" "$WORK/a1.log")
before2=$(grep -c "event=link-" "$WORK/a2.log")
port=$(free_port)
sed -e "s|^listen = .*|listen = 127.0.0.1:$port|" -e "s|^control = .*|control = $WORK/a1b.sock|" \
    "$WORK/a1.conf" >"$WORK/a1b.conf"
grep -q "^state_dir = $WORK/a1$" "$WORK/a1b.conf" || fail "a1b.conf: $(cat "$WORK/a1b.conf")"
timeout 20 "$GM" agent --config "$WORK/a1b.conf" >"$WORK/a1b.out" 2>&1
rc=$?
[ $rc -eq 78 ] || fail "a second agent on a1's state directory: exit $rc, want 78: $(cat "$WORK/a1b.out")"
want="error: $WORK/a1: another agent (pid $PID_a1, listening on $listen) runs on this state directory: one agent per state directory; stop that one first, or give this one a state directory of its own (init or join --state)"
[ "$(cat "$WORK/a1b.out")" = "$want" ] || fail "the refusal said: $(cat "$WORK/a1b.out")"
[ -e "$WORK/a1b.sock" ] && fail "the refused agent made a control socket"
ss -Hltn "sport = :$port" | grep -q . && fail "the refused agent listens on $port"
pass "second agent refused (exit 78): $(cat "$WORK/a1b.out")"

# a1's links are undisturbed: still up, and no link event in either log since
links_up a1 1 || fail "a1 lost its link"
links_up a2 1 || fail "a2 lost its link"
"$GM" status --config "$WORK/a1.conf" >/dev/null || fail "a1 does not answer"
[ "$(grep -c "event=link-" "$WORK/a1.log")" -eq "$before1" ] || fail "a1 logged link events: $(grep "event=link-" "$WORK/a1.log" | tail -3)"
[ "$(grep -c "event=link-" "$WORK/a2.log")" -eq "$before2" ] || fail "a2 logged link events: $(grep "event=link-" "$WORK/a2.log" | tail -3)"
[ "$(sed -n 's/^pid=//p' "$lock")" = "$PID_a1" ] || fail "the lock file changed: $(cat "$lock")"
pass "a1's link to a2 undisturbed, its lock record unchanged"

# a kill -9 leaves the file, not the lock
kill9_agent a1
start_agent a1
wait_for "a1 linked to a2 again" links_up a1 1
[ "$(sed -n 's/^pid=//p' "$lock")" = "$PID_a1" ] || fail "the restarted a1 did not take the lock: $(cat "$lock")"
pass "after kill -9, a1 starts again on its state directory (pid $PID_a1 holds the lock)"
stop_agents
echo "PASS"

#!/bin/bash
# tests/integration/discovery_lan.sh - scenario (a): three hosts on one bridge
# find each other by multicast alone.
#
#   h1 runs `init` and its agent; h2 and h3 run `gradmesh join TOKEN` with no
#   address typed (the token's JOIN beacon finds h1).  Then the members files
#   are emptied, so beacons are the only way the agents can learn of each
#   other, and all three must list the other two (lan, up, with an RTT).
#   How long that took is printed against the 3 s goal, not asserted (tests
#   do not fail on a slow machine; bench/link_measure.sh times it).  Then: a beacon captured from h2 and
#   replayed, the same with one byte flipped, and the beacons of an agent of
#   another cluster on the same bridge are all ignored (counted by reason in
#   `doctor --json`, and the stranger never listed); an interface that
#   disappears is logged and the agent keeps serving; `peers` and `doctor`
#   print their tables.
#
# Root and network namespaces (tests/integration/netns.bash); exit 77 where
# namespaces cannot be made.
set -o pipefail
cd "$(dirname "$0")/../.." || exit 1
. tests/integration/lib.bash
. tests/integration/netns.bash
nb_require python3

TOOLS="python3 $PWD/tests/integration/disc_tools.py"
GROUP=239.192.74.50
MPORT=7451

doctor() { "$GM" doctor --json --config "$WORK/$1.conf"; }

nb_host h1; nb_host h2; nb_host h3; nb_host x1
nb_bridge lan
nb_lan lan h1 eth0 10.74.1.1/24
nb_lan lan h2 eth0 10.74.1.2/24
nb_lan lan h3 eth0 10.74.1.3/24
nb_lan lan x1 eth0 10.74.1.9/24

nb_exec h1 "$GM" init --cluster lab --node h1 --config "$WORK/h1.conf" --state "$WORK/h1" \
    >"$WORK/init.out" 2>>"$WORK/h1.log" || fail "init"
ns_agent h1
wait_for "agent h1" "$GM" status --config "$WORK/h1.conf"
TOKEN=$("$GM" token create --uses 2 --config "$WORK/h1.conf") || fail "token create"

for h in h2 h3; do
    t0=$SECONDS
    nb_exec "$h" "$GM" join "$TOKEN" --node "$h" --config "$WORK/$h.conf" --state "$WORK/$h" \
        >"$WORK/$h.join" 2>&1 || { cat "$WORK/$h.join"; fail "join $h without --peer"; }
    grep -F "found admitter h1 at 10.74.1.1:7450" "$WORK/$h.join" >/dev/null ||
        { cat "$WORK/$h.join"; fail "join $h did not report the admitter it found"; }
    grep -E '^(peers|listen) = ' "$WORK/$h.conf" >"$WORK/$h.addrs"
    grep -Fx "peers = " "$WORK/$h.addrs" >/dev/null || fail "join $h wrote static peers"
    pass "$h joined with the token alone ($((SECONDS - t0)) s), no address typed"
done

# beacons only from here on: forget what the joins taught
: >"$WORK/h2/members"; : >"$WORK/h3/members"
kill "$PID_h1"; wait "$PID_h1" 2>/dev/null
: >"$WORK/h1/members"
ns_agent h1
wait_for "agent h1 again" "$GM" status --config "$WORK/h1.conf"

start=$(date +%s.%N)
ns_agent h2; ns_agent h3
all_linked() { ns_linked h1 lan h2 h3 && ns_linked h2 lan h1 h3 && ns_linked h3 lan h1 h2; }
for _ in $(seq 600); do all_linked 2>/dev/null && break; sleep 0.05; done
took=$(python3 -c "import time; print(f'{time.time() - $start:.2f}')")
all_linked || fail "agents did not list each other by multicast (after ${took}s)"
goal=$(python3 -c "print('within' if $took <= 3.0 else 'OVER')")
pass "three agents found each other by multicast alone in ${took}s (lan, up, RTT known;" \
    "$goal the 3 s goal)"

# --- forged, replayed, foreign ---------------------------------------------------------------
ignored() { doctor h1 | python3 -c "import json,sys; print(json.load(sys.stdin)['discovery']['ignored_by_reason']['$1'])"; }
nb_exec h3 $TOOLS capture $GROUP $MPORT 10.74.1.3 10.74.1.2 "$WORK/h2.beacon" 15 >/dev/null ||
    fail "no beacon of h2 seen on the wire"
replayed0=$(ignored replayed); unauth0=$(ignored unauthenticated)
# once h2 has sent newer beacons (every 5 s +-20% after its first 5), the
# captured one is old: replaying it now is what an attacker can do
sleep 6.5
nb_exec h3 $TOOLS send $GROUP $MPORT 10.74.1.3 "$WORK/h2.beacon" || fail "replay send"
nb_exec h3 $TOOLS send $GROUP $MPORT 10.74.1.3 "$WORK/h2.beacon" 100 || fail "flipped send"
got_replay() { [ "$(ignored replayed)" -gt "$replayed0" ]; }
got_flip() { [ "$(ignored unauthenticated)" -gt "$unauth0" ]; }
wait_for "h1 to count the replayed beacon" got_replay
wait_for "h1 to count the flipped beacon" got_flip
log_has h1 'reason="replay'
pass "a replayed beacon and one with a flipped byte are ignored (counted, logged)"

nb_exec x1 "$GM" init --cluster lab --node x1 --config "$WORK/x1.conf" --state "$WORK/x1" \
    >/dev/null 2>>"$WORK/x1.log" || fail "init x1"
unauth1=$(ignored unauthenticated)
ns_agent x1
got_foreign() { [ "$(ignored unauthenticated)" -gt "$unauth1" ]; }
wait_for "h1 to ignore the beacons of another cluster" got_foreign
ns_status h1 | $TOOLS absent x1 || fail "h1 lists the stranger x1"
ns_status x1 | $TOOLS absent h1 || fail "x1 lists h1"
ns_linked h1 lan h2 h3 || fail "h1 lost its links"
pass "another cluster's agent on the same bridge is ignored and never listed"

# --- an interface that disappears -------------------------------------------------------------
nb_bridge lan2
nb_lan lan2 h3 eth1 10.74.2.3/24
log_has h3 "event=beacon-iface iface=eth1"
ip -n "$(nb_ns h3)" link del eth1 || fail "could not delete eth1"
log_has h3 "event=beacon-iface-gone iface=eth1"
cpu() { awk '{print $14 + $15}' "/proc/$PID_h3/stat"; }
c0=$(cpu); sleep 2; c1=$(cpu)
[ $((c1 - c0)) -lt 100 ] || fail "h3 used $((c1 - c0)) ticks of CPU in 2 s after losing eth1 (busy loop?)"
[ "$(grep -c 'beacon-iface-gone iface=eth1' "$WORK/h3.log")" -eq 1 ] || fail "the loss was not logged once"
ns_linked h3 lan h1 h2 || fail "h3 lost its links"
pass "an interface that disappears is logged once; the agent keeps serving, no busy loop"

# --- the tables --------------------------------------------------------------------------------
"$GM" peers --config "$WORK/h1.conf" >"$WORK/peers.out" || fail "peers"
grep -E '^h2 +10\.74\.1\.2:7450 +lan +up ' "$WORK/peers.out" >/dev/null ||
    { cat "$WORK/peers.out"; fail "peers table"; }
"$GM" doctor --config "$WORK/h1.conf" >"$WORK/doctor.out" || fail "doctor"
grep -F "multicast 239.192.74.50:7451 on [eth0]" "$WORK/doctor.out" >/dev/null &&
    grep -F "round-trip time" "$WORK/doctor.out" >/dev/null ||
    { cat "$WORK/doctor.out"; fail "doctor output"; }
pass "peers and doctor print their tables"
cat "$WORK/peers.out"

ns_stop_agents x1 h3 h2 h1

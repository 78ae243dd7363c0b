#!/bin/bash
# tests/integration/discovery_tunnel.sh - scenarios (b) and (c): two sites
# joined by a real OpenVPN tunnel over a rate-limited, routed underlay.
#
#   site A: a1 (admitter) and a2 on one bridge (10.74.1.0/24)
#   WAN:    a1 --10.74.9.0/30-- wan --10.74.10.0/30-- b1, tc tbf 20 Mbit/s on
#           both directions of the wan-b1 hop; the router passes no multicast
#   tunnel: OpenVPN (--dev tun) a1 10.8.74.1 <-> b1 10.8.74.2; a1 forwards
#           between the tunnel and its LAN, so a2 and b1 reach each other
#
# (b) b1 joins with --peer 10.8.74.1:7450 (its static endpoint, written to
#     its config); a1<->b1 is classed tunnel on both ends, and the throughput
#     each end measured reads within +-25% of 20 Mbit/s; RTT and MTU are
#     reported for every link; an unreachable endpoint and an endpoint of
#     another cluster in b1's config are each logged once and retried with
#     backoff while everything else works.
# (c) a1 has a LAN and a tunnel address: it classes a2 lan and b1 tunnel;
#     a2, whose own egress is its LAN card, still classes b1 tunnel (b1 says
#     so in its HELLO), and a2 learned b1 by gossip alone.
#
# Root, network namespaces and openvpn; exit 77 where they are missing.
set -o pipefail
cd "$(dirname "$0")/../.." || exit 1
. tests/integration/lib.bash
. tests/integration/netns.bash
nb_require openvpn python3

TOOLS="python3 $PWD/tests/integration/disc_tools.py"
RATE_MBIT=20

field() { ns_status "$1" | $TOOLS field "$2" "$3"; }

nb_host a1; nb_host a2; nb_host wan; nb_host b1; nb_host x1
nb_bridge lanA
nb_lan lanA a1 eth0 10.74.1.1/24
nb_lan lanA a2 eth0 10.74.1.2/24
nb_lan lanA x1 eth0 10.74.1.9/24
nb_link a1 eth1 10.74.9.1/30 wan w1 10.74.9.2/30
nb_link wan w2 10.74.10.1/30 b1 eth0 10.74.10.2/30
nb_forward wan
nb_route a1 10.74.10.0/30 10.74.9.2
nb_route b1 10.74.9.0/30 10.74.10.1
nb_rate wan w2 ${RATE_MBIT}mbit
nb_rate b1 eth0 ${RATE_MBIT}mbit
nb_openvpn a1 10.74.9.1 b1 10.8.74.1 10.8.74.2
nb_forward a1
nb_route a2 10.8.74.0/24 10.74.1.1
nb_route b1 10.74.1.0/24 "$NB_TUN_DEV"

nb_exec a1 "$GM" init --cluster lab --node a1 --config "$WORK/a1.conf" --state "$WORK/a1" \
    >/dev/null 2>>"$WORK/a1.log" || fail "init"
ns_agent a1
wait_for "agent a1" "$GM" status --config "$WORK/a1.conf"
TOKEN=$("$GM" token create --uses 2 --config "$WORK/a1.conf") || fail "token create"
nb_exec a2 "$GM" join "$TOKEN" --node a2 --config "$WORK/a2.conf" --state "$WORK/a2" \
    >"$WORK/a2.join" 2>&1 || { cat "$WORK/a2.join"; fail "join a2 on the LAN"; }
# multicast does not cross the tunnel: b1 names the admitter
nb_exec b1 "$GM" join "$TOKEN" --peer 10.8.74.1:7450 --node b1 --config "$WORK/b1.conf" \
    --state "$WORK/b1" >"$WORK/b1.join" 2>&1 || { cat "$WORK/b1.join"; fail "join b1 --peer"; }
grep -Fx "peers = 10.8.74.1:7450" "$WORK/b1.conf" >/dev/null || fail "join --peer did not save the static endpoint"
pass "a2 joined by multicast, b1 through the tunnel with --peer"

# b1 also lists an endpoint nobody answers and one of another cluster (x1)
nb_exec x1 "$GM" init --cluster lab --node x1 --config "$WORK/x1.conf" --state "$WORK/x1" \
    --multicast off >/dev/null 2>>"$WORK/x1.log" || fail "init x1"
ns_agent x1
# listening before b1 first dials it: a refused TCP connect would be the one line logged
nb_wait "x1's agent to answer" 60 ns_status x1
nb_route x1 10.8.74.0/24 10.74.1.1 # so b1's TLS handshake reaches it and is refused
sed -i 's/^peers = .*/peers = 10.8.74.1:7450, 10.74.1.77:7450, 10.74.1.9:7450/' "$WORK/b1.conf"
: >"$WORK/b1/members" # the static endpoint alone must bring b1 in
ns_agent b1
wait_for "b1 linked to a1 through its static endpoint" ns_linked a1 tunnel b1
wait_for "b1 sees a1 as a tunnel" ns_linked b1 tunnel a1
pass "(b) the static endpoint links b1 and a1; both class the link tunnel"

mbps_ok() {
    local v
    v=$(field "$1" "$2" throughput_mbps) || return 1
    python3 -c "import sys; v=$v; sys.exit(0 if abs(v - $RATE_MBIT) <= 0.25 * $RATE_MBIT else 2)"
}
measured() { field "$1" "$2" throughput_mbps >/dev/null; }
wait_for "a1 to measure its link to b1" measured a1 b1
wait_for "b1 to measure its link to a1" measured b1 a1
fa=$(field a1 b1 throughput_mbps); fb=$(field b1 a1 throughput_mbps)
echo "measured over the ${RATE_MBIT} Mbit/s tunnel: a1->b1 $fa Mbit/s, b1->a1 $fb Mbit/s"
mbps_ok a1 b1 || fail "a1->b1 measured $fa Mbit/s, not within 25% of $RATE_MBIT"
mbps_ok b1 a1 || fail "b1->a1 measured $fb Mbit/s, not within 25% of $RATE_MBIT"
pass "(b) tunnel throughput reads within +-25% of ${RATE_MBIT} Mbit/s both ways"

ns_agent a2
wait_for "a2 on the LAN" ns_linked a1 lan a2
wait_for "a2 reaches b1 through a1 (learned by gossip)" ns_linked a2 tunnel b1
wait_for "b1 reaches a2" ns_linked b1 tunnel a2
ns_linked a2 lan a1 || fail "a2 classes a1"
ns_linked a1 tunnel b1 || fail "a1 classes b1"
pass "(c) a1 (LAN and tunnel addresses) classes a2 lan and b1 tunnel; a2 classes b1 tunnel"
grep -F "event=member-learned node=b1" "$WORK/a2.log" >/dev/null || fail "a2 did not learn b1 by gossip"

# RTT (checked by `links`) and MTU for every link
for pair in "a1 a2" "a1 b1" "a2 a1" "a2 b1" "b1 a1" "b1 a2"; do
    set -- $pair
    mtu=$(field "$1" "$2" mtu) || fail "$1 reports no MTU for $2"
    rtt=$(field "$1" "$2" rtt_ms) || fail "$1 reports no RTT for $2"
    echo "  $1 -> $2: rtt $rtt ms, mtu $mtu"
done
pass "(b) RTT and MTU reported for every link"

# the bad endpoints: logged once each, retried with backoff, never linked
log_has b1 "event=endpoint-unreachable endpoint=10.74.1.77:7450"
log_has b1 "event=endpoint-unreachable endpoint=10.74.1.9:7450"
# backoff_ms doubles from 1000 on every failure: 4000 means three tries
backoff() {
    "$GM" doctor --json --config "$WORK/b1.conf" | python3 -c "import json,sys
print(next(e['backoff_ms'] for e in json.load(sys.stdin)['endpoints'] if e['endpoint'] == '$1'))"
}
tried3() { [ "$(backoff 10.74.1.77:7450)" -ge 4000 ] && [ "$(backoff 10.74.1.9:7450)" -ge 4000 ]; }
nb_wait "b1 to retry both bad endpoints three times" 30 tried3
[ "$(grep -c 'event=endpoint-unreachable endpoint=10.74.1.77:7450' "$WORK/b1.log")" -eq 1 ] ||
    fail "the unreachable endpoint was not logged exactly once"
[ "$(grep -c 'event=endpoint-unreachable endpoint=10.74.1.9:7450' "$WORK/b1.log")" -eq 1 ] ||
    fail "the other cluster's endpoint was not logged exactly once"
grep -F "endpoint=10.74.1.9:7450" "$WORK/b1.log" | grep -F "authentication failed" >/dev/null ||
    fail "the other cluster's endpoint was not refused by TLS"
"$GM" doctor --json --config "$WORK/b1.conf" >"$WORK/b1.doctor" || fail "doctor b1"
python3 - "$WORK/b1.doctor" <<'EOF' || fail "doctor's endpoint states"
import json, sys
d = json.load(open(sys.argv[1]))
eps = {e["endpoint"]: e for e in d["endpoints"]}
assert eps["10.8.74.1:7450"]["state"] == "linked", eps
for bad in ("10.74.1.77:7450", "10.74.1.9:7450"):
    assert eps[bad]["state"] != "linked" and eps[bad]["backoff_ms"] >= 1000, eps[bad]
    assert eps[bad]["last_error"], eps[bad]
assert "x1" not in [m["node"] for m in d["members"]]
EOF
pass "(b) unreachable and wrong-cluster endpoints: logged once, retried with backoff"

"$GM" doctor --config "$WORK/a1.conf" >"$WORK/a1.doctor.txt" || fail "doctor a1"
cat "$WORK/a1.doctor.txt"

ns_stop_agents x1 b1 a2 a1

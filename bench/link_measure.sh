#!/bin/bash
# bench/link_measure.sh - how well the agents measure a tunnel, and how fast
# they find each other on a LAN.  Root and network namespaces (exit 77
# otherwise); the testbed is tests/integration/netns.bash.
#
# Part 1, per rate in $RATES (default "5 20 50"): two hosts over a real
# OpenVPN tunnel on a routed underlay shaped with tc tbf at that rate.  The
# peer, measured in the same run on the same tunnel: a plain TCP transfer of
# $PEER_MB MB (tests/integration/netns_tools.py, first byte to last).  Then the
# agents start, and each end's throughput_mbps is read.  Printed: the limit,
# the peer's figure, gradmesh's two figures, and gradmesh/peer and
# gradmesh/limit.
#
# Part 2: $RUNS (default 5) times, three hosts on one bridge, members files
# emptied: seconds from starting two agents until all three list each other
# up (lan, RTT known), polled every 50 ms.
#
# Usage: bench/link_measure.sh [GRADMESH_BIN]
set -o pipefail
cd "$(dirname "$0")/.." || exit 1
GM_BIN=${1:-${GM_BIN:-./gradmesh}}
export GM_BIN
. tests/integration/lib.bash
. tests/integration/netns.bash
nb_require openvpn python3

RATES=${RATES:-5 20 50}
RUNS=${RUNS:-5}
PEER_MB=${PEER_MB:-4}
NT="python3 $PWD/tests/integration/netns_tools.py"
field() { ns_status "$1" | python3 tests/integration/disc_tools.py field "$2" throughput_mbps; }
measured() { field "$1" "$2" >/dev/null 2>&1; }

echo "== tunnel throughput: what the agents measure against a plain TCP transfer"
printf '%-10s %12s %14s %14s %10s %10s\n' "limit" "tcp peer" "gradmesh a->b" "gradmesh b->a" \
    "vs peer" "vs limit"
i=0
for rate in $RATES; do
    i=$((i + 1))
    a=a$i b=b$i w=w$i
    nb_host $a; nb_host $w; nb_host $b
    nb_link $a eth1 10.75.$i.1/30 $w w1 10.75.$i.2/30
    nb_link $w w2 10.76.$i.1/30 $b eth0 10.76.$i.2/30
    nb_forward $w
    nb_route $a 10.76.$i.0/30 10.75.$i.2
    nb_route $b 10.75.$i.0/30 10.76.$i.1
    nb_rate $w w2 ${rate}mbit
    nb_rate $b eth0 ${rate}mbit
    nb_openvpn $a 10.75.$i.1 $b 10.8.$i.1 10.8.$i.2
    nb_spawn $b sink$i.log $NT tcp-sink 10.8.$i.2 5201 30
    nb_wait "the TCP sink to listen" 10 nb_exec $b sh -c "ss -Hltn 'sport = :5201' | grep -q ."
    nb_exec $a $NT tcp-source 10.8.$i.2 5201 $((PEER_MB * 1000000)) || fail "tcp peer transfer"
    nb_wait "sink result" 30 grep -q mbit= "$WORK/sink$i.log"
    peer=$(sed -n 's/.*mbit=\([0-9.]*\).*/\1/p' "$WORK/sink$i.log")
    nb_exec $a "$GM" init --cluster lab$i --node a --config "$WORK/$a.conf" --state "$WORK/$a" \
        --multicast off >/dev/null 2>>"$WORK/$a.log" || fail "init"
    ns_agent $a
    wait_for "agent $a" "$GM" status --config "$WORK/$a.conf"
    tok=$("$GM" token create --config "$WORK/$a.conf") || fail "token"
    nb_exec $b "$GM" join "$tok" --peer 10.8.$i.1:7450 --node b --multicast off \
        --config "$WORK/$b.conf" --state "$WORK/$b" >/dev/null 2>&1 || fail "join"
    ns_agent $b
    nb_wait "a measures b" 60 measured $a b
    nb_wait "b measures a" 60 measured $b a
    ab=$(field $a b) ba=$(field $b a)
    python3 - "$rate" "$peer" "$ab" "$ba" <<'EOF'
import sys
rate, peer, ab, ba = map(float, sys.argv[1:])
g = (ab + ba) / 2
print(f"{rate:>6.0f} Mb {peer:>12.2f} {ab:>14.2f} {ba:>14.2f} {g / peer:>9.3f}x {g / rate:>9.3f}x")
EOF
    ns_stop_agents $a $b >/dev/null
done

echo
echo "== LAN discovery: seconds until three agents list each other (multicast only)"
nb_host h1; nb_host h2; nb_host h3
nb_bridge lan
nb_lan lan h1 eth0 10.74.1.1/24
nb_lan lan h2 eth0 10.74.1.2/24
nb_lan lan h3 eth0 10.74.1.3/24
nb_exec h1 "$GM" init --cluster lab --node h1 --config "$WORK/h1.conf" --state "$WORK/h1" \
    >/dev/null 2>>"$WORK/h1.log" || fail "init"
ns_agent h1
wait_for "agent h1" "$GM" status --config "$WORK/h1.conf"
tok=$("$GM" token create --uses 2 --config "$WORK/h1.conf") || fail "token"
for h in h2 h3; do
    nb_exec $h "$GM" join "$tok" --node $h --config "$WORK/$h.conf" --state "$WORK/$h" \
        >/dev/null 2>&1 || fail "join $h"
done
all_linked() { ns_linked h1 lan h2 h3 && ns_linked h2 lan h1 h3 && ns_linked h3 lan h1 h2; }
times=()
for run in $(seq "$RUNS"); do
    : >"$WORK/h2/members"; : >"$WORK/h3/members"
    start=$(date +%s.%N)
    ns_agent h2; ns_agent h3
    until all_linked 2>/dev/null; do
        python3 -c "import sys,time; sys.exit(0 if time.time() - $start < 30 else 1)" ||
            fail "run $run: not linked in 30 s"
        sleep 0.05
    done
    times+=("$(python3 -c "import time; print(f'{time.time() - $start:.2f}')")")
    ns_stop_agents h3 h2 >/dev/null
done
python3 - "${times[@]}" <<'EOF'
import statistics, sys
t = sorted(map(float, sys.argv[1:]))
print(f"runs {len(t)}: " + " ".join(f"{x:.2f}" for x in t) +
      f"  median {statistics.median(t):.2f} s, max {t[-1]:.2f} s (limit 3 s)")
EOF
ns_stop_agents h1 >/dev/null

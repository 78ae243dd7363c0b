#!/bin/bash
# tests/integration/netns_delay.sh - the testbed's latency (nb_delay): a real OpenVPN tunnel
# over a 20 Mbit/s tbf veth, with the userspace relay (tests/tools/udp_delay) adding 25 ms each
# way.  Asserts:
#  - the RTT through the tunnel (20 pings) is >= 50 ms (2 x 25 ms), and the smallest below
#    65 ms (the delay is the relay's 2 x 25 ms, not more; the median is printed, not bounded:
#    on a machine loaded 15 deep the relay and OpenVPN wake late and it reached 201 ms);
#  - without the relay the same tunnel's median RTT is below 10 ms (so the 50 ms are the
#    relay's, not the machine's);
#  - a 2 MB TCP transfer through the delayed tunnel arrives whole, and the relay forwarded
#    its datagrams without an error (its exit counts are printed).
# Root, network namespaces and openvpn (and the gradmesh binary, as for every script on
# lib.bash, though this one does not run it); exit 77 where one is missing.
set -o pipefail
cd "$(dirname "$0")/../.." || exit 1
. tests/integration/lib.bash # fail; the testbed's logs go to its WORK
. tests/integration/netns.bash
nb_require openvpn python3
TOOLS=$PWD/tests/integration/netns_tools.py

# rtt HOST DEST N: prints the median RTT (ms) of N pings, and the minimum, as "median min"
rtt() {
    nb_exec "$1" ping -n -c "$3" -i 0.1 -W 2 "$2" 2>/dev/null |
        sed -n 's/.*time=\([0-9.]*\) ms.*/\1/p' | sort -n |
        awk '{a[NR]=$1} END {if (NR < 1) exit 1; print a[int((NR+1)/2)], a[1]}'
}

nb_host a; nb_host b; nb_host c; nb_host d
nb_link a eth0 10.74.31.1/30 b eth0 10.74.31.2/30
nb_rate a eth0 20mbit
nb_rate b eth0 20mbit
nb_openvpn a 10.74.31.1 b 10.8.31.1 10.8.31.2
read -r med0 min0 < <(rtt b 10.8.31.1 20) || fail "no ping through the plain tunnel"
echo "plain tunnel: median RTT ${med0} ms (min ${min0})"
awk -v m="$med0" 'BEGIN {exit !(m < 10)}' || fail "the plain tunnel's RTT is already ${med0} ms"

nb_link c eth0 10.74.32.1/30 d eth0 10.74.32.2/30
nb_rate c eth0 20mbit
nb_rate d eth0 20mbit
nb_delay 25
nb_openvpn c 10.74.32.1 d 10.8.32.1 10.8.32.2 1195
RELAY=$NB_RELAY_PID
read -r med min < <(rtt d 10.8.32.1 20) || fail "no ping through the delayed tunnel"
echo "delayed tunnel (25 ms each way): median RTT ${med} ms (min ${min})"
awk -v m="$min" 'BEGIN {exit !(m >= 50)}' || fail "an RTT of ${min} ms < 50 ms through the relay"
awk -v m="$min" 'BEGIN {exit !(m < 65)}' || fail "the smallest RTT is ${min} ms >= 65 ms"
echo "PASS: RTT through the relay >= 50 ms, min ${min}, median ${med} ms"

nb_spawn c sink.out python3 "$TOOLS" tcp-sink 10.8.32.1 5001 60
SINK=$NB_LAST_PID
nb_wait --pid "$SINK" "tcp-sink on c" 10 sh -c "ip netns exec $(nb_ns c) ss -Hltn 'sport = :5001' | grep -q ."
nb_exec d python3 "$TOOLS" tcp-source 10.8.32.1 5001 2000000 || fail "tcp-source d -> c"
wait "$SINK" || fail "tcp-sink"
cat "$NB_WORK/sink.out"
grep -E '(^| )bytes=2000000( |$)' "$NB_WORK/sink.out" >/dev/null || fail "the 2 MB did not arrive whole"
kill -TERM "$RELAY"
nb_wait "the relay to report" 10 grep -F to-client "$NB_WORK/ovpn1-relay.log"
grep -F 'udp_delay:' "$NB_WORK/ovpn1-relay.log"
grep -E 'udp_delay: to-server datagrams=[1-9]' "$NB_WORK/ovpn1-relay.log" >/dev/null || fail "the relay counted nothing"
grep -Ei 'error|refused|out of memory' "$NB_WORK/ovpn1-relay.log" && fail "the relay reported an error"
echo "PASS: 2 MB through the delayed tunnel, the relay forwarded without an error"

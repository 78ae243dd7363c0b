#!/bin/bash
# tests/integration/tunnel_cap.sh - [node] max_tunnel_mbit caps the training traffic each
# agent sends over a link of class tunnel, measured on the real OpenVPN tunnel device.
#
#   a1 --veth 10.74.27.0/30 (no tbf: the tunnel alone would carry far more)-- b1
#   tunnel: OpenVPN a1 10.8.27.1 <-> b1 10.8.27.2; the agents listen on the tunnel only;
#   both agents: max_tunnel_mbit = CAP (4).
#
# Asserts:
#  - each agent logs event=link-capped for the other, and the link's measured throughput (the
#    probe's bulk frames go through the cap too) is at most CAP x 1.10: what codec = auto
#    counts on;
#  - a job that needs far more than CAP (MLP 1024 on Fashion-MNIST, fp32: 3.3 MB of gradient
#    sent per step each way, against ~0.1 s of compute) sends, over a window of at least
#    WINDOW seconds while it runs, between CAP x 0.5 (the cap, not an idle link, is what limits
#    it) and CAP x 1.10 Mbit/s out of each agent's tun device.  Tolerance 10%: the cap counts
#    frame bytes, the tun device counts IP packets (TCP/IP headers, about 3.7% at a 1400-byte
#    MSS; TLS records, 0.2%), plus PINGs and LINK_STATS, plus one burst of the bucket (50 ms of
#    the rate, 0.3% of the window).
# Root, network namespaces, openvpn and the dataset; exit 77 where one is missing.
set -o pipefail
cd "$(dirname "$0")/../.." || exit 1
. tests/integration/lib.bash
NB_PREFIX=switch$$-
. tests/integration/netns.bash
nb_require openvpn python3

need_fashion_mnist
TOOLS="python3 $PWD/tests/integration/disc_tools.py"
CAP=4
WINDOW=15

nb_host a1; nb_host b1
nb_link a1 eth0 10.74.27.1/30 b1 eth0 10.74.27.2/30
nb_openvpn a1 10.74.27.1 b1 10.8.27.1 10.8.27.2
TUN=$NB_TUN_DEV

# the hook of ns_tunnel_pair: the cap in NAME's config, before its agent starts
cap() { sed -i "/^max_tunnel_mbit/d; s/^peer_timeout = .*/&\nmax_tunnel_mbit = $CAP/" "$WORK/$1.conf"; }
ns_tunnel_pair a1 10.8.27.1 b1 10.8.27.2 cap
for h in a1:b1 b1:a1; do
    grep "event=link-capped peer=${h#*:} class=tunnel max_mbit=$CAP" "$WORK/${h%%:*}.log" \
        >/dev/null || fail "${h%%:*} does not cap its link to ${h#*:}"
    m=$(ns_status "${h%%:*}" | $TOOLS field "${h#*:}" throughput_mbps)
    awk -v m="$m" -v c="$CAP" 'BEGIN {exit !(m <= c * 1.10)}' ||
        fail "${h%%:*} measured $m Mbit/s to ${h#*:}, above the cap of $CAP"
    pass "${h%%:*} caps its tunnel link to ${h#*:}; its probe measured $m Mbit/s"
done

job_ini "$WORK/job.ini" tunnel-cap model.hidden=1024 optim.batch=64 comm.codec=fp32
"$GM" submit "$WORK/job.ini" --config "$WORK/a1.conf" >"$WORK/submit.out" 2>&1 ||
    { cat "$WORK/submit.out"; fail "submit"; }
JOB=$(sed -n 's/^job \([^ ]*\) submitted.*/\1/p' "$WORK/submit.out")
[ -n "$JOB" ] || { cat "$WORK/submit.out"; fail "no job id"; }
step() { job_get a1 "$JOB" "j.get('step') or 0"; }
running() { [ "$(step)" -ge 2 ]; }
nb_wait "the job to take 2 steps" 300 running
tx() { nb_exec "$1" cat "/sys/class/net/$TUN/statistics/tx_bytes"; }
now() { date +%s.%N; }
a0=$(tx a1) && b0=$(tx b1) && t0=$(now) || fail "tun counters"
s0=$(step)
sleep "$WINDOW" # a measurement window, not a wait for a condition
a1b=$(tx a1) && b1b=$(tx b1) && t1=$(now) || fail "tun counters"
s1=$(step)
"$GM" cancel "$JOB" --config "$WORK/a1.conf" >/dev/null 2>&1 || true
python3 - "$CAP" "$a0" "$a1b" "$b0" "$b1b" "$t0" "$t1" "$s0" "$s1" <<'PY' || fail "the tunnel rate is off the cap"
import sys
cap, a0, a1, b0, b1, t0, t1, s0, s1 = map(float, sys.argv[1:])
dt = t1 - t0
for name, bytes_ in (('a1', a1 - a0), ('b1', b1 - b0)):
    mbps = bytes_ * 8 / dt / 1e6
    print(f'{name}: {bytes_:.0f} bytes out of the tun device in {dt:.1f} s = {mbps:.2f} Mbit/s '
          f'(cap {cap:.0f}; steps {s0:.0f} -> {s1:.0f})')
    assert mbps <= cap * 1.10, f'{name} sent {mbps:.2f} Mbit/s, over the cap'
    assert mbps >= cap * 0.5, f'{name} sent only {mbps:.2f} Mbit/s: the cap is not what limits it'
PY
pass "each agent sent between 50% and 110% of max_tunnel_mbit = $CAP over the tunnel"
ns_stop_agents b1 a1

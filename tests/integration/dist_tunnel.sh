#!/bin/bash
# tests/integration/dist_tunnel.sh - issue 10 "Done when" 5: a 2-agent job with
# codec = powersgd over a real OpenVPN tunnel at 20 Mbit/s completes 1 epoch,
# and the bytes that cross the tunnel match the codec's accounting.
#
#   a1 (init, coordinator, rank 0) --10.74.9.0/30 veth, tbf 20 Mbit/s both ways-- b1 (rank 1)
#   tunnel: OpenVPN --dev tun over that veth, a1 10.8.74.1 <-> b1 10.8.74.2
#
# Both agents listen on their tunnel address only (and multicast is off), so the
# one member link, its control frames and the training channel, can only run
# inside the tunnel; b1 joins with --peer 10.8.74.1:7450.  The job: LeNet-5 on
# Fashion-MNIST, 1 epoch, batch 64 per agent (global 128), Adam, [comm] codec =
# powersgd rank 2.  It must end "done" with test accuracy > 70%.
#
# The accounting (the figures are printed; tunnel_bytes.py does the arithmetic,
# and says why each band is what it is):
#  - the codec: `gradmesh doctor` prints gm_gradsync_estimate's bytes per step
#    (PowerSGD: gm_psgd_payload_floats x 2 bytes, fp16 factors); the first 2% of
#    steps are dense fp16 warm-up (a1's log: event=powersgd warmup_steps=).
#  - the runtime: rank 0's summary bytes_sent (its gm_coll payload) must equal
#    that formula plus the initial state broadcast and the hash checks, to the
#    byte; each link's training-channel bytes (jobs --json) must equal payload
#    plus a 56-byte collective header per message, for both ranks.
#  - the wire: the bytes that crossed the tunnel (what came out of the tun
#    device at each end, sampled before submit and after both ranks ended,
#    less the idle rate of PING, gossip and LINK_STATS measured over a quiet
#    interval) over both ranks' training-channel bytes: between 1.00 and 1.25
#    (TCP/IP, frame headers and TLS records on ~1.2 KB messages: ~1.11).
#  - the simulation: `train --local --simulate-workers 2` of the same job writes
#    weights byte-identical to the agents' and counts 2 x the codec's payload.
# fp32 over this tunnel is not run (too slow); its bytes are computed.
#
# Root, network namespaces, openvpn and the dataset; exit 77 where one is missing.
set -o pipefail
cd "$(dirname "$0")/../.." || exit 1
. tests/integration/lib.bash
. tests/integration/netns.bash
nb_require openvpn python3

need_fashion_mnist
RATE_MBIT=20
QUIET_S=${QUIET_S:-20} # the idle interval: two LINK_STATS periods (10 s), 40 PINGs
TOOLS="python3 $PWD/tests/integration/disc_tools.py"

nb_host a1; nb_host b1
nb_link a1 eth0 10.74.9.1/30 b1 eth0 10.74.9.2/30
nb_rate a1 eth0 ${RATE_MBIT}mbit
nb_rate b1 eth0 ${RATE_MBIT}mbit
nb_openvpn a1 10.74.9.1 b1 10.8.74.1 10.8.74.2
TUN=$NB_TUN_DEV

nb_exec a1 "$GM" init --cluster lab --node a1 --config "$WORK/a1.conf" --state "$WORK/a1" \
    --listen 10.8.74.1:7450 --multicast off >/dev/null 2>>"$WORK/a1.log" || fail "init a1"
ns_agent a1
wait_for "agent a1" "$GM" status --config "$WORK/a1.conf"
TOKEN=$("$GM" token create --config "$WORK/a1.conf") || fail "token create"
nb_exec b1 "$GM" join "$TOKEN" --peer 10.8.74.1:7450 --node b1 --config "$WORK/b1.conf" \
    --state "$WORK/b1" --listen 10.8.74.2:7450 --multicast off >"$WORK/b1.join" 2>&1 ||
    { cat "$WORK/b1.join"; fail "join b1 --peer through the tunnel"; }
ns_agent b1
wait_for "a1 links b1 as a tunnel" ns_linked a1 tunnel b1
wait_for "b1 links a1 as a tunnel" ns_linked b1 tunnel a1
measured() { ns_status "$1" | $TOOLS field "$2" throughput_mbps >/dev/null 2>&1; }
# the link's throughput probe (a few MB) must be over before the counting starts
nb_wait "a1 to measure its link to b1" 60 measured a1 b1
nb_wait "b1 to measure its link to a1" 60 measured b1 a1
# the member link is the tunnel's: its TCP runs between the tunnel addresses only
nb_exec a1 ss -Htn state established >"$WORK/a1.ss"
grep -E '10\.8\.74\.1:[0-9]+ +10\.8\.74\.2:[0-9]+' "$WORK/a1.ss" >/dev/null ||
    { cat "$WORK/a1.ss"; fail "no TCP connection between the tunnel addresses"; }
grep -F '10.74.9.' "$WORK/a1.ss" >/dev/null && { cat "$WORK/a1.ss"; fail "a TCP connection on the underlay"; }
pass "a1 and b1 linked through the ${RATE_MBIT} Mbit/s OpenVPN tunnel only"

# counters: per host, "HOST IFACE tx_bytes rx_bytes tx_packets rx_packets" for the tun
# device and the underlay veth, and "HOST tcp OutSegs RetransSegs" (netns-local /proc/net/snmp)
counters() {
    local h i f
    echo "t $(date +%s.%N)"
    for h in a1 b1; do
        for i in "$TUN" eth0; do
            printf '%s %s' "$h" "$i"
            for f in tx_bytes rx_bytes tx_packets rx_packets; do
                printf ' %s' "$(nb_exec "$h" cat "/sys/class/net/$i/statistics/$f")" || return 1
            done
            echo
        done
        # shellcheck disable=SC2016 # awk's own $fields
        nb_exec "$h" awk -v h="$h" '$1 == "Tcp:" && $2 ~ /^[0-9]+$/ {print h, "tcp", $12, $13}' \
            /proc/net/snmp || return 1
    done
}

# the codec's bytes per step for LeNet-5, as doctor computes them (gm_gradsync_estimate)
"$GM" doctor --model lenet5 --config "$WORK/a1.conf" >"$WORK/doctor.txt" 2>&1 || true
grep -E '^  powersgd rank 2 ' "$WORK/doctor.txt" >/dev/null || { cat "$WORK/doctor.txt"; fail "doctor prints no PowerSGD estimate"; }

# the idle background: PING, gossip, LINK_STATS over a quiet interval
counters >"$WORK/idle0.ctr" || fail "counters"
sleep "$QUIET_S"
counters >"$WORK/idle1.ctr" || fail "counters"

job_ini "$WORK/job.ini" tunnel-psgd job.model=lenet5 optim.batch=64 schedule.kind=constant \
    comm.codec=powersgd comm.rank=2

counters >"$WORK/job0.ctr" || fail "counters"
"$GM" submit "$WORK/job.ini" --follow --config "$WORK/a1.conf" >"$WORK/submit.out" 2>&1 ||
    { cat "$WORK/submit.out"; fail "submit --follow"; }
JOB=$(sed -n 's/^job \([^ ]*\) submitted.*/\1/p' "$WORK/submit.out")
[ -n "$JOB" ] || { cat "$WORK/submit.out"; fail "no job id in submit's output"; }
# b1 ends its rank too (its last frames cross the tunnel before we count)
wait_for "b1 to finish job $JOB" job_is b1 "$JOB" 'j["state"] == "done"'
sleep 1 # the last TCP ACKs
counters >"$WORK/job1.ctr" || fail "counters"
grep -E "^job $JOB done" "$WORK/submit.out" >/dev/null || { cat "$WORK/submit.out"; fail "job not done"; }
"$GM" jobs --json --config "$WORK/a1.conf" >"$WORK/a1.jobs.json" || fail "jobs a1"
"$GM" jobs --json --config "$WORK/b1.conf" >"$WORK/b1.jobs.json" || fail "jobs b1"
grep -F "event=powersgd " "$WORK/a1.log" | tail -n 1 >"$WORK/psgd.line"
grep -F "event=epoch " "$WORK/a1.log" | tail -n 1 >"$WORK/epoch.line"

# the same job in one process, 2 simulated workers over the in-memory transport: the same
# collective code, so the same weights to the byte, and its summary counts the same payload
"$GM" train --local "$WORK/job.ini" --simulate-workers 2 --summary-json "$WORK/sim.json" \
    --out "$WORK/sim.safetensors" >>"$WORK/sim.log" 2>&1 || fail "train --local --simulate-workers 2"
W=$(python3 -c 'import json,sys
print(next(j["weights"] for j in json.load(open(sys.argv[1]))["jobs"] if j["id"] == sys.argv[2]))' \
    "$WORK/a1.jobs.json" "$JOB") || fail "no weights in a1's jobs --json"
cmp -s "$W" "$WORK/sim.safetensors" || fail "the tunnel job's weights differ from the simulation's"
pass "the weights are byte-identical to --simulate-workers 2 of the same job"

python3 tests/integration/tunnel_bytes.py --job "$JOB" --dir "$WORK" --rate-mbit "$RATE_MBIT" \
    --tun "$TUN" || fail "the bytes over the tunnel do not match the codec's accounting"
pass "2-agent PowerSGD job over the ${RATE_MBIT} Mbit/s tunnel: 1 epoch done, bytes as accounted"

ns_stop_agents b1 a1

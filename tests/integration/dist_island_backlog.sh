#!/bin/bash
# tests/integration/dist_island_backlog.sh - issue 21's lost LAN link, small: an island's
# follower that sends its whole DiLoCo share to a leader still busy with another collective
# keeps its link, unpaused.  2 agents on a LAN and 1 behind a real OpenVPN tunnel (20 Mbit/s
# tbf, 25 ms each way through the delay relay), the hierarchical sync over the islands [0,0,2].
#
#   sw-lan: a1 10.74.23.1/24, a2 10.74.23.2/24
#   a1 eth1 10.74.24.1/30 --veth, tbf 20 Mbit/s, relay 25 ms each way-- b1 eth0 10.74.24.2/30
#   OpenVPN a1 10.8.23.1 <-> b1 10.8.23.2; a1 routes between the LAN and the tunnel.
#
# Job: MLP 5600 (4.45 M parameters) on Fashion-MNIST, 1 epoch, batch 2048 per agent (9 steps),
# codec = diloco with local_steps = 4.  The group's start broadcasts rank 0's parameters and
# Adam moments (53 MB) to a2 over the LAN (a second) and to b1 over the tunnel (~25 s); a1's
# collectives run one at a time, so a2, done with its copy, trains its 4 steps and sends its
# fp32 share of the first sync (17.8 MB, more than 16 MiB) to a1, which has no receive armed
# for it until the broadcast ends.  The old fixed 16 MiB limit paused the a1-a2 link there
# (PINGs and raft too) until the broadcast ended; in the seed table's resnet18 row (a 45 MB
# share, past what the socket buffers hold, and a 60 s broadcast) a2's kernel then dropped the
# connection after TCP_USER_TIMEOUT (30 s).  This test keeps to the cheap part: the backlog,
# and no pause (the full failure needs over 30 s of a zero window; bench/seed_table.sh's
# WORKLOAD=finetune 3-agent row shows it).
# Asserted:
#  - no agent paused a link (no event=xport-read-paused), and a1 queued a2's share past 16 MiB
#    (event=xport-backlog rank=0 peer_rank=1: the scenario happened; a run where it did not is
#    a skip, exit 77: a fresh job's start no longer broadcasts, see the end);
#  - one group for the whole job (no event=job-group but the start, no group-failed) and no
#    link went down before the agents stopped;
#  - the job ends done, every rank's final parameter hash equal.
# Root, network namespaces, openvpn and the dataset; exit 77 where one is missing.
set -o pipefail
cd "$(dirname "$0")/../.." || exit 1
. tests/integration/lib.bash
. tests/integration/netns.bash
nb_require openvpn python3

need_fashion_mnist

nb_host a1; nb_host a2; nb_host b1; nb_bridge lan
nb_lan lan a1 eth0 10.74.23.1/24
nb_lan lan a2 eth0 10.74.23.2/24
nb_link a1 eth1 10.74.24.1/30 b1 eth0 10.74.24.2/30
nb_rate a1 eth1 20mbit
nb_rate b1 eth0 20mbit
nb_delay 25
nb_openvpn a1 10.74.24.1 b1 10.8.23.1 10.8.23.2
nb_forward a1
nb_route b1 10.74.23.0/24 "$NB_TUN_DEV"
nb_route a2 10.8.23.0/24 10.74.23.1
nb_ping a2 10.8.23.2 10 || fail "a2 cannot reach b1 through a1 and the tunnel"

declare -A ADDR=([a1]=10.74.23.1 [a2]=10.74.23.2 [b1]=10.8.23.2)
nb_exec a1 "$GM" init --cluster lab --node a1 --config "$WORK/a1.conf" --state "$WORK/a1" \
    --listen 10.74.23.1:7450 --multicast off >/dev/null 2>>"$WORK/a1.log" || fail "init a1"
ns_agent a1
wait_for "agent a1" "$GM" status --config "$WORK/a1.conf"
for h in a2 b1; do
    TOKEN=$("$GM" token create --config "$WORK/a1.conf") || fail "token create"
    nb_exec "$h" "$GM" join "$TOKEN" --peer 10.74.23.1:7450 --node "$h" --config "$WORK/$h.conf" \
        --state "$WORK/$h" --listen "${ADDR[$h]}:7450" --multicast off >"$WORK/$h.join" 2>&1 ||
        { cat "$WORK/$h.join"; fail "join $h"; }
    ns_agent "$h"
done
wait_for "a1 links a2 on the LAN" ns_linked a1 lan a2
nb_wait "a1 links b1 through the tunnel" 30 ns_linked a1 tunnel b1
nb_wait "a2 links b1 through the tunnel" 30 ns_linked a2 tunnel b1
nb_wait "b1 links a2" 30 ns_linked b1 tunnel a2
pass "a1-a2 lan, a1-b1 and a2-b1 tunnel"
# the coordinator needs b1's view of its links too (LINK_STATS, every 5 s)
lan_known() {
    "$GM" doctor --json --config "$WORK/a1.conf" | python3 -c 'import json,sys
m = json.load(sys.stdin)["matrix"]
sys.exit(0 if all(v is not None for i, r in enumerate(m["rtt_ms"]) for j, v in enumerate(r) if i != j) else 1)'
}
nb_wait "a1 to know every link's RTT" 30 lan_known

job_ini "$WORK/job.ini" backlog model.hidden=5600 optim.batch=2048 schedule.kind=constant \
    comm.codec=diloco comm.local_steps=4 comm.overlap=false
"$GM" submit "$WORK/job.ini" --follow --config "$WORK/a1.conf" >"$WORK/submit.out" 2>&1 ||
    { cat "$WORK/submit.out"; fail "submit --follow"; }
JOB=$(sed -n 's/^job \([^ ]*\) submitted.*/\1/p' "$WORK/submit.out")
done_on() { job_is "$1" "$JOB" 'j["state"] == "done"'; }
wait_for "a2 to finish" done_on a2
wait_for "b1 to finish" done_on b1
! grep -h "event=xport-read-paused" "$WORK"/{a1,a2,b1}.log || fail "a link was paused"
groups=$(grep -c "event=job-group job=$JOB " "$WORK/a1.log")
[ "$groups" = 1 ] || { grep -h "event=job-group\|link-down\|group-failed" "$WORK"/{a1,a2,b1}.log; fail "$groups groups, not 1"; }
! grep -h "event=link-down\|event=group-failed" "$WORK"/{a1,a2,b1}.log || fail "a link went down during the job"
pass "one group, no link lost"
hashes=$(grep -h "event=job-final-hash job=$JOB" "$WORK"/{a1,a2,b1}.log | sed 's/.*params_sha256=//' | sort -u | wc -l)
[ "$hashes" = 1 ] || fail "the ranks' final parameters differ"
pass "3 ranks, identical final parameters"
# The scenario itself: since the group's start skips the broadcast where every rank already
# holds rank 0's state (a fresh job does), what keeps a1 busy while a2's share arrives is a
# matter of timing (seen here without sanitizers, not under them).  A run without the backlog
# checked the rest but not the limit: it says so and counts as skipped, not passed.
if ! grep -q "event=xport-backlog rank=0 peer_rank=1 " "$WORK/a1.log"; then
    ns_stop_agents b1 a2 a1
    echo "skip: a1 never queued more than 16 MiB of a2's share in this run (no start broadcast to wait behind): the queue limit was not exercised"
    exit 77
fi
pass "a1 queued a2's whole share past 16 MiB while busy with another collective, and read on"
ns_stop_agents b1 a2 a1

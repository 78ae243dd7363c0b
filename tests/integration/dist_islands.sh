#!/bin/bash
# tests/integration/dist_islands.sh - LAN islands: 2 agents on a LAN and 1 behind a real
# OpenVPN tunnel (20 Mbit/s tbf, 25 ms each way through the delay relay) run one job; the
# coordinator finds the islands from the measured link classes and the group runs the
# hierarchical all-reduce.  The testbed and cluster: lib.bash's ns_islands 21,
#
#   sw-lan: a1 10.74.21.1/24, a2 10.74.21.2/24
#   a1 eth1 10.74.22.1/30 --veth, tbf 20 Mbit/s, relay 25 ms each way-- b1 eth0 10.74.22.2/30
#   OpenVPN a1 10.8.21.1 <-> b1 10.8.21.2; a1 routes between the LAN and the tunnel.
#
# Job: MLP 32 on Fashion-MNIST, 1 epoch, batch 256 per agent (78 steps), codec = fp16 (a fixed codec, so
# the bytes have one formula).  Asserted from the agents' accounting (jobs --json, each
# link's training-channel bytes; C collective messages of a 56-byte header each):
#  - the coordinator sent islands [0,0,2] (a1 and a2 one island, b1 its own), every rank's
#    log says so;
#  - no gradient crosses between a2 and b1 (a2 is not a leader): only the parameter-hash
#    checks, 120 bytes a check each way, and the shared evaluation's sums, 72 bytes;
#  - a2 -> a1 (the reduce inside the island) and a1 -> a2 (the broadcast) carry fp32: 4 bytes
#    a parameter a step, plus headers;
#  - a1 <-> b1 (the leaders, over the tunnel) carry fp16: 2 bytes a parameter a step each way,
#    plus headers: half of what fp32 would, and b1 sends nothing else;
#  - the job ends done, every rank's final parameter hash equal.
# Then the same job with 8-bit DiLoCo deltas (codec = diloco8, H = 6, overlapped: 13 syncs),
# which run HIER over the islands too (train/compress/diloco.h): a2 sends its deltas in fp32
# to a1 only, a1 and b1 exchange one 8-bit encoding each way a sync (the island's sum, not
# one per member: a1 -> b1 carries a quarter and 1/256 of what a2 -> a1 does), a2 <-> b1
# carries no delta, and every rank ends with the same parameters.
# Root, network namespaces, openvpn and the dataset; exit 77 where one is missing.
set -o pipefail
cd "$(dirname "$0")/../.." || exit 1
. tests/integration/lib.bash
. tests/integration/netns.bash
ns_islands 21 # the testbed and cluster above (lib.bash)

# run_job NAME: submits $WORK/NAME.ini from a1, waits until a2 and b1 are done too, keeps each
# agent's `jobs --json` in $WORK/HOST.NAME.json; JOB is the job's id
run_job() {
    "$GM" submit "$WORK/$1.ini" --follow --config "$WORK/a1.conf" >"$WORK/submit-$1.out" 2>&1 ||
        { cat "$WORK/submit-$1.out"; fail "submit --follow ($1)"; }
    JOB=$(sed -n 's/^job \([^ ]*\) submitted.*/\1/p' "$WORK/submit-$1.out")
    wait_for "a2 to finish $1" done_on a2
    wait_for "b1 to finish $1" done_on b1
    for h in a1 a2 b1; do
        "$GM" jobs --json --config "$WORK/$h.conf" >"$WORK/$h.$1.json" || fail "jobs $h"
    done
}
done_on() { job_is "$1" "$JOB" 'j["state"] == "done"'; }

job_ini "$WORK/fp16.ini" islands model.hidden=32 optim.batch=256 schedule.kind=constant comm.codec=fp16
job_ini "$WORK/diloco8.ini" islands8 model.hidden=32 optim.batch=256 schedule.kind=constant \
    comm.codec=diloco8 comm.local_steps=6 comm.overlap=true
for codec in fp16 diloco8; do
    run_job $codec
    python3 - "$JOB" "$WORK" $codec <<'PY' || fail "the islands' bytes are not as accounted ($codec)"
import json, re, sys
jid, work, codec = sys.argv[1:4]
job = {h: next(j for j in json.load(open(f'{work}/{h}.{codec}.json'))['jobs'] if j['id'] == jid)
       for h in ('a1', 'a2', 'b1')}
assert job['a1']['state'] == 'done', job['a1']['state']
steps = job['a1']['summary']['steps']
P = 784 * 32 + 32 + 32 * 10 + 10  # MLP 32 parameters


def link(h, peer):
    for l in job[h]['links']:
        if l['node'] == peer:
            return l['bytes_sent'], l['bytes_received']
    return 0, 0


for h in ('a1', 'a2', 'b1'):
    groups = [l for l in open(f'{work}/{h}.log') if 'event=job-islands' in l and jid in l]
    assert groups and 'islands=0,0,2' in groups[-1], f'{h}: {groups[-1:] or "no event=job-islands"}'
a2b1 = link('a2', 'b1')
b1a2 = link('b1', 'a2')
up, down = link('a2', 'a1')  # a2 sends its fp32 gradients (deltas) up, receives the fp32 mean
lead_out, lead_in = link('b1', 'a1')  # the leaders' exchange over the tunnel
print(f'{codec}: steps {steps}, {P} parameters')
print(f'a2<->b1: {a2b1} / {b1a2} bytes (sent, received)')
print(f'a2 -> a1 {up} B, a1 -> a2 {down} B: {up / steps / P:.3f} / {down / steps / P:.3f} B a parameter a step')
print(f'b1 -> a1 {lead_out} B, a1 -> b1 {lead_in} B: {lead_out / steps / P:.3f} / {lead_in / steps / P:.3f} B a parameter a step')
if codec == 'diloco8':
    q8 = P + 4 * -(-P // 256)  # int8s and an fp32 scale a block of 256
    # a2's deltas go to a1 alone: what passes between a2 and b1 (hash checks, evaluation
    # sums) is under a quarter of one 8-bit delta (DIRECT would send every delta there)
    assert a2b1[0] < q8 / 4 and b1a2[0] < q8 / 4, f'a delta crossed between a2 and b1 ({q8} B each)'
    # the same syncs: b1's 8-bit encodings against a2's fp32 deltas (headers, checks on both)
    ratio = lead_out / up
    print(f'b1 -> a1 / a2 -> a1 = {ratio:.4f}, 8-bit / fp32 = {q8 / (4 * P):.4f}')
    assert abs(ratio - q8 / (4 * P)) < 0.02, 'b1 does not send one 8-bit encoding a sync'
    sys.exit(0)
# only the parameter-hash checks (every rank's 64-byte hash in one 56-byte-header message to
# every other rank: after the last step, every 100 steps, and the group's start, whose check
# of rank 0's state spares the broadcast when every rank holds it) and the shared evaluation's
# sums (the epoch's one: loss and correct answers as 4 floats, 16 bytes and a header, to every
# other rank; the MLP has no batch norm statistics to broadcast) pass between them
checks = steps // 100 + 1 + 1
evals = 1
want = 120 * checks + (56 + 16) * evals
assert a2b1 == b1a2[::-1] and a2b1[0] == a2b1[1] == want, f'training bytes between a2 and b1: want {want}'
# payload exact; headers, hash checks and the initial state broadcast (parameters and Adam
# moments, 12 B a parameter) on top: within 6% + 16 B a parameter (fp32 between the leaders
# would be 2x the fp16 payload, far outside)
for name, v, per in (('a2 -> a1', up, 4), ('a1 -> a2', down, 4), ('b1 -> a1', lead_out, 2),
                     ('a1 -> b1', lead_in, 2)):
    pay = steps * P * per
    assert pay <= v <= pay * 1.06 + 16 * P, f'{name}: {v} B against a payload of {pay}'
PY
    case $codec in
        fp16) pass "LAN reduce in fp32, fp16 between the island leaders only, nothing between a2 and b1" ;;
        *) pass "diloco8: fp32 deltas inside the LAN, one 8-bit encoding a sync between the leaders" ;;
    esac
    hashes=$(grep -h "event=job-final-hash job=$JOB" "$WORK"/{a1,a2,b1}.log | sed 's/.*params_sha256=//' | sort -u | wc -l)
    [ "$hashes" = 1 ] || fail "the ranks' final parameters differ ($codec)"
    pass "$codec, 3 ranks, identical final parameters"
done
ns_stop_agents b1 a2 a1

#!/bin/bash
# tests/integration/dist_auto_tunnel.sh - codec = auto over a real OpenVPN tunnel limited to
# 20 Mbit/s (tbf) with 25 ms added each way (the delay relay, RTT >= 50 ms): the coordinator
# picks from the measured link and the timed compute, and every rank runs its pick.
#
#   a1 (coordinator) --veth 10.74.19.0/30, tbf 20 Mbit/s, relay 25 ms each way-- b1
#   tunnel: OpenVPN a1 10.8.19.1 <-> b1 10.8.19.2; the agents listen on the tunnel only.
#
# Asserts:
#  - doctor projects every codec's step from the measured link and marks auto's pick, DiLoCo
#    (per-step exchange over a 50 ms RTT costs more than 20% of a step's compute), with 16-
#    or 8-bit deltas (diloco8 when 16 bits do not fit at H = 64: how fast the step is timed);
#  - the job (MLP 128 on Fashion-MNIST, 1 epoch, batch 256 per agent, codec = auto) runs
#    DiLoCo (diloco or diloco8, the same) on both ranks with the same H, the coordinator's (jobs --json of both agents)
#    capped to an eighth of the run's 117 steps (each rank's event=diloco line), ends done
#    above 70% test accuracy with both ranks' final parameter hashes equal;
#  - the bytes that crossed the tunnel during the job are under a tenth of what fp32 would
#    have sent (its payload alone: steps x parameters x 4 bytes x 2 ranks).
# Root, network namespaces, openvpn and the dataset; exit 77 where one is missing.
set -o pipefail
cd "$(dirname "$0")/../.." || exit 1
. tests/integration/lib.bash
. tests/integration/netns.bash
nb_require openvpn python3

need_fashion_mnist

nb_host a1; nb_host b1
nb_link a1 eth0 10.74.19.1/30 b1 eth0 10.74.19.2/30
nb_rate a1 eth0 20mbit
nb_rate b1 eth0 20mbit
nb_delay 25
nb_openvpn a1 10.74.19.1 b1 10.8.19.1 10.8.19.2
TUN=$NB_TUN_DEV
rtt=$(nb_exec b1 ping -n -q -c 5 -i 0.2 10.8.19.1 | sed -n 's|.*= \([0-9.]*\)/.*|\1|p')
awk -v r="$rtt" 'BEGIN {exit !(r >= 50)}' || fail "tunnel RTT ${rtt} ms < 50 ms"
pass "tunnel up, min RTT ${rtt} ms"

ns_tunnel_pair a1 10.8.19.1 b1 10.8.19.2

"$GM" doctor --model lenet5 --config "$WORK/a1.conf" >"$WORK/doctor.txt" 2>&1 || true
sed -n '/^gradient codecs/,$p' "$WORK/doctor.txt"
grep -E '^  diloco8? H=[0-9]+ \((fp16|q8)\) .*<- auto$' "$WORK/doctor.txt" >/dev/null ||
    fail "doctor does not mark DiLoCo as auto's pick"
grep -E '^  fp32 +[0-9]+ +[0-9.]+ +[0-9.]+ ms$' "$WORK/doctor.txt" >/dev/null ||
    fail "doctor prints no projected step for fp32"
pass "doctor projects each codec and marks DiLoCo"

job_ini "$WORK/job.ini" auto-tunnel model.hidden=128 optim.batch=256 schedule.kind=constant comm.codec=auto
tun() {
    nb_exec b1 cat "/sys/class/net/$TUN/statistics/tx_bytes" "/sys/class/net/$TUN/statistics/rx_bytes" |
        awk '{s += $1} END {print s}'
}
t0=$(tun) || fail "tun counters"
"$GM" submit "$WORK/job.ini" --follow --config "$WORK/a1.conf" >"$WORK/submit.out" 2>&1 ||
    { cat "$WORK/submit.out"; fail "submit --follow"; }
JOB=$(sed -n 's/^job \([^ ]*\) submitted.*/\1/p' "$WORK/submit.out")
wait_for "b1 to finish job $JOB" job_is b1 "$JOB" 'j["state"] == "done"'
t1=$(tun) || fail "tun counters"
for h in a1 b1; do
    "$GM" jobs --json --config "$WORK/$h.conf" >"$WORK/$h.jobs.json" || fail "jobs $h"
done
python3 - "$JOB" "$WORK" "$((t1 - t0))" <<'PY' || fail "the job did not run auto's pick as stated"
import json, re, sys
jid, work, tunnel = sys.argv[1], sys.argv[2], int(sys.argv[3])
jobs = {h: next(j for j in json.load(open(f'{work}/{h}.jobs.json'))['jobs'] if j['id'] == jid)
        for h in ('a1', 'b1')}
a, b = jobs['a1'], jobs['b1']
print(f"a1: codec={a['codec']} H={a['local_steps']} why: {a['codec_reason']}")
print(f"b1: codec={b['codec']} H={b['local_steps']}")
assert a['state'] == 'done' and a['codec_auto'] and b['codec_auto'], 'not done, or not auto'
assert a['codec'] == b['codec'] in ('diloco', 'diloco8'), 'auto did not pick DiLoCo on both ranks'
assert a['local_steps'] == b['local_steps'] >= 8, 'the ranks run different H'
acc = a['summary']['test_accuracy']
assert acc > 70, f'test accuracy {acc}'
# auto's H, capped by every rank to an eighth of the run (gradsync.h: a run syncs at least
# GM_GRADSYNC_AUTO_MIN_ROUNDS = 8 times); jobs --json says the H the ranks ran
H = a['local_steps']
assert H <= max(1, a['summary']['steps'] // 8), f"H={H} syncs fewer than 8 times in {a['summary']['steps']} steps"
for h, rank in (('a1', 0), ('b1', 1)):
    lines = [l for l in open(f'{work}/{h}.log') if 'event=diloco ' in l]
    assert lines, f'{h} logs no event=diloco'
    kv = dict(re.findall(r'(\w+)=(\S+)', lines[-1]))
    assert int(kv['local_steps']) == H and int(kv['rank']) == rank, f'{h}: {lines[-1]}'
hashes = set()
for h in ('a1', 'b1'):
    for l in open(f'{work}/{h}.log'):
        if 'event=job-final-hash' in l and jid in l:
            hashes.add(re.search(r'params_sha256=(\w+)', l).group(1))
assert len(hashes) == 1, f'final parameter hashes differ: {hashes}'
steps, params = a['summary']['steps'], 784 * 128 + 128 + 128 * 10 + 10
fp32 = steps * params * 4 * 2
print(f'test accuracy {acc:.2f}%; tunnel bytes {tunnel} vs fp32 payload {fp32} ({fp32 / tunnel:.1f}x)')
assert tunnel < fp32 / 10, 'the tunnel carried more than a tenth of fp32'
PY
pass "codec = auto ran DiLoCo with the coordinator's H on both ranks over the 50 ms tunnel"
ns_stop_agents b1 a1

#!/usr/bin/env bash
# tests/integration/load16.sh - issue 23 "Load": 16 agents on loopback join one cluster, link
# to each other, elect one chief and run a small job.
#
# a01 is initialised and started; a02..a16 join through it (a token each); a01 stops, and
# then all 16 agents are started at once: 16 start-ups, 120 TLS links and their probes, and
# the raft's voters added as the links come up, all at the same time.  From the moment the last
# agent is started, the test polls every agent until each lists the other 15 up and all 16 name
# the same chief, and prints that time.  The bar (issue 23) is 30 s; the test asserts half of it,
# LIMIT = 15 s: the chief's controller takes a member's three raft steps at commit speed
# (measured 4-8 s in all under load), and the controller that took one step per 500 ms tick
# needed 22.5 s at best, so a return to that pace fails here.  On a loaded machine (1-minute
# load average above the number of CPUs) the test asserts only 3x the bar (90 s) and says so:
# with 16 agents' TLS handshakes and link probes sharing two cores with other work, the time
# measures the machine as much as the agent.  The chief must also be named by all within LAG =
# 10 s (plus the longest poll round) of the round that saw all links up: the controller then
# has at most a few steps left (measured 0-0.7 s at load 4-13, 4.2 s at load 18), and the
# one-step-a-tick controller lagged 19-26 s under load 4-13.  Above 4 times as much load as
# CPUs the commit-speed steps slow with the machine, and LAG is the bar, 30 s (said so).
# Then the job: an MLP (hidden 16) on a 2000/500 subset of Fashion-MNIST, Adam, global
# batch 64 (4 samples a rank), one epoch = 31 steps, submitted on a16; it must end done on the
# submitter, every one of the 16 ranks must log the same final parameters
# (event=job-final-hash), and no term may have had two chiefs.  Every agent runs with
# --metrics off (set by init/join in lib.bash's make_cluster).  Cleans up its agents and
# directory on any exit (lib.bash).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. tests/integration/lib.bash

need_fashion_mnist
BAR=30
LIMIT=15
LAG=10

# free_port (lib.bash's, redefined for make_cluster): a free port below the kernel's ephemeral
# range.  The 16 ports are picked at join, then listened on 10-40 s later; a port from the
# ephemeral range can meanwhile become the local end of any outgoing connection on this host
# (120 links here, other tests' agents), and the agent that wanted it exits with "address
# already in use".
free_port() {
    python3 -c '
import random, socket
lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
for _ in range(200):
    p = random.randrange(max(1024, lo - 12000), lo)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
    except OSError:
        continue
    print(p)
    break'
}
# LOAD_N: the number of agents (default 16, the test in make test).  With another number the
# test measures forming only (links and one chief, as a benchmark: docs/BENCHMARKS.md) and
# runs no job (its global batch of 64 is 4 samples on each of 16 ranks).
N=${LOAD_N:-16}
case "$N" in '' | *[!0-9]*) fail "LOAD_N=$N: a number of agents, 2 or more" ;; esac
[ "$N" -ge 2 ] || fail "LOAD_N=$N: a number of agents, 2 or more"

python3 tests/integration/dist_tools.py subset "$DATA" "$WORK/data" 2000 500 || fail "making the data subset"
names=()
for i in $(seq "$N"); do names+=("$(printf 'a%02d' "$i")"); done
t=$SECONDS
make_cluster load16 "${names[@]}"
echo "init + $((N - 1)) joins: $((SECONDS - t)) s"
# a01 stops, so that all 16 agents start together (the raft's voters are added as their links
# come up: at this point a01 is its only one)
kill "$PID_a01"; wait "$PID_a01" || fail "a01 exited $? on SIGTERM"
PIDS=()

# poll_round: one round of status --json on every agent, all at once (its members' links and
# its chief); prints "L C": L the number of agents that list all N-1 others up, C the chief
# all N name ("-" when they do not all name one).
poll_round() {
    local n
    for n in "${names[@]}"; do
        { "$GM" status --json --config "$WORK/$n.conf" >"$WORK/st.$n" 2>/dev/null || : >"$WORK/st.$n"; } &
    done
    wait
    python3 - "$WORK" $((N - 1)) "${names[@]}" <<'PY'
import json, sys
work, want, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
linked, chiefs, detail = 0, set(), []
for n in names:
    try:
        st = json.load(open("%s/st.%s" % (work, n)))
        up = sum(m["state"] == "up" for m in st["members"])
        linked += up == want
        chief = st["chief"]
    except (ValueError, KeyError):
        up, chief = "?", None
    chiefs.add(chief)
    detail.append("%s:%s up,chief=%s" % (n, up, chief))
open("%s/poll.detail" % work, "w").write(" ".join(detail) + "\n")
print(linked, chiefs.pop() if len(chiefs) == 1 and None not in chiefs else "-")
PY
}

# the 16 agents, started at once (no wait between them)
for n in "${names[@]}"; do
    "$GM" agent --config "$WORK/$n.conf" 2>>"$WORK/$n.log" &
    PIDS+=($!)
    eval "PID_$n=$!"
done
t_last=$(date +%s.%N)
echo "load at the last start: $(uptime)"
# each time is the end of the round that first saw it: an upper bound, late by up to one round
# (N CLI calls at once and a Python, which take a while on a loaded machine: the longest is
# printed)
t_linked='' t_chief='' round_max=0
deadline=$((6 * BAR * (N > 16 ? N : 16) / 16))
while :; do
    t0=$(date +%s.%N)
    read -r linked chief < <(poll_round)
    now=$(date +%s.%N)
    since=$(python3 -c "print('%.1f' % ($now - $t_last))")
    round_max=$(python3 -c "print('%.1f' % max($round_max, $now - $t0))")
    [ -n "$t_linked" ] || [ "$linked" != "$N" ] || t_linked=$since
    [ -n "$t_chief" ] || [ "$chief" = - ] || t_chief=$since
    [ "$linked" = "$N" ] && [ "$chief" != - ] && break
    python3 -c "import sys; sys.exit(0 if $since < $deadline else 1)" ||
        fail "after $deadline s, $linked of $N agents linked to all others, chief '$chief'; each: $(cat "$WORK/poll.detail"); not running: $(for n in "${names[@]}"; do p=PID_$n; kill -0 "${!p}" 2>/dev/null || echo -n "$n "; done)"
    sleep 0.2
done
formed=$since
ncpu=$(nproc)
load1=$(cut -d' ' -f1 /proc/loadavg)
echo "from the last start: all $N agree on chief $chief at ${t_chief} s; all $N linked ($((N - 1)) up each) at ${t_linked} s; both: $formed s (bar: $BAR s, issue 23; a poll round took up to $round_max s)"
lag=$(python3 -c "print('%.1f' % max(0, $t_chief - $t_linked))")
echo "one chief named by all $lag s after all were linked (within a poll round)"
echo "load after: $(uptime)"
if [ "$N" != 16 ]; then
    limit=$deadline
    echo "note: LOAD_N=$N: a measurement; asserting only the poll's deadline, ${limit} s"
elif python3 -c "import sys; sys.exit(0 if $load1 > $ncpu else 1)"; then
    limit=$((3 * BAR))
    echo "note: this machine is loaded (1-min load $load1 > $ncpu CPUs): asserting only ${limit} s; the bar is $BAR s"
else
    limit=$LIMIT
fi
python3 -c "import sys; sys.exit(0 if $formed <= $limit else 1)" ||
    fail "formed in $formed s, over $limit s (bar $BAR s, load $load1)"
pass "$N agents linked and chief $chief elected $formed s after the last start (limit $limit s)"
if [ "$N" = 16 ]; then
    if python3 -c "import sys; sys.exit(0 if $load1 > 4 * $ncpu else 1)"; then
        LAG=$BAR
        echo "note: this machine is overloaded (1-min load $load1 > 4 x $ncpu CPUs): the chief's lag after the links may be up to $LAG s"
    fi
    python3 -c "import sys; sys.exit(0 if $lag <= $LAG + $round_max else 1)" ||
        fail "the chief was named by all $lag s after the links were up, over $LAG s + one poll round ($round_max s)"
    pass "the chief named by all $lag s after the links were up (limit $LAG s + one poll round, $round_max s)"
fi
if [ "$N" != 16 ]; then
    echo "LOAD_N=$N: forming measured, no job"
    check_one_chief_per_term
    stop_agents
    exit 0
fi

job_ini "$WORK/job.ini" load16 model.hidden=16 data.dir="$WORK/data" optim.global_batch=64 comm.codec=fp32
t=$SECONDS
timeout 90 "$GM" submit "$WORK/job.ini" --follow --config "$WORK/a16.conf" >"$WORK/submit.out" 2>&1 ||
    { cat "$WORK/submit.out"; fail "submit --follow"; }
id=$(sed -n 's/^job \([0-9a-f]*\) submitted.*/\1/p' "$WORK/submit.out")
[ -n "$id" ] || { cat "$WORK/submit.out"; fail "no job id in submit's output"; }
[ "$(job_get a16 "$id" 'j["state"]')" = "done" ] || fail "job $id not done on a16"
[ "$(job_get a16 "$id" 'j["summary"]["steps"]')" = 31 ] || fail "job $id: not 31 steps"
# a16 is a member: the coordinator's accuracy came with JOB_END, and a16's own rank, which
# did not evaluate, must not replace it when it exits after that message
acc=$(job_get a16 "$id" 'j["summary"]["test_accuracy"]')
[ -n "$acc" ] && [ "$acc" != None ] || fail "job $id: no accuracy on a16 (got '$acc')"
hashes=$(for n in "${names[@]}"; do final_hash "$n" "$id"; done)
[ "$(wc -l <<<"$hashes")" = "$N" ] || fail "$(grep -c . <<<"$hashes") final hashes of $N ranks"
[ "$(sort -u <<<"$hashes" | wc -l)" = 1 ] || fail "the ranks' final parameters differ: $hashes"
pass "job $id done in $((SECONDS - t)) s: 31 steps on $N ranks, one final parameter hash, accuracy $(job_get a16 "$id" 'j["summary"]["test_accuracy"]')%"
check_one_chief_per_term
stop_agents

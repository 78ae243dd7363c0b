#!/usr/bin/env bash
# bench/soak.sh - issue 23 "Load": 8 agents on loopback run small jobs back to back for
# DURATION seconds while each agent's resident memory (VmRSS of /proc/PID/status) and open file
# descriptors (entries of /proc/PID/fd) are sampled every SAMPLE seconds.  Prints the samples as
# a table (one row per sample: minute, jobs done so far, then RSS in KiB and fds per agent),
# and at the end each agent's growth from its first sample at or after BASE seconds (the
# warm-up: allocator arenas, the first job's buffers, link buffers) to its last, and the growth
# of the sum over all agents.  The bar (issue 23) is under 5% after the first 5 minutes; the
# script prints PASS/MISS per agent and overall and exits 0 either way (a benchmark, not a
# test), 1 when a job fails or an agent dies.
#
# The job: an MLP (hidden 16) on a 6000/1000 subset of Fashion-MNIST, Adam, global batch 64,
# one epoch (93 steps over 8 ranks), each job with its own seed (a new job identity, so the
# agents' job history and checkpoint records grow as they would in use; the growth bar is about
# the process, not a bound on that history, which the table's per-job slope shows).
#
# Usage: bench/soak.sh [GRADMESH_BINARY]   DURATION=1800 SAMPLE=60 BASE=300 AGENTS=8 KEEP=1
# Needs the Fashion-MNIST files (skips, 77, without them).  RSS and fd counts do not depend on
# the machine's load, so a shared machine is fine (only the number of jobs run does).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
GM_BIN=$(realpath "${1:-./gradmesh}")
export GM_BIN
. tests/integration/lib.bash

DURATION=${DURATION:-1800}
SAMPLE=${SAMPLE:-60}
BASE=${BASE:-300}
AGENTS=${AGENTS:-8}
need_fashion_mnist

SAMPLER=
soak_cleanup() {
    [ -z "$SAMPLER" ] || { kill "$SAMPLER" 2>/dev/null; wait "$SAMPLER" 2>/dev/null; }
    cleanup
}
trap soak_cleanup EXIT

python3 tests/integration/dist_tools.py subset "$DATA" "$WORK/data" 6000 1000 || fail "making the data subset"
names=()
for i in $(seq "$AGENTS"); do names+=("a$i"); done
make_cluster soak "${names[@]}"
for n in "${names[@]:1}"; do start_agent "$n"; done
for n in "${names[@]}"; do
    wait_until 60 "$n to link to all $((AGENTS - 1)) others" links_up "$n" $((AGENTS - 1))
done
wait_until 60 "a chief" sh -c "[ -n \"\$(\"$GM\" members --json --config '$WORK/a1.conf' |
    python3 -c 'import json,sys; print(json.load(sys.stdin)[\"chief\"] or \"\")')\" ]"
pids=()
for n in "${names[@]}"; do p=PID_$n; pids+=("${!p}"); done
echo "soak: $AGENTS agents up (pids ${pids[*]}), jobs back to back for ${DURATION}s, a sample every ${SAMPLE}s"
echo "load at start: $(uptime)"

# sample: one line "SECONDS JOBS rss1 fd1 rss2 fd2 ..." (a dead agent: - -)
: >"$WORK/jobs.done"
sample() {
    local p rss fds line
    line="$1 $(wc -l <"$WORK/jobs.done")"
    for p in "${pids[@]}"; do
        rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$p/status" 2>/dev/null)
        fds=$(ls "/proc/$p/fd" 2>/dev/null | wc -l)
        [ -n "$rss" ] || { rss=-; fds=-; }
        line+=" $rss $fds"
    done
    echo "$line" >>"$WORK/samples"
}
t0=$SECONDS
(
    next=0
    while :; do
        sample $((SECONDS - t0))
        next=$((next + SAMPLE))
        while [ $((SECONDS - t0)) -lt $next ]; do sleep 1; done
    done
) &
SAMPLER=$!

jobs_ok=0 jobs_failed=0
while [ $((SECONDS - t0)) -lt "$DURATION" ]; do
    k=$((jobs_ok + jobs_failed + 1))
    job_ini "$WORK/job.ini" "soak$k" job.seed="$k" model.hidden=16 data.dir="$WORK/data" \
        optim.global_batch=64 comm.codec=fp32
    out=$(timeout 300 "$GM" submit "$WORK/job.ini" --follow --config "$WORK/a1.conf" 2>&1)
    id=$(sed -n 's/^job \([0-9a-f]*\) submitted.*/\1/p' <<<"$out")
    if [ -n "$id" ] && [ "$(job_get a1 "$id" 'j["state"]' 2>/dev/null)" = "done" ]; then
        jobs_ok=$((jobs_ok + 1)); echo "$id" >>"$WORK/jobs.done"
    else
        jobs_failed=$((jobs_failed + 1))
        echo "soak: job $k did not complete: $(tail -n 3 <<<"$out" | tr '\n' ' ')"
        [ $jobs_failed -lt 3 ] || break
    fi
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null || fail "agent pid $p died"; done
done
# a last sample at the end, whatever the phase of the sampler
kill "$SAMPLER" 2>/dev/null; wait "$SAMPLER" 2>/dev/null; SAMPLER=
sample $((SECONDS - t0))
echo "load at end: $(uptime)"
echo "jobs: $jobs_ok done, $jobs_failed not, in $((SECONDS - t0)) s"

python3 - "$WORK/samples" "$BASE" "${names[@]}" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
base_s, names = int(sys.argv[2]), sys.argv[3:]
hdr = "%6s %5s" % ("min", "jobs") + "".join(" %9s %4s" % (n + " RSS", "fd") for n in names) + " %10s" % "sum RSS"
print("RSS in KiB (VmRSS), fd = open file descriptors")
print(hdr)
for r in rows:
    rss = [r[2 + 2 * i] for i in range(len(names))]
    tot = sum(int(x) for x in rss if x != "-")
    print("%6.1f %5s" % (int(r[0]) / 60, r[1]) +
          "".join(" %9s %4s" % (r[2 + 2 * i], r[3 + 2 * i]) for i in range(len(names))) + " %10d" % tot)
base = next((r for r in rows if int(r[0]) >= base_s), None)
last = rows[-1]
if base is None or base is last:
    print("growth: no sample after the first %d s and before the last: run longer (DURATION)" % base_s)
    sys.exit(0)
print("growth from %.1f min (%s jobs) to %.1f min (%s jobs); bar: under 5%%" %
      (int(base[0]) / 60, base[1], int(last[0]) / 60, last[1]))
def pct(a, b): return 100.0 * (b - a) / a if a else float("inf")
ok_all, b_sum, l_sum = True, 0, 0
for i, n in enumerate(names):
    b, l = base[2 + 2 * i], last[2 + 2 * i]
    bf, lf = base[3 + 2 * i], last[3 + 2 * i]
    if "-" in (b, l):
        print("  %-4s agent gone" % n); ok_all = False; continue
    b, l, bf, lf = int(b), int(l), int(bf), int(lf)
    b_sum += b; l_sum += l
    g = pct(b, l)
    ok = g < 5 and lf <= bf
    ok_all &= ok
    print("  %-4s RSS %7d -> %7d KiB (%+.1f%%)  fds %3d -> %3d  %s" % (n, b, l, g, bf, lf, "PASS" if ok else "MISS"))
g = pct(b_sum, l_sum)
print("  all  RSS %7d -> %7d KiB (%+.1f%%)  %s" % (b_sum, l_sum, g, "PASS" if g < 5 and ok_all else "MISS"))
PY
stop_agents
[ $jobs_failed -eq 0 ] || exit 1

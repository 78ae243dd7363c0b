# tests/integration/lib.bash - helpers shared by the loopback integration tests.
# Sourced, not run.  Every wait polls a condition with a deadline.

GM=${GM_BIN:-./gradmesh}
case "$GM" in /*) ;; *) GM="$PWD/$GM" ;; esac
[ -x "$GM" ] || { echo "no gradmesh binary at $GM"; exit 77; }

WORK=$(mktemp -d /tmp/gm-it.$$.XXXXXX)
PIDS=()

# (|| true: the scripts of `gradmesh train --local` run under set -e, where a failing kill or
# wait would end the trap before WORK is removed)
CGROUPS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    for p in "${CGROUPS[@]}"; do rmdir "$p" 2>/dev/null || true; done
    if [ "${KEEP:-0}" = 1 ]; then echo "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

# fail MSG: says MSG, the tail of every log, and MSG again as the very last line (CI shows only
# the last lines of a failed test's output).
fail() {
    echo "FAIL: $*"
    for f in "$WORK"/*.log; do [ -e "$f" ] && { echo "--- $f"; tail -n 40 "$f"; }; done
    echo "FAIL: $*"
    exit 1
}
pass() { echo "ok: $*"; }

# cpu_cgroup VAR NAME QUOTA_US: a CPU cgroup of this test (v1 cpu controller: 50 ms periods,
# QUOTA_US of CPU in each, -1: none) into VAR, removed by cleanup; a process joins it by
# writing its pid to VAR/cgroup.procs, and the test may rewrite VAR/cpu.cfs_quota_us.  Skips
# the test (77) without a writable controller (it needs root).
cpu_cgroup() {
    local cg=/sys/fs/cgroup/cpu
    [ -w "$cg" ] || { echo "skip: needs a writable cgroup v1 cpu controller at $cg (root)"; exit 77; }
    cg=$cg/gm-$(basename "$0" .sh)-$$-$2
    mkdir "$cg" || fail "cannot make the cgroup $cg"
    CGROUPS+=("$cg")
    echo 50000 >"$cg/cpu.cfs_period_us" && echo "$3" >"$cg/cpu.cfs_quota_us" ||
        fail "cannot cap the cgroup $cg at $3 us per 50 ms"
    printf -v "$1" %s "$cg"
}

# free_port: a port the kernel just gave us (closed again).
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# wait_for DESC CMD...: polls CMD every 50 ms for up to 10 s.
wait_for() {
    local desc=$1 i; shift
    for i in $(seq 200); do "$@" >/dev/null 2>&1 && return 0; sleep 0.05; done
    fail "timed out waiting for $desc"
}

# start_agent NAME: runs the agent of $WORK/NAME.conf, waits until it answers status.
start_agent() {
    "$GM" agent --config "$WORK/$1.conf" 2>>"$WORK/$1.log" &
    PIDS+=($!)
    eval "PID_$1=$!"
    wait_for "agent $1" "$GM" status --config "$WORK/$1.conf"
}

# links_up NAME N: status --json of NAME lists N members with state up.
links_up() {
    "$GM" status --json --config "$WORK/$1.conf" |
        python3 -c 'import json,sys; d=json.load(sys.stdin); sys.exit(0 if sum(m["state"]=="up" for m in d["members"])=='"$2"' else 1)'
}

# log_has NAME TEXT: polls NAME's log for TEXT.
log_has() { wait_for "'$2' in $1.log" grep -qF -- "$2" "$WORK/$1.log"; }

# stop_agents: SIGTERM to every agent; each must exit 0 and, under
# sanitizers, report nothing.
stop_agents() {
    local p rc
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${PIDS[@]}"; do
        wait "$p"; rc=$?
        [ $rc -eq 0 ] || [ $rc -eq 127 ] || fail "agent pid $p exited $rc"
    done
    PIDS=()
    if grep -l "Sanitizer" "$WORK"/*.log 2>/dev/null; then fail "sanitizer report in a log"; fi
    pass "agents stopped cleanly"
}

# --- agents inside network namespaces (tests/integration/netns.bash) ------------------
# ns_agent HOST: runs the agent of $WORK/HOST.conf inside HOST (log HOST.log);
# its pid is in PID_HOST.
ns_agent() { nb_spawn "$1" "$1.log" "$GM" agent --config "$WORK/$1.conf"; eval "PID_$1=$NB_LAST_PID"; }

# ns_status HOST: status --json of HOST's agent (its control socket is a file,
# reachable from the root namespace).
ns_status() { "$GM" status --json --config "$WORK/$1.conf"; }

# ns_linked HOST CLASS NODE...: HOST lists every NODE up, of link CLASS, with an RTT.
ns_linked() { local n=$1 cls=$2; shift 2; ns_status "$n" | python3 "$PWD/tests/integration/disc_tools.py" links "$cls" "$@"; }

# ns_stop_agents HOST...: SIGTERM to each HOST's agent in turn; each must exit
# 0 and, under sanitizers, no log may hold a report.
ns_stop_agents() {
    local n p rc
    for n in "$@"; do
        p=PID_$n
        kill "${!p}"; wait "${!p}"; rc=$?
        [ $rc -eq 0 ] || fail "agent $n exited $rc"
    done
    if grep -l "Sanitizer" "$WORK"/*.log 2>/dev/null; then fail "sanitizer report in a log"; fi
    pass "agents stopped cleanly"
}

# --- loopback clusters and jobs (dist_*.sh) ----------------------------------------------
# wait_until SECS DESC CMD...: wait_for with a longer deadline, for training jobs.  The
# deadline only keeps a hung run from hanging CI; nothing asserts how fast a job is.
wait_until() {
    local secs=$1 desc=$2 end; shift 2
    end=$((SECONDS + secs))
    while [ $SECONDS -lt $end ]; do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
    fail "timed out after ${secs}s waiting for $desc"
}

# make_cluster CLUSTER FIRST OTHER...: init FIRST (the admitter) on a free loopback port,
# start its agent, and join every OTHER with a token of its own (their agents are not
# started: start_agent them when the test needs them).  Multicast is off: only the
# static peer, so agents of other tests on this host stay out.
make_cluster() {
    local cluster=$1 first=$2 n tok; shift 2
    "$GM" init --metrics off --cluster "$cluster" --node "$first" --config "$WORK/$first.conf" \
        --state "$WORK/$first" --listen 127.0.0.1:"$(free_port)" --multicast off \
        >/dev/null 2>>"$WORK/cli.log" || fail "init $first"
    start_agent "$first"
    for n in "$@"; do
        tok=$("$GM" token create --config "$WORK/$first.conf" 2>>"$WORK/cli.log") || fail "token for $n"
        "$GM" join --metrics off "$tok" --node "$n" --peer "$(sed -n '/^\[node\]/,/^\[/s/^listen *= *//p' "$WORK/$first.conf")" \
            --config "$WORK/$n.conf" --state "$WORK/$n" --listen 127.0.0.1:"$(free_port)" \
            --multicast off >/dev/null 2>>"$WORK/cli.log" || fail "join $n"
    done
}

# job_get NAME ID EXPR: a Python expression over job ID (as `j`) in NAME's `jobs --json`;
# prints it, or fails (exit 1) when the job is not listed.
job_get() {
    "$GM" jobs --json --config "$WORK/$1.conf" | python3 -c '
import json, sys
j = [o for o in json.load(sys.stdin)["jobs"] if o["id"] == sys.argv[1]]
if not j: sys.exit(1)
j = j[0]
print(eval(sys.argv[2]))' "$2" "$3"
}

# job_is NAME ID PYEXPR: succeeds when PYEXPR (over `j`) is true for job ID on NAME.
job_is() { [ "$(job_get "$1" "$2" "bool($3)")" = True ]; }

# kill9_agent NAME: SIGKILL to NAME's agent (no goodbye on its links), reaped and
# dropped from PIDS so that stop_agents does not count its exit status.
kill9_agent() {
    local p=PID_$1
    kill -9 "${!p}" || fail "kill -9 $1"
    reap_agent "$1"
}

# reap_agent NAME: waits for NAME's agent, which something else ended (a watcher's SIGKILL),
# and drops it from PIDS.
reap_agent() {
    local p=PID_$1 q keep=()
    wait "${!p}" 2>/dev/null
    for q in "${PIDS[@]}"; do [ "$q" = "${!p}" ] || keep+=("$q"); done
    PIDS=("${keep[@]}")
}

# chief_is NAME CHIEF: NAME's `members --json` names CHIEF as the chief.
chief_is() { "$GM" members --json --config "$WORK/$1.conf" |
    python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)["chief"] == sys.argv[1] else 1)' "$2"; }

# check_one_chief_per_term: from every agent's log (event=chief-elected), fails when a term
# had more than one chief; passes with the list of "term chief".
check_one_chief_per_term() {
    local dup
    grep -h "event=chief-elected" "$WORK"/*.log | sed 's/.*node=\([^ ]*\) term=\([0-9]*\).*/\2 \1/' | sort -u >"$WORK/chiefs"
    dup=$(awk '{print $1}' "$WORK/chiefs" | uniq -d)
    [ -z "$dup" ] || fail "more than one chief in term(s) $dup: $(cat "$WORK/chiefs")"
    pass "one chief per term: $(tr '\n' ' ' <"$WORK/chiefs")"
}
# members_get NAME EXPR: a Python expression over NAME's `members --json` (as `d`).
members_get() {
    "$GM" members --json --config "$WORK/$1.conf" | python3 -c '
import json, sys
d = json.load(sys.stdin)
print(eval(sys.argv[1]))' "$2"
}
# members_is NAME PYEXPR: succeeds when PYEXPR (over `d`) holds on NAME.
members_is() { [ "$(members_get "$1" "bool($2)")" = True ]; }
# ns_tunnel_pair A A_IP B B_IP [HOOK]: `init` on namespace host A (cluster lab, node A, listening
# on A_IP:7450, the tunnel end), `join` on B through it (listening on B_IP:7450), each agent
# started inside its namespace (HOOK NAME, if given, runs on each config before its agent
# starts), and waits until each has measured its link to the other.
ns_tunnel_pair() {
    local a=$1 aip=$2 b=$3 bip=$4 hook=${5:-} token
    nb_exec "$a" "$GM" init --metrics off --cluster lab --node "$a" --config "$WORK/$a.conf" --state "$WORK/$a" \
        --listen "$aip:7450" --multicast off >/dev/null 2>>"$WORK/$a.log" || fail "init $a"
    [ -z "$hook" ] || "$hook" "$a"
    ns_agent "$a"
    wait_for "agent $a" "$GM" status --config "$WORK/$a.conf"
    token=$("$GM" token create --config "$WORK/$a.conf") || fail "token create"
    nb_exec "$b" "$GM" join --metrics off "$token" --peer "$aip:7450" --node "$b" --config "$WORK/$b.conf" \
        --state "$WORK/$b" --listen "$bip:7450" --multicast off >"$WORK/$b.join" 2>&1 ||
        { cat "$WORK/$b.join"; fail "join $b"; }
    [ -z "$hook" ] || "$hook" "$b"
    ns_agent "$b"
    nb_wait "$a to measure its link to $b" 60 ns__measured "$a" "$b"
    nb_wait "$b to measure its link to $a" 60 ns__measured "$b" "$a"
}
ns__measured() { ns_status "$1" | python3 "$PWD/tests/integration/disc_tools.py" field "$2" throughput_mbps >/dev/null 2>&1; }

# ns_islands N: the testbed and cluster of the islands tests (dist_islands.sh,
# dist_island_backlog.sh): 2 agents on a LAN and 1 behind a real OpenVPN tunnel (20 Mbit/s tbf,
# 25 ms each way through the delay relay).  N (0-253) numbers the subnets:
#
#   sw-lan: a1 10.74.N.1/24, a2 10.74.N.2/24
#   a1 eth1 10.74.N+1.1/30 --veth, tbf 20 Mbit/s, relay 25 ms each way-- b1 eth0 10.74.N+1.2/30
#   OpenVPN a1 10.8.N.1 <-> b1 10.8.N.2; a1 routes between the LAN and the tunnel.
#
# Checks root, namespaces, openvpn, python3 and the dataset first (exit 77 where one is missing).
# `init` on a1 (cluster lab, 10.74.N.1:7450), a2 and b1 joined through it, every agent started
# in its namespace (ns_agent: PID_a1, PID_a2, PID_b1; ADDR[HOST] is each one's address).
# Returns once a1-a2 are linked as lan, a1-b1 and a2-b1 as tunnel, and a1 knows every link's
# RTT (b1's view comes in its LINK_STATS, every 5 s): the coordinator's islands need them.
ns_islands() {
    local n=$1 h token
    nb_require openvpn python3
    need_fashion_mnist
    nb_host a1; nb_host a2; nb_host b1; nb_bridge lan
    nb_lan lan a1 eth0 "10.74.$n.1/24"
    nb_lan lan a2 eth0 "10.74.$n.2/24"
    nb_link a1 eth1 "10.74.$((n + 1)).1/30" b1 eth0 "10.74.$((n + 1)).2/30"
    nb_rate a1 eth1 20mbit
    nb_rate b1 eth0 20mbit
    nb_delay 25
    nb_openvpn a1 "10.74.$((n + 1)).1" b1 "10.8.$n.1" "10.8.$n.2"
    nb_forward a1
    nb_route b1 "10.74.$n.0/24" "$NB_TUN_DEV"
    nb_route a2 "10.8.$n.0/24" "10.74.$n.1"
    nb_ping a2 "10.8.$n.2" 10 || fail "a2 cannot reach b1 through a1 and the tunnel"

    declare -gA ADDR=([a1]=10.74.$n.1 [a2]=10.74.$n.2 [b1]=10.8.$n.2)
    nb_exec a1 "$GM" init --cluster lab --node a1 --config "$WORK/a1.conf" --state "$WORK/a1" \
        --listen "${ADDR[a1]}:7450" --multicast off >/dev/null 2>>"$WORK/a1.log" || fail "init a1"
    ns_agent a1
    wait_for "agent a1" "$GM" status --config "$WORK/a1.conf"
    for h in a2 b1; do
        token=$("$GM" token create --config "$WORK/a1.conf") || fail "token create"
        nb_exec "$h" "$GM" join "$token" --peer "${ADDR[a1]}:7450" --node "$h" --config "$WORK/$h.conf" \
            --state "$WORK/$h" --listen "${ADDR[$h]}:7450" --multicast off >"$WORK/$h.join" 2>&1 ||
            { cat "$WORK/$h.join"; fail "join $h"; }
        ns_agent "$h"
    done
    wait_for "a1 links a2 on the LAN" ns_linked a1 lan a2
    nb_wait "a1 links b1 through the tunnel" 30 ns_linked a1 tunnel b1
    nb_wait "a2 links b1 through the tunnel" 30 ns_linked a2 tunnel b1
    nb_wait "b1 links a2" 30 ns_linked b1 tunnel a2
    pass "a1-a2 lan, a1-b1 and a2-b1 tunnel"
    nb_wait "a1 to know every link's RTT" 30 ns__rtts_known a1
}
# ns__rtts_known HOST: HOST's doctor matrix has an RTT for every pair of nodes.
ns__rtts_known() {
    "$GM" doctor --json --config "$WORK/$1.conf" | python3 -c 'import json,sys
m = json.load(sys.stdin)["matrix"]
sys.exit(0 if all(v is not None for i, r in enumerate(m["rtt_ms"]) for j, v in enumerate(r) if i != j) else 1)'
}

# job_key JOBFILE: the checkpoint key of a job file: the first 16 hex digits of its identity,
# the SHA-256 of its text less the line that sets [job] epochs (train/job.h; a test's own
# reading of the rule, for the files job_ini writes).
job_key() {
    python3 - "$1" <<'PY'
import hashlib, re, sys
sec, out = "", b""
for line in open(sys.argv[1], "rb").read().splitlines(keepends=True):
    t = line.decode().strip()
    m = re.match(r"\[([^\]]*)\]", t)
    if m:
        sec = m.group(1)
    if not (sec == "job" and re.match(r"epochs\s*[=:]", t)):
        out += line
print(hashlib.sha256(out).hexdigest()[:16])
PY
}

# check_newest_committed NAME KEY STEPS ACC DATA: a fault test's "valid newest committed
# checkpoint", asked of agent NAME: the replicated state commits checkpoints of KEY, the newest
# at step STEPS; every one NAME lists is ok and every committed one it holds hashes to the
# committed SHA-256; the newest, exported, gives ACC (within 0.05 points) in a NumPy forward
# pass of DATA.
check_newest_committed() {
    local n=$1 key=$2 steps=$3 acc=$4 data=$5 pyacc
    "$GM" members --json --config "$WORK/$n.conf" >"$WORK/members.$n" || fail "members on $n"
    "$GM" checkpoint list --json --config "$WORK/$n.conf" >"$WORK/ckpts.$n" || fail "checkpoint list on $n"
    python3 - "$WORK/ckpts.$n" "$WORK/members.$n" "$key" "$WORK/$n/checkpoints/$key" "$steps" <<'PY' ||
import hashlib, json, os, sys
lst, members, key, d, steps = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3], sys.argv[4], int(sys.argv[5])
mine = [c for c in lst if c["id"].startswith(key + "-")]
assert mine, lst
assert all(c["state"] == "ok" and ".tmp" not in c["path"] for c in mine), mine
committed = {c["step"]: c for c in members["state"]["checkpoints"] if c["job"] == key}
assert committed and max(committed) == steps, sorted(committed)
for step, c in committed.items():
    p = os.path.join(d, "step-%010d.safetensors" % step)
    if os.path.exists(p):
        assert hashlib.sha256(open(p, "rb").read()).hexdigest() == c["sha256"], (p, c)
assert os.path.exists(os.path.join(d, "step-%010d.safetensors" % steps))
PY
        fail "$n: checkpoints of $key: $(cat "$WORK/ckpts.$n")"
    "$GM" checkpoint export "$key-$steps" "$WORK/newest.$n.safetensors" --config "$WORK/$n.conf" >/dev/null ||
        fail "export of $key-$steps from $n"
    pyacc=$(python3 tests/integration/eval_checkpoint.py "$WORK/newest.$n.safetensors" "$data" |
        python3 -c "import json,sys; print(json.load(sys.stdin)['accuracy'])") || fail "NumPy eval of $key-$steps"
    python3 -c "import sys; sys.exit(0 if abs($pyacc - $acc) <= 0.05 else 1)" ||
        fail "$key-$steps from $n: NumPy $pyacc% vs reported $acc%"
    pass "$n: the newest committed checkpoint (step $steps) is valid: verified, committed, and exported gives $pyacc% (reported $acc%)"
}

# --- what a test needs, and the job file ------------------------------------------------------
# have_fashion_mnist: the four Fashion-MNIST files are in DATA (GM_DATASET, else the directory
# of Debian's dataset-fashion-mnist); sets DATA either way.
have_fashion_mnist() {
    local f
    DATA=${GM_DATASET:-/usr/share/datasets/fashion-mnist}
    for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
        [ -r "$DATA/$f.gz" ] || return 1
    done
}
# need_fashion_mnist: have_fashion_mnist, else skip (exit 77).
need_fashion_mnist() {
    have_fashion_mnist || { echo "skip: no Fashion-MNIST at $DATA (apt-get install dataset-fashion-mnist)"; exit 77; }
}
# need_numpy: python3 imports NumPy and safetensors (a checkpoint read back), else skip (exit 77).
need_numpy() { python3 -c 'import numpy, safetensors.numpy' 2>/dev/null || { echo "skip: no numpy/safetensors"; exit 77; }; }

# job_ini FILE NAME [SECTION.KEY=VALUE...]: writes the job file FILE: the base job
#     [job]   name = NAME, model = mlp, epochs = 1, seed = 1, threads = 1
#     [data]  kind = idx, dir = $DATA
#     [optim] name = adam, lr = 0.001
# where each SECTION.KEY=VALUE replaces the base's value or adds a line to its section (an
# empty VALUE leaves the key out).  The batch ([optim] batch or global_batch) and the codec
# ([comm] codec) have no base value: each job says them.  seed and threads are the parser's
# defaults, written out.  One "key = value" a line, in section order job, model, data, optim,
# schedule, comm, then any other: a test may grep or sed the file.
job_ini() {
    local file=$1 kv k s head
    local -a keys=(job.name job.model job.epochs job.seed job.threads data.kind data.dir optim.name optim.lr)
    local -a secs=(job model data optim schedule comm)
    local -A val=([job.name]=$2 [job.model]=mlp [job.epochs]=1 [job.seed]=1 [job.threads]=1
        [data.kind]=idx [data.dir]=${DATA:-} [optim.name]=adam [optim.lr]=0.001)
    shift 2
    for kv in "$@"; do
        k=${kv%%=*}
        [[ $kv == *=* && $k =~ ^[a-z_]+\.[a-z_0-9]+$ ]] || fail "job_ini $file: '$kv' is not SECTION.KEY=VALUE"
        [ -n "${val[$k]+set}" ] || keys+=("$k")
        val[$k]=${kv#*=}
        case " ${secs[*]} " in *" ${k%%.*} "*) ;; *) secs+=("${k%%.*}") ;; esac
    done
    for s in "${secs[@]}"; do
        head=
        for k in "${keys[@]}"; do
            [ "${k%%.*}" = "$s" ] && [ -n "${val[$k]}" ] || continue
            [ -n "$head" ] || { echo "[$s]"; head=1; }
            echo "${k#*.} = ${val[$k]}"
        done
    done >"$file" || fail "job_ini: cannot write $file"
}

# --- what the agents say about a job and the chief ----------------------------------------------
# final_hash NAME ID: the params_sha256 of each event=job-final-hash NAME logged for job ID, one
# a line (a rank that ran the job to its end logs one; none if it never got there).
final_hash() {
    grep -F "event=job-final-hash job=$2 " "$WORK/$1.log" | sed -n 's/.*params_sha256=\([0-9a-f]*\).*/\1/p'
}
# chief_of NAME: the chief NAME's `members --json` names, or "" when it knows none.
chief_of() { members_get "$1" 'd["chief"] or ""'; }
# step_of NAME ID: job ID's step on NAME (fails, exit 1, when NAME does not list the job).
step_of() { job_get "$1" "$2" 'j["step"]'; }

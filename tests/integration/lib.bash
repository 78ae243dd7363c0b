# tests/integration/lib.bash - helpers shared by the loopback integration tests.
# Sourced, not run.  Every wait polls a condition with a deadline.

GM=${GM_BIN:-./gradmesh}
case "$GM" in /*) ;; *) GM="$PWD/$GM" ;; esac
[ -x "$GM" ] || { echo "no gradmesh binary at $GM"; exit 77; }

WORK=$(mktemp -d /tmp/gm-it.$$.XXXXXX)
PIDS=()

cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
    if [ "${KEEP:-0}" = 1 ]; then echo "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

fail() { echo "FAIL: $*"; for f in "$WORK"/*.log; do [ -e "$f" ] && { echo "--- $f"; tail -n 40 "$f"; }; done; exit 1; }
pass() { echo "ok: $*"; }

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
    "$GM" init --cluster "$cluster" --node "$first" --config "$WORK/$first.conf" \
        --state "$WORK/$first" --listen 127.0.0.1:"$(free_port)" --multicast off \
        >/dev/null 2>>"$WORK/cli.log" || fail "init $first"
    start_agent "$first"
    for n in "$@"; do
        tok=$("$GM" token create --config "$WORK/$first.conf" 2>>"$WORK/cli.log") || fail "token for $n"
        "$GM" join "$tok" --node "$n" --peer "$(sed -n 's/^listen *= *//p' "$WORK/$first.conf")" \
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

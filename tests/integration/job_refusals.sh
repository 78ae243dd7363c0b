#!/usr/bin/env bash
# tests/integration/job_refusals.sh - bad jobs are refused where `gradmesh
# submit` was typed (issue 10, "Bad input"): one line on stderr, exit 78 for a
# bad job, and the agents keep serving (a good job then runs on all three).
#
#   alpha (init, coordinator) 127.0.0.1:PA <--TLS--> beta (join) 127.0.0.1:PB
#         ^                                              ^
#         +----------------------TLS---------------------+-- gamma (join) 127.0.0.1:PC
#
# The three agents share this machine's filesystem, so beta and gamma each run
# in a mount namespace of their own (unshare --mount, private propagation),
# where bind mounts give them another view of some dataset paths:
#
#   path (copies of Fashion-MNIST)  alpha        beta                      gamma
#   $WORK/ds/good                   the data     the data                  the data
#   $WORK/ds/onebyte                the data     one byte changed in one   the data
#                                                file (a bind-mounted copy)
#   $WORK/ds/partial                the data     the data                  all but one file
#   $WORK/ds/emptied                the data     the data                  an empty directory
#   $WORK/ds/local/fm               the data     the data                  no such directory
#
# Cases, each: the exact stderr line, the exit status, and the job's record:
#   a dataset that differs on one member   78  names beta and the file
#   a member missing one of the files       78  names gamma and the file
#   a member with an empty dataset dir      78  names gamma and the directory
#   a member without the dataset directory  78  names gamma and the directory
#   an unknown model, an unknown codec      78  file:line, before any agent sees it
#   global_batch = 64 over 3 agents         78  the coordinator's one line
#   garbage IDX files, the same everywhere  78  train --local's line, before any member starts
#   batch = 10000000                         78  train --local's line (x3 workers), likewise
#   no agent running                        1   not a bad job: the agent is missing (a
#                                               runtime failure); the line says how to start it
# Then a good job runs on all three (steps advance on every rank), is
# cancelled, the links are still up, every job above has the same state and reason in every
# agent's `jobs` (the history is replicated state), and every agent stops cleanly.
set -uo pipefail
cd "$(dirname "$0")/../.."
. tests/integration/lib.bash

need_fashion_mnist # in DATA: GM_DATASET, else Debian's
[ "$(id -u)" = 0 ] && unshare --mount --propagation private true 2>/dev/null ||
    { echo "skip: needs root and mount namespaces (unshare --mount)"; exit 77; }

# --- datasets ------------------------------------------------------------------------------
DS=$WORK/ds
mkdir -p "$DS" "$WORK/views/empty" "$WORK/views/nothing" "$DS/local"
cp -r "$DATA" "$DS/good"
for d in onebyte partial emptied local/fm; do cp -al "$DS/good" "$DS/$d"; done # hard links: same bytes
# beta's copy of onebyte: hard links, except one real copy with byte 100 flipped
cp -al "$DS/good" "$WORK/views/onebyte-beta"
F=t10k-labels-idx1-ubyte.gz
cp --remove-destination "$DS/good/$F" "$WORK/views/onebyte-beta/$F"
python3 - "$WORK/views/onebyte-beta/$F" <<'EOF' || fail "flip a byte"
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(100); b = f.read(1); f.seek(100); f.write(bytes([b[0] ^ 0x01]))
EOF
[ "$(cmp -l "$DS/good/$F" "$WORK/views/onebyte-beta/$F" | wc -l)" = 1 ] || fail "the copy differs in more than one byte"
# gamma's copy of partial lacks one file
cp -al "$DS/good" "$WORK/views/partial-gamma"
rm "$WORK/views/partial-gamma/train-labels-idx1-ubyte.gz"

# --- three agents ----------------------------------------------------------------------------
# ns_agent_start NAME [SRC DST]...: NAME's agent in a new mount namespace where DST shows SRC.
# unshare and sh exec: $! is the agent's own pid.
ns_agent_start() {
    local n=$1; shift
    unshare --mount --propagation private sh -c '
        while [ "$1" != -- ]; do mount --bind "$1" "$2" || exit 1; shift 2; done
        shift; exec "$@"' sh "$@" -- "$GM" agent --config "$WORK/$n.conf" 2>>"$WORK/$n.log" &
    PIDS+=($!)
    eval "PID_$n=$!"
    wait_for "agent $n" "$GM" status --config "$WORK/$n.conf"
}

PA=$(free_port); PB=$(free_port); PC=$(free_port)
"$GM" init --metrics off --cluster refusals --node alpha --config "$WORK/alpha.conf" --state "$WORK/alpha" \
    --listen 127.0.0.1:$PA --multicast off >/dev/null 2>>"$WORK/cli.log" || fail "init"
start_agent alpha
for n in beta gamma; do
    p=PB; [ $n = gamma ] && p=PC
    tok=$("$GM" token create --config "$WORK/alpha.conf" 2>>"$WORK/cli.log") || fail "token create"
    "$GM" join --metrics off "$tok" --node $n --peer 127.0.0.1:$PA --config "$WORK/$n.conf" --state "$WORK/$n" \
        --listen 127.0.0.1:${!p} --multicast off >/dev/null 2>>"$WORK/cli.log" || fail "join $n"
done
ns_agent_start beta "$WORK/views/onebyte-beta" "$DS/onebyte"
ns_agent_start gamma "$WORK/views/partial-gamma" "$DS/partial" "$WORK/views/empty" "$DS/emptied" \
    "$WORK/views/nothing" "$DS/local"
for n in alpha beta gamma; do wait_for "$n's links" links_up $n 2; done
# the views are what the table says (else the cases below would test nothing)
in_ns() { local p=PID_$1; shift; nsenter --mount="/proc/${!p}/ns/mnt" "$@"; }
in_ns beta cmp -s "$DS/onebyte/$F" "$DS/good/$F" && fail "beta sees the same $F"
cmp -s "$DS/onebyte/$F" "$DS/good/$F" || fail "alpha sees another $F"
[ -z "$(in_ns gamma ls -A "$DS/emptied")" ] || fail "gamma's emptied is not empty"
in_ns gamma test -e "$DS/partial/train-labels-idx1-ubyte.gz" && fail "gamma sees the whole of partial"
in_ns gamma test -e "$DS/local/fm" && fail "gamma sees $DS/local/fm"
in_ns gamma cmp -s "$DS/onebyte/$F" "$DS/good/$F" || fail "gamma sees beta's view"
pass "three agents up; beta and gamma see their own views of the datasets"

# --- jobs ------------------------------------------------------------------------------------
# job FILE DIR [SECTION.KEY=VALUE...]: an MLP job on DIR (job_ini's, with these overrides)
job() { job_ini "$1" refusals data.dir="$2" optim.global_batch=96 comm.codec=fp32 "${@:3}"; }

submitted() { grep -c "event=job-submitted" "$WORK/alpha.log"; }

# refused NAME JOBFILE WANT_RC WANT_LINE [NODE]: submit on NODE (alpha), then exactly one stderr
# line, matching WANT_LINE (* is a wildcard: sha256 prefixes change), and the exit status.
refused() {
    local name=$1 jf=$2 want_rc=$3 want=$4 node=${5:-alpha} rc lines line pat
    pat=${want//[/\\[}; pat=${pat//]/\\]}; pat=${pat//\?/\\?} # only * is a wildcard
    "$GM" submit "$jf" --config "$WORK/$node.conf" >"$WORK/$name.out" 2>"$WORK/$name.err"
    rc=$?
    lines=$(wc -l <"$WORK/$name.err")
    line=$(head -n 1 "$WORK/$name.err")
    echo "  $name: exit $rc: $line"
    [ "$rc" = "$want_rc" ] || fail "$name: exit $rc, want $want_rc"
    [ "$lines" = 1 ] || fail "$name: $lines lines on stderr, want 1: $(cat "$WORK/$name.err")"
    # shellcheck disable=SC2053
    [[ "$line" == $pat ]] || fail "$name: stderr line
  got:  $line
  want: $want"
}

# the refusal is also the job's record on the coordinator
job_refused_as() { # NAME: the id from NAME.out; state refused, error = the line's reason
    local id reason
    id=$(sed -n 's/^job \([0-9a-f]*\) submitted.*/\1/p' "$WORK/$1.out")
    [ -n "$id" ] || fail "$1: no job id on stdout: $(cat "$WORK/$1.out")"
    reason=$(sed -n 's/^gradmesh submit: job refused: //p' "$WORK/$1.err")
    "$GM" jobs --json --config "$WORK/alpha.conf" | python3 -c '
import json, sys
j = [j for j in json.load(sys.stdin)["jobs"] if j["id"] == sys.argv[1]]
assert len(j) == 1 and j[0]["state"] == "refused" and j[0]["error"] == sys.argv[2], j
' "$id" "$reason" || fail "$1: job $id is not recorded as refused with that reason"
}

job "$WORK/onebyte.ini" "$DS/onebyte"
refused onebyte "$WORK/onebyte.ini" 78 \
    "gradmesh submit: job refused: member beta: $DS/onebyte/$F differs (sha256 *..., here *...)"
job_refused_as onebyte
pass "a dataset with one byte changed on beta: refused, naming beta and the file (exit 78)"

job "$WORK/partial.ini" "$DS/partial"
refused partial "$WORK/partial.ini" 78 \
    "gradmesh submit: job refused: member gamma is missing $DS/partial/train-labels-idx1-ubyte.gz"
job_refused_as partial
pass "gamma without one of the dataset's files: refused, naming gamma and the file (exit 78)"

job "$WORK/emptied.ini" "$DS/emptied"
refused emptied "$WORK/emptied.ini" 78 \
    "gradmesh submit: job refused: member gamma: $DS/emptied: no data files"
job_refused_as emptied
pass "gamma with an empty dataset directory: refused, naming gamma and the directory (exit 78)"

job "$WORK/nodir.ini" "$DS/local/fm"
refused nodir "$WORK/nodir.ini" 78 "gradmesh submit: job refused: member gamma: *$DS/local/fm*"
job_refused_as nodir
pass "gamma without the dataset directory: refused, naming gamma and the directory (exit 78)"

n0=$(submitted)
job "$WORK/model.ini" "$DS/good" job.model=alexnet
lineno() { grep -n "^$1 = " "$2" | cut -d: -f1; }
refused model "$WORK/model.ini" 78 "error: $WORK/model.ini:$(lineno model "$WORK/model.ini"): \
unknown model 'alexnet' (known: mlp, lenet5, vgg7, resnet20, resnet18, resnet34, resnet50, \
mobilenet_v2, vgg11_bn, vgg16, vgg16_bn)"
job "$WORK/codec.ini" "$DS/good" comm.codec=zstd
refused codec "$WORK/codec.ini" 78 "error: $WORK/codec.ini:$(lineno codec "$WORK/codec.ini"): \
unknown codec 'zstd' (known: auto, fp32, fp16, powersgd, diloco, diloco8)"
[ "$(submitted)" = "$n0" ] || fail "a job that does not parse reached the coordinator"
pass "unknown model and codec: file:line on the command line, no agent involved (exit 78)"

job "$WORK/batch.ini" "$DS/good" optim.global_batch=64
refused batch "$WORK/batch.ini" 78 \
    "gradmesh submit: $WORK/batch.ini: [optim] global_batch = 64 does not divide by 3 workers"
[ "$(submitted)" = "$n0" ] || fail "a batch that does not divide started a dataset check"
pass "global_batch = 64 over 3 agents: refused by the coordinator at submit (exit 78)"

# The trainer's own checks (issue 23): what `train --local` refuses, submit refuses before any
# member starts, with the line train --local prints.  The same garbage IDX files on every
# member (they hash alike), and a batch larger than the dataset.
local_line() { # JOBFILE: the one error line `train --local` prints for it
    "$GM" train --local "$1" --no-tensorboard --no-progress --out "$WORK/local.safetensors" \
        2>&1 >/dev/null | sed -n 's/^error: //p'
}
groups() { grep -c "event=job-group " "$WORK/alpha.log"; }
mkdir "$DS/garbage"
python3 - "$DS/garbage" <<'EOF2' || fail "garbage files"
import os, random, sys
r = random.Random(23)
for f in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
          "t10k-labels-idx1-ubyte"):
    open(os.path.join(sys.argv[1], f), "wb").write(bytes(r.randrange(256) for _ in range(4096)))
EOF2
g0=$(groups)
job "$WORK/garbage.ini" "$DS/garbage"
want=$(local_line "$WORK/garbage.ini")
[[ $want == "$DS/garbage/"*": not an IDX file (magic 0x"*")" ]] || fail "train --local on garbage: '$want'"
refused garbage "$WORK/garbage.ini" 78 "gradmesh submit: job refused: $want"
job_refused_as garbage
job "$WORK/huge.ini" "$DS/good" optim.global_batch= optim.batch=10000000
want=$(local_line "$WORK/huge.ini")
[ "$want" = "$DS/good: 60000 training samples, fewer than one global batch of 10000000" ] ||
    fail "train --local with batch = 10000000: '$want'"
# the same line; over the 3 workers the global batch is 3 x 10000000
refused huge "$WORK/huge.ini" 78 "gradmesh submit: job refused: ${want/10000000/30000000}"
job_refused_as huge
[ "$(groups)" = "$g0" ] || fail "a member started a job that train --local refuses"
pass "garbage IDX files on every member, batch = 10000000: refused at submit with train --local's line (exit 78)"

# no agent: a node whose agent was never started (no socket), and one killed with -9 (its
# socket file is left behind, nobody answers).  The job is fine; the agent is missing: exit 1.
PD=$(free_port)
"$GM" init --metrics off --cluster elsewhere --node delta --config "$WORK/delta.conf" --state "$WORK/delta" \
    --listen 127.0.0.1:$PD --multicast off >/dev/null 2>>"$WORK/cli.log" || fail "init delta"
job "$WORK/good.ini" "$DS/good" job.epochs=50 # long: it is cancelled, never finishes first
CTL=$(sed -n 's/^control *= *//p' "$WORK/delta.conf")
[ -n "$CTL" ] || CTL="$WORK/delta/control.sock"
refused noagent "$WORK/good.ini" 1 "gradmesh submit: no agent is running for $WORK/delta.conf \
(nothing answers at $CTL: No such file or directory); start it with: gradmesh agent --config \
$WORK/delta.conf" delta
"$GM" agent --config "$WORK/delta.conf" 2>>"$WORK/delta.log" &
PID_delta=$!
wait_for "agent delta" "$GM" status --config "$WORK/delta.conf"
kill -9 $PID_delta; wait $PID_delta 2>/dev/null
[ -S "$CTL" ] || fail "the killed agent left no socket file (the case below would be the one above)"
refused deadagent "$WORK/good.ini" 1 "gradmesh submit: no agent is running for $WORK/delta.conf \
(nothing answers at $CTL: Connection refused); start it with: gradmesh agent --config \
$WORK/delta.conf" delta
pass "no agent running (never started, or killed): one line saying how to start it (exit 1)"

# --- the agents keep serving: a good job runs on all three ------------------------------------
for n in alpha beta gamma; do links_up $n 2 || fail "$n lost a link during the refusals"; done
"$GM" submit "$WORK/good.ini" --config "$WORK/alpha.conf" >"$WORK/good.out" 2>"$WORK/good.err" ||
    fail "good job: exit $? $(cat "$WORK/good.err")"
grep -q "^job [0-9a-f]* running on 3 members (coordinator alpha)$" "$WORK/good.out" ||
    fail "good job: $(cat "$WORK/good.out")"
ID=$(sed -n 's/^job \([0-9a-f]*\) submitted.*/\1/p' "$WORK/good.out")
# stepping on every rank: each agent's `jobs` shows the job running with step >= 2, world 3
stepping() {
    "$GM" jobs --json --config "$WORK/$1.conf" | python3 -c '
import json, sys
j = [j for j in json.load(sys.stdin)["jobs"] if j["id"] == sys.argv[1]]
sys.exit(0 if j and j[0]["state"] == "running" and j[0]["world"] == 3 and j[0]["step"] >= 2 else 1)
' "$ID"
}
for i in $(seq 1200); do stepping alpha && stepping beta && stepping gamma && break; sleep 0.1; done
for n in alpha beta gamma; do stepping $n || fail "job $ID is not stepping on $n"; done
"$GM" cancel "$ID" --config "$WORK/alpha.conf" >/dev/null 2>>"$WORK/cli.log" || fail "cancel"
ended() {
    "$GM" jobs --json --config "$WORK/alpha.conf" | python3 -c '
import json, sys
j = [j for j in json.load(sys.stdin)["jobs"] if j["id"] == sys.argv[1]]
sys.exit(0 if j and j[0]["state"] == "cancelled" else 1)' "$ID"
}
for i in $(seq 600); do ended && break; sleep 0.1; done
ended || fail "job $ID did not end after cancel"
for n in alpha beta gamma; do links_up $n 2 || fail "$n lost a link"; done
pass "after the refusals a good job ran on all three agents (cancelled); links still up"
# the coordinator (the chief) recorded the job's states in the replicated state: every agent
# holds the last one, with the chief's term
recorded() {
    "$GM" members --json --config "$WORK/$1.conf" | python3 -c '
import json, sys
d = json.load(sys.stdin)
j = [j for j in d["state"]["jobs"] if j["job"] == sys.argv[1]]
sys.exit(0 if j and j[0]["state"] == "cancelled" and j[0]["term"] == d["term"] >= 1 else 1)' "$ID"
}
for n in alpha beta gamma; do wait_for "$n: job $ID cancelled in the replicated state" recorded $n; done
pass "job $ID's end is in the replicated state on all three agents"
# The job history is the same on every node (issue 23): each job above, refused or cancelled,
# with the same state and reason in every agent's `jobs --json`, though beta and gamma ran
# only the last one (they were offered the others, or not even that).
IDS=$(sed -n 's/^job \([0-9a-f]*\) submitted.*/\1/p' "$WORK"/*.out | sort -u)
[ "$(wc -w <<<"$IDS")" -ge 7 ] || fail "fewer job ids than submits reached the coordinator: $IDS"
history_of() {
    # shellcheck disable=SC2086
    "$GM" jobs --json --config "$WORK/$1.conf" | python3 -c '
import json, sys
ids = set(sys.argv[1:])
h = sorted((j["id"], j["state"], j["error"]) for j in json.load(sys.stdin)["jobs"] if j["id"] in ids)
assert len(h) == len(ids), ("missing", ids - {i for i, _, _ in h})
assert all(s in ("refused", "cancelled") and e for _, s, e in h), h
print(json.dumps(h))' $IDS
}
history_of alpha >"$WORK/history.alpha" || fail "alpha's history: $(cat "$WORK/history.alpha")"
for n in beta gamma; do
    history_of $n >"$WORK/history.$n" || fail "$n's history lacks jobs: $(history_of $n 2>&1 | tail -n 1)"
    cmp -s "$WORK/history.alpha" "$WORK/history.$n" ||
        fail "$n's history differs from alpha's: $(diff "$WORK/history.alpha" "$WORK/history.$n")"
done
pass "the job history (state and reason of all $(wc -w <<<"$IDS") jobs) is the same on all three agents"
stop_agents

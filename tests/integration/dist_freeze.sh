#!/usr/bin/env bash
# tests/integration/dist_freeze.sh - fine-tuning over a link sends only what trains (issue 20,
# "Done when" 3): two agents train LeNet-5 with `[model] freeze = backbone`, so only the head
# (fc3: 84 x 10 + 10 = 850 parameters) trains, and every step each rank sends exactly the
# head's bytes times the codec's element size: fp32 3,400 bytes, fp16 1,700, as the rank's
# own link accounting reports them (gradmesh_job_bytes_per_step: the collective payload this
# rank sent for the last step, fp32 ring over 2 ranks = 2(W-1)/W x the gradient = all of it).
# The same job without freeze sends all 61,706 parameters (246,824 bytes): the contrast shows
# the measure sees the whole model when it trains.  At the group's start the ranks compare
# their frozen parameters' hashes and, equal, leave them out of rank 0's state broadcast
# (event=resync-frozen same=1 on both).
#
#   alpha (rank 0, coordinator) --TLS, 127.0.0.1-- beta (rank 1)
#   each with its metrics on its own loopback port, scraped every 50 ms while the job runs
#
# A step that also checks the replicas' parameter hashes (every GM_GRADSYNC_HASH_EVERY steps
# and the last) adds the hash exchange to that step's bytes; those steps are reported and
# allowed (at most a few per run), every other step must be exact.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. tests/integration/lib.bash
need_fashion_mnist

MA=$(free_port)
MB=$(free_port)
make_cluster lab alpha beta
# [metrics] listen = 127.0.0.1:PORT in each agent's config (its own section)
set_metrics() {
    awk -v port="$2" '/^\[/ { sec = $0 } sec == "[metrics]" && /^listen *=/ { $0 = "listen = 127.0.0.1:" port } { print }' \
        "$WORK/$1.conf" >"$WORK/$1.conf.new" && mv "$WORK/$1.conf.new" "$WORK/$1.conf"
    grep -q "^listen = 127.0.0.1:$2\$" "$WORK/$1.conf" || fail "no [metrics] listen in $1.conf"
}
stop_agents
set_metrics alpha "$MA"
set_metrics beta "$MB"
start_agent alpha
start_agent beta
wait_for "alpha and beta linked" links_up alpha 1

# run NAME CODEC FREEZE: submits the job, scrapes both ranks' bytes per step until it is done,
# and prints "rank value count" lines (one per distinct value seen) into $WORK/NAME.bytes
run() {
    local name=$1 codec=$2 freeze=$3 id
    job_ini "$WORK/$name.ini" "$name" job.model=lenet5 model.freeze="$freeze" \
        optim.global_batch=128 comm.codec="$codec" job.log_every=20
    "$GM" submit "$WORK/$name.ini" --config "$WORK/alpha.conf" >"$WORK/$name.submit" 2>&1 ||
        fail "submit $name: $(cat "$WORK/$name.submit")"
    id=$(sed -n 's/^job \([0-9a-f]*\) submitted.*/\1/p' "$WORK/$name.submit")
    [ -n "$id" ] || fail "no job id for $name"
    python3 - "$MA" "$MB" "$GM" "$WORK/alpha.conf" "$id" "$name" >"$WORK/$name.bytes" <<'PY' ||
import json, subprocess, sys, time, urllib.request
ma, mb, gm, conf, jid, jname = sys.argv[1:]
seen = {"alpha": {}, "beta": {}}
deadline = time.time() + 300
while time.time() < deadline:
    for rank, port in (("alpha", ma), ("beta", mb)):
        try:
            text = urllib.request.urlopen("http://127.0.0.1:%s/metrics" % port, timeout=2).read().decode()
        except OSError:
            continue
        for line in text.splitlines():
            labels = line.split("}")[0]
            if line.startswith("gradmesh_job_bytes_per_step{") and (
                    '"%s"' % jid in labels or '"%s"' % jname in labels):
                v = int(float(line.rsplit(" ", 1)[1]))
                seen[rank][v] = seen[rank].get(v, 0) + 1
    jobs = json.loads(subprocess.run([gm, "jobs", "--json", "--config", conf],
                                     capture_output=True, text=True).stdout)["jobs"]
    if any(j["id"] == jid and j["state"] not in ("checking", "running") for j in jobs):
        j = [j for j in jobs if j["id"] == jid][0]
        if j["state"] != "done":
            sys.exit("job %s ended %s" % (jid, j["state"]))
        break
    time.sleep(0.05)
else:
    sys.exit("job %s did not end in 300 s" % jid)
for rank in seen:
    for v, n in sorted(seen[rank].items(), key=lambda kv: -kv[1]):
        print(rank, v, n)
PY
        fail "job $name: $(tail -n 3 "$WORK/$name.bytes")"
    echo "$name ($codec, freeze='$freeze'): $(tr '\n' ';' <"$WORK/$name.bytes")"
}

# check NAME WANT: on each rank the value seen most is WANT exactly, and any other value is a
# hash-check step (WANT plus less than 1 KiB) seen at most a few times
check() {
    local name=$1 want=$2 rank top
    for rank in alpha beta; do
        top=$(awk -v r=$rank '$1 == r { print $2; exit }' "$WORK/$name.bytes")
        [ "$top" = "$want" ] || fail "$name: $rank sent $top bytes a step, want $want"
        awk -v r=$rank -v w="$want" '$1 == r && $2 != w && ($2 < w || $2 > w + 1024 || $3 > 20) { bad = 1 }
            END { exit bad }' "$WORK/$name.bytes" ||
            fail "$name: $rank reported other step sizes: $(grep "^$rank" "$WORK/$name.bytes" | tr '\n' ';')"
    done
    pass "$name: each rank sent $want bytes a step"
}

run frozen_fp32 fp32 backbone
check frozen_fp32 3400
grep -q "trainable=850 frozen=60856" "$WORK/alpha.log" || fail "alpha's start line: not 850 trainable"
# both ranks made the same frozen backbone (the same seed): the group's start leaves it out of
# rank 0's broadcast, so the link carries the head and its optimizer state alone
for n in alpha beta; do
    grep -q "event=resync-frozen .*frozen=60856 same=1" "$WORK/$n.log" ||
        fail "$n: the frozen parameters were not found equal at the resync"
done
pass "the resync leaves the 60,856 frozen parameters out: every rank holds the same ones"
run frozen_fp16 fp16 backbone
check frozen_fp16 1700
run whole_fp32 fp32 ""
check whole_fp32 246824
stop_agents
pass "freeze = backbone: the wire carries the head only (850 x 4 and x 2 bytes a step; 61,706 x 4 without)"

#!/usr/bin/env bash
# tests/integration/prometheus.sh - Debian's real prometheus scrapes two linked agents on
# loopback, and its HTTP API returns the per-link series with plausible values: the link
# up, RTT between 1 us and 1 s, bytes sent and received > 0, a measured throughput, the
# class "lan", TCP retransmits present.  Meanwhile a hostile client holds connections open
# on alpha's metrics port and sends garbage: the agent keeps answering its control socket
# and prometheus keeps scraping.
#
#   alpha 127.0.0.1:PA  <--TLS-->  beta 127.0.0.1:PB
#   alpha metrics 127.0.0.1:MA, beta metrics 127.0.0.1:MB  <--  prometheus 127.0.0.1:PP
set -uo pipefail
cd "$(dirname "$0")/../.."
. tests/integration/lib.bash

command -v prometheus >/dev/null || { echo "no prometheus (apt-get install prometheus)"; exit 77; }

PA=$(free_port); PB=$(free_port); MA=$(free_port); MB=$(free_port); PP=$(free_port)
# init writes the default endpoint: metrics are on unless said otherwise
"$GM" init --cluster lab --config "$WORK/default.conf" --state "$WORK/default" \
    --listen 127.0.0.1:$PA --node d --multicast off >/dev/null 2>>"$WORK/cli.log" || fail "init default"
grep -qx "listen = 127.0.0.1:9464" "$WORK/default.conf" || fail "init does not write the default metrics endpoint: $(cat "$WORK/default.conf")"
"$GM" init --cluster lab --config "$WORK/alpha.conf" --state "$WORK/alpha" \
    --listen 127.0.0.1:$PA --node alpha --multicast off --metrics 127.0.0.1:$MA >/dev/null 2>>"$WORK/cli.log" || fail "init"
grep -qx "listen = 127.0.0.1:$MA" "$WORK/alpha.conf" || fail "init --metrics not written"
start_agent alpha
T=$("$GM" token create --config "$WORK/alpha.conf" 2>>"$WORK/cli.log") || fail "token create"
"$GM" join "$T" --peer 127.0.0.1:$PA --config "$WORK/beta.conf" --state "$WORK/beta" \
    --listen 127.0.0.1:$PB --node beta --multicast off --metrics 127.0.0.1:$MB >/dev/null 2>>"$WORK/cli.log" || fail "join"
start_agent beta
wait_for "alpha and beta linked" links_up alpha 1
log_has alpha "event=metrics-listening address=127.0.0.1:$MA"

cat >"$WORK/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  scrape_timeout: 900ms
scrape_configs:
  - job_name: gradmesh
    static_configs:
      - targets: ['127.0.0.1:$MA', '127.0.0.1:$MB']
YML
promtool check config "$WORK/prometheus.yml" >/dev/null 2>&1 || fail "promtool rejects the config"
prometheus --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/tsdb" \
    --web.listen-address=127.0.0.1:$PP >"$WORK/prometheus.log" 2>&1 &
PROM=$!
PIDS+=($PROM)
api="http://127.0.0.1:$PP/api/v1"
wait_for "prometheus ready" curl -fsS "http://127.0.0.1:$PP/-/ready"

# promql QUERY -> the API's JSON result list
promql() { curl -fsS --get "$api/query" --data-urlencode "query=$1"; }
# series_ok QUERY PYEXPR: every result has a value v (float) and labels l for which PYEXPR holds,
# and there is at least one result per agent (instance)
series_ok() {
    promql "$1" | python3 -c '
import json, sys
d = json.load(sys.stdin)
r = d["data"]["result"]
inst = {x["metric"]["instance"] for x in r}
ok = len(inst) == 2 and all((lambda l, v: '"$2"')(x["metric"], float(x["value"][1])) for x in r)
sys.exit(0 if ok else 1)'
}

wait_for "both targets up" series_ok 'up{job="gradmesh"}' 'v == 1'
# the measurement runs on connect: wait for the series that need it
deadline=$((SECONDS + 20))
until series_ok 'gradmesh_link_throughput_bits_per_second{direction="out"}' 'v > 1e6' &&
      series_ok 'gradmesh_link_rtt_seconds' '1e-6 < v < 1'; do
    [ $SECONDS -lt $deadline ] || { promql 'gradmesh_link_rtt_seconds'; fail "no RTT/throughput series"; }
    sleep 0.2
done
series_ok 'gradmesh_link_up' 'v == 1 and l["class"] == "lan" and l["peer"] in ("alpha", "beta")' ||
    fail "gradmesh_link_up: $(promql gradmesh_link_up)"
series_ok 'gradmesh_link_sent_bytes_total' 'v > 1000' || fail "sent bytes: $(promql gradmesh_link_sent_bytes_total)"
series_ok 'gradmesh_link_received_bytes_total' 'v > 1000' || fail "received bytes"
series_ok 'gradmesh_link_tcp_retransmits_total' 'v >= 0' || fail "retransmits"
series_ok 'gradmesh_link_info' 'v == 1 and l["codec"] == "none" and l["address"].startswith("127.0.0.1:")' ||
    fail "link info: $(promql gradmesh_link_info)"
series_ok 'gradmesh_members_up' 'v == 1' || fail "members up"
series_ok 'gradmesh_up' 'l["cluster"] == "lab" and l["node"] in ("alpha", "beta")' || fail "gradmesh_up"
wait_for "gradmesh_term on both agents" series_ok 'gradmesh_term' 'v >= 1'
# which build each node runs: the labels `gradmesh version` prints
read -r ver commit <<<"$("$GM" version --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["version"], d["commit"])')"
series_ok 'gradmesh_build_info' 'v == 1 and l["version"] == "'"$ver"'" and l["commit"] == "'"$commit"'" and l["cuda"] in ("0", "1") and int(l["proto"]) >= 2' ||
    fail "build info: $(promql gradmesh_build_info)"
promql 'gradmesh_joins_total{instance="127.0.0.1:'$MA'",result="accepted"}' |
    python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; sys.exit(0 if r and float(r[0]["value"][1])==1 else 1)' ||
    fail "alpha's accepted joins"
rtt=$(promql 'gradmesh_link_rtt_seconds{peer="beta"}' | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"]["result"][0]["value"][1])')
pass "prometheus has per-link series for both agents (alpha->beta RTT ${rtt} s)"
# status --json prints numbers as people read them: no 83.879999999999995
"$GM" status --json --config "$WORK/alpha.conf" >"$WORK/status.json" || fail "status --json"
python3 - "$WORK/status.json" <<'PY' || fail "status --json: $(cat "$WORK/status.json")"
import json, sys
reals = []
d = json.load(open(sys.argv[1]), parse_float=lambda s: reals.append(s) or float(s))
assert d["members"][0]["rtt_ms"] > 0 and reals, d
long = [r for r in reals if len(r.lstrip("-0.").replace(".", "").split("e")[0]) > 6]
assert not long, "reals with more than 6 significant digits: %s" % long
PY

# --- a hostile scraper: held connections and garbage on alpha's metrics port -------------
python3 - "$MA" >"$WORK/hostile.log" 2>&1 <<'PY' &
import socket, sys, time
port = int(sys.argv[1]); held = []
for i in range(40):
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=1)
        s.send(b"GET /metr" if i % 2 else b"\x00\xff garbage \r\n\r\n")
        held.append(s)
    except OSError:
        pass
time.sleep(3)   # hold them for longer than a scrape interval
for s in held:
    s.close()
print("held", len(held))
PY
HOSTILE=$!
for i in 1 2 3 4 5; do
    t0=$(date +%s%N)
    "$GM" status --config "$WORK/alpha.conf" >/dev/null || fail "status while metrics port is flooded"
    dt=$(( ($(date +%s%N) - t0) / 1000000 ))
    [ $dt -lt 1000 ] || fail "status took $dt ms while metrics port is flooded"
done
wait $HOSTILE
# scraping recovers: a fresh sample after the flood
t_flood=$(date +%s)
wait_for "fresh scrape of alpha after the flood" python3 -c '
import json, sys, urllib.request, urllib.parse
q = urllib.parse.urlencode({"query": "timestamp(gradmesh_members_up{instance=\"127.0.0.1:'$MA'\"})"})
r = json.load(urllib.request.urlopen("'$api'/query?" + q))["data"]["result"]
sys.exit(0 if r and float(r[0]["value"][1]) > '$t_flood' else 1)'
pass "held connections and garbage: status answered in < 1 s, scraping recovered"

# --- a distributed job's series, published by the trainer threads (and, on the coordinator, each
# rank's share of the global batch) -------------------------------------------------------
if have_fashion_mnist; then
    job_ini "$WORK/job.ini" prom-mlp job.epochs=8 model.hidden=32 optim.name=sgd optim.lr=0.05 \
        optim.global_batch=128 comm.codec=fp32
    "$GM" submit "$WORK/job.ini" --follow --config "$WORK/alpha.conf" >"$WORK/submit.log" 2>&1 &
    SUBMIT=$!
    # both agents' own /metrics show the job's step split, speed and step while it runs
    python3 - "$MA" "$MB" <<'PY' || fail "job series missing from /metrics during the run"
import sys, time, urllib.request
want = {"compute", "collective", "optimizer"}
todo, end = set(sys.argv[1:]), time.time() + 30
shares = {}  # the coordinator's: each rank's part of the global batch, {rank: samples}
while (todo or not shares) and time.time() < end:
    # a port stays scraped until its own series and, on the coordinator, the shares are seen:
    # the shares may appear a scrape after the step series
    for port in sorted(todo if shares else sys.argv[1:]):
        try:
            text = urllib.request.urlopen("http://127.0.0.1:%s/metrics" % port, timeout=2).read().decode()
        except OSError:
            continue
        seen, sps, step = set(), 0.0, 0
        for line in text.splitlines():
            # job_id and job_name (a "job" label would become exported_job in Prometheus)
            if line.startswith('gradmesh_job_step_seconds{job_id="') and 'job_name="prom-mlp",phase="' in line:
                seen.add(line.split('phase="')[1].split('"')[0])
            elif line.startswith('gradmesh_job_samples_per_second{job_id="') and 'job_name="prom-mlp"}' in line:
                sps = float(line.split()[-1])
            elif line.startswith('gradmesh_job_step{job_id="') and 'job_name="prom-mlp"}' in line:
                step = int(line.split()[-1])
            elif line.startswith('gradmesh_job_rank_share_samples{job_id="') and 'job_name="prom-mlp",rank="' in line:
                rank = int(line.split('rank="')[1].split('"')[0])
                node = line.split('node="')[1].split('"')[0]
                if node in ("alpha", "beta"):
                    shares[rank] = int(line.split()[-1])
        if shares and (len(shares) != 2 or sum(shares.values()) != 128):
            shares = {}  # a group forming: read it again
        if port in todo and seen == want and sps > 0 and step > 0:
            print("ok: :%s step %d, %.0f samples/s" % (port, step, sps))
            todo.discard(port)
    time.sleep(0.02)
if shares:
    print("ok: the coordinator's ranks' shares %s of 128" % ":".join(str(shares[r]) for r in sorted(shares)))
else:
    print("no gradmesh_job_rank_share_samples for both ranks summing to 128")
sys.exit(1 if todo or not shares else 0)
PY
    wait "$SUBMIT" || { cat "$WORK/submit.log"; fail "submit --follow exit $?"; }
    curl -fsS "http://127.0.0.1:$MA/metrics" | grep -q '^gradmesh_job_step{' &&
        fail "job series still exported after the job ended"
    # the final values stay, and Prometheus scrapes them labelled job_id and job_name, with its
    # own job label ("gradmesh", the scrape job) untouched
    jid=$("$GM" jobs --json --config "$WORK/alpha.conf" | python3 -c 'import json,sys; print(json.load(sys.stdin)["jobs"][0]["id"])')
    acc=$(job_get alpha "$jid" 'j["summary"]["test_accuracy"]') || fail "no accuracy in jobs --json"
    wait_for "the finished job's accuracy in prometheus" python3 -c '
import json, sys, urllib.request, urllib.parse
q = urllib.parse.urlencode({"query": "gradmesh_job_last_accuracy_percent"})
r = json.load(urllib.request.urlopen("'$api'/query?" + q))["data"]["result"]
ok = len(r) == 1 and r[0]["metric"]["job"] == "gradmesh" and r[0]["metric"]["job_id"] == sys.argv[1] \
    and r[0]["metric"]["job_name"] == "prom-mlp" and "exported_job" not in r[0]["metric"] \
    and abs(float(r[0]["value"][1]) - float(sys.argv[2])) < 0.01
sys.exit(0 if ok else 1)' "$jid" "$acc"
    # both agents' series: each is scraped on its own schedule, so poll for the second
    for i in $(seq 200); do
        series_ok 'gradmesh_job_last_steps{job_name="prom-mlp"}' 'v == 8 * 468 and l["job_id"] == "'"$jid"'"' &&
            break
        sleep 0.05
    done
    series_ok 'gradmesh_job_last_steps{job_name="prom-mlp"}' 'v == 8 * 468 and l["job_id"] == "'"$jid"'"' ||
        fail "last steps: $(promql gradmesh_job_last_steps)"
    series_ok 'gradmesh_job_last_wall_seconds{job_name="prom-mlp"}' 'v > 0' || fail "last wall time"
    promql '{__name__=~"gradmesh_job_.*",exported_job!=""}' | python3 -c 'import json,sys; sys.exit(1 if json.load(sys.stdin)["data"]["result"] else 0)' ||
        fail "a job series arrived with exported_job"
    pass "the finished job's accuracy ($acc%), steps and wall time stay scraped, labelled job_id $jid and job_name"
    # each agent wrote the job's TensorBoard events beside its weights
    for n in alpha beta; do
        ev=$(ls "$WORK/$n"/jobs/*/tensorboard/events.out.tfevents.* 2>/dev/null | head -1)
        [ -n "$ev" ] || fail "$n wrote no TensorBoard events for the job"
        if python3 -c 'import tensorboard' 2>/dev/null; then
            python3 - "$(dirname "$ev")" "$n" <<'PY' || fail "$n's job events"
import sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
ea = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0}); ea.Reload()
tags = set(ea.Tags()["scalars"])
steps = [e.step for e in ea.Scalars("step_time/collective_s")]
assert steps == list(range(1, 8 * 468 + 1)), (steps[:3], len(steps))
assert sum(e.value for e in ea.Scalars("step_time/collective_s")) > 0
# the run's all-reduce payload: 8 epochs of a 2-rank fp32 ring sent something
assert ea.Scalars("summary/bytes_sent")[-1].value > 8 * 468 * 1000, ea.Scalars("summary/bytes_sent")
if sys.argv[2] == "alpha":  # rank 0 evaluates and holds the summary
    assert len(ea.Scalars("test/accuracy_percent")) == 8, tags
    assert "summary/test_accuracy_percent" in tags, tags
PY
        fi
    done
    pass "a running job's step time split, samples/s and step are in both agents' /metrics"
else
    echo "no $DATA: job series not checked"
fi

kill "$PROM"; wait "$PROM"
PIDS=("$PID_alpha" "$PID_beta")
stop_agents

#!/usr/bin/env bash
# tests/integration/disk_full.sh - a member whose disk is full (issue 23, "Disk full"): the
# checkpoints that do not fit are refused before a job starts, and a disk that fills during a
# job costs that member its replicas, not its place in the job.
#
#   alpha (init; coordinator, rank 0) --TLS-- beta (rank 1)
#   both on 127.0.0.1; beta's STATE/checkpoints is a tmpfs of its own (unmounted on exit)
#
# The job: an MLP (hidden 64) on Fashion-MNIST, Adam, global_batch 192, 1 epoch = 312 steps,
# checkpoint_every = 20, checkpoint_keep = 2: each checkpoint about 0.6 MB, so 3 of them (the
# 2 kept and the one being written) need about 1.8 MB.
#  1. the tmpfs is 1 MiB: `submit` refuses the job, naming beta (exit 78, one line); `train
#     --local` with its checkpoint_dir there refuses before its first step (exit 78, one line);
#  2. the tmpfs grown to 16 MiB: the job starts; once beta holds a replica, the tmpfs is filled
#     to the last byte; the next replicas fail on beta with ENOSPC, and
#       - beta says so: event=disk-full (ENOSPC named), `status --json` disk.full with the
#         error, `status` a "disk full:" line, the metric gradmesh_disk_full 1 and
#         gradmesh_disk_full_total >= 1;
#       - the link stays up: no protocol error on either side, beta is never dropped (the job
#         keeps its first group: one event=job-group on alpha);
#       - alpha knows beta holds none: `checkpoint list` (and --json's not_held) names beta
#         with "No space left on device", and beta is no holder of the checkpoint it refused;
#       - the job completes on both, with the same final parameters; then the newest
#         checkpoint is the final one, refused by beta, held by alpha alone;
#  3. alpha's own checkpoint directory on a 16 MiB tmpfs, filled once alpha wrote a checkpoint
#     of a second job: alpha says so (event=disk-full what=checkpoint, status), and the job
#     goes on to its end.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. tests/integration/lib.bash

need_fashion_mnist
[ "$(id -u)" = 0 ] && command -v mountpoint >/dev/null ||
    { echo "skip: needs root (a tmpfs mount) and mountpoint(1)"; exit 77; }
JOB_TIMEOUT=${JOB_TIMEOUT:-600}
MNT=$WORK/beta/checkpoints
MNTA=$WORK/alpha/checkpoints

# The agents go first (they hold files in the tmpfs), then the mount, then lib.bash's cleanup.
df_cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    PIDS=()
    mountpoint -q "$MNT" 2>/dev/null && umount "$MNT"
    mountpoint -q "$MNTA" 2>/dev/null && umount "$MNTA"
    cleanup
}
trap df_cleanup EXIT

make_cluster disk alpha beta
MB=$(free_port)
sed -i "/^\[metrics\]/,/^\[/s/^listen = off$/listen = 127.0.0.1:$MB/" "$WORK/beta.conf"
grep -q "^listen = 127.0.0.1:$MB$" "$WORK/beta.conf" || fail "beta's metrics endpoint not set"
mkdir -p "$MNT"
mount -t tmpfs -o size=1m gm-disk-full "$MNT" || { echo "skip: cannot mount a tmpfs"; exit 77; }
start_agent beta
for n in alpha beta; do wait_for "$n's links" links_up $n 1; done
pass "two agents linked; beta's checkpoint directory is a 1 MiB tmpfs"

job_ini "$WORK/job.ini" full job.checkpoint_every=20 job.checkpoint_keep=2 model.hidden=64 \
    optim.lr=0.002 optim.global_batch=192 comm.codec=fp32

# --- 1. refused before anything starts --------------------------------------------------------
"$GM" submit "$WORK/job.ini" --config "$WORK/alpha.conf" >"$WORK/small.out" 2>"$WORK/small.err"
rc=$?
echo "  submit: exit $rc: $(cat "$WORK/small.err")"
[ $rc = 78 ] || fail "submit with beta's disk too small: exit $rc, want 78"
[ "$(wc -l <"$WORK/small.err")" = 1 ] || fail "submit: not one line: $(cat "$WORK/small.err")"
grep -q "^gradmesh submit: job refused: member beta: no room for the job's checkpoints: 2 kept and the one being received need about [0-9.]* MB ([0-9.]* MB each), its checkpoint directory has [0-9.]* MB; " "$WORK/small.err" ||
    fail "submit's line does not name beta and the room: $(cat "$WORK/small.err")"
pass "a job whose checkpoints do not fit beta's disk: refused at submit, naming beta (exit 78)"

job_ini "$WORK/local.ini" local job.checkpoint_every=20 job.checkpoint_keep=2 model.hidden=64 \
    optim.lr=0.002 optim.global_batch=192 job.checkpoint_dir="$MNT/local"
(cd "$WORK" && "$GM" train --local "$WORK/local.ini" --no-tensorboard --no-progress \
    --out "$WORK/local.safetensors") >"$WORK/local.out" 2>"$WORK/local.err"
rc=$?
err_line=$(grep '^error: ' "$WORK/local.err")
echo "  train --local: exit $rc: $err_line"
[ $rc = 78 ] || fail "train --local with no room for its checkpoints: exit $rc, want 78"
[ "$(grep -c '^error: ' "$WORK/local.err")" = 1 ] || fail "train --local: not one error line: $(cat "$WORK/local.err")"
[[ $err_line == "error: $MNT/local: no room for the job's checkpoints: 2 kept and the one being written need about "* ]] ||
    fail "train --local's line: $err_line"
grep -q "event=step\|event=epoch" "$WORK/local.err" && fail "train --local took a step first"
[ -e "$WORK/local.safetensors" ] && fail "train --local wrote weights"
pass "train --local with no room for its checkpoints: refused before its first step (exit 78)"

# --- 2. the disk fills during the job -----------------------------------------------------------
mount -o remount,size=16m "$MNT" || fail "remount the tmpfs at 16 MiB"
timeout "$JOB_TIMEOUT" "$GM" submit "$WORK/job.ini" --follow --config "$WORK/alpha.conf" \
    >"$WORK/job.out" 2>"$WORK/job.err" &
SUBMIT=$!
for i in $(seq 1200); do grep -q "event=checkpoint-received" "$WORK/beta.log" && break; sleep 0.1; done
grep -q "event=checkpoint-received" "$WORK/beta.log" || fail "beta received no checkpoint"
# until ENOSPC: the disk is full (again, should beta prune an old checkpoint meanwhile)
for i in $(seq 10); do
    dd if=/dev/zero of="$MNT/filler.$i" bs=64k 2>/dev/null
    [ "$(df --output=avail -B1 "$MNT" | tail -n 1 | tr -d ' ')" = 0 ] && break
done
[ "$(df --output=avail -B1 "$MNT" | tail -n 1 | tr -d ' ')" = 0 ] || fail "the tmpfs is not full"
pass "beta holds a replica; its disk is now full"

for i in $(seq 1200); do grep -q "event=disk-full" "$WORK/beta.log" && break; sleep 0.1; done
grep "event=disk-full" "$WORK/beta.log" | head -n 1 | grep -q 'err="No space left on device"' ||
    fail "beta did not log a full disk: $(grep -i 'checkpoint-receive\|disk' "$WORK/beta.log" | tail -n 3)"
"$GM" status --json --config "$WORK/beta.conf" | python3 -c '
import json, sys
d = json.load(sys.stdin)["disk"]
assert d["full"] is True and d["enospc_total"] >= 1 and d["error"] == "No space left on device", d
assert d["peer"] == "alpha" and d["path"].startswith(sys.argv[1]), d' "$MNT" ||
    fail "beta's status --json does not say its disk is full"
"$GM" status --config "$WORK/beta.conf" | grep -q "^disk full: $MNT/.*: No space left on device" ||
    fail "beta's status does not say its disk is full: $("$GM" status --config "$WORK/beta.conf")"
# the metrics are published on the agent's tick: polled
metric_full() { curl -s "http://127.0.0.1:$MB/metrics" | grep -qx "gradmesh_disk_full 1"; }
wait_for "beta's gradmesh_disk_full 1" metric_full
metrics=$(curl -s "http://127.0.0.1:$MB/metrics") || fail "beta's metrics do not answer"
n=$(sed -n 's/^gradmesh_disk_full_total //p' <<<"$metrics")
[ "${n:-0}" -ge 1 ] || fail "gradmesh_disk_full_total is ${n:-absent}"
pass "beta says its disk is full: event, status --json, status, metrics"

# alpha's `checkpoint list --json` is a picture of a job that goes on: its newest file may be one
# being written (state "uncommitted") or one committed a moment before the agent hands it on,
# and no node holds either yet (holders null). So the listing is not asked about "the newest"
# while the job runs, and each condition is polled until one listing meets it, never asked
# again of a later listing.
#   beta_refused running: the job's entries name beta in not_held, "No space left on device",
#     and the checkpoint of that refusal (its step) is listed, held by alpha alone;
#   beta_refused ended STEP: the job ended at STEP: the newest checkpoint is that one, committed,
#     beta's last answer was its refusal of it, and its holders are alpha alone.
# The last listing stays in $WORK/ckpt-list.json, what it lacked (and the listing in short) in
# $WORK/ckpt-list.why.
KEY=$(job_key "$WORK/job.ini")
REFUSED_PY=$(cat <<'PY'
import json, sys
key, mode = sys.argv[1], sys.argv[2]
items = [i for i in json.load(sys.stdin) if i["job_key"] == key]
def no(why):
    short = [(i["step"], i["state"], i["holders"]) for i in items]
    print("%s; listing: %s, not_held %s" % (why, short, items[0]["not_held"] if items else None))
    sys.exit(1)
if not items:
    no("no checkpoint of job %s listed" % key)
# not_held is the key's: the same on each of its entries
refused = [r for r in items[0]["not_held"] if r["node"] == "beta"]
if len(refused) != 1 or refused[0]["error"] != "No space left on device":
    no("not_held does not name beta once with ENOSPC: %s" % items[0]["not_held"])
step = refused[0]["step"]
if mode == "ended":
    last = int(sys.argv[3])
    newest = max(items, key=lambda i: i["step"])
    if newest["step"] != last or newest["state"] != "ok":
        no("the newest is step %d (%s), want the final step %d, ok" %
           (newest["step"], newest["state"], last))
    if step != last:
        no("beta's last refusal is of step %d, not of the final step %d" % (step, last))
it = [i for i in items if i["step"] == step]
if not it:
    no("step %d (beta's last refusal) is not listed" % step)
if it[0]["holders"] != ["alpha"]:
    no("step %d, refused by beta: holders %s, want [alpha]" % (step, it[0]["holders"]))
PY
)
beta_refused() {
    "$GM" checkpoint list --json --config "$WORK/alpha.conf" >"$WORK/ckpt-list.json" \
        2>"$WORK/ckpt-list.why" &&
        python3 -c "$REFUSED_PY" "$KEY" "$@" <"$WORK/ckpt-list.json" >"$WORK/ckpt-list.why" 2>&1
}
ok=0
for i in $(seq 300); do beta_refused running && { ok=1; break; }; sleep 0.2; done
[ $ok = 1 ] ||
    fail "alpha's checkpoint list does not say beta holds none: $(cat "$WORK/ckpt-list.why")"
"$GM" checkpoint list --config "$WORK/alpha.conf" | grep -q "^member beta holds no copy: .*: No space left on device$" ||
    fail "alpha's checkpoint list (text) does not say beta holds none"
pass "alpha knows beta holds no copy (checkpoint list --json not_held; the refused one: alpha's alone)"

wait $SUBMIT
rc=$?
[ $rc = 0 ] || fail "the job did not complete: exit $rc: $(cat "$WORK/job.err")"
ID=$(sed -n 's/^job \([0-9a-f]*\) submitted.*/\1/p' "$WORK/job.out")
for n in alpha beta; do job_is $n "$ID" 'j["state"] == "done"' || fail "job $ID is not done on $n"; done
grep -q "protocol error\|malformed or unexpected checkpoint message" "$WORK/alpha.log" "$WORK/beta.log" &&
    fail "a protocol error: $(grep -h 'protocol error\|malformed' "$WORK/alpha.log" "$WORK/beta.log" | head -n 3)"
[ "$(grep -c "event=job-group job=$ID " "$WORK/alpha.log")" = 1 ] ||
    fail "the group was re-formed (beta dropped): $(grep "event=job-group" "$WORK/alpha.log")"
links_up alpha 1 || fail "alpha's link to beta is down"
ha=$(final_hash alpha "$ID"); hb=$(final_hash beta "$ID")
[ -n "$ha" ] && [ "$ha" = "$hb" ] || fail "final parameters: alpha ${ha:-none}, beta ${hb:-none}"
n=$(grep -c "event=disk-full" "$WORK/beta.log")
pass "the job completed on both ranks (same final parameters); beta stayed in its group through $n refused replicas"
# the job is over: its final checkpoint is the newest for good, and beta's answer to it comes
LAST=$(step_of alpha "$ID") || fail "alpha does not list job $ID"
ok=0
for i in $(seq 300); do beta_refused ended "$LAST" && { ok=1; break; }; sleep 0.2; done
[ $ok = 1 ] ||
    fail "alpha's checkpoint list after the job: $(cat "$WORK/ckpt-list.why")"
pass "alpha's final checkpoint (step $LAST) is held by alpha alone; beta's refusal of it is listed"

# --- 3. the coordinator's own disk fills -------------------------------------------------------
rm -f "$MNT"/filler.*
mkdir -p "$MNTA"
mount -t tmpfs -o size=16m gm-disk-full-a "$MNTA" || fail "mount a tmpfs on alpha's checkpoints"
job_ini "$WORK/job2.ini" full2 job.seed=2 job.checkpoint_every=20 job.checkpoint_keep=2 \
    model.hidden=64 optim.lr=0.002 optim.global_batch=192 comm.codec=fp32
timeout "$JOB_TIMEOUT" "$GM" submit "$WORK/job2.ini" --follow --config "$WORK/alpha.conf" \
    >"$WORK/job2.out" 2>"$WORK/job2.err" &
SUBMIT=$!
KEY2=$(job_key "$WORK/job2.ini")
wrote() { grep -q "event=checkpoint step=[0-9]* path=$MNTA/$KEY2/" "$WORK/alpha.log"; }
for i in $(seq 1200); do wrote && break; sleep 0.1; done
wrote || fail "alpha wrote no checkpoint on its tmpfs"
dd if=/dev/zero of="$MNTA/filler" bs=64k 2>/dev/null
for i in $(seq 1200); do grep -q "event=disk-full .*what=checkpoint " "$WORK/alpha.log" && break; sleep 0.1; done
grep -q "event=disk-full path=$MNTA/$KEY2/.* what=checkpoint step=[0-9]* err=\"No space left on device\"" "$WORK/alpha.log" ||
    fail "alpha did not say its disk is full: $(grep 'checkpoint-failed\|disk-full' "$WORK/alpha.log" | tail -n 2)"
"$GM" status --json --config "$WORK/alpha.conf" | python3 -c '
import json, sys
d = json.load(sys.stdin)["disk"]
assert d["full"] is True and d["peer"] == "alpha" and d["error"] == "No space left on device", d' ||
    fail "alpha's status --json does not say its disk is full"
"$GM" status --config "$WORK/alpha.conf" | grep -q "^disk full: $MNTA/.*: No space left on device (this node's checkpoint of step" ||
    fail "alpha's status does not say its disk is full"
wait $SUBMIT
rc=$?
[ $rc = 0 ] || fail "the job on a full coordinator disk did not complete: exit $rc: $(cat "$WORK/job2.err")"
pass "the coordinator's disk full: said (event, status), the job went on to its end"
stop_agents

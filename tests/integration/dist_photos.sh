#!/usr/bin/env bash
# tests/integration/dist_photos.sh - a photo folder trained by 1, 2 and 3 agents on loopback
# (issue 21, "Done when" 3, and the dataset check past 4096 files):
#
#   phase 1: alpha alone        phase 2: alpha + beta        phase 3: alpha + beta + gamma
#   (every agent on 127.0.0.1 with GRADMESH_LOG_LEVEL=debug, so each rank's loader logs
#   event=sample split=train epoch=E index=I hash=H for every tensor it hands its trainer)
#
#   - the folder holds 4200 photos (tests/tools/make_photos.py, 12 px), more than one JOB_CHECK
#     can list file by file (GM_JOB_FILES_MAX = 4096): the members answer with one entry per
#     class folder and submit passes;
#   - with augment = crop_flip the (epoch, index, hash) triples of all ranks together are the
#     same set for 1, 2 and 3 agents, each sample once: every world size sees the same pixels;
#   - a truncated JPEG: without skip_bad the job fails naming the file on every rank that
#     checked it; with skip_bad = true every rank skips that file alone (event=data_skip,
#     data_check skipped=1) and the job ends done.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. tests/integration/lib.bash

/usr/bin/python3 -c 'import numpy, PIL' 2>/dev/null || { echo "skip: /usr/bin/python3 lacks numpy or PIL"; exit 77; }
have_fashion_mnist || { echo "skip: no Fashion-MNIST (dataset-fashion-mnist)"; exit 77; }
JOB_TIMEOUT=${JOB_TIMEOUT:-300}
export GRADMESH_LOG_LEVEL=debug

/usr/bin/python3 tests/tools/make_photos.py "$WORK/photos" --per-class 420 --classes 10 --size 12 \
    >/dev/null || fail "make_photos (big)"
/usr/bin/python3 tests/tools/make_photos.py "$WORK/small" --per-class 10 --classes 3 --size 24 \
    >/dev/null || fail "make_photos (small)"
n=$(find "$WORK/photos" -type f | wc -l)
[ "$n" -gt 4096 ] || fail "the big folder has $n files, want more than 4096"

photo_job() { # file name extra...
    local f=$1 name=$2
    shift 2
    job_ini "$f" "$name" job.epochs=1 job.out="$WORK/$name.safetensors" model.hidden=16 \
        data.kind=folder data.dir="$WORK/photos" data.image_size=10 data.augment=crop_flip \
        data.normalize=imagenet data.loader_threads=1 optim.global_batch=60 "$@"
}
photo_job "$WORK/p.ini" p

# samples RUN NODE...: the event=sample triples each NODE logged since mark RUN, sorted
mark() { for a in alpha beta gamma; do wc -l <"$WORK/$a.log" 2>/dev/null >"$WORK/$1.$a.mark" || echo 0 >"$WORK/$1.$a.mark"; done; }
since() { tail -n +$(($(cat "$WORK/$1.$2.mark") + 1)) "$WORK/$2.log"; }
samples() {
    local run=$1 a
    shift
    for a in "$@"; do
        since "$run" "$a" | grep -o 'event=sample split=train epoch=[0-9]* index=[0-9]* hash=[0-9a-f]*'
    done | sort
}

# submit RUN INI: submits on alpha and follows it; exit status in $WORK/RUN.rc
submit() {
    mark "$1"
    timeout "$JOB_TIMEOUT" "$GM" submit "$2" --follow --config "$WORK/alpha.conf" >"$WORK/$1.submit" 2>&1
    echo $? >"$WORK/$1.rc"
}

make_cluster photos alpha beta gamma
submit w1 "$WORK/p.ini"
[ "$(cat "$WORK/w1.rc")" = 0 ] || { cat "$WORK/w1.submit"; fail "1 agent: submit exit $(cat "$WORK/w1.rc")"; }
samples w1 alpha >"$WORK/w1.samples"
total=$(wc -l <"$WORK/w1.samples")
[ "$total" -gt 3000 ] || fail "1 agent: $total samples logged"
twice() { # the (epoch, index) pairs logged more than once since mark RUN, with their lines
    local d
    for d in $(cut -d' ' -f3-4 "$WORK/$1.samples" | sort | uniq -d | tr ' ' ,); do
        since "$1" alpha | grep -n "event=sample split=train ${d/,/ }[^0-9]" | head -n 4
    done | head -n 20
}
[ "$(cut -d' ' -f3-4 "$WORK/w1.samples" | sort -u | wc -l)" -eq "$total" ] ||
    fail "1 agent: a sample twice (line numbers since the submit): $(twice w1)"
pass "1 agent: a $n-file folder passes the check; $total samples trained"

start_agent beta
wait_for "alpha-beta link" links_up alpha 1
submit w2 "$WORK/p.ini"
[ "$(cat "$WORK/w2.rc")" = 0 ] || { cat "$WORK/w2.submit"; fail "2 agents: submit exit $(cat "$WORK/w2.rc")"; }
samples w2 alpha beta >"$WORK/w2.samples"
[ "$(samples w2 beta | wc -l)" -gt 0 ] || fail "2 agents: beta logged no samples"
cmp -s "$WORK/w1.samples" "$WORK/w2.samples" || fail "2 agents saw other pixels than 1 ($(comm -3 "$WORK/w1.samples" "$WORK/w2.samples" | wc -l) lines differ)"
pass "2 agents: the same $total (epoch, sample, tensor hash) triples as 1"

start_agent gamma
wait_for "alpha's links" links_up alpha 2
wait_for "gamma's links" links_up gamma 2
submit w3 "$WORK/p.ini"
[ "$(cat "$WORK/w3.rc")" = 0 ] || { cat "$WORK/w3.submit"; fail "3 agents: submit exit $(cat "$WORK/w3.rc")"; }
samples w3 alpha beta gamma >"$WORK/w3.samples"
for a in beta gamma; do [ "$(samples w3 $a | wc -l)" -gt 0 ] || fail "3 agents: $a logged no samples"; done
cmp -s "$WORK/w1.samples" "$WORK/w3.samples" || fail "3 agents saw other pixels than 1"
pass "3 agents: the same $total triples as 1"

# --- a truncated JPEG, skip_bad both ways ------------------------------------------------------
bad=$(ls "$WORK"/small/trouser/*.jpg | head -n 2 | tail -n 1)
head -c "$(($(stat -c %s "$bad") / 2))" "$bad" >"$WORK/half" && mv "$WORK/half" "$bad"
job_ini "$WORK/c.ini" c job.epochs=1 job.out="$WORK/c.safetensors" model.hidden=8 data.kind=folder \
    data.dir="$WORK/small" data.image_size=16 data.loader_threads=1 optim.global_batch=6
submit corrupt "$WORK/c.ini"
rc=$(cat "$WORK/corrupt.rc")
[ "$rc" != 0 ] || fail "a truncated JPEG without skip_bad: the job ran"
grep -qF "$bad" "$WORK/corrupt.submit" || { cat "$WORK/corrupt.submit"; fail "corrupt: submit does not name $bad"; }
# The coordinator (alpha, the chief) opens the data as train --local would before any member
# starts, so the job is refused there, once, for every rank: no rank trains or skips anything.
since corrupt alpha | grep -qF "$bad" || fail "corrupt: alpha's log does not name $bad"
for a in alpha beta gamma; do
    ! since corrupt $a | grep -q 'event=data_skip' || fail "corrupt: $a skipped without skip_bad"
    ! since corrupt $a | grep -q 'event=sample split=train' || fail "corrupt: $a trained"
done
[ ! -e "$WORK/c.safetensors" ] || fail "corrupt: weights written"
pass "a truncated JPEG without skip_bad: exit $rc, refused at submit before any rank started: $(grep -F "$bad" "$WORK/corrupt.submit" | head -n 1 | head -c 160)"

job_ini "$WORK/s.ini" s job.epochs=1 job.out="$WORK/s.safetensors" model.hidden=8 data.kind=folder \
    data.dir="$WORK/small" data.image_size=16 data.loader_threads=1 optim.global_batch=6 data.skip_bad=true
submit skip "$WORK/s.ini"
[ "$(cat "$WORK/skip.rc")" = 0 ] || { cat "$WORK/skip.submit"; fail "skip_bad: submit exit $(cat "$WORK/skip.rc")"; }
for a in alpha beta gamma; do
    [ "$(since skip $a | grep -c "event=data_skip path=$bad ")" -ge 1 ] || fail "skip_bad: $a did not skip $bad"
    [ "$(since skip $a | grep -c 'event=data_skip ')" -eq "$(since skip $a | grep -c "event=data_skip path=$bad ")" ] ||
        fail "skip_bad: $a skipped another file"
    since skip $a | grep -q 'event=data_check .*skipped=1 ' || fail "skip_bad: $a's check does not say skipped=1"
done
pass "skip_bad: each of 3 agents leaves out $bad alone and the job is done"

stop_agents

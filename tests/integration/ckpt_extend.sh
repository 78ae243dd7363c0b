#!/usr/bin/env bash
# tests/integration/ckpt_extend.sh - extending a finished distributed run by [job] epochs.
#
#   a1 (init; chief, coordinator, rank 0) <--TLS loopback--> a2 (rank 1)
#
# The job: an MLP (hidden 64) on Fashion-MNIST, Adam lr 2e-3 (constant), global_batch 192
# (312 steps an epoch), seed 4, fp32, checkpoint_every = 100.
#  1. 1 epoch, submitted with --follow: done at step 312, its checkpoints filed under the
#     job's key (the identity: the job text less its [job] epochs line);
#  2. the same job with epochs = 2 (nothing else changed): the coordinator resumes from the
#     committed step-312 checkpoint, the follower reads "resuming from step 312 (checkpoint
#     ...)" then "extending from 1 to 2 epochs", and the job ends done at step 624;
#  3. the checkpoints removed on both agents, the 2-epoch job again: it starts at step 0 and
#     ends with bitwise the parameters of the extended run (a constant learning rate, so a
#     step does not depend on the run's length);
#  4. the 2-epoch job with another lr is another job (another key): it does not go on from
#     the earlier run's checkpoints, and its follower reads why, naming the key that differs:
#     "starting at step 0: the checkpoints of the earlier job ID (ext) are of other settings:
#     [optim] lr (0.002 -> 0.003); only [job] epochs may change ...".
# Every wait polls a condition.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. tests/integration/lib.bash

need_fashion_mnist
JOB_TIMEOUT=${JOB_TIMEOUT:-300}
SPE=$((60000 / 192))

ext() { # FILE EPOCHS [SECTION.KEY=VALUE...]
    local f=$1 e=$2; shift 2
    job_ini "$f" ext job.epochs="$e" job.seed=4 job.log_every=100 job.checkpoint_every=100 \
        model.hidden=64 optim.lr=0.002 optim.global_batch=192 comm.codec=fp32 "$@"
}
ext "$WORK/e1.ini" 1
ext "$WORK/e2.ini" 2
ext "$WORK/elr.ini" 2 optim.lr=0.003
KEY=$(job_key "$WORK/e1.ini")
[ "$KEY" = "$(job_key "$WORK/e2.ini")" ] || fail "the key depends on epochs"
[ "$KEY" != "$(job_key "$WORK/elr.ini")" ] || fail "the key does not depend on lr"

make_cluster ext a1 a2
start_agent a2
wait_for "a1 linked to a2" links_up a1 1
wait_for "a chief" chief_is a1 a1

submit() { # JOB OUT: submit --follow on a1; prints the job id
    timeout "$JOB_TIMEOUT" "$GM" submit "$1" --follow --config "$WORK/a1.conf" >"$2" 2>&1 ||
        { cat "$2"; fail "submit $1"; }
    sed -n 's/^job \([0-9a-f]*\) submitted.*/\1/p' "$2"
}

# --- 1. one epoch ----------------------------------------------------------------------------
ID1=$(submit "$WORK/e1.ini" "$WORK/s1.out")
job_is a1 "$ID1" 'j["state"] == "done" and j["summary"]["steps"] == '$SPE || fail "1-epoch run: $(job_get a1 "$ID1" j)"
[ -e "$WORK/a1/checkpoints/$KEY/$(printf 'step-%010d' $SPE).safetensors.sha256" ] || fail "no checkpoint $SPE under $KEY"
grep -q "^resuming from" "$WORK/s1.out" && fail "the first run resumed: $(cat "$WORK/s1.out")"
pass "1 epoch: done at step $SPE, checkpoints under $KEY"

# --- 2. extended to two ------------------------------------------------------------------------
ID2=$(submit "$WORK/e2.ini" "$WORK/s2.out")
grep -q "^resuming from step $SPE (checkpoint $WORK/a1/checkpoints/$KEY/$(printf 'step-%010d' $SPE).safetensors)$" "$WORK/s2.out" ||
    fail "the extended job did not resume from step $SPE: $(head -5 "$WORK/s2.out")"
grep -qx "extending from 1 to 2 epochs" "$WORK/s2.out" || fail "no 'extending from 1 to 2 epochs': $(head -5 "$WORK/s2.out")"
[ "$(grep -n "^resuming from" "$WORK/s2.out" | cut -d: -f1)" -lt "$(grep -n "^extending from" "$WORK/s2.out" | cut -d: -f1)" ] ||
    fail "the lines come in the wrong order: $(head -5 "$WORK/s2.out")"
job_is a1 "$ID2" 'j["state"] == "done" and j["summary"]["steps"] == '$((2 * SPE)) || fail "extended run: $(job_get a1 "$ID2" j)"
grep -q "event=resume-extend path=$WORK/a1/checkpoints/$KEY/.* step=$SPE from_steps=$SPE steps=$((2 * SPE)) from_epochs=1 epochs=2" "$WORK/a1.log" ||
    fail "a1 logged no event=resume-extend"
H2=$(final_hash a1 "$ID2")
[ -n "$H2" ] && [ "$(final_hash a2 "$ID2")" = "$H2" ] || fail "final hashes: a1 '$H2', a2 '$(final_hash a2 "$ID2")'"
pass "extended to 2 epochs: $(grep "^resuming from" "$WORK/s2.out" | sed "s|$WORK/||"); $(grep "^extending" "$WORK/s2.out"); done at step $((2 * SPE))"

# --- 3. the same two epochs from scratch ---------------------------------------------------------
rm -rf "$WORK/a1/checkpoints/$KEY" "$WORK/a2/checkpoints/$KEY"
ID3=$(submit "$WORK/e2.ini" "$WORK/s3.out")
grep -q "^resuming from" "$WORK/s3.out" && fail "the run from scratch resumed: $(head -5 "$WORK/s3.out")"
job_is a1 "$ID3" 'j["state"] == "done" and j["summary"]["steps"] == '$((2 * SPE)) || fail "2-epoch run: $(job_get a1 "$ID3" j)"
[ "$(final_hash a1 "$ID3")" = "$H2" ] || fail "the extended run ends with $H2, a 2-epoch run with $(final_hash a1 "$ID3")"
pass "2 epochs from scratch: final parameters bitwise those of the extended run"

# --- 4. another lr is another job ----------------------------------------------------------------
ID4=$(submit "$WORK/elr.ini" "$WORK/s4.out")
grep -q "^resuming from" "$WORK/s4.out" && fail "a job with another lr resumed: $(head -5 "$WORK/s4.out")"
grep -qx "starting at step 0: the checkpoints of the earlier job $ID3 (ext) are of other settings: \[optim\] lr (0.002 -> 0.003); only \[job\] epochs may change for a job to go on from them" "$WORK/s4.out" ||
    fail "the follower was not told why: $(head -5 "$WORK/s4.out")"
grep -q "event=job-not-resumed job=$ID4 name=ext earlier=$ID3 differs=\"\[optim\] lr (0.002 -> 0.003)\"" "$WORK/a1.log" || fail "no event=job-not-resumed"
job_is a1 "$ID4" 'j["state"] == "done" and j["summary"]["steps"] == '$((2 * SPE)) || fail "lr run: $(job_get a1 "$ID4" j)"
[ "$(final_hash a1 "$ID4")" != "$H2" ] || fail "another lr ended with the same parameters"
pass "another lr: a job of its own key, trained from step 0; $(grep "^starting at step 0" "$WORK/s4.out")"
check_one_chief_per_term
stop_agents
echo "PASS"

#!/usr/bin/env bash
# bench/unequal.sh - unequal machines (issue 25, "Done when" 2): a fast agent and a slow one
# on loopback, each agent in its own CPU cgroup (v1 cpu controller, 10 ms periods, as the
# namespace testbed's NB_HOST_CPU: a slow machine is a quota, not a shared core), training one
# job together, against the fast agent alone.
#
#   alpha: cap 1.0 (the fast machine)   beta: cap 0.2 | 0.5 | 1.0   gamma: cap 0.1 (third host)
#
# For each model (LeNet-5 on Fashion-MNIST; resnet20 on Fashion-MNIST padded to 32x32) and
# each of beta's caps, one run each of:
#   alone   alpha alone: `train --local` of the same job in alpha's cgroup (an agent alone
#           would need beta's agent down, and then its cluster has no majority);
#   equal   alpha + beta, [job] shares = equal (what every job did before shares: G/2 each);
#   auto    alpha + beta, [job] shares = auto (measured, re-balanced: agent/jobs/autoshare.h);
# and, at beta's last cap, auto with gamma at 0.1 added (the third host must not slow it).
# Every run is the same job (Adam 1e-3, seed 1, global batch G, the first NTRAIN training
# images, one epoch), so every run takes the same steps over the same samples: its test
# accuracy at the end is the fast machine's to within rounding, and "time to the fast
# machine's accuracy" (tta_s) is the run's wall time when its accuracy is within 1 point of
# alone's (printed "-" when not).  Reported per run: samples/s (the job summary's: samples over
# training time), wall seconds, test accuracy, the shares at the end, the ratio of samples/s to
# alone's from the same model and cap (alone is rerun next to each cap, since this machine is
# shared and its load drifts) and tta_x, alone's time to its accuracy over the run's (alone's
# wall / the run's tta_s: > 1 is sooner than alone); `uptime` beside each block.
#
# Bars (issue 25): 1.0 + 0.2 >= 1.05x alone; 1.0 + 0.5 >= 1.35x; 1.0 + 1.0 no worse than
# equal shares (0.95x); the third host never slower than without it (0.95x).  Each is printed as
# a PASS/MISS line twice: on samples/s and on time to the fast machine's accuracy.  The script
# exits 0 either way (a benchmark, not a test: the machine's load decides a lot).
#
# Usage: bench/unequal.sh [GRADMESH_BINARY]   MODELS="lenet5 resnet20" CAPS="0.2 0.5 1.0"
#   THIRD=0.1 (empty: no third host) NTRAIN_lenet5=25600 NTRAIN_resnet20=5120 G_lenet5=128
#   G_resnet20=64 EPOCHS_lenet5=8 EPOCHS_resnet20=2 (a longer run amortizes the ~5-10 steps and
#   0.6 s that shares = auto takes to measure and decide, and each change's re-formed group:
#   LeNet-5 runs 1600 steps, resnet20, at ~0.7 s a step with beta at 0.2 and equal shares, 160:
#   at 80 steps the first decision's ~7 steps at the slow pace were ~10% of the run) KEEP=1
# On a quiet 2-core machine the default run (both models, the three caps, the third host) took
# 8 minutes with resnet20 at one epoch (12:48-12:56 UTC 2026-11-27, 5.5 of them resnet20); at
# two, about 14.
# Needs root (cgroups) and the Fashion-MNIST files; skips (77) without them.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
GM_BIN=$(realpath "${1:-./gradmesh}")
export GM_BIN
. tests/integration/lib.bash

DATA=${DATA:-/usr/share/datasets/fashion-mnist}
MODELS=${MODELS:-lenet5 resnet20}
CAPS=${CAPS:-0.2 0.5 1.0}
THIRD=${THIRD-0.1}
G_lenet5=${G_lenet5:-128}
EPOCHS_lenet5=${EPOCHS_lenet5:-8}
EPOCHS_resnet20=${EPOCHS_resnet20:-2}
G_resnet20=${G_resnet20:-64}
CG=/sys/fs/cgroup/cpu
[ -d "$DATA" ] || { echo "SKIP: no Fashion-MNIST at $DATA"; exit 77; }
[ -w "$CG" ] || { echo "SKIP: needs a writable cgroup v1 cpu controller at $CG (root)"; exit 77; }
CGS=()
cg_cleanup() {
    cleanup
    local c
    for c in "${CGS[@]}"; do rmdir "$c" 2>/dev/null; done
}
trap cg_cleanup EXIT

# cap NAME CORES: NAME's cgroup at CORES cores over 10 ms periods (made on first use).
cap() {
    local c=$CG/gm-unequal-$$-$1
    if [ ! -d "$c" ]; then
        mkdir "$c" || fail "mkdir $c"
        CGS+=("$c")
        echo 10000 >"$c/cpu.cfs_period_us" || fail "period of $c"
    fi
    awk -v x="$2" 'BEGIN { printf "%d\n", x * 10000 }' >"$c/cpu.cfs_quota_us" || fail "quota of $c"
}

# start_capped NAME: NAME's agent, inside its cgroup (joined before exec: its threads follow).
start_capped() {
    sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$CG/gm-unequal-$$-$1" \
        "$GM" agent --config "$WORK/$1.conf" 2>>"$WORK/$1.log" &
    PIDS+=($!)
    eval "PID_$1=$!"
    wait_for "agent $1" "$GM" status --config "$WORK/$1.conf"
}

# stop_one NAME: SIGTERM to NAME's agent, waited for, dropped from PIDS.
stop_one() {
    local p=PID_$1 q keep=()
    kill "${!p}" 2>/dev/null
    wait "${!p}" 2>/dev/null
    for q in "${PIDS[@]}"; do [ "$q" = "${!p}" ] || keep+=("$q"); done
    PIDS=("${keep[@]}")
}

# run_job MODEL SHARES WORLD: submit on alpha (WORLD agents up), follow to the end; prints
# "samples_per_s wall_s accuracy shares" (shares: each rank's samples at the end; a rank left
# out as a spare is not among them).
run_job() {
    local model=$1 shares=$2 world=$3 id out pad=0 g=G_$1
    [ "$model" = resnet20 ] && pad=2
    local ep=EPOCHS_$1
    job_ini "$WORK/job.ini" "un-$model" job.model="$model" job.epochs="${!ep}" job.log_every=1000 \
        job.shares="$shares" \
        data.dir="$WORK/data-$model" data.pad=$pad optim.lr=0.001 optim.global_batch=${!g} \
        comm.codec=fp32
    out=$(timeout 3600 "$GM" submit "$WORK/job.ini" --follow --config "$WORK/alpha.conf" 2>&1) ||
        { echo "$out" | tail -5 >&2; echo "- - - -"; return; }
    id=$(sed -n 's/^job \([0-9a-f]*\) submitted.*/\1/p' <<<"$out")
    job_get alpha "$id" '"%s %s %s %s" % (j["summary"]["samples_per_s"], j["summary"]["wall_s"], j["summary"]["test_accuracy"], ":".join(str(s["samples"]) for s in j["shares"]))'
}

# run_alone MODEL: the fast machine alone: `train --local` of the same job in alpha's cgroup
# (the agent's trainer without a group; an agent alone would need the other voters down, which
# leaves its cluster without a majority); prints as run_job.
run_alone() {
    local model=$1 pad=0 g=G_$1 ep=EPOCHS_$1
    [ "$model" = resnet20 ] && pad=2
    job_ini "$WORK/alone.ini" "alone-$model" job.model="$model" job.epochs="${!ep}" job.log_every=1000 \
        data.dir="$WORK/data-$model" data.pad=$pad optim.lr=0.001 optim.global_batch=${!g} \
        job.out="$WORK/alone.safetensors"
    sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$CG/gm-unequal-$$-alpha" \
        "$GM" train --local "$WORK/alone.ini" --no-progress --summary-json "$WORK/alone.json" \
        >>"$WORK/alone.log" 2>&1 || { echo "- - - -"; return; }
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%.2f %.2f %.2f %s" % (d["samples_per_s"], d["wall_s"], d["test_accuracy"], sys.argv[2]))' \
        "$WORK/alone.json" "${!g}"
}

ratio() { python3 -c "import sys; a,b=sys.argv[1:]; print('%.2f' % (float(a)/float(b)) if a!='-' and b!='-' and float(b)>0 else '-')" "$1" "$2"; }
bar() { # NAME VALUE OP LIMIT
    python3 -c "import sys; n,v,op,l=sys.argv[1:]; ok = v!='-' and (float(v)>=float(l) if op=='>=' else float(v)<=float(l)); print(('PASS' if ok else 'MISS') + ': %s %s %s %s' % (n, v, op, l))" "$@"
}
tta() { # ACC WALL ALONE_ACC: wall when ACC is within 1 point of ALONE_ACC
    python3 -c "import sys; a,w,r=sys.argv[1:]; print(w if a!='-' and r!='-' and float(a)>=float(r)-1 else '-')" "$@"
}

export NTRAIN_lenet5=${NTRAIN_lenet5:-25600} NTRAIN_resnet20=${NTRAIN_resnet20:-5120}
for m in $MODELS; do
    n=NTRAIN_$m
    python3 tests/integration/dist_tools.py subset "$DATA" "$WORK/data-$m" "${!n}" 2000 ||
        fail "subset for $m"
done
make_cluster unequal alpha beta gamma
stop_one alpha
cap alpha 1.0
start_capped alpha
cap beta 1.0
start_capped beta
wait_for "alpha-beta link" links_up alpha 1
cap gamma "${THIRD:-0.1}"

echo "# bench/unequal.sh: lenet5 global batch $G_lenet5, $NTRAIN_lenet5 images x $EPOCHS_lenet5 epochs; resnet20 $G_resnet20, $NTRAIN_resnet20 x $EPOCHS_resnet20; alpha cap 1.0; $(nproc) cores; $(uptime)"
printf '%-9s %-5s %-7s %10s %8s %7s %-12s %6s %8s %6s\n' model cap run samples/s wall_s acc shares ratio tta_s tta_x
for m in $MODELS; do
    for c in $CAPS; do
        echo "# $m, beta at $c: $(uptime)"
        read -r a_sps a_wall a_acc a_sh < <(run_alone "$m")
        printf '%-9s %-5s %-7s %10s %8s %7s %-12s %6s %8s %6s\n' "$m" 1.0 alone "$a_sps" "$a_wall" "$a_acc" "$a_sh" 1.00 "$a_wall" 1.00
        cap beta "$c"
        declare -A sps=() ttx=()
        for sh in equal auto; do
            read -r s w a x < <(run_job "$m" "$sh" 2)
            sps[$sh]=$s
            t=$(tta "$a" "$w" "$a_acc")
            ttx[$sh]=$(ratio "$a_wall" "$t")
            printf '%-9s %-5s %-7s %10s %8s %7s %-12s %6s %8s %6s\n' "$m" "$c" "$sh" "$s" "$w" "$a" "$x" "$(ratio "$s" "$a_sps")" "$t" "${ttx[$sh]}"
            echo "#   beta's cgroup: $(tr '\n' ' ' <"$CG/gm-unequal-$$-beta/cpu.stat"); its pid's: $(grep ':cpu:' /proc/$PID_beta/cgroup)"
        done
        case $c in
        0.2)
            bar "$m 1.0+0.2 auto vs alone, samples/s" "$(ratio "${sps[auto]}" "$a_sps")" '>=' 1.05
            bar "$m 1.0+0.2 auto vs alone, time to accuracy" "${ttx[auto]}" '>=' 1.05
            ;;
        0.5)
            bar "$m 1.0+0.5 auto vs alone, samples/s" "$(ratio "${sps[auto]}" "$a_sps")" '>=' 1.35
            bar "$m 1.0+0.5 auto vs alone, time to accuracy" "${ttx[auto]}" '>=' 1.35
            ;;
        1.0)
            bar "$m 1.0+1.0 auto vs equal, samples/s" "$(ratio "${sps[auto]}" "${sps[equal]}")" '>=' 0.95
            bar "$m 1.0+1.0 auto vs equal, time to accuracy" "$(ratio "${ttx[auto]}" "${ttx[equal]}")" '>=' 0.95
            ;;
        esac
        if [ -n "$THIRD" ] && [ "$c" = "${CAPS##* }" ]; then
            start_capped gamma
            wait_for "alpha's links to beta and gamma" links_up alpha 2
            read -r s w a x < <(run_job "$m" auto 3)
            t=$(tta "$a" "$w" "$a_acc")
            printf '%-9s %-5s %-7s %10s %8s %7s %-12s %6s %8s %6s\n' "$m" "+$THIRD" auto3 "$s" "$w" "$a" "$x" "$(ratio "$s" "$a_sps")" "$t" "$(ratio "$a_wall" "$t")"
            bar "$m third host at $THIRD vs without, samples/s" "$(ratio "$s" "${sps[auto]}")" '>=' 0.95
            bar "$m third host at $THIRD vs without, time to accuracy" "$(ratio "$(ratio "$a_wall" "$t")" "${ttx[auto]}")" '>=' 0.95
            stop_one gamma
            wait_for "gamma gone" links_up alpha 1
        fi
    done
done
echo "# done: $(uptime)"

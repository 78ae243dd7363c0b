#!/usr/bin/env bash
# bench/photos.sh - a 20,000-photo folder streamed in bounded memory (issue 21).
#
# Makes (once, kept in $PHOTOS_DIR) 20,000 photos at 224x224 with tests/tools/make_photos.py,
# 10 classes of 2,000, and a 100-photo folder of the same kind, then, for each MODEL:SIZE of
# CONFIGS, trains MODEL on RandomResizedCrop(SIZE) + flip + ImageNet normalisation, batch BATCH,
# for TRAIN_S seconds of training each (the run is stopped with SIGINT: it finishes the step,
# evaluates the 1% test split and reports):
#   small:    the 100-photo folder, default [data] settings  -> the model's own memory
#   streamed: the 20,000 photos, default settings (cache 256M, loader threads from the cores)
#   decoded:  the 20,000 photos, cache = 4G: every photo decoded once by the check and kept, so
#             training decodes nothing (the pre-decoded run)
# streamed and decoded alternate ROUNDS times (2), so that load from other processes falls on
# both; it prints peak RSS beside the folder's decoded size, the step time of the big runs (wall
# and the process's CPU seconds per step, which other processes' load moves less), the
# trainer's wait for data, and the streaming decode's cost against the pre-decoded run (medians),
# with issue 21's bar: at most +10% of the step time.
# Usage: bench/photos.sh [GRADMESH_BINARY]; env CONFIGS ("vgg7:64 resnet18:128"; MODEL and SIZE
# name a single one), BATCH (32), TRAIN_S (60), ROUNDS (2), THREADS (BLAS threads, 1),
# PHOTOS_DIR (/tmp/gm-photos-224).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${1:-./gradmesh}")
CONFIGS=${CONFIGS:-vgg7:64 resnet18:128}
[ -n "${MODEL:-}" ] && CONFIGS="$MODEL:${SIZE:-64}"
BATCH=${BATCH:-32} TRAIN_S=${TRAIN_S:-60} THREADS=${THREADS:-1}
ROUNDS=${ROUNDS:-2}
PHOTOS_DIR=${PHOTOS_DIR:-/tmp/gm-photos-224}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

make_set() { # dir per-class
    [ -e "$1/.done" ] && return
    rm -rf "$1"
    echo "making $(($2 * 10)) photos at 224x224 in $1 ..."
    /usr/bin/python3 tests/tools/make_photos.py "$1" --per-class "$2" --size 224 >/dev/null
    touch "$1/.done"
}
make_set "$PHOTOS_DIR/big" 2000
make_set "$PHOTOS_DIR/small" 10

run() { # name dir cache
    local name=$1 pid
    cat >"$work/$name.ini" <<EOF
[job]
name = $name
model = $MODEL
epochs = 100
threads = $THREADS
out = $work/$name.safetensors
[data]
kind = folder
dir = $2
test_split = 0.01
image_size = $SIZE
augment = crop_flip
normalize = imagenet
${3:+cache = $3}
[optim]
name = adam
lr = 0.001
batch = $BATCH
EOF
    (cd "$work" && exec "$bin" train --local "$work/$name.ini" --no-progress \
        --summary-json "$work/$name.json" 2>"$work/$name.log") &
    pid=$!
    for _ in $(seq 1 3000); do # the check decodes every photo first: wait for the first step
        grep -q 'event=start' "$work/$name.log" 2>/dev/null && break
        kill -0 $pid 2>/dev/null || break
        sleep 0.2
    done
    cpu0=$(cpu_ticks $pid)
    sleep "$TRAIN_S"
    echo $(($(cpu_ticks $pid) - cpu0)) >"$work/$name.cpu"
    kill -INT $pid 2>/dev/null || true
    wait $pid || true
    grep -q 'event=done' "$work/$name.log" || { tail -n 20 "$work/$name.log"; echo "photos: $name failed"; exit 1; }
}

cpu_ticks() { awk '{print $14 + $15}' /proc/$1/stat 2>/dev/null || echo 0; }
field() { sed -n "s/.*event=$2 .*[ ]$3=\([^ ]*\).*/\1/p" "$work/$1.log" | tail -n 1; }
json() { /usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$work/$1.json" "$2"; }

for config in $CONFIGS; do
    MODEL=${config%%:*} SIZE=${config#*:}
    run small "$PHOTOS_DIR/small" ""
    for i in $(seq 1 "$ROUNDS"); do
        run streamed$i "$PHOTOS_DIR/big" ""
        run decoded$i "$PHOTOS_DIR/big" 4G
    done

    hz=$(getconf CLK_TCK)
    # per run: wall s/step, CPU s/step (steps taken while the CPU was sampled: about TRAIN_S)
    s_step() { echo "$(json $1 train_s) / $(json $1 steps)" | bc -l; }
    cpu_step() { echo "$(cat "$work/$1.cpu") / $hz / ($TRAIN_S / $(s_step $1))" | bc -l; }
    median() { sort -g | awk '{a[NR]=$1} END{print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

    decoded_mb=$(field streamed1 data_check decoded_mb)
    echo
    echo "photos: $MODEL at ${SIZE}x${SIZE} from 224x224 photos, batch $BATCH, crop_flip, $(nproc) cores (load now: $(cut -d' ' -f1-3 /proc/loadavg)), loader threads $(field streamed1 data_check threads)"
    printf '%-10s %7s %10s %10s %8s %11s %6s %8s %8s %9s\n' run photos decoded_mb cached_mb check_s peak_rss_mb steps s_step cpu_step wait_frac
    runs="small"
    for i in $(seq 1 "$ROUNDS"); do runs="$runs streamed$i decoded$i"; done
    for r in $runs; do
        printf '%-10s %7s %10s %10s %8s %11.0f %6s %8.3f %8.3f %9.4f\n' $r "$(field $r data_check images)" \
            "$(field $r data_check decoded_mb)" "$(field $r done data_cached_mb)" "$(field $r data_check check_s)" \
            "$(json $r peak_rss_mb)" "$(json $r steps)" "$(s_step $r)" "$(cpu_step $r)" \
            "$(echo "$(field $r done data_wait_s) / $(json $r train_s)" | bc -l)"
    done
    s_stream=$(for i in $(seq 1 "$ROUNDS"); do s_step streamed$i; done | median)
    s_dec=$(for i in $(seq 1 "$ROUNDS"); do s_step decoded$i; done | median)
    c_stream=$(for i in $(seq 1 "$ROUNDS"); do cpu_step streamed$i; done | median)
    c_dec=$(for i in $(seq 1 "$ROUNDS"); do cpu_step decoded$i; done | median)
    w_stream=$(for i in $(seq 1 "$ROUNDS"); do echo "$(field streamed$i done data_wait_s) / $(json streamed$i train_s) * 100" | bc -l; done | median)
    rss=$(for i in $(seq 1 "$ROUNDS"); do json streamed$i peak_rss_mb; done | sort -g | tail -n 1)
    echo
    printf 'bounded memory: peak RSS %.0f MB with the defaults for a folder of %.0f MB decoded (%s); the 100-photo folder: %.0f MB\n' \
        "$rss" "$decoded_mb" "$(echo "$rss < 1536" | bc -l | sed 's/1/under 1.5 GB/;s/0/OVER 1.5 GB/')" "$(json small peak_rss_mb)"
    printf 'streaming decode cost (medians): wall %.3f s/step streamed vs %.3f pre-decoded (%+.1f%%); CPU %.3f vs %.3f s/step (%+.1f%%); the trainer waits for data %.2f%% of its time\n' \
        "$s_stream" "$s_dec" "$(echo "($s_stream / $s_dec - 1) * 100" | bc -l)" \
        "$c_stream" "$c_dec" "$(echo "($c_stream / $c_dec - 1) * 100" | bc -l)" "$w_stream"
    printf 'bar (streaming decode <= +10%% of the step time, wall medians): %s\n' \
        "$(echo "$s_stream <= 1.10 * $s_dec" | bc -l | sed 's/1/met/;s/0/MISSED/')"
done

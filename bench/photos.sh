#!/usr/bin/env bash
# bench/photos.sh - a 20,000-photo folder streamed in bounded memory (issue 21).
#
# Makes (once, kept in $PHOTOS_DIR) 20,000 photos at 224x224 with tests/tools/make_photos.py,
# 10 classes of 2,000, and a 100-photo folder of the same kind, then trains MODEL on
# RandomResizedCrop(SIZE) + flip + ImageNet normalisation, batch BATCH, for TRAIN_S seconds of
# training each (the run is stopped with SIGINT: it finishes the step, evaluates the 1% test
# split and reports):
#   small:    the 100-photo folder, default [data] settings  -> the model's own memory
#   streamed: the 20,000 photos, default settings (cache 256M, loader threads from the cores)
#   decoded:  the 20,000 photos, cache = 4G: every photo decoded once by the check and kept, so
#             training decodes nothing (the pre-decoded run)
# and prints peak RSS beside the folder's decoded size, the step time of both big runs, the
# trainer's wait for data, and the streaming decode's cost against the pre-decoded run.
# Usage: bench/photos.sh [GRADMESH_BINARY]; env MODEL (vgg7), SIZE (64), BATCH (32), TRAIN_S
# (60), THREADS (BLAS threads, 1), PHOTOS_DIR (/tmp/gm-photos-224).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${1:-./gradmesh}")
MODEL=${MODEL:-vgg7} SIZE=${SIZE:-64} BATCH=${BATCH:-32} TRAIN_S=${TRAIN_S:-60} THREADS=${THREADS:-1}
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
    sleep "$TRAIN_S"
    kill -INT $pid 2>/dev/null || true
    wait $pid || true
    grep -q 'event=done' "$work/$name.log" || { tail -n 20 "$work/$name.log"; echo "photos: $name failed"; exit 1; }
}

field() { sed -n "s/.*event=$2 .*[ ]$3=\([^ ]*\).*/\1/p" "$work/$1.log" | tail -n 1; }
json() { /usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$work/$1.json" "$2"; }

run small "$PHOTOS_DIR/small" ""
run streamed "$PHOTOS_DIR/big" ""
run decoded "$PHOTOS_DIR/big" 4G

decoded_mb=$(field streamed data_check decoded_mb)
echo
echo "photos: $MODEL at ${SIZE}x${SIZE} from 224x224 photos, batch $BATCH, crop_flip, $(nproc) cores, loader threads $(field streamed data_check threads)"
printf '%-9s %7s %9s %10s %8s %9s %8s %9s %9s\n' run photos decoded_mb cached_mb check_s peak_rss_mb steps s_step wait_frac
for r in small streamed decoded; do
    steps=$(json $r steps)
    train_s=$(json $r train_s)
    wait_s=$(field $r done data_wait_s)
    printf '%-9s %7s %9s %10s %8s %9.0f %8s %9.3f %9.3f\n' $r "$(field $r data_check images)" \
        "$(field $r data_check decoded_mb)" "$(field $r done data_cached_mb)" "$(field $r data_check check_s)" \
        "$(json $r peak_rss_mb)" "$steps" "$(echo "$train_s / $steps" | bc -l)" "$(echo "$wait_s / $train_s" | bc -l)"
done
s_stream=$(echo "$(json streamed train_s) / $(json streamed steps)" | bc -l)
s_dec=$(echo "$(json decoded train_s) / $(json decoded steps)" | bc -l)
rss=$(json streamed peak_rss_mb)
echo
printf 'bounded memory: peak RSS %.0f MB with the defaults for a folder of %.0f MB decoded (%s); the 100-photo folder: %.0f MB\n' \
    "$rss" "$decoded_mb" "$(echo "$rss < 1536" | bc -l | sed 's/1/under 1.5 GB/;s/0/OVER 1.5 GB/')" "$(json small peak_rss_mb)"
printf 'streaming decode cost: %.3f s/step streamed vs %.3f s/step pre-decoded: %+.1f%% (trainer waiting for data: %.1f%% of training time)\n' \
    "$s_stream" "$s_dec" "$(echo "($s_stream / $s_dec - 1) * 100" | bc -l)" \
    "$(echo "$(field streamed done data_wait_s) / $(json streamed train_s) * 100" | bc -l)"

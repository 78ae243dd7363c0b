#!/usr/bin/env bash
# A photo folder streamed through `gradmesh train --local`, end to end:
#   - a generated folder (tests/tools/make_photos.py: Fashion-MNIST items as JPEG/PNG photos
#     of 64-160 px) with augment = crop_flip and ImageNet normalisation trains, and 1, 2 and 3
#     simulated workers hand the trainer the same tensor for every (epoch, sample): the
#     per-sample hashes the loader logs at debug level (event=sample) are the same sets, and
#     every training batch but the first was prefetched (across the epoch's end too);
#   - train_dir/val_dir;
#   - a truncated JPEG: exit 78 naming it and nothing written; with skip_bad every rank leaves
#     the same file out (each rank's check says skipped=1) and the run completes;
#   - bad input, each exit 78 with one error line naming the path or key, nothing written:
#     mismatched class folders, an empty class, an unsupported image format, a cache larger
#     than memory, image_size 0 with a crop; each with TensorBoard on, in an empty folder that
#     must stay empty (a refused run removes the events file it opened).
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/integration/lib.bash

/usr/bin/python3 -c 'import numpy, PIL' 2>/dev/null || { echo "skip: /usr/bin/python3 lacks numpy or PIL"; exit 77; }
have_fashion_mnist || { echo "skip: no Fashion-MNIST (dataset-fashion-mnist)"; exit 77; }

/usr/bin/python3 tests/tools/make_photos.py "$WORK/photos" --per-class 24 --classes 4 --min 64 --max 160 >/dev/null
/usr/bin/python3 tests/tools/make_photos.py "$WORK/coil" --per-class 12 --val 4 --classes 3 --size 48 >/dev/null

photo_job() { # file name extra...
    local f=$1 n=$2
    shift 2
    job_ini "$f" "$n" job.epochs=2 job.out="$WORK/$n.safetensors" model.hidden=32 \
        data.kind=folder data.dir="$WORK/photos" data.image_size=24 data.augment=crop_flip \
        data.normalize=imagenet data.loader_threads=2 optim.global_batch=12 optim.lr=0.003 "$@"
}

# --- same pixels for 1, 2, 3 workers ---------------------------------------------------------
photo_job "$WORK/p.ini" p
for w in 1 2 3; do
    GRADMESH_LOG_LEVEL=debug "$GM" train --local "$WORK/p.ini" --no-progress --no-tensorboard --simulate-workers $w \
        --summary-json "$WORK/p$w.json" 2>"$WORK/p$w.log" || fail "photos, $w workers: exit $?"
    grep -o 'event=sample split=train epoch=[0-9]* index=[0-9]* hash=[0-9a-f]*' "$WORK/p$w.log" |
        sort >"$WORK/p$w.samples"
done
n=$(wc -l <"$WORK/p1.samples")
grep -q 'train=88 test=8 input=3x24x24 classes=4' "$WORK/p1.log" || fail "photos: wrong split or shape"
[ "$n" -eq $((2 * 7 * 12)) ] || fail "photos: $n samples logged, want 2 epochs x 7 steps x 12"
[ "$(cut -d' ' -f3-4 "$WORK/p1.samples" | sort -u | wc -l)" -eq "$n" ] || fail "photos: a sample logged twice"
cmp -s "$WORK/p1.samples" "$WORK/p2.samples" || fail "photos: 2 workers saw other pixels than 1"
cmp -s "$WORK/p1.samples" "$WORK/p3.samples" || fail "photos: 3 workers saw other pixels than 1"
[ "$(awk '{print $3, $4}' "$WORK/p1.samples" | sed 's/epoch=[0-9]* //' | sort -u | wc -l)" -gt 60 ] ||
    fail "photos: too few distinct samples"
pass "1, 2 and 3 workers: the same $n (epoch, sample, tensor hash) triples"
# the prefetch crosses the epoch's end (and the evaluation after it): only the first of the
# 2 x 7 training batches was not queued ahead
for w in 1 3; do
    grep -q 'event=done .* data_prefetched=13/14' "$WORK/p$w.log" ||
        fail "photos, $w workers: $(grep -o 'data_prefetched=[0-9/]*' "$WORK/p$w.log"), want 13/14"
done
pass "the next epoch's first batches were prefetched: 13 of 14 batches queued ahead"
# the augmentation draws differ between epochs: the hash of a sample seen in both changes
same=$(awk '{split($3,e,"=");split($4,i,"=");h[i[2]]=h[i[2]] " " $5} END{n=0; for(k in h){split(h[k],a," "); if(length(a)==2 && a[1]==a[2]) n++} print n}' "$WORK/p1.samples")
[ "$same" -lt 5 ] || fail "photos: $same samples got the same tensor in both epochs"
pass "augmented tensors change from epoch to epoch"

# --- train_dir / val_dir ------------------------------------------------------------------------
job_ini "$WORK/tv.ini" tv job.epochs=1 job.out="$WORK/tv.safetensors" model.hidden=16 \
    data.kind=folder data.dir="$WORK/coil" data.train_dir=train data.val_dir=val data.image_size=32 \
    data.resize=40 data.augment=flip optim.batch=8
"$GM" train --local "$WORK/tv.ini" --no-progress --no-tensorboard 2>"$WORK/tv.log" || fail "train_dir/val_dir: exit $?"
grep -q 'train=36 test=12 input=3x32x32 classes=3' "$WORK/tv.log" || fail "train_dir/val_dir: wrong sizes"
pass "train_dir and val_dir"

# --- a corrupt JPEG ---------------------------------------------------------------------------
expect_78() { # name what-to-find...: exit 78, one error line with each string, nothing written
    local name=$1 rc=0
    shift
    mkdir -p "$WORK/cwd-$name" # TensorBoard on: its runs/ folder would land here
    (cd "$WORK/cwd-$name" && "$GM" train --local "$WORK/$name.ini" --no-progress) 2>"$WORK/$name.log" || rc=$?
    [ $rc -eq 78 ] || fail "$name: exit $rc, want 78"
    [ "$(grep -c 'error' "$WORK/$name.log")" -eq 1 ] || fail "$name: want one error line"
    for s in "$@"; do grep 'error' "$WORK/$name.log" | grep -qF -- "$s" || fail "$name: no '$s' in the error"; done
    [ ! -e "$WORK/$name.safetensors" ] || fail "$name: weights written"
    [ -z "$(ls -A "$WORK/cwd-$name")" ] || fail "$name: left $(ls -A "$WORK/cwd-$name") behind"
    pass "$name: exit 78, $(grep error "$WORK/$name.log" | head -c 160)"
}
cp -r "$WORK/photos" "$WORK/bad"
bad=$(ls "$WORK"/bad/dress/*.jpg | head -n 3 | tail -n 1)
head -c "$(($(stat -c %s "$bad") / 2))" "$bad" >"$WORK/half" && mv "$WORK/half" "$bad"
photo_job "$WORK/corrupt.ini" corrupt data.dir="$WORK/bad"
expect_78 corrupt "$bad"
photo_job "$WORK/skip.ini" skip data.dir="$WORK/bad" data.skip_bad=true
"$GM" train --local "$WORK/skip.ini" --no-progress --no-tensorboard --simulate-workers 3 2>"$WORK/skip.log" || fail "skip_bad: exit $?"
[ "$(grep -c "event=data_skip path=$bad " "$WORK/skip.log")" -eq 3 ] || fail "skip_bad: not every rank named $bad"
[ "$(grep -c 'event=data_check .*skipped=1 ' "$WORK/skip.log")" -eq 3 ] || fail "skip_bad: the ranks' checks differ"
grep -q 'train=87 test=8' "$WORK/skip.log" || fail "skip_bad: the bad photo is still counted"
pass "skip_bad: each of 3 ranks leaves out $bad alone"
rm -rf "$WORK/bad"

# --- bad input ----------------------------------------------------------------------------------
cp -r "$WORK/coil" "$WORK/mis" && mkdir "$WORK/mis/val/extra"
cp "$(ls "$WORK"/coil/val/*/* | head -n 1)" "$WORK/mis/val/extra/"
job_ini "$WORK/mismatch.ini" mismatch job.out="$WORK/mismatch.safetensors" data.kind=folder \
    data.dir="$WORK/mis" data.train_dir=train data.val_dir=val data.image_size=16 optim.batch=4
expect_78 mismatch "$WORK/mis/val" "'extra' is only in"
mkdir -p "$WORK/empty" && cp -r "$WORK/coil/train/"* "$WORK/empty/" && mkdir "$WORK/empty/zzz"
job_ini "$WORK/emptyclass.ini" emptyclass job.out="$WORK/emptyclass.safetensors" data.kind=folder \
    data.dir="$WORK/empty" data.image_size=16 optim.batch=4
expect_78 emptyclass "$WORK/empty/zzz" "empty class"
rmdir "$WORK/empty/zzz" && printf 'GIF89a\001\000\001\000\000\000\000;' >"$WORK/empty/t-shirt/gif.jpg"
job_ini "$WORK/format.ini" format job.out="$WORK/format.safetensors" data.kind=folder \
    data.dir="$WORK/empty" data.image_size=16 optim.batch=4
expect_78 format "$WORK/empty/t-shirt/gif.jpg" "not a PNG or JPEG"
job_ini "$WORK/cache.ini" cache job.out="$WORK/cache.safetensors" data.kind=folder \
    data.dir="$WORK/coil/train" data.image_size=16 data.cache=1000T optim.batch=4
expect_78 cache "cache" "more than this machine's memory"
job_ini "$WORK/size0.ini" size0 job.out="$WORK/size0.safetensors" data.kind=folder \
    data.dir="$WORK/coil/train" data.image_size=0 data.augment=crop optim.batch=4
expect_78 size0 "$WORK/size0.ini" "image_size = 0"

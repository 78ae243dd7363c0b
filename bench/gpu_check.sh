#!/usr/bin/env bash
# Every check of the CUDA backend that needs a GPU, in one call that answers even when it is
# cut short: an inventory first, then the parts in order of importance, each step under its
# own timeout, a row per step as it ends (every FAIL row followed by the tail of its log),
# one table at the end, and every log packed into one archive in LOGDIR after each step.
# Exits 77 with the reason where no GPU answers, 1 when a check failed (or the CUDA
# libraries are missing), 0 when all that ran passed.
#
#   bench/gpu_check.sh                 the parts in PARTS (default: "tests train speed dist")
#   LOGDIR=DIR bench/gpu_check.sh      logs in DIR/gpu-check/, packed into
#                                      DIR/gpu-check-logs.tar.gz (default DIR: $OUT where
#                                      the device runner sets it, else a temporary folder)
#
# Inventory (printed first, kept in the archive as inventory.txt): the GPU's name, driver,
# memory and compute capability (nvidia-smi), PyTorch's, its CUDA's and its cuDNN's versions,
# where cuBLAS and cuDNN were found (bench/find_cuda_libs.sh: the toolkit, LD_LIBRARY_PATH,
# ld.so.cache, PyTorch's wheels in either layout, a find) and the files they resolve to, the
# toolkit's library folder, the binary's version.
#
# Parts, in order:
#   tests  test_cuda_ops (every op against the CPU table), test_cuda_model (whole models,
#          the gradient hook, the double-buffered input, out-of-memory messages),
#          test_trainer (device = cuda jobs against device = cpu), test_cuda_fake,
#          test_kernels_host, test_cuda_libs (the host-side checks, here with this
#          machine's libraries); UNITS picks and orders them
#   train  LeNet-5, 1 epoch, device = cpu and device = cuda in this run (same seed: the
#          accuracies within 0.5 points); ResNet-20 1 epoch and vgg7 2 epochs on the GPU
#          against the CPU figures of docs/BENCHMARKS.md (seed 1: 89.77% and 92.32%, within
#          1 point).  TRAIN_MODELS (default "lenet5 resnet20 vgg7") picks.
#   speed  bench/gpu_train_vs_torch.sh, one step per model of MODELS (default "lenet5
#          resnet20 vgg7"): gradmesh vs PyTorch samples/s on this GPU (ROUNDS, default 3)
#   dist   two agents on loopback on this machine train one job with device = cuda
#          (bench/dist_train.sh with DEVICE=cuda, gradmesh only, one round)
#   steps  whole training steps of the torchvision families at STEP_SIZE (224) and
#          STEP_BATCH (64) against torchvision's models on this GPU's PyTorch
#          (bench/models_vs_torch.py --device cuda; STEP_MODELS, default "resnet50
#          resnet18 mobilenet_v2 vgg16_bn"): median step ms, target >= 1.0x
#   full   (not in the default) the 30-epoch recipes on the GPU
#
# Time: each step gets STEP_TIMEOUT seconds (default 180; a step past it is killed and its
# row says so); with BUDGET=S (seconds, e.g. 520 under a `timeout 540`) a step never gets
# more than what is left of S less 15 s, and steps past it print SKIP, so the table and the
# archive are written before the caller's timeout.
#
# Environment: BUILD (default build: `make CUDA=1 unit` put the tests there), BIN
# (./gradmesh), DATA (/usr/share/datasets/fashion-mnist), PYTHON (the python3 with PyTorch),
# GM_BUNDLE: a folder made by bench/gpu_bundle.sh (binaries, their non-CUDA shared libraries,
# the data) for a GPU machine without this project's build dependencies; it is unpacked and
# used instead of BUILD, BIN and DATA.  The bundle's libraries and the CUDA library folders
# found reach only gradmesh's own binaries (through LD_LIBRARY_PATH set for them alone):
# python3 / PyTorch and nvidia-smi run with the machine's own environment.
# Dry runs (tests/integration/gpu_check_sim.sh): GPU_CHECK_DRY=1 goes on past "no GPU" and
# missing libraries; GPU_CHECK_FAIL=NAME runs the step NAME and then fails it (its log says
# so); GPU_CHECK_HANG=NAME runs `sleep` for it instead (the timeout's row); STEPS=REGEX runs
# only the steps whose name matches.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
parts=${PARTS:-tests train speed dist}
step_s=${STEP_TIMEOUT:-180}
budget=${BUDGET:-0}
tail_n=${TAIL_LINES:-20}
t_start=$SECONDS
logdir=${LOGDIR:-${OUT:-}}
[ -n "$logdir" ] || logdir=$(mktemp -d /tmp/gm-gpu-check.XXXXXX)
logs=$logdir/gpu-check
archive=$logdir/gpu-check-logs.tar.gz
mkdir -p "$logs" || exit 1
work=$(mktemp -d /tmp/gm-gpu-work.XXXXXX) # model outputs, the unpacked bundle: not logs

pack() { tar -C "$logdir" -czf "$archive.tmp" gpu-check 2>/dev/null && mv -f "$archive.tmp" "$archive"; }
finish() {
    local rc=$?
    pack
    echo "gpu_check: logs in $archive" >&2
    rm -rf "$work"
    exit $rc
}
trap finish EXIT
trap 'echo "gpu_check: stopped by a signal" >&2; exit 143' TERM INT
say() { echo "$*" | tee -a "$logs/inventory.txt" >&2; }

# ---- the binaries and the environment they (alone) get ---------------------------------
gm_ld=${LD_LIBRARY_PATH:-}
if [ -n "${GM_BUNDLE:-}" ]; then
    u=$work/bundle
    mkdir -p "$u/lib"
    tar -C "$u" -xJf "$GM_BUNDLE/bin.tar.xz" || { echo "gpu_check: cannot unpack $GM_BUNDLE/bin.tar.xz" >&2; exit 1; }
    tar -C "$u/lib" -xJf "$GM_BUNDLE/libs.tar.xz" || { echo "gpu_check: cannot unpack $GM_BUNDLE/libs.tar.xz" >&2; exit 1; }
    gm_ld="$u/lib${gm_ld:+:$gm_ld}"
    BIN=$u/gradmesh
    BUILD=$u/build
    DATA=$GM_BUNDLE/fashion-mnist
    [ -f "$u/VERSION" ] && say "bundle: $(cat "$u/VERSION")"
fi
BUILD=${BUILD:-build}
BIN=${BIN:-./gradmesh}
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
BIN=$(realpath -m "$BIN")
BUILD=$(realpath -m "$BUILD")
export DATA

# ---- inventory -------------------------------------------------------------------------
say "== gradmesh GPU check, $(date -u +%Y-%m-%dT%H:%M:%SZ), tree $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
say "host: $(uname -srm), $(nproc) cpus"
if command -v nvidia-smi >/dev/null 2>&1; then
    g=$(timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap \
        --format=csv,noheader 2>&1 | head -4)
    say "gpu: ${g:-nvidia-smi printed nothing}"
    gpu=$(head -1 <<<"$g" | cut -d, -f1)
else
    say "gpu: no nvidia-smi"
fi
py=""
for p in ${PYTHON:-} python3 /usr/bin/python3; do
    if v=$(timeout 90 "$p" -c 'import torch; print("torch %s, its CUDA %s, its cuDNN %s, sees a GPU: %s" % (torch.__version__, torch.version.cuda, torch.backends.cudnn.version(), torch.cuda.is_available()))' 2>/dev/null); then
        py=$p
        say "pytorch ($p): $v"
        break
    fi
done
[ -n "$py" ] || say "pytorch: no python3 imports torch (PYTHON)"
tk=""
for f in /usr/local/cuda/lib64/libcublas*.so.[0-9]* /usr/local/cuda/lib64/libcudnn*.so.[0-9]*; do
    [ -e "$f" ] && tk="$tk $(basename "$f")"
done
say "toolkit libraries (/usr/local/cuda/lib64):${tk:- none}"
libs_ok=1
found=$(PYTHON=$py bash bench/find_cuda_libs.sh) || libs_ok=0
cuda_dirs=""
while read -r so d; do
    if [ "$d" = - ]; then
        say "library $so: not found"
    else
        say "library $so: $d ($(basename "$(readlink -f "$d/$so")"))"
        case ":$cuda_dirs:" in *":$d:"*) ;; *) cuda_dirs="${cuda_dirs:+$cuda_dirs:}$d" ;; esac
    fi
done <<<"$found"
gm_ld="${cuda_dirs}${gm_ld:+${cuda_dirs:+:}$gm_ld}"
gm() { LD_LIBRARY_PATH=$gm_ld "$@"; } # runs one of gradmesh's binaries
# BIN for the scripts that start it themselves (speed, dist): a wrapper with that env
mkdir -p "$work/bin"
printf '#!/bin/sh\nLD_LIBRARY_PATH=%q exec %q "$@"\n' "$gm_ld" "$BIN" >"$work/bin/gradmesh"
chmod +x "$work/bin/gradmesh"
if gm "$BIN" help >/dev/null 2>&1; then starts=starts; else starts="does NOT start"; fi
say "binary: $BIN, sha256 $(sha256sum "$BIN" 2>/dev/null | cut -c1-12), $starts"
if [ -x "$BIN" ] && gm ldd "$BIN" 2>/dev/null | grep 'not found' >"$work/ldd"; then
    say "binary: misses $(tr -s ' \t\n' ' ' <"$work/ldd")(GM_BUNDLE: bench/gpu_bundle.sh)"
    libs_ok=0
fi

# ---- no GPU: say why, stop (a dry run goes on) --------------------------------------------
if [ ! -x "$BUILD/tests/test_cuda_ops" ]; then
    say "probe: $BUILD/tests/test_cuda_ops not built (make CUDA=1 unit, or GM_BUNDLE)"
    [ -n "${GPU_CHECK_DRY:-}" ] || exit 1
else
    gm timeout 60 "$BUILD/tests/test_cuda_ops" --probe >"$logs/probe.log" 2>&1
    prc=$?
    say "probe: $(tail -1 "$logs/probe.log") (exit $prc)"
    if [ $prc -eq 77 ] && [ -z "${GPU_CHECK_DRY:-}" ]; then
        echo "gpu_check: SKIP: $(grep -m1 SKIP "$logs/probe.log")"
        exit 77
    fi
fi
if [ $libs_ok = 0 ] && [ -z "${GPU_CHECK_DRY:-}" ]; then
    echo "gpu_check: FAIL: cuBLAS or cuDNN not found (above); the tests would only say so" >&2
    exit 1
fi

# ---- steps and rows --------------------------------------------------------------------
rows=()
failed=0
row() { # check result detail [log]
    local line
    line=$(printf '%-36s %-5s %s' "$1" "$2" "$3")
    rows+=("$line")
    echo "$line" >&2
    if [ "$2" = FAIL ]; then
        failed=1
        if [ -n "${4:-}" ] && [ -s "$4" ]; then
            tail -n "$tail_n" "$4" | sed 's/^/    | /' >&2
            rows+=("$(tail -n 8 "$4" | sed 's/^/    | /')")
        fi
    fi
    pack
}
# 0 when STEPS (a regex) leaves the step NAME out
wanted() { [ -z "${STEPS:-}" ] || grep -qE "$STEPS" <<<"$1"; }
# Runs a step: step NAME LOG COMMAND...; its exit status, 124 when timed out, 200 when STEPS
# leaves it out, 201 when BUDGET has no time left for it.
step() {
    local name=$1 log=$2 t=$step_s left
    shift 2
    wanted "$name" || return 200
    if [ "$budget" -gt 0 ]; then
        left=$((budget - (SECONDS - t_start) - 15))
        [ "$left" -ge 20 ] || return 201
        [ "$left" -ge "$t" ] || t=$left
    fi
    [ "${GPU_CHECK_HANG:-}" != "$name" ] || set -- sleep 100000
    echo "\$ $*   (timeout ${t}s)" >"$log"
    timeout -k 10 "$t" "$@" >>"$log" 2>&1
    local rc=$?
    [ $rc -eq 124 ] || [ $rc -eq 137 ] && echo "gpu_check: killed after ${t}s" >>"$log"
    if [ "${GPU_CHECK_FAIL:-}" = "$name" ]; then
        echo "gpu_check: FAIL forced by GPU_CHECK_FAIL=$name (the step itself exited $rc)" >>"$log"
        [ $rc -ne 0 ] || rc=1
    fi
    return $rc
}
# a row for a step that did not pass: timed out, left out, failed
other() { # name rc log detail
    case $2 in
    200) ;;
    201) row "$1" SKIP "no time left in BUDGET=$budget" ;;
    124 | 137) row "$1" FAIL "timed out (STEP_TIMEOUT=$step_s)" "$3" ;;
    *) row "$1" FAIL "exit $2; $4" "$3" ;;
    esac
}

unit() { # name
    local t=$BUILD/tests/$1 log=$logs/$1.log rc
    wanted "$1" || return 0
    if [ ! -x "$t" ]; then
        row "$1" FAIL "not built ($t): make CUDA=1 unit"
        return 1
    fi
    # test_cuda_model logs cuDNN's algorithm and timing per convolution shape
    # (event=cuda_conv) at debug, to tell a wrong kernel from a less exact algorithm
    step "$1" "$log" env LD_LIBRARY_PATH="$gm_ld" GRADMESH_LOG_LEVEL=debug "$t"
    rc=$?
    case $rc in
    0) row "$1" PASS "$(tail -1 "$log")" ;;
    77) row "$1" SKIP "$(grep -m1 SKIP "$log")" ;;
    *) other "$1" $rc "$log" "$(grep -m3 FAIL "$log" | tr '\n' ' ')" ;;
    esac
    return $rc
}

# a job file from docs/jobs/NAME.ini with the given device and epochs, DATA, out in $work
job() { # name device epochs -> path
    local out=$work/$1-$2-$3.ini
    sed -e "s|^dir *=.*|dir  = $DATA|" -e "s|^epochs *=.*|epochs = $3|" \
        -e "s|^out *=.*|out = $work/$1-$2-$3.safetensors|" \
        -e "s|^\[job\]|[job]\ndevice = $2\nlog_every = 100000|" "docs/jobs/$1.ini" >"$out"
    echo "$out"
}
# trains; "accuracy samples_per_s device" into $work/NAME-DEV-EPOCHS.res; the step's status
train() { # name device epochs
    local j s log=$logs/$1-$2-$3.log rc
    j=$(job "$1" "$2" "$3")
    s=$work/$1-$2-$3.json
    step "train $1 $2 $3" "$log" "$work/bin/gradmesh" train --local "$j" --no-progress \
        --no-tensorboard --summary-json "$s"
    rc=$?
    [ $rc -eq 0 ] || return $rc
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); \
print('%.2f %.0f %s' % (d['test_accuracy'], d['samples_per_s'], d['device']))" "$s" \
        >"$work/$1-$2-$3.res" 2>>"$log"
}
# a GPU run against a CPU accuracy: PASS within tol points
versus() { # label name epochs cpu_acc tol
    local rc r
    train "$2" cuda "$3"
    rc=$?
    if [ $rc -ne 0 ]; then
        other "$1" $rc "$logs/$2-cuda-$3.log" "the run failed"
        return
    fi
    read -r acc sps dev <"$work/$2-cuda-$3.res"
    r=$(awk -v a="$acc" -v b="$4" -v t="$5" 'BEGIN { d = a - b; if (d < 0) d = -d; print ((d <= t + 0) ? "PASS" : "FAIL") }')
    [ "$dev" != cpu ] || r=FAIL
    row "$1" "$r" "$dev $acc% vs cpu $4% (seed 1, within $5); $sps samples/s" "$logs/$2-cuda-$3.log"
}
# a GPU run against a bar
reaches() { # label name epochs bar
    local rc
    train "$2" cuda "$3"
    rc=$?
    if [ $rc -ne 0 ]; then
        other "$1" $rc "$logs/$2-cuda-$3.log" "the run failed"
        return
    fi
    read -r acc sps dev <"$work/$2-cuda-$3.res"
    row "$1" "$(awk -v a="$acc" -v b="$4" 'BEGIN { print ((a + 0 >= b + 0) ? "PASS" : "FAIL") }')" \
        "$dev $acc% (bar $4%, seed 1); $sps samples/s" "$logs/$2-cuda-$3.log"
}

for part in $parts; do
    echo "== part $part ($((SECONDS - t_start)) s in)" >&2
    case $part in
    tests)
        for t in ${UNITS:-test_cuda_ops test_cuda_model test_trainer test_cuda_fake test_kernels_host test_cuda_libs}; do
            unit "$t"
            if [ "$t" = test_trainer ] && grep -q '^skip test_cuda_trainer' "$logs/test_trainer.log" 2>/dev/null; then
                row "  test_trainer: device = cuda" FAIL "$(grep -m1 '^skip test_cuda_trainer' \
                    "$logs/test_trainer.log")" "$logs/test_trainer.log"
            fi
        done
        ;;
    train)
        if [ ! -e "$DATA/train-images-idx3-ubyte.gz" ] && [ ! -e "$DATA/train-images-idx3-ubyte" ]; then
            row "train" SKIP "no Fashion-MNIST in $DATA (set DATA or GM_BUNDLE)"
            continue
        fi
        for m in ${TRAIN_MODELS:-lenet5 resnet20 vgg7}; do
            case $m in
            lenet5)
                train fmnist-lenet5 cpu 1
                rc=$?
                if [ $rc -eq 0 ]; then
                    read -r cacc _ <"$work/fmnist-lenet5-cpu-1.res"
                    versus "lenet5 1 epoch, cuda vs cpu" fmnist-lenet5 1 "$cacc" 0.5
                else
                    other "lenet5 1 epoch on the cpu" $rc "$logs/fmnist-lenet5-cpu-1.log" "the run failed"
                fi
                ;;
            resnet20) versus "resnet20 1 epoch vs recorded cpu" fmnist-resnet20 1 89.77 1.0 ;;
            vgg7) versus "vgg7 2 epochs vs recorded cpu" fmnist-vgg7 2 92.32 1.0 ;;
            *) row "train $m" FAIL "no recorded CPU figure for $m (TRAIN_MODELS)" ;;
            esac
        done
        ;;
    full)
        reaches "vgg7 recipe, 30 epochs" fmnist-vgg7 30 92.0
        reaches "resnet20 recipe, 30 epochs" fmnist-resnet20 30 92.5
        ;;
    speed)
        for m in ${MODELS:-lenet5 resnet20 vgg7}; do
            log=$logs/speed-$m.log
            step "speed $m" "$log" env MODELS="$m" PYTHON="$py" bash bench/gpu_train_vs_torch.sh \
                "$work/bin/gradmesh"
            rc=$?
            if [ $rc -eq 0 ] && read -r model gm pt ratio target < <(grep -E "^$m " "$log"); then
                ok=$(awk -v r="${ratio%x}" -v t="${target#>=}" 'BEGIN { print ((r + 0 >= t + 0) ? "PASS" : "FAIL") }')
                row "speed $model vs pytorch" "$ok" "$gm vs $pt samples/s: $ratio (target $target)" "$log"
                sed -n '/^(median/,$p' "$log" >&2
            elif [ $rc -eq 77 ] && grep -q 'trained on the CPU' "$log"; then
                row "speed $m vs pytorch" FAIL "a GPU answers, but gradmesh trained on the CPU" "$log"
            elif [ $rc -eq 77 ]; then
                row "speed $m vs pytorch" SKIP "$(grep -m1 SKIP "$log")"
            else
                other "speed $m vs pytorch" $rc "$log" "$(tail -1 "$log")"
            fi
        done
        ;;
    dist)
        log=$logs/dist.log
        step "dist" "$log" env KEEP=1 DEVICE=cuda IMPLS=gradmesh ROUNDS=1 bash bench/dist_train.sh \
            "$work/bin/gradmesh"
        rc=$?
        kept=$(sed -n 's/^kept //p' "$log" | tail -1)
        if [ -n "$kept" ] && [ -d "$kept" ]; then
            mkdir -p "$logs/dist"
            cp "$kept"/*.log "$kept"/*.conf "$logs/dist/" 2>/dev/null
            rm -rf "$kept"
        fi
        if [ $rc -eq 0 ]; then
            ncuda=$(cat "$logs"/dist/d0.log "$logs"/dist/d1.log 2>/dev/null | grep -c 'event=device device=cuda')
            row "dist: 2 agents, device = cuda" "$([ "$ncuda" -ge 2 ] && echo PASS || echo FAIL)" \
                "$(grep -m1 '^gradmesh ' "$log"); $ncuda ranks took the GPU" "$log"
        else
            other "dist: 2 agents, device = cuda" $rc "$log" "$(tail -1 "$log")"
        fi
        ;;
    steps)
        for m in ${STEP_MODELS:-resnet50 resnet18 mobilenet_v2 vgg16_bn}; do
            log=$logs/steps-$m.log
            step "steps $m" "$log" env GM_LD_LIBRARY_PATH="$gm_ld" "$py" bench/models_vs_torch.py \
                "$BUILD/bench/model_step" --device cuda --threads 1 --models "$m" \
                --size "${STEP_SIZE:-224}" --batch "${STEP_BATCH:-64}" --warmup 3 --steps 10 --rounds 1
            rc=$?
            if [ $rc -eq 0 ] && r=$(grep -E "^$m " "$log"); then
                ratio=$(sed -n 's/.*| ratio *\([0-9.]*\).*/\1/p' <<<"$r")
                row "steps $m ${STEP_SIZE:-224}px b${STEP_BATCH:-64}" \
                    "$(awk -v r="$ratio" 'BEGIN { print ((r + 0 >= 1.0) ? "PASS" : "FAIL") }')" \
                    "$(sed 's/  */ /g' <<<"$r" | cut -c1-160)" "$log"
            else
                other "steps $m" $rc "$log" "$(tail -1 "$log")"
            fi
        done
        ;;
    *)
        echo "gpu_check: unknown part $part (tests train speed dist steps full)" >&2
        exit 2
        ;;
    esac
done

{
    echo
    echo "gradmesh GPU checks on ${gpu:-?} ($(git rev-parse --short HEAD 2>/dev/null || echo ?)), $((SECONDS - t_start)) s"
    printf '%-36s %-5s %s\n' check result detail
    for r in "${rows[@]}"; do
        echo "$r"
    done
} | tee "$logs/table.txt"
exit $failed

#!/usr/bin/env bash
# Every check of the CUDA backend that needs a GPU, in one run, ending with one table
# (check, PASS / FAIL / SKIP, figures).  Exits 77 with the reason where no GPU answers, 1 when
# a check fails, 0 when all that ran passed.
#
#   bench/gpu_check.sh                 the parts in PARTS (default: "tests train speed dist")
#   PARTS="tests" bench/gpu_check.sh   one part per call, to stay inside a time limit
#
# Parts:
#   tests  test_cuda_ops (every op against the CPU table), test_cuda_model (whole models,
#          the gradient hook, the double-buffered input, out-of-memory messages),
#          test_trainer (device = cuda jobs against device = cpu, the regroup paths on the
#          GPU), test_kernels_host (the custom kernels' host twins)
#   train  LeNet-5, 1 epoch, device = cpu and device = cuda in this run (same seed: the
#          accuracies within 0.5 points); ResNet-20 1 epoch and vgg7 2 epochs on the GPU
#          against the CPU figures of docs/BENCHMARKS.md (seed 1: 89.77% and 92.32%, within
#          1 point)
#   full   the 30-epoch recipes on the GPU (docs/jobs/fmnist-vgg7.ini >= 92%,
#          fmnist-resnet20.ini >= 92.5%)
#   speed  bench/gpu_train_vs_torch.sh: gradmesh vs PyTorch samples/s on this GPU
#          (ROUNDS, default 3)
#   dist   two agents on loopback on this machine train one job with device = cuda
#          (bench/dist_train.sh with DEVICE=cuda, gradmesh only, one round): both take the
#          GPU and the job finishes
#
# Environment: BUILD (default build: `make CUDA=1 unit` put the tests there), BIN (./gradmesh),
# DATA (/usr/share/datasets/fashion-mnist), LOGDIR (every log; default a temporary folder
# that is kept), GM_BUNDLE: a folder made by bench/gpu_bundle.sh on a machine with this
# project's build dependencies (binaries, the shared libraries they need, the data), for a
# GPU machine that has none of them: it is unpacked and used instead of BUILD, BIN and DATA.
# cuDNN and cuBLAS come from /usr/local/cuda/lib64, or else from the nvidia-cudnn /
# nvidia-cublas Python packages of a python3 there (PyTorch's own).
set -uo pipefail
cd "$(dirname "$0")/.."
parts=${PARTS:-tests train speed dist}
logdir=${LOGDIR:-$(mktemp -d /tmp/gm-gpu-check.XXXXXX)}
mkdir -p "$logdir"

if [ -n "${GM_BUNDLE:-}" ]; then
    u=/tmp/gm-bundle
    rm -rf "$u" && mkdir -p "$u/lib"
    tar -C "$u" -xJf "$GM_BUNDLE/bin.tar.xz" || exit 1
    tar -C "$u/lib" -xJf "$GM_BUNDLE/libs.tar.xz" || exit 1
    export LD_LIBRARY_PATH="$u/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    BIN=$u/gradmesh
    BUILD=$u/build
    DATA=$GM_BUNDLE/fashion-mnist
fi
BUILD=${BUILD:-build}
BIN=${BIN:-./gradmesh}
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
export DATA

# cuBLAS and cuDNN are dlopen()ed by the binary (train/kernels/cuda_libs.h): from the build's
# CUDA library directory, then LD_LIBRARY_PATH and ld.so.cache.  Where that finds none of
# them, take PyTorch's wheels' copies.
cuda_libs="libcublasLt.so.13 libcublas.so.13 libcudnn.so.9"
lib_found() { # soname: in the toolkit folder, LD_LIBRARY_PATH or ld.so.cache
    local d
    local llp=${LD_LIBRARY_PATH:-}
    for d in ${CUDA_LIBDIR:-/usr/local/cuda/lib64} ${llp//:/ }; do
        [ -e "$d/$1" ] && return 0
    done
    ldconfig -p 2>/dev/null | grep -q "^[[:space:]]*$1 "
}
missing_libs() {
    local l
    for l in $cuda_libs; do lib_found "$l" || echo "$l"; done
}
if [ -n "$(missing_libs)" ]; then
    for py in python3 /usr/bin/python3; do
        for pkg in nvidia.cudnn nvidia.cublas; do
            d=$("$py" -c "import $pkg, os; print(os.path.join(list($pkg.__path__)[0], 'lib'))" \
                2>/dev/null) || continue
            [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        done
    done
fi
if [ -n "$(missing_libs)" ]; then
    echo "gpu_check: no $(missing_libs | tr '\n' ' ')for $BIN (GM_BUNDLE: bench/gpu_bundle.sh)" >&2
    exit 1
fi
if ldd "$BIN" 2>/dev/null | grep 'not found'; then
    echo "gpu_check: $BIN misses the libraries above (GM_BUNDLE: bench/gpu_bundle.sh)" >&2
    exit 1
fi

rows=()
failed=0
row() { # check result detail
    rows+=("$(printf '%-34s %-5s %s' "$1" "$2" "$3")")
    [ "$2" = FAIL ] && failed=1
    printf '%-34s %-5s %s\n' "$1" "$2" "$3" >&2
}
# runs a unit test binary; row from its exit status and its last line
unit() { # name
    local t=$BUILD/tests/$1 rc
    if [ ! -x "$t" ]; then
        row "$1" FAIL "not built ($t): make CUDA=1 unit"
        return 1
    fi
    "$t" >"$logdir/$1.log" 2>&1
    rc=$?
    case $rc in
    0) row "$1" PASS "$(tail -1 "$logdir/$1.log")" ;;
    77) row "$1" SKIP "$(grep -m1 SKIP "$logdir/$1.log")" ;;
    *) row "$1" FAIL "exit $rc; $(grep -m3 FAIL "$logdir/$1.log" | tr '\n' ' ')" ;;
    esac
    return $rc
}

# no GPU: say why, skip everything
if [ -x "$BUILD/tests/test_cuda_ops" ]; then
    "$BUILD/tests/test_cuda_ops" >"$logdir/probe.log" 2>&1
    if [ $? -eq 77 ]; then
        echo "gpu_check: SKIP: $(grep -m1 SKIP "$logdir/probe.log")"
        exit 77
    fi
fi
gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
echo "gpu_check: GPU ${gpu:-?}; logs in $logdir" >&2

# a job file from docs/jobs/NAME.ini with the given device and epochs, DATA, out in LOGDIR
job() { # name device epochs -> path
    local out=$logdir/$1-$2-$3.ini
    sed -e "s|^dir *=.*|dir  = $DATA|" -e "s|^epochs *=.*|epochs = $3|" \
        -e "s|^out *=.*|out = $logdir/$1-$2-$3.safetensors|" \
        -e "s|^\[job\]|[job]\ndevice = $2\nlog_every = 100000|" "docs/jobs/$1.ini" >"$out"
    echo "$out"
}
# trains; prints "accuracy samples_per_s device", or nothing on failure
train() { # name device epochs
    local j s
    j=$(job "$1" "$2" "$3")
    s=$logdir/$1-$2-$3.json
    "$BIN" train --local "$j" --no-progress --no-tensorboard --summary-json "$s" \
        >"$logdir/$1-$2-$3.log" 2>&1 || return 1
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); \
print('%.2f %.0f %s' % (d['test_accuracy'], d['samples_per_s'], d['device']))" "$s"
}
# a GPU run against a CPU accuracy: PASS within tol points
versus() { # label name epochs cpu_acc tol
    local r
    if ! r=$(train "$2" cuda "$3"); then
        row "$1" FAIL "the run failed: $logdir/$2-cuda-$3.log"
        return
    fi
    set -- "$1" "$2" "$3" "$4" "$5" $r
    local ok
    ok=$(awk -v a="$6" -v b="$4" -v t="$5" 'BEGIN { d = a - b; if (d < 0) d = -d; print ((d <= t + 0) ? 1 : 0) }')
    row "$1" "$([ "$ok" = 1 ] && [ "$8" != cpu ] && echo PASS || echo FAIL)" \
        "$8 $6% vs cpu $4% (seed 1, within $5); $7 samples/s"
}
# a GPU run against a bar
reaches() { # label name epochs bar
    local r
    if ! r=$(train "$2" cuda "$3"); then
        row "$1" FAIL "the run failed: $logdir/$2-cuda-$3.log"
        return
    fi
    set -- "$1" "$2" "$3" "$4" $r
    row "$1" "$(awk -v a="$5" -v b="$4" 'BEGIN { print ((a + 0 >= b + 0) ? "PASS" : "FAIL") }')" \
        "$7 $5% (bar $4%, seed 1); $6 samples/s"
}

for part in $parts; do
    case $part in
    tests)
        unit test_cuda_ops
        unit test_cuda_model
        unit test_trainer
        if grep -q '^skip test_cuda_trainer' "$logdir/test_trainer.log" 2>/dev/null; then
            row "  test_trainer: device = cuda" FAIL "$(grep -m1 '^skip test_cuda_trainer' \
                "$logdir/test_trainer.log")"
        fi
        unit test_kernels_host
        ;;
    train)
        if [ ! -e "$DATA/train-images-idx3-ubyte.gz" ] && [ ! -e "$DATA/train-images-idx3-ubyte" ]; then
            row "train" SKIP "no Fashion-MNIST in $DATA (set DATA or GM_BUNDLE)"
            continue
        fi
        if c=$(train fmnist-lenet5 cpu 1); then
            versus "lenet5 1 epoch, cuda vs cpu" fmnist-lenet5 1 "${c%% *}" 0.5
        else
            row "lenet5 1 epoch on the cpu" FAIL "$logdir/fmnist-lenet5-cpu-1.log"
        fi
        versus "resnet20 1 epoch vs recorded cpu" fmnist-resnet20 1 89.77 1.0
        versus "vgg7 2 epochs vs recorded cpu" fmnist-vgg7 2 92.32 1.0
        ;;
    full)
        reaches "vgg7 recipe, 30 epochs" fmnist-vgg7 30 92.0
        reaches "resnet20 recipe, 30 epochs" fmnist-resnet20 30 92.5
        ;;
    speed)
        if bash bench/gpu_train_vs_torch.sh "$BIN" >"$logdir/speed.log" 2>"$logdir/speed.err"; then
            while read -r model gm pt ratio target; do
                ok=$(awk -v r="${ratio%x}" -v t="${target#>=}" 'BEGIN { print ((r + 0 >= t + 0) ? "PASS" : "FAIL") }')
                row "speed $model vs pytorch" "$ok" "$gm vs $pt samples/s: $ratio (target $target)"
            done < <(grep -E '^(lenet5|vgg7|resnet20) ' "$logdir/speed.log")
            sed -n '/^(median/,$p' "$logdir/speed.log" >&2
        else
            row "speed vs pytorch" FAIL "$(tail -3 "$logdir/speed.err" "$logdir/speed.log" | tr '\n' ' ')"
        fi
        ;;
    dist)
        if KEEP=1 DEVICE=cuda IMPLS=gradmesh ROUNDS=1 bash bench/dist_train.sh "$BIN" \
            >"$logdir/dist.log" 2>&1; then
            kept=$(sed -n 's/^kept //p' "$logdir/dist.log" | tail -1)
            ncuda=$(cat "$kept"/d0.log "$kept"/d1.log 2>/dev/null | grep -c 'event=device device=cuda')
            row "dist: 2 agents, device = cuda" "$([ "$ncuda" -ge 2 ] && echo PASS || echo FAIL)" \
                "$(grep -m1 '^gradmesh ' "$logdir/dist.log"); $ncuda ranks took the GPU"
        else
            row "dist: 2 agents, device = cuda" FAIL "$(tail -3 "$logdir/dist.log" | tr '\n' ' ')"
        fi
        ;;
    *)
        echo "gpu_check: unknown part $part (tests train full speed dist)" >&2
        exit 2
        ;;
    esac
done

echo
echo "gradmesh GPU checks on ${gpu:-?} ($(git rev-parse --short HEAD 2>/dev/null || echo ?))"
printf '%-34s %-5s %s\n' check result detail
for r in "${rows[@]}"; do
    echo "$r"
done
echo "logs: $logdir"
exit $failed

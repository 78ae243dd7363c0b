#!/usr/bin/env bash
# The CUDA build where cuBLAS and cuDNN are absent (train/kernels/cuda_libs.h): they are not
# load-time dependencies, so the binary starts and trains on the CPU without them.
#  1. ldd: the binary needs neither libcublas nor libcudnn (cudart is linked statically);
#  2. in a user + mount namespace, tmpfs over every directory that holds them (the build's
#     CUDA library directory and the ones in ld.so.cache) and LD_LIBRARY_PATH empty:
#     - `gradmesh help` runs;
#     - the loader's own test (test_cuda_libs, GM_TEST_CUDA_LIBS=missing) fails to load them
#       with an error naming libcublasLt.so.13, the build's directory and dlerror()'s text;
#     - `train --local` with device = auto trains on the CPU and logs event=device
#       device=cpu setting=auto with the reason: the library (where a GPU answers) or the
#       driver (where none does, as on CI);
#     - device = cuda fails, exit 78, with an error line giving the same reason.
# Skips (77) in a build without the CUDA backend or where unprivileged namespaces are off.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/integration/lib.bash
libtest=build/tests/test_cuda_libs
[ "$(nm "$GM" 2>/dev/null | grep -c ' cudaGetDeviceCount$')" -ge 1 ] || { echo "skip: $GM has no CUDA backend"; exit 77; }
unshare -rm true 2>/dev/null || { echo "skip: unshare -rm (user and mount namespaces) not allowed"; exit 77; }

# --- 1. no load-time dependency --------------------------------------------------
if ldd "$GM" | grep -E 'libcublas|libcudnn'; then fail "$GM links cuBLAS or cuDNN at load time"; fi
pass "ldd $GM lists neither libcublas nor libcudnn"

# --- 2. the libraries hidden -----------------------------------------------------
libdir=$(strings -a "$GM" | grep -m1 -E '^/.*/lib(64)?$' || true)
hide=$( { [ -n "$libdir" ] && echo "$libdir"; ldconfig -p | awk '/libcu(blas|dnn)/ {print $NF}' | xargs -r -n1 dirname; } |
        xargs -r -n1 realpath -e 2>/dev/null | sort -u)
[ -n "$hide" ] || { echo "skip: no directory with cuBLAS or cuDNN to hide"; exit 77; }
echo "hiding: $(echo $hide)"

python3 - "$WORK" <<'PY'
import os, random, struct, sys, zlib
root, rnd = sys.argv[1], random.Random(3)
def png(path, w, h, px):
    raw = b"".join(b"\0" + bytes(px[y * w:(y + 1) * w]) for y in range(h))
    chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
for k, cls in enumerate(["left", "right"]):
    os.makedirs(f"{root}/data/{cls}")
    for i in range(40):
        px = [rnd.randrange(0, 60) for _ in range(64)]
        for y in range(8):
            for x in range(4 * k, 4 * k + 4):
                px[y * 8 + x] = 200
        png(f"{root}/data/{cls}/{i:02d}.png", 8, 8, px)
PY
for dev in auto cuda; do
    job_ini "$WORK/$dev.ini" hidden-$dev job.epochs=2 job.device=$dev job.out="$WORK/$dev.safetensors" model.hidden=16 \
        data.kind=folder data.dir="$WORK/data" data.channels=1 data.test_split=0.25 optim.name=sgd optim.lr=0.05 \
        optim.batch=8
done

# Runs inside the namespace: hides the directories, then checks.
cat >"$WORK/inside.sh" <<'IN'
set -u
tmp=$1 bin=$2 libtest=$3; shift 3
for d in "$@"; do mount -t tmpfs none "$d" || exit 90; done
export LD_LIBRARY_PATH=
ls "$@" | grep -qE 'libcu(blas|dnn)' && exit 91
"$bin" help >"$tmp/help.out" 2>&1; echo "help=$?"
if [ -x "$libtest" ]; then GM_TEST_CUDA_LIBS=missing "$libtest" >"$tmp/libtest.out" 2>&1; echo "libtest=$?"; fi
"$bin" train --local "$tmp/auto.ini" --no-progress --summary-json "$tmp/auto.json" 2>"$tmp/auto.log"; echo "auto=$?"
"$bin" train --local "$tmp/cuda.ini" --no-progress 2>"$tmp/cuda.log"; echo "cuda=$?"
IN
# shellcheck disable=SC2086
unshare -rm bash "$WORK/inside.sh" "$WORK" "$(realpath "$GM")" "$(realpath -m "$libtest")" $hide >"$WORK/rc" 2>&1 ||
    { cat "$WORK/rc"; fail "namespace setup failed"; }
cat "$WORK/rc"
grep -qx 'help=0' "$WORK/rc" || { cat "$WORK/help.out"; fail "gradmesh help fails without the CUDA libraries"; }
pass "gradmesh help runs without them"
if [ -x "$libtest" ]; then
    grep -qx 'libtest=0' "$WORK/rc" || { cat "$WORK/libtest.out"; fail "the loader's missing-library checks failed"; }
    pass "the loader says: $(grep 'hidden:' "$WORK/libtest.out" | sed 's/^ *hidden: //')"
fi
grep -qx 'auto=0' "$WORK/rc" || { cat "$WORK/auto.log"; fail "device = auto did not train on the CPU"; }
line=$(grep 'event=device device=cpu setting=auto' "$WORK/auto.log") || { cat "$WORK/auto.log"; fail "no fallback logged"; }
acc=$(python3 -c "import json;print(json.load(open('$WORK/auto.json'))['test_accuracy'])")
python3 -c "import sys; sys.exit(0 if $acc >= 90 else 1)" || { cat "$WORK/auto.log"; fail "auto on the CPU: accuracy $acc < 90"; }
if nvidia-smi -L >/dev/null 2>&1; then
    want=libcublasLt.so
else
    want='NVIDIA driver' # "no NVIDIA driver (libcuda.so.1 not found)" or an old driver's version
fi
grep -q "$want" <<<"$line" || fail "the fallback does not name the $want: $line"
pass "device = auto trained on the CPU ($acc%) and logged: $line"
grep -qx 'cuda=78' "$WORK/rc" || { cat "$WORK/cuda.log"; fail "device = cuda: want exit 78 (the device cannot be had)"; }
err=$(grep '^error: ' "$WORK/cuda.log" | grep "$want") || { cat "$WORK/cuda.log"; fail "device = cuda: no error naming the $want"; }
pass "device = cuda fails: $err"

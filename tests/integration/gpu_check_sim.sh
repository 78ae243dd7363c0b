#!/usr/bin/env bash
# bench/gpu_check.sh on a simulated GPU machine's layout, without a GPU (issue 22, done-when 2):
#  1. the library finder (bench/find_cuda_libs.sh) on fake trees: PyTorch's CUDA 13 wheels
#     (site-packages/nvidia/cu13/lib, nvidia/cudnn/lib), the CUDA 12 ones
#     (nvidia/cublas/lib), a file only `find` reaches; and an ld.so.cache reader that prints
#     70 KB after the line wanted, where `ldconfig -p | grep -q` under pipefail read a
#     present library as missing (SIGPIPE);
#  2. in a user + mount namespace: the toolkit's library folder hidden (ld.so.cache still
#     names its files: a stale cache), the real cuBLAS and cuDNN files bound into a fake
#     wheel tree on PYTHONPATH, LD_LIBRARY_PATH empty, a stand-in nvidia-smi and python3
#     that write down the LD_LIBRARY_PATH they were given:
#     - gpu_check.sh prints its inventory with the libraries found in the wheel tree and
#       ends on "no GPU answers", exit 77 (not 1), with the log archive in LOGDIR;
#     - a dry run (GPU_CHECK_DRY=1) runs test_cuda_libs, which must load cuBLAS and cuDNN
#       from the wheel tree, and a step failed on purpose (GPU_CHECK_FAIL): exit 1, its FAIL
#       row followed by the tail of its log, every log in the archive;
#     - nvidia-smi and python3 got none of the LD_LIBRARY_PATH meant for gradmesh's binaries.
# Skips (77) in a build without the CUDA backend, or where unprivileged namespaces are off.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
bin=${GM_BIN:-./gradmesh}
build=${GM_BUILD:-build}
[ "$(nm "$bin" 2>/dev/null | grep -c ' cudaGetDeviceCount$')" -ge 1 ] || { echo "skip: $bin has no CUDA backend"; exit 77; }
for t in test_cuda_ops test_cuda_libs test_kernels_host; do
    [ -x "$build/tests/$t" ] || { echo "skip: $build/tests/$t not built (make CUDA=1 unit)"; exit 77; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
sonames="libcublasLt.so.13 libcublas.so.13 libcudnn.so.9"

# --- 1. the finder on fake trees ---------------------------------------------------------
mkdir -p "$tmp/w13/nvidia/cu13/lib" "$tmp/w13/nvidia/cudnn/lib" "$tmp/w12/nvidia/cublas/lib" \
    "$tmp/w12/nvidia/cudnn/lib" "$tmp/odd/opt/x" "$tmp/none"
touch "$tmp/w13/nvidia/cu13/lib/"{libcublasLt.so.13,libcublas.so.13} "$tmp/w13/nvidia/cudnn/lib/libcudnn.so.9" \
    "$tmp/w12/nvidia/cublas/lib/"{libcublasLt.so.13,libcublas.so.13} "$tmp/w12/nvidia/cudnn/lib/libcudnn.so.9" \
    "$tmp/odd/opt/x/libcudnn.so.9"
finder() { # PYTHONPATH FIND_ROOTS [LDCONFIG]
    env LDCONFIG="${3:-true}" CUDA_LIBDIR=/nonexistent LD_LIBRARY_PATH= PYTHONPATH="$1" \
        FIND_ROOTS="$2" FIND_SECONDS=10 bash bench/find_cuda_libs.sh $sonames
}
out=$(finder "$tmp/w13" "$tmp/none") || fail "CUDA 13 wheel layout: not all found: $out"
grep -qx "libcublas.so.13 $tmp/w13/nvidia/cu13/lib" <<<"$out" || fail "cu13 layout: $out"
grep -qx "libcudnn.so.9 $tmp/w13/nvidia/cudnn/lib" <<<"$out" || fail "cu13 layout: $out"
echo "ok: the CUDA 13 wheels' layout (nvidia/cu13/lib, nvidia/cudnn/lib)"
out=$(finder "$tmp/w12" "$tmp/none") || fail "CUDA 12 wheel layout: not all found: $out"
grep -qx "libcublasLt.so.13 $tmp/w12/nvidia/cublas/lib" <<<"$out" || fail "cu12 layout: $out"
echo "ok: the CUDA 12 wheels' layout (nvidia/cublas/lib, nvidia/cudnn/lib)"
if out=$(finder "" "$tmp/odd"); then fail "found cuBLAS in a tree without it: $out"; fi
grep -qx "libcudnn.so.9 $tmp/odd/opt/x" <<<"$out" || fail "find fallback: $out"
grep -qx "libcublas.so.13 -" <<<"$out" || fail "a missing library is not '-': $out"
echo "ok: find reaches an odd place; a missing library reads '-', exit 1"
cat >"$tmp/ldconfig" <<EOF
#!/bin/sh
echo "1 libs found in cache \\\`/etc/ld.so.cache'"
for s in $sonames; do echo "	\$s (libc6,x86-64) => $tmp/w13/\$s"; done
i=0; while [ \$i -lt 2000 ]; do echo "	libfiller\$i.so.1 (libc6,x86-64) => /usr/lib/libfiller\$i.so.1"; i=\$((i + 1)); done
EOF
chmod +x "$tmp/ldconfig"
cp "$tmp/w13/nvidia/cu13/lib/"* "$tmp/w13/nvidia/cudnn/lib/"* "$tmp/w13/"
for i in 1 2 3 4 5; do
    out=$(finder "" "$tmp/none" "$tmp/ldconfig") || fail "ld.so.cache read, round $i: $out"
    grep -qx "libcudnn.so.9 $tmp/w13" <<<"$out" || fail "ld.so.cache read, round $i: $out"
done
# the old reading fails on the same cache: the test can tell them apart
sigpipe=0
for i in 1 2 3 4 5; do
    (set -o pipefail; "$tmp/ldconfig" | grep -q "libcublas.so.13") || sigpipe=$((sigpipe + 1))
done
echo "ok: ld.so.cache read whole, 5 of 5 found (\`| grep -q\` under pipefail: $sigpipe of 5 missed)"

# --- 2. the GPU machine's layout ---------------------------------------------------------
unshare -rm true 2>/dev/null || { echo "skip: unshare -rm (user and mount namespaces) not allowed"; exit 77; }
real=$(cd /tmp && LD_LIBRARY_PATH="" PYTHONPATH="" FIND_ROOTS=/nonexistent \
    bash "$root/bench/find_cuda_libs.sh" $sonames) || { echo "skip: no cuBLAS / cuDNN on this machine to move: $real"; exit 77; }
hide=$( { awk '{print $2}' <<<"$real"; strings -a "$bin" | grep -m1 -E '^/.*/lib(64)?$' || true; } |
        xargs -r -n1 realpath -e 2>/dev/null | sort -u)
site=$tmp/site
mkdir -p "$site/nvidia/cu13/lib" "$site/nvidia/cudnn/lib" "$tmp/fakebin" "$tmp/logs" "$tmp/logs2"
cat >"$tmp/fakebin/nvidia-smi" <<EOF
#!/bin/sh
echo "nvidia-smi LD_LIBRARY_PATH=[\${LD_LIBRARY_PATH:-}]" >>"$tmp/env.log"
echo "NVIDIA Stand-in GPU, 999.99, 81559 MiB, 9.0"
EOF
cat >"$tmp/fakebin/python3" <<EOF
#!/bin/sh
echo "python3 LD_LIBRARY_PATH=[\${LD_LIBRARY_PATH:-}]" >>"$tmp/env.log"
exec /usr/bin/python3 "\$@"
EOF
chmod +x "$tmp/fakebin/"*

cat >"$tmp/inside.sh" <<'IN'
set -u
tmp=$1 root=$2; shift 2
site=$tmp/site
src=$(realpath -e "$(awk '$1 == "libcublas.so.13" {print $2}' "$tmp/real")")
dsrc=$(realpath -e "$(awk '$1 == "libcudnn.so.9" {print $2}' "$tmp/real")")
# the wheel tree: cuBLAS files under nvidia/cu13/lib, cuDNN's under nvidia/cudnn/lib
for f in "$src"/libcublas*.so.13; do
    touch "$site/nvidia/cu13/lib/$(basename "$f")" && mount --bind "$f" "$site/nvidia/cu13/lib/$(basename "$f")" || exit 90
done
for f in "$dsrc"/libcudnn*.so.9; do
    touch "$site/nvidia/cudnn/lib/$(basename "$f")" && mount --bind "$f" "$site/nvidia/cudnn/lib/$(basename "$f")" || exit 90
done
for d in "$@"; do mount -t tmpfs none "$d" || exit 91; done
export LD_LIBRARY_PATH= PYTHONPATH=$site PATH=$tmp/fakebin:$PATH PYTHON=$tmp/fakebin/python3
cd "$root"
LOGDIR=$tmp/logs PARTS=tests bash bench/gpu_check.sh >"$tmp/run1.out" 2>&1
echo "run1=$?"
LOGDIR=$tmp/logs2 PARTS=tests GPU_CHECK_DRY=1 STEPS='test_cuda_libs|test_kernels_host' \
    GPU_CHECK_FAIL=test_kernels_host GM_TEST_CUDA_LIBS=found bash bench/gpu_check.sh >"$tmp/run2.out" 2>&1
echo "run2=$?"
IN
echo "$real" >"$tmp/real"
echo "hiding: $(echo $hide); the wheel tree: $site"
# shellcheck disable=SC2086
unshare -rm bash "$tmp/inside.sh" "$tmp" "$root" $hide >"$tmp/rc" 2>&1 || { cat "$tmp/rc"; fail "namespace setup failed"; }
cat "$tmp/rc"

echo "--- gpu_check.sh, the GPU machine's layout, no GPU:"
cat "$tmp/run1.out"
grep -qx 'run1=77' "$tmp/rc" || fail "gpu_check.sh did not end on 'no GPU answers' (exit 77)"
grep -q "^library libcublas.so.13: $site/nvidia/cu13/lib" "$tmp/run1.out" || fail "cuBLAS not found in the wheel tree"
grep -q "^library libcudnn.so.9: $site/nvidia/cudnn/lib" "$tmp/run1.out" || fail "cuDNN not found in the wheel tree"
grep -q '^gpu: NVIDIA Stand-in GPU, 999.99' "$tmp/run1.out" || fail "the inventory lacks the GPU line"
grep -q '^pytorch (.*): torch ' "$tmp/run1.out" || fail "the inventory lacks PyTorch's versions"
grep -q 'SKIP: .*no GPU answers' "$tmp/run1.out" || fail "no 'no GPU answers' line"
tar -tzf "$tmp/logs/gpu-check-logs.tar.gz" | grep -q 'gpu-check/inventory.txt' || fail "no archive with the inventory in LOGDIR"
echo "ok: exit 77 with the libraries found in the wheel tree and the logs packed in LOGDIR"

echo "--- the dry run with a failure forced:"
cat "$tmp/run2.out"
grep -qx 'run2=1' "$tmp/rc" || fail "the dry run with a forced failure did not exit 1"
grep -qE '^test_cuda_libs +PASS' "$tmp/run2.out" || fail "test_cuda_libs did not load the wheel's libraries"
tar -xzf "$tmp/logs2/gpu-check-logs.tar.gz" -C "$tmp/logs2"
grep -q "loaded: $site/nvidia/cu13/lib/libcublas.so.13" "$tmp/logs2/gpu-check/test_cuda_libs.log" ||
    fail "test_cuda_libs did not load cuBLAS from the wheel tree"
grep -q "loaded: $site/nvidia/cudnn/lib/libcudnn.so.9" "$tmp/logs2/gpu-check/test_cuda_libs.log" ||
    fail "test_cuda_libs did not load cuDNN from the wheel tree"
echo "ok: gradmesh's binaries load cuBLAS and cuDNN from the wheel tree"
grep -A12 -E '^test_kernels_host +FAIL' "$tmp/run2.out" | grep -q '^    | test_kernels_host: [0-9]* checks' ||
    fail "the FAIL row is not followed by its log's tail"
grep -A12 -E '^test_kernels_host +FAIL' "$tmp/run2.out" | grep -q '^    | gpu_check: FAIL forced' ||
    fail "the FAIL row's tail lacks the forced failure's line"
[ -s "$tmp/logs2/gpu-check/test_kernels_host.log" ] || fail "the failed step's log is not in the archive"
echo "ok: the FAIL row is followed by its log's tail; the log is in the archive"

grep -q . "$tmp/env.log" || fail "the stand-in nvidia-smi / python3 never ran"
if grep -v 'LD_LIBRARY_PATH=\[\]$' "$tmp/env.log"; then fail "nvidia-smi or python3 got gradmesh's LD_LIBRARY_PATH"; fi
echo "ok: nvidia-smi and python3 ran $(wc -l <"$tmp/env.log") times, never with gradmesh's LD_LIBRARY_PATH"

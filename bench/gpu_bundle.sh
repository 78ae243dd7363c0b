#!/usr/bin/env bash
# Packs what bench/gpu_check.sh needs on a GPU machine that lacks this project's build
# dependencies (a bare image with CUDA and PyTorch): gradmesh, the GPU test binaries and
# bench/model_step built
# here with the CUDA backend for any x86-64-v3 processor (AVX2, FMA: not -march=native, the
# GPU machine's processor is another), the shared libraries they load that are not glibc's,
# libstdc++'s or CUDA's (OpenBLAS, libuv, OpenSSL, ...; copied from this machine's Debian
# packages), and Fashion-MNIST.  About 45 MB; the folder is ignored by git.
#   bench/gpu_bundle.sh [OUTDIR]     default gpu-bundle
#   CUDA_ARCHS (default 90: H100 / H200), DATA (/usr/share/datasets/fashion-mnist)
# Then, on the GPU machine: GM_BUNDLE=OUTDIR bash bench/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-gpu-bundle}
data=${DATA:-/usr/share/datasets/fashion-mnist}
archs=${CUDA_ARCHS:-90}
build=build-bundle
tests="test_cuda_ops test_cuda_model test_trainer test_cuda_fake test_kernels_host test_cuda_libs"

make -j"$(nproc)" CUDA=1 CUDA_ARCHS="$archs" BUILD="$build" BIN=gradmesh-bundle \
    OPT="-O3 -march=x86-64-v3 -fno-math-errno" gradmesh-bundle "$build/bench/model_step" \
    $(for t in $tests; do printf '%s/tests/%s ' "$build" "$t"; done)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bin/build/tests" "$tmp/bin/build/bench" "$tmp/lib" "$out"
cp gradmesh-bundle "$tmp/bin/gradmesh"
echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) from $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD 2>/dev/null || echo ' (uncommitted changes)'), CUDA_ARCHS=$archs" >"$tmp/bin/VERSION"
for t in $tests; do
    cp "$build/tests/$t" "$tmp/bin/build/tests/"
done
cp "$build/bench/model_step" "$tmp/bin/build/bench/"
for f in "$tmp/bin/gradmesh" "$tmp/bin/build/tests/"* "$tmp/bin/build/bench/"*; do
    ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }'
done | sort -u | while read -r soname path; do
    case $soname in
    libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | librt.so.* | libgcc_s.so.* | \
        libstdc++.so.* | ld-linux*) continue ;;
    esac
    case $path in /usr/local/cuda*) continue ;; esac
    cp -L "$path" "$tmp/lib/$soname"
done
tar -C "$tmp/bin" -cJf "$out/bin.tar.xz" .
tar -C "$tmp/lib" -cJf "$out/libs.tar.xz" .
rm -rf "$out/fashion-mnist"
cp -r "$data" "$out/fashion-mnist"
du -sh "$out"
echo "on the GPU machine: GM_BUNDLE=$out bash bench/gpu_check.sh   (carry $out)"

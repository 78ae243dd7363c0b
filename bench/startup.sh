#!/usr/bin/env bash
# Start-up time of the CUDA build: ./gradmesh (cuBLAS and cuDNN loaded at run time, only when
# a GPU is chosen) against a peer linked in the same run from the same objects with
# -lcublas -lcudnn as load-time dependencies (how the binary was linked before
# train/kernels/cuda_libs.c).  Runs `gradmesh help` RUNS times each, interleaved, and prints
# the medians and their ratio.
#   make && bash bench/startup.sh        RUNS (20), CUDA_HOME (/usr/local/cuda)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-20}
cuda=${CUDA_HOME:-/usr/local/cuda}
bin=./gradmesh
[ -x "$bin" ] && [ -r build/.flags ] || { echo "startup: build first (make)"; exit 1; }
[ -e "$cuda/lib64/libcudnn.so" ] || { echo "skip: no cuDNN under $cuda/lib64"; exit 77; }
if ldd "$bin" | grep -qE 'libcublas|libcudnn'; then
    echo "startup: $bin already links cuBLAS or cuDNN"
    exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# the link line's libraries, as the Makefile recorded them (build/.flags: CFLAGS | NVCCFLAGS | LDLIBS)
ldlibs=$(awk -F' [|] ' '{print $3}' build/.flags)
# shellcheck disable=SC2086
cc -o "$tmp/gradmesh-linked" build/agent/cli/main.o build/libgradmesh.a $ldlibs \
    -Wl,--no-as-needed -L"$cuda/lib64" -Wl,-rpath,"$cuda/lib64" -lcudnn -lcublas -lcublasLt
ldd "$tmp/gradmesh-linked" | grep -qE 'libcudnn' || { echo "startup: the peer does not link cuDNN"; exit 1; }

ms() { # command...: wall milliseconds of one run
    local s e
    s=$(date +%s%N)
    "$@" >/dev/null 2>&1
    e=$(date +%s%N)
    echo $(((e - s) / 1000))
}
for _ in $(seq "$runs"); do
    ms "$bin" help >>"$tmp/lazy"
    ms "$tmp/gradmesh-linked" help >>"$tmp/linked"
done
median() { sort -n "$1" | awk '{a[NR] = $1} END {m = NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2; printf "%.1f", m / 1000}'; }
lazy=$(median "$tmp/lazy")
linked=$(median "$tmp/linked")
printf '%-44s %10s\n' "gradmesh help, median of $runs" "ms"
printf '%-44s %10s\n' "linked cuBLAS + cuDNN (the peer)" "$linked"
printf '%-44s %10s\n' "loaded at run time (./gradmesh)" "$lazy"
awk -v a="$linked" -v b="$lazy" 'BEGIN { printf "ratio: %.1fx faster start-up\n", a / b }'

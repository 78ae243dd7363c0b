#!/usr/bin/env bash
# bench/models_vs_torch.sh - one whole training step (forward, backward, SGD momentum; fp32)
# of resnet18 and mobilenet_v2 at 128x128, batch 32: gradmesh (bench/model_step.c, built
# against build/libgradmesh.a) against torchvision's model on PyTorch 1.13, same threads,
# alternating in one run (bench/models_vs_torch.py; arguments pass through: --threads 1,2
# --models resnet18,mobilenet_v2 --steps 3 --rounds 2 --warmup 2).
#
# OpenBLAS picks its kernels by CPU unless OPENBLAS_CORETYPE says otherwise; a user's shell
# has it unset.  GM_BENCH_CORETYPES (default "env unset") lists the settings to run: "env"
# keeps this environment's value as it is, "unset" removes it, anything else is used as the
# value (e.g. Haswell, SkylakeX).
set -euo pipefail
cd "$(dirname "$0")/.."
make --no-print-directory -s CUDA=0 build/libgradmesh.a
mkdir -p build/bench
cc -std=c11 -Wall -Wextra -Werror -O2 -march=native -I. $(pkg-config --cflags openblas) \
    -o build/bench/model_step bench/model_step.c build/libgradmesh.a \
    $(pkg-config --libs openblas zlib libpng libjpeg inih libuv libsodium openssl jansson libsystemd libmicrohttpd raft) -lm -pthread
echo "# $(date -u +%FT%TZ) $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
for ct in ${GM_BENCH_CORETYPES:-env unset}; do
    case $ct in
    env) /usr/bin/python3 bench/models_vs_torch.py build/bench/model_step "$@" ;;
    unset) env -u OPENBLAS_CORETYPE /usr/bin/python3 bench/models_vs_torch.py build/bench/model_step "$@" ;;
    *) OPENBLAS_CORETYPE=$ct /usr/bin/python3 bench/models_vs_torch.py build/bench/model_step "$@" ;;
    esac
done

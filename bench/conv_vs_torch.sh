#!/usr/bin/env bash
# bench/conv_vs_torch.sh - builds bench/conv_layers.c against build/libgradmesh.a and runs
# bench/conv_vs_torch.py: resnet18's and mobilenet_v2's convolutions (forward + backward,
# 128x128, batch 32), gradmesh vs PyTorch 1.13 with the same threads, in one run.
# Arguments pass through to the script (--threads 1,2 --reps 3 --batch 32 --size 128).
set -euo pipefail
cd "$(dirname "$0")/.."
make --no-print-directory -s CUDA=0 build/libgradmesh.a
mkdir -p build/bench
cc -std=c11 -Wall -Wextra -Werror -O2 -march=native -I. $(pkg-config --cflags openblas) \
    -o build/bench/conv_layers bench/conv_layers.c build/libgradmesh.a \
    $(pkg-config --libs openblas zlib libpng libjpeg inih libuv libsodium openssl jansson libsystemd libmicrohttpd raft) -lm -pthread
echo "# $(date -u +%FT%TZ) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 bench/conv_vs_torch.py build/bench/conv_layers "$@"

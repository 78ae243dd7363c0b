#!/usr/bin/env bash
# bench/link_throughput.sh - builds and runs bench/link_throughput.c against
# build/libgradmesh.a (run `make` first).  Arguments pass through:
#   bench/link_throughput.sh [BYTES=1GiB] [TRIALS=3] [SOCKBUF=0 (autotune)]
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f build/libgradmesh.a ] || make --no-print-directory -s build/libgradmesh.a
mkdir -p build/bench
cc -std=c11 -O2 -march=native -I. $(pkg-config --cflags libuv libsodium openssl) \
    -o build/bench/link_throughput bench/link_throughput.c build/libgradmesh.a \
    $(pkg-config --libs openblas zlib libpng libjpeg inih libuv libsodium openssl jansson 2>/dev/null || pkg-config --libs libuv libsodium openssl jansson inih) -lm -pthread
echo "# $(date -u +%FT%TZ) $(uname -r) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
exec build/bench/link_throughput "$@"

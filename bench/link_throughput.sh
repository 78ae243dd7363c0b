#!/usr/bin/env bash
# bench/link_throughput.sh - builds and runs bench/link_throughput.c against
# build/libgradmesh.a (run `make` first), then prints what one core encrypts
# with AES-GCM (`openssl speed`, 16 KiB blocks, the TLS record size) beside it.
# Arguments pass through:
#   bench/link_throughput.sh [BYTES=1GiB] [TRIALS=3] [SOCKBUF=0 (autotune)]
#   bench/link_throughput.sh --build-only      (for bench/link_veth.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
make --no-print-directory -s build/libgradmesh.a # up to date with the tree
mkdir -p build/bench
cc -std=c11 -O2 -march=native -I. $(pkg-config --cflags libuv libsodium openssl) \
    -o build/bench/link_throughput bench/link_throughput.c build/libgradmesh.a \
    $(pkg-config --libs openblas zlib libpng libjpeg inih libuv libsodium openssl jansson 2>/dev/null || pkg-config --libs libuv libsodium openssl jansson inih) -lm -pthread
[ "${1:-}" != --build-only ] || exit 0
echo "# $(date -u +%FT%TZ) $(uname -r) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
build/bench/link_throughput "$@"
# One core's AES-GCM, the link's suite (TLS_AES_128_GCM_SHA256, first in
# crypto/tls.c's list) and AES-256-GCM, at the 16 KiB record size.
for c in aes-128-gcm aes-256-gcm; do
    taskset -c 0 openssl speed -seconds "${SPEED_S:-3}" -bytes 16384 -evp "$c" 2>/dev/null |
        awk -v c="$c" 'tolower($1) == c { v = $NF; sub(/k$/, "", v);
            printf "openssl speed -evp %s (16 KiB, one core): %.3f GB/s\n", c, v * 1000 / 1e9 }'
done

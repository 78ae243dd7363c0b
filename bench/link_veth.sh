#!/usr/bin/env bash
# bench/link_veth.sh - a gradmesh TLS link against plain TCP on a 1 Gbit/s
# link: two network namespaces joined by a veth pair whose both ends are
# shaped with tc tbf (issue 10, "Done when" 4: TLS >= 0.9x TCP).  The link is
# the real one (agent/net/link.h: libuv, TLS 1.3 with mutual auth, BULK frames),
# driven by bench/link_throughput.c, which alternates TCP and TLS trials in
# the same run and prints medians and their ratio.  Root and namespaces, else
# exit 77.  The testbed is tests/integration/netns.bash (names carry $$,
# cleanup on EXIT, readiness polled).
#
#      tx (gmnb<pid>-tx)                     rx (gmnb<pid>-rx)
#   link_throughput sender --- veth ---  link_throughput receiver
#        10.77.0.1/30    tbf RATE each way    10.77.0.2/30
#
# Usage: bench/link_veth.sh [BYTES=256MiB] [TRIALS=5]     RATE=1gbit
set -euo pipefail
cd "$(dirname "$0")/.."
bytes=${1:-$((256 << 20))}
trials=${2:-5}
rate=${RATE:-1gbit}
. tests/integration/netns.bash
nb_require tc

make --no-print-directory -s build/libgradmesh.a # up to date with the tree
bash bench/link_throughput.sh --build-only

nb_host tx
nb_host rx
nb_link tx eth0 10.77.0.1/30 rx eth0 10.77.0.2/30
nb_rate tx eth0 "$rate"
nb_rate rx eth0 "$rate"
nb_ping tx 10.77.0.2 10 || nb__die "no ping tx -> rx over the veth"

echo "# $(date -u +%FT%TZ) $(uname -r) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# veth tx->rx, tc: $(tc -n "$(nb_ns tx)" qdisc show dev eth0 | head -1)"
build/bench/link_throughput --rx-netns "$(nb_ns rx)" --tx-netns "$(nb_ns tx)" \
    --addr 10.77.0.2 "$bytes" "$trials" >"$NB_WORK/out" || { cat "$NB_WORK/out"; exit 1; }
cat "$NB_WORK/out"
out=$(tail -1 "$NB_WORK/out")
bits=$(nb__bits "$rate")
python3 - "$out" "$bits" <<'PY'
import sys
kv = dict(f.split("=", 1) for f in sys.argv[1].split())
lim = float(sys.argv[2]) / 1e6
tcp, tls = float(kv["tcp_GBps"]) * 8e3, float(kv["tls_GBps"]) * 8e3
print(f"veth {lim:.0f} Mbit/s: plain TCP {tcp:.1f} Mbit/s ({tcp / lim:.3f} of the limit), "
      f"TLS link {tls:.1f} Mbit/s ({tls / lim:.3f}); TLS/TCP ratio {float(kv['ratio']):.3f} (target >= 0.9)")
PY

#!/usr/bin/env bash
# bench/allreduce.sh - all-reduce of float32 (sum) on loopback at 0.25 / 4 /
# 64 / 256 MiB, 2 and 4 ranks, three implementations in the same run (issue 10,
# "Done when" 4):
#   gradmesh  gm_coll_allreduce_start (RING, fp32) over the agent transport
#             (agent/jobs/xport.h) on real TLS links (bench/gm_allreduce.c);
#   mpi       OpenMPI's MPI_Allreduce over plaintext TCP (bench/mpi_allreduce.c;
#             mpirun --mca pml ob1 --mca btl tcp,self, TCP on lo);
#   gloo      torch.distributed with the gloo backend (bench/torch_allreduce.py).
# Each prints, per size, latency (time of one call, slowest rank) and bus
# bandwidth (busbw = 2(N-1)/N x bytes / time, the nccl-tests convention); every
# implementation calibrates its iteration count to ~2 s a size and checks the
# sum.  Rounds alternate the implementations; medians are reported with the
# issue's two bars: gradmesh busbw at 64 MiB >= 0.6x MPI's, and gradmesh
# latency at 0.25 MiB <= gloo's.  Nothing is pinned: 4 ranks share 2 cores.
#
# Usage: bench/allreduce.sh [GRADMESH_BINARY]    ROUNDS=3 RANKS="2 4" SIZES="bytes..."
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-./gradmesh}
rounds=${ROUNDS:-3}
ranks_list=${RANKS:-2 4}
sizes=${SIZES:-$((256 << 10)) $((4 << 20)) $((64 << 20)) $((256 << 20))}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

command -v mpicc >/dev/null || { echo "SKIP: no mpicc (.ci/deps.sh bench installs openmpi)"; exit 77; }
: "$bin" # the all-reduce needs the library, not the binary
make --no-print-directory -s build/libgradmesh.a # up to date with the tree
mkdir -p build/bench
cc -std=c11 -O2 -march=native -I. $(pkg-config --cflags libuv libsodium openssl) \
    -o build/bench/gm_allreduce bench/gm_allreduce.c build/libgradmesh.a \
    $(pkg-config --libs openblas zlib libpng libjpeg inih libuv libsodium openssl jansson) -lm -pthread
mpicc -std=c11 -O2 -Wall -Wextra -Werror -o build/bench/mpi_allreduce bench/mpi_allreduce.c

mpi_allreduce() { # N: one line per size on stdout
    # --allow-run-as-root: CI and the VM run as root; --oversubscribe: 4 ranks
    # on 2 cores (OpenMPI then yields when idle instead of spinning).
    timeout 600 mpirun --allow-run-as-root --oversubscribe -np "$1" --bind-to none \
        --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo \
        build/bench/mpi_allreduce $sizes
}

gloo_allreduce() { # N
    timeout 600 /usr/bin/python3 bench/torch_allreduce.py --ranks "$1" $sizes
}

# gradmesh: bench/gm_allreduce.c, N processes on real TLS links (agent/net/link.h)
# running gm_coll_allreduce_start (RING, fp32, SUM) over agent/jobs/xport.h.
gradmesh_allreduce() { # N
    timeout 600 build/bench/gm_allreduce "$1" $sizes
}

echo "# $(date -u +%FT%TZ) $(getconf _NPROCESSORS_ONLN) cores, load $(cut -d' ' -f1-3 /proc/loadavg)," \
    "$(mpirun --version | head -1), $(/usr/bin/python3 -c 'import torch; print("PyTorch", torch.__version__)') gloo"
for r in $(seq "$rounds"); do
    for n in $ranks_list; do
        for impl in gradmesh mpi gloo; do
            rc=0
            "${impl}_allreduce" "$n" >"$tmp/out" 2>"$tmp/err" || rc=$?
            if [ $rc -eq 77 ]; then
                [ "$r" -gt 1 ] || sed 's/^/# /' "$tmp/err"
                continue
            fi
            grep '^impl=' "$tmp/out" | tee -a "$tmp/all" | sed "s/^/round $r: /"
            if [ $rc -ne 0 ] || grep WRONG_SUM "$tmp/out" >/dev/null; then
                echo "$impl with $n ranks failed (rc $rc):"; cat "$tmp/out" "$tmp/err"; exit 1
            fi
        done
    done
done

python3 - "$tmp/all" "$rounds" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    kv = dict(f.split("=", 1) for f in line.split() if "=" in f)
    key = (kv["impl"], int(kv["ranks"]), int(kv["bytes"]))
    rows.setdefault(key, []).append(
        (float(kv["lat_ms"]), float(kv["busbw_GBps"]), float(kv.get("cpu_ms", "nan"))))
med = {k: tuple(statistics.median(x[i] for x in v) for i in range(3)) for k, v in rows.items()}
ranks = sorted({k[1] for k in med})
sizes = sorted({k[2] for k in med})
impls = ("gradmesh", "mpi", "gloo")
def cell(impl, n, s, i, fmt):
    return fmt % med[(impl, n, s)][i] if (impl, n, s) in med else "-"
def ratio(a, b, n, s, i):
    x, y = med.get((a, n, s)), med.get((b, n, s))
    return f"{x[i] / y[i]:.2f}x" if x and y and y[i] > 0 else "-"
print(f"\nmedians of {sys.argv[2]} round(s); lat in ms, busbw in GB/s")
print(f"{'ranks':>5} {'MiB':>6} | {'gradmesh lat':>12} {'mpi lat':>9} {'gloo lat':>9} | "
      f"{'gradmesh bw':>11} {'mpi bw':>8} {'gloo bw':>8} | {'gm/mpi bw':>9} {'gm/gloo lat':>11}")
for n in ranks:
    for s in sizes:
        print(f"{n:>5} {s / 2**20:>6.2f} | {cell('gradmesh', n, s, 0, '%.3f'):>12} "
              f"{cell('mpi', n, s, 0, '%.3f'):>9} {cell('gloo', n, s, 0, '%.3f'):>9} | "
              f"{cell('gradmesh', n, s, 1, '%.3f'):>11} {cell('mpi', n, s, 1, '%.3f'):>8} "
              f"{cell('gloo', n, s, 1, '%.3f'):>8} | {ratio('gradmesh', 'mpi', n, s, 1):>9} "
              f"{ratio('gradmesh', 'gloo', n, s, 0):>11}")
print("bars: gm/mpi bw at 64 MiB >= 0.60x; gm/gloo lat at 0.25 MiB <= 1.00x")
print("\nCPU ms per call and rank (the process's CPU time, all threads; robust to other load;"
      "\nOpenMPI oversubscribed polls and yields while it waits, which counts here)")
print(f"{'ranks':>5} {'MiB':>6} | {'gradmesh':>9} {'mpi':>9} {'gloo':>9} | {'gm/mpi':>7} {'gm/gloo':>7}")
for n in ranks:
    for s in sizes:
        print(f"{n:>5} {s / 2**20:>6.2f} | {cell('gradmesh', n, s, 2, '%.3f'):>9} "
              f"{cell('mpi', n, s, 2, '%.3f'):>9} {cell('gloo', n, s, 2, '%.3f'):>9} | "
              f"{ratio('gradmesh', 'mpi', n, s, 2):>7} {ratio('gradmesh', 'gloo', n, s, 2):>7}")
PY

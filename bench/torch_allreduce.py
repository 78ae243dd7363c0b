#!/usr/bin/python3
"""torch.distributed (gloo) peer of bench/allreduce.sh: all_reduce of a float32
tensor (SUM) on loopback, timed like bench/mpi_allreduce.c.

For each size: one warm-up call, one calibration call that fixes the number of
iterations (rank 0's choice, broadcast) so that a size takes about 2 s, bounded
to [3, 200]; then a barrier and the iterations back to back.  The time is the
slowest rank's; lat = time / iters, algbw = bytes / lat, busbw = algbw * 2(N-1)/N
(the nccl-tests convention).  gloo reduces in place: the warm-up call sums
rank+1 from every rank and every element is checked against N(N+1)/2; the timed
calls then reduce zeros, so the values stay put without a refill inside the
timed loop (float addition takes the same time whatever the finite values).

One line per size, the format bench/allreduce.sh reads for every peer:
  impl=gloo ranks=N bytes=B iters=I lat_ms=... algbw_GBps=... busbw_GBps=... cpu_ms=...
cpu_ms: CPU time of the process (all its threads) per call over the timed calls,
averaged over the ranks.

One thread per process (torch.set_num_threads(1)), like the other peers; the
processes are not pinned (bench/allreduce.sh runs 4 ranks on 2 cores).
Run with Debian's python3 (/usr/bin/python3), where python3-torch imports.
usage: torch_allreduce.py --ranks N [--port P] [SIZE_BYTES...]   (default 0.25/4/64/256 MiB)
"""
import argparse
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

TARGET_S, MIN_ITERS, MAX_ITERS = 2.0, 3, 200
DEFAULT_SIZES = [256 << 10, 4 << 20, 64 << 20, 256 << 20]


def run_size(nbytes, rank, world):
    n = nbytes // 4
    buf = torch.full((n,), float(rank + 1), dtype=torch.float32)

    def once():
        dist.all_reduce(buf, op=dist.ReduceOp.SUM)

    def slowest(t):
        x = torch.tensor([t], dtype=torch.float64)
        dist.all_reduce(x, op=dist.ReduceOp.MAX)
        return x.item()

    once()  # warm-up and the check
    want = world * (world + 1) / 2
    bad = torch.tensor([0 if bool((buf == want).all()) else 1])
    dist.all_reduce(bad, op=dist.ReduceOp.MAX)
    buf.zero_()
    dist.barrier()
    t0 = time.perf_counter()
    once()
    tmax = slowest(time.perf_counter() - t0)
    iters = torch.tensor([min(MAX_ITERS, max(MIN_ITERS, int(TARGET_S / max(tmax, 1e-9))))])
    dist.broadcast(iters, 0)
    iters = int(iters.item())

    dist.barrier()
    t0 = time.perf_counter()
    c0 = time.process_time()
    for _ in range(iters):
        once()
    cpu = time.process_time() - c0
    tmax = slowest(time.perf_counter() - t0)
    cpus = torch.tensor([cpu], dtype=torch.float64)
    dist.all_reduce(cpus, op=dist.ReduceOp.SUM)
    if rank == 0:
        lat = tmax / iters
        alg = nbytes / lat / 1e9
        print(f"impl=gloo ranks={world} bytes={nbytes} iters={iters} lat_ms={lat * 1e3:.3f} "
              f"algbw_GBps={alg:.4f} busbw_GBps={alg * 2 * (world - 1) / world:.4f} "
              f"cpu_ms={cpus.item() / world / iters * 1e3:.3f}"
              + (" WRONG_SUM" if bad.item() else ""), flush=True)
    return bad.item() == 0


def worker(rank, world, port, sizes):
    torch.set_num_threads(1)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=world)
    ok = True
    for s in sizes:
        ok = run_size(s, rank, world) and ok
    dist.destroy_process_group()
    if not ok:
        sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--port", type=int, default=0, help="rendezvous port (0: a free one)")
    ap.add_argument("sizes", nargs="*", type=int)
    a = ap.parse_args()
    if a.port == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            a.port = s.getsockname()[1]
    mp.spawn(worker, args=(a.ranks, a.port, a.sizes or DEFAULT_SIZES), nprocs=a.ranks)


if __name__ == "__main__":
    main()

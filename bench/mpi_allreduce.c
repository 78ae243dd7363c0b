/*
 * bench/mpi_allreduce.c - the OpenMPI peer of bench/allreduce.sh: MPI_Allreduce
 * (MPI_FLOAT, MPI_SUM, out of place) timed the nccl-tests way.
 *
 * For each size: one warm-up call, then a calibration call fixes the number of
 * iterations (rank 0's choice, broadcast) so that a size takes about TARGET_S
 * seconds, bounded to [MIN_ITERS, MAX_ITERS]; then a barrier and ITERS calls
 * back to back.  The time of a size is the slowest rank's (MPI_MAX), and
 *   lat    = time / iters
 *   algbw  = bytes / lat
 *   busbw  = algbw * 2 (N-1) / N      (what each rank sends/receives in a ring)
 * One line per size, the format bench/allreduce.sh reads for every peer:
 *   impl=mpi ranks=N bytes=B iters=I lat_ms=... algbw_GBps=... busbw_GBps=... cpu_ms=...
 * cpu_ms: CPU time of the process (all its threads) per call over the timed
 * calls, averaged over the ranks: what a call costs, whatever else the machine runs.
 * Every rank fills its input with rank+1 and checks every output element
 * against N(N+1)/2 (exact in float); a wrong sum exits 1.
 *
 * Built and launched by bench/allreduce.sh (mpicc; mpirun --mca pml ob1
 * --mca btl tcp,self: plaintext TCP on loopback).
 * usage: mpi_allreduce [SIZE_BYTES...]      default 0.25, 4, 64, 256 MiB
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define TARGET_S 2.0
#define MIN_ITERS 3
#define MAX_ITERS 200

static double cpu_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int run_size(size_t bytes, int rank, int world)
{
    size_t n = bytes / sizeof(float), i;
    float *in = malloc(n * sizeof(float)), *out = malloc(n * sizeof(float));
    float want = (float)world * (float)(world + 1) / 2.0f;
    double t0, t, tmax, c0, cpu, cpusum;
    int iters = MIN_ITERS, it, bad = 0, anybad = 0;

    if (in == NULL || out == NULL || n > (size_t)0x7fffffff) {
        fprintf(stderr, "mpi_allreduce: cannot allocate %zu bytes\n", bytes);
        return -1;
    }
    for (i = 0; i < n; i++) {
        in[i] = (float)(rank + 1);
        out[i] = 0.0f;
    }
    /* warm-up (connections, page faults), then one call to calibrate */
    MPI_Allreduce(in, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    MPI_Allreduce(in, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    t = MPI_Wtime() - t0;
    MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0) {
        double want_iters = TARGET_S / (tmax > 1e-9 ? tmax : 1e-9);
        iters = want_iters < MIN_ITERS   ? MIN_ITERS
                : want_iters > MAX_ITERS ? MAX_ITERS
                                         : (int)want_iters;
    }
    MPI_Bcast(&iters, 1, MPI_INT, 0, MPI_COMM_WORLD);

    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    c0 = cpu_now();
    for (it = 0; it < iters; it++)
        MPI_Allreduce(in, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    t = MPI_Wtime() - t0;
    cpu = cpu_now() - c0;
    MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(&cpu, &cpusum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);

    for (i = 0; i < n; i++)
        if (out[i] != want)
            bad = 1;
    MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0) {
        double lat = tmax / iters, alg = (double)bytes / lat / 1e9;
        printf("impl=mpi ranks=%d bytes=%zu iters=%d lat_ms=%.3f algbw_GBps=%.4f "
               "busbw_GBps=%.4f cpu_ms=%.3f%s\n",
               world, bytes, iters, lat * 1e3, alg, alg * 2.0 * (world - 1) / world,
               cpusum / world / iters * 1e3, anybad ? " WRONG_SUM" : "");
        fflush(stdout);
    }
    free(in);
    free(out);
    return anybad ? -1 : 0;
}

int main(int argc, char **argv)
{
    static const size_t defaults[] = {256u << 10, 4u << 20, 64u << 20, 256u << 20};
    int rank, world, i, rc = 0;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (argc > 1) {
        for (i = 1; i < argc && rc == 0; i++)
            rc = run_size((size_t)strtoull(argv[i], NULL, 0), rank, world);
    } else {
        for (i = 0; i < 4 && rc == 0; i++)
            rc = run_size(defaults[i], rank, world);
    }
    MPI_Finalize();
    return rc == 0 ? 0 : 1;
}

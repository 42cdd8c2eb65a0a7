/*
 * nbc: the latency of a nonblocking collective and how much of it a computation hides, in the
 * manner of OSU's nonblocking collective benchmarks (osu_iallreduce, osu_ibcast): ch4's own
 * program, built once against the MPI standard ABI (c-abi/bin/mpicc) to run on any library of
 * that ABI, and against another MPI's mpi.h to run there.
 *
 *   nbc iallreduce|ibcast|ibarrier [-m min:max] [-i iterations] [-x warmup]
 *
 * For each size (bytes, powers of two; MPI_FLOAT elements for iallreduce, MPI_CHAR for ibcast,
 * none for ibarrier) it measures, averaged over the ranks:
 *   pure     the start of the collective followed at once by MPI_Wait, per iteration;
 *   compute  a computation of about `pure` (each rank's own), alone;
 *   overall  start, the computation, MPI_Wait;
 *   overlap  100 * (1 - (overall - compute) / pure), within 0..100: the part of the
 *            collective's time the computation hid (OSU's definition).
 * and prints one line per size: size, overall, compute, pure (µs) and overlap (%).
 * The computation calls nothing of MPI's: what overlaps is what the library moves without
 * the program's calls (a progress thread, a network that progresses by itself).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum which { IALLREDUCE, IBCAST, IBARRIER };

static volatile double sink;

/* Computes (floating-point work, no memory traffic to speak of) for `seconds`. */
static void compute(double seconds)
{
    double x = 1.0, end = MPI_Wtime() + seconds;
    while (MPI_Wtime() < end)
        for (int k = 0; k < 64; k++)
            x = x * 1.0000001 + 1e-9;
    sink = x;
}

static void start(enum which w, void *buf, void *out, int size, MPI_Request *req)
{
    switch (w) {
    case IALLREDUCE:
        MPI_Iallreduce(buf, out, size / (int)sizeof(float), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                       req);
        break;
    case IBCAST:
        MPI_Ibcast(buf, size, MPI_CHAR, 0, MPI_COMM_WORLD, req);
        break;
    case IBARRIER:
        MPI_Ibarrier(MPI_COMM_WORLD, req);
        break;
    }
}

/* The mean over the ranks of `v`. */
static double mean(double v)
{
    double sum = 0;
    int n;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    MPI_Allreduce(&v, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return sum / n;
}

int main(int argc, char **argv)
{
    enum which w;
    long min = 4, max = 1 << 20;
    int iters = 1000, warmup = 100, rank;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (argc < 2) {
        if (rank == 0)
            fprintf(stderr, "usage: nbc iallreduce|ibcast|ibarrier [-m min:max] [-i n] [-x n]\n");
        MPI_Finalize();
        return 2;
    }
    if (!strcmp(argv[1], "iallreduce"))
        w = IALLREDUCE;
    else if (!strcmp(argv[1], "ibcast"))
        w = IBCAST;
    else if (!strcmp(argv[1], "ibarrier"))
        w = IBARRIER;
    else {
        if (rank == 0)
            fprintf(stderr, "nbc: no collective '%s'\n", argv[1]);
        MPI_Finalize();
        return 2;
    }
    for (int a = 2; a + 1 < argc; a += 2) {
        if (!strcmp(argv[a], "-m") && sscanf(argv[a + 1], "%ld:%ld", &min, &max) != 2)
            sscanf(argv[a + 1], "%ld", &max);
        else if (!strcmp(argv[a], "-i"))
            iters = atoi(argv[a + 1]);
        else if (!strcmp(argv[a], "-x"))
            warmup = atoi(argv[a + 1]);
    }
    if (w == IBARRIER)
        min = max = 0;
    if (w == IALLREDUCE && min < (long)sizeof(float))
        min = sizeof(float);
    char *buf = calloc(max > 0 ? max : 1, 1), *out = calloc(max > 0 ? max : 1, 1);
    if (rank == 0) {
        printf("# ch4 nbc: MPI_%s latency and overlap\n", argv[1]);
        printf("%-10s%18s%18s%18s%18s\n", "# Size", "Overall(us)", "Compute(us)",
               "Pure Comm.(us)", "Overlap(%)");
    }
    for (long size = min; size <= max; size = size ? size * 2 : 1) {
        int n = size > 65536 ? iters / 10 + 1 : iters, skip = size > 65536 ? warmup / 10 : warmup;
        MPI_Request req;
        double t0 = 0;
        MPI_Barrier(MPI_COMM_WORLD);
        for (int i = 0; i < n + skip; i++) {
            if (i == skip)
                t0 = MPI_Wtime();
            start(w, buf, out, (int)size, &req);
            MPI_Wait(&req, MPI_STATUS_IGNORE);
        }
        double pure = (MPI_Wtime() - t0) / n;
        /* Every rank computes as long as the slowest takes for the collective alone. */
        double target = pure;
        MPI_Allreduce(&pure, &target, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        double cpu = 0, overall = 0;
        MPI_Barrier(MPI_COMM_WORLD);
        for (int i = 0; i < n + skip; i++) {
            double s = MPI_Wtime();
            start(w, buf, out, (int)size, &req);
            double c = MPI_Wtime();
            compute(target);
            double e = MPI_Wtime();
            MPI_Wait(&req, MPI_STATUS_IGNORE);
            if (i >= skip) {
                overall += MPI_Wtime() - s;
                cpu += e - c;
            }
        }
        overall /= n;
        cpu /= n;
        double m_pure = mean(pure), m_overall = mean(overall), m_cpu = mean(cpu);
        double overlap = 100.0 * (1.0 - (m_overall - m_cpu) / m_pure);
        if (overlap < 0)
            overlap = 0;
        if (overlap > 100)
            overlap = 100;
        if (rank == 0)
            printf("%-10ld%18.2f%18.2f%18.2f%18.2f\n", size, m_overall * 1e6, m_cpu * 1e6,
                   m_pure * 1e6, overlap);
        if (size == 0 && max == 0)
            break;
    }
    free(buf);
    free(out);
    MPI_Finalize();
    return 0;
}

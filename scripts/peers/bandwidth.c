/* Windowed bandwidth and message rate between two ranks of the system MPI, the loop of ch4's
 * osu_bw: rank 0 posts a window of 64 isends, waits for all, waits for a 4-byte ack; rank 1
 * posts 64 irecvs into 64 distinct buffers (as ch4 must: safe Rust cannot lend one buffer to 64
 * pending receives), waits, acks. Prints "size MB/s messages/s" per size. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define W 64

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int iters = argc > 1 ? atoi(argv[1]) : 100;
    int max = 1 << 22;
    char *s = calloc(max, 1);
    char *r = calloc((size_t)max * W, 1);
    MPI_Request req[W];
    int sizes[] = {8, 65536, 1048576, 4194304};
    for (int k = 0; k < 4; k++) {
        int n = sizes[k];
        int it = n > 8192 ? iters / 2 + 1 : iters * 30, wm = it / 10 + 1;
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = 0;
        for (int i = 0; i < it + wm; i++) {
            if (i == wm) t0 = MPI_Wtime();
            if (rank == 0) {
                for (int j = 0; j < W; j++) MPI_Isend(s, n, MPI_CHAR, 1, 100, MPI_COMM_WORLD, &req[j]);
                MPI_Waitall(W, req, MPI_STATUSES_IGNORE);
                MPI_Recv(r, 4, MPI_CHAR, 1, 101, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else {
                for (int j = 0; j < W; j++)
                    MPI_Irecv(r + (size_t)j * n, n, MPI_CHAR, 0, 100, MPI_COMM_WORLD, &req[j]);
                MPI_Waitall(W, req, MPI_STATUSES_IGNORE);
                MPI_Send(s, 4, MPI_CHAR, 0, 101, MPI_COMM_WORLD);
            }
        }
        double t = MPI_Wtime() - t0;
        if (rank == 0) printf("%d %.2f %.0f\n", n, (double)it * W * n / t / 1e6, (double)it * W / t);
    }
    MPI_Finalize();
    return 0;
}

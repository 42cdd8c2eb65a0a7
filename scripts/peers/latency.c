/* Ping-pong between two ranks of the system MPI, the loop of ch4's osu_latency:
 * per size a barrier, warm-up round trips, then timed ones; prints "size microseconds". */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int iters = 30000, warm = 3000;
    char *s = malloc(64), *r = malloc(64);
    memset(s, 'a', 64);
    int sizes[] = {0, 1, 8, 64};
    for (int k = 0; k < 4; k++) {
        int n = sizes[k];
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = 0;
        for (int i = 0; i < iters + warm; i++) {
            if (i == warm) t0 = MPI_Wtime();
            if (rank == 0) {
                MPI_Send(s, n, MPI_CHAR, 1, 1, MPI_COMM_WORLD);
                MPI_Recv(r, n, MPI_CHAR, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else {
                MPI_Recv(r, n, MPI_CHAR, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(s, n, MPI_CHAR, 0, 1, MPI_COMM_WORLD);
            }
        }
        if (rank == 0) printf("%d %.3f\n", n, (MPI_Wtime() - t0) * 1e6 / (2.0 * iters));
    }
    MPI_Finalize();
    return 0;
}

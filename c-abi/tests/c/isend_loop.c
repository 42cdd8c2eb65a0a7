/* N rounds on MPI_COMM_SELF, 8 bytes: the C side of scripts/c-abi-overhead.sh
 * (c-abi/examples/isend_loop.rs is the Rust side). By default a round is MPI_Irecv +
 * MPI_Isend to itself + two MPI_Wait; with "blocking" as the second argument it is MPI_Send
 * to itself + MPI_Recv, the calls of osu_latency's loop. */
#include <stdlib.h>
#include <string.h>
#include <mpi.h>
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 10000;
    int blocking = argc > 2 && strcmp(argv[2], "blocking") == 0;
    char sbuf[8] = {0}, rbuf[8];
    MPI_Request s, r;
    MPI_Init(&argc, &argv);
    if (blocking) {
        for (int i = 0; i < n; i++) {
            MPI_Send(sbuf, 8, MPI_BYTE, 0, 1, MPI_COMM_SELF);
            MPI_Recv(rbuf, 8, MPI_BYTE, 0, 1, MPI_COMM_SELF, MPI_STATUS_IGNORE);
        }
    } else {
        for (int i = 0; i < n; i++) {
            MPI_Irecv(rbuf, 8, MPI_BYTE, 0, 1, MPI_COMM_SELF, &r);
            MPI_Isend(sbuf, 8, MPI_BYTE, 0, 1, MPI_COMM_SELF, &s);
            MPI_Wait(&s, MPI_STATUS_IGNORE);
            MPI_Wait(&r, MPI_STATUS_IGNORE);
        }
    }
    MPI_Finalize();
    return 0;
}

/* N rounds of MPI_Irecv + MPI_Isend to itself + two MPI_Wait, 8 bytes, on MPI_COMM_SELF: the
 * C side of scripts/c-abi-overhead.sh (c-abi/examples/isend_loop.rs is the Rust side). */
#include <stdlib.h>
#include <mpi.h>
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 10000;
    char sbuf[8] = {0}, rbuf[8];
    MPI_Request s, r;
    MPI_Init(&argc, &argv);
    for (int i = 0; i < n; i++) {
        MPI_Irecv(rbuf, 8, MPI_BYTE, 0, 1, MPI_COMM_SELF, &r);
        MPI_Isend(sbuf, 8, MPI_BYTE, 0, 1, MPI_COMM_SELF, &s);
        MPI_Wait(&s, MPI_STATUS_IGNORE);
        MPI_Wait(&r, MPI_STATUS_IGNORE);
    }
    MPI_Finalize();
    return 0;
}

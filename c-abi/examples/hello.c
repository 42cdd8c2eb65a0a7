/* The smallest C program on ch4's MPI library: every rank adds its rank to a token passed
 * around the ring, and rank 0 prints the sum. Build and run (README, "The C library"):
 *
 *   c-abi/bin/mpicc -O2 -o target/hello c-abi/examples/hello.c
 *   target/release/ch4run -n 4 target/hello
 */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    int rank, size, token = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size == 1) {
        printf("hello from rank 0 of 1: token 0\n");
    } else if (rank == 0) {
        MPI_Send(&token, 1, MPI_INT, 1, 0, MPI_COMM_WORLD);
        MPI_Recv(&token, 1, MPI_INT, size - 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        printf("hello from rank 0 of %d: token %d\n", size, token);
    } else {
        MPI_Recv(&token, 1, MPI_INT, rank - 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        token += rank;
        MPI_Send(&token, 1, MPI_INT, (rank + 1) % size, 0, MPI_COMM_WORLD);
    }
    MPI_Finalize();
    return 0;
}

/* MTest for MPICH's attr and errhan folders (see mpitest.h): the intercommunicators and every
 * communicator a test runs over, and the main of the programs that define only run().
 * Written for ch4; MPICH's own are test/mpi/util/mtest.c and mtest_single.c.
 *
 * Every definition here is weak: where the harness links another file that defines the same
 * function (a main for run()-programs, MTestGetComm, the communicator names), that one is
 * used and this one drops out, so harness files grown side by side never clash. */
#include <stdio.h>
#include <stdlib.h>

#include "mpitest.h"

/* Many of MPICH's programs define `int run(const char *arg)` and no main: MPICH links them
 * with a main that initializes MTest, runs them and reports. This is that main, weak, so that
 * a program with a main of its own keeps it (and `run`, weak too, is then never called). The
 * program's first argument is run's (an empty string without one). */
int run(const char *arg) __attribute__((weak));

int main(int argc, char **argv) __attribute__((weak));
int main(int argc, char **argv)
{
    int errs;
    MTest_Init(&argc, &argv);
    if (!run) {
        fprintf(stderr, "mtest_attr.c: the program defines neither main nor run\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    errs = run(argc > 1 ? argv[1] : "");
    MTest_Finalize(errs);
    return MTestReturnValue(errs);
}

/* Weak: a library without intercommunicators still links the programs; MTestGetIntercomm
 * then stops the job with a message naming what is missing. */
int MPI_Intercomm_create(MPI_Comm local_comm, int local_leader, MPI_Comm peer_comm,
                         int remote_leader, int tag, MPI_Comm *newintercomm)
    __attribute__((weak));

static const char *intra_name = "an intracommunicator of MTestGetIntracomm";
static const char *inter_name = "none";

__attribute__((weak)) const char *MTestGetIntracommName(void)
{
    return intra_name;
}

__attribute__((weak)) const char *MTestGetIntercommName(void)
{
    return inter_name;
}

/* An intercommunicator between the ranks of world for which `left` is true and the others,
 * each group led by its lowest world rank. */
static void intercomm_of(int left, int other_leader, MPI_Comm *comm)
{
    MPI_Comm local;
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_split(MPI_COMM_WORLD, left, rank, &local);
    MPI_Intercomm_create(local, 0, MPI_COMM_WORLD, other_leader, 12345, comm);
    MPI_Comm_free(&local);
}

__attribute__((weak)) int MTestGetIntercomm(MPI_Comm *comm, int *is_left, int min_size)
{
    static int next = 0;
    int size, rank;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (size < 2 || size < min_size) {
        next = 0;
        *comm = MPI_COMM_NULL;
        return 0;
    }
    if (!MPI_Intercomm_create) {
        fprintf(stderr, "MTestGetIntercomm: this MPI library has no MPI_Intercomm_create\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    switch (next++) {
    case 0:
        /* The lower half against the upper. */
        *is_left = rank < size / 2;
        intercomm_of(*is_left, *is_left ? size / 2 : 0, comm);
        inter_name = "halves of MPI_COMM_WORLD";
        return 1;
    case 1:
        /* The even ranks against the odd. */
        *is_left = rank % 2 == 0;
        intercomm_of(*is_left, *is_left ? 1 : 0, comm);
        inter_name = "even and odd ranks of MPI_COMM_WORLD";
        return 1;
    default:
        next = 0;
        *comm = MPI_COMM_NULL;
        inter_name = "none";
        return 0;
    }
}

__attribute__((weak)) int MTestGetComm(MPI_Comm *comm, int min_size)
{
    static int intra_done = 0;
    int is_left;
    if (!intra_done) {
        if (MTestGetIntracomm(comm, min_size)) {
            intra_name = "an intracommunicator of MTestGetIntracomm";
            return 1;
        }
        intra_done = 1;
    }
    /* Intercommunicators where the library has them: a test of something else (names,
     * collectives) then runs over the intracommunicators alone. */
    if (MPI_Intercomm_create && MTestGetIntercomm(comm, &is_left, min_size))
        return 1;
    intra_done = 0;
    *comm = MPI_COMM_NULL;
    return 0;
}

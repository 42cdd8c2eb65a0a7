/* The MTest harness for MPICH's test programs (see mpitest.h), over any MPI of the standard
 * ABI. Written for ch4; MPICH's own is test/mpi/util/mtest.c. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "mpitest.h"

static int verbose = 0;
static int next_comm = 0;

void MTest_Init(int *argc, char ***argv)
{
    int flag = 0;
    const char *v = getenv("MTEST_VERBOSE");
    if (v)
        verbose = atoi(v);
    MPI_Initialized(&flag);
    if (!flag)
        MPI_Init(argc, argv);
}

void MTest_Finalize(int errs)
{
    int rank = 0, total = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Allreduce(&errs, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        if (total)
            printf(" Found %d errors\n", total);
        else
            printf(" No Errors\n");
        fflush(stdout);
    }
    MPI_Finalize();
}

int MTestReturnValue(int errs)
{
    return errs ? 1 : 0;
}

void MTestPrintfMsg(int level, const char *format, ...)
{
    va_list ap;
    if (verbose < level)
        return;
    va_start(ap, format);
    vprintf(format, ap);
    va_end(ap);
    fflush(stdout);
}

void MTestPrintError(int errcode)
{
    char s[MPI_MAX_ERROR_STRING];
    int len = 0, cls = 0;
    MPI_Error_class(errcode, &cls);
    MPI_Error_string(errcode, s, &len);
    printf("Error class %d (%s)\n", cls, s);
    fflush(stdout);
}

void MTestSleep(int sec)
{
    sleep(sec);
}

int MTestGetIntracommGeneral(MPI_Comm *comm, int min_size, int allow_size_change)
{
    int size = 0, rank = 0;
    (void)allow_size_change;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (size < min_size) {
        next_comm = 0;
        *comm = MPI_COMM_NULL;
        return 0;
    }
    switch (next_comm++) {
    case 0:
        *comm = MPI_COMM_WORLD;
        return 1;
    case 1:
        MPI_Comm_dup(MPI_COMM_WORLD, comm);
        return 1;
    case 2:
        MPI_Comm_split(MPI_COMM_WORLD, 0, size - rank, comm);
        return 1;
    default:
        next_comm = 0;
        *comm = MPI_COMM_NULL;
        return 0;
    }
}

int MTestGetIntracomm(MPI_Comm *comm, int min_size)
{
    return MTestGetIntracommGeneral(comm, min_size, 0);
}

void MTestFreeComm(MPI_Comm *comm)
{
    if (*comm != MPI_COMM_WORLD && *comm != MPI_COMM_SELF && *comm != MPI_COMM_NULL)
        MPI_Comm_free(comm);
}

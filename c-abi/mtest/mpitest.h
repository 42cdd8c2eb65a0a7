/* mpitest.h: the small test harness (MTest) that MPICH's test programs call, written for
 * running them on ch4's library. A program passes when it prints " No Errors" and exits 0. */
#ifndef CH4_MPITEST_H
#define CH4_MPITEST_H

#include <string.h>
#include <mpi.h>
#include "mpitestconf.h"

#if defined(__cplusplus)
extern "C" {
#endif

/* Whether the MPI in use is at least version maj.min (a compile-time test). */
#define MTEST_HAVE_MIN_MPI_VERSION(maj, min) \
    ((MPI_VERSION > (maj)) || (MPI_VERSION == (maj) && MPI_SUBVERSION >= (min)))

/* Marks memory as initialized for valgrind in MPICH's harness; here it sets the bytes. */
#define MTEST_VG_MEM_INIT(addr, size) memset((addr), 0, (size))

/* MPI_Init, and what the harness needs (the verbosity from MTEST_VERBOSE). */
void MTest_Init(int *argc, char ***argv);
/* MPI_Init_thread, and the same (declared again in mpithreadtest.h for the threaded tests). */
void MTest_Init_thread(int *argc, char ***argv, int required, int *provided);
/* Sums the errors of every rank; rank 0 prints " No Errors" or " Found N errors"; then
 * MPI_Finalize. */
void MTest_Finalize(int errs);
/* The exit code for a program's error count: 0 or 1. */
int MTestReturnValue(int errs);
/* printf when the verbosity (MTEST_VERBOSE) is at least `level`. */
void MTestPrintfMsg(int level, const char *format, ...);
/* Prints the string of an MPI error code. */
void MTestPrintError(int errcode);
/* Sleeps `sec` seconds. */
void MTestSleep(int sec);
/* The intracommunicators a test runs over, one per call while it returns nonzero: the world,
 * a duplicate of it, and one with the ranks in reverse order; each of at least `min_size`
 * processes. Free each with MTestFreeComm. */
int MTestGetIntracommGeneral(MPI_Comm *comm, int min_size, int allow_size_change);
int MTestGetIntracomm(MPI_Comm *comm, int min_size);
/* The program's "-key=value" arguments: MTestArgListGetInt(l, "iter") is the value of
 * -iter=N (a missing one aborts the job). */
typedef struct MTestArgList MTestArgList;
MTestArgList *MTestArgListCreate(int argc, char **argv);
int MTestArgListGetInt(MTestArgList *head, const char *key);
void MTestArgListDestroy(MTestArgList *head);
/* Frees a communicator from MTestGetIntracommGeneral (not the predefined ones). */
void MTestFreeComm(MPI_Comm *comm);

/* ---- mtest_attr.c (the attr and errhan folders; the programs there call printf and
 * fprintf with this header alone, as MPICH's includes stdio.h and stdlib.h). Its
 * definitions are weak: another harness file's of the same name takes precedence. ---- */
#include <stdio.h>
#include <stdlib.h>
/* The intercommunicators a test runs over, one per call while it returns nonzero (two halves
 * of the world, then its even and odd ranks); *is_left says which group the caller is in.
 * Free each with MPI_Comm_free. The library must have MPI_Intercomm_create. */
int MTestGetIntercomm(MPI_Comm *comm, int *is_left, int min_size);
/* Every communicator a test runs over: MTestGetIntracomm's, then MTestGetIntercomm's when
 * the library has MPI_Intercomm_create. */
int MTestGetComm(MPI_Comm *comm, int min_size);
/* The kind of communicator the last call above returned, for messages. */
const char *MTestGetIntracommName(void);
const char *MTestGetIntercommName(void);

#if defined(__cplusplus)
}
#endif

#endif

/* mpitest.h: the small test harness (MTest) that MPICH's test programs call, written for
 * running them on ch4's library. A program passes when it prints " No Errors" and exits 0. */
#ifndef CH4_MPITEST_H
#define CH4_MPITEST_H

/* What MPICH's mpitest.h brings in, which some tests rely on. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* MPICH's harness brings in bool (pack_external.c uses it without an include). */
#include <stdbool.h>
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
/* The name of the communicator MTestGetIntracommGeneral gave last. */
const char *MTestGetIntracommName(void);
/* MPICH's yields intercommunicators; this library has none yet, and a test that asks stops. */
int MTestGetIntercomm(MPI_Comm *comm, int *is_left_group, int min_size);
const char *MTestGetIntercommName(void);
/* Sends around a ring over `comm`: the number of errors seen. */
int MTestTestComm(MPI_Comm comm);
/* Prints `msg` with the class and string of MPI error code `errcode`. */
void MTestPrintErrorMsg(const char *msg, int errcode);
int MTestGetIntracomm(MPI_Comm *comm, int min_size);
/* The program's "-key=value" arguments: MTestArgListGetInt(l, "iter") is the value of
 * -iter=N (a missing one aborts the job). */
typedef struct MTestArgList MTestArgList;
MTestArgList *MTestArgListCreate(int argc, char **argv);
int MTestArgListGetInt(MTestArgList *head, const char *key);
MTestArgList *MTestArgListCreate_arg(const char *arg);
int MTestArgListGetInt_with_default(MTestArgList *head, const char *key, int dflt);
void MTestArgListDestroy(MTestArgList *head);
/* Frees a communicator from MTestGetIntracommGeneral (not the predefined ones). */
void MTestFreeComm(MPI_Comm *comm);
/* Every communicator a test runs over (the intracommunicators above). */
int MTestGetComm(MPI_Comm *comm, int min_size);

/* The datatype tests' helpers (mtest_datatype.c). Buffers in a kind of memory (MPICH's harness also has device memory; here there is only
 * the host's): MTestCalloc gives zeroed `size` bytes as both the host and the "device"
 * buffer, MTestCopyContent copies between them, MTestFree frees them. */
typedef enum {
    MTEST_MEM_TYPE__UNSET,
    MTEST_MEM_TYPE__UNREGISTERED_HOST,
    MTEST_MEM_TYPE__REGISTERED_HOST,
    MTEST_MEM_TYPE__DEVICE,
    MTEST_MEM_TYPE__SHARED,
} mtest_mem_type_e;
void MTestCalloc(size_t size, mtest_mem_type_e type, void **hostbuf, void **devicebuf,
                 int device);
void MTestCopyContent(const void *sbuf, void *dbuf, size_t size, mtest_mem_type_e type);
void MTestFree(mtest_mem_type_e type, void *hostbuf, void *devicebuf);

#if defined(__cplusplus)
}
#endif

#endif

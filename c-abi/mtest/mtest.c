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
    int provided;
    MTest_Init_thread(argc, argv, MPI_THREAD_SINGLE, &provided);
}

void MTest_Init_thread(int *argc, char ***argv, int required, int *provided)
{
    int flag = 0;
    const char *v = getenv("MTEST_VERBOSE");
    if (v)
        verbose = atoi(v);
    MPI_Initialized(&flag);
    if (!flag)
        MPI_Init_thread(argc, argv, required, provided);
    else
        MPI_Query_thread(provided);
}

/* The program's "-key=value" arguments, kept as given. */
struct MTestArgList {
    int argc;
    char **argv;
    char *owned; /* the split words, when the list made its own argv */
};

MTestArgList *MTestArgListCreate(int argc, char **argv)
{
    MTestArgList *l = malloc(sizeof *l);
    l->argc = argc;
    l->argv = argv;
    l->owned = NULL;
    return l;
}

int MTestArgListGetInt(MTestArgList *head, const char *key)
{
    size_t n = strlen(key);
    for (int i = 1; i < head->argc; i++) {
        const char *a = head->argv[i];
        while (*a == '-')
            a++;
        if (strncmp(a, key, n) == 0 && a[n] == '=')
            return atoi(a + n + 1);
    }
    fprintf(stderr, "MTestArgListGetInt: no argument -%s=<int>\n", key);
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 0;
}

/* The arguments of one string, split at spaces (a single-test program's `run` argument);
 * the list keeps the copy. */
MTestArgList *MTestArgListCreate_arg(const char *arg)
{
    char *copy = strdup(arg ? arg : "");
    int cap = 2;
    for (const char *c = copy; *c; c++)
        cap += *c == ' ';
    char **argv = calloc(cap + 1, sizeof *argv);
    int argc = 0;
    argv[argc++] = copy; /* argv[0]: holds the copy, never read as an argument */
    char *save = NULL;
    char *words = strdup(copy);
    for (char *w = strtok_r(words, " ", &save); w; w = strtok_r(NULL, " ", &save))
        argv[argc++] = w;
    MTestArgList *l = MTestArgListCreate(argc, argv);
    l->owned = words;
    return l;
}

/* The value of "-key=value", 1 for a bare "-key", `dflt` when the key is absent. */
int MTestArgListGetInt_with_default(MTestArgList *head, const char *key, int dflt)
{
    size_t n = strlen(key);
    for (int i = 1; i < head->argc; i++) {
        const char *a = head->argv[i];
        while (*a == '-')
            a++;
        if (strncmp(a, key, n) == 0 && a[n] == '=')
            return atoi(a + n + 1);
        if (strcmp(a, key) == 0)
            return 1;
    }
    return dflt;
}

void MTestArgListDestroy(MTestArgList *head)
{
    if (head->owned) {
        free(head->argv[0]);
        free(head->owned);
        free(head->argv);
    }
    free(head);
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

/* The name of the communicator MTestGetIntracommGeneral gave last. */
const char *MTestGetIntracommName(void)
{
    switch (next_comm) {
    case 1:
        return "MPI_COMM_WORLD";
    case 2:
        return "Dup of MPI_COMM_WORLD";
    case 3:
        return "Rank reverse of MPI_COMM_WORLD";
    default:
        return "MPI_COMM_NULL";
    }
}

/* The intercommunicators MTestGetIntercomm gives, one a call, as MPICH's MTest has them:
 * over the halves of MPI_COMM_WORLD, its even and odd ranks, rank 0 and the others, and a
 * dup and a split of the first (which exercise those calls on intercommunicators). */
static int next_inter = 0;
static const char *inter_name = "MPI_COMM_NULL";

/* An intercommunicator between the ranks of MPI_COMM_WORLD for which `left` is true and the
 * others, each group led by its lowest world rank; `other` is the other group's leader. */
static void intercomm_of(int left, int other, MPI_Comm *comm)
{
    MPI_Comm local;
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_split(MPI_COMM_WORLD, left, rank, &local);
    MPI_Intercomm_create(local, 0, MPI_COMM_WORLD, other, 12345, comm);
    MPI_Comm_free(&local);
}

/* An intercommunicator of MPI_COMM_WORLD's processes, `*is_left_group` set for the members
 * of its "left" group; 0 (and MPI_COMM_NULL) once every kind has been given, or when the
 * world has fewer than `min_size` processes (the size of both groups together) or one. */
int MTestGetIntercomm(MPI_Comm *comm, int *is_left_group, int min_size)
{
    int size = 0, rank = 0;
    MPI_Comm half;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    *comm = MPI_COMM_NULL;
    *is_left_group = 0;
    if (size < 2 || size < min_size) {
        next_inter = 0;
        inter_name = "MPI_COMM_NULL";
        return 0;
    }
    switch (next_inter++) {
    case 0:
        *is_left_group = rank < size / 2;
        intercomm_of(*is_left_group, *is_left_group ? size / 2 : 0, comm);
        inter_name = "Intercomm by splitting MPI_COMM_WORLD";
        return 1;
    case 1:
        *is_left_group = rank % 2 == 0;
        intercomm_of(*is_left_group, *is_left_group ? 1 : 0, comm);
        inter_name = "Intercomm by even and odd ranks of MPI_COMM_WORLD";
        return 1;
    case 2:
        *is_left_group = rank == 0;
        intercomm_of(*is_left_group, *is_left_group ? 1 : 0, comm);
        inter_name = "Intercomm of rank 0 and the other ranks of MPI_COMM_WORLD";
        return 1;
    case 3:
        *is_left_group = rank < size / 2;
        intercomm_of(*is_left_group, *is_left_group ? size / 2 : 0, &half);
        MPI_Comm_dup(half, comm);
        MPI_Comm_free(&half);
        inter_name = "Dup of an intercomm by splitting MPI_COMM_WORLD";
        return 1;
    case 4:
        *is_left_group = rank < size / 2;
        intercomm_of(*is_left_group, *is_left_group ? size / 2 : 0, &half);
        /* One color, the ranks reversed within each group. */
        MPI_Comm_split(half, 0, size - rank, comm);
        MPI_Comm_free(&half);
        inter_name = "Split of an intercomm by splitting MPI_COMM_WORLD";
        return 1;
    default:
        next_inter = 0;
        inter_name = "MPI_COMM_NULL";
        return 0;
    }
}

/* The name of the intercommunicator MTestGetIntercomm gave last. */
const char *MTestGetIntercommName(void)
{
    return inter_name;
}

/* Checks intercommunicator `comm` (this process `rank` of its local group): every member
 * sends its rank to every member of the other group and receives theirs. The number of
 * errors found. */
static int test_intercomm(MPI_Comm comm, int rank)
{
    int rsize = 0, errs = 0, i;
    int *got;
    MPI_Request *reqs;
    MPI_Comm_remote_size(comm, &rsize);
    got = malloc(rsize * sizeof(int));
    reqs = malloc(2 * rsize * sizeof(MPI_Request));
    for (i = 0; i < rsize; i++) {
        got[i] = -1;
        MPI_Irecv(&got[i], 1, MPI_INT, i, 0, comm, &reqs[i]);
    }
    for (i = 0; i < rsize; i++)
        MPI_Isend(&rank, 1, MPI_INT, i, 0, comm, &reqs[rsize + i]);
    MPI_Waitall(2 * rsize, reqs, MPI_STATUSES_IGNORE);
    for (i = 0; i < rsize; i++) {
        if (got[i] != i) {
            fprintf(stderr, "MTestTestComm: got %d from remote rank %d\n", got[i], i);
            errs++;
        }
    }
    free(got);
    free(reqs);
    return errs;
}

/* Checks that `comm` carries messages: every member sends its rank to the next and receives
 * from the previous. The number of errors found. */
int MTestTestComm(MPI_Comm comm)
{
    int rank, size, got = -1, errs = 0;
    int inter = 0;
    if (comm == MPI_COMM_NULL)
        return 0;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    MPI_Comm_test_inter(comm, &inter);
    if (inter)
        return test_intercomm(comm, rank);
    MPI_Sendrecv(&rank, 1, MPI_INT, (rank + 1) % size, 0, &got, 1, MPI_INT,
                 (rank + size - 1) % size, 0, comm, MPI_STATUS_IGNORE);
    if (got != (rank + size - 1) % size) {
        fprintf(stderr, "MTestTestComm: got %d from %d\n", got, (rank + size - 1) % size);
        errs++;
    }
    return errs;
}

void MTestPrintErrorMsg(const char *msg, int errcode)
{
    char s[MPI_MAX_ERROR_STRING];
    int len = 0, cls = 0;
    MPI_Error_class(errcode, &cls);
    MPI_Error_string(errcode, s, &len);
    printf("%s: error class %d (%s)\n", msg, cls, s);
    fflush(stdout);
}

/* Every communicator a test runs over: MTestGetIntracommGeneral's, then MTestGetIntercomm's,
 * as MPICH's MTest gives them. */
int MTestGetComm(MPI_Comm *comm, int min_size)
{
    static int intra_done = 0;
    int is_left = 0;
    if (!intra_done) {
        if (MTestGetIntracommGeneral(comm, min_size, 0))
            return 1;
        intra_done = 1;
    }
    if (MTestGetIntercomm(comm, &is_left, min_size))
        return 1;
    intra_done = 0;
    return 0;
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

/* MPI_THREAD_MULTIPLE on ch4's library, beyond MPICH's thread tests: the levels reported,
 * info objects and the "ch4_vci" hint that places a communicator on a VCI, and threads that
 * each stream ordered messages on a communicator of their own, checked per thread. Run with 2
 * processes; prints " No Errors" when every check passes. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <mpi.h>

#define THREADS 4
#define MESSAGES 200

static int rank, errs = 0;
static pthread_mutex_t errs_lock = PTHREAD_MUTEX_INITIALIZER;
#define CHECK(c)                                                              \
    do {                                                                      \
        if (!(c)) {                                                           \
            pthread_mutex_lock(&errs_lock);                                   \
            errs++;                                                           \
            pthread_mutex_unlock(&errs_lock);                                 \
            printf("[%d] check failed: %s (line %d)\n", rank, #c, __LINE__); \
        }                                                                     \
    } while (0)

static MPI_Comm comms[THREADS];

/* Thread t sends MESSAGES numbered messages to its peer thread on its own communicator, one
 * in four with a nonblocking send, and receives the peer's with MPI_ANY_SOURCE and
 * MPI_ANY_TAG: on its own communicator only its peer's can match, in order. */
static void *stream(void *arg)
{
    int t = (int)(long)arg, peer = 1 - rank;
    MPI_Comm c = comms[t];
    for (int i = 0; i < MESSAGES; i++) {
        int out[2] = { t, i }, in[2] = { -1, -1 };
        MPI_Status st;
        MPI_Request r;
        if (i % 4 == 0) {
            MPI_Isend(out, 2, MPI_INT, peer, i, c, &r);
            MPI_Recv(in, 2, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, c, &st);
            MPI_Wait(&r, MPI_STATUS_IGNORE);
        } else if (rank == 0) {
            MPI_Send(out, 2, MPI_INT, peer, i, c);
            MPI_Recv(in, 2, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, c, &st);
        } else {
            MPI_Recv(in, 2, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, c, &st);
            MPI_Send(out, 2, MPI_INT, peer, i, c);
        }
        CHECK(in[0] == t && in[1] == i && st.MPI_TAG == i && st.MPI_SOURCE == peer);
    }
    int main_flag = 1;
    MPI_Is_thread_main(&main_flag);
    CHECK(!main_flag);
    return NULL;
}

int main(int argc, char **argv)
{
    int provided, flag, n, len;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    CHECK(provided == MPI_THREAD_MULTIPLE);
    MPI_Query_thread(&flag);
    CHECK(flag == MPI_THREAD_MULTIPLE);
    MPI_Is_thread_main(&flag);
    CHECK(flag);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

    /* Info objects. */
    MPI_Info info, copy;
    char value[MPI_MAX_INFO_VAL], key[MPI_MAX_INFO_KEY];
    MPI_Info_create(&info);
    MPI_Info_set(info, "b", "2");
    MPI_Info_set(info, " a ", " one ");
    MPI_Info_set(info, "b", "two");
    MPI_Info_get_nkeys(info, &n);
    CHECK(n == 2);
    MPI_Info_get_nthkey(info, 0, key);
    CHECK(strcmp(key, "b") == 0);
    MPI_Info_get_nthkey(info, 1, key);
    CHECK(strcmp(key, "a") == 0);
    len = sizeof value;
    MPI_Info_get_string(info, "b", &len, value, &flag);
    CHECK(flag && strcmp(value, "two") == 0 && len == 4);
    len = 2;
    MPI_Info_get_string(info, "a", &len, value, &flag);
    CHECK(flag && strcmp(value, "o") == 0 && len == 4);
    len = sizeof value;
    MPI_Info_get_string(info, "zzz", &len, value, &flag);
    CHECK(!flag);
    MPI_Info_get_valuelen(info, "a", &len, &flag);
    CHECK(flag && len == 3);
    MPI_Info_dup(info, &copy);
    CHECK(MPI_Info_delete(info, "a") == MPI_SUCCESS);
    int rc, class;
    rc = MPI_Info_delete(info, "a");
    MPI_Error_class(rc, &class);
    CHECK(class == MPI_ERR_INFO_NOKEY);
    rc = MPI_Info_set(info, "", "x");
    MPI_Error_class(rc, &class);
    CHECK(class == MPI_ERR_INFO_KEY);
    MPI_Info_get_nkeys(copy, &n);
    CHECK(n == 2);
    MPI_Info_free(&copy);
    CHECK(copy == MPI_INFO_NULL);
    rc = MPI_Info_get_nkeys(copy, &n);
    MPI_Error_class(rc, &class);
    CHECK(class == MPI_ERR_INFO);
    MPI_Info_free(&info);

    /* One communicator per thread, each placed by the ch4_vci hint on its own VCI, which
     * MPI_Comm_get_info reports. */
    for (int t = 0; t < THREADS; t++) {
        char v[16];
        snprintf(v, sizeof v, "%d", THREADS - 1 - t);
        MPI_Info_create(&info);
        MPI_Info_set(info, "ch4_vci", v);
        CHECK(MPI_Comm_dup_with_info(MPI_COMM_WORLD, info, &comms[t]) == MPI_SUCCESS);
        MPI_Info_free(&info);
        MPI_Info used;
        MPI_Comm_get_info(comms[t], &used);
        len = sizeof value;
        MPI_Info_get_string(used, "ch4_vci", &len, value, &flag);
        CHECK(flag && strcmp(value, v) == 0);
        MPI_Info_free(&used);
        MPI_Comm_set_errhandler(comms[t], MPI_ERRORS_RETURN);
    }
    /* A VCI the rank does not have is refused; members that name different VCIs all fail. */
    MPI_Comm bad = MPI_COMM_NULL;
    MPI_Info_create(&info);
    MPI_Info_set(info, "ch4_vci", "9999");
    rc = MPI_Comm_dup_with_info(MPI_COMM_WORLD, info, &bad);
    CHECK(rc != MPI_SUCCESS && bad == MPI_COMM_NULL);
    MPI_Info_set(info, "ch4_vci", rank == 0 ? "0" : "1");
    rc = MPI_Comm_dup_with_info(MPI_COMM_WORLD, info, &bad);
    CHECK(rc != MPI_SUCCESS && bad == MPI_COMM_NULL);
    MPI_Info_free(&info);

    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++)
        pthread_create(&th[t], NULL, stream, (void *)(long)t);
    for (int t = 0; t < THREADS; t++)
        pthread_join(th[t], NULL);
    for (int t = 0; t < THREADS; t++)
        MPI_Comm_free(&comms[t]);

    int all;
    MPI_Allreduce(&errs, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0 && all == 0)
        printf(" No Errors\n");
    MPI_Finalize();
    return 0;
}

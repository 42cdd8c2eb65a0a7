/* Partitioned communication (MPI 4.1 chapter 4): MPI_Psend_init, MPI_Precv_init, MPI_Pready
 * and its range and list forms, MPI_Parrived, over several rounds; different partition counts
 * on the two sides; two requests of one tag matched in the order they were made; a derived
 * datatype; the completion functions over sets; a partitioned message never matching a
 * point-to-point receive of any source and tag.
 * Run with 2 processes; prints " No Errors" when every check passes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <mpi.h>

static int errs = 0, rank;
#define CHECK(c)                                                              \
    do {                                                                      \
        if (!(c)) {                                                           \
            errs++;                                                           \
            printf("[%d] check failed: %s (line %d)\n", rank, #c, __LINE__); \
            fflush(stdout);                                                   \
        }                                                                     \
    } while (0)

#define PARTS 8
#define COUNT 16

static void fill(int *b, int n, int seed)
{
    for (int i = 0; i < n; i++)
        b[i] = seed * 10000 + i;
}
static int same(const int *b, int n, int seed)
{
    for (int i = 0; i < n; i++)
        if (b[i] != seed * 10000 + i)
            return 0;
    return 1;
}

/* Rounds of one send and one receive, the partitions readied one by one, by range and by
 * list; the receive polls MPI_Parrived for each partition before reading it. */
static void rounds(int peer)
{
    int buf[PARTS * COUNT] = {0};
    MPI_Request r;
    int flag;
    if (rank == 0) {
        MPI_Psend_init(buf, PARTS, COUNT, MPI_INT, peer, 5, MPI_COMM_WORLD, MPI_INFO_NULL, &r);
        for (int round = 0; round < 3; round++) {
            MPI_Start(&r);
            MPI_Barrier(MPI_COMM_WORLD); /* the receive has looked before anything is ready */
            fill(buf, PARTS * COUNT, round);
            if (round == 0) {
                for (int p = PARTS - 1; p >= 0; p--)
                    MPI_Pready(p, r);
            } else if (round == 1) {
                MPI_Pready_range(0, PARTS / 2 - 1, r);
                MPI_Pready_range(PARTS / 2, PARTS - 1, r);
            } else {
                int list[PARTS];
                for (int p = 0; p < PARTS; p++)
                    list[p] = (p * 3) % PARTS;
                MPI_Pready_list(PARTS, list, r);
            }
            MPI_Wait(&r, MPI_STATUS_IGNORE);
            CHECK(r != MPI_REQUEST_NULL);
        }
        MPI_Request_free(&r);
    } else {
        MPI_Precv_init(buf, PARTS, COUNT, MPI_INT, peer, 5, MPI_COMM_WORLD, MPI_INFO_NULL, &r);
        for (int round = 0; round < 3; round++) {
            memset(buf, 0, sizeof buf);
            MPI_Start(&r);
            MPI_Parrived(r, 0, &flag);
            CHECK(!flag);
            MPI_Barrier(MPI_COMM_WORLD);
            for (int p = 0; p < PARTS; p++) {
                do
                    MPI_Parrived(r, p, &flag);
                while (!flag);
                int ok = 1;
                for (int i = 0; i < COUNT; i++)
                    ok &= buf[p * COUNT + i] == round * 10000 + p * COUNT + i;
                CHECK(ok);
            }
            MPI_Status st;
            MPI_Wait(&r, &st);
            CHECK(st.MPI_SOURCE == peer && st.MPI_TAG == 5);
            CHECK(same(buf, PARTS * COUNT, round));
        }
        MPI_Request_free(&r);
    }
}

/* The sides cut the buffer differently: 4 partitions of 8 against 8 of 4. */
static void different_partitions(int peer)
{
    int buf[32] = {0};
    MPI_Request r;
    if (rank == 0) {
        fill(buf, 32, 7);
        MPI_Psend_init(buf, 4, 8, MPI_INT, peer, 6, MPI_COMM_WORLD, MPI_INFO_NULL, &r);
        MPI_Start(&r);
        MPI_Pready_range(0, 3, r);
        MPI_Wait(&r, MPI_STATUS_IGNORE);
    } else {
        memset(buf, 0, sizeof buf);
        MPI_Precv_init(buf, 8, 4, MPI_INT, peer, 6, MPI_COMM_WORLD, MPI_INFO_NULL, &r);
        MPI_Start(&r);
        MPI_Wait(&r, MPI_STATUS_IGNORE);
        CHECK(same(buf, 32, 7));
    }
    MPI_Request_free(&r);
}

/* Two requests of one tag between the same processes: matched in the order they were made,
 * whichever's partitions are ready first. Completed with MPI_Waitall and MPI_Testall. */
static void two_of_one_tag(int peer)
{
    int a[COUNT * 2] = {0}, b[COUNT * 2] = {0};
    MPI_Request r[2];
    if (rank == 0) {
        MPI_Psend_init(a, 2, COUNT, MPI_INT, peer, 9, MPI_COMM_WORLD, MPI_INFO_NULL, &r[0]);
        MPI_Psend_init(b, 2, COUNT, MPI_INT, peer, 9, MPI_COMM_WORLD, MPI_INFO_NULL, &r[1]);
        fill(a, 2 * COUNT, 1);
        fill(b, 2 * COUNT, 2);
        MPI_Startall(2, r);
        MPI_Pready_range(0, 1, r[1]);
        MPI_Pready(1, r[0]);
        MPI_Pready(0, r[0]);
        MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
    } else {
        memset(a, 0, sizeof a);
        memset(b, 0, sizeof b);
        MPI_Precv_init(a, 2, COUNT, MPI_INT, peer, 9, MPI_COMM_WORLD, MPI_INFO_NULL, &r[0]);
        MPI_Precv_init(b, 2, COUNT, MPI_INT, peer, 9, MPI_COMM_WORLD, MPI_INFO_NULL, &r[1]);
        MPI_Startall(2, r);
        int flag = 0;
        while (!flag)
            MPI_Testall(2, r, &flag, MPI_STATUSES_IGNORE);
        CHECK(same(a, 2 * COUNT, 1));
        CHECK(same(b, 2 * COUNT, 2));
        /* Inactive now: MPI_Testany finds nothing active. */
        int index;
        MPI_Testany(2, r, &index, &flag, MPI_STATUS_IGNORE);
        CHECK(flag && index == MPI_UNDEFINED);
    }
    MPI_Request_free(&r[0]);
    MPI_Request_free(&r[1]);
}

/* A derived datatype: every other int of a vector. Completed with MPI_Waitany/Waitsome. */
static void derived(int peer)
{
    int buf[4 * 2 * COUNT] = {0};
    MPI_Datatype every_other;
    MPI_Type_vector(COUNT, 1, 2, MPI_INT, &every_other);
    MPI_Type_create_resized(every_other, 0, 2 * COUNT * sizeof(int), &every_other);
    MPI_Type_commit(&every_other);
    MPI_Request r;
    int index;
    if (rank == 0) {
        fill(buf, 4 * 2 * COUNT, 3);
        MPI_Psend_init(buf, 4, 1, every_other, peer, 10, MPI_COMM_WORLD, MPI_INFO_NULL, &r);
        MPI_Start(&r);
        MPI_Pready_range(0, 3, r);
        MPI_Waitany(1, &r, &index, MPI_STATUS_IGNORE);
        CHECK(index == 0);
    } else {
        for (int i = 0; i < 4 * 2 * COUNT; i++)
            buf[i] = -1;
        MPI_Precv_init(buf, 4, 1, every_other, peer, 10, MPI_COMM_WORLD, MPI_INFO_NULL, &r);
        MPI_Start(&r);
        int outcount, indices[1];
        MPI_Waitsome(1, &r, &outcount, indices, MPI_STATUSES_IGNORE);
        CHECK(outcount == 1 && indices[0] == 0);
        int ok = 1;
        for (int i = 0; i < 4 * 2 * COUNT; i++)
            ok &= buf[i] == (i % 2 == 0 ? 30000 + i : -1);
        CHECK(ok);
    }
    MPI_Request_free(&r);
    MPI_Type_free(&every_other);
}

/* A point-to-point receive of any source and any tag, posted first, takes the point-to-point
 * message only, never the partitioned one. */
static void apart_from_pt2pt(int peer)
{
    int buf[COUNT] = {0}, got = 0, msg = 42;
    MPI_Request pr, r;
    MPI_Status st;
    if (rank == 0) {
        fill(buf, COUNT, 4);
        MPI_Psend_init(buf, 1, COUNT, MPI_INT, peer, 0, MPI_COMM_WORLD, MPI_INFO_NULL, &pr);
        MPI_Start(&pr);
        MPI_Pready(0, pr);
        MPI_Wait(&pr, MPI_STATUS_IGNORE);
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Send(&msg, 1, MPI_INT, peer, 0, MPI_COMM_WORLD);
    } else {
        memset(buf, 0, sizeof buf);
        MPI_Irecv(&got, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &r);
        MPI_Precv_init(buf, 1, COUNT, MPI_INT, peer, 0, MPI_COMM_WORLD, MPI_INFO_NULL, &pr);
        MPI_Start(&pr);
        MPI_Wait(&pr, MPI_STATUS_IGNORE);
        CHECK(same(buf, COUNT, 4));
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Wait(&r, &st);
        CHECK(got == 42 && st.MPI_TAG == 0);
    }
    MPI_Request_free(&pr);
}

/* Wrong uses are errors, not hangs or crashes. */
static void errors(int peer)
{
    int buf[COUNT] = {0};
    MPI_Request r;
    int rc, cls, flag;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    rc = MPI_Psend_init(buf, 2, COUNT, MPI_INT, MPI_ANY_SOURCE, 0, MPI_COMM_WORLD,
                        MPI_INFO_NULL, &r);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_RANK);
    rc = MPI_Precv_init(buf, 2, COUNT, MPI_INT, peer, MPI_ANY_TAG, MPI_COMM_WORLD,
                        MPI_INFO_NULL, &r);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_TAG);
    rc = MPI_Psend_init(buf, 1, COUNT, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD,
                        MPI_INFO_NULL, &r);
    CHECK(rc == MPI_SUCCESS);
    rc = MPI_Pready(0, r);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_REQUEST); /* not started */
    MPI_Start(&r);
    rc = MPI_Pready(1, r);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_ARG); /* out of range */
    rc = MPI_Parrived(r, 0, &flag);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_REQUEST); /* a send */
    MPI_Pready(0, r);
    rc = MPI_Pready(0, r);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_ARG); /* twice */
    MPI_Wait(&r, MPI_STATUS_IGNORE);
    MPI_Request_free(&r);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

int main(int argc, char **argv)
{
    int size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        printf("run with 2 processes\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    int peer = 1 - rank;
    rounds(peer);
    different_partitions(peer);
    two_of_one_tag(peer);
    derived(peer);
    apart_from_pt2pt(peer);
    errors(peer);

    int all = 0;
    MPI_Reduce(&errs, &all, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        if (all == 0)
            printf(" No Errors\n");
        else
            printf(" Found %d errors\n", all);
    }
    MPI_Finalize();
    return 0;
}

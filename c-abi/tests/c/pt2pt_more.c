/* What MPICH's pt2pt tests do not reach: the big-count (_c) forms of every point-to-point call,
 * persistent buffered sends, MPI 4.1's buffer functions (a communicator's own buffer, the
 * flushes, MPI_BUFFER_AUTOMATIC), user operations of the _c form, and generalized requests with
 * their callbacks in every completion function.
 * Run with 2 processes; prints " No Errors" when every check passes. */
#include <stdint.h>
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

static int error_class(int code)
{
    int c;
    MPI_Error_class(code, &c);
    return c;
}

#define N 64
static void fill(int *b, int n, int seed)
{
    for (int i = 0; i < n; i++)
        b[i] = seed * 1000 + i;
}
static int same(const int *b, int n, int seed)
{
    for (int i = 0; i < n; i++)
        if (b[i] != seed * 1000 + i)
            return 0;
    return 1;
}

/* ---- user operations of the _c form ---- */
static MPI_Count last_len = -1;
static void sum_c(void *in, void *inout, MPI_Count *len, MPI_Datatype *dt)
{
    (void)dt;
    last_len = *len;
    for (MPI_Count i = 0; i < *len; i++)
        ((int *)inout)[i] += ((int *)in)[i];
}

/* ---- generalized requests ---- */
struct greq {
    int queries, frees, cancels, last_complete, query_rc;
};
static int query_fn(void *extra, MPI_Status *status)
{
    struct greq *g = extra;
    g->queries++;
    MPI_Status_set_elements(status, MPI_INT, 5);
    MPI_Status_set_cancelled(status, g->cancels > 0 && !g->last_complete);
    status->MPI_SOURCE = 7;
    status->MPI_TAG = 11;
    return g->query_rc;
}
static int free_fn(void *extra)
{
    ((struct greq *)extra)->frees++;
    return MPI_SUCCESS;
}
static int cancel_fn(void *extra, int complete)
{
    struct greq *g = extra;
    g->cancels++;
    g->last_complete = complete;
    return MPI_SUCCESS;
}

static void big_counts(int peer)
{
    int sbuf[N], rbuf[N];
    MPI_Status st;
    MPI_Request r[2];
    MPI_Count c;

    /* Blocking, in each mode. */
    fill(sbuf, N, 1);
    if (rank == 0) {
        MPI_Send_c(sbuf, N, MPI_INT, peer, 1, MPI_COMM_WORLD);
        MPI_Ssend_c(sbuf, N, MPI_INT, peer, 2, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Rsend_c(sbuf, N, MPI_INT, peer, 3, MPI_COMM_WORLD);
    } else {
        memset(rbuf, 0, sizeof rbuf);
        MPI_Recv_c(rbuf, N, MPI_INT, peer, 1, MPI_COMM_WORLD, &st);
        CHECK(same(rbuf, N, 1));
        MPI_Get_count_c(&st, MPI_INT, &c);
        CHECK(c == N);
        memset(rbuf, 0, sizeof rbuf);
        MPI_Recv_c(rbuf, N, MPI_INT, peer, 2, MPI_COMM_WORLD, &st);
        CHECK(same(rbuf, N, 1));
        MPI_Irecv_c(rbuf, N, MPI_INT, peer, 3, MPI_COMM_WORLD, &r[0]);
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Wait(&r[0], &st);
        CHECK(same(rbuf, N, 1));
    }

    /* Nonblocking, in each mode. */
    fill(sbuf, N, 2);
    if (rank == 0) {
        MPI_Isend_c(sbuf, N, MPI_INT, peer, 4, MPI_COMM_WORLD, &r[0]);
        MPI_Issend_c(sbuf, N, MPI_INT, peer, 5, MPI_COMM_WORLD, &r[1]);
        MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Irsend_c(sbuf, N, MPI_INT, peer, 6, MPI_COMM_WORLD, &r[0]);
        MPI_Wait(&r[0], MPI_STATUS_IGNORE);
    } else {
        MPI_Irecv_c(rbuf, N, MPI_INT, peer, 4, MPI_COMM_WORLD, &r[0]);
        MPI_Wait(&r[0], &st);
        CHECK(same(rbuf, N, 2));
        memset(rbuf, 0, sizeof rbuf);
        MPI_Recv_c(rbuf, N, MPI_INT, peer, 5, MPI_COMM_WORLD, &st);
        CHECK(same(rbuf, N, 2));
        memset(rbuf, 0, sizeof rbuf);
        MPI_Irecv_c(rbuf, N, MPI_INT, peer, 6, MPI_COMM_WORLD, &r[0]);
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Wait(&r[0], &st);
        CHECK(same(rbuf, N, 2));
    }

    /* Send-receive, with and without replace, blocking and not. */
    fill(sbuf, N, 3 + rank);
    memset(rbuf, 0, sizeof rbuf);
    MPI_Sendrecv_c(sbuf, N, MPI_INT, peer, 7, rbuf, N, MPI_INT, peer, 7, MPI_COMM_WORLD, &st);
    CHECK(same(rbuf, N, 3 + peer));
    fill(rbuf, N, 5 + rank);
    MPI_Sendrecv_replace_c(rbuf, N, MPI_INT, peer, 8, peer, 8, MPI_COMM_WORLD, &st);
    CHECK(same(rbuf, N, 5 + peer));
    memset(rbuf, 0, sizeof rbuf);
    MPI_Isendrecv_c(sbuf, N, MPI_INT, peer, 9, rbuf, N, MPI_INT, peer, 9, MPI_COMM_WORLD, &r[0]);
    MPI_Wait(&r[0], &st);
    CHECK(same(rbuf, N, 3 + peer));
    fill(rbuf, N, 7 + rank);
    MPI_Isendrecv_replace_c(rbuf, N, MPI_INT, peer, 10, peer, 10, MPI_COMM_WORLD, &r[0]);
    MPI_Wait(&r[0], &st);
    CHECK(same(rbuf, N, 7 + peer));

    /* Matched probes. */
    fill(sbuf, N, 9);
    if (rank == 0) {
        MPI_Send(sbuf, N, MPI_INT, peer, 11, MPI_COMM_WORLD);
        MPI_Send(sbuf, N, MPI_INT, peer, 12, MPI_COMM_WORLD);
    } else {
        MPI_Message m;
        memset(rbuf, 0, sizeof rbuf);
        MPI_Mprobe(peer, 11, MPI_COMM_WORLD, &m, &st);
        MPI_Mrecv_c(rbuf, N, MPI_INT, &m, &st);
        CHECK(m == MPI_MESSAGE_NULL && same(rbuf, N, 9));
        memset(rbuf, 0, sizeof rbuf);
        MPI_Mprobe(peer, 12, MPI_COMM_WORLD, &m, &st);
        MPI_Imrecv_c(rbuf, N, MPI_INT, &m, &r[0]);
        MPI_Wait(&r[0], &st);
        CHECK(same(rbuf, N, 9));
    }

    /* Persistent, in each mode, started twice. */
    MPI_Request p[4];
    if (rank == 0) {
        MPI_Send_init_c(sbuf, N, MPI_INT, peer, 13, MPI_COMM_WORLD, &p[0]);
        MPI_Ssend_init_c(sbuf, N, MPI_INT, peer, 14, MPI_COMM_WORLD, &p[1]);
        for (int round = 0; round < 2; round++) {
            fill(sbuf, N, 20 + round);
            MPI_Startall(2, p);
            MPI_Waitall(2, p, MPI_STATUSES_IGNORE);
            CHECK(p[0] != MPI_REQUEST_NULL);
            MPI_Barrier(MPI_COMM_WORLD);
            MPI_Rsend_init_c(sbuf, N, MPI_INT, peer, 15, MPI_COMM_WORLD, &p[2]);
            MPI_Start(&p[2]);
            MPI_Wait(&p[2], MPI_STATUS_IGNORE);
            MPI_Request_free(&p[2]);
        }
        MPI_Request_free(&p[0]);
        MPI_Request_free(&p[1]);
    } else {
        int rbuf2[N], rbuf3[N];
        MPI_Recv_init_c(rbuf, N, MPI_INT, peer, 13, MPI_COMM_WORLD, &p[0]);
        MPI_Recv_init_c(rbuf2, N, MPI_INT, peer, 14, MPI_COMM_WORLD, &p[1]);
        MPI_Recv_init_c(rbuf3, N, MPI_INT, peer, 15, MPI_COMM_WORLD, &p[2]);
        for (int round = 0; round < 2; round++) {
            MPI_Startall(3, p);
            MPI_Waitall(2, p, MPI_STATUSES_IGNORE);
            CHECK(same(rbuf, N, 20 + round) && same(rbuf2, N, 20 + round));
            MPI_Barrier(MPI_COMM_WORLD);
            MPI_Wait(&p[2], MPI_STATUS_IGNORE);
            CHECK(same(rbuf3, N, 20 + round));
        }
        for (int i = 0; i < 3; i++)
            MPI_Request_free(&p[i]);
    }

    /* Buffered sends: MPI_Bsend_c, MPI_Ibsend_c, and persistent ones (both forms), in a
     * buffer attached with the _c form. */
    {
        MPI_Count size = 8 * (N * sizeof(int) + MPI_BSEND_OVERHEAD);
        void *attached = malloc(size), *back;
        MPI_Buffer_attach_c(attached, size);
        if (rank == 0) {
            fill(sbuf, N, 30);
            MPI_Bsend_c(sbuf, N, MPI_INT, peer, 16, MPI_COMM_WORLD);
            MPI_Ibsend_c(sbuf, N, MPI_INT, peer, 17, MPI_COMM_WORLD, &r[0]);
            MPI_Wait(&r[0], MPI_STATUS_IGNORE);
            MPI_Bsend_init(sbuf, N, MPI_INT, peer, 18, MPI_COMM_WORLD, &p[0]);
            MPI_Bsend_init_c(sbuf, N, MPI_INT, peer, 19, MPI_COMM_WORLD, &p[1]);
            for (int round = 0; round < 2; round++) {
                fill(sbuf, N, 31 + round);
                MPI_Startall(2, p);
                MPI_Waitall(2, p, MPI_STATUSES_IGNORE);
            }
            MPI_Request_free(&p[0]);
            MPI_Request_free(&p[1]);
        } else {
            for (int tag = 16; tag <= 17; tag++) {
                memset(rbuf, 0, sizeof rbuf);
                MPI_Recv(rbuf, N, MPI_INT, peer, tag, MPI_COMM_WORLD, &st);
                CHECK(same(rbuf, N, 30));
            }
            for (int round = 0; round < 2; round++)
                for (int tag = 18; tag <= 19; tag++) {
                    memset(rbuf, 0, sizeof rbuf);
                    MPI_Recv(rbuf, N, MPI_INT, peer, tag, MPI_COMM_WORLD, &st);
                    CHECK(same(rbuf, N, 31 + round));
                }
        }
        MPI_Buffer_detach_c(&back, &size);
        CHECK(back == attached && size == 8 * (MPI_Count)(N * sizeof(int) + MPI_BSEND_OVERHEAD));
        free(attached);
    }

    /* A count beyond an int: 3e9 elements of a type of no bytes go through whole. */
    {
        MPI_Datatype empty;
        MPI_Type_contiguous(0, MPI_INT, &empty);
        MPI_Type_commit(&empty);
        MPI_Count big = 3000000000LL;
        if (rank == 0) {
            CHECK(MPI_Send_c(sbuf, big, empty, peer, 20, MPI_COMM_WORLD) == MPI_SUCCESS);
        } else {
            CHECK(MPI_Recv_c(rbuf, big, empty, peer, 20, MPI_COMM_WORLD, &st) == MPI_SUCCESS);
            MPI_Get_count_c(&st, empty, &c);
            CHECK(c == 0);
        }
        MPI_Type_free(&empty);
    }

    /* A count beyond what a buffer holds is MPI_ERR_COUNT, never a cut length. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    {
        MPI_Count huge = INT64_MAX / 2;
        int rc = MPI_Send_c(sbuf, huge, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD);
        CHECK(rc != MPI_SUCCESS && error_class(rc) == MPI_ERR_COUNT);
        rc = MPI_Irecv_c(rbuf, huge, MPI_DOUBLE, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &r[0]);
        CHECK(rc != MPI_SUCCESS && error_class(rc) == MPI_ERR_COUNT);
        rc = MPI_Send_c(sbuf, -1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD);
        CHECK(rc != MPI_SUCCESS && error_class(rc) == MPI_ERR_COUNT);
        rc = MPI_Send_init_c(sbuf, huge, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &p[0]);
        if (rc == MPI_SUCCESS) {
            rc = MPI_Start(&p[0]);
            MPI_Request_free(&p[0]);
        }
        CHECK(rc != MPI_SUCCESS && error_class(rc) == MPI_ERR_COUNT);
        int a = 1, b = 2;
        rc = MPI_Reduce_local_c(&a, &b, huge, MPI_INT, MPI_SUM);
        CHECK(rc != MPI_SUCCESS && error_class(rc) == MPI_ERR_COUNT);
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);

    /* MPI_Op_create_c: locally and in a collective. */
    {
        MPI_Op op;
        int in[N], inout[N];
        MPI_Op_create_c(sum_c, 1, &op);
        for (int i = 0; i < N; i++) {
            in[i] = i;
            inout[i] = 2 * i;
        }
        MPI_Reduce_local_c(in, inout, N, MPI_INT, op);
        CHECK(last_len == N);
        int ok = 1;
        for (int i = 0; i < N; i++)
            ok &= inout[i] == 3 * i;
        CHECK(ok);
        MPI_Reduce_local(in, inout, 5, MPI_INT, op);
        CHECK(last_len == 5 && inout[4] == 16);
        int mine = rank + 1, total = 0;
        MPI_Allreduce(&mine, &total, 1, MPI_INT, op, MPI_COMM_WORLD);
        CHECK(total == 3);
        MPI_Op_free(&op);
    }
}

static void buffers(int peer)
{
    int sbuf[N], rbuf[N];
    MPI_Comm dup;
    MPI_Request r;
    MPI_Status st;
    void *back;
    int size, flag;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);

    /* A communicator's own buffer: buffered sends on it need no process buffer. */
    int csize = 4 * (N * sizeof(int) + MPI_BSEND_OVERHEAD);
    void *cbuf = malloc(csize);
    MPI_Comm_attach_buffer(dup, cbuf, csize);
    if (rank == 0) {
        fill(sbuf, N, 40);
        MPI_Bsend(sbuf, N, MPI_INT, peer, 1, dup);
        MPI_Ibsend(sbuf, N, MPI_INT, peer, 2, dup, &r);
        MPI_Wait(&r, MPI_STATUS_IGNORE);
        MPI_Comm_flush_buffer(dup);
        MPI_Bsend(sbuf, N, MPI_INT, peer, 3, dup);
        MPI_Comm_iflush_buffer(dup, &r);
        MPI_Wait(&r, MPI_STATUS_IGNORE);
        CHECK(r == MPI_REQUEST_NULL);
        /* No buffer for the world: a buffered send there is an error. */
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        int rc = MPI_Bsend(sbuf, N, MPI_INT, peer, 4, MPI_COMM_WORLD);
        CHECK(rc != MPI_SUCCESS && error_class(rc) == MPI_ERR_BUFFER);
        /* Too big for the communicator's buffer: an error too. */
        static int large[4096];
        MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
        rc = MPI_Bsend(large, 4096, MPI_INT, peer, 5, dup);
        CHECK(rc != MPI_SUCCESS && error_class(rc) == MPI_ERR_BUFFER);
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    } else {
        for (int tag = 1; tag <= 3; tag++) {
            memset(rbuf, 0, sizeof rbuf);
            MPI_Recv(rbuf, N, MPI_INT, peer, tag, dup, &st);
            CHECK(same(rbuf, N, 40));
        }
    }
    MPI_Comm_detach_buffer(dup, &back, &size);
    CHECK(back == cbuf && size == csize);
    free(cbuf);
    {
        MPI_Count csize_c = 0;
        cbuf = malloc(csize);
        MPI_Comm_attach_buffer_c(dup, cbuf, csize);
        MPI_Comm_detach_buffer_c(dup, &back, &csize_c);
        CHECK(back == cbuf && csize_c == csize);
        free(cbuf);
    }

    /* MPI_BUFFER_AUTOMATIC: no limit; detaching gives it back. */
    MPI_Buffer_attach(MPI_BUFFER_AUTOMATIC, 0);
    enum { BIG = 1 << 18 };
    int *big = malloc(BIG * sizeof(int));
    if (rank == 0) {
        fill(big, BIG, 3);
        for (int i = 0; i < 4; i++)
            MPI_Bsend(big, BIG, MPI_INT, peer, 6, MPI_COMM_WORLD);
        MPI_Buffer_iflush(&r);
        do
            MPI_Test(&r, &flag, MPI_STATUS_IGNORE);
        while (!flag);
        CHECK(r == MPI_REQUEST_NULL);
        MPI_Bsend(big, BIG, MPI_INT, peer, 6, MPI_COMM_WORLD);
        MPI_Buffer_flush();
    } else {
        for (int i = 0; i < 5; i++) {
            memset(big, 0, BIG * sizeof(int));
            MPI_Recv(big, BIG, MPI_INT, peer, 6, MPI_COMM_WORLD, &st);
            CHECK(same(big, BIG, 3));
        }
    }
    free(big);
    MPI_Buffer_detach(&back, &size);
    CHECK(back == MPI_BUFFER_AUTOMATIC && size == 0);
    MPI_Comm_free(&dup);
}

static void grequests(int peer)
{
    struct greq g = {0};
    MPI_Request r, set[3];
    MPI_Status st, sts[3];
    MPI_Count c;
    int flag, index, outcount, indices[3];

    /* Test before completion; query then free at the completing wait. */
    MPI_Grequest_start(query_fn, free_fn, cancel_fn, &g, &r);
    MPI_Test(&r, &flag, &st);
    CHECK(!flag && g.queries == 0);
    MPI_Request_get_status(r, &flag, &st);
    CHECK(!flag && g.queries == 0);
    MPI_Grequest_complete(r);
    MPI_Request_get_status(r, &flag, &st);
    CHECK(flag && g.queries == 1 && g.frees == 0);
    st.MPI_SOURCE = -5;
    MPI_Wait(&r, &st);
    CHECK(r == MPI_REQUEST_NULL && g.queries == 2 && g.frees == 1);
    MPI_Get_count_c(&st, MPI_INT, &c);
    CHECK(st.MPI_SOURCE == 7 && st.MPI_TAG == 11 && c == 5);

    /* Freed before completion: free_fn at MPI_Grequest_complete, no query. */
    memset(&g, 0, sizeof g);
    MPI_Grequest_start(query_fn, free_fn, cancel_fn, &g, &r);
    MPI_Request handle = r;
    MPI_Request_free(&r);
    CHECK(r == MPI_REQUEST_NULL && g.frees == 0);
    MPI_Grequest_complete(handle);
    CHECK(g.frees == 1 && g.queries == 0);

    /* Cancel: cancel_fn told whether it is complete; the query reports it cancelled. */
    memset(&g, 0, sizeof g);
    MPI_Grequest_start(query_fn, free_fn, cancel_fn, &g, &r);
    MPI_Cancel(&r);
    CHECK(g.cancels == 1 && g.last_complete == 0);
    MPI_Grequest_complete(r);
    MPI_Wait(&r, &st);
    MPI_Test_cancelled(&st, &flag);
    CHECK(flag);

    /* In every function over sets, beside a receive. */
    int sbuf = 5, rbuf = 0;
    struct greq gs[2];
    memset(gs, 0, sizeof gs);
    MPI_Grequest_start(query_fn, free_fn, cancel_fn, &gs[0], &set[0]);
    MPI_Grequest_start(query_fn, free_fn, cancel_fn, &gs[1], &set[1]);
    MPI_Irecv(&rbuf, 1, MPI_INT, peer, 30, MPI_COMM_WORLD, &set[2]);
    MPI_Testall(3, set, &flag, sts);
    CHECK(!flag);
    MPI_Testany(2, set, &index, &flag, &st);
    CHECK(!flag && index == MPI_UNDEFINED);
    MPI_Request_get_status_any(2, set, &index, &flag, &st);
    CHECK(!flag && gs[0].queries == 0);
    MPI_Grequest_complete(set[1]);
    MPI_Request_get_status_any(2, set, &index, &flag, &st);
    CHECK(flag && index == 1 && gs[1].queries == 1 && gs[1].frees == 0);
    MPI_Request_get_status_all(2, set, &flag, sts);
    CHECK(!flag);
    MPI_Request_get_status_some(2, set, &outcount, indices, sts);
    CHECK(outcount == 1 && indices[0] == 1);
    MPI_Waitany(2, set, &index, &st);
    CHECK(index == 1 && set[1] == MPI_REQUEST_NULL && gs[1].frees == 1);
    MPI_Testsome(2, set, &outcount, indices, sts);
    CHECK(outcount == 0);
    MPI_Send(&sbuf, 1, MPI_INT, peer, 30, MPI_COMM_WORLD);
    MPI_Grequest_complete(set[0]);
    MPI_Waitall(3, set, sts);
    CHECK(set[0] == MPI_REQUEST_NULL && gs[0].queries == 1 && gs[0].frees == 1 && rbuf == 5);
    CHECK(sts[0].MPI_SOURCE == 7 && sts[2].MPI_SOURCE == peer);

    /* Waitsome picks a completed generalized request. */
    memset(gs, 0, sizeof gs);
    MPI_Grequest_start(query_fn, free_fn, cancel_fn, &gs[0], &set[0]);
    MPI_Grequest_start(query_fn, free_fn, cancel_fn, &gs[1], &set[1]);
    MPI_Grequest_complete(set[0]);
    MPI_Waitsome(2, set, &outcount, indices, sts);
    CHECK(outcount == 1 && indices[0] == 0 && gs[0].frees == 1);
    MPI_Grequest_complete(set[1]);
    MPI_Waitsome(2, set, &outcount, indices, sts);
    CHECK(outcount == 1 && indices[0] == 1 && gs[1].frees == 1);

    /* A query's error is the completion's error: its own from MPI_Wait, in the status (and
     * MPI_ERR_IN_STATUS) from MPI_Waitall. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    memset(&g, 0, sizeof g);
    g.query_rc = MPI_ERR_OTHER;
    MPI_Grequest_start(query_fn, free_fn, cancel_fn, &g, &r);
    MPI_Grequest_complete(r);
    int rc = MPI_Wait(&r, &st);
    CHECK(rc != MPI_SUCCESS && error_class(rc) == MPI_ERR_OTHER && g.frees == 1);
    memset(gs, 0, sizeof gs);
    gs[1].query_rc = MPI_ERR_OTHER;
    MPI_Grequest_start(query_fn, free_fn, cancel_fn, &gs[0], &set[0]);
    MPI_Grequest_start(query_fn, free_fn, cancel_fn, &gs[1], &set[1]);
    MPI_Grequest_complete(set[0]);
    MPI_Grequest_complete(set[1]);
    rc = MPI_Waitall(2, set, sts);
    CHECK(error_class(rc) == MPI_ERR_IN_STATUS);
    CHECK(sts[0].MPI_ERROR == MPI_SUCCESS && error_class(sts[1].MPI_ERROR) == MPI_ERR_OTHER);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

/* A null or inactive request has the empty status: source MPI_ANY_SOURCE, tag MPI_ANY_TAG,
 * error MPI_SUCCESS (MPI 4.1, 3.7.3), whatever the caller's status held before. */
static void empty_statuses(void)
{
    MPI_Status st;
    int flag = 0;
    st.MPI_SOURCE = 7;
    st.MPI_TAG = 7;
    st.MPI_ERROR = 12345;
    CHECK(MPI_Request_get_status(MPI_REQUEST_NULL, &flag, &st) == MPI_SUCCESS);
    CHECK(flag && st.MPI_SOURCE == MPI_ANY_SOURCE && st.MPI_TAG == MPI_ANY_TAG &&
          st.MPI_ERROR == MPI_SUCCESS);
    MPI_Request r = MPI_REQUEST_NULL;
    st.MPI_ERROR = 12345;
    CHECK(MPI_Wait(&r, &st) == MPI_SUCCESS);
    CHECK(st.MPI_SOURCE == MPI_ANY_SOURCE && st.MPI_ERROR == MPI_SUCCESS);
    int buf = 0;
    MPI_Recv_init(&buf, 1, MPI_INT, 0, 0, MPI_COMM_WORLD, &r);
    st.MPI_ERROR = 12345;
    flag = 0;
    CHECK(MPI_Test(&r, &flag, &st) == MPI_SUCCESS);
    CHECK(flag && st.MPI_TAG == MPI_ANY_TAG && st.MPI_ERROR == MPI_SUCCESS);
    MPI_Request_free(&r);
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
    empty_statuses();
    big_counts(peer);
    MPI_Barrier(MPI_COMM_WORLD);
    buffers(peer);
    MPI_Barrier(MPI_COMM_WORLD);
    grequests(peer);

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

/* Intercommunicators: what MPICH's comm/ and coll/ tests do not look at — an intercommunicator
 * from groups, the comparisons, merge's order, the queries' errors on an intracommunicator,
 * the collectives MPICH has no intercommunicator test of (gather, allgather(v), alltoallw,
 * a nonblocking reduce-scatter-block, a persistent allreduce, the undefined scans), point-to-point with
 * MPI_ANY_SOURCE; at MPI_THREAD_MULTIPLE, over several VCIs when the environment gives
 * them. Run with 4 processes or more (the groups differ in size: see
 * `left_of`); prints " No Errors" when every check passes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <mpi.h>

static int errs = 0;
static int wrank, wsize;
#define CHECK(c)                                                               \
    do {                                                                       \
        if (!(c)) {                                                            \
            errs++;                                                            \
            printf("[%d] check failed: %s (line %d)\n", wrank, #c, __LINE__); \
        }                                                                      \
    } while (0)

static int error_class(int rc)
{
    int cls = MPI_SUCCESS;
    MPI_Error_class(rc, &cls);
    return cls;
}

/* The left group: world ranks below a third of the world (at least one), so the two groups
 * differ in size. */
static int left_of(int r)
{
    int n = wsize / 3 > 0 ? wsize / 3 : 1;
    return r < n;
}

static int left_size(void)
{
    return wsize / 3 > 0 ? wsize / 3 : 1;
}

static void queries_and_comparisons(MPI_Comm ic, int left)
{
    int flag = -1, n = -1, result = -1, lsize = left_size(), r;
    MPI_Group g, wg, expect;
    MPI_Comm dup;

    MPI_Comm_test_inter(ic, &flag);
    CHECK(flag == 1);
    MPI_Comm_test_inter(MPI_COMM_WORLD, &flag);
    CHECK(flag == 0);
    MPI_Comm_size(ic, &n);
    CHECK(n == (left ? lsize : wsize - lsize));
    MPI_Comm_remote_size(ic, &n);
    CHECK(n == (left ? wsize - lsize : lsize));

    /* The remote group is the other side's world ranks, in order. */
    MPI_Comm_remote_group(ic, &g);
    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    {
        int ranges[1][3];
        ranges[0][0] = left ? lsize : 0;
        ranges[0][1] = left ? wsize - 1 : lsize - 1;
        ranges[0][2] = 1;
        MPI_Group_range_incl(wg, 1, ranges, &expect);
    }
    MPI_Group_compare(g, expect, &result);
    CHECK(result == MPI_IDENT);
    MPI_Group_free(&g);
    MPI_Group_free(&expect);
    MPI_Group_free(&wg);

    /* On an intracommunicator the remote queries fail with MPI_ERR_COMM. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    CHECK(error_class(MPI_Comm_remote_size(MPI_COMM_WORLD, &n)) == MPI_ERR_COMM);
    CHECK(error_class(MPI_Comm_remote_group(MPI_COMM_WORLD, &g)) == MPI_ERR_COMM);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);

    /* A dup is congruent; an intra- and an intercommunicator are unequal. */
    MPI_Comm_dup(ic, &dup);
    MPI_Comm_compare(ic, dup, &result);
    CHECK(result == MPI_CONGRUENT);
    MPI_Comm_compare(ic, MPI_COMM_WORLD, &result);
    CHECK(result == MPI_UNEQUAL);
    MPI_Comm_rank(dup, &r);
    MPI_Comm_free(&dup);
}

static void merges(MPI_Comm ic, int left)
{
    MPI_Comm merged;
    int r, n, lrank;
    MPI_Comm_rank(ic, &lrank);

    /* The right group asks to go first (high = 0 there): its members take the low ranks. */
    MPI_Intercomm_merge(ic, left, &merged);
    MPI_Comm_size(merged, &n);
    CHECK(n == wsize);
    MPI_Comm_rank(merged, &r);
    CHECK(r == (left ? wsize - left_size() + lrank : lrank));
    {
        int sum = -1;
        MPI_Allreduce(&wrank, &sum, 1, MPI_INT, MPI_SUM, merged);
        CHECK(sum == wsize * (wsize - 1) / 2);
    }
    MPI_Comm_free(&merged);
}

static void point_to_point(MPI_Comm ic, int left)
{
    int lrank, rsize, i, got;
    MPI_Status st;
    MPI_Comm_rank(ic, &lrank);
    MPI_Comm_remote_size(ic, &rsize);
    /* Every right member sends its rank to left rank 0, which takes them by MPI_ANY_SOURCE:
     * the status names the sender's rank in its (the remote) group. */
    if (!left) {
        MPI_Send(&lrank, 1, MPI_INT, 0, 7, ic);
    } else if (lrank == 0) {
        int seen = 0;
        for (i = 0; i < rsize; i++) {
            MPI_Recv(&got, 1, MPI_INT, MPI_ANY_SOURCE, 7, ic, &st);
            CHECK(st.MPI_SOURCE == got);
            CHECK(st.MPI_TAG == 7);
            seen |= 1 << got;
        }
        CHECK(seen == (1 << rsize) - 1);
    }
}

static void collectives(MPI_Comm ic, int left)
{
    int lrank, lsize, rsize, i, j;
    int *in, *out, *counts, *displs;
    MPI_Datatype *types;
    MPI_Request req;

    MPI_Comm_rank(ic, &lrank);
    MPI_Comm_size(ic, &lsize);
    MPI_Comm_remote_size(ic, &rsize);
    in = malloc(sizeof(int) * 4 * (wsize + 1));
    out = malloc(sizeof(int) * 4 * (wsize + 1));
    counts = malloc(sizeof(int) * (wsize + 1));
    displs = malloc(sizeof(int) * (wsize + 1));
    types = malloc(sizeof(MPI_Datatype) * (wsize + 1));

    /* Gather to left rank 0 of the right group's world ranks. */
    for (i = 0; i < rsize; i++)
        in[i] = -1;
    if (left)
        MPI_Gather(NULL, 0, MPI_INT, in, 1, MPI_INT, lrank == 0 ? MPI_ROOT : MPI_PROC_NULL, ic);
    else
        MPI_Gather(&wrank, 1, MPI_INT, NULL, 0, MPI_INT, 0, ic);
    if (left && lrank == 0)
        for (i = 0; i < rsize; i++)
            CHECK(in[i] == left_size() + i);

    /* Allgather and its nonblocking form: each side gets the other's world ranks. */
    for (int nb = 0; nb < 2; nb++) {
        for (i = 0; i < rsize; i++)
            in[i] = -1;
        if (nb) {
            MPI_Iallgather(&wrank, 1, MPI_INT, in, 1, MPI_INT, ic, &req);
            MPI_Wait(&req, MPI_STATUS_IGNORE);
        } else {
            MPI_Allgather(&wrank, 1, MPI_INT, in, 1, MPI_INT, ic);
        }
        for (i = 0; i < rsize; i++)
            CHECK(in[i] == (left ? left_size() + i : i));
    }

    /* Allgatherv: remote member i sends i + 1 copies of its world rank, placed backwards. */
    for (i = 0, j = 0; i < rsize; i++) {
        counts[i] = i + 1;
        j += i + 1;
    }
    for (i = rsize - 1, j = 0; i >= 0; i--) {
        displs[i] = j;
        j += counts[i];
    }
    for (i = 0; i <= lrank; i++)
        out[i] = wrank;
    MPI_Allgatherv(out, lrank + 1, MPI_INT, in, counts, displs, MPI_INT, ic);
    for (i = 0; i < rsize; i++)
        for (j = 0; j < counts[i]; j++)
            CHECK(in[displs[i] + j] == (left ? left_size() + i : i));

    /* Alltoallw with a byte displacement per block: to remote j goes 100 * wrank + j. */
    for (j = 0; j < rsize; j++) {
        out[j] = 100 * wrank + j;
        counts[j] = 1;
        displs[j] = (int) (j * sizeof(int));
        types[j] = MPI_INT;
        in[j] = -1;
    }
    MPI_Alltoallw(out, counts, displs, types, in, counts, displs, types, ic);
    for (i = 0; i < rsize; i++)
        CHECK(in[i] == 100 * ((left ? left_size() : 0) + i) + lrank);

    /* Ireduce_scatter_block: both groups reduce vectors of lsize * rsize elements, so each
     * group's count a member is the other group's size; member i gets the i-th block of the
     * sum of the other group's vectors (element e of world rank w's vector: e + w). */
    {
        int n = lsize * rsize, k = rsize, base = 0;
        int *v = malloc(sizeof(int) * n), *got = malloc(sizeof(int) * k);
        for (i = 0; i < n; i++)
            v[i] = i + wrank;
        MPI_Ireduce_scatter_block(v, got, k, MPI_INT, MPI_SUM, ic, &req);
        MPI_Wait(&req, MPI_STATUS_IGNORE);
        for (i = 0; i < rsize; i++)
            base += (left ? left_size() : 0) + i;
        for (j = 0; j < k; j++)
            CHECK(got[j] == rsize * (lrank * k + j) + base);
        free(v);
        free(got);
    }

    /* A persistent allreduce started twice: the other group's sum of world ranks. */
    {
        int mine = wrank, sum = -1, expect = 0, round;
        MPI_Allreduce_init(&mine, &sum, 1, MPI_INT, MPI_SUM, ic, MPI_INFO_NULL, &req);
        for (i = 0; i < rsize; i++)
            expect += (left ? left_size() : 0) + i;
        for (round = 0; round < 2; round++) {
            sum = -1;
            MPI_Start(&req);
            MPI_Wait(&req, MPI_STATUS_IGNORE);
            CHECK(sum == expect);
        }
        MPI_Request_free(&req);
    }

    /* The prefix reductions are not defined on an intercommunicator. */
    MPI_Comm_set_errhandler(ic, MPI_ERRORS_RETURN);
    CHECK(error_class(MPI_Scan(out, in, 1, MPI_INT, MPI_SUM, ic)) == MPI_ERR_COMM);
    CHECK(error_class(MPI_Iexscan(out, in, 1, MPI_INT, MPI_SUM, ic, &req)) == MPI_ERR_COMM);

    free(in);
    free(out);
    free(counts);
    free(displs);
    free(types);
}

static void from_groups(void)
{
    MPI_Group wg, lg, rg;
    MPI_Comm ic;
    int ranges[1][3], left = left_of(wrank), n = -1, sum = -1;

    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    ranges[0][0] = 0;
    ranges[0][1] = left_size() - 1;
    ranges[0][2] = 1;
    MPI_Group_range_incl(wg, 1, ranges, left ? &lg : &rg);
    ranges[0][0] = left_size();
    ranges[0][1] = wsize - 1;
    MPI_Group_range_incl(wg, 1, ranges, left ? &rg : &lg);
    CHECK(MPI_Intercomm_create_from_groups(lg, 0, rg, 0, "intercomm.c from groups",
                                           MPI_INFO_NULL, MPI_ERRORS_RETURN, &ic)
          == MPI_SUCCESS);
    MPI_Comm_remote_size(ic, &n);
    CHECK(n == (left ? wsize - left_size() : left_size()));
    MPI_Allreduce(&wrank, &sum, 1, MPI_INT, MPI_SUM, ic);
    {
        int expect = 0, i;
        for (i = 0; i < wsize; i++)
            if (left_of(i) != left)
                expect += i;
        CHECK(sum == expect);
    }
    MPI_Comm_free(&ic);
    MPI_Group_free(&lg);
    MPI_Group_free(&rg);
    MPI_Group_free(&wg);
}

int main(int argc, char **argv)
{
    int provided, left;
    MPI_Comm local, ic, split;

    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    left = left_of(wrank);

    /* The local communicators lead by their lowest world rank; the peer is the world. */
    MPI_Comm_split(MPI_COMM_WORLD, left, wrank, &local);
    MPI_Intercomm_create(local, 0, MPI_COMM_WORLD, left ? left_size() : 0, 5, &ic);
    MPI_Comm_free(&local);

    queries_and_comparisons(ic, left);
    merges(ic, left);
    point_to_point(ic, left);
    collectives(ic, left);

    /* A split where one color has no members on the right: those get MPI_COMM_NULL. */
    {
        int lrank;
        MPI_Comm_rank(ic, &lrank);
        MPI_Comm_split(ic, left ? 0 : (lrank == 0 ? 1 : 0), 0, &split);
        if (!left && lrank == 0)
            CHECK(split == MPI_COMM_NULL);
        else if (split != MPI_COMM_NULL)
            MPI_Comm_free(&split);
    }

    MPI_Comm_free(&ic);
    from_groups();

    {
        int total = 0;
        MPI_Allreduce(&errs, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        if (wrank == 0 && total == 0)
            printf(" No Errors\n");
        else if (errs)
            printf("[%d] %d errors\n", wrank, errs);
    }
    MPI_Finalize();
    return 0;
}

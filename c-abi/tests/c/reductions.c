/* Reductions beyond the predefined operations on the whole vector: the prefix reductions
 * (MPI_Scan, MPI_Exscan), the program's own operations (MPI_Op_create, commutative or not, in
 * every reduction), MPI_Reduce_local, MPI_Op_commutative and MPI_Op_free, and MPI_Pcontrol.
 * Two operations that do not commute tell the order apart: "first" keeps the lower rank's
 * value, "last" the higher rank's. Run with any number of processes (the test runs 5: not a
 * power of two); prints " No Errors" when every check passes. */
#include <stdio.h>
#include <string.h>
#include <mpi.h>

static int errs = 0, rank = 0;
#define CHECK(c)                                                              \
    do {                                                                      \
        if (!(c)) {                                                           \
            errs++;                                                           \
            printf("[%d] check failed: %s (line %d)\n", rank, #c, __LINE__); \
        }                                                                     \
    } while (0)

static int calls = 0;

/* inoutvec = invec op inoutvec, op keeping the lower rank's element. */
static void first(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    CHECK(*dt == MPI_INT);
    memcpy(inout, in, (size_t)*len * sizeof(int));
    calls++;
}

/* op keeping the higher rank's element: inoutvec stays. */
static void last(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    (void)in, (void)inout, (void)len, (void)dt;
    calls++;
}

/* A commutative one on doubles: the sum of squares' running total, as a user writes it. */
static void add(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    double *a = in, *b = inout;
    CHECK(*dt == MPI_DOUBLE);
    for (int i = 0; i < *len; i++)
        b[i] += a[i];
}

int main(int argc, char **argv)
{
    int size, r;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(MPI_Pcontrol(1) == MPI_SUCCESS);

    /* Predefined: inclusive and exclusive prefix sums, and in place. */
    int mine[2] = {rank + 1, 10 * rank}, got[2] = {-1, -1};
    MPI_Scan(mine, got, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    CHECK(got[0] == (rank + 1) * (rank + 2) / 2 && got[1] == 10 * rank * (rank + 1) / 2);
    got[0] = got[1] = -1;
    MPI_Exscan(mine, got, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank > 0)
        CHECK(got[0] == rank * (rank + 1) / 2 && got[1] == 10 * (rank - 1) * rank / 2);
    else
        CHECK(got[0] == -1 && got[1] == -1); /* left as it was */
    int inplace = rank;
    MPI_Scan(MPI_IN_PLACE, &inplace, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    CHECK(inplace == rank);

    /* The program's operations. */
    MPI_Op op_first, op_last, op_add;
    MPI_Op_create(first, 0, &op_first);
    MPI_Op_create(last, 0, &op_last);
    MPI_Op_create(add, 1, &op_add);
    MPI_Op_commutative(op_first, &r);
    CHECK(r == 0);
    MPI_Op_commutative(op_add, &r);
    CHECK(r == 1);
    MPI_Op_commutative(MPI_SUM, &r);
    CHECK(r == 1);

    int v[3] = {rank, rank, rank}, w[3] = {-1, -1, -1};
    MPI_Allreduce(v, w, 3, MPI_INT, op_first, MPI_COMM_WORLD);
    CHECK(w[0] == 0 && w[2] == 0);
    MPI_Allreduce(v, w, 3, MPI_INT, op_last, MPI_COMM_WORLD);
    CHECK(w[0] == size - 1 && w[2] == size - 1);
    /* At a root other than 0, which a tree rooted there would fold out of order. */
    for (int root = 0; root < size; root++) {
        w[0] = w[1] = w[2] = -1;
        MPI_Reduce(v, w, 3, MPI_INT, op_first, root, MPI_COMM_WORLD);
        CHECK(rank != root || (w[0] == 0 && w[1] == 0 && w[2] == 0));
        MPI_Reduce(v, w, 3, MPI_INT, op_last, root, MPI_COMM_WORLD);
        CHECK(rank != root || (w[0] == size - 1 && w[2] == size - 1));
    }
    MPI_Scan(v, w, 3, MPI_INT, op_first, MPI_COMM_WORLD);
    CHECK(w[0] == 0 && w[1] == 0 && w[2] == 0);
    MPI_Scan(v, w, 3, MPI_INT, op_last, MPI_COMM_WORLD);
    CHECK(w[0] == rank && w[2] == rank);
    w[0] = -7;
    MPI_Exscan(v, w, 3, MPI_INT, op_last, MPI_COMM_WORLD);
    CHECK(w[0] == (rank > 0 ? rank - 1 : -7));
    MPI_Exscan(v, w, 3, MPI_INT, op_first, MPI_COMM_WORLD);
    CHECK(rank == 0 || w[0] == 0);
    CHECK(calls > 0);

    double d[4], sum[4];
    for (int i = 0; i < 4; i++)
        d[i] = rank * 0.5 + i;
    MPI_Allreduce(d, sum, 4, MPI_DOUBLE, op_add, MPI_COMM_WORLD);
    for (int i = 0; i < 4; i++)
        CHECK(sum[i] == 0.25 * size * (size - 1) + i * size);
    MPI_Reduce(d, sum, 4, MPI_DOUBLE, op_add, size - 1, MPI_COMM_WORLD);
    CHECK(rank != size - 1 || sum[3] == 0.25 * size * (size - 1) + 3 * size);

    /* MPI_Reduce_local: inoutbuf = inbuf op inoutbuf. */
    int a[2] = {1, 2}, b[2] = {5, 6};
    MPI_Reduce_local(a, b, 2, MPI_INT, op_first);
    CHECK(b[0] == 1 && b[1] == 2);
    b[0] = 5;
    MPI_Reduce_local(a, b, 2, MPI_INT, MPI_SUM);
    CHECK(b[0] == 6 && b[1] == 4);

    MPI_Op_free(&op_first);
    CHECK(op_first == MPI_OP_NULL);
    MPI_Op_free(&op_last);
    MPI_Op_free(&op_add);
    /* A freed or predefined operation is an error, reported under MPI_ERRORS_RETURN. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Op sum_op = MPI_SUM;
    CHECK(MPI_Op_free(&sum_op) != MPI_SUCCESS && sum_op == MPI_SUM);
    CHECK(MPI_Allreduce(v, w, 1, MPI_INT, op_last, MPI_COMM_WORLD) != MPI_SUCCESS);

    int total = 0;
    MPI_Allreduce(&errs, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf(total ? " Found %d errors\n" : " No Errors\n", total);
    MPI_Finalize();
    return 0;
}

/* The datatype functions MPICH's datatype suite leaves out: the big-count (_c) constructors
 * and queries, what MPI_Type_get_envelope_c / _get_contents_c report of them (and the int
 * forms' refusal), MPI_Pack_c / MPI_Unpack_c, MPI_Pack_external_c and _size_c,
 * MPI_Type_get_value_index, MPI_Type_match_size's error, MPI_Aint_add / _diff,
 * MPI_Status_set_elements_c with a struct of mixed members, MPI_Type_create_hindexed_block_c,
 * and a subarray and a darray sent between two ranks. Run with 2 processes; prints
 * " No Errors" when every check passes. */
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

static void big_count_constructors(void)
{
    MPI_Datatype v, c, s;
    MPI_Count ni, na, nc, nt, lb, extent, size;
    int combiner;

    MPI_Type_vector_c(3, 2, 5, MPI_INT, &v);
    MPI_Type_get_envelope_c(v, &ni, &na, &nc, &nt, &combiner);
    CHECK(combiner == MPI_COMBINER_VECTOR && ni == 0 && na == 0 && nc == 3 && nt == 1);
    MPI_Count counts[3] = {0, 0, 0};
    MPI_Datatype inner = MPI_DATATYPE_NULL;
    MPI_Type_get_contents_c(v, 0, 0, 3, 1, NULL, NULL, counts, &inner);
    CHECK(counts[0] == 3 && counts[1] == 2 && counts[2] == 5 && inner == MPI_INT);
    MPI_Type_get_extent_c(v, &lb, &extent);
    CHECK(lb == 0 && extent == (2 * 5 + 2) * 4);
    MPI_Type_size_c(v, &size);
    CHECK(size == 24);

    /* The int forms cannot report large counts: an error under MPI_ERRORS_RETURN. */
    int i1, i2, i3, i4;
    CHECK(MPI_Type_get_envelope(v, &i1, &i2, &i3, &i4) != MPI_SUCCESS);

    MPI_Count disps[2] = {0, 16};
    MPI_Type_create_hindexed_block_c(2, 3, disps, MPI_SHORT, &c);
    MPI_Type_get_true_extent_c(c, &lb, &extent);
    CHECK(lb == 0 && extent == 22);
    MPI_Type_get_envelope_c(c, &ni, &na, &nc, &nt, &combiner);
    CHECK(combiner == MPI_COMBINER_HINDEXED_BLOCK && nc == 4 && nt == 1);

    /* A struct of mixed members: padded to its strictest member, as C pads it. */
    MPI_Count lens[2] = {1, 1}, sd[2] = {0, 8};
    MPI_Datatype types[2] = {MPI_DOUBLE, MPI_CHAR};
    MPI_Type_create_struct_c(2, lens, sd, types, &s);
    MPI_Type_get_extent_x(s, &lb, &extent);
    CHECK(lb == 0 && extent == 16);
    MPI_Type_commit(&s);

    /* Five predefined elements of it: two whole structs and the double of a third. */
    MPI_Status st;
    MPI_Count n = 0;
    MPI_Status_set_elements_c(&st, s, 5);
    MPI_Get_elements_c(&st, s, &n);
    CHECK(n == 5);
    int whole = 0;
    MPI_Get_count(&st, s, &whole);
    CHECK(whole == MPI_UNDEFINED);

    MPI_Count packsize = 0;
    MPI_Pack_size_c(3, s, MPI_COMM_WORLD, &packsize);
    CHECK(packsize == 27);

    MPI_Type_free(&v);
    MPI_Type_free(&c);
    MPI_Type_free(&s);
}

static void packing(void)
{
    int a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {0};
    char buf[64];
    MPI_Count pos = 0;
    MPI_Datatype v;
    MPI_Type_vector(3, 1, 2, MPI_INT, &v);
    MPI_Type_commit(&v);
    MPI_Pack_c(a, 1, v, buf, sizeof buf, &pos, MPI_COMM_WORLD);
    CHECK(pos == 12);
    pos = 0;
    MPI_Unpack_c(buf, 12, &pos, b, 1, v, MPI_COMM_WORLD);
    CHECK(pos == 12 && b[0] == 1 && b[1] == 0 && b[2] == 3 && b[4] == 5);
    /* Too small an output buffer is an error. */
    pos = 0;
    CHECK(MPI_Pack_c(a, 2, v, buf, 8, &pos, MPI_COMM_WORLD) != MPI_SUCCESS);

    /* external32: big-endian, MPI_LONG in 4 bytes. */
    long l[2] = {1, -2};
    unsigned char x[16];
    MPI_Count xsize = 0, xpos = 0;
    MPI_Pack_external_size_c("external32", 2, MPI_LONG, &xsize);
    CHECK(xsize == 8);
    MPI_Pack_external_c("external32", l, 2, MPI_LONG, x, sizeof x, &xpos);
    CHECK(xpos == 8 && x[3] == 1 && x[4] == 0xff && x[7] == 0xfe);
    long back[2] = {0, 0};
    xpos = 0;
    MPI_Unpack_external_c("external32", x, 8, &xpos, back, 2, MPI_LONG);
    CHECK(back[0] == 1 && back[1] == -2);
    /* The vector's ints, in order, big-endian. */
    MPI_Aint apos = 0, asize = 0;
    MPI_Pack_external_size("external32", 1, v, &asize);
    CHECK(asize == 12);
    MPI_Pack_external("external32", a, 1, v, x, sizeof x, &apos);
    CHECK(apos == 12 && x[3] == 1 && x[7] == 3 && x[11] == 5);
    CHECK(MPI_Pack_external_size("native", 1, MPI_INT, &asize) != MPI_SUCCESS);
    MPI_Type_free(&v);
}

static void queries(void)
{
    MPI_Datatype t = MPI_DATATYPE_NULL;
    MPI_Type_get_value_index(MPI_DOUBLE, MPI_INT, &t);
    CHECK(t == MPI_DOUBLE_INT);
    MPI_Type_get_value_index(MPI_CHAR, MPI_DOUBLE, &t);
    CHECK(t == MPI_DATATYPE_NULL);
    CHECK(MPI_Type_match_size(MPI_TYPECLASS_REAL, 3, &t) != MPI_SUCCESS);
    MPI_Type_match_size(MPI_TYPECLASS_INTEGER, 8, &t);
    int size = 0;
    MPI_Type_size(t, &size);
    CHECK(size == 8);

    int arr[4];
    MPI_Aint a0, a3;
    MPI_Get_address(&arr[0], &a0);
    MPI_Get_address(&arr[3], &a3);
    CHECK(MPI_Aint_diff(a3, a0) == 12);
    CHECK(MPI_Aint_add(a0, 12) == a3);

    /* A predefined type's envelope is MPI_COMBINER_NAMED; its contents are an error. */
    int ni, na, nt, combiner;
    MPI_Type_get_envelope(MPI_FLOAT_INT, &ni, &na, &nt, &combiner);
    CHECK(combiner == MPI_COMBINER_NAMED && ni == 0 && na == 0 && nt == 0);
    CHECK(MPI_Type_get_contents(MPI_INT, 0, 0, 0, NULL, NULL, NULL) != MPI_SUCCESS);

    /* A dup of a committed type is committed, and says DUP of the original. */
    MPI_Datatype c, d, inner;
    MPI_Type_contiguous(2, MPI_INT, &c);
    MPI_Type_commit(&c);
    MPI_Type_dup(c, &d);
    MPI_Type_get_envelope(d, &ni, &na, &nt, &combiner);
    CHECK(combiner == MPI_COMBINER_DUP && nt == 1);
    MPI_Type_get_contents(d, 0, 0, 1, NULL, NULL, &inner);
    MPI_Type_get_envelope(inner, &ni, &na, &nt, &combiner);
    CHECK(combiner == MPI_COMBINER_CONTIGUOUS && ni == 1);
    MPI_Type_free(&inner);
    int v[2] = {7, 8}, w[2];
    MPI_Sendrecv(v, 1, d, rank, 0, w, 1, d, rank, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    CHECK(w[0] == 7 && w[1] == 8);
    MPI_Type_free(&d);
    MPI_Type_free(&c);
}

/* A 4x6 array: rank 0 sends its 2x3 box from (1, 2) as a subarray (the _c form), rank 1
 * receives it into the columns each process of a 1x2 cyclic darray owns. */
static void arrays(void)
{
    int a[4][6], b[4][6];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 6; j++)
            a[i][j] = 10 * i + j, b[i][j] = -1;
    MPI_Count sizes[2] = {4, 6}, subsizes[2] = {2, 3}, starts[2] = {1, 2};
    MPI_Datatype sub, dar;
    MPI_Type_create_subarray_c(2, sizes, subsizes, starts, MPI_ORDER_C, MPI_INT, &sub);
    MPI_Type_commit(&sub);
    MPI_Aint lb, extent;
    MPI_Type_get_extent(sub, &lb, &extent);
    CHECK(lb == 0 && extent == 4 * 6 * 4);

    /* Rows 0-3 split in blocks of 2 (BLOCK over 2 rows of processes would need 2 ranks in
     * that dimension: here the grid is 1x2), columns cyclic(1) over 2: rank 1 of the grid
     * owns the odd columns, 12 ints. */
    int gsizes[2] = {4, 6}, distribs[2] = {MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_CYCLIC};
    int dargs[2] = {MPI_DISTRIBUTE_DFLT_DARG, 1}, psizes[2] = {1, 2};
    MPI_Type_create_darray(2, 1, 2, gsizes, distribs, dargs, psizes, MPI_ORDER_C, MPI_INT, &dar);
    MPI_Type_commit(&dar);
    int size = 0;
    MPI_Type_size(dar, &size);
    CHECK(size == 12 * 4);

    if (rank == 0) {
        MPI_Send(a, 1, sub, 1, 5, MPI_COMM_WORLD);
        int six[6] = {1, 2, 3, 4, 5, 6};
        MPI_Send(six, 6, MPI_INT, 1, 6, MPI_COMM_WORLD);
    } else if (rank == 1) {
        MPI_Recv(b, 1, sub, 0, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        CHECK(b[1][2] == 12 && b[1][4] == 14 && b[2][3] == 23 && b[0][0] == -1 && b[3][5] == -1);
        int c[4][6];
        memset(c, 0, sizeof c);
        MPI_Status st;
        MPI_Recv(c, 1, dar, 0, 6, MPI_COMM_WORLD, &st);
        /* The first six owned places: row 0's odd columns, then row 1's. */
        CHECK(c[0][1] == 1 && c[0][3] == 2 && c[0][5] == 3 && c[1][1] == 4 && c[1][5] == 6);
        CHECK(c[0][0] == 0 && c[0][2] == 0);
        int got = 0;
        MPI_Get_elements(&st, dar, &got);
        CHECK(got == 6);
    }
    MPI_Type_free(&sub);
    MPI_Type_free(&dar);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    big_count_constructors();
    packing();
    queries();
    arrays();
    int total = 0;
    MPI_Allreduce(&errs, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf(total ? " Found %d errors\n" : " No Errors\n", total);
    MPI_Finalize();
    return 0;
}

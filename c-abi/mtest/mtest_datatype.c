/* MTest helpers of the datatype tests (see dtypes.h and mpitest.h), over any MPI of the
 * standard ABI. Written for ch4; MPICH's own are in test/mpi/util. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpitest.h"
#include "dtypes.h"

void MTestCalloc(size_t size, mtest_mem_type_e type, void **hostbuf, void **devicebuf,
                 int device)
{
    (void) type;
    (void) device;
    *hostbuf = calloc(size ? size : 1, 1);
    if (devicebuf)
        *devicebuf = *hostbuf;
}

void MTestCopyContent(const void *sbuf, void *dbuf, size_t size, mtest_mem_type_e type)
{
    (void) type;
    if (sbuf != dbuf)
        memcpy(dbuf, sbuf, size);
}

void MTestFree(mtest_mem_type_e type, void *hostbuf, void *devicebuf)
{
    (void) type;
    (void) devicebuf;
    free(hostbuf);
}

static int basic_only = 0;

void MTestDatatype2BasicOnly(void)
{
    basic_only = 1;
}

/* At most this many types in the set. */
#define MAX_TYPES 32
/* Elements of each type sent. */
#define COUNT 10

void MTestDatatype2Allocate(MPI_Datatype **types, void ***inbufs, void ***outbufs, int **counts,
                            int **bytesize, int *n)
{
    *types = calloc(MAX_TYPES, sizeof **types);
    *inbufs = calloc(MAX_TYPES, sizeof **inbufs);
    *outbufs = calloc(MAX_TYPES, sizeof **outbufs);
    *counts = calloc(MAX_TYPES, sizeof **counts);
    *bytesize = calloc(MAX_TYPES, sizeof **bytesize);
    *n = MAX_TYPES;
}

/* Adds `type` (committed here) to the set with its buffers: the input's data bytes are a
 * pattern, written through MPI_Unpack so that they land where the type map says. */
static void add(MPI_Datatype type, const char *name, MPI_Datatype *types, void **inbufs,
                void **outbufs, int *counts, int *bytesize, int *n)
{
    MPI_Aint lb, extent;
    int size, position = 0;
    if (name)
        MPI_Type_set_name(type, name);
    MPI_Type_commit(&type);
    MPI_Type_get_extent(type, &lb, &extent);
    MPI_Type_size(type, &size);
    int bytes = (int) (lb + extent * COUNT);
    char *packed = malloc((size_t) size * COUNT + 1);
    for (int i = 0; i < size * COUNT; i++)
        packed[i] = (char) (1 + (i * 7) % 251);
    types[*n] = type;
    counts[*n] = COUNT;
    bytesize[*n] = bytes;
    inbufs[*n] = calloc((size_t) bytes + 1, 1);
    outbufs[*n] = calloc((size_t) bytes + 1, 1);
    MPI_Unpack(packed, size * COUNT, &position, inbufs[*n], COUNT, type, MPI_COMM_WORLD);
    free(packed);
    (*n)++;
}

void MTestDatatype2Generate(MPI_Datatype *types, void **inbufs, void **outbufs, int *counts,
                            int *bytesize, int *n)
{
    static const MPI_Datatype basics[] = {
        MPI_CHAR, MPI_SHORT, MPI_INT, MPI_LONG, MPI_FLOAT, MPI_DOUBLE, MPI_LONG_LONG,
        MPI_UNSIGNED, MPI_BYTE, MPI_DOUBLE_INT, MPI_SHORT_INT, MPI_2INT,
    };
    MPI_Datatype t, u;
    *n = 0;
#define ADD(type, name) add((type), (name), types, inbufs, outbufs, counts, bytesize, n)
    for (size_t i = 0; i < sizeof basics / sizeof basics[0]; i++)
        ADD(basics[i], NULL);
    if (basic_only)
        return;
    MPI_Type_contiguous(3, MPI_INT, &t);
    ADD(t, "int-contig");
    MPI_Type_vector(4, 2, 3, MPI_INT, &t);
    ADD(t, "int-vector");
    MPI_Type_create_hvector(3, 1, 24, MPI_DOUBLE, &t);
    ADD(t, "double-hvector");
    {
        int lens[3] = {1, 2, 3}, disps[3] = {0, 3, 7};
        MPI_Type_indexed(3, lens, disps, MPI_SHORT, &t);
        ADD(t, "short-indexed");
    }
    {
        int lens[3] = {1, 2, 1};
        MPI_Aint disps[3] = {0, 8, 24};
        MPI_Datatype ts[3] = {MPI_CHAR, MPI_INT, MPI_DOUBLE};
        MPI_Type_create_struct(3, lens, disps, ts, &t);
        ADD(t, "char-int-double-struct");
    }
    MPI_Type_vector(2, 1, 2, MPI_INT, &u);
    MPI_Type_create_resized(u, 0, 16, &t);
    MPI_Type_free(&u);
    ADD(t, "int-vector-resized");
    {
        int sizes[2] = {4, 5}, subsizes[2] = {2, 3}, starts[2] = {1, 1};
        MPI_Type_create_subarray(2, sizes, subsizes, starts, MPI_ORDER_C, MPI_FLOAT, &t);
        ADD(t, "float-subarray");
    }
#undef ADD
}

int MTestDatatype2Check(void *inbuf, void *outbuf, int size_bytes)
{
    const char *a = inbuf, *b = outbuf;
    for (int i = 0; i < size_bytes; i++)
        if (a[i] != b[i])
            return i + 1;
    return 0;
}

void MTestDatatype2Free(MPI_Datatype *types, void **inbufs, void **outbufs, int *counts,
                        int *bytesize, int n)
{
    for (int i = 0; i < n; i++) {
        int combiner, ni, na, nt;
        MPI_Type_get_envelope(types[i], &ni, &na, &nt, &combiner);
        if (combiner != MPI_COMBINER_NAMED)
            MPI_Type_free(&types[i]);
        free(inbufs[i]);
        free(outbufs[i]);
    }
    free(types);
    free(inbufs);
    free(outbufs);
    free(counts);
    free(bytesize);
}

/* dtypes.h: the set of datatypes MPICH's sendrecvt tests send and receive (MTestDatatype2*),
 * written for ch4's harness (mtest_datatype.c). Each type comes with a count, an input buffer
 * whose data bytes hold a pattern (zero between them), an output buffer of the same size, and
 * that size in bytes. */
#ifndef CH4_DTYPES_H
#define CH4_DTYPES_H

#include <mpi.h>

#if defined(__cplusplus)
extern "C" {
#endif

/* Only the predefined types (the tests' -basiconly). Call before MTestDatatype2Allocate. */
void MTestDatatype2BasicOnly(void);
/* Room for the set: *n is how many types there may be. */
void MTestDatatype2Allocate(MPI_Datatype **types, void ***inbufs, void ***outbufs, int **counts,
                            int **bytesize, int *n);
/* Makes the types (committed, named) and their buffers; *n is how many there are. */
void MTestDatatype2Generate(MPI_Datatype *types, void **inbufs, void **outbufs, int *counts,
                            int *bytesize, int *n);
/* 0 when the size_bytes bytes of the two buffers are equal, else the first differing byte's
 * index plus one. */
int MTestDatatype2Check(void *inbuf, void *outbuf, int size_bytes);
/* Frees what Allocate and Generate made. */
void MTestDatatype2Free(MPI_Datatype *types, void **inbufs, void **outbufs, int *counts,
                        int *bytesize, int n);

#if defined(__cplusplus)
}
#endif

#endif

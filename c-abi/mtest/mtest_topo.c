/* MTest for the group and topology tests of MPICH's suite (group/, topo/): what they call
 * beyond mtest.c. */

#include "mpi.h"
#include "mpitest.h"

/* The communicators a test runs over, one per call while it returns nonzero. MPICH's also
 * yields intercommunicators; this one gives the intracommunicators of
 * MTestGetIntracommGeneral, which is what the group tests that call it use the
 * communicators for (their groups). */
int MTestGetComm(MPI_Comm *comm, int min_size)
{
    return MTestGetIntracommGeneral(comm, min_size, 0);
}

/* MTest's collective wrappers, which MPICH's collective tests call to run each case blocking
 * or nonblocking: MTest_<Coll>(is_blocking, <the collective's arguments>) calls MPI_<Coll>, or
 * MPI_I<coll> and waits for its request. ch4's own harness (c-abi/mtest). */
#ifndef MPICOLLTEST_H
#define MPICOLLTEST_H
#include <mpi.h>

static inline int MTest_Barrier(int is_blocking, MPI_Comm comm)
{
    if (is_blocking)
        return MPI_Barrier(comm);
    MPI_Request req;
    int err = MPI_Ibarrier(comm, &req);
    return err != MPI_SUCCESS ? err : MPI_Wait(&req, MPI_STATUS_IGNORE);
}

static inline int MTest_Bcast(int is_blocking, void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm)
{
    if (is_blocking)
        return MPI_Bcast(buffer, count, datatype, root, comm);
    MPI_Request req;
    int err = MPI_Ibcast(buffer, count, datatype, root, comm, &req);
    return err != MPI_SUCCESS ? err : MPI_Wait(&req, MPI_STATUS_IGNORE);
}

static inline int MTest_Gather(int is_blocking, const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm)
{
    if (is_blocking)
        return MPI_Gather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
    MPI_Request req;
    int err = MPI_Igather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm, &req);
    return err != MPI_SUCCESS ? err : MPI_Wait(&req, MPI_STATUS_IGNORE);
}

static inline int MTest_Gatherv(int is_blocking, const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, const int *recvcounts, const int *displs, MPI_Datatype recvtype, int root, MPI_Comm comm)
{
    if (is_blocking)
        return MPI_Gatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm);
    MPI_Request req;
    int err = MPI_Igatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm, &req);
    return err != MPI_SUCCESS ? err : MPI_Wait(&req, MPI_STATUS_IGNORE);
}

static inline int MTest_Scatter(int is_blocking, const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm)
{
    if (is_blocking)
        return MPI_Scatter(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
    MPI_Request req;
    int err = MPI_Iscatter(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm, &req);
    return err != MPI_SUCCESS ? err : MPI_Wait(&req, MPI_STATUS_IGNORE);
}

static inline int MTest_Scatterv(int is_blocking, const void *sendbuf, const int *sendcounts, const int *displs, MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm)
{
    if (is_blocking)
        return MPI_Scatterv(sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm);
    MPI_Request req;
    int err = MPI_Iscatterv(sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm, &req);
    return err != MPI_SUCCESS ? err : MPI_Wait(&req, MPI_STATUS_IGNORE);
}

static inline int MTest_Allgather(int is_blocking, const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm)
{
    if (is_blocking)
        return MPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
    MPI_Request req;
    int err = MPI_Iallgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, &req);
    return err != MPI_SUCCESS ? err : MPI_Wait(&req, MPI_STATUS_IGNORE);
}

static inline int MTest_Allgatherv(int is_blocking, const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, const int *recvcounts, const int *displs, MPI_Datatype recvtype, MPI_Comm comm)
{
    if (is_blocking)
        return MPI_Allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm);
    MPI_Request req;
    int err = MPI_Iallgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm, &req);
    return err != MPI_SUCCESS ? err : MPI_Wait(&req, MPI_STATUS_IGNORE);
}

static inline int MTest_Alltoall(int is_blocking, const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm)
{
    if (is_blocking)
        return MPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
    MPI_Request req;
    int err = MPI_Ialltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, &req);
    return err != MPI_SUCCESS ? err : MPI_Wait(&req, MPI_STATUS_IGNORE);
}

static inline int MTest_Alltoallv(int is_blocking, const void *sendbuf, const int *sendcounts, const int *sdispls, MPI_Datatype sendtype, void *recvbuf, const int *recvcounts, const int *rdispls, MPI_Datatype recvtype, MPI_Comm comm)
{
    if (is_blocking)
        return MPI_Alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm);
    MPI_Request req;
    int err = MPI_Ialltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm, &req);
    return err != MPI_SUCCESS ? err : MPI_Wait(&req, MPI_STATUS_IGNORE);
}

static inline int MTest_Alltoallw(int is_blocking, const void *sendbuf, const int *sendcounts, const int *sdispls, const MPI_Datatype *sendtypes, void *recvbuf, const int *recvcounts, const int *rdispls, const MPI_Datatype *recvtypes, MPI_Comm comm)
{
    if (is_blocking)
        return MPI_Alltoallw(sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm);
    MPI_Request req;
    int err = MPI_Ialltoallw(sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm, &req);
    return err != MPI_SUCCESS ? err : MPI_Wait(&req, MPI_STATUS_IGNORE);
}

static inline int MTest_Reduce(int is_blocking, const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, int root, MPI_Comm comm)
{
    if (is_blocking)
        return MPI_Reduce(sendbuf, recvbuf, count, datatype, op, root, comm);
    MPI_Request req;
    int err = MPI_Ireduce(sendbuf, recvbuf, count, datatype, op, root, comm, &req);
    return err != MPI_SUCCESS ? err : MPI_Wait(&req, MPI_STATUS_IGNORE);
}

static inline int MTest_Allreduce(int is_blocking, const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm)
{
    if (is_blocking)
        return MPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
    MPI_Request req;
    int err = MPI_Iallreduce(sendbuf, recvbuf, count, datatype, op, comm, &req);
    return err != MPI_SUCCESS ? err : MPI_Wait(&req, MPI_STATUS_IGNORE);
}

static inline int MTest_Reduce_scatter(int is_blocking, const void *sendbuf, void *recvbuf, const int *recvcounts, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm)
{
    if (is_blocking)
        return MPI_Reduce_scatter(sendbuf, recvbuf, recvcounts, datatype, op, comm);
    MPI_Request req;
    int err = MPI_Ireduce_scatter(sendbuf, recvbuf, recvcounts, datatype, op, comm, &req);
    return err != MPI_SUCCESS ? err : MPI_Wait(&req, MPI_STATUS_IGNORE);
}

static inline int MTest_Reduce_scatter_block(int is_blocking, const void *sendbuf, void *recvbuf, int recvcount, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm)
{
    if (is_blocking)
        return MPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm);
    MPI_Request req;
    int err = MPI_Ireduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm, &req);
    return err != MPI_SUCCESS ? err : MPI_Wait(&req, MPI_STATUS_IGNORE);
}

static inline int MTest_Scan(int is_blocking, const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm)
{
    if (is_blocking)
        return MPI_Scan(sendbuf, recvbuf, count, datatype, op, comm);
    MPI_Request req;
    int err = MPI_Iscan(sendbuf, recvbuf, count, datatype, op, comm, &req);
    return err != MPI_SUCCESS ? err : MPI_Wait(&req, MPI_STATUS_IGNORE);
}

static inline int MTest_Exscan(int is_blocking, const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm)
{
    if (is_blocking)
        return MPI_Exscan(sendbuf, recvbuf, count, datatype, op, comm);
    MPI_Request req;
    int err = MPI_Iexscan(sendbuf, recvbuf, count, datatype, op, comm, &req);
    return err != MPI_SUCCESS ? err : MPI_Wait(&req, MPI_STATUS_IGNORE);
}

#endif

/* The parts of ch4's MPI library that neither OSU nor MPICH's pt2pt tests reach: groups,
 * communicator comparison and creation (by node too: MPI_Comm_split_type), Cartesian
 * topologies, derived datatypes built from structs and resized, thread levels, error handlers
 * and error strings, the environment.
 * Run with 4 processes; prints " No Errors" when every check passes. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <mpi.h>

/* A call from a thread other than the one that initialized MPI (MPI_THREAD_FUNNELED): it must
 * fail, not race on the device. */
static void *from_another_thread(void *out)
{
    int r;
    *(int *)out = MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return NULL;
}

static int errs = 0;
#define CHECK(c)                                                              \
    do {                                                                      \
        if (!(c)) {                                                           \
            errs++;                                                           \
            printf("[%d] check failed: %s (line %d)\n", rank, #c, __LINE__); \
        }                                                                     \
    } while (0)

int main(int argc, char **argv)
{
    int rank, size, provided, flag, r, n;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(provided == MPI_THREAD_FUNNELED);
    MPI_Query_thread(&flag);
    CHECK(flag == MPI_THREAD_FUNNELED);
    MPI_Is_thread_main(&flag);
    CHECK(flag);
    MPI_Initialized(&flag);
    CHECK(flag);

    /* Groups. */
    MPI_Group world, evens, odds, both;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Group_size(world, &n);
    CHECK(n == size);
    MPI_Group_rank(world, &r);
    CHECK(r == rank);
    int even_ranks[2] = {0, 2};
    MPI_Group_incl(world, 2, even_ranks, &evens);
    MPI_Group_excl(world, 2, even_ranks, &odds);
    MPI_Group_union(odds, evens, &both);
    MPI_Group_compare(both, world, &r);
    CHECK(r == MPI_SIMILAR);
    MPI_Group_compare(world, world, &r);
    CHECK(r == MPI_IDENT);
    int from[2] = {0, 1}, to[2];
    MPI_Group_translate_ranks(evens, 2, from, world, to);
    CHECK(to[0] == 0 && to[1] == 2);
    MPI_Group_rank(evens, &r);
    CHECK(r == (rank % 2 == 0 ? rank / 2 : MPI_UNDEFINED));

    /* Communicators from groups, comparison. */
    MPI_Comm evcomm, dup;
    MPI_Comm_create(MPI_COMM_WORLD, evens, &evcomm);
    CHECK((rank % 2 == 0) == (evcomm != MPI_COMM_NULL));
    if (evcomm != MPI_COMM_NULL) {
        int s = 0, mine = 1;
        MPI_Allreduce(&mine, &s, 1, MPI_INT, MPI_SUM, evcomm);
        CHECK(s == 2);
        MPI_Comm_free(&evcomm);
        CHECK(evcomm == MPI_COMM_NULL);
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Comm_compare(MPI_COMM_WORLD, dup, &r);
    CHECK(r == MPI_CONGRUENT);
    MPI_Comm_compare(dup, dup, &r);
    CHECK(r == MPI_IDENT);
    MPI_Comm_free(&dup);
    MPI_Group_free(&evens);
    MPI_Group_free(&odds);
    MPI_Group_free(&both);
    MPI_Group_free(&world);
    CHECK(world == MPI_GROUP_NULL);

    /* A 2 x 2 torus. */
    int dims[2] = {0, 0}, periods[2] = {1, 1}, coords[2], src, dst;
    MPI_Dims_create(size, 2, dims);
    CHECK(dims[0] * dims[1] == size);
    MPI_Comm cart;
    MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &cart);
    MPI_Topo_test(cart, &r);
    CHECK(r == MPI_CART);
    MPI_Comm_rank(cart, &r);
    MPI_Cart_coords(cart, r, 2, coords);
    int back;
    MPI_Cart_rank(cart, coords, &back);
    CHECK(back == r);
    MPI_Cart_shift(cart, 1, 1, &src, &dst);
    int got = -1;
    MPI_Sendrecv(&r, 1, MPI_INT, dst, 7, &got, 1, MPI_INT, src, 7, cart, MPI_STATUS_IGNORE);
    CHECK(got == src);
    MPI_Comm_free(&cart);

    /* A struct type, resized to its C size, sent as an array. */
    struct rec { double d; int i; char c; } recs[3], in[3];
    int lens[3] = {1, 1, 1};
    MPI_Aint disps[3], lb, ext;
    MPI_Datatype types[3] = {MPI_DOUBLE, MPI_INT, MPI_CHAR}, st, rst;
    MPI_Get_address(&recs[0].d, &disps[0]);
    MPI_Get_address(&recs[0].i, &disps[1]);
    MPI_Get_address(&recs[0].c, &disps[2]);
    disps[2] -= disps[0];
    disps[1] -= disps[0];
    disps[0] = 0;
    MPI_Type_create_struct(3, lens, disps, types, &st);
    MPI_Type_create_resized(st, 0, sizeof(struct rec), &rst);
    MPI_Type_commit(&rst);
    MPI_Type_size(rst, &n);
    CHECK(n == 13);
    MPI_Type_get_extent(rst, &lb, &ext);
    CHECK(lb == 0 && ext == (MPI_Aint)sizeof(struct rec));
    for (int k = 0; k < 3; k++) {
        recs[k].d = rank + k * 0.5;
        recs[k].i = 100 * rank + k;
        recs[k].c = 'a' + k;
    }
    memset(in, 0, sizeof in);
    MPI_Status status;
    MPI_Sendrecv(recs, 3, rst, (rank + 1) % size, 3, in, 3, rst, (rank + size - 1) % size, 3,
                 MPI_COMM_WORLD, &status);
    int left = (rank + size - 1) % size;
    for (int k = 0; k < 3; k++)
        CHECK(in[k].d == left + k * 0.5 && in[k].i == 100 * left + k && in[k].c == 'a' + k);
    MPI_Get_count(&status, rst, &n);
    CHECK(n == 3);
    MPI_Get_elements(&status, rst, &n);
    CHECK(n == 9);
    MPI_Type_free(&rst);
    MPI_Type_free(&st);
    CHECK(rst == MPI_DATATYPE_NULL);

    /* MINLOC / MAXLOC on value-and-index pairs (MPI_DOUBLE_INT has a gap before its end). */
    struct { double v; int i; } pin[2], pout[2];
    pin[0].v = rank % 2;
    pin[0].i = rank;
    pin[1].v = -rank;
    pin[1].i = rank;
    MPI_Allreduce(pin, pout, 2, MPI_DOUBLE_INT, MPI_MAXLOC, MPI_COMM_WORLD);
    CHECK(pout[0].v == 1 && pout[0].i == 1 && pout[1].v == 0 && pout[1].i == 0);
    MPI_Reduce(pin, pout, 2, MPI_DOUBLE_INT, MPI_MINLOC, 0, MPI_COMM_WORLD);
    if (rank == 0)
        CHECK(pout[0].v == 0 && pout[0].i == 0 && pout[1].v == -(size - 1) && pout[1].i == size - 1);

    /* Collectives over a derived datatype: a column of a 4 x 4 matrix. */
    int m[16], col[4], all[16];
    MPI_Datatype column0, column;
    MPI_Type_vector(4, 1, 4, MPI_INT, &column0);
    /* Resized to one int, so that consecutive columns start one int apart. */
    MPI_Type_create_resized(column0, 0, sizeof(int), &column);
    MPI_Type_commit(&column);
    for (int k = 0; k < 16; k++)
        m[k] = rank == 1 ? k : -1;
    MPI_Bcast(m, 1, column, 1, MPI_COMM_WORLD); /* column 0 of rank 1's matrix */
    for (int k = 0; k < 16; k++)
        CHECK(m[k] == (rank == 1 || k % 4 == 0 ? (rank == 1 ? k : k) : -1));
    for (int k = 0; k < 4; k++)
        col[k] = 10 * rank + k;
    MPI_Allgather(col, 4, MPI_INT, all, 1, column, MPI_COMM_WORLD);
    /* rank r's 4 ints land in column r: all[4k + r] = 10r + k. */
    for (int k = 0; k < 4; k++)
        for (int q = 0; q < size && q < 4; q++)
            CHECK(all[4 * k + q] == 10 * q + k);
    MPI_Type_free(&column);
    MPI_Type_free(&column0);

    /* Errors returned, with strings that say what happened. */
    char msg[MPI_MAX_ERROR_STRING];
    int len, cls, rc;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    rc = MPI_Send(&rank, 1, MPI_INT, size + 5, 0, MPI_COMM_WORLD);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_RANK);
    MPI_Error_string(rc, msg, &len);
    CHECK(strstr(msg, "MPI_Send") != NULL);
    /* The classes of a bad datatype, root and operation (MPI 4.1 section 9.4). */
    rc = MPI_Send(&rank, 1, MPI_DATATYPE_NULL, 0, 0, MPI_COMM_WORLD);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_TYPE);
    rc = MPI_Bcast(&rank, 1, MPI_INT, size + 1, MPI_COMM_WORLD);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_ROOT);
    int one = 1, sum = 0;
    rc = MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_OP_NULL, MPI_COMM_WORLD);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_OP);
    MPI_Request nbreq;
    rc = MPI_Ibcast(&rank, 1, MPI_INT, -7, MPI_COMM_WORLD, &nbreq);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_ROOT);
    MPI_Win win;
    rc = MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_UNSUPPORTED_OPERATION);
    MPI_Error_string(rc, msg, &len);
    CHECK(strstr(msg, "MPI_Win_create_dynamic") != NULL);
    MPI_Errhandler eh;
    MPI_Comm_get_errhandler(MPI_COMM_WORLD, &eh);
    CHECK(eh == MPI_ERRORS_RETURN);

    /* Another thread is refused (unless a progress thread made the rank run at the multiple
     * level inside, which lets any thread call, as MPICH's asynchronous progress does). */
    const char *async_progress = getenv("CH4_ASYNC_PROGRESS");
    if (!async_progress || strcmp(async_progress, "1") != 0) {
        int other_rc = MPI_SUCCESS;
        pthread_t th;
        pthread_create(&th, NULL, from_another_thread, &other_rc);
        pthread_join(th, NULL);
        CHECK(other_rc != MPI_SUCCESS);
        MPI_Error_string(other_rc, msg, &len);
        CHECK(strstr(msg, "thread") != NULL);
    }

    /* The environment. */
    char name[MPI_MAX_PROCESSOR_NAME], lib[MPI_MAX_LIBRARY_VERSION_STRING];
    MPI_Get_processor_name(name, &len);
    CHECK(len > 0 && (int)strlen(name) == len);
    MPI_Get_library_version(lib, &len);
    CHECK(strstr(lib, "ch4") != NULL);
    int v, sv;
    MPI_Get_version(&v, &sv);
    CHECK(v == 5 && sv == 0);
    double t0 = MPI_Wtime(), t1 = MPI_Wtime();
    CHECK(t1 >= t0 && MPI_Wtick() > 0);
    int *ub;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
    CHECK(flag && *ub >= 32767);
    /* The limit is the network's (EXP_TAG_UB when the test names it), and a message with
       that tag goes around the ring. */
    const char *want_ub = getenv("EXP_TAG_UB");
    if (want_ub)
        CHECK(*ub == atoi(want_ub));
    int from_left = -1;
    MPI_Sendrecv(&rank, 1, MPI_INT, (rank + 1) % size, *ub, &from_left, 1, MPI_INT,
                 (rank + size - 1) % size, *ub, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    CHECK(from_left == (rank + size - 1) % size);

    /* MPI_Comm_split_type by node. ch4run places ranks in blocks of CH4_NODE_SIZE (all on
       one node without it): this rank's node holds world ranks [first, first + on_node). */
    const char *node_size_env = getenv("CH4_NODE_SIZE");
    int node_size = node_size_env ? atoi(node_size_env) : size;
    int first = rank / node_size * node_size;
    int on_node = size - first < node_size ? size - first : node_size;
    MPI_Comm node;
    /* key = -rank: the node's members in reverse order. */
    CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, -rank, MPI_INFO_NULL,
                              &node) == MPI_SUCCESS);
    MPI_Comm_size(node, &n);
    CHECK(n == on_node);
    MPI_Comm_rank(node, &r);
    CHECK(r == first + on_node - 1 - rank);
    int node_sum = 0;
    MPI_Allreduce(&rank, &node_sum, 1, MPI_INT, MPI_SUM, node);
    CHECK(node_sum == on_node * first + on_node * (on_node - 1) / 2);
    MPI_Comm_free(&node);
    MPI_Info hw;
    MPI_Info_create(&hw);
    MPI_Info_set(hw, "mpi_hw_resource_type", "mpi_shared_memory");
    CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_HW_GUIDED, 0, hw, &node) ==
          MPI_SUCCESS);
    MPI_Comm_size(node, &n);
    CHECK(n == on_node);
    MPI_Comm_free(&node);
    MPI_Info_free(&hw);
    /* Odd ranks stay out; the others still split. */
    CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, rank % 2 ? MPI_UNDEFINED : MPI_COMM_TYPE_SHARED, 0,
                              MPI_INFO_NULL, &node) == MPI_SUCCESS);
    CHECK((rank % 2 == 1) == (node == MPI_COMM_NULL));
    if (node != MPI_COMM_NULL)
        MPI_Comm_free(&node);
    /* MPI_COMM_TYPE_HW_UNGUIDED: the node when it is a proper subset, else MPI_COMM_NULL. */
    CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_HW_UNGUIDED, 0, MPI_INFO_NULL,
                              &node) == MPI_SUCCESS);
    if (on_node == size) {
        CHECK(node == MPI_COMM_NULL);
    } else {
        CHECK(node != MPI_COMM_NULL);
        MPI_Comm_size(node, &n);
        CHECK(n == on_node);
        MPI_Comm_free(&node);
    }
    /* A type ch4 does not know is an argument error, not a hang or a crash. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    r = MPI_Comm_split_type(MPI_COMM_WORLD, 12345, 0, MPI_INFO_NULL, &node);
    cls = -1;
    MPI_Error_class(r, &cls);
    CHECK(r != MPI_SUCCESS && cls == MPI_ERR_ARG);

    int total = 0;
    MPI_Allreduce(&errs, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf(total ? " Found %d errors\n" : " No Errors\n", total);
    MPI_Finalize();
    MPI_Finalized(&flag);
    return flag ? 0 : 1;
}

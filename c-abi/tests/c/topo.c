/* Groups by ranges, MPI_Comm_create_group (from one thread and from two at once) and the
 * process topologies — the parts MPICH's group/ and topo/ tests do not look at closely: the
 * exact members and order of range groups, the error classes of bad ranges and tags, the
 * graph queries, a sub-grid's shape, and the order of a distributed graph's edges when two
 * processes share several. Run with 4 processes at MPI_THREAD_MULTIPLE; prints " No Errors"
 * when every check passes. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <mpi.h>

static int errs = 0;
static int rank, size;
#define CHECK(c)                                                              \
    do {                                                                      \
        if (!(c)) {                                                           \
            errs++;                                                           \
            printf("[%d] check failed: %s (line %d)\n", rank, #c, __LINE__); \
        }                                                                     \
    } while (0)

static int error_class(int rc)
{
    int cls = MPI_SUCCESS;
    MPI_Error_class(rc, &cls);
    return cls;
}

/* The sum of the ranks of `comm` in world, as a check that it carries messages. */
static int world_rank_sum(MPI_Comm comm)
{
    int sum = -1;
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, comm);
    return sum;
}

static void groups_by_ranges(MPI_Group world)
{
    int ranges[2][3], n, r, to[8], from[8], k;
    MPI_Group g;

    /* Every rank, last to first. */
    ranges[0][0] = size - 1;
    ranges[0][1] = 0;
    ranges[0][2] = -1;
    CHECK(MPI_Group_range_incl(world, 1, ranges, &g) == MPI_SUCCESS);
    MPI_Group_size(g, &n);
    CHECK(n == size);
    MPI_Group_rank(g, &r);
    CHECK(r == size - 1 - rank);
    MPI_Group_free(&g);

    /* Two ranges: 3, then 0 and 2 (a last rank the stride does not reach). */
    ranges[0][0] = 3;
    ranges[0][1] = 3;
    ranges[0][2] = 1;
    ranges[1][0] = 0;
    ranges[1][1] = 2;
    ranges[1][2] = 2;
    CHECK(MPI_Group_range_incl(world, 2, ranges, &g) == MPI_SUCCESS);
    MPI_Group_size(g, &n);
    CHECK(n == 3);
    for (k = 0; k < 3; k++)
        from[k] = k;
    MPI_Group_translate_ranks(g, 3, from, world, to);
    CHECK(to[0] == 3 && to[1] == 0 && to[2] == 2);
    MPI_Group_free(&g);

    /* The even ranks out: the odd ones stay, in order. */
    ranges[0][0] = 0;
    ranges[0][1] = size - 1;
    ranges[0][2] = 2;
    CHECK(MPI_Group_range_excl(world, 1, ranges, &g) == MPI_SUCCESS);
    MPI_Group_size(g, &n);
    CHECK(n == size / 2);
    MPI_Group_rank(g, &r);
    CHECK(r == (rank % 2 ? rank / 2 : MPI_UNDEFINED));
    MPI_Group_free(&g);

    /* No ranges: an empty group, and the whole group. */
    CHECK(MPI_Group_range_incl(world, 0, NULL, &g) == MPI_SUCCESS);
    CHECK(g == MPI_GROUP_EMPTY);
    CHECK(MPI_Group_range_excl(world, 0, NULL, &g) == MPI_SUCCESS);
    MPI_Group_size(g, &n);
    CHECK(n == size);
    MPI_Group_free(&g);

    /* Bad ranges: a zero stride, a stride away from the last rank, a rank past the group, a
     * rank named twice. */
    ranges[0][0] = 0;
    ranges[0][1] = 1;
    ranges[0][2] = 0;
    CHECK(error_class(MPI_Group_range_incl(world, 1, ranges, &g)) == MPI_ERR_ARG);
    ranges[0][2] = -1;
    CHECK(error_class(MPI_Group_range_incl(world, 1, ranges, &g)) == MPI_ERR_ARG);
    ranges[0][1] = size;
    ranges[0][2] = 1;
    CHECK(error_class(MPI_Group_range_excl(world, 1, ranges, &g)) == MPI_ERR_RANK);
    ranges[0][0] = 0;
    ranges[0][1] = 1;
    ranges[0][2] = 1;
    ranges[1][0] = 1;
    ranges[1][1] = 1;
    ranges[1][2] = 1;
    CHECK(MPI_Group_range_incl(world, 2, ranges, &g) != MPI_SUCCESS);
}

struct creation {
    MPI_Group group;
    int tag;
    MPI_Comm comm;
    int rc;
};

static void *create_group(void *arg)
{
    struct creation *c = arg;
    c->rc = MPI_Comm_create_group(MPI_COMM_WORLD, c->group, c->tag, &c->comm);
    return NULL;
}

static void comm_create_group(MPI_Group world)
{
    int ranges[1][3], r, n, k;
    MPI_Group reversed, half;
    MPI_Comm c;

    /* The whole world in reverse order: ranks follow the group, not the parent. */
    ranges[0][0] = size - 1;
    ranges[0][1] = 0;
    ranges[0][2] = -1;
    MPI_Group_range_incl(world, 1, ranges, &reversed);
    CHECK(MPI_Comm_create_group(MPI_COMM_WORLD, reversed, 7, &c) == MPI_SUCCESS);
    MPI_Comm_rank(c, &r);
    CHECK(r == size - 1 - rank);
    CHECK(world_rank_sum(c) == size * (size - 1) / 2);
    MPI_Comm_free(&c);

    /* The two halves at once, each among itself only, with different tags; then the lower
     * half alone, the others not calling at all. */
    ranges[0][0] = rank < size / 2 ? 0 : size / 2;
    ranges[0][1] = rank < size / 2 ? size / 2 - 1 : size - 1;
    ranges[0][2] = 1;
    MPI_Group_range_incl(world, 1, ranges, &half);
    CHECK(MPI_Comm_create_group(MPI_COMM_WORLD, half, rank < size / 2 ? 1 : 2, &c) ==
          MPI_SUCCESS);
    MPI_Comm_size(c, &n);
    CHECK(n == size / 2);
    CHECK(world_rank_sum(c) == (rank < size / 2 ? 1 : 5));
    MPI_Comm_free(&c);
    if (rank < size / 2) {
        CHECK(MPI_Comm_create_group(MPI_COMM_WORLD, half, 0, &c) == MPI_SUCCESS);
        MPI_Barrier(c);
        MPI_Comm_free(&c);
    }
    MPI_Group_free(&half);
    MPI_Barrier(MPI_COMM_WORLD);

    /* A caller outside the group gets MPI_COMM_NULL; a negative tag is MPI_ERR_TAG. */
    ranges[0][0] = 0;
    ranges[0][1] = 0;
    MPI_Group_range_incl(world, 1, ranges, &half);
    if (rank != 0) {
        CHECK(MPI_Comm_create_group(MPI_COMM_WORLD, half, 0, &c) == MPI_SUCCESS);
        CHECK(c == MPI_COMM_NULL);
    }
    MPI_Group_free(&half);
    CHECK(error_class(MPI_Comm_create_group(MPI_COMM_WORLD, world, -1, &c)) == MPI_ERR_TAG);

    /* Two threads of every process create over one parent at once, with different tags (the
     * standard's way to tell them apart), several times. */
    for (k = 0; k < 5; k++) {
        struct creation a = { reversed, 100, MPI_COMM_NULL, -1 };
        struct creation b = { world, 200, MPI_COMM_NULL, -1 };
        pthread_t t;
        pthread_create(&t, NULL, create_group, &a);
        create_group(&b);
        pthread_join(t, NULL);
        CHECK(a.rc == MPI_SUCCESS && b.rc == MPI_SUCCESS);
        if (a.rc == MPI_SUCCESS && b.rc == MPI_SUCCESS) {
            MPI_Comm_rank(a.comm, &r);
            CHECK(r == size - 1 - rank);
            MPI_Comm_rank(b.comm, &r);
            CHECK(r == rank);
            CHECK(world_rank_sum(a.comm) == world_rank_sum(b.comm));
            MPI_Comm_free(&a.comm);
            MPI_Comm_free(&b.comm);
        }
    }
    MPI_Group_free(&reversed);
}

static void cartesian(void)
{
    int dims[2] = { 2, 2 }, periods[2] = { 0, 1 }, remain[2] = { 0, 1 }, coords[2];
    int n, r, t, source, dest;
    MPI_Comm grid, row, dup;

    MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &grid);
    /* A row: the second dimension kept, periodic, of the processes with the caller's first
     * coordinate. */
    CHECK(MPI_Cart_sub(grid, remain, &row) == MPI_SUCCESS);
    MPI_Cartdim_get(row, &n);
    CHECK(n == 1);
    MPI_Cart_get(row, 1, dims, periods, coords);
    CHECK(dims[0] == 2 && periods[0] == 1 && coords[0] == rank % 2);
    MPI_Comm_rank(row, &r);
    CHECK(r == rank % 2);
    CHECK(world_rank_sum(row) == (rank < 2 ? 1 : 5));
    MPI_Cart_shift(row, 0, 1, &source, &dest);
    CHECK(source == 1 - r && dest == 1 - r);
    MPI_Comm_free(&row);

    /* Off a non-periodic edge, a rank is MPI_ERR_ARG. */
    coords[0] = 2;
    coords[1] = 0;
    CHECK(error_class(MPI_Cart_rank(grid, coords, &r)) == MPI_ERR_ARG);
    /* A duplicate keeps the grid. */
    MPI_Comm_dup(grid, &dup);
    MPI_Topo_test(dup, &t);
    CHECK(t == MPI_CART);
    MPI_Cart_coords(dup, 3, 2, coords);
    CHECK(coords[0] == 1 && coords[1] == 1);
    MPI_Comm_free(&dup);
    /* Not a graph. */
    CHECK(error_class(MPI_Graphdims_get(grid, &n, &r)) == MPI_ERR_TOPOLOGY);
    CHECK(error_class(MPI_Dist_graph_neighbors_count(grid, &n, &r, &t)) == MPI_ERR_TOPOLOGY);
    MPI_Comm_free(&grid);

    /* MPI_Cart_map: a grid of 3 leaves the last process out. */
    dims[0] = 3;
    CHECK(MPI_Cart_map(MPI_COMM_WORLD, 1, dims, periods, &r) == MPI_SUCCESS);
    CHECK(r == (rank < 3 ? rank : MPI_UNDEFINED));
    dims[0] = 5;
    CHECK(error_class(MPI_Cart_map(MPI_COMM_WORLD, 1, dims, periods, &r)) == MPI_ERR_ARG);
    /* Bad dimensions: MPI_ERR_DIMS. */
    dims[0] = 0;
    CHECK(error_class(MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, 0, &grid)) ==
          MPI_ERR_DIMS);
    dims[0] = 3;
    dims[1] = 0;
    CHECK(error_class(MPI_Dims_create(10, 2, dims)) == MPI_ERR_DIMS);
    CHECK(error_class(MPI_Topo_test(MPI_COMM_NULL, &t)) == MPI_ERR_COMM);
    MPI_Topo_test(MPI_COMM_SELF, &t);
    CHECK(t == MPI_UNDEFINED);
}

static void graph(void)
{
    /* The standard's example graph (MPI 4.1 section 8.5.3) on 4 processes: 0-{1,3}, 1-{0},
     * 2-{3}, 3-{0,2}. */
    int index[4] = { 2, 3, 4, 6 }, edges[6] = { 1, 3, 0, 3, 0, 2 };
    int got_index[4], got_edges[6], nb[2], n, e, t, k;
    MPI_Comm g, dup;

    CHECK(MPI_Graph_create(MPI_COMM_WORLD, 4, index, edges, 0, &g) == MPI_SUCCESS);
    MPI_Topo_test(g, &t);
    CHECK(t == MPI_GRAPH);
    MPI_Graphdims_get(g, &n, &e);
    CHECK(n == 4 && e == 6);
    MPI_Graph_get(g, 4, 6, got_index, got_edges);
    for (k = 0; k < 4; k++)
        CHECK(got_index[k] == index[k]);
    for (k = 0; k < 6; k++)
        CHECK(got_edges[k] == edges[k]);
    MPI_Graph_neighbors_count(g, 3, &n);
    CHECK(n == 2);
    MPI_Graph_neighbors(g, 3, 2, nb);
    CHECK(nb[0] == 0 && nb[1] == 2);
    MPI_Graph_neighbors_count(g, 1, &n);
    CHECK(n == 1);
    MPI_Graph_neighbors(g, 0, 1, nb);
    CHECK(nb[0] == 1);
    CHECK(error_class(MPI_Graph_neighbors_count(g, 4, &n)) == MPI_ERR_RANK);
    MPI_Comm_dup(g, &dup);
    MPI_Topo_test(dup, &t);
    CHECK(t == MPI_GRAPH);
    MPI_Comm_free(&dup);
    CHECK(error_class(MPI_Cartdim_get(g, &n)) == MPI_ERR_TOPOLOGY);
    MPI_Comm_free(&g);

    /* Three nodes: the last process is left out; an edge to a node that is not one is
     * MPI_ERR_RANK. */
    index[0] = 1;
    index[1] = 2;
    index[2] = 3;
    edges[0] = 1;
    edges[1] = 2;
    edges[2] = 0;
    CHECK(MPI_Graph_create(MPI_COMM_WORLD, 3, index, edges, 0, &g) == MPI_SUCCESS);
    CHECK((g == MPI_COMM_NULL) == (rank == 3));
    if (g != MPI_COMM_NULL)
        MPI_Comm_free(&g);
    MPI_Graph_map(MPI_COMM_WORLD, 3, index, edges, &n);
    CHECK(n == (rank < 3 ? rank : MPI_UNDEFINED));
    edges[2] = 3;
    CHECK(error_class(MPI_Graph_map(MPI_COMM_WORLD, 3, index, edges, &n)) == MPI_ERR_RANK);
}

static void distributed_graph(void)
{
    int sources[4], weights[4], dests[4], dweights[4], degrees[4];
    int in, out, weighted, k, t;
    int left = (rank + size - 1) % size, right = (rank + 1) % size;
    MPI_Comm g;

    /* Adjacent: the order given is kept. */
    sources[0] = left;
    sources[1] = right;
    weights[0] = 10 * left;
    weights[1] = 10 * right + 1;
    dests[0] = right;
    dests[1] = left;
    dweights[0] = 10 * rank + 1;
    dweights[1] = 10 * rank;
    MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 2, sources, weights, 2, dests, dweights,
                                   MPI_INFO_NULL, 0, &g);
    MPI_Topo_test(g, &t);
    CHECK(t == MPI_DIST_GRAPH);
    MPI_Dist_graph_neighbors_count(g, &in, &out, &weighted);
    CHECK(in == 2 && out == 2 && weighted);
    for (k = 0; k < 4; k++)
        sources[k] = weights[k] = dests[k] = dweights[k] = -1;
    MPI_Dist_graph_neighbors(g, 2, sources, weights, 2, dests, dweights);
    CHECK(sources[0] == left && sources[1] == right);
    CHECK(weights[0] == 10 * left && weights[1] == 10 * right + 1);
    CHECK(dests[0] == right && dests[1] == left);
    CHECK(dweights[0] == 10 * rank + 1 && dweights[1] == 10 * rank);
    /* MPI_UNWEIGHTED where the weights would go: not written; room for one of each. */
    sources[1] = dests[1] = -1;
    CHECK(MPI_Dist_graph_neighbors(g, 1, sources, MPI_UNWEIGHTED, 1, dests, MPI_UNWEIGHTED) ==
          MPI_SUCCESS);
    CHECK(sources[0] == left && sources[1] == -1 && dests[0] == right && dests[1] == -1);
    MPI_Comm_free(&g);

    /* General: 1 -> 2 named twice, by process 3 (weight 30) and by process 0 (weight 10), and
     * 0 -> 0 by process 2. Both ends list the two edges in the same order: by the process
     * that named them. */
    if (rank == 3 || rank == 0) {
        sources[0] = 1;
        degrees[0] = 1;
        dests[0] = 2;
        weights[0] = rank == 3 ? 30 : 10;
        MPI_Dist_graph_create(MPI_COMM_WORLD, 1, sources, degrees, dests, weights,
                              MPI_INFO_NULL, 0, &g);
    } else if (rank == 2) {
        sources[0] = 0;
        degrees[0] = 1;
        dests[0] = 0;
        weights[0] = 5;
        MPI_Dist_graph_create(MPI_COMM_WORLD, 1, sources, degrees, dests, weights,
                              MPI_INFO_NULL, 0, &g);
    } else {
        MPI_Dist_graph_create(MPI_COMM_WORLD, 0, NULL, NULL, NULL, MPI_WEIGHTS_EMPTY,
                              MPI_INFO_NULL, 0, &g);
    }
    MPI_Dist_graph_neighbors_count(g, &in, &out, &weighted);
    CHECK(weighted);
    MPI_Dist_graph_neighbors(g, 4, sources, weights, 4, dests, dweights);
    switch (rank) {
    case 0:
        CHECK(in == 1 && out == 1 && sources[0] == 0 && dests[0] == 0);
        CHECK(weights[0] == 5 && dweights[0] == 5);
        break;
    case 1:
        CHECK(in == 0 && out == 2 && dests[0] == 2 && dests[1] == 2);
        CHECK(dweights[0] == 10 && dweights[1] == 30);
        break;
    case 2:
        CHECK(in == 2 && out == 0 && sources[0] == 1 && sources[1] == 1);
        CHECK(weights[0] == 10 && weights[1] == 30);
        break;
    default:
        CHECK(in == 0 && out == 0);
    }
    MPI_Comm_free(&g);

    /* Unweighted, and a rank outside the communicator. */
    sources[0] = rank;
    degrees[0] = 1;
    dests[0] = right;
    MPI_Dist_graph_create(MPI_COMM_WORLD, 1, sources, degrees, dests, MPI_UNWEIGHTED,
                          MPI_INFO_NULL, 0, &g);
    MPI_Dist_graph_neighbors_count(g, &in, &out, &weighted);
    CHECK(in == 1 && out == 1 && !weighted);
    MPI_Comm_free(&g);
    dests[0] = size;
    CHECK(error_class(MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 0, NULL, MPI_UNWEIGHTED,
                                                     1, dests, MPI_UNWEIGHTED, MPI_INFO_NULL,
                                                     0, &g)) == MPI_ERR_RANK);
}

int main(int argc, char **argv)
{
    int provided, total;
    MPI_Group world;

    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 4) {
        printf("run with 4 processes\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_group(MPI_COMM_WORLD, &world);

    groups_by_ranges(world);
    comm_create_group(world);
    cartesian();
    graph();
    distributed_graph();

    MPI_Group_free(&world);
    MPI_Allreduce(&errs, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0 && total == 0)
        printf(" No Errors\n");
    MPI_Finalize();
    return 0;
}

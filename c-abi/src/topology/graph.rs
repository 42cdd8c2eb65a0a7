//! Graph topologies (MPI 4.1 sections 8.5.3-8.5.5 and 8.5.7): `MPI_Graph_create`, the
//! queries `MPI_Graphdims_get`, `MPI_Graph_get`, `MPI_Graph_neighbors_count`,
//! `MPI_Graph_neighbors`, and `MPI_Graph_map`.
//!
//! Every process passes the whole graph, so every process keeps it whole: node `i`'s
//! neighbours are `edges[index[i-1]..index[i]]` (with `index[-1]` = 0), as the arguments give
//! them. Self-loops and repeated edges are allowed (section 8.5.3).

use std::ffi::c_int;

use ch4_core::ErrorKind;

use super::{
    adopt_with_topology, copy_out, ints, no_topology, rank_size, topo_call, topology_of, TopoError,
    Topology,
};
use crate::abi::{self, Handle};
use crate::call::{null_arg, on_device, put};
use crate::state::State;

/// A graph topology: the arguments of `MPI_Graph_create`, and the calling process's node.
#[derive(Clone, Debug)]
pub(crate) struct Graph {
    /// `index[i]`: the number of edges of nodes 0..=i.
    pub index: Vec<c_int>,
    /// The neighbours of every node, node after node.
    pub edges: Vec<c_int>,
    /// The calling process's node (its rank in the communicator).
    pub rank: c_int,
}

impl Graph {
    /// The neighbours of node `rank`; `None` for a rank that is not a node.
    pub(crate) fn neighbours_of(&self, rank: c_int) -> Option<&[c_int]> {
        let i = usize::try_from(rank).ok()?;
        let end = usize::try_from(*self.index.get(i)?).ok()?;
        let start = match i {
            0 => 0,
            _ => usize::try_from(self.index[i - 1]).ok()?,
        };
        self.edges.get(start..end)
    }
}

/// Checks a graph's description against a communicator of `size` processes: `nnodes` at
/// most `size`, `index` never decreasing from 0 up, every edge a node. The edges, from `edges`.
///
/// # Safety
/// `edges` has `index[nnodes - 1]` entries.
unsafe fn checked_edges<'a>(
    index: &[c_int],
    edges: *const c_int,
    size: c_int,
) -> Result<&'a [c_int], TopoError> {
    let nnodes = index.len() as c_int;
    if nnodes > size {
        return Err(TopoError::of(
            ErrorKind::Arg,
            format!("a graph of {nnodes} nodes for {size} processes"),
        ));
    }
    let mut last = 0;
    for &x in index {
        if x < last {
            return Err(TopoError::of(
                ErrorKind::Arg,
                format!("index decreases (to {x}), or is negative"),
            ));
        }
        last = x;
    }
    // SAFETY: the caller's contract: `index[nnodes - 1]` (= `last`) entries.
    let edges = unsafe { ints(last, edges, "edges") }?;
    if let Some(e) = edges.iter().find(|&&e| !(0..nnodes).contains(&e)) {
        return Err(TopoError::of(
            ErrorKind::Rank,
            format!("edge to {e}, which is not a node of the {nnodes}"),
        ));
    }
    Ok(edges)
}

/// `MPI_Graph_create`: processes past the graph's nodes get `MPI_COMM_NULL`, as every process
/// does for a graph of no nodes (MPI 4.1 section 8.5.3).
///
/// # Safety
/// `index` has `nnodes` entries, `edges` `index[nnodes - 1]`; `comm_graph` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Graph_create(
    comm_old: Handle,
    nnodes: c_int,
    index: *const c_int,
    edges: *const c_int,
    _reorder: c_int,
    comm_graph: *mut Handle,
) -> c_int {
    topo_call(comm_old, "MPI_Graph_create", |st| {
        if comm_graph.is_null() {
            return Err(TopoError::from(null_arg("the new communicator")));
        }
        let (c, fatal) = crate::comm::parent(st, comm_old)?;
        let (me, size) = rank_size(st, comm_old)?;
        // SAFETY: the caller's contract.
        let index = unsafe { ints(nnodes, index, "index") }?;
        // SAFETY: the caller's contract.
        let edges = unsafe { checked_edges(index, edges, size) }?;
        if index.is_empty() {
            // SAFETY: checked non-null.
            unsafe { comm_graph.write(abi::COMM_NULL) };
            return Ok(());
        }
        let color = if me < nnodes { 0 } else { abi::UNDEFINED };
        let new = on_device!(st, c.vci, |b| ch4_core::coll::new_split(b, c.id, color, me))?;
        let h = adopt_with_topology(st, new, fatal, |rank| {
            Topology::Graph(Graph {
                index: index.to_vec(),
                edges: edges.to_vec(),
                rank,
            })
        })?;
        // SAFETY: checked non-null.
        unsafe { comm_graph.write(h) };
        Ok(())
    })
}

/// The graph of communicator `comm`.
fn graph_of(st: &State, comm: Handle) -> Result<Graph, TopoError> {
    match topology_of(st, comm)? {
        Some(Topology::Graph(g)) => Ok(g),
        _ => Err(no_topology("graph")),
    }
}

/// `MPI_Graphdims_get`.
///
/// # Safety
/// `nnodes` and `nedges` are writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Graphdims_get(
    comm: Handle,
    nnodes: *mut c_int,
    nedges: *mut c_int,
) -> c_int {
    topo_call(comm, "MPI_Graphdims_get", |st| {
        let g = graph_of(st, comm)?;
        // SAFETY: the caller's contract.
        unsafe {
            put(nnodes, g.index.len() as c_int);
            put(nedges, g.edges.len() as c_int);
        }
        Ok(())
    })
}

/// `MPI_Graph_get`: the first `maxindex` entries of `index` and `maxedges` of `edges`.
///
/// # Safety
/// `index` has room for `maxindex` entries, `edges` for `maxedges`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Graph_get(
    comm: Handle,
    maxindex: c_int,
    maxedges: c_int,
    index: *mut c_int,
    edges: *mut c_int,
) -> c_int {
    topo_call(comm, "MPI_Graph_get", |st| {
        let g = graph_of(st, comm)?;
        // SAFETY: the caller's contract.
        unsafe {
            copy_out(&g.index, maxindex, index, "index")?;
            copy_out(&g.edges, maxedges, edges, "edges")
        }
    })
}

/// Node `rank`'s neighbours in `g`, or `MPI_ERR_RANK`.
fn neighbours_of(g: &Graph, rank: c_int) -> Result<&[c_int], TopoError> {
    g.neighbours_of(rank).ok_or_else(|| {
        TopoError::of(
            ErrorKind::Rank,
            format!("rank {rank} is not a node of the graph"),
        )
    })
}

/// `MPI_Graph_neighbors_count`.
///
/// # Safety
/// `nneighbors` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Graph_neighbors_count(
    comm: Handle,
    rank: c_int,
    nneighbors: *mut c_int,
) -> c_int {
    topo_call(comm, "MPI_Graph_neighbors_count", |st| {
        let g = graph_of(st, comm)?;
        let n = neighbours_of(&g, rank)?.len() as c_int;
        // SAFETY: the caller's contract.
        unsafe { put(nneighbors, n) };
        Ok(())
    })
}

/// `MPI_Graph_neighbors`: the first `maxneighbors` neighbours of node `rank`.
///
/// # Safety
/// `neighbors` has room for `maxneighbors` entries.
#[no_mangle]
pub unsafe extern "C" fn MPI_Graph_neighbors(
    comm: Handle,
    rank: c_int,
    maxneighbors: c_int,
    neighbors: *mut c_int,
) -> c_int {
    topo_call(comm, "MPI_Graph_neighbors", |st| {
        let g = graph_of(st, comm)?;
        let mine = neighbours_of(&g, rank)?;
        // SAFETY: the caller's contract.
        unsafe { copy_out(mine, maxneighbors, neighbors, "neighbors") }
    })
}

/// `MPI_Graph_map`: the rank the caller would have in such a graph over `comm`, its own rank
/// (no reordering), or `MPI_UNDEFINED` past the graph's nodes.
///
/// # Safety
/// `index` has `nnodes` entries, `edges` `index[nnodes - 1]`; `newrank` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Graph_map(
    comm: Handle,
    nnodes: c_int,
    index: *const c_int,
    edges: *const c_int,
    newrank: *mut c_int,
) -> c_int {
    topo_call(comm, "MPI_Graph_map", |st| {
        let (me, size) = rank_size(st, comm)?;
        // SAFETY: the caller's contract.
        let index = unsafe { ints(nnodes, index, "index") }?;
        // SAFETY: the caller's contract.
        unsafe { checked_edges(index, edges, size) }?;
        if newrank.is_null() {
            return Err(TopoError::from(null_arg("newrank")));
        }
        let r = if me < nnodes { me } else { abi::UNDEFINED };
        // SAFETY: checked non-null.
        unsafe { newrank.write(r) };
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nodes_neighbours_are_its_slice_of_the_edges() {
        // The standard's example (MPI 4.1 section 8.5.3): 0-{1,3}, 1-{0}, 2-{3}, 3-{0,2}.
        let g = Graph {
            index: vec![2, 3, 4, 6],
            edges: vec![1, 3, 0, 3, 0, 2],
            rank: 3,
        };
        assert_eq!(g.neighbours_of(0), Some(&[1, 3][..]));
        assert_eq!(g.neighbours_of(1), Some(&[0][..]));
        assert_eq!(g.neighbours_of(3), Some(&[0, 2][..]));
        assert_eq!(g.neighbours_of(4), None);
        assert_eq!(g.neighbours_of(-1), None);
        let (sources, dests) = Topology::Graph(g).neighbours();
        assert_eq!(sources, vec![0, 2]);
        assert_eq!(dests, vec![0, 2]);
    }
}

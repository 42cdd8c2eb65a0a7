//! Distributed graph topologies (MPI 4.1 section 8.5.4): `MPI_Dist_graph_create_adjacent`,
//! `MPI_Dist_graph_create`, and the queries `MPI_Dist_graph_neighbors_count` and
//! `MPI_Dist_graph_neighbors` (section 8.5.5).
//!
//! Each process keeps only its own edges, in and out, with their weights. The adjacent form
//! has every process name them itself, kept in the order given; in the general form a process
//! may name any edges, so the edges are sent to the processes at both of their ends (one
//! all-to-all of counts, one of edges) and each process lists them in the order they arrive:
//! by the rank that named them, then in its order. Both ends of an edge see it at the same
//! place among the edges between them, which is the consistency the neighbourhood
//! collectives need when two processes share several edges.

use std::ffi::c_int;

use ch4_core::ErrorKind;

use super::{
    adopt_with_topology, copy_out, ints, no_topology, rank_size, topo_call, topology_of, TopoError,
    Topology,
};
use crate::abi::{self, Handle};
use crate::call::{null_arg, on_device, put};
use crate::state::State;

/// A distributed graph topology: the calling process's edges.
#[derive(Clone, Debug)]
pub(crate) struct DistGraph {
    /// The processes it receives from (its in-edges).
    pub sources: Vec<c_int>,
    /// The weights of those edges (empty when unweighted).
    pub source_weights: Vec<c_int>,
    /// The processes it sends to (its out-edges).
    pub destinations: Vec<c_int>,
    /// The weights of those edges (empty when unweighted).
    pub dest_weights: Vec<c_int>,
    /// Whether the graph was made with weights (not `MPI_UNWEIGHTED`).
    pub weighted: bool,
}

/// The weights at `p` for `n` edges: `None` for `MPI_UNWEIGHTED`; none for
/// `MPI_WEIGHTS_EMPTY`, which is only for no edges.
///
/// # Safety
/// `p` is one of the two special addresses, null, or has `n` readable entries.
unsafe fn weights_in<'a>(
    n: c_int,
    p: *const c_int,
    what: &str,
) -> Result<Option<&'a [c_int]>, TopoError> {
    match p as usize {
        abi::UNWEIGHTED => Ok(None),
        abi::WEIGHTS_EMPTY if n > 0 => Err(TopoError::of(
            ErrorKind::Arg,
            format!("{what} is MPI_WEIGHTS_EMPTY for {n} edges"),
        )),
        abi::WEIGHTS_EMPTY => Ok(Some(&[])),
        // SAFETY: the caller's contract.
        _ => unsafe { ints(n, p, what) }.map(Some),
    }
}

/// Checks that every rank of `ranks` is one of `size` processes.
fn check_ranks(ranks: &[c_int], size: c_int, what: &str) -> Result<(), TopoError> {
    match ranks.iter().find(|&&r| !(0..size).contains(&r)) {
        Some(r) => Err(TopoError::of(
            ErrorKind::Rank,
            format!("{what} holds rank {r}, not one of the {size} processes"),
        )),
        None => Ok(()),
    }
}

/// `MPI_Dist_graph_create_adjacent`: each process names its own in- and out-edges.
///
/// # Safety
/// `sources` and `sourceweights` have `indegree` entries, `destinations` and `destweights`
/// `outdegree` (either weight array may be `MPI_UNWEIGHTED` or `MPI_WEIGHTS_EMPTY`);
/// `comm_dist_graph` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Dist_graph_create_adjacent(
    comm_old: Handle,
    indegree: c_int,
    sources: *const c_int,
    sourceweights: *const c_int,
    outdegree: c_int,
    destinations: *const c_int,
    destweights: *const c_int,
    _info: Handle,
    _reorder: c_int,
    comm_dist_graph: *mut Handle,
) -> c_int {
    topo_call(comm_old, "MPI_Dist_graph_create_adjacent", |st| {
        if comm_dist_graph.is_null() {
            return Err(TopoError::from(null_arg("the new communicator")));
        }
        let (_, size) = rank_size(st, comm_old)?;
        // SAFETY: the caller's contract, for each array.
        let (sources, source_weights, destinations, dest_weights) = unsafe {
            (
                ints(indegree, sources, "sources")?,
                weights_in(indegree, sourceweights, "sourceweights")?,
                ints(outdegree, destinations, "destinations")?,
                weights_in(outdegree, destweights, "destweights")?,
            )
        };
        check_ranks(sources, size, "sources")?;
        check_ranks(destinations, size, "destinations")?;
        let graph = match (source_weights, dest_weights) {
            (Some(sw), Some(dw)) => DistGraph {
                sources: sources.to_vec(),
                source_weights: sw.to_vec(),
                destinations: destinations.to_vec(),
                dest_weights: dw.to_vec(),
                weighted: true,
            },
            _ => DistGraph {
                sources: sources.to_vec(),
                source_weights: Vec::new(),
                destinations: destinations.to_vec(),
                dest_weights: Vec::new(),
                weighted: false,
            },
        };
        let (c, fatal) = crate::comm::parent(st, comm_old)?;
        let new = on_device!(st, c.vci, |b| ch4_core::coll::new_dup(b, c.id))?;
        let h = adopt_with_topology(st, Some(new), fatal, |_| Topology::DistGraph(graph))?;
        // SAFETY: checked non-null.
        unsafe { comm_dist_graph.write(h) };
        Ok(())
    })
}

/// One edge as it travels to the processes at its ends: source, destination, weight, each a
/// little-endian `i32`.
const EDGE_BYTES: usize = 12;

/// `MPI_Dist_graph_create`: each process names any edges (`degrees[i]` edges out of
/// `sources[i]`, to the next entries of `destinations`); each process learns its own.
///
/// # Safety
/// `sources` and `degrees` have `n` entries, `destinations` and `weights` the sum of
/// `degrees` (`weights` may be `MPI_UNWEIGHTED` or `MPI_WEIGHTS_EMPTY`); `comm_dist_graph` is
/// writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Dist_graph_create(
    comm_old: Handle,
    n: c_int,
    sources: *const c_int,
    degrees: *const c_int,
    destinations: *const c_int,
    weights: *const c_int,
    _info: Handle,
    _reorder: c_int,
    comm_dist_graph: *mut Handle,
) -> c_int {
    topo_call(comm_old, "MPI_Dist_graph_create", |st| {
        if comm_dist_graph.is_null() {
            return Err(TopoError::from(null_arg("the new communicator")));
        }
        let (me, size) = rank_size(st, comm_old)?;
        // SAFETY: the caller's contract.
        let (sources, degrees) =
            unsafe { (ints(n, sources, "sources")?, ints(n, degrees, "degrees")?) };
        check_ranks(sources, size, "sources")?;
        if let Some(d) = degrees.iter().find(|&&d| d < 0) {
            return Err(TopoError::of(ErrorKind::Arg, format!("a degree of {d}")));
        }
        let total = degrees.iter().map(|&d| i64::from(d)).sum::<i64>();
        let total = c_int::try_from(total)
            .map_err(|_| TopoError::of(ErrorKind::Arg, format!("{total} edges")))?;
        // SAFETY: the caller's contract: the sum of `degrees` entries in each.
        let (dests, w) = unsafe {
            (
                ints(total, destinations, "destinations")?,
                weights_in(total, weights, "weights")?,
            )
        };
        check_ranks(dests, size, "destinations")?;
        // Every edge goes to the process at each of its ends (once to a self-loop's).
        let size = size as usize;
        let mut outgoing: Vec<Vec<u8>> = vec![Vec::new(); size];
        let mut k = 0;
        for (&s, &deg) in sources.iter().zip(degrees) {
            for _ in 0..deg {
                let (d, weight) = (dests[k], w.map_or(1, |w| w[k]));
                k += 1;
                let mut edge = [0u8; EDGE_BYTES];
                edge[..4].copy_from_slice(&s.to_le_bytes());
                edge[4..8].copy_from_slice(&d.to_le_bytes());
                edge[8..].copy_from_slice(&weight.to_le_bytes());
                outgoing[s as usize].extend_from_slice(&edge);
                if d != s {
                    outgoing[d as usize].extend_from_slice(&edge);
                }
            }
        }
        let (c, fatal) = crate::comm::parent(st, comm_old)?;
        let incoming = on_device!(st, c.vci, |b| exchange(b, c.id, &outgoing))?;
        let mut graph = DistGraph {
            sources: Vec::new(),
            source_weights: Vec::new(),
            destinations: Vec::new(),
            dest_weights: Vec::new(),
            weighted: w.is_some(),
        };
        for edge in incoming.chunks_exact(EDGE_BYTES) {
            let int =
                |i: usize| c_int::from_le_bytes([edge[i], edge[i + 1], edge[i + 2], edge[i + 3]]);
            let (s, d, weight) = (int(0), int(4), int(8));
            if d == me {
                graph.sources.push(s);
                if graph.weighted {
                    graph.source_weights.push(weight);
                }
            }
            if s == me {
                graph.destinations.push(d);
                if graph.weighted {
                    graph.dest_weights.push(weight);
                }
            }
        }
        let new = on_device!(st, c.vci, |b| ch4_core::coll::new_dup(b, c.id))?;
        let h = adopt_with_topology(st, Some(new), fatal, |_| Topology::DistGraph(graph))?;
        // SAFETY: checked non-null.
        unsafe { comm_dist_graph.write(h) };
        Ok(())
    })
}

/// Sends `outgoing[r]` to every member `r` of `comm` and returns what every member sent to
/// this one, in rank order: an all-to-all of the lengths, then one of the bytes. Collective
/// over `comm`.
fn exchange<B: ch4_core::blocking::Blocking + ?Sized>(
    b: &mut B,
    comm: ch4_core::CommId,
    outgoing: &[Vec<u8>],
) -> Result<Vec<u8>, TopoError> {
    let size = outgoing.len();
    let eight = vec![8usize; size];
    let at: Vec<usize> = (0..size).map(|r| 8 * r).collect();
    let lengths: Vec<u8> = outgoing
        .iter()
        .flat_map(|v| (v.len() as u64).to_le_bytes())
        .collect();
    let mut theirs = vec![0u8; 8 * size];
    ch4_core::coll::alltoallv(b, comm, &lengths, &eight, &at, &mut theirs, &eight, &at)?;
    let rcounts: Vec<usize> = theirs
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()) as usize)
        .collect();
    let offsets = |counts: &[usize]| -> Vec<usize> {
        counts
            .iter()
            .scan(0, |at, &n| {
                let here = *at;
                *at += n;
                Some(here)
            })
            .collect()
    };
    let scounts: Vec<usize> = outgoing.iter().map(Vec::len).collect();
    let (sdispls, rdispls) = (offsets(&scounts), offsets(&rcounts));
    let send = outgoing.concat();
    let mut recv = vec![0u8; rcounts.iter().sum()];
    ch4_core::coll::alltoallv(
        b, comm, &send, &scounts, &sdispls, &mut recv, &rcounts, &rdispls,
    )?;
    Ok(recv)
}

/// The distributed graph of communicator `comm`.
fn dist_graph_of(st: &State, comm: Handle) -> Result<DistGraph, TopoError> {
    match topology_of(st, comm)? {
        Some(Topology::DistGraph(g)) => Ok(g),
        _ => Err(no_topology("distributed graph")),
    }
}

/// `MPI_Dist_graph_neighbors_count`: the caller's in- and out-degree, and whether the graph
/// has weights.
///
/// # Safety
/// The three are writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Dist_graph_neighbors_count(
    comm: Handle,
    indegree: *mut c_int,
    outdegree: *mut c_int,
    weighted: *mut c_int,
) -> c_int {
    topo_call(comm, "MPI_Dist_graph_neighbors_count", |st| {
        let g = dist_graph_of(st, comm)?;
        // SAFETY: the caller's contract.
        unsafe {
            put(indegree, g.sources.len() as c_int);
            put(outdegree, g.destinations.len() as c_int);
            put(weighted, c_int::from(g.weighted));
        }
        Ok(())
    })
}

/// `MPI_Dist_graph_neighbors`: the first `maxindegree` in-edges and `maxoutdegree`
/// out-edges, with their weights when the graph has them and the program asks for them (a
/// weight array that is `MPI_UNWEIGHTED` is not written).
///
/// # Safety
/// `sources` and `sourceweights` have room for `maxindegree` entries, `destinations` and
/// `destweights` for `maxoutdegree`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Dist_graph_neighbors(
    comm: Handle,
    maxindegree: c_int,
    sources: *mut c_int,
    sourceweights: *mut c_int,
    maxoutdegree: c_int,
    destinations: *mut c_int,
    destweights: *mut c_int,
) -> c_int {
    topo_call(comm, "MPI_Dist_graph_neighbors", |st| {
        let g = dist_graph_of(st, comm)?;
        let asked = |p: *mut c_int| {
            g.weighted && !matches!(p as usize, abi::UNWEIGHTED | abi::WEIGHTS_EMPTY)
        };
        // SAFETY: the caller's contract, for each array.
        unsafe {
            copy_out(&g.sources, maxindegree, sources, "sources")?;
            copy_out(&g.destinations, maxoutdegree, destinations, "destinations")?;
            if asked(sourceweights) {
                copy_out(
                    &g.source_weights,
                    maxindegree,
                    sourceweights,
                    "sourceweights",
                )?;
            }
            if asked(destweights) {
                copy_out(&g.dest_weights, maxoutdegree, destweights, "destweights")?;
            }
        }
        Ok(())
    })
}

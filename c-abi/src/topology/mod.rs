//! Process topologies, from the standard's chapter "Process Topologies" (MPI 4.1 chapter 8,
//! without the neighbourhood collectives): a communicator may carry a Cartesian grid
//! (`cart`), a graph every process knows whole (`graph`) or a distributed graph of which each
//! process knows its own edges (`dist_graph`); `MPI_Topo_test` says which.
//!
//! A topology is the library's own, kept in the communicator's slot of `state`: the device
//! sees an ordinary communicator, made by a split (a grid or graph with fewer nodes than
//! processes leaves the others out) or a duplicate of the parent. `reorder` is not used: the
//! standard lets a process keep its rank (MPI 4.1 section 8.5). `MPI_Comm_dup` copies the
//! topology, as section 7.4.2 asks. The neighbourhood collectives read each process's ordered
//! neighbour lists from [`Topology::neighbours`].

mod cart;
mod dist_graph;
mod graph;

pub(crate) use cart::Cart;
pub(crate) use dist_graph::DistGraph;
pub(crate) use graph::Graph;

use std::ffi::c_int;

use ch4_core::comm::Comm;
use ch4_core::ErrorKind;

use crate::abi::{self, Handle};
use crate::call::{null_arg, put};
use crate::state::State;

/// The topology a communicator carries, with what the calling process needs to answer the
/// queries without asking anyone (its own rank in it, its edges).
#[derive(Clone, Debug)]
pub(crate) enum Topology {
    /// A Cartesian grid (`MPI_Cart_create`, `MPI_Cart_sub`).
    Cart(Cart),
    /// A graph (`MPI_Graph_create`).
    Graph(Graph),
    /// A distributed graph (`MPI_Dist_graph_create`, `MPI_Dist_graph_create_adjacent`).
    DistGraph(DistGraph),
}

impl Topology {
    /// The calling process's neighbours, in the order the neighbourhood collectives use
    /// (MPI 4.1 section 8.6): the ranks it receives from (sources) and sends to
    /// (destinations). For a grid both are, dimension by dimension, the neighbour at
    /// displacement -1 then at +1 (`MPI_Cart_shift` by 1), `MPI_PROC_NULL` off a non-periodic
    /// edge; for a graph both are its adjacency list (`MPI_Graph_neighbors`); for a
    /// distributed graph, its in-edges and out-edges (`MPI_Dist_graph_neighbors`).
    pub(crate) fn neighbours(&self) -> (Vec<c_int>, Vec<c_int>) {
        match self {
            Topology::Cart(c) => {
                let mut all = Vec::with_capacity(2 * c.dims.len());
                for d in 0..c.dims.len() {
                    let (source, dest) = c.shift(d, 1);
                    all.push(source);
                    all.push(dest);
                }
                (all.clone(), all)
            }
            Topology::Graph(g) => {
                let mine = g.neighbours_of(g.rank).unwrap_or_default().to_vec();
                (mine.clone(), mine)
            }
            Topology::DistGraph(g) => (g.sources.clone(), g.destinations.clone()),
        }
    }
}

/// An error of a topology function, with its class: ch4's error kinds have no
/// `MPI_ERR_TOPOLOGY` (a communicator without the topology a function asks for) nor
/// `MPI_ERR_DIMS` (a bad grid), the classes MPICH reports these with, so the functions of this
/// module carry the class themselves ([`topo_call`]).
#[derive(Debug)]
pub(crate) struct TopoError {
    pub(super) class: c_int,
    message: String,
}

impl TopoError {
    /// An error of `class`; the function's name is added where it is reported.
    fn new(class: c_int, message: impl Into<String>) -> TopoError {
        TopoError {
            class,
            message: message.into(),
        }
    }

    /// An error of the class ch4 gives `kind`.
    fn of(kind: ErrorKind, message: impl Into<String>) -> TopoError {
        TopoError::new(crate::errors::class_of(kind), message)
    }
}

impl From<ch4::Error> for TopoError {
    fn from(e: ch4::Error) -> TopoError {
        TopoError::of(e.kind(), e.to_string())
    }
}

/// [`crate::call::call`] for a body whose errors carry their class ([`TopoError`]).
fn topo_call(
    comm: Handle,
    func: &'static str,
    f: impl FnOnce(&State) -> Result<(), TopoError>,
) -> c_int {
    let st = match crate::state::enter() {
        Ok(st) => st,
        Err(code) => return code,
    };
    match f(&st) {
        Ok(()) => abi::class::SUCCESS,
        Err(e) => crate::errors::fail_with(&st, comm, e.class, format!("{func}: {}", e.message)),
    }
}

/// The topology of communicator `comm`, if it has one.
pub(crate) fn topology_of(st: &State, comm: Handle) -> ch4::Result<Option<Topology>> {
    st.with_slot(comm, |s| s.topo.clone())
}

/// An error for a communicator without the kind of topology a function asks for (`what`):
/// `MPI_ERR_TOPOLOGY`.
#[cold]
fn no_topology(what: &str) -> TopoError {
    TopoError::new(
        abi::class::TOPOLOGY,
        format!("the communicator has no {what} topology"),
    )
}

/// `n` integers at `p` (`what` names them in an error); none when `n` is 0, whatever `p` is.
///
/// # Safety
/// `p` is null or has `n` readable entries.
unsafe fn ints<'a>(n: c_int, p: *const c_int, what: &str) -> Result<&'a [c_int], TopoError> {
    let n = usize::try_from(n)
        .map_err(|_| TopoError::of(ErrorKind::Arg, format!("the count of {what} is negative")))?;
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(TopoError::from(null_arg(what)));
    }
    // SAFETY: the caller's contract: `n` readable entries at a non-null `p`.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// Writes the first `max` (at most `src.len()`) entries of `src` to `dst`; a negative `max`
/// is `MPI_ERR_ARG`.
///
/// # Safety
/// `dst` has room for `max` entries (it may be null when nothing is written).
unsafe fn copy_out(
    src: &[c_int],
    max: c_int,
    dst: *mut c_int,
    what: &str,
) -> Result<(), TopoError> {
    let max = usize::try_from(max)
        .map_err(|_| TopoError::of(ErrorKind::Arg, format!("the room for {what} is negative")))?;
    let n = src.len().min(max);
    if n == 0 {
        return Ok(());
    }
    if dst.is_null() {
        return Err(TopoError::from(null_arg(what)));
    }
    // SAFETY: the caller's contract: room for `max` >= `n` entries at a non-null `dst`.
    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, n) };
    Ok(())
}

/// A handle for `new`, the communicator a topology constructor agreed on over `comm_old`
/// (`MPI_COMM_NULL` for none), carrying the topology `topo` makes from the process's rank in
/// it. The new communicator takes its parent's error handler.
fn adopt_with_topology(
    st: &State,
    new: Option<Comm>,
    fatal: bool,
    topo: impl FnOnce(c_int) -> Topology,
) -> Result<Handle, TopoError> {
    let Some(c) = new else {
        return Ok(abi::COMM_NULL);
    };
    let rank = c.rank;
    let c = st.adopt_comm(c)?;
    let h = st.add_comm(c.id, c.vci, fatal);
    st.with_slot(h, |s| s.topo = Some(topo(rank)))?;
    Ok(h)
}

/// The calling process's rank in communicator `comm` and its size.
fn rank_size(st: &State, comm: Handle) -> Result<(c_int, c_int), TopoError> {
    let c = st.comm(comm)?;
    let dev = st.device(c.vci)?;
    Ok((dev.rank(c.id)?, dev.size(c.id)?))
}

/// `MPI_Topo_test`: `MPI_CART`, `MPI_GRAPH`, `MPI_DIST_GRAPH` or `MPI_UNDEFINED`.
///
/// # Safety
/// `status` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Topo_test(comm: Handle, status: *mut c_int) -> c_int {
    topo_call(comm, "MPI_Topo_test", |st| {
        let t = match topology_of(st, comm)? {
            Some(Topology::Cart(_)) => abi::CART,
            Some(Topology::Graph(_)) => abi::GRAPH,
            Some(Topology::DistGraph(_)) => abi::DIST_GRAPH,
            None => abi::UNDEFINED,
        };
        if status.is_null() {
            return Err(TopoError::from(null_arg("status")));
        }
        // SAFETY: the caller's contract.
        unsafe { put(status, t) };
        Ok(())
    })
}

//! Neighbourhood collectives, the standard's "Neighborhood Collective Communication on Process
//! Topologies" (MPI 4.1, section 8.6): `MPI_Neighbor_allgather`, `_allgatherv`, `_alltoall`,
//! `_alltoallv`, `_alltoallw`, each blocking, nonblocking (`MPI_Ineighbor_`) and persistent
//! (`_init`), with their `_c` forms.
//!
//! Each is one round of a schedule (`ch4_core::nbc::neighbours`): a receive from every source
//! and a send to every destination of the communicator's topology (`topology::Topology`), in
//! the topology's order. On a Cartesian grid a process may be its neighbour's neighbour in
//! both directions of a dimension (a periodic dimension of two); MPI says the block a process
//! sends in the negative direction arrives in its neighbour's block of the positive one, so
//! each direction's messages carry a sub-tag of their own and the two are never confused. A
//! graph's repeated edges are matched in order, as MPI's non-overtaking rule matches them.

use std::ffi::{c_int, c_void};

use ch4_core::schedule::PHASES;
use ch4_core::{ErrorKind, Tag};

use super::nonblocking::{init, run_blocking, start_now, Members};
use super::plans::{self, array, byte_blocks, equal_blocks, handles, v_blocks, Block, Plan};
use crate::abi::Handle;
use crate::state::State;
use crate::topology::{topology_of, Topology};

/// `MPI_Count`: a count of the `_c` forms.
type Count = i64;
/// `MPI_Aint`: a displacement of `MPI_Neighbor_alltoallw` and of the `_c` forms.
type Aint = i64;

/// Neighbours in a topology's order, each with the sub-tag of the messages to or from it.
type Edges = Vec<(c_int, Tag)>;

/// The sources and destinations of `comm`'s topology.
fn edges(st: &State, comm: Handle) -> ch4::Result<(Edges, Edges)> {
    let Some(topo) = topology_of(st, comm)? else {
        return Err(ch4::Error::new(
            ErrorKind::Comm,
            "a neighbourhood collective on a communicator without a topology",
        ));
    };
    let (sources, dests) = topo.neighbours();
    if let Topology::Cart(_) = topo {
        if sources.len() > PHASES as usize {
            return Err(ch4::Error::new(
                ErrorKind::Arg,
                format!(
                    "a neighbourhood collective on a grid of more than {} dimensions",
                    PHASES / 2
                ),
            ));
        }
        // Block k goes out on sub-tag k; it arrives in the neighbour's block k ^ 1.
        let s = sources
            .iter()
            .enumerate()
            .map(|(k, &r)| (r, (k ^ 1) as Tag))
            .collect();
        let d = dests
            .iter()
            .enumerate()
            .map(|(k, &r)| (r, k as Tag))
            .collect();
        return Ok((s, d));
    }
    Ok((
        sources.into_iter().map(|r| (r, 0)).collect(),
        dests.into_iter().map(|r| (r, 0)).collect(),
    ))
}

/// Exports a neighbourhood collective's blocking, nonblocking and persistent forms: the
/// parameters before `comm`, then a body making the plan (`$st` the state, `$comm` the
/// communicator handle).
macro_rules! neighbourhood {
    ($blocking:ident, $i:ident, $init:ident, ($($p:ident: $t:ty),* $(,)?),
     |$st:ident, $comm:ident| $make:expr) => {
        #[doc = concat!("`", stringify!($blocking), "`.")]
        ///
        /// # Safety
        /// The buffers and arrays are as MPI describes them for the communicator's topology.
        #[no_mangle]
        pub unsafe extern "C" fn $blocking($($p: $t,)* comm: Handle) -> c_int {
            let make = |$st: &State, _: Members| -> ch4::Result<Plan> {
                let $comm = comm;
                $make
            };
            run_blocking(comm, stringify!($blocking), make)
        }

        #[doc = concat!("`", stringify!($i), "`: starts it; its request completes when it ends.")]
        ///
        /// # Safety
        /// As the blocking form, with the buffers the collective's until its request
        /// completes; `request` is writable.
        #[no_mangle]
        pub unsafe extern "C" fn $i($($p: $t,)* comm: Handle, request: *mut Handle) -> c_int {
            let make = |$st: &State, _: Members| -> ch4::Result<Plan> {
                let $comm = comm;
                $make
            };
            // SAFETY: the caller's contract.
            unsafe { start_now(comm, stringify!($i), request, make) }
        }

        #[doc = concat!("`", stringify!($init), "`: the persistent form, started by `MPI_Start`.")]
        ///
        /// # Safety
        /// As the nonblocking form, whenever the request is active.
        #[no_mangle]
        pub unsafe extern "C" fn $init(
            $($p: $t,)*
            comm: Handle,
            info: Handle,
            request: *mut Handle,
        ) -> c_int {
            let _ = info;
            let make = |$st: &State, _: Members| -> ch4::Result<Plan> {
                let $comm = comm;
                $make
            };
            // SAFETY: the caller's contract.
            unsafe { init(comm, stringify!($init), request, make) }
        }
    };
}

macro_rules! neighbourhoods {
    ($count:ty, $displ:ty, $wdispl:ty,
     $ag:ident, $iag:ident, $ag_init:ident,
     $agv:ident, $iagv:ident, $agv_init:ident,
     $aa:ident, $iaa:ident, $aa_init:ident,
     $aav:ident, $iaav:ident, $aav_init:ident,
     $aaw:ident, $iaaw:ident, $aaw_init:ident) => {
        neighbourhood!(
            $ag,
            $iag,
            $ag_init,
            (
                sendbuf: *const c_void,
                sendcount: $count,
                sendtype: Handle,
                recvbuf: *mut c_void,
                recvcount: $count,
                recvtype: Handle,
            ),
            |st, comm| {
                let (sources, dests) = edges(st, comm)?;
                let mine = Block::new(sendbuf, sendcount.into(), sendtype)?;
                let send = vec![mine; dests.len()];
                let recv = equal_blocks(st, recvbuf, recvcount.into(), recvtype, sources.len())?;
                Ok(plans::neighbours(sources, dests, send, recv))
            }
        );
        neighbourhood!(
            $agv,
            $iagv,
            $agv_init,
            (
                sendbuf: *const c_void,
                sendcount: $count,
                sendtype: Handle,
                recvbuf: *mut c_void,
                recvcounts: *const $count,
                displs: *const $displ,
                recvtype: Handle,
            ),
            |st, comm| {
                let (sources, dests) = edges(st, comm)?;
                let mine = Block::new(sendbuf, sendcount.into(), sendtype)?;
                let send = vec![mine; dests.len()];
                // SAFETY: the caller's contract: an entry per source.
                let (rc, rd) = unsafe {
                    (
                        array(recvcounts, sources.len(), "recvcounts")?,
                        array(displs, sources.len(), "displs")?,
                    )
                };
                let recv = v_blocks(st, recvbuf, &rc, &rd, recvtype)?;
                Ok(plans::neighbours(sources, dests, send, recv))
            }
        );
        neighbourhood!(
            $aa,
            $iaa,
            $aa_init,
            (
                sendbuf: *const c_void,
                sendcount: $count,
                sendtype: Handle,
                recvbuf: *mut c_void,
                recvcount: $count,
                recvtype: Handle,
            ),
            |st, comm| {
                let (sources, dests) = edges(st, comm)?;
                let send = equal_blocks(st, sendbuf, sendcount.into(), sendtype, dests.len())?;
                let recv = equal_blocks(st, recvbuf, recvcount.into(), recvtype, sources.len())?;
                Ok(plans::neighbours(sources, dests, send, recv))
            }
        );
        neighbourhood!(
            $aav,
            $iaav,
            $aav_init,
            (
                sendbuf: *const c_void,
                sendcounts: *const $count,
                sdispls: *const $displ,
                sendtype: Handle,
                recvbuf: *mut c_void,
                recvcounts: *const $count,
                rdispls: *const $displ,
                recvtype: Handle,
            ),
            |st, comm| {
                let (sources, dests) = edges(st, comm)?;
                // SAFETY: the caller's contract: an entry per destination and per source.
                let (sc, sd, rc, rd) = unsafe {
                    (
                        array(sendcounts, dests.len(), "sendcounts")?,
                        array(sdispls, dests.len(), "sdispls")?,
                        array(recvcounts, sources.len(), "recvcounts")?,
                        array(rdispls, sources.len(), "rdispls")?,
                    )
                };
                let send = v_blocks(st, sendbuf, &sc, &sd, sendtype)?;
                let recv = v_blocks(st, recvbuf, &rc, &rd, recvtype)?;
                Ok(plans::neighbours(sources, dests, send, recv))
            }
        );
        neighbourhood!(
            $aaw,
            $iaaw,
            $aaw_init,
            (
                sendbuf: *const c_void,
                sendcounts: *const $count,
                sdispls: *const $wdispl,
                sendtypes: *const Handle,
                recvbuf: *mut c_void,
                recvcounts: *const $count,
                rdispls: *const $wdispl,
                recvtypes: *const Handle,
            ),
            |st, comm| {
                let (sources, dests) = edges(st, comm)?;
                let (ns, nd) = (sources.len(), dests.len());
                // SAFETY: the caller's contract: an entry per destination and per source.
                let (sc, sd, stypes, rc, rd, rtypes) = unsafe {
                    (
                        array(sendcounts, nd, "sendcounts")?,
                        array(sdispls, nd, "sdispls")?,
                        handles(sendtypes, nd, "sendtypes")?,
                        array(recvcounts, ns, "recvcounts")?,
                        array(rdispls, ns, "rdispls")?,
                        handles(recvtypes, ns, "recvtypes")?,
                    )
                };
                let send = byte_blocks(sendbuf, &sc, &sd, &stypes)?;
                let recv = byte_blocks(recvbuf, &rc, &rd, &rtypes)?;
                Ok(plans::neighbours(sources, dests, send, recv))
            }
        );
    };
}

neighbourhoods!(
    c_int,
    c_int,
    Aint,
    MPI_Neighbor_allgather,
    MPI_Ineighbor_allgather,
    MPI_Neighbor_allgather_init,
    MPI_Neighbor_allgatherv,
    MPI_Ineighbor_allgatherv,
    MPI_Neighbor_allgatherv_init,
    MPI_Neighbor_alltoall,
    MPI_Ineighbor_alltoall,
    MPI_Neighbor_alltoall_init,
    MPI_Neighbor_alltoallv,
    MPI_Ineighbor_alltoallv,
    MPI_Neighbor_alltoallv_init,
    MPI_Neighbor_alltoallw,
    MPI_Ineighbor_alltoallw,
    MPI_Neighbor_alltoallw_init
);
neighbourhoods!(
    Count,
    Aint,
    Aint,
    MPI_Neighbor_allgather_c,
    MPI_Ineighbor_allgather_c,
    MPI_Neighbor_allgather_init_c,
    MPI_Neighbor_allgatherv_c,
    MPI_Ineighbor_allgatherv_c,
    MPI_Neighbor_allgatherv_init_c,
    MPI_Neighbor_alltoall_c,
    MPI_Ineighbor_alltoall_c,
    MPI_Neighbor_alltoall_init_c,
    MPI_Neighbor_alltoallv_c,
    MPI_Ineighbor_alltoallv_c,
    MPI_Neighbor_alltoallv_init_c,
    MPI_Neighbor_alltoallw_c,
    MPI_Ineighbor_alltoallw_c,
    MPI_Neighbor_alltoallw_init_c
);

//! Scatters, the standard's "Scatter": `MPI_Scatter` and `MPI_Scatterv`.
//!
//! `MPI_Scatter` of predefined datatypes is `MPI_Scatterv` with equal blocks, so there is one
//! path to the device's scatterv; of derived datatypes, it scatters packed bytes.

use std::ffi::{c_int, c_void};

use super::{packed, packed_len, rank_size, scaled, span, type_size, unpack};
use crate::abi::{self, Handle};
use crate::buffers::plain;
use crate::call::{call, on_device};
use crate::datatype::{raw, recv_bytes};
use crate::state;

/// `MPI_Scatterv`.
///
/// # Safety
/// The buffers and arrays are as MPI describes them.
#[no_mangle]
pub unsafe extern "C" fn MPI_Scatterv(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    displs: *const c_int,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: Handle,
    root: c_int,
    comm: Handle,
) -> c_int {
    call(comm, "MPI_Scatterv", |st| {
        let c = st.comm(comm)?;
        if let Some(m) = super::inter::of(st, c)? {
            let send = if super::inter::at_root(root, m.peers())? {
                // SAFETY: the caller's contract: an entry per remote member at the root.
                unsafe { super::inter::v(st, sendbuf, sendcounts, displs, sendtype, m) }?
            } else {
                Vec::new()
            };
            let recv = super::plans::Block::new(recvbuf, recvcount.into(), recvtype)?;
            return super::inter::run(st, c, Ok(super::inter::scatterv(send, recv, root)));
        }
        let id = c.id;
        let (me, size) = rank_size(st, c)?;
        if me != root {
            // SAFETY: the caller's contract.
            let recv = unsafe { recv_bytes(recvbuf, recvcount, recvtype) }?;
            return on_device!(st, c.vci, |b| ch4_core::coll::scatterv(
                b,
                id,
                root,
                &[],
                &[],
                &[],
                recv
            ));
        }
        let es = type_size(sendtype)?;
        // SAFETY: the caller's contract.
        let (counts, offs) = unsafe {
            (
                scaled(sendcounts, size, es, "sendcounts")?,
                scaled(displs, size, es, "displs")?,
            )
        };
        // SAFETY: the caller's contract.
        let send = unsafe { raw(sendbuf, span(&counts, &offs)) }?;
        let r = me as usize;
        let mut own;
        let recv: &mut [u8] = if recvbuf as usize == abi::IN_PLACE {
            own = send[offs[r]..offs[r] + counts[r]].to_vec();
            &mut own
        } else {
            // SAFETY: the caller's contract.
            unsafe { recv_bytes(recvbuf, recvcount, recvtype) }?
        };
        on_device!(st, c.vci, |b| ch4_core::coll::scatterv(
            b, id, root, send, &counts, &offs, recv
        ))
    })
}

/// `MPI_Scatter`.
///
/// # Safety
/// The buffers are as MPI describes them.
#[no_mangle]
pub unsafe extern "C" fn MPI_Scatter(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: Handle,
    root: c_int,
    comm: Handle,
) -> c_int {
    if !plain(sendtype, sendcount) || !plain(recvtype, recvcount) {
        return call(comm, "MPI_Scatter", |st| {
            let c = st.comm(comm)?;
            if let Some(m) = super::inter::of(st, c)? {
                let send = if super::inter::at_root(root, m.peers())? {
                    super::inter::equal(st, sendbuf, sendcount, sendtype, m)?
                } else {
                    Vec::new()
                };
                let recv = super::plans::Block::new(recvbuf, recvcount.into(), recvtype)?;
                return super::inter::run(st, c, Ok(super::inter::scatterv(send, recv, root)));
            }
            let id = c.id;
            let (me, size) = rank_size(st, c)?;
            // The root's block size is its send block's (with MPI_IN_PLACE its receive
            // arguments are not significant); elsewhere the send arguments are not.
            let block = if me == root {
                packed_len(st, sendcount, sendtype)?
            } else {
                packed_len(st, recvcount, recvtype)?
            };
            let all = if me == root {
                // SAFETY: the caller's contract: the root's send buffer.
                unsafe {
                    packed(
                        st,
                        sendbuf,
                        sendcount.saturating_mul(size as c_int),
                        sendtype,
                    )
                }?
            } else {
                Vec::new()
            };
            let counts = vec![block; size];
            let displs: Vec<usize> = (0..size).map(|r| r * block).collect();
            let mut mine = vec![0u8; block];
            on_device!(st, c.vci, |b| ch4_core::coll::scatterv(
                b, id, root, &all, &counts, &displs, &mut mine
            ))?;
            if recvbuf as usize == abi::IN_PLACE {
                return Ok(());
            }
            // SAFETY: the caller's contract.
            unsafe { unpack(st, recvbuf, recvcount, recvtype, &mine) }
        });
    }
    // One block per member, of the remote group on an intercommunicator.
    let n = state::with(|st| {
        st.comm(comm)
            .and_then(|c| super::nonblocking::members(st, c))
            .map(|m| m.peers())
    })
    .ok()
    .and_then(Result::ok)
    .unwrap_or(0);
    let counts = vec![sendcount; n];
    let displs: Vec<c_int> = (0..n).map(|i| i as c_int * sendcount).collect();
    // SAFETY: the caller's contract; the arrays have one entry per member.
    unsafe {
        MPI_Scatterv(
            sendbuf,
            counts.as_ptr(),
            displs.as_ptr(),
            sendtype,
            recvbuf,
            recvcount,
            recvtype,
            root,
            comm,
        )
    }
}

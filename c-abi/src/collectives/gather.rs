//! Gathers, the standard's "Gather" and "Gather-to-all": `MPI_Gather`, `MPI_Gatherv`,
//! `MPI_Allgather` and `MPI_Allgatherv`.
//!
//! The fixed-count forms take derived datatypes too, through packed copies; the `v` forms take
//! predefined datatypes, whose counts and displacements become bytes by one multiplication
//! (`scaled`). `MPI_IN_PLACE` becomes a copy of the caller's own block.

use std::ffi::{c_int, c_void};

use ch4_core::ErrorKind;

use super::{packed, packed_len, rank_size, scaled, span, type_size, unpack};
use crate::abi::{self, Handle};
use crate::buffers::plain;
use crate::call::{call, on_device};
use crate::datatype::{self, raw_mut, recv_bytes, send_bytes};

/// `MPI_Gather`.
///
/// # Safety
/// The buffers hold (have room for) their counts of their datatypes; at the root `recvbuf`
/// has room for `size * recvcount`; `sendbuf` may be `MPI_IN_PLACE` at the root.
#[no_mangle]
pub unsafe extern "C" fn MPI_Gather(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: Handle,
    root: c_int,
    comm: Handle,
) -> c_int {
    call(comm, "MPI_Gather", |st| {
        let c = st.comm(comm)?;
        if let Some(m) = super::inter::of(st, c)? {
            let recv = if super::inter::at_root(root, m.peers())? {
                super::inter::equal(st, recvbuf, recvcount, recvtype, m)?
            } else {
                Vec::new()
            };
            let send = super::plans::Block::new(sendbuf, sendcount.into(), sendtype)?;
            return super::inter::run(st, c, Ok(super::inter::gatherv(send, recv, root)));
        }
        let id = c.id;
        let (me, size) = {
            let dev = st.device(c.vci)?;
            (dev.rank(id)?, dev.size(id)?)
        };
        if !plain(sendtype, sendcount) || !plain(recvtype, recvcount) {
            let all = recvcount.saturating_mul(size);
            let mut gathered = if me == root {
                vec![0u8; packed_len(st, all, recvtype)?]
            } else {
                Vec::new()
            };
            let mine = if sendbuf as usize == abi::IN_PLACE && me == root {
                let whole = {
                    // SAFETY: the caller's contract: the root's receive buffer.
                    unsafe { packed(st, recvbuf, all, recvtype) }?
                };
                let n = packed_len(st, recvcount, recvtype)?;
                whole[me as usize * n..][..n].to_vec()
            } else {
                // SAFETY: the caller's contract.
                unsafe { packed(st, sendbuf, sendcount, sendtype) }?
            };
            on_device!(st, c.vci, |b| ch4_core::coll::gather(
                b,
                id,
                root,
                &mine,
                &mut gathered
            ))?;
            if me == root {
                // SAFETY: the caller's contract.
                unsafe { unpack(st, recvbuf, all, recvtype, &gathered) }?;
            }
            return Ok(());
        }
        let total = c_int::try_from(i64::from(recvcount) * i64::from(size))
            .map_err(|_| ch4::Error::new(ErrorKind::Count, "gathered count too large"))?;
        let mut scratch = Vec::new();
        let recv: &mut [u8] = if me == root {
            // SAFETY: the caller's contract.
            unsafe { recv_bytes(recvbuf, total, recvtype) }?
        } else {
            &mut scratch
        };
        let send: Vec<u8>;
        let send: &[u8] = if sendbuf as usize == abi::IN_PLACE && me == root {
            let len = datatype::byte_len(recvcount, recvtype)?;
            let at = root as usize * len;
            send = recv[at..at + len].to_vec();
            &send
        } else {
            // SAFETY: the caller's contract.
            unsafe { send_bytes(sendbuf, sendcount, sendtype) }?
        };
        on_device!(st, c.vci, |b| ch4_core::coll::gather(
            b, id, root, send, recv
        ))
    })
}

/// `MPI_Allgather`.
///
/// # Safety
/// The buffers hold (have room for) their counts of their datatypes; `recvbuf` has room for
/// `size * recvcount`; `sendbuf` may be `MPI_IN_PLACE`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Allgather(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: Handle,
    comm: Handle,
) -> c_int {
    call(comm, "MPI_Allgather", |st| {
        let c = st.comm(comm)?;
        if let Some(m) = super::inter::of(st, c)? {
            let recv = super::inter::equal(st, recvbuf, recvcount, recvtype, m)?;
            let send = super::plans::Block::new(sendbuf, sendcount.into(), sendtype)?;
            return super::inter::run(st, c, Ok(super::inter::allgatherv(send, recv)));
        }
        let id = c.id;
        let (me, size) = {
            let dev = st.device(c.vci)?;
            (dev.rank(id)?, dev.size(id)?)
        };
        if !plain(sendtype, sendcount) || !plain(recvtype, recvcount) {
            let all = recvcount.saturating_mul(size);
            let mut gathered = vec![0u8; packed_len(st, all, recvtype)?];
            let mine = if sendbuf as usize == abi::IN_PLACE {
                // SAFETY: the caller's contract.
                let whole = unsafe { packed(st, recvbuf, all, recvtype) }?;
                let n = packed_len(st, recvcount, recvtype)?;
                whole[me as usize * n..][..n].to_vec()
            } else {
                // SAFETY: the caller's contract.
                unsafe { packed(st, sendbuf, sendcount, sendtype) }?
            };
            on_device!(st, c.vci, |b| ch4_core::coll::allgather(
                b,
                id,
                &mine,
                &mut gathered
            ))?;
            // SAFETY: the caller's contract.
            return unsafe { unpack(st, recvbuf, all, recvtype, &gathered) };
        }
        let total = c_int::try_from(i64::from(recvcount) * i64::from(size))
            .map_err(|_| ch4::Error::new(ErrorKind::Count, "gathered count too large"))?;
        // SAFETY: the caller's contract.
        let recv = unsafe { recv_bytes(recvbuf, total, recvtype) }?;
        let send: Vec<u8> = if sendbuf as usize == abi::IN_PLACE {
            let len = datatype::byte_len(recvcount, recvtype)?;
            let at = me as usize * len;
            recv[at..at + len].to_vec()
        } else {
            // SAFETY: the caller's contract.
            unsafe { send_bytes(sendbuf, sendcount, sendtype) }?.to_vec()
        };
        on_device!(st, c.vci, |b| ch4_core::coll::allgather(b, id, &send, recv))
    })
}

/// `MPI_Gatherv`.
///
/// # Safety
/// The buffers and arrays are as MPI describes them (the root's `recvcounts` and `displs` have
/// one entry per member).
#[no_mangle]
pub unsafe extern "C" fn MPI_Gatherv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    displs: *const c_int,
    recvtype: Handle,
    root: c_int,
    comm: Handle,
) -> c_int {
    call(comm, "MPI_Gatherv", |st| {
        let c = st.comm(comm)?;
        if let Some(m) = super::inter::of(st, c)? {
            let recv = if super::inter::at_root(root, m.peers())? {
                // SAFETY: the caller's contract: an entry per remote member at the root.
                unsafe { super::inter::v(st, recvbuf, recvcounts, displs, recvtype, m) }?
            } else {
                Vec::new()
            };
            let send = super::plans::Block::new(sendbuf, sendcount.into(), sendtype)?;
            return super::inter::run(st, c, Ok(super::inter::gatherv(send, recv, root)));
        }
        let id = c.id;
        let (me, size) = rank_size(st, c)?;
        if me != root {
            // SAFETY: the caller's contract.
            let send = unsafe { send_bytes(sendbuf, sendcount, sendtype) }?;
            return on_device!(st, c.vci, |b| ch4_core::coll::gatherv(
                b,
                id,
                root,
                send,
                &mut [],
                &[],
                &[]
            ));
        }
        let es = type_size(recvtype)?;
        // SAFETY: the caller's contract.
        let (counts, offs) = unsafe {
            (
                scaled(recvcounts, size, es, "recvcounts")?,
                scaled(displs, size, es, "displs")?,
            )
        };
        // SAFETY: the caller's contract.
        let recv = unsafe { raw_mut(recvbuf, span(&counts, &offs)) }?;
        let send: Vec<u8> = if sendbuf as usize == abi::IN_PLACE {
            let r = me as usize;
            recv[offs[r]..offs[r] + counts[r]].to_vec()
        } else {
            // SAFETY: the caller's contract.
            unsafe { send_bytes(sendbuf, sendcount, sendtype) }?.to_vec()
        };
        on_device!(st, c.vci, |b| ch4_core::coll::gatherv(
            b, id, root, &send, recv, &counts, &offs
        ))
    })
}

/// `MPI_Allgatherv`.
///
/// # Safety
/// The buffers and arrays are as MPI describes them.
#[no_mangle]
pub unsafe extern "C" fn MPI_Allgatherv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    displs: *const c_int,
    recvtype: Handle,
    comm: Handle,
) -> c_int {
    call(comm, "MPI_Allgatherv", |st| {
        let c = st.comm(comm)?;
        if let Some(m) = super::inter::of(st, c)? {
            // SAFETY: the caller's contract: an entry per remote member.
            let recv = unsafe { super::inter::v(st, recvbuf, recvcounts, displs, recvtype, m) }?;
            let send = super::plans::Block::new(sendbuf, sendcount.into(), sendtype)?;
            return super::inter::run(st, c, Ok(super::inter::allgatherv(send, recv)));
        }
        let id = c.id;
        let (me, size) = rank_size(st, c)?;
        let es = type_size(recvtype)?;
        // SAFETY: the caller's contract.
        let (counts, offs) = unsafe {
            (
                scaled(recvcounts, size, es, "recvcounts")?,
                scaled(displs, size, es, "displs")?,
            )
        };
        // SAFETY: the caller's contract.
        let recv = unsafe { raw_mut(recvbuf, span(&counts, &offs)) }?;
        let send: Vec<u8> = if sendbuf as usize == abi::IN_PLACE {
            let r = me as usize;
            recv[offs[r]..offs[r] + counts[r]].to_vec()
        } else {
            // SAFETY: the caller's contract.
            unsafe { send_bytes(sendbuf, sendcount, sendtype) }?.to_vec()
        };
        on_device!(st, c.vci, |b| ch4_core::coll::allgatherv(
            b, id, &send, recv, &counts, &offs
        ))
    })
}

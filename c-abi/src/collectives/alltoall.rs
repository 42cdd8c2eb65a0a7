//! All-to-all, the standard's "All-to-All Scatter/Gather": `MPI_Alltoall`, `MPI_Alltoallv`
//! and `MPI_Alltoallw`.
//!
//! All three are the device's alltoallv in bytes: `MPI_Alltoall` of predefined datatypes calls
//! `MPI_Alltoallv` with equal blocks, `MPI_Alltoallw` turns each peer's count and datatype into
//! bytes, and `MPI_Alltoall` of derived datatypes exchanges packed bytes.

use std::ffi::{c_int, c_void};

use super::plans::{array, byte_blocks, handles, v_blocks, Block};
use super::{packed, packed_len, rank_size, scaled, span, type_size, unpack};
use crate::abi::{self, Handle};
use crate::buffers::plain;
use crate::call::{call, null_arg, on_device};
use crate::datatype::{raw, raw_mut};
use crate::state;

/// `MPI_Alltoallv`.
///
/// # Safety
/// The buffers and arrays are as MPI describes them.
#[no_mangle]
pub unsafe extern "C" fn MPI_Alltoallv(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const c_int,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const c_int,
    recvtype: Handle,
    comm: Handle,
) -> c_int {
    call(comm, "MPI_Alltoallv", |st| {
        let c = st.comm(comm)?;
        if let Some(m) = super::inter::of(st, c)? {
            // SAFETY: the caller's contract: an entry per remote member in each array.
            let (send, recv) = unsafe {
                (
                    super::inter::v(st, sendbuf, sendcounts, sdispls, sendtype, m)?,
                    super::inter::v(st, recvbuf, recvcounts, rdispls, recvtype, m)?,
                )
            };
            return super::inter::run(st, c, Ok(super::inter::alltoallw(send, recv)));
        }
        let id = c.id;
        let (_, size) = rank_size(st, c)?;
        let in_place = sendbuf as usize == abi::IN_PLACE;
        if type_size(recvtype).is_err() || (!in_place && type_size(sendtype).is_err()) {
            // Derived datatypes: packed blocks, through the same device all-to-all.
            let blocks = |buf: *const c_void, counts, displs, dt| -> ch4::Result<Vec<Block>> {
                // SAFETY: the caller's contract: one entry per member in each array.
                let (k, d) = unsafe {
                    (
                        array(counts, size, "counts")?,
                        array(displs, size, "displacements")?,
                    )
                };
                v_blocks(st, buf, &k, &d, dt)
            };
            let recv = blocks(recvbuf, recvcounts, rdispls, recvtype)?;
            let send = if in_place {
                None
            } else {
                Some(blocks(sendbuf, sendcounts, sdispls, sendtype)?)
            };
            // SAFETY: the caller's contract.
            return unsafe { packed_blocks(st, c, send.as_deref(), &recv) };
        }
        let rs = type_size(recvtype)?;
        let ss = if in_place { rs } else { type_size(sendtype)? };
        // SAFETY: the caller's contract.
        let (rc, rd) = unsafe {
            (
                scaled(recvcounts, size, rs, "recvcounts")?,
                scaled(rdispls, size, rs, "rdispls")?,
            )
        };
        // SAFETY: the caller's contract.
        let recv = unsafe { raw_mut(recvbuf, span(&rc, &rd)) }?;
        let (sc, sd, owned);
        let send: &[u8] = if sendbuf as usize == abi::IN_PLACE {
            owned = recv.to_vec();
            (sc, sd) = (rc.clone(), rd.clone());
            &owned
        } else {
            // SAFETY: the caller's contract.
            unsafe {
                sc = scaled(sendcounts, size, ss, "sendcounts")?;
                sd = scaled(sdispls, size, ss, "sdispls")?;
                raw(sendbuf, span(&sc, &sd))?
            }
        };
        on_device!(st, c.vci, |b| ch4_core::coll::alltoallv(
            b, id, send, &sc, &sd, recv, &rc, &rd
        ))
    })
}

/// An all-to-all of blocks of any datatypes: each member's blocks for the others (`send`, or
/// with `None` what its receive blocks hold, `MPI_IN_PLACE`) packed into one vector, moved by
/// the device's all-to-all of bytes, and unpacked into `recv`'s blocks. The device sees the
/// byte counts the predefined path gives it, so members of either path meet.
///
/// # Safety
/// The blocks are the program's, as MPI describes them for the call.
unsafe fn packed_blocks(
    st: &crate::state::State,
    c: crate::state::CommRef,
    send: Option<&[Block]>,
    recv: &[Block],
) -> ch4::Result<()> {
    let id = c.id;
    let from = send.unwrap_or(recv);
    let (mut out, mut sc, mut sd) = (Vec::new(), Vec::new(), Vec::new());
    for b in from {
        // SAFETY: the caller's contract.
        let bytes = unsafe { b.pack(st) }?;
        sd.push(out.len());
        sc.push(bytes.len());
        out.extend_from_slice(&bytes);
    }
    let (mut rc, mut rd, mut total) = (Vec::new(), Vec::new(), 0);
    for b in recv {
        let len = b.len(st)?;
        rd.push(total);
        rc.push(len);
        total += len;
    }
    let mut back = vec![0u8; total];
    on_device!(st, c.vci, |b| ch4_core::coll::alltoallv(
        b, id, &out, &sc, &sd, &mut back, &rc, &rd
    ))?;
    for (i, b) in recv.iter().enumerate() {
        if rc[i] == 0 {
            continue;
        }
        // SAFETY: the caller's contract.
        let mut o = unsafe { b.output(st) }?;
        o.write_at(0, &back[rd[i]..rd[i] + rc[i]]);
    }
    Ok(())
}

/// `MPI_Alltoall`.
///
/// # Safety
/// The buffers are as MPI describes them.
#[no_mangle]
pub unsafe extern "C" fn MPI_Alltoall(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: Handle,
    comm: Handle,
) -> c_int {
    if !plain(sendtype, sendcount) || !plain(recvtype, recvcount) {
        return call(comm, "MPI_Alltoall", |st| {
            let c = st.comm(comm)?;
            if let Some(m) = super::inter::of(st, c)? {
                let send = super::inter::equal(st, sendbuf, sendcount, sendtype, m)?;
                let recv = super::inter::equal(st, recvbuf, recvcount, recvtype, m)?;
                return super::inter::run(st, c, Ok(super::inter::alltoallw(send, recv)));
            }
            let id = c.id;
            let (_, size) = rank_size(st, c)?;
            let all = recvcount.saturating_mul(size as c_int);
            let out = if sendbuf as usize == abi::IN_PLACE {
                // SAFETY: the caller's contract.
                unsafe { packed(st, recvbuf, all, recvtype) }?
            } else {
                // SAFETY: the caller's contract.
                unsafe {
                    packed(
                        st,
                        sendbuf,
                        sendcount.saturating_mul(size as c_int),
                        sendtype,
                    )
                }?
            };
            let block = packed_len(st, recvcount, recvtype)?;
            let counts = vec![block; size];
            let displs: Vec<usize> = (0..size).map(|r| r * block).collect();
            let mut back = vec![0u8; block * size];
            on_device!(st, c.vci, |b| ch4_core::coll::alltoallv(
                b, id, &out, &counts, &displs, &mut back, &counts, &displs
            ))?;
            // SAFETY: the caller's contract.
            unsafe { unpack(st, recvbuf, all, recvtype, &back) }
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
    let (sc, rc) = (vec![sendcount; n], vec![recvcount; n]);
    let sd: Vec<c_int> = (0..n).map(|i| i as c_int * sendcount).collect();
    let rd: Vec<c_int> = (0..n).map(|i| i as c_int * recvcount).collect();
    // SAFETY: the caller's contract; the arrays have one entry per member.
    unsafe {
        MPI_Alltoallv(
            sendbuf,
            sc.as_ptr(),
            sd.as_ptr(),
            sendtype,
            recvbuf,
            rc.as_ptr(),
            rd.as_ptr(),
            recvtype,
            comm,
        )
    }
}

/// `MPI_Alltoallw` (with predefined datatypes: displacements in bytes, one type per peer).
///
/// # Safety
/// The buffers and arrays are as MPI describes them.
#[no_mangle]
pub unsafe extern "C" fn MPI_Alltoallw(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const c_int,
    sendtypes: *const Handle,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const c_int,
    recvtypes: *const Handle,
    comm: Handle,
) -> c_int {
    call(comm, "MPI_Alltoallw", |st| {
        let c = st.comm(comm)?;
        // The blocks of `n` members: counts, byte displacements and a type each.
        let blocks = |n: usize,
                      buf: *const c_void,
                      counts: *const c_int,
                      displs: *const c_int,
                      types: *const Handle|
         -> ch4::Result<Vec<Block>> {
            // SAFETY: the caller's contract: one entry per member in each array.
            let (k, d, t) = unsafe {
                (
                    array(counts, n, "counts")?,
                    array(displs, n, "displacements")?,
                    handles(types, n, "datatypes")?,
                )
            };
            byte_blocks(buf, &k, &d, &t)
        };
        let in_place = sendbuf as usize == abi::IN_PLACE;
        if let Some(m) = super::inter::of(st, c)? {
            let n = m.peers();
            let send = blocks(n, sendbuf, sendcounts, sdispls, sendtypes)?;
            let recv = blocks(n, recvbuf, recvcounts, rdispls, recvtypes)?;
            return super::inter::run(st, c, Ok(super::inter::alltoallw(send, recv)));
        }
        let (_, size) = rank_size(st, c)?;
        // Derived datatypes (each block's may differ): packed blocks through the same device
        // all-to-all, so members that mix derived and predefined types still meet.
        let derived = |types: *const Handle| {
            !types.is_null()
                // SAFETY: the caller's contract: one type per member.
                && unsafe { std::slice::from_raw_parts(types, size) }
                    .iter()
                    .any(|&t| type_size(t).is_err())
        };
        if derived(recvtypes) || (!in_place && derived(sendtypes)) {
            let recv = blocks(size, recvbuf, recvcounts, rdispls, recvtypes)?;
            let send = if in_place {
                None
            } else {
                Some(blocks(size, sendbuf, sendcounts, sdispls, sendtypes)?)
            };
            // SAFETY: the caller's contract.
            return unsafe { packed_blocks(st, c, send.as_deref(), &recv) };
        }
        let id = c.id;
        if size > 0 && (recvtypes.is_null() || (!in_place && sendtypes.is_null())) {
            return Err(null_arg("the datatype arrays"));
        }
        let bytes = |counts: *const c_int, types: *const Handle, what| -> ch4::Result<Vec<usize>> {
            // SAFETY: the caller's contract: one count and one type per member.
            let (c, t) = unsafe {
                (
                    scaled(counts, size, 1, what)?,
                    std::slice::from_raw_parts(types, size),
                )
            };
            c.iter()
                .zip(t)
                .map(|(&n, &dt)| Ok(n * type_size(dt)?))
                .collect()
        };
        let rc = bytes(recvcounts, recvtypes, "recvcounts")?;
        // SAFETY: the caller's contract.
        let rd = unsafe { scaled(rdispls, size, 1, "rdispls") }?;
        // SAFETY: the caller's contract.
        let recv = unsafe { raw_mut(recvbuf, span(&rc, &rd)) }?;
        let (sc, sd, owned);
        let send: &[u8] = if in_place {
            owned = recv.to_vec();
            (sc, sd) = (rc.clone(), rd.clone());
            &owned
        } else {
            sc = bytes(sendcounts, sendtypes, "sendcounts")?;
            // SAFETY: the caller's contract.
            sd = unsafe { scaled(sdispls, size, 1, "sdispls") }?;
            // SAFETY: the caller's contract.
            unsafe { raw(sendbuf, span(&sc, &sd)) }?
        };
        on_device!(st, c.vci, |b| ch4_core::coll::alltoallv(
            b, id, send, &sc, &sd, recv, &rc, &rd
        ))
    })
}

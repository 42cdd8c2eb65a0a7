//! `libmpi_abi.so.1`: ch4 behind the MPI standard ABI (MPI 5.0), so that unmodified C MPI
//! programs — the OSU micro-benchmarks, MPICH's test suite, an application — run on ch4, and
//! the very same binary runs on MPICH 5's library of the same ABI by changing
//! `LD_LIBRARY_PATH`.
//!
//! - `abi`: the ABI's handles, constants and `MPI_Status` (the values of `include/mpi.h`).
//! - `state`: the process's universe and communicator table, and the thread rule
//!   (`MPI_THREAD_FUNNELED`).
//! - `errors`: error codes with their messages, the classes, the error handlers.
//! - `datatype`: the predefined datatypes and reduction operations.
//! - The functions themselves are below, by chapter of the standard: each checks its
//!   arguments, translates handles (a few instructions: predefined handles are small integers,
//!   a request is the device's handle with its top bit set) and calls the device.
//!
//! A process joins its job as every ch4 program does, through PMI: under `ch4run`, under
//! Hydra's `mpiexec`, or alone as a singleton.

// The MPI functions keep the C names the ABI gives them, and their C parameter lists.
#![allow(non_snake_case)]
#![allow(clippy::too_many_arguments)]

mod abi;
mod buffers;
mod call;
mod comm;
mod datatype;
mod derived;
mod environment;
mod errors;
mod groups;
mod probe;
mod pt2pt;
mod request_sets;
mod requests;
mod state;
mod status;
mod topology;

use std::ffi::{c_int, c_void};

use ch4_core::ErrorKind;

use abi::Handle;
use buffers::{plain, rbuf, sbuf};
use call::{call, null_arg};
use datatype::{raw, raw_mut, recv_bytes, send_bytes};
use state::State;

// ------------------------------------------------------------------ collectives

/// `MPI_Barrier`.
#[no_mangle]
pub extern "C" fn MPI_Barrier(comm: Handle) -> c_int {
    call(comm, "MPI_Barrier", |st| {
        let id = st.comm(comm)?;
        st.device()?.barrier(id)
    })
}

/// The elements of a collective's buffers packed into bytes (for a derived datatype: the
/// device's collectives move contiguous bytes).
///
/// # Safety
/// `buf` holds `count` elements of `dt`.
unsafe fn packed(st: &State, buf: *const c_void, count: c_int, dt: Handle) -> ch4::Result<Vec<u8>> {
    // SAFETY: the caller's contract; the copy is made before this returns.
    unsafe { sbuf(st, buf, count, dt) }?.to_vec()
}

/// Unpacks `data` into `count` elements of `dt` at `buf`.
///
/// # Safety
/// `buf` has room for `count` elements of `dt`.
unsafe fn unpack(
    st: &State,
    buf: *mut c_void,
    count: c_int,
    dt: Handle,
    data: &[u8],
) -> ch4::Result<()> {
    // SAFETY: the caller's contract; the buffer is written before this returns.
    let mut r = unsafe { rbuf(st, buf, count, dt) }?;
    if r.write_at(0, data) != data.len() {
        return Err(ch4::Error::new(
            ErrorKind::Count,
            "the collective's data does not fit its receive buffer",
        ));
    }
    Ok(())
}

/// The packed bytes of `count` elements of `dt`.
fn packed_len(st: &State, count: c_int, dt: Handle) -> ch4::Result<usize> {
    Ok(datatype::elements(count)? * derived::desc(st, dt)?.size)
}

/// `MPI_Bcast`.
///
/// # Safety
/// `buffer` holds (has room for) `count` elements of `datatype`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Bcast(
    buffer: *mut c_void,
    count: c_int,
    datatype: Handle,
    root: c_int,
    comm: Handle,
) -> c_int {
    call(comm, "MPI_Bcast", |st| {
        let id = st.comm(comm)?;
        if !plain(datatype, count) {
            let me = st.device()?.rank(id)?;
            let mut data = if me == root {
                // SAFETY: the caller's contract.
                unsafe { packed(st, buffer, count, datatype) }?
            } else {
                vec![0u8; packed_len(st, count, datatype)?]
            };
            st.device()?.bcast(id, root, &mut data)?;
            if me != root {
                // SAFETY: the caller's contract.
                unsafe { unpack(st, buffer, count, datatype, &data) }?;
            }
            return Ok(());
        }
        // SAFETY: the caller's contract.
        let buf = unsafe { recv_bytes(buffer, count, datatype) }?;
        st.device()?.bcast(id, root, buf)
    })
}

/// The contribution of a reduction: the send buffer, or with `MPI_IN_PLACE` a copy of the
/// receive buffer.
///
/// # Safety
/// As the reduction functions' buffers.
unsafe fn contribution(
    sendbuf: *const c_void,
    recv: &[u8],
    count: c_int,
    dt: Handle,
) -> ch4::Result<std::borrow::Cow<'static, [u8]>> {
    if sendbuf as usize == abi::IN_PLACE {
        return Ok(std::borrow::Cow::Owned(recv.to_vec()));
    }
    // SAFETY: the caller's contract; the slice is used only during the call.
    let s: &'static [u8] = unsafe { datatype::reduce_in(sendbuf, count, dt) }?;
    Ok(std::borrow::Cow::Borrowed(s))
}

/// `MPI_Reduce` with the predefined operations.
///
/// # Safety
/// `sendbuf` holds `count` elements of `datatype` (or is `MPI_IN_PLACE` at the root);
/// `recvbuf` has room for them at the root.
#[no_mangle]
pub unsafe extern "C" fn MPI_Reduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: Handle,
    op: Handle,
    root: c_int,
    comm: Handle,
) -> c_int {
    call(comm, "MPI_Reduce", |st| {
        let id = st.comm(comm)?;
        let fold = datatype::reduction(op, datatype)?;
        let me = st.device()?.rank(id)?;
        // Only the root's receive buffer is used (the device's reduction keeps its own
        // working buffers).
        let recv: &mut [u8] = if me == root {
            // SAFETY: the caller's contract.
            unsafe { datatype::reduce_out(recvbuf, count, datatype) }?
        } else {
            &mut []
        };
        // SAFETY: the caller's contract.
        let send = unsafe { contribution(sendbuf, recv, count, datatype) }?;
        st.device()?.reduce(id, root, &send, recv, fold)
    })
}

/// `MPI_Allreduce` with the predefined operations.
///
/// # Safety
/// `sendbuf` holds `count` elements of `datatype` (or is `MPI_IN_PLACE`); `recvbuf` has room
/// for them.
#[no_mangle]
pub unsafe extern "C" fn MPI_Allreduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: Handle,
    op: Handle,
    comm: Handle,
) -> c_int {
    call(comm, "MPI_Allreduce", |st| {
        let id = st.comm(comm)?;
        let fold = datatype::reduction(op, datatype)?;
        // SAFETY: the caller's contract.
        let recv = unsafe { datatype::reduce_out(recvbuf, count, datatype) }?;
        // SAFETY: the caller's contract.
        let send = unsafe { contribution(sendbuf, recv, count, datatype) }?;
        st.device()?.allreduce(id, &send, recv, fold)
    })
}

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
        let id = st.comm(comm)?;
        let (me, size) = {
            let dev = st.device()?;
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
            st.device()?.gather(id, root, &mine, &mut gathered)?;
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
        st.device()?.gather(id, root, send, recv)
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
        let id = st.comm(comm)?;
        let (me, size) = {
            let dev = st.device()?;
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
            st.device()?.allgather(id, &mine, &mut gathered)?;
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
        st.device()?.allgather(id, &send, recv)
    })
}

/// `n` counts (or displacements) of elements of `size` bytes from a C array, in bytes.
///
/// # Safety
/// `a` has `n` readable ints (or is null when `n` is 0).
unsafe fn scaled(a: *const c_int, n: usize, size: usize, what: &str) -> ch4::Result<Vec<usize>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    if a.is_null() {
        return Err(null_arg(what));
    }
    // SAFETY: the caller's contract.
    let ints = unsafe { std::slice::from_raw_parts(a, n) };
    ints.iter()
        .map(|&c| {
            usize::try_from(c)
                .map(|c| c * size)
                .map_err(|_| ch4::Error::new(ErrorKind::Count, format!("{what}: {c} is negative")))
        })
        .collect()
}

/// The byte span that `counts` blocks at `displs` cover (for a buffer's length).
fn span(counts: &[usize], displs: &[usize]) -> usize {
    counts
        .iter()
        .zip(displs)
        .map(|(c, d)| c + d)
        .max()
        .unwrap_or(0)
}

/// Rank and size of `id`.
fn rank_size(st: &State, id: ch4_core::CommId) -> ch4::Result<(c_int, usize)> {
    let dev = st.device()?;
    Ok((dev.rank(id)?, dev.size(id)? as usize))
}

fn type_size(dt: Handle) -> ch4::Result<usize> {
    datatype::size_of(dt).ok_or_else(|| datatype::bad_type(dt))
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
        let id = st.comm(comm)?;
        let (me, size) = rank_size(st, id)?;
        if me != root {
            // SAFETY: the caller's contract.
            let send = unsafe { send_bytes(sendbuf, sendcount, sendtype) }?;
            return st.device()?.gatherv(id, root, send, &mut [], &[], &[]);
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
        st.device()?.gatherv(id, root, &send, recv, &counts, &offs)
    })
}

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
        let id = st.comm(comm)?;
        let (me, size) = rank_size(st, id)?;
        if me != root {
            // SAFETY: the caller's contract.
            let recv = unsafe { recv_bytes(recvbuf, recvcount, recvtype) }?;
            return st.device()?.scatterv(id, root, &[], &[], &[], recv);
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
        st.device()?.scatterv(id, root, send, &counts, &offs, recv)
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
            let id = st.comm(comm)?;
            let (me, size) = rank_size(st, id)?;
            let block = packed_len(st, recvcount, recvtype)?;
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
            st.device()?
                .scatterv(id, root, &all, &counts, &displs, &mut mine)?;
            if recvbuf as usize == abi::IN_PLACE {
                return Ok(());
            }
            // SAFETY: the caller's contract.
            unsafe { unpack(st, recvbuf, recvcount, recvtype, &mine) }
        });
    }
    let n = state::with(|st| st.comm(comm).and_then(|id| rank_size(st, id)))
        .ok()
        .and_then(Result::ok)
        .map_or(0, |(_, n)| n);
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
        let id = st.comm(comm)?;
        let (me, size) = rank_size(st, id)?;
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
        st.device()?.allgatherv(id, &send, recv, &counts, &offs)
    })
}

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
        let id = st.comm(comm)?;
        let (_, size) = rank_size(st, id)?;
        let (rs, ss) = (type_size(recvtype)?, type_size(sendtype)?);
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
        st.device()?.alltoallv(id, send, &sc, &sd, recv, &rc, &rd)
    })
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
            let id = st.comm(comm)?;
            let (_, size) = rank_size(st, id)?;
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
            st.device()?
                .alltoallv(id, &out, &counts, &displs, &mut back, &counts, &displs)?;
            // SAFETY: the caller's contract.
            unsafe { unpack(st, recvbuf, all, recvtype, &back) }
        });
    }
    let n = state::with(|st| st.comm(comm).and_then(|id| rank_size(st, id)))
        .ok()
        .and_then(Result::ok)
        .map_or(0, |(_, n)| n);
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
        let id = st.comm(comm)?;
        let (_, size) = rank_size(st, id)?;
        let in_place = sendbuf as usize == abi::IN_PLACE;
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
        st.device()?.alltoallv(id, send, &sc, &sd, recv, &rc, &rd)
    })
}

/// `MPI_Reduce_scatter`: a reduction of the whole vector at rank 0, then a scatter of its
/// blocks.
///
/// # Safety
/// The buffers and `recvcounts` (one entry per member) are as MPI describes them.
#[no_mangle]
pub unsafe extern "C" fn MPI_Reduce_scatter(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    datatype: Handle,
    op: Handle,
    comm: Handle,
) -> c_int {
    call(comm, "MPI_Reduce_scatter", |st| {
        let id = st.comm(comm)?;
        let (me, size) = rank_size(st, id)?;
        let es = datatype::reduce_elem(datatype).ok_or_else(|| datatype::bad_type(datatype))?;
        let fold = datatype::reduction(op, datatype)?;
        // SAFETY: the caller's contract.
        let counts = unsafe { scaled(recvcounts, size, es, "recvcounts") }?;
        let total: usize = counts.iter().sum();
        let offs: Vec<usize> = counts
            .iter()
            .scan(0, |at, &c| {
                let d = *at;
                *at += c;
                Some(d)
            })
            .collect();
        let mine = counts[me as usize];
        // SAFETY: the caller's contract.
        let recv = unsafe {
            raw_mut(
                recvbuf,
                if sendbuf as usize == abi::IN_PLACE {
                    total
                } else {
                    mine
                },
            )
        }?;
        let owned;
        let send: &[u8] = if sendbuf as usize == abi::IN_PLACE {
            owned = recv.to_vec();
            &owned
        } else {
            // SAFETY: the caller's contract.
            unsafe { raw(sendbuf, total) }?
        };
        // The reduced vector, at rank 0 only, in a buffer the library keeps between calls
        // (a fresh one page-faults on every call).
        let mut whole = std::mem::take(&mut st.scratch);
        whole.resize(if me == 0 { total } else { 0 }, 0);
        let result = {
            let mut dev = st.device()?;
            dev.reduce(id, 0, send, &mut whole, fold)
                .and_then(|()| dev.scatterv(id, 0, &whole, &counts, &offs, &mut recv[..mine]))
        };
        st.scratch = whole;
        result
    })
}

// ------------------------------------------------------------------ not implemented yet

/// Exports functions the library declares but does not implement yet: each reports an error
/// of class `MPI_ERR_UNSUPPORTED_OPERATION` whose string names it, through
/// `MPI_COMM_WORLD`'s error handler. They take no parameters: on the C calling conventions of
/// the platforms ch4 builds for, the caller owns its arguments, so ignoring them is sound.
macro_rules! not_implemented {
    ($($name:ident),* $(,)?) => {$(
        #[doc = concat!("`", stringify!($name), "`: not implemented yet (fails, naming itself).")]
        #[no_mangle]
        pub extern "C" fn $name() -> c_int {
            errors::not_implemented(stringify!($name))
        }
    )*};
}

not_implemented!(
    MPI_Comm_create_from_group,
    MPI_Session_init,
    MPI_Session_finalize,
    MPI_Group_from_session_pset,
    MPI_Dist_graph_neighbors,
    MPI_Win_create,
    MPI_Win_allocate,
    MPI_Win_create_dynamic,
    MPI_Win_attach,
    MPI_Win_free,
);

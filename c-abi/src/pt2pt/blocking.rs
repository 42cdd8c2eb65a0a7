//! The blocking sends and receive: `MPI_Send`, `MPI_Ssend`, `MPI_Rsend` and `MPI_Recv`.
//!
//! `MPI_Send` and `MPI_Recv` are what a latency-bound program (osu_latency) calls, so they are
//! shaped for it: the body is an `#[inline(always)]` function rather than a closure handed to
//! `call`, so that the whole call compiles to one function with its arguments in registers,
//! and a predefined datatype's size is looked up once. A derived datatype, `MPI_DATATYPE_NULL`
//! and a failed receive's status leave through `#[inline(never)]` functions, off that path.
//! The three send modes share one body, the mode its argument.

use std::ffi::{c_int, c_void};

use ch4_core::{SendMode, Status};

use crate::abi::{self, rank_in, tag_in, Handle, MpiStatus};
use crate::call::finish_call;
use crate::datatype::{self, raw, raw_mut};
use crate::derived;
use crate::state::{self, State};

/// A blocking send in `mode`.
///
/// # Safety
/// `buf` holds `count` elements of `dt`.
#[inline(always)]
unsafe fn send_in(
    func: &'static str,
    mode: SendMode,
    buf: *const c_void,
    count: c_int,
    dt: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
) -> c_int {
    let mut st = match state::enter() {
        Ok(st) => st,
        Err(code) => return code,
    };
    // SAFETY: the caller's contract.
    let r = unsafe { send_body(&mut st, mode, buf, count, dt, dest, tag, comm) };
    finish_call(&mut st, comm, func, r)
}

/// # Safety
/// As [`send_in`].
#[inline(always)]
unsafe fn send_body(
    st: &mut State,
    mode: SendMode,
    buf: *const c_void,
    count: c_int,
    dt: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
) -> ch4::Result<()> {
    let id = st.comm(comm)?;
    let Some(size) = datatype::size_of(dt) else {
        // SAFETY: the caller's contract.
        return unsafe { send_other(st, id, mode, buf, count, dt, dest, tag) };
    };
    // SAFETY: the caller's contract; the send completes before this returns.
    let bytes = unsafe { raw(buf, datatype::elements(count)? * size) }?;
    st.device()?
        .send(id, rank_in(dest), tag_in(tag), bytes, mode)
}

/// A blocking send of a derived datatype, or of nothing of `MPI_DATATYPE_NULL`.
///
/// # Safety
/// As [`send_in`].
#[inline(never)]
#[allow(clippy::too_many_arguments)]
unsafe fn send_other(
    st: &mut State,
    id: ch4_core::CommId,
    mode: SendMode,
    buf: *const c_void,
    count: c_int,
    dt: Handle,
    dest: c_int,
    tag: c_int,
) -> ch4::Result<()> {
    if count == 0 && dt == abi::DATATYPE_NULL {
        return st.device()?.send(id, rank_in(dest), tag_in(tag), &[], mode);
    }
    // SAFETY: the caller's contract; the send completes before this returns.
    let b = unsafe { derived::send_buf(st, buf.cast(), count, dt) }?;
    let mut dev = st.device()?;
    let h = dev.isend(id, rank_in(dest), tag_in(tag), b, mode)?;
    dev.wait(h).map(drop)
}

/// `MPI_Send`.
///
/// # Safety
/// `buf` holds `count` elements of `datatype`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Send(
    buf: *const c_void,
    count: c_int,
    datatype: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        send_in(
            "MPI_Send",
            SendMode::Standard,
            buf,
            count,
            datatype,
            dest,
            tag,
            comm,
        )
    }
}

/// `MPI_Ssend`.
///
/// # Safety
/// `buf` holds `count` elements of `datatype`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Ssend(
    buf: *const c_void,
    count: c_int,
    datatype: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        send_in(
            "MPI_Ssend",
            SendMode::Synchronous,
            buf,
            count,
            datatype,
            dest,
            tag,
            comm,
        )
    }
}

/// `MPI_Rsend`.
///
/// # Safety
/// `buf` holds `count` elements of `datatype`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Rsend(
    buf: *const c_void,
    count: c_int,
    datatype: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        send_in(
            "MPI_Rsend",
            SendMode::Ready,
            buf,
            count,
            datatype,
            dest,
            tag,
            comm,
        )
    }
}

/// `MPI_Recv`: a truncated message fills the buffer, sets the status and fails with
/// `MPI_ERR_TRUNCATE`.
///
/// # Safety
/// `buf` has room for `count` elements of `datatype`; `status` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Recv(
    buf: *mut c_void,
    count: c_int,
    datatype: Handle,
    source: c_int,
    tag: c_int,
    comm: Handle,
    status: *mut MpiStatus,
) -> c_int {
    let mut st = match state::enter() {
        Ok(st) => st,
        Err(code) => return code,
    };
    // SAFETY: the caller's contract.
    let r = unsafe { recv_body(&mut st, buf, count, datatype, source, tag, comm, status) };
    finish_call(&mut st, comm, "MPI_Recv", r)
}

/// # Safety
/// As `MPI_Recv`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn recv_body(
    st: &mut State,
    buf: *mut c_void,
    count: c_int,
    datatype: Handle,
    source: c_int,
    tag: c_int,
    comm: Handle,
    status: *mut MpiStatus,
) -> ch4::Result<()> {
    let id = st.comm(comm)?;
    let Some(size) = datatype::size_of(datatype) else {
        // SAFETY: the caller's contract.
        return unsafe { recv_other(st, id, buf, count, datatype, source, tag, status) };
    };
    // SAFETY: the caller's contract; the receive completes before this returns.
    let bytes = unsafe { raw_mut(buf, datatype::elements(count)? * size) }?;
    let got = st.device()?.recv(id, rank_in(source), tag_in(tag), bytes);
    // SAFETY: the caller's contract.
    unsafe { recv_done(got, status) }
}

/// `MPI_Recv` of a derived datatype, or of nothing of `MPI_DATATYPE_NULL`.
///
/// # Safety
/// As `MPI_Recv`.
#[inline(never)]
#[allow(clippy::too_many_arguments)]
unsafe fn recv_other(
    st: &mut State,
    id: ch4_core::CommId,
    buf: *mut c_void,
    count: c_int,
    datatype: Handle,
    source: c_int,
    tag: c_int,
    status: *mut MpiStatus,
) -> ch4::Result<()> {
    let got = if count == 0 && datatype == abi::DATATYPE_NULL {
        st.device()?.recv(id, rank_in(source), tag_in(tag), &mut [])
    } else {
        // SAFETY: the caller's contract; the receive completes before this returns.
        let b = unsafe { derived::recv_buf(st, buf.cast(), count, datatype) }?;
        let mut dev = st.device()?;
        let h = dev.irecv(id, rank_in(source), tag_in(tag), b)?;
        dev.wait(h)
    };
    // SAFETY: the caller's contract.
    unsafe { recv_done(got, status) }
}

/// Ends a blocking receive: the status goes out, also with an error that has one (a truncated
/// message).
///
/// # Safety
/// `status` is null or writable.
#[inline(always)]
unsafe fn recv_done(got: ch4::Result<Status>, status: *mut MpiStatus) -> ch4::Result<()> {
    match got {
        Ok(s) => {
            // SAFETY: the caller's contract.
            unsafe { MpiStatus::put(status, &s) };
            Ok(())
        }
        // SAFETY: the caller's contract.
        Err(e) => unsafe { recv_failed(e, status) },
    }
}

/// A failed receive: its status, if the error carries one, still goes out.
///
/// # Safety
/// `status` is null or writable.
#[cold]
#[inline(never)]
unsafe fn recv_failed(e: ch4::Error, status: *mut MpiStatus) -> ch4::Result<()> {
    if let Some(s) = e.status() {
        // SAFETY: the caller's contract.
        unsafe { MpiStatus::put(status, s) };
    }
    Err(e)
}

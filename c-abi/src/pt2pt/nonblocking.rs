//! The nonblocking sends and receive: `MPI_Isend`, `MPI_Issend`, `MPI_Irsend` and `MPI_Irecv`.
//!
//! Each posts its operation and returns the request's handle (the device's handle with its top
//! bit set, `abi`); completing it is `requests`' work. `MPI_Isend` and `MPI_Irecv` are shaped
//! as the blocking calls are — an `#[inline(always)]` body instead of a closure, with the
//! device's own isend and irecv inlined (`isend_inline`, `irecv_inline`) — so that a round of
//! `MPI_Irecv`, `MPI_Isend` and two `MPI_Wait`s costs little more than the device's calls.

use std::ffi::{c_int, c_void};

use ch4_core::SendMode;

use crate::abi::{rank_in, request_out, tag_in, Handle};
use crate::buffers::{rbuf, sbuf};
use crate::call::{call, hot_call, null_arg, on_device_at};
use crate::state::{DevReq, State};
use ch4_core::blocking::Blocking;

/// A nonblocking send in `mode`.
///
/// # Safety
/// `buf` holds `count` elements of `dt` until the request completes; `request` is writable.
#[inline(always)]
unsafe fn isend_in(
    func: &'static str,
    mode: SendMode,
    buf: *const c_void,
    count: c_int,
    dt: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        hot_call!(
            func,
            comm,
            isend_body(mode, buf, count, dt, dest, tag, comm, request)
        )
    }
}

/// # Safety
/// As [`isend_in`].
#[inline(always)]
unsafe fn isend_body<const MT: bool>(
    st: &State,
    mode: SendMode,
    buf: *const c_void,
    count: c_int,
    dt: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> ch4::Result<()> {
    if request.is_null() {
        return Err(null_arg("the request"));
    }
    let c = st.comm_at::<MT>(comm)?;
    let id = c.id;
    // SAFETY: the caller's contract: the buffer stays valid and unwritten until the request
    // completes (MPI's rule), which is what a borrowed SendBuf asks.
    let sbuf = unsafe { sbuf(st, buf, count, dt) }?;
    let (dest, tag) = (rank_in(dest), tag_in(tag));
    let h = on_device_at!(MT, st, c.vci, |b| b
        .visit(|d| d.isend_inline(id, dest, tag, sbuf, mode)))?;
    let vci = if MT { c.vci } else { 0 };
    // SAFETY: checked non-null; the caller's contract.
    unsafe { request.write(request_out(DevReq::new(h, vci))) };
    Ok(())
}

/// `MPI_Isend`.
///
/// # Safety
/// `buf` holds `count` elements of `datatype` until the request completes.
#[no_mangle]
pub unsafe extern "C" fn MPI_Isend(
    buf: *const c_void,
    count: c_int,
    datatype: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        isend_in(
            "MPI_Isend",
            SendMode::Standard,
            buf,
            count,
            datatype,
            dest,
            tag,
            comm,
            request,
        )
    }
}

/// `MPI_Issend`.
///
/// # Safety
/// `buf` holds `count` elements of `datatype` until the request completes.
#[no_mangle]
pub unsafe extern "C" fn MPI_Issend(
    buf: *const c_void,
    count: c_int,
    datatype: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        isend_in(
            "MPI_Issend",
            SendMode::Synchronous,
            buf,
            count,
            datatype,
            dest,
            tag,
            comm,
            request,
        )
    }
}

/// `MPI_Irsend`.
///
/// # Safety
/// `buf` holds `count` elements of `datatype` until the request completes.
#[no_mangle]
pub unsafe extern "C" fn MPI_Irsend(
    buf: *const c_void,
    count: c_int,
    datatype: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        isend_in(
            "MPI_Irsend",
            SendMode::Ready,
            buf,
            count,
            datatype,
            dest,
            tag,
            comm,
            request,
        )
    }
}

/// `MPI_Irecv`.
///
/// # Safety
/// `buf` has room for `count` elements of `datatype` and is not touched until the request
/// completes; `request` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Irecv(
    buf: *mut c_void,
    count: c_int,
    datatype: Handle,
    source: c_int,
    tag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        hot_call!(
            "MPI_Irecv",
            comm,
            irecv_body(buf, count, datatype, source, tag, comm, request)
        )
    }
}

/// # Safety
/// As `MPI_Irecv`.
#[inline(always)]
unsafe fn irecv_body<const MT: bool>(
    st: &State,
    buf: *mut c_void,
    count: c_int,
    datatype: Handle,
    source: c_int,
    tag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> ch4::Result<()> {
    if request.is_null() {
        return Err(null_arg("the request"));
    }
    let c = st.comm_at::<MT>(comm)?;
    let id = c.id;
    // SAFETY: the caller's contract: the buffer is the request's alone until it completes.
    let rbuf = unsafe { rbuf(st, buf, count, datatype) }?;
    let (source, tag) = (rank_in(source), tag_in(tag));
    let h = on_device_at!(MT, st, c.vci, |b| b
        .visit(|d| d.irecv_inline(id, source, tag, rbuf)))?;
    let vci = if MT { c.vci } else { 0 };
    // SAFETY: checked non-null; the caller's contract.
    unsafe { request.write(request_out(DevReq::new(h, vci))) };
    Ok(())
}

// ------------------------------------------------------------------ the `_c` forms

/// A nonblocking send of an `MPI_Count` of elements (`MPI_Isend_c` and its modes), off the
/// int forms' path, which stays as it is.
///
/// # Safety
/// `buf` holds `count` elements of `dt` until the request completes; `request` is writable.
unsafe fn isend_big(
    func: &'static str,
    mode: SendMode,
    buf: *const c_void,
    count: i64,
    dt: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    call(comm, func, |st| {
        if request.is_null() {
            return Err(null_arg("the request"));
        }
        let c = st.comm(comm)?;
        // SAFETY: the caller's contract: the buffer stays valid and unwritten until the
        // request completes.
        let sb = unsafe { crate::buffers::sbuf_big(st, buf, count, dt) }?;
        let h = st
            .device(c.vci)?
            .isend(c.id, rank_in(dest), tag_in(tag), sb, mode)?;
        // SAFETY: checked non-null; the caller's contract.
        unsafe { request.write(request_out(DevReq::new(h, c.vci))) };
        Ok(())
    })
}

macro_rules! isend_c {
    ($name:ident, $mode:expr) => {
        #[doc = concat!("`", stringify!($name), "`: the nonblocking send of an `MPI_Count` of elements.")]
        ///
        /// # Safety
        /// `buf` holds `count` elements of `datatype` until the request completes; `request`
        /// is writable.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            buf: *const c_void,
            count: i64,
            datatype: Handle,
            dest: c_int,
            tag: c_int,
            comm: Handle,
            request: *mut Handle,
        ) -> c_int {
            // SAFETY: the caller's contract.
            unsafe {
                isend_big(
                    stringify!($name),
                    $mode,
                    buf,
                    count,
                    datatype,
                    dest,
                    tag,
                    comm,
                    request,
                )
            }
        }
    };
}

isend_c!(MPI_Isend_c, SendMode::Standard);
isend_c!(MPI_Issend_c, SendMode::Synchronous);
isend_c!(MPI_Irsend_c, SendMode::Ready);

/// `MPI_Irecv_c`: `MPI_Irecv` of an `MPI_Count` of elements.
///
/// # Safety
/// `buf` has room for `count` elements of `datatype` and is not touched until the request
/// completes; `request` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Irecv_c(
    buf: *mut c_void,
    count: i64,
    datatype: Handle,
    source: c_int,
    tag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    call(comm, "MPI_Irecv_c", |st| {
        if request.is_null() {
            return Err(null_arg("the request"));
        }
        let c = st.comm(comm)?;
        // SAFETY: the caller's contract: the buffer is the request's alone until it completes.
        let rb = unsafe { crate::buffers::rbuf_big(st, buf, count, datatype) }?;
        let h = st
            .device(c.vci)?
            .irecv(c.id, rank_in(source), tag_in(tag), rb)?;
        // SAFETY: checked non-null; the caller's contract.
        unsafe { request.write(request_out(DevReq::new(h, c.vci))) };
        Ok(())
    })
}

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
use crate::call::{call, hot_call, on_device, on_device_at};
use crate::datatype::{self, raw, raw_mut};
use crate::derived;
use crate::state::{CommRef, State};
use ch4_core::blocking::Blocking;

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
    // SAFETY: the caller's contract.
    unsafe { hot_call!(func, comm, send_body(mode, buf, count, dt, dest, tag, comm)) }
}

/// # Safety
/// As [`send_in`].
#[inline(always)]
unsafe fn send_body<const MT: bool>(
    st: &State,
    mode: SendMode,
    buf: *const c_void,
    count: c_int,
    dt: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
) -> ch4::Result<()> {
    let c = st.comm_at::<MT>(comm)?;
    let Some(size) = datatype::size_of(dt) else {
        // SAFETY: the caller's contract.
        return unsafe { send_other::<MT>(st, c, mode, buf, count, dt, dest, tag) };
    };
    // SAFETY: the caller's contract; the send completes before this returns.
    let bytes = unsafe { raw(buf, datatype::elements(count)? * size) }?;
    on_device_at!(MT, st, c.vci, |b| Blocking::send_on(
        b,
        c.id,
        rank_in(dest),
        tag_in(tag),
        bytes,
        mode,
        false
    ))
}

/// A blocking send of a derived datatype, or of nothing of `MPI_DATATYPE_NULL`.
///
/// # Safety
/// As [`send_in`].
#[inline(never)]
#[allow(clippy::too_many_arguments)]
unsafe fn send_other<const MT: bool>(
    st: &State,
    c: CommRef,
    mode: SendMode,
    buf: *const c_void,
    count: c_int,
    dt: Handle,
    dest: c_int,
    tag: c_int,
) -> ch4::Result<()> {
    let (dest, tag) = (rank_in(dest), tag_in(tag));
    if count == 0 && dt == abi::DATATYPE_NULL {
        return on_device_at!(MT, st, c.vci, |b| Blocking::send_on(
            b,
            c.id,
            dest,
            tag,
            &[],
            mode,
            false
        ));
    }
    // SAFETY: the caller's contract; the send completes before this returns.
    let sb = unsafe { derived::send_buf(st, buf.cast(), count, dt) }?;
    on_device_at!(MT, st, c.vci, |b| {
        let h = b.visit(|d| d.isend(c.id, dest, tag, sb, mode))?;
        Blocking::wait_or_abandon(b, h).map(drop)
    })
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
    // SAFETY: the caller's contract.
    unsafe {
        hot_call!(
            "MPI_Recv",
            comm,
            recv_body(buf, count, datatype, source, tag, comm, status)
        )
    }
}

/// # Safety
/// As `MPI_Recv`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn recv_body<const MT: bool>(
    st: &State,
    buf: *mut c_void,
    count: c_int,
    datatype: Handle,
    source: c_int,
    tag: c_int,
    comm: Handle,
    status: *mut MpiStatus,
) -> ch4::Result<()> {
    let c = st.comm_at::<MT>(comm)?;
    let Some(size) = datatype::size_of(datatype) else {
        // SAFETY: the caller's contract.
        return unsafe { recv_other::<MT>(st, c, buf, count, datatype, source, tag, status) };
    };
    // SAFETY: the caller's contract; the receive completes before this returns.
    let bytes = unsafe { raw_mut(buf, datatype::elements(count)? * size) }?;
    let got = on_device_at!(MT, st, c.vci, |b| Ok::<_, ch4::Error>(Blocking::recv_on(
        b,
        c.id,
        rank_in(source),
        tag_in(tag),
        bytes,
        false
    )))?;
    // SAFETY: the caller's contract.
    unsafe { recv_done(got, status) }
}

/// `MPI_Recv` of a derived datatype, or of nothing of `MPI_DATATYPE_NULL`.
///
/// # Safety
/// As `MPI_Recv`.
#[inline(never)]
#[allow(clippy::too_many_arguments)]
unsafe fn recv_other<const MT: bool>(
    st: &State,
    c: CommRef,
    buf: *mut c_void,
    count: c_int,
    datatype: Handle,
    source: c_int,
    tag: c_int,
    status: *mut MpiStatus,
) -> ch4::Result<()> {
    let (source, tag) = (rank_in(source), tag_in(tag));
    let got = if count == 0 && datatype == abi::DATATYPE_NULL {
        on_device_at!(MT, st, c.vci, |b| Ok::<_, ch4::Error>(Blocking::recv_on(
            b,
            c.id,
            source,
            tag,
            &mut [],
            false
        )))?
    } else {
        // SAFETY: the caller's contract; the receive completes before this returns.
        let rb = unsafe { derived::recv_buf(st, buf.cast(), count, datatype) }?;
        on_device_at!(MT, st, c.vci, |b| {
            let h = b.visit(|d| d.irecv(c.id, source, tag, rb))?;
            Ok::<_, ch4::Error>(Blocking::wait_or_abandon(b, h))
        })?
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

// ------------------------------------------------------------------ the `_c` forms

/// A blocking send of an `MPI_Count` of elements (`MPI_Send_c` and its modes): the device's
/// nonblocking send and its wait, off the int forms' path, which stays as it is.
///
/// # Safety
/// `buf` holds `count` elements of `dt`.
unsafe fn send_big(
    func: &'static str,
    mode: SendMode,
    buf: *const c_void,
    count: i64,
    dt: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
) -> c_int {
    call(comm, func, |st| {
        let c = st.comm(comm)?;
        // SAFETY: the caller's contract; the send completes before this returns.
        let sb = unsafe { crate::buffers::sbuf_big(st, buf, count, dt) }?;
        let (dest, tag) = (rank_in(dest), tag_in(tag));
        on_device!(st, c.vci, |b| {
            let h = b.visit(|d| d.isend(c.id, dest, tag, sb, mode))?;
            Blocking::wait_or_abandon(b, h).map(drop)
        })
    })
}

macro_rules! send_c {
    ($name:ident, $mode:expr) => {
        #[doc = concat!("`", stringify!($name), "`: the send of an `MPI_Count` of elements.")]
        ///
        /// # Safety
        /// `buf` holds `count` elements of `datatype`.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            buf: *const c_void,
            count: i64,
            datatype: Handle,
            dest: c_int,
            tag: c_int,
            comm: Handle,
        ) -> c_int {
            // SAFETY: the caller's contract.
            unsafe {
                send_big(
                    stringify!($name),
                    $mode,
                    buf,
                    count,
                    datatype,
                    dest,
                    tag,
                    comm,
                )
            }
        }
    };
}

send_c!(MPI_Send_c, SendMode::Standard);
send_c!(MPI_Ssend_c, SendMode::Synchronous);
send_c!(MPI_Rsend_c, SendMode::Ready);

/// `MPI_Recv_c`: `MPI_Recv` of an `MPI_Count` of elements.
///
/// # Safety
/// `buf` has room for `count` elements of `datatype`; `status` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Recv_c(
    buf: *mut c_void,
    count: i64,
    datatype: Handle,
    source: c_int,
    tag: c_int,
    comm: Handle,
    status: *mut MpiStatus,
) -> c_int {
    call(comm, "MPI_Recv_c", |st| {
        let c = st.comm(comm)?;
        // SAFETY: the caller's contract; the receive completes before this returns.
        let rb = unsafe { crate::buffers::rbuf_big(st, buf, count, datatype) }?;
        let (source, tag) = (rank_in(source), tag_in(tag));
        let got = on_device!(st, c.vci, |b| {
            let h = b.visit(|d| d.irecv(c.id, source, tag, rb))?;
            Ok::<_, ch4::Error>(Blocking::wait_or_abandon(b, h))
        })?;
        // SAFETY: the caller's contract.
        unsafe { recv_done(got, status) }
    })
}

//! Send-receive, the standard's "Send-Receive": `MPI_Sendrecv`, `MPI_Isendrecv`,
//! `MPI_Sendrecv_replace` and `MPI_Isendrecv_replace`.
//!
//! Each posts its receive before its send, so two processes exchanging with each other do not
//! both wait in a send. The nonblocking and `_replace` forms send from a copy of the data, so
//! that the send buffer (or the buffer the receive then fills) is free at once and the call's
//! request is its receive's.

use std::ffi::{c_int, c_void};

use ch4_core::buffer::{RecvBuf, SendBuf};
use ch4_core::{SendMode, Status};

use crate::abi::{self, rank_in, tag_in, Handle, MpiStatus};
use crate::buffers::{rbuf, rbuf_big, sbuf, sbuf_big};
use crate::call::{call, null_arg, on_device};
use crate::requests::status_error;
use crate::state::{CommRef, DevReq, State};
use ch4_core::blocking::Blocking;

/// `MPI_Sendrecv`.
///
/// # Safety
/// The buffers hold (have room for) their counts of their datatypes; `status` is null or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Sendrecv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: Handle,
    dest: c_int,
    sendtag: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: Handle,
    source: c_int,
    recvtag: c_int,
    comm: Handle,
    status: *mut MpiStatus,
) -> c_int {
    call(comm, "MPI_Sendrecv", |st| {
        // SAFETY: the caller's contract; both complete before this returns.
        let (sb, rb) = unsafe {
            (
                sbuf(st, sendbuf, sendcount, sendtype)?,
                rbuf(st, recvbuf, recvcount, recvtype)?,
            )
        };
        // SAFETY: the caller's contract.
        unsafe { sendrecv(st, comm, sb, dest, sendtag, rb, source, recvtag, status) }
    })
}

/// `MPI_Sendrecv_c`: `MPI_Sendrecv` of `MPI_Count`s of elements.
///
/// # Safety
/// As `MPI_Sendrecv`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Sendrecv_c(
    sendbuf: *const c_void,
    sendcount: i64,
    sendtype: Handle,
    dest: c_int,
    sendtag: c_int,
    recvbuf: *mut c_void,
    recvcount: i64,
    recvtype: Handle,
    source: c_int,
    recvtag: c_int,
    comm: Handle,
    status: *mut MpiStatus,
) -> c_int {
    call(comm, "MPI_Sendrecv_c", |st| {
        // SAFETY: the caller's contract; both complete before this returns.
        let (sb, rb) = unsafe {
            (
                sbuf_big(st, sendbuf, sendcount, sendtype)?,
                rbuf_big(st, recvbuf, recvcount, recvtype)?,
            )
        };
        // SAFETY: the caller's contract.
        unsafe { sendrecv(st, comm, sb, dest, sendtag, rb, source, recvtag, status) }
    })
}

/// The body of `MPI_Sendrecv` over buffers made from either form's counts.
///
/// # Safety
/// `status` is null or writable.
unsafe fn sendrecv(
    st: &State,
    comm: Handle,
    sb: SendBuf,
    dest: c_int,
    sendtag: c_int,
    rb: RecvBuf,
    source: c_int,
    recvtag: c_int,
    status: *mut MpiStatus,
) -> ch4::Result<()> {
    let c = st.comm(comm)?;
    let s = exchange(st, c, sb, dest, sendtag, rb, source, recvtag)?;
    status_error(&s)?;
    // SAFETY: the caller's contract.
    unsafe { MpiStatus::put(status, &s) };
    Ok(())
}

/// A send-receive: the receive posted first, then the send, each completed before this
/// returns; the receive's status, an error in it as a value.
#[allow(clippy::too_many_arguments)]
fn exchange(
    st: &State,
    c: CommRef,
    sb: SendBuf,
    dest: c_int,
    sendtag: c_int,
    rb: RecvBuf,
    source: c_int,
    recvtag: c_int,
) -> ch4::Result<Status> {
    let (source, recvtag, dest, sendtag) = (
        rank_in(source),
        tag_in(recvtag),
        rank_in(dest),
        tag_in(sendtag),
    );
    on_device!(st, c.vci, |b| {
        let r = b.visit(|d| d.irecv(c.id, source, recvtag, rb))?;
        let sent = b
            .visit(|d| d.isend(c.id, dest, sendtag, sb, SendMode::Standard))
            .and_then(|h| Blocking::wait_or_abandon(b, h));
        let got = b.wait_status(r);
        sent?;
        got
    })
}

/// Starts the send half of a send-receive from a copy of the data, left to complete in the
/// background: a standard-mode send may buffer its message, and with the copy the caller's
/// send buffer (or, for `_replace`, the buffer the receive then fills) is free at once, so the
/// send-receive's request is its receive's.
fn send_copy(st: &State, data: Vec<u8>, dest: c_int, tag: c_int, comm: Handle) -> ch4::Result<()> {
    let c = st.comm(comm)?;
    let id = c.id;
    let h = st.device(c.vci)?.isend(
        id,
        rank_in(dest),
        tag_in(tag),
        SendBuf::owned(data),
        SendMode::Standard,
    )?;
    st.detach(DevReq::new(h, c.vci));
    Ok(())
}

/// `MPI_Isendrecv`.
///
/// # Safety
/// The buffers hold (have room for) their counts of their datatypes; the receive buffer is
/// the request's until it completes; `request` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Isendrecv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: Handle,
    dest: c_int,
    sendtag: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: Handle,
    source: c_int,
    recvtag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    call(comm, "MPI_Isendrecv", |st| {
        // SAFETY: the caller's contract: the receive buffer is the request's alone; the data
        // is copied before this returns.
        let (rb, data) = unsafe {
            (
                rbuf(st, recvbuf, recvcount, recvtype)?,
                sbuf(st, sendbuf, sendcount, sendtype)?.to_vec()?,
            )
        };
        // SAFETY: the caller's contract.
        unsafe { isendrecv(st, comm, data, dest, sendtag, rb, source, recvtag, request) }
    })
}

/// `MPI_Isendrecv_c`: `MPI_Isendrecv` of `MPI_Count`s of elements.
///
/// # Safety
/// As `MPI_Isendrecv`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Isendrecv_c(
    sendbuf: *const c_void,
    sendcount: i64,
    sendtype: Handle,
    dest: c_int,
    sendtag: c_int,
    recvbuf: *mut c_void,
    recvcount: i64,
    recvtype: Handle,
    source: c_int,
    recvtag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    call(comm, "MPI_Isendrecv_c", |st| {
        // SAFETY: as in `MPI_Isendrecv`.
        let (rb, data) = unsafe {
            (
                rbuf_big(st, recvbuf, recvcount, recvtype)?,
                sbuf_big(st, sendbuf, sendcount, sendtype)?.to_vec()?,
            )
        };
        // SAFETY: the caller's contract.
        unsafe { isendrecv(st, comm, data, dest, sendtag, rb, source, recvtag, request) }
    })
}

/// The body of the nonblocking send-receives: the receive into `rb` is the request; the send
/// of `data` (a copy) completes in the background.
///
/// # Safety
/// `request` is null or writable.
unsafe fn isendrecv(
    st: &State,
    comm: Handle,
    data: Vec<u8>,
    dest: c_int,
    sendtag: c_int,
    rb: RecvBuf,
    source: c_int,
    recvtag: c_int,
    request: *mut Handle,
) -> ch4::Result<()> {
    if request.is_null() {
        return Err(null_arg("the request"));
    }
    let c = st.comm(comm)?;
    let h = st
        .device(c.vci)?
        .irecv(c.id, rank_in(source), tag_in(recvtag), rb)?;
    send_copy(st, data, dest, sendtag, comm)?;
    // SAFETY: checked non-null.
    unsafe { request.write(abi::request_out(DevReq::new(h, c.vci))) };
    Ok(())
}

/// `MPI_Sendrecv_replace`.
///
/// # Safety
/// `buf` holds `count` elements of `datatype`; `status` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Sendrecv_replace(
    buf: *mut c_void,
    count: c_int,
    datatype: Handle,
    dest: c_int,
    sendtag: c_int,
    source: c_int,
    recvtag: c_int,
    comm: Handle,
    status: *mut MpiStatus,
) -> c_int {
    call(comm, "MPI_Sendrecv_replace", |st| {
        // SAFETY: the caller's contract; the data is copied before the receive fills `buf`,
        // which completes before this returns.
        let (data, rb) = unsafe {
            (
                sbuf(st, buf, count, datatype)?.to_vec()?,
                rbuf(st, buf, count, datatype)?,
            )
        };
        // SAFETY: the caller's contract.
        unsafe { sendrecv_replace(st, comm, data, dest, sendtag, rb, source, recvtag, status) }
    })
}

/// `MPI_Sendrecv_replace_c`: `MPI_Sendrecv_replace` of an `MPI_Count` of elements.
///
/// # Safety
/// As `MPI_Sendrecv_replace`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Sendrecv_replace_c(
    buf: *mut c_void,
    count: i64,
    datatype: Handle,
    dest: c_int,
    sendtag: c_int,
    source: c_int,
    recvtag: c_int,
    comm: Handle,
    status: *mut MpiStatus,
) -> c_int {
    call(comm, "MPI_Sendrecv_replace_c", |st| {
        // SAFETY: as in `MPI_Sendrecv_replace`.
        let (data, rb) = unsafe {
            (
                sbuf_big(st, buf, count, datatype)?.to_vec()?,
                rbuf_big(st, buf, count, datatype)?,
            )
        };
        // SAFETY: the caller's contract.
        unsafe { sendrecv_replace(st, comm, data, dest, sendtag, rb, source, recvtag, status) }
    })
}

/// The body of `MPI_Sendrecv_replace`: the copy `data` goes out, the buffer behind `rb`
/// takes the message in.
///
/// # Safety
/// `status` is null or writable.
unsafe fn sendrecv_replace(
    st: &State,
    comm: Handle,
    data: Vec<u8>,
    dest: c_int,
    sendtag: c_int,
    rb: RecvBuf,
    source: c_int,
    recvtag: c_int,
    status: *mut MpiStatus,
) -> ch4::Result<()> {
    let c = st.comm(comm)?;
    let s = exchange(
        st,
        c,
        SendBuf::owned(data),
        dest,
        sendtag,
        rb,
        source,
        recvtag,
    )?;
    // SAFETY: the caller's contract.
    unsafe { MpiStatus::put(status, &s) };
    status_error(&s)
}

/// `MPI_Isendrecv_replace`.
///
/// # Safety
/// `buf` holds `count` elements of `datatype` and is the request's until it completes;
/// `request` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Isendrecv_replace(
    buf: *mut c_void,
    count: c_int,
    datatype: Handle,
    dest: c_int,
    sendtag: c_int,
    source: c_int,
    recvtag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    call(comm, "MPI_Isendrecv_replace", |st| {
        // SAFETY: the caller's contract; the data is copied before the receive can fill
        // `buf`, which is the request's alone from now on.
        let (data, rb) = unsafe {
            (
                sbuf(st, buf, count, datatype)?.to_vec()?,
                rbuf(st, buf, count, datatype)?,
            )
        };
        // SAFETY: the caller's contract.
        unsafe { isendrecv(st, comm, data, dest, sendtag, rb, source, recvtag, request) }
    })
}

/// `MPI_Isendrecv_replace_c`: `MPI_Isendrecv_replace` of an `MPI_Count` of elements.
///
/// # Safety
/// As `MPI_Isendrecv_replace`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Isendrecv_replace_c(
    buf: *mut c_void,
    count: i64,
    datatype: Handle,
    dest: c_int,
    sendtag: c_int,
    source: c_int,
    recvtag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    call(comm, "MPI_Isendrecv_replace_c", |st| {
        // SAFETY: as in `MPI_Isendrecv_replace`.
        let (data, rb) = unsafe {
            (
                sbuf_big(st, buf, count, datatype)?.to_vec()?,
                rbuf_big(st, buf, count, datatype)?,
            )
        };
        // SAFETY: the caller's contract.
        unsafe { isendrecv(st, comm, data, dest, sendtag, rb, source, recvtag, request) }
    })
}

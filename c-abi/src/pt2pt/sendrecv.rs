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
use crate::buffers::{rbuf, sbuf};
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
        let c = st.comm(comm)?;
        // SAFETY: the caller's contract; both complete before this returns.
        let (sb, rb) = unsafe {
            (
                sbuf(st, sendbuf, sendcount, sendtype)?,
                rbuf(st, recvbuf, recvcount, recvtype)?,
            )
        };
        let s = exchange(st, c, sb, dest, sendtag, rb, source, recvtag)?;
        status_error(&s)?;
        // SAFETY: the caller's contract.
        unsafe { MpiStatus::put(status, &s) };
        Ok(())
    })
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
        if request.is_null() {
            return Err(null_arg("the request"));
        }
        let c = st.comm(comm)?;
        let id = c.id;
        // SAFETY: the caller's contract: the receive buffer is the request's alone.
        let rb = unsafe { crate::buffers::rbuf(st, recvbuf, recvcount, recvtype) }?;
        // SAFETY: the caller's contract; the data is copied before this returns.
        let data = unsafe { crate::buffers::sbuf(st, sendbuf, sendcount, sendtype) }?.to_vec()?;
        let h = st
            .device(c.vci)?
            .irecv(id, rank_in(source), tag_in(recvtag), rb)?;
        send_copy(st, data, dest, sendtag, comm)?;
        // SAFETY: checked non-null.
        unsafe { request.write(abi::request_out(DevReq::new(h, c.vci))) };
        Ok(())
    })
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
        let c = st.comm(comm)?;
        // SAFETY: the caller's contract; the data is copied before the receive fills `buf`.
        let data = unsafe { crate::buffers::sbuf(st, buf, count, datatype) }?.to_vec()?;
        // SAFETY: the caller's contract; the receive completes before this returns.
        let rb = unsafe { crate::buffers::rbuf(st, buf, count, datatype) }?;
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
    })
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
        if request.is_null() {
            return Err(null_arg("the request"));
        }
        let c = st.comm(comm)?;
        let id = c.id;
        // SAFETY: the caller's contract; the data is copied before the receive can fill `buf`.
        let data = unsafe { crate::buffers::sbuf(st, buf, count, datatype) }?.to_vec()?;
        // SAFETY: the caller's contract: the buffer is the request's alone from now on.
        let rb = unsafe { crate::buffers::rbuf(st, buf, count, datatype) }?;
        let h = st
            .device(c.vci)?
            .irecv(id, rank_in(source), tag_in(recvtag), rb)?;
        send_copy(st, data, dest, sendtag, comm)?;
        // SAFETY: checked non-null.
        unsafe { request.write(abi::request_out(DevReq::new(h, c.vci))) };
        Ok(())
    })
}

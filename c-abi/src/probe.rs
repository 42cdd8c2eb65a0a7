//! Probes and cancel, the standard's "Probe and Cancel" (chapter "Point-to-Point
//! Communication"): `MPI_Probe`, `MPI_Iprobe`, the matched probes `MPI_Mprobe` and
//! `MPI_Improbe` with their receives `MPI_Mrecv` and `MPI_Imrecv`, `MPI_Cancel` and
//! `MPI_Test_cancelled`.
//!
//! A matched probe takes its message out of matching, so the library keeps the device's
//! `Message` in a table of its own until the program receives it; the message handle is that
//! table's index, in a range no request or predefined handle uses (`abi::message_out`).
//! `MPI_MESSAGE_NO_PROC` stands for a probe of `MPI_PROC_NULL`.

use std::ffi::{c_int, c_void};

use ch4_core::{ErrorKind, Message};

use crate::abi::{self, class, message_in, message_out, rank_in, tag_in, Handle, MpiStatus, Req};
use crate::call::{call, null_arg, on_device, put};
use crate::errors;
use crate::requests::decode;
use crate::state::{DevReq, State};
use ch4_core::blocking::Blocking;

/// `MPI_Probe`.
///
/// # Safety
/// `status` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Probe(
    source: c_int,
    tag: c_int,
    comm: Handle,
    status: *mut MpiStatus,
) -> c_int {
    call(comm, "MPI_Probe", |st| {
        let c = st.comm(comm)?;
        let id = c.id;
        let (source, tag) = (rank_in(source), tag_in(tag));
        let s = on_device!(st, c.vci, |b| b
            .block_until(|d| d.iprobe(id, source, tag), |_| ()))?;
        // SAFETY: the caller's contract.
        unsafe { MpiStatus::put(status, &s) };
        Ok(())
    })
}

/// `MPI_Iprobe`.
///
/// # Safety
/// `flag` is writable; `status` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Iprobe(
    source: c_int,
    tag: c_int,
    comm: Handle,
    flag: *mut c_int,
    status: *mut MpiStatus,
) -> c_int {
    call(comm, "MPI_Iprobe", |st| {
        let c = st.comm(comm)?;
        let id = c.id;
        let found = st.device(c.vci)?.iprobe(id, rank_in(source), tag_in(tag))?;
        // SAFETY: the caller's contract.
        unsafe {
            put(flag, c_int::from(found.is_some()));
            if let Some(s) = found {
                MpiStatus::put(status, &s);
            }
        }
        Ok(())
    })
}

/// A handle for `msg`, taken by a matched probe on VCI `vci`.
fn keep_message(st: &State, msg: Message, vci: usize) -> Handle {
    if matches!(msg, Message::NoProc) {
        return abi::MESSAGE_NO_PROC;
    }
    message_out(st.messages.insert((msg, vci)))
}

/// The message behind handle `h`, and its VCI, taken out of the table.
fn take_message(st: &State, h: Handle) -> ch4::Result<(Message, usize)> {
    if h == abi::MESSAGE_NO_PROC {
        return Ok((Message::NoProc, 0));
    }
    message_in(h)
        .and_then(|i| st.messages.remove(i))
        .ok_or_else(|| {
            ch4::Error::new(
                ErrorKind::Request,
                format!("{h:#x} is not a message of a matched probe (or it was received already)"),
            )
        })
}

/// `MPI_Mprobe`.
///
/// # Safety
/// `message` is writable; `status` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Mprobe(
    source: c_int,
    tag: c_int,
    comm: Handle,
    message: *mut Handle,
    status: *mut MpiStatus,
) -> c_int {
    call(comm, "MPI_Mprobe", |st| {
        if message.is_null() {
            return Err(null_arg("the message"));
        }
        let c = st.comm(comm)?;
        let id = c.id;
        let (source, tag) = (rank_in(source), tag_in(tag));
        let (msg, s) = on_device!(st, c.vci, |b| b
            .block_until(|d| d.improbe(id, source, tag), |_| ()))?;
        let h = keep_message(st, msg, c.vci);
        // SAFETY: checked non-null; the caller's contract.
        unsafe {
            message.write(h);
            MpiStatus::put(status, &s);
        }
        Ok(())
    })
}

/// `MPI_Improbe`.
///
/// # Safety
/// `flag` and `message` are writable; `status` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Improbe(
    source: c_int,
    tag: c_int,
    comm: Handle,
    flag: *mut c_int,
    message: *mut Handle,
    status: *mut MpiStatus,
) -> c_int {
    call(comm, "MPI_Improbe", |st| {
        if message.is_null() || flag.is_null() {
            return Err(null_arg("the flag or the message"));
        }
        let c = st.comm(comm)?;
        let id = c.id;
        let found = st
            .device(c.vci)?
            .improbe(id, rank_in(source), tag_in(tag))?;
        // SAFETY: checked non-null.
        unsafe { flag.write(c_int::from(found.is_some())) };
        if let Some((msg, s)) = found {
            let h = keep_message(st, msg, c.vci);
            // SAFETY: checked non-null; the caller's contract.
            unsafe {
                message.write(h);
                MpiStatus::put(status, &s);
            }
        }
        Ok(())
    })
}

/// `MPI_Mrecv`: the message handle becomes `MPI_MESSAGE_NULL`.
///
/// # Safety
/// `buf` has room for `count` elements of `datatype`; `message` is readable and writable;
/// `status` null or writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Mrecv(
    buf: *mut c_void,
    count: c_int,
    datatype: Handle,
    message: *mut Handle,
    status: *mut MpiStatus,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Mrecv", |st| {
        // SAFETY: the caller's contract; the receive completes before this returns.
        let b = unsafe { crate::buffers::rbuf(st, buf, count, datatype) }?;
        // SAFETY: the caller's contract.
        unsafe { mrecv(st, b, message, status) }
    })
}

/// `MPI_Mrecv_c`: `MPI_Mrecv` of an `MPI_Count` of elements.
///
/// # Safety
/// As `MPI_Mrecv`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Mrecv_c(
    buf: *mut c_void,
    count: i64,
    datatype: Handle,
    message: *mut Handle,
    status: *mut MpiStatus,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Mrecv_c", |st| {
        // SAFETY: the caller's contract; the receive completes before this returns.
        let b = unsafe { crate::buffers::rbuf_big(st, buf, count, datatype) }?;
        // SAFETY: the caller's contract.
        unsafe { mrecv(st, b, message, status) }
    })
}

/// The body of `MPI_Mrecv` into a buffer made from either form's count.
///
/// # Safety
/// `message` is null or readable and writable; `status` null or writable.
unsafe fn mrecv(
    st: &State,
    b: ch4_core::buffer::RecvBuf,
    message: *mut Handle,
    status: *mut MpiStatus,
) -> ch4::Result<()> {
    if message.is_null() {
        return Err(null_arg("the message"));
    }
    // SAFETY: the caller's contract.
    let (msg, vci) = take_message(st, unsafe { message.read() })?;
    let got = on_device!(st, vci, |bl| {
        let h = bl.visit(|d| d.imrecv(msg, b))?;
        Ok::<_, ch4::Error>(Blocking::wait_or_abandon(bl, h))
    })?;
    // SAFETY: the caller's contract.
    unsafe { message.write(abi::MESSAGE_NULL) };
    let s = match &got {
        Ok(s) => Some(*s),
        Err(e) => e.status().copied(),
    };
    if let Some(s) = s {
        // SAFETY: the caller's contract.
        unsafe { MpiStatus::put(status, &s) };
    }
    got.map(drop)
}

/// `MPI_Imrecv`: the message handle becomes `MPI_MESSAGE_NULL`.
///
/// # Safety
/// `buf` has room for `count` elements of `datatype` and is the request's until it completes;
/// `message` is readable and writable; `request` writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Imrecv(
    buf: *mut c_void,
    count: c_int,
    datatype: Handle,
    message: *mut Handle,
    request: *mut Handle,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Imrecv", |st| {
        // SAFETY: the caller's contract: the buffer is the request's alone until it completes.
        let rbuf = unsafe { crate::buffers::rbuf(st, buf, count, datatype) }?;
        // SAFETY: the caller's contract.
        unsafe { imrecv(st, rbuf, message, request) }
    })
}

/// `MPI_Imrecv_c`: `MPI_Imrecv` of an `MPI_Count` of elements.
///
/// # Safety
/// As `MPI_Imrecv`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Imrecv_c(
    buf: *mut c_void,
    count: i64,
    datatype: Handle,
    message: *mut Handle,
    request: *mut Handle,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Imrecv_c", |st| {
        // SAFETY: the caller's contract: the buffer is the request's alone until it completes.
        let rbuf = unsafe { crate::buffers::rbuf_big(st, buf, count, datatype) }?;
        // SAFETY: the caller's contract.
        unsafe { imrecv(st, rbuf, message, request) }
    })
}

/// The body of `MPI_Imrecv` into a buffer made from either form's count.
///
/// # Safety
/// `message` is null or readable and writable; `request` null or writable.
unsafe fn imrecv(
    st: &State,
    rbuf: ch4_core::buffer::RecvBuf,
    message: *mut Handle,
    request: *mut Handle,
) -> ch4::Result<()> {
    if message.is_null() || request.is_null() {
        return Err(null_arg("the message or the request"));
    }
    // SAFETY: the caller's contract.
    let (msg, vci) = take_message(st, unsafe { message.read() })?;
    let h = st.device(vci)?.imrecv(msg, rbuf)?;
    // SAFETY: checked non-null; the caller's contract.
    unsafe {
        message.write(abi::MESSAGE_NULL);
        request.write(abi::request_out(DevReq::new(h, vci)));
    }
    Ok(())
}

/// `MPI_Cancel`: the request must still be completed; `MPI_Test_cancelled` on its status
/// tells whether the cancel took effect.
///
/// # Safety
/// `request` is valid for a read.
#[no_mangle]
pub unsafe extern "C" fn MPI_Cancel(request: *mut Handle) -> c_int {
    call(abi::COMM_WORLD, "MPI_Cancel", |st| {
        if request.is_null() {
            return Err(null_arg("the request"));
        }
        // SAFETY: the caller's contract.
        let c = unsafe { request.read() };
        let r = match decode(c)? {
            Req::Generalized(i) => return crate::grequests::cancel(st, i),
            Req::Partitioned(i) => return crate::pt2pt::partitioned::cancel(st, i),
            Req::Device(r) => Some(r),
            Req::Persistent(i) => {
                st.with_persistent(i, |p| p.active.map(|h| DevReq::new(h, p.vci)))?
            }
            Req::Null => None,
        };
        match r {
            Some(r) => st.device(r.vci())?.cancel(r.handle()),
            None => Err(ch4::Error::new(
                ErrorKind::Request,
                "an inactive request cannot be cancelled",
            )),
        }
    })
}

/// `MPI_Test_cancelled`.
///
/// # Safety
/// `status` is readable, `flag` writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Test_cancelled(status: *const MpiStatus, flag: *mut c_int) -> c_int {
    if status.is_null() {
        return errors::refuse("MPI_Test_cancelled", "the status is a null pointer");
    }
    // SAFETY: the caller's contract.
    let cancelled = unsafe { (*status).internal[2] } != 0;
    // SAFETY: the caller's contract.
    unsafe { put(flag, c_int::from(cancelled)) };
    class::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_handles_are_distinct_from_requests_and_the_predefined_ones() {
        let h = message_out(5);
        assert_eq!(message_in(h), Some(5));
        assert_eq!(message_in(abi::MESSAGE_NULL), None);
        assert_eq!(message_in(abi::MESSAGE_NO_PROC), None);
        assert_eq!(message_in(abi::persistent_out(5)), None);
        assert_eq!(
            message_in(abi::request_out(crate::state::DevReq::new(
                ch4_core::ReqHandle::DONE,
                0
            ))),
            None
        );
    }
}

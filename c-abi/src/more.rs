//! The rest of point-to-point: matched probes and their messages, buffered sends with an
//! attached buffer, the `some`/`any` request functions, request status without completion,
//! status setters, and communicator attributes.

use std::ffi::{c_int, c_void};

use ch4_core::{ErrorKind, Message};

use crate::abi::{self, class, message_in, message_out, rank_in, tag_in, Handle, MpiStatus, Req};

use crate::call::{call, null_arg, put};
use crate::state::State;
use crate::{after, complete, decode, status_error};

// ------------------------------------------------------------------ matched probes

fn keep_message(st: &mut State, msg: Message) -> Handle {
    if matches!(msg, Message::NoProc) {
        return abi::MESSAGE_NO_PROC;
    }
    let i = match st.messages.iter().position(Option::is_none) {
        Some(i) => {
            st.messages[i] = Some(msg);
            i
        }
        None => {
            st.messages.push(Some(msg));
            st.messages.len() - 1
        }
    };
    message_out(i)
}

fn take_message(st: &mut State, h: Handle) -> ch4::Result<Message> {
    if h == abi::MESSAGE_NO_PROC {
        return Ok(Message::NoProc);
    }
    message_in(h)
        .and_then(|i| st.messages.get_mut(i).and_then(Option::take))
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
        let id = st.comm(comm)?;
        let (msg, s) = st.device()?.mprobe(id, rank_in(source), tag_in(tag))?;
        let h = keep_message(st, msg);
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
        let id = st.comm(comm)?;
        let found = st.device()?.improbe(id, rank_in(source), tag_in(tag))?;
        // SAFETY: checked non-null.
        unsafe { flag.write(c_int::from(found.is_some())) };
        if let Some((msg, s)) = found {
            let h = keep_message(st, msg);
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
        if message.is_null() {
            return Err(null_arg("the message"));
        }
        // SAFETY: the caller's contract; the receive completes before this returns.
        let b = unsafe { crate::buffers::rbuf(st, buf, count, datatype) }?;
        // SAFETY: the caller's contract.
        let msg = take_message(st, unsafe { message.read() })?;
        let got = {
            let mut dev = st.device()?;
            dev.imrecv(msg, b).and_then(|h| dev.wait(h))
        };
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
    })
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
        if message.is_null() || request.is_null() {
            return Err(null_arg("the message or the request"));
        }
        // SAFETY: the caller's contract: the buffer is the request's alone until it completes.
        let rbuf = unsafe { crate::buffers::rbuf(st, buf, count, datatype) }?;
        // SAFETY: the caller's contract.
        let msg = take_message(st, unsafe { message.read() })?;
        let h = st.device()?.imrecv(msg, rbuf)?;
        // SAFETY: checked non-null; the caller's contract.
        unsafe {
            message.write(abi::MESSAGE_NULL);
            request.write(abi::request_out(h));
        }
        Ok(())
    })
}

// ------------------------------------------------------------------ buffered sends

// ------------------------------------------------------------------ request sets

/// The requests of a C array, decoded.
///
/// # Safety
/// `reqs` has `count` handles (or is null with count 0).
unsafe fn requests<'a>(count: c_int, reqs: *mut Handle) -> ch4::Result<&'a mut [Handle]> {
    let n = crate::datatype::elements(count)?;
    if n == 0 {
        return Ok(&mut []);
    }
    if reqs.is_null() {
        return Err(null_arg("the array of requests"));
    }
    // SAFETY: the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts_mut(reqs, n) })
}

/// Whether `req` is active (a device request, or a started persistent one).
fn active(st: &mut State, req: Req) -> ch4::Result<bool> {
    Ok(match req {
        Req::Null => false,
        Req::Device(_) => true,
        Req::Persistent(i) => st.persistent(i)?.active.is_some(),
    })
}

/// Completes whatever of `reqs` is done (`blocking`: at least one, waiting for it), writing
/// their indices and statuses; `MPI_UNDEFINED` when none is active.
///
/// # Safety
/// `indices` and `statuses` (unless null) have room for `reqs.len()` entries.
unsafe fn some(
    st: &mut State,
    reqs: &mut [Handle],
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut MpiStatus,
    blocking: bool,
) -> ch4::Result<()> {
    let mut live = Vec::new();
    for (i, &c) in reqs.iter().enumerate() {
        let req = decode(c)?;
        if active(st, req)? {
            live.push((i, req));
        }
    }
    if live.is_empty() {
        // SAFETY: the caller's contract.
        unsafe { put(outcount, abi::UNDEFINED) };
        return Ok(());
    }
    let mut idle = 0u32;
    loop {
        let mut n = 0usize;
        let mut failed = false;
        for &(i, req) in &live {
            if let Some(done) = complete(st, req, false)? {
                reqs[i] = after(req, reqs[i]);
                let err = match done.error {
                    None => class::SUCCESS,
                    Some(kind) => {
                        failed = true;
                        crate::errors::register(
                            crate::errors::class_of(kind),
                            kind.describe().into(),
                        )
                    }
                };
                // SAFETY: the caller's contract: room for every request.
                unsafe {
                    if !indices.is_null() {
                        indices.add(n).write(i as c_int);
                    }
                    if !statuses.is_null() {
                        statuses.add(n).write(MpiStatus::of(&done, err));
                    }
                }
                n += 1;
            }
        }
        if n > 0 || !blocking {
            // SAFETY: the caller's contract.
            unsafe { put(outcount, n as c_int) };
            return if failed {
                Err(ch4::Error::new(
                    ErrorKind::InStatus,
                    "some requests failed: see their statuses",
                ))
            } else {
                Ok(())
            };
        }
        idle = if st.device()?.progress()? == 0 {
            idle + 1
        } else {
            0
        };
        st.device()?.pause(idle, None);
    }
}

/// `MPI_Waitsome`.
///
/// # Safety
/// `array_of_requests` has `incount` handles; `outcount` is writable; `array_of_indices` and
/// `array_of_statuses` (unless null) have room for `incount` entries.
#[no_mangle]
pub unsafe extern "C" fn MPI_Waitsome(
    incount: c_int,
    array_of_requests: *mut Handle,
    outcount: *mut c_int,
    array_of_indices: *mut c_int,
    array_of_statuses: *mut MpiStatus,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Waitsome", |st| {
        // SAFETY: the caller's contract.
        let reqs = unsafe { requests(incount, array_of_requests) }?;
        // SAFETY: the caller's contract.
        unsafe {
            some(
                st,
                reqs,
                outcount,
                array_of_indices,
                array_of_statuses,
                true,
            )
        }
    })
}

/// `MPI_Testsome`.
///
/// # Safety
/// As `MPI_Waitsome`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Testsome(
    incount: c_int,
    array_of_requests: *mut Handle,
    outcount: *mut c_int,
    array_of_indices: *mut c_int,
    array_of_statuses: *mut MpiStatus,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Testsome", |st| {
        st.device()?.progress()?;
        // SAFETY: the caller's contract.
        let reqs = unsafe { requests(incount, array_of_requests) }?;
        // SAFETY: the caller's contract.
        unsafe {
            some(
                st,
                reqs,
                outcount,
                array_of_indices,
                array_of_statuses,
                false,
            )
        }
    })
}

/// `MPI_Testany`: `flag` is true also when no request is active (`index` then
/// `MPI_UNDEFINED`).
///
/// # Safety
/// `array_of_requests` has `count` handles; `index` and `flag` are writable; `status` null or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Testany(
    count: c_int,
    array_of_requests: *mut Handle,
    index: *mut c_int,
    flag: *mut c_int,
    status: *mut MpiStatus,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Testany", |st| {
        st.device()?.progress()?;
        // SAFETY: the caller's contract.
        let reqs = unsafe { requests(count, array_of_requests) }?;
        let mut any_active = false;
        for (i, slot) in reqs.iter_mut().enumerate() {
            let req = decode(*slot)?;
            if !active(st, req)? {
                continue;
            }
            any_active = true;
            if let Some(done) = complete(st, req, false)? {
                *slot = after(req, *slot);
                // SAFETY: the caller's contract.
                unsafe {
                    put(index, i as c_int);
                    put(flag, 1);
                    MpiStatus::put(status, &done);
                }
                return status_error(&done);
            }
        }
        // SAFETY: the caller's contract.
        unsafe {
            put(index, abi::UNDEFINED);
            put(flag, c_int::from(!any_active));
            if !any_active {
                MpiStatus::put(status, &crate::INACTIVE);
            }
        }
        Ok(())
    })
}

/// `MPI_Request_get_status`: whether the request is complete, without freeing it.
///
/// # Safety
/// `flag` is writable; `status` null or writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Request_get_status(
    request: Handle,
    flag: *mut c_int,
    status: *mut MpiStatus,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Request_get_status", |st| {
        let h = match decode(request)? {
            Req::Null => None,
            Req::Device(h) => Some(h),
            Req::Persistent(i) => st.persistent(i)?.active,
        };
        let Some(h) = h else {
            // SAFETY: the caller's contract.
            unsafe {
                put(flag, 1);
                MpiStatus::put(status, &crate::INACTIVE);
            }
            return Ok(());
        };
        let mut dev = st.device()?;
        dev.progress()?;
        let done = dev.is_done(h)?;
        // SAFETY: the caller's contract.
        unsafe { put(flag, c_int::from(done)) };
        if done {
            if let Some(s) = dev.peek_status(h) {
                // SAFETY: the caller's contract.
                unsafe { MpiStatus::put(status, &s) };
            }
        }
        Ok(())
    })
}

// ------------------------------------------------------------------ statuses and attributes

/// `MPI_Get_elements_x`.
///
/// # Safety
/// `status` readable, `count` writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Get_elements_x(
    status: *const MpiStatus,
    datatype: Handle,
    count: *mut i64,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Get_elements_x", |st| {
        // SAFETY: the caller's contract.
        unsafe { put_count_x(st, status, datatype, count, crate::derived::elements_in) }
    })
}

/// Writes what `of` makes of `status`'s bytes in `datatype` as an `MPI_Count`
/// (`MPI_UNDEFINED` when not whole).
///
/// # Safety
/// `status` readable, `count` writable.
unsafe fn put_count_x(
    st: &State,
    status: *const MpiStatus,
    datatype: Handle,
    count: *mut i64,
    of: fn(&State, u64, Handle) -> ch4::Result<Option<u64>>,
) -> ch4::Result<()> {
    if status.is_null() {
        return Err(null_arg("the status"));
    }
    // SAFETY: the caller's contract.
    let bytes = unsafe { (*status).bytes() };
    let n = of(st, bytes, datatype)?.map_or(i64::from(abi::UNDEFINED), |n| n as i64);
    // SAFETY: the caller's contract.
    unsafe { put(count, n) };
    Ok(())
}

/// `MPI_Get_count_c`: the count as an `MPI_Count` (`MPI_UNDEFINED` when not whole).
///
/// # Safety
/// `status` readable, `count` writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Get_count_c(
    status: *const MpiStatus,
    datatype: Handle,
    count: *mut i64,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Get_count_c", |st| {
        // SAFETY: the caller's contract.
        unsafe { put_count_x(st, status, datatype, count, crate::derived::count_in) }
    })
}

/// `MPI_Get_elements_c`: as `MPI_Get_elements_x`.
///
/// # Safety
/// `status` readable, `count` writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Get_elements_c(
    status: *const MpiStatus,
    datatype: Handle,
    count: *mut i64,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { MPI_Get_elements_x(status, datatype, count) }
}

/// `MPI_Status_set_elements_x`.
///
/// # Safety
/// `status` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Status_set_elements_x(
    status: *mut MpiStatus,
    datatype: Handle,
    count: i64,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Status_set_elements_x", |st| {
        if status.is_null() {
            return Err(null_arg("the status"));
        }
        let d = crate::derived::desc(st, datatype)?;
        let size = d.size / d.elements.max(1);
        let bytes = u64::try_from(count)
            .ok()
            .and_then(|c| c.checked_mul(size as u64))
            .ok_or_else(|| ch4::Error::new(ErrorKind::Count, format!("count {count}")))?;
        // SAFETY: the caller's contract.
        let s = unsafe { &mut *status };
        s.internal[0] = bytes as c_int;
        s.internal[1] = (bytes >> 32) as c_int;
        Ok(())
    })
}

/// `MPI_Status_set_cancelled`.
///
/// # Safety
/// `status` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Status_set_cancelled(status: *mut MpiStatus, flag: c_int) -> c_int {
    if status.is_null() {
        return crate::errors::refuse("MPI_Status_set_cancelled", "the status is a null pointer");
    }
    // SAFETY: the caller's contract.
    unsafe { (*status).internal[2] = c_int::from(flag != 0) };
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
            message_in(abi::request_out(ch4_core::ReqHandle::DONE)),
            None
        );
    }
}

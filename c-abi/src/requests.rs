//! Completing one request, the standard's "Communication Completion" (chapter
//! "Point-to-Point Communication"): `MPI_Wait`, `MPI_Test`, `MPI_Request_free` and
//! `MPI_Request_get_status`, with what every completion function shares: decoding a request
//! handle, completing the request, what its handle becomes, and the error its status carries.
//!
//! A request handle is one of three kinds (`abi::Req`): null, the device's request, or one of
//! the library's persistent requests. `MPI_Wait` on a device request — almost every wait, and
//! half of every nonblocking round — goes straight to the device, with its error built out of
//! line; every other case takes the general path (`complete`), which also finishes the requests
//! freed while active.

use std::ffi::c_int;

use ch4_core::blocking::Blocking;
use ch4_core::{ErrorKind, Status};

use crate::abi::{self, req_in, Handle, MpiStatus, Req};
use crate::call::{call, hot_call, null_arg, on_device_at, put};
use crate::state::{DevReq, State};

#[cold]
fn bad_request(h: Handle) -> ch4::Error {
    ch4::Error::new(
        ErrorKind::Request,
        format!("{h:#x} is not a request handle"),
    )
}

/// The status of an inactive or null request (MPI's "empty status": any source, any tag, no
/// error, no data).
pub(crate) const INACTIVE: Status = Status {
    source: ch4_core::ANY_SOURCE,
    tag: ch4_core::ANY_TAG,
    bytes: 0,
    cancelled: false,
    error: None,
};

/// The request behind C handle `c`.
#[inline(always)]
pub(crate) fn decode(c: Handle) -> ch4::Result<Req> {
    req_in(c).map_err(|()| bad_request(c))
}

/// Completes request `req` (`blocking`: waits; else only if it is done): its status, `None`
/// while it is still running. An inactive request (null, or a persistent one not started)
/// completes at once with an empty status.
#[inline(always)]
pub(crate) fn complete(st: &State, req: Req, blocking: bool) -> ch4::Result<Option<Status>> {
    if st.single() {
        complete_at::<false>(st, req, blocking)
    } else {
        complete_at::<true>(st, req, blocking)
    }
}

/// [`complete`] in the copy of one level (`MT`: `MPI_THREAD_MULTIPLE`).
#[inline(always)]
pub(crate) fn complete_at<const MT: bool>(
    st: &State,
    req: Req,
    blocking: bool,
) -> ch4::Result<Option<Status>> {
    if st.any_detached() {
        st.reap_detached();
    }
    // A device request, almost every one, with one test of the kind.
    let (r, persistent) = match req {
        Req::Device(r) => (r, None),
        Req::Generalized(i) => return crate::grequests::complete(st, i, blocking),
        Req::Partitioned(i) => return crate::pt2pt::partitioned::complete(st, i, blocking),
        other => match device_of(st, other)? {
            Some(r) => (r, Some(other)),
            None => return Ok(Some(INACTIVE)),
        },
    };
    let done = if blocking {
        Some(on_device_at!(MT, st, r.vci(), |b| b.wait_status(r.handle_at::<MT>()))?)
    } else {
        on_device_at!(MT, st, r.vci(), |b| b
            .visit(|d| d.test_status(r.handle_at::<MT>())))?
    };
    if let (Some(_), Some(Req::Persistent(i))) = (done, persistent) {
        st.with_persistent(i, |p| p.active = None)?;
    }
    Ok(done)
}

/// The device request behind `req`: `None` for an inactive one (null, or a persistent
/// request not started) and for the library's requests that are not one device request
/// (generalized and partitioned: see [`active`] and [`peek_req`]).
#[inline(always)]
pub(crate) fn device_of(st: &State, req: Req) -> ch4::Result<Option<DevReq>> {
    Ok(match req {
        Req::Null | Req::Generalized(_) | Req::Partitioned(_) => None,
        Req::Device(r) => Some(r),
        Req::Persistent(i) => st.with_persistent(i, |p| p.active.map(|h| DevReq::new(h, p.vci)))?,
    })
}

/// Whether `req` is active: a device request, a started persistent or partitioned one, or a
/// generalized request not yet completed by a wait or a test.
pub(crate) fn active(st: &State, req: Req) -> ch4::Result<bool> {
    match req {
        Req::Generalized(_) => Ok(true),
        Req::Partitioned(i) => crate::pt2pt::partitioned::active(st, i),
        other => Ok(device_of(st, other)?.is_some()),
    }
}

/// Where `req` stands without completing it: `None` when it is inactive, else its status once
/// it is complete (a generalized request's from its `query_fn`).
pub(crate) fn peek_req(st: &State, req: Req) -> ch4::Result<Option<Option<Status>>> {
    match req {
        Req::Generalized(i) => Ok(Some(crate::grequests::peek(st, i)?)),
        Req::Partitioned(i) => crate::pt2pt::partitioned::peek(st, i),
        other => {
            let Some(r) = device_of(st, other)? else {
                return Ok(None);
            };
            let dev = st.device(r.vci())?;
            if !dev.is_done(r.handle())? {
                return Ok(Some(None));
            }
            Ok(Some(Some(dev.peek_status(r.handle()).unwrap_or(INACTIVE))))
        }
    }
}

/// What a completed request's handle becomes: `MPI_REQUEST_NULL`, except a persistent or
/// partitioned request's, which stays (inactive) until freed.
#[inline(always)]
pub(crate) fn after(req: Req, c: Handle) -> Handle {
    match req {
        Req::Persistent(_) | Req::Partitioned(_) => c,
        _ => abi::REQUEST_NULL,
    }
}

/// [`status_error`] of a status given by its fields, which a hot caller passes in registers.
#[cold]
#[inline(never)]
fn failed(
    kind: ErrorKind,
    source: ch4_core::Rank,
    tag: ch4_core::Tag,
    bytes: usize,
    cancelled: bool,
) -> ch4::Result<()> {
    status_error(&Status {
        source,
        tag,
        bytes,
        cancelled,
        error: Some(kind),
    })
}

/// The error of a completed operation's status, as the function's own error.
#[inline(never)]
pub(crate) fn status_error(s: &Status) -> ch4::Result<()> {
    match s.error {
        None => Ok(()),
        Some(kind) => Err(ch4::Error::with_status(
            kind,
            format!("{} (source {}, tag {})", kind.describe(), s.source, s.tag),
            *s,
        )),
    }
}

/// `MPI_Wait`: the request becomes `MPI_REQUEST_NULL` (a persistent one inactive).
///
/// # Safety
/// `request` is valid for a read and a write; `status` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Wait(request: *mut Handle, status: *mut MpiStatus) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { hot_call!("MPI_Wait", abi::COMM_WORLD, wait_body(request, status)) }
}

/// # Safety
/// As `MPI_Wait`.
#[inline(always)]
unsafe fn wait_body<const MT: bool>(
    st: &State,
    request: *mut Handle,
    status: *mut MpiStatus,
) -> ch4::Result<()> {
    if request.is_null() {
        return Err(null_arg("the request"));
    }
    // SAFETY: the caller's contract.
    let c = unsafe { request.read() };
    // A device request with nothing freed-while-active to reap first is almost every wait:
    // straight to the device, and the handle becomes MPI_REQUEST_NULL.
    if let Some(r) = abi::device_request(c) {
        if !st.any_detached() {
            let done = on_device_at!(MT, st, r.vci(), |b| b.wait_status(r.handle_at::<MT>()))?;
            // SAFETY: the caller's contract.
            unsafe {
                request.write(abi::REQUEST_NULL);
                MpiStatus::put(status, &done);
            }
            return match done.error {
                None => Ok(()),
                // The fields by value, so that the success path stores no copy of the status.
                Some(kind) => failed(kind, done.source, done.tag, done.bytes, done.cancelled),
            };
        }
    }
    // SAFETY: the caller's contract.
    unsafe { wait_other::<MT>(st, request, status, c) }
}

/// `MPI_Wait` on anything but a plain device request: null, persistent, or with requests freed
/// while active to reap first.
///
/// # Safety
/// As `MPI_Wait`; `c` is the handle `request` holds.
#[inline(never)]
unsafe fn wait_other<const MT: bool>(
    st: &State,
    request: *mut Handle,
    status: *mut MpiStatus,
    c: Handle,
) -> ch4::Result<()> {
    let req = decode(c)?;
    let done = complete_at::<MT>(st, req, true)?.unwrap_or(Status::EMPTY);
    // SAFETY: the caller's contract.
    unsafe {
        request.write(after(req, c));
        MpiStatus::put(status, &done);
    }
    status_error(&done)
}

/// `MPI_Test`.
///
/// # Safety
/// `request` is valid for a read and a write, `flag` for a write; `status` is null or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Test(
    request: *mut Handle,
    flag: *mut c_int,
    status: *mut MpiStatus,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Test", |st| {
        if request.is_null() || flag.is_null() {
            return Err(null_arg("the request or the flag"));
        }
        // SAFETY: the caller's contract.
        let c = unsafe { request.read() };
        let req = decode(c)?;
        let Some(done) = complete(st, req, false)? else {
            // SAFETY: checked non-null.
            unsafe { flag.write(0) };
            return Ok(());
        };
        // SAFETY: the caller's contract.
        unsafe {
            flag.write(1);
            request.write(after(req, c));
            MpiStatus::put(status, &done);
        }
        status_error(&done)
    })
}

/// `MPI_Request_free`: an active request completes in the background; a persistent one is
/// gone.
///
/// # Safety
/// `request` is valid for a read and a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Request_free(request: *mut Handle) -> c_int {
    call(abi::COMM_WORLD, "MPI_Request_free", |st| {
        if request.is_null() {
            return Err(null_arg("the request"));
        }
        // SAFETY: the caller's contract.
        let c = unsafe { request.read() };
        match decode(c)? {
            Req::Null => {
                return Err(ch4::Error::new(
                    ErrorKind::Request,
                    "MPI_REQUEST_NULL cannot be freed",
                ))
            }
            Req::Device(r) => st.detach(r),
            Req::Generalized(i) => crate::grequests::free(st, i)?,
            Req::Partitioned(i) => crate::pt2pt::partitioned::free(st, i)?,
            Req::Persistent(i) => {
                let p = st.persistent.remove(i).ok_or_else(|| {
                    ch4::Error::new(ErrorKind::Request, "a persistent request that was freed")
                })?;
                if let Some(h) = p.active {
                    st.detach(DevReq::new(h, p.vci));
                }
            }
        }
        st.reap_detached();
        // SAFETY: the caller's contract.
        unsafe { request.write(abi::REQUEST_NULL) };
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
        let req = decode(request)?;
        if let Some(r) = device_of(st, req)? {
            st.device(r.vci())?.progress()?;
        } else {
            st.progress()?;
        }
        let (done, s) = match peek_req(st, req)? {
            None => (true, Some(INACTIVE)),
            Some(s) => (s.is_some(), s),
        };
        // SAFETY: the caller's contract.
        unsafe { put(flag, c_int::from(done)) };
        if let Some(s) = s {
            // SAFETY: the caller's contract.
            unsafe { MpiStatus::put(status, &s) };
        }
        Ok(())
    })
}

/// Where request `c` stands without completing it: `None` when it is inactive (null, or a
/// persistent one not started), else its status once it is complete.
fn peek(st: &State, c: Handle) -> ch4::Result<Option<Option<Status>>> {
    peek_req(st, decode(c)?)
}

/// One progress step on every VCI that `reqs` use (and VCI 0), before they are looked at
/// (every VCI when one is the library's own kind, whose messages may be on any).
fn progress_for(st: &State, reqs: &[Handle]) -> ch4::Result<()> {
    let mut vcis = vec![0usize];
    for &c in reqs {
        let req = decode(c)?;
        if matches!(req, Req::Generalized(_) | Req::Partitioned(_)) {
            st.progress()?;
            return Ok(());
        }
        if let Some(r) = device_of(st, req)? {
            if !vcis.contains(&r.vci()) {
                vcis.push(r.vci());
            }
        }
    }
    for v in vcis {
        st.device(v)?.progress()?;
    }
    Ok(())
}

/// The requests of a C array (none when `count` is 0).
///
/// # Safety
/// `reqs` has `count` readable handles, or is null with `count` 0.
unsafe fn handles<'a>(count: c_int, reqs: *const Handle) -> ch4::Result<&'a [Handle]> {
    let n = crate::datatype::elements(count)?;
    if n == 0 {
        return Ok(&[]);
    }
    if reqs.is_null() {
        return Err(null_arg("the array of requests"));
    }
    // SAFETY: the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(reqs, n) })
}

/// `MPI_Request_get_status_any` (MPI 4.1, section 3.7.5): like `MPI_Testany`, but the request
/// found complete stays as it is, to be completed later.
///
/// # Safety
/// `array_of_requests` has `count` handles; `index` and `flag` are writable; `status` is null
/// or writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Request_get_status_any(
    count: c_int,
    array_of_requests: *const Handle,
    index: *mut c_int,
    flag: *mut c_int,
    status: *mut MpiStatus,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Request_get_status_any", |st| {
        // SAFETY: the caller's contract.
        let reqs = unsafe { handles(count, array_of_requests) }?;
        progress_for(st, reqs)?;
        let mut any_active = false;
        for (i, &c) in reqs.iter().enumerate() {
            match peek(st, c)? {
                None => {}
                Some(None) => any_active = true,
                Some(Some(s)) => {
                    // SAFETY: the caller's contract.
                    unsafe {
                        put(index, i as c_int);
                        put(flag, 1);
                        MpiStatus::put(status, &s);
                    }
                    return Ok(());
                }
            }
        }
        // SAFETY: the caller's contract.
        unsafe {
            put(index, abi::UNDEFINED);
            put(flag, c_int::from(!any_active));
            if !any_active {
                MpiStatus::put(status, &INACTIVE);
            }
        }
        Ok(())
    })
}

/// `MPI_Request_get_status_all`: whether every request is complete (an inactive one counts as
/// complete), and then their statuses, leaving every request as it is.
///
/// # Safety
/// `array_of_requests` has `count` handles; `flag` is writable; `array_of_statuses` is null
/// (`MPI_STATUSES_IGNORE`) or has room for `count` statuses.
#[no_mangle]
pub unsafe extern "C" fn MPI_Request_get_status_all(
    count: c_int,
    array_of_requests: *const Handle,
    flag: *mut c_int,
    array_of_statuses: *mut MpiStatus,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Request_get_status_all", |st| {
        // SAFETY: the caller's contract.
        let reqs = unsafe { handles(count, array_of_requests) }?;
        progress_for(st, reqs)?;
        let mut found = Vec::with_capacity(reqs.len());
        for &c in reqs {
            match peek(st, c)? {
                None => found.push(INACTIVE),
                Some(None) => {
                    // SAFETY: the caller's contract.
                    unsafe { put(flag, 0) };
                    return Ok(());
                }
                Some(Some(s)) => found.push(s),
            }
        }
        // SAFETY: the caller's contract.
        unsafe { put(flag, 1) };
        if !array_of_statuses.is_null() {
            for (i, s) in found.iter().enumerate() {
                // SAFETY: the caller's contract: room for `count` statuses.
                unsafe { MpiStatus::put(array_of_statuses.add(i), s) };
            }
        }
        Ok(())
    })
}

/// `MPI_Request_get_status_some`: the indices (and statuses) of the complete active requests,
/// `MPI_UNDEFINED` when none is active, leaving every request as it is.
///
/// # Safety
/// `array_of_requests` has `incount` handles; `outcount` is writable; `array_of_indices` has
/// room for `incount` entries; `array_of_statuses` is null or has room for `incount`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Request_get_status_some(
    incount: c_int,
    array_of_requests: *const Handle,
    outcount: *mut c_int,
    array_of_indices: *mut c_int,
    array_of_statuses: *mut MpiStatus,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Request_get_status_some", |st| {
        // SAFETY: the caller's contract.
        let reqs = unsafe { handles(incount, array_of_requests) }?;
        progress_for(st, reqs)?;
        let (mut any_active, mut n) = (false, 0usize);
        for (i, &c) in reqs.iter().enumerate() {
            match peek(st, c)? {
                None => {}
                Some(None) => any_active = true,
                Some(Some(s)) => {
                    any_active = true;
                    if array_of_indices.is_null() {
                        return Err(null_arg("the array of indices"));
                    }
                    // SAFETY: the caller's contract: room for `incount` entries.
                    unsafe {
                        array_of_indices.add(n).write(i as c_int);
                        if !array_of_statuses.is_null() {
                            MpiStatus::put(array_of_statuses.add(n), &s);
                        }
                    }
                    n += 1;
                }
            }
        }
        let out = if any_active {
            n as c_int
        } else {
            abi::UNDEFINED
        };
        // SAFETY: the caller's contract.
        unsafe { put(outcount, out) };
        Ok(())
    })
}

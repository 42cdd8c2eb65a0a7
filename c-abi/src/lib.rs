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
mod more;
mod pt2pt;
mod state;
mod topology;

use std::ffi::{c_int, c_void};

use ch4_core::{ErrorKind, Status};

use abi::{class, rank_in, req_in, tag_in, Handle, MpiStatus, Req};
use buffers::{plain, rbuf, sbuf};
use call::{call, finish_call, null_arg, put};
use datatype::{raw, raw_mut, recv_bytes, send_bytes};
use state::State;

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
fn decode(c: Handle) -> ch4::Result<Req> {
    req_in(c).map_err(|()| bad_request(c))
}

/// Completes request `req` (`blocking`: waits; else only if it is done): its status, `None`
/// while it is still running. An inactive request (null, or a persistent one not started)
/// completes at once with an empty status.
#[inline(always)]
fn complete(st: &mut State, req: Req, blocking: bool) -> ch4::Result<Option<Status>> {
    if !st.detached.is_empty() {
        st.reap_detached();
    }
    let h = match req {
        Req::Null => return Ok(Some(INACTIVE)),
        Req::Device(h) => h,
        Req::Persistent(i) => match st.persistent(i)?.active {
            None => return Ok(Some(INACTIVE)),
            Some(h) => h,
        },
    };
    let done = {
        let mut dev = st.device()?;
        if blocking {
            Some(dev.wait_status(h)?)
        } else {
            dev.test_status(h)?
        }
    };
    if let (Some(_), Req::Persistent(i)) = (done, req) {
        st.persistent(i)?.active = None;
    }
    Ok(done)
}

/// What a completed request's handle becomes: `MPI_REQUEST_NULL`, except a persistent
/// request's, which stays (inactive) until freed.
#[inline(always)]
fn after(req: Req, c: Handle) -> Handle {
    match req {
        Req::Persistent(_) => c,
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
fn status_error(s: &Status) -> ch4::Result<()> {
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
    let mut st = match state::enter() {
        Ok(st) => st,
        Err(code) => return code,
    };
    // SAFETY: the caller's contract.
    let r = unsafe { wait_body(&mut st, request, status) };
    finish_call(&mut st, abi::COMM_WORLD, "MPI_Wait", r)
}

/// # Safety
/// As `MPI_Wait`.
#[inline(always)]
unsafe fn wait_body(
    st: &mut State,
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
    if let Some(h) = abi::device_request(c) {
        if st.detached.is_empty() {
            let done = st.device()?.wait_status(h)?;
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
    unsafe { wait_other(st, request, status, c) }
}

/// `MPI_Wait` on anything but a plain device request: null, persistent, or with requests freed
/// while active to reap first.
///
/// # Safety
/// As `MPI_Wait`; `c` is the handle `request` holds.
#[inline(never)]
unsafe fn wait_other(
    st: &mut State,
    request: *mut Handle,
    status: *mut MpiStatus,
    c: Handle,
) -> ch4::Result<()> {
    let req = decode(c)?;
    let done = complete(st, req, true)?.unwrap_or(Status::EMPTY);
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

/// Completes every request of `requests` (`test`: only if all are complete), filling
/// `statuses`; an error of any is `MPI_ERR_IN_STATUS`, each status carrying its own.
///
/// # Safety
/// `requests` has `count` handles; `statuses` is null or has `count` writable statuses.
unsafe fn complete_all(
    st: &mut State,
    count: c_int,
    requests: *mut Handle,
    statuses: *mut MpiStatus,
    test: bool,
) -> ch4::Result<bool> {
    let n = datatype::elements(count)?;
    if n == 0 {
        return Ok(true);
    }
    if requests.is_null() {
        return Err(null_arg("the array of requests"));
    }
    // SAFETY: the caller's contract: `n` handles.
    let reqs = unsafe { std::slice::from_raw_parts_mut(requests, n) };
    let mut decoded = Vec::with_capacity(n);
    for &c in reqs.iter() {
        decoded.push(decode(c)?);
    }
    if test {
        st.device()?.progress()?;
        for &req in &decoded {
            let h = match req {
                Req::Null => continue,
                Req::Device(h) => h,
                Req::Persistent(i) => match st.persistent(i)?.active {
                    None => continue,
                    Some(h) => h,
                },
            };
            if !st.device()?.is_done(h)? {
                return Ok(false);
            }
        }
    }
    let mut failed = None;
    for (i, req) in decoded.into_iter().enumerate() {
        let done = complete(st, req, true)?.unwrap_or(Status::EMPTY);
        let err = match done.error {
            None => class::SUCCESS,
            Some(kind) => {
                let code = errors::register(
                    errors::class_of(kind),
                    format!("request {i}: {}", kind.describe()),
                );
                failed.get_or_insert(kind);
                code
            }
        };
        reqs[i] = after(req, reqs[i]);
        if !statuses.is_null() {
            // SAFETY: the caller's contract: `n` statuses.
            unsafe { statuses.add(i).write(MpiStatus::of(&done, err)) };
        }
    }
    match failed {
        None => Ok(true),
        Some(kind) if statuses.is_null() => Err(ch4::Error::new(kind, kind.describe())),
        Some(_) => Err(ch4::Error::new(
            ErrorKind::InStatus,
            "some requests failed: see each one's status",
        )),
    }
}

/// `MPI_Waitall`.
///
/// # Safety
/// `array_of_requests` has `count` handles; `array_of_statuses` is null or has `count`
/// writable statuses.
#[no_mangle]
pub unsafe extern "C" fn MPI_Waitall(
    count: c_int,
    array_of_requests: *mut Handle,
    array_of_statuses: *mut MpiStatus,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Waitall", |st| {
        // SAFETY: the caller's contract.
        unsafe { complete_all(st, count, array_of_requests, array_of_statuses, false) }.map(drop)
    })
}

/// `MPI_Testall`.
///
/// # Safety
/// As `MPI_Waitall`, and `flag` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Testall(
    count: c_int,
    array_of_requests: *mut Handle,
    flag: *mut c_int,
    array_of_statuses: *mut MpiStatus,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Testall", |st| {
        // SAFETY: the caller's contract.
        let all = unsafe { complete_all(st, count, array_of_requests, array_of_statuses, true) }?;
        // SAFETY: the caller's contract.
        unsafe { put(flag, c_int::from(all)) };
        Ok(())
    })
}

/// `MPI_Waitany`: `index` is `MPI_UNDEFINED` when every request is inactive.
///
/// # Safety
/// `array_of_requests` has `count` handles; `index` is writable; `status` null or writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Waitany(
    count: c_int,
    array_of_requests: *mut Handle,
    index: *mut c_int,
    status: *mut MpiStatus,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Waitany", |st| {
        let n = datatype::elements(count)?;
        if n > 0 && array_of_requests.is_null() {
            return Err(null_arg("the array of requests"));
        }
        let reqs: &mut [Handle] = if n == 0 {
            &mut []
        } else {
            // SAFETY: the caller's contract: `n` handles.
            unsafe { std::slice::from_raw_parts_mut(array_of_requests, n) }
        };
        let mut active = Vec::new();
        for (i, &c) in reqs.iter().enumerate() {
            let req = decode(c)?;
            let live = match req {
                Req::Null => false,
                Req::Device(_) => true,
                Req::Persistent(p) => st.persistent(p)?.active.is_some(),
            };
            if live {
                active.push((i, req));
            }
        }
        if active.is_empty() {
            // SAFETY: the caller's contract.
            unsafe {
                put(index, abi::UNDEFINED);
                MpiStatus::put(status, &INACTIVE);
            }
            return Ok(());
        }
        let mut idle = 0u32;
        loop {
            for &(i, req) in &active {
                if let Some(done) = complete(st, req, false)? {
                    reqs[i] = after(req, reqs[i]);
                    // SAFETY: the caller's contract.
                    unsafe {
                        put(index, i as c_int);
                        MpiStatus::put(status, &done);
                    }
                    return status_error(&done);
                }
            }
            idle = if st.device()?.progress()? == 0 {
                idle + 1
            } else {
                0
            };
            st.device()?.pause(idle, None);
        }
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
            Req::Device(h) => st.detached.push(h),
            Req::Persistent(i) => {
                if let Some(h) = st.persistent(i)?.active {
                    st.detached.push(h);
                }
                st.persistent[i] = None;
            }
        }
        st.reap_detached();
        // SAFETY: the caller's contract.
        unsafe { request.write(abi::REQUEST_NULL) };
        Ok(())
    })
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
        let h = match decode(c)? {
            Req::Device(h) => Some(h),
            Req::Persistent(i) => st.persistent(i)?.active,
            Req::Null => None,
        };
        match h {
            Some(h) => st.device()?.cancel(h),
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
        let id = st.comm(comm)?;
        let s = st.device()?.probe(id, rank_in(source), tag_in(tag))?;
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
        let id = st.comm(comm)?;
        let found = st.device()?.iprobe(id, rank_in(source), tag_in(tag))?;
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

/// `MPI_Get_count`: `MPI_UNDEFINED` when the bytes are not a whole number of elements (or
/// their number does not fit an int).
///
/// # Safety
/// `status` is readable, `count` writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Get_count(
    status: *const MpiStatus,
    datatype: Handle,
    count: *mut c_int,
) -> c_int {
    if status.is_null() {
        return errors::refuse("MPI_Get_count", "the status is a null pointer");
    }
    // SAFETY: the caller's contract.
    let bytes = unsafe { (*status).bytes() };
    let n = match datatype::size_of(datatype) {
        Some(size) if size > 0 && bytes % size as u64 == 0 => {
            c_int::try_from(bytes / size as u64).unwrap_or(abi::UNDEFINED)
        }
        Some(_) => abi::UNDEFINED,
        None => {
            let mut n = abi::UNDEFINED;
            let code = call(abi::COMM_WORLD, "MPI_Get_count", |st| {
                if let Some(c) = derived::count_in(st, bytes, datatype)? {
                    n = c_int::try_from(c).unwrap_or(abi::UNDEFINED);
                }
                Ok(())
            });
            if code != class::SUCCESS {
                return code;
            }
            n
        }
    };
    // SAFETY: the caller's contract.
    unsafe { put(count, n) };
    class::SUCCESS
}

/// `MPI_Get_elements`: the predefined elements received (for a derived datatype, those of
/// whole elements plus those of a partial one).
///
/// # Safety
/// As `MPI_Get_count`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Get_elements(
    status: *const MpiStatus,
    datatype: Handle,
    count: *mut c_int,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Get_elements", |st| {
        if status.is_null() {
            return Err(null_arg("the status"));
        }
        // SAFETY: the caller's contract.
        let bytes = unsafe { (*status).bytes() };
        let n = derived::elements_in(st, bytes, datatype)?
            .and_then(|n| c_int::try_from(n).ok())
            .unwrap_or(abi::UNDEFINED);
        // SAFETY: the caller's contract.
        unsafe { put(count, n) };
        Ok(())
    })
}

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

//! Completing arrays of requests, the standard's "Multiple Completions" (chapter
//! "Point-to-Point Communication"): `MPI_Waitall`, `MPI_Testall`, `MPI_Waitany`,
//! `MPI_Testany`, `MPI_Waitsome` and `MPI_Testsome`.
//!
//! They are loops over the one-request completion of `requests` (`complete`), driving the
//! device's progress between passes, so that a request of any kind completes in a set as it
//! would alone. Where a function fills an array of statuses, a request's error goes into its
//! own status and the call fails with `MPI_ERR_IN_STATUS`, as the standard asks.

use std::ffi::c_int;

use ch4_core::{ErrorKind, Status};

use crate::abi::{self, class, Handle, MpiStatus};
use crate::call::{call, hot_call, null_arg, put};
use crate::datatype;
use crate::errors;
use crate::requests::{
    active, after, complete, complete_at, decode, peek_req, status_error, INACTIVE,
};
use crate::state::State;

/// Completes every request of `requests` (`test`: only if all are complete), filling
/// `statuses`; an error of any is `MPI_ERR_IN_STATUS`, each status carrying its own.
///
/// # Safety
/// `requests` has `count` handles; `statuses` is null or has `count` writable statuses.
unsafe fn complete_all<const MT: bool>(
    st: &State,
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
        st.progress()?;
        for &req in &decoded {
            if let Some(None) = peek_req(st, req)? {
                return Ok(false);
            }
        }
    }
    let mut failed = None;
    for (i, req) in decoded.into_iter().enumerate() {
        let done = complete_at::<MT>(st, req, true)?.unwrap_or(Status::EMPTY);
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

/// [`complete_all`], waiting, for `MPI_Waitall`.
///
/// # Safety
/// As [`complete_all`].
#[inline(always)]
unsafe fn wait_all<const MT: bool>(
    st: &State,
    count: c_int,
    requests: *mut Handle,
    statuses: *mut MpiStatus,
) -> ch4::Result<()> {
    // SAFETY: the caller's contract.
    unsafe { complete_all::<MT>(st, count, requests, statuses, false) }.map(drop)
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
    // SAFETY: the caller's contract.
    unsafe {
        hot_call!(
            "MPI_Waitall",
            abi::COMM_WORLD,
            wait_all(count, array_of_requests, array_of_statuses)
        )
    }
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
        let all = unsafe {
            if st.single() {
                complete_all::<false>(st, count, array_of_requests, array_of_statuses, true)
            } else {
                complete_all::<true>(st, count, array_of_requests, array_of_statuses, true)
            }
        }?;
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
        let mut live = Vec::new();
        for (i, &c) in reqs.iter().enumerate() {
            let req = decode(c)?;
            if active(st, req)? {
                live.push((i, req));
            }
        }
        if live.is_empty() {
            // SAFETY: the caller's contract.
            unsafe {
                put(index, abi::UNDEFINED);
                MpiStatus::put(status, &INACTIVE);
            }
            return Ok(());
        }
        let mut idle = 0u32;
        loop {
            for &(i, req) in &live {
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
            idle = if st.progress()? == 0 { idle + 1 } else { 0 };
            st.pause(idle)?;
        }
    })
}

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

/// Completes whatever of `reqs` is done (`blocking`: at least one, waiting for it), writing
/// their indices and statuses; `MPI_UNDEFINED` when none is active.
///
/// # Safety
/// `indices` and `statuses` (unless null) have room for `reqs.len()` entries.
unsafe fn some(
    st: &State,
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
        idle = if st.progress()? == 0 { idle + 1 } else { 0 };
        st.pause(idle)?;
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
        st.progress()?;
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
        st.progress()?;
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
                MpiStatus::put(status, &INACTIVE);
            }
        }
        Ok(())
    })
}

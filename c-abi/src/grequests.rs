//! Generalized requests, the standard's "Generalized Requests" (MPI 4.1, section 13.2):
//! `MPI_Grequest_start` and `MPI_Grequest_complete`, and what the completion functions do with
//! such a request.
//!
//! A generalized request is the program's: it says when the operation is done
//! (`MPI_Grequest_complete`), and MPI asks it, through its three callbacks, for the status
//! (`query_fn`), to clean up (`free_fn`) and to cancel (`cancel_fn`). The rules of section
//! 13.2, which this module keeps:
//!
//! - the call that completes the request (`MPI_Wait`, `MPI_Test`, any of the functions over
//!   sets) calls `query_fn` and then `free_fn`, and returns `query_fn`'s error;
//!   `MPI_Request_get_status` (and its `_any`/`_all`/`_some` forms) on a complete request calls
//!   `query_fn` only;
//! - `MPI_Request_free` before completion defers `free_fn` to `MPI_Grequest_complete`
//!   (whichever of the two comes last calls it), and no `query_fn` is called then;
//! - `MPI_Cancel` calls `cancel_fn` with whether the request is already complete.
//!
//! The callbacks run outside the library's locks and its gate (`state::callback`), so they may
//! call MPI, as `MPI_Status_set_elements` in a `query_fn` does.
//!
//! The library uses the same kind of request for a nonblocking flush of a buffered-send buffer
//! (`MPI_Buffer_iflush`): complete once the messages it waits for have left, with nothing of
//! the program's to call.

use std::ffi::{c_int, c_void};

use ch4_core::{ErrorKind, Status};

use crate::abi::{self, class, Handle, MpiStatus, Req};
use crate::call::{call, null_arg};
use crate::errors;
use crate::pt2pt::buffered::{flushed, Owner};
use crate::requests::decode;
use crate::state::State;

/// `MPI_Grequest_query_function`.
pub(crate) type QueryFn = unsafe extern "C" fn(*mut c_void, *mut MpiStatus) -> c_int;
/// `MPI_Grequest_free_function`.
pub(crate) type FreeFn = unsafe extern "C" fn(*mut c_void) -> c_int;
/// `MPI_Grequest_cancel_function`.
pub(crate) type CancelFn = unsafe extern "C" fn(*mut c_void, c_int) -> c_int;

/// What a generalized request stands for.
#[derive(Clone, Copy)]
enum Kind {
    /// The program's, with its callbacks (a null one does nothing) and their extra state.
    Program {
        query: Option<QueryFn>,
        free: Option<FreeFn>,
        cancel: Option<CancelFn>,
        extra: usize,
    },
    /// The library's `MPI_Buffer_iflush`: done when every buffered send of `owner`'s buffer
    /// numbered below `mark` has left.
    Flush { owner: Owner, mark: u64 },
}

/// A generalized request.
pub(crate) struct Grequest {
    kind: Kind,
    /// `MPI_Grequest_complete` was called.
    complete: bool,
    /// `MPI_Request_free` was called before it completed.
    freed: bool,
}

#[cold]
fn gone() -> ch4::Error {
    ch4::Error::new(
        ErrorKind::Request,
        "a generalized request that was completed or freed",
    )
}

/// Adds `g`; its handle.
fn add(st: &State, g: Grequest) -> Handle {
    abi::grequest_out(st.grequests.insert(g))
}

/// A nonblocking flush of `owner`'s buffer (`MPI_Buffer_iflush`): its request.
pub(crate) fn start_flush(st: &State, owner: Owner, mark: u64) -> Handle {
    add(
        st,
        Grequest {
            kind: Kind::Flush { owner, mark },
            complete: false,
            freed: false,
        },
    )
}

/// The error class of a callback's return value `code` as the device's kind, which is how a
/// request's error travels in a status. The classes no kind reports come back as
/// `MPI_ERR_OTHER`.
fn kind_of_code(code: c_int) -> Option<ErrorKind> {
    if code == class::SUCCESS {
        return None;
    }
    let class = errors::class_of_code(code).unwrap_or(class::OTHER);
    const KINDS: [ErrorKind; 13] = [
        ErrorKind::Buffer,
        ErrorKind::Count,
        ErrorKind::Tag,
        ErrorKind::Comm,
        ErrorKind::Rank,
        ErrorKind::Request,
        ErrorKind::Arg,
        ErrorKind::Truncate,
        ErrorKind::Internal,
        ErrorKind::InStatus,
        ErrorKind::Pending,
        ErrorKind::Exhausted,
        ErrorKind::PeerFailed,
    ];
    Some(
        KINDS
            .into_iter()
            .find(|&k| errors::class_of(k) == class)
            .unwrap_or(ErrorKind::Transport),
    )
}

/// Whether request `i` is complete (a flush: whether its messages have left, checked now).
fn done(st: &State, i: usize) -> ch4::Result<bool> {
    let (kind, complete) = st
        .grequests
        .with(i, |g| (g.kind, g.complete))
        .ok_or_else(gone)?;
    match kind {
        Kind::Program { .. } => Ok(complete),
        Kind::Flush { owner, mark } => flushed(st, owner, mark),
    }
}

/// The program's `query_fn` for request `kind`: the status it fills in, its error as the
/// status's.
fn query(kind: Kind) -> Status {
    let Kind::Program {
        query: Some(f),
        extra,
        ..
    } = kind
    else {
        return Status::EMPTY;
    };
    let mut s = MpiStatus::of(&crate::requests::INACTIVE, 0);
    // SAFETY: the program gave MPI_Grequest_start a function of the ABI's
    // MPI_Grequest_query_function type and this extra state; the status is a live local.
    let rc = crate::state::callback(|| unsafe { f(extra as *mut c_void, &mut s) });
    Status {
        source: s.source,
        tag: s.tag,
        bytes: s.bytes() as usize,
        cancelled: s.internal[2] != 0,
        error: kind_of_code(rc),
    }
}

/// The program's `free_fn` for request `kind`: its error.
fn free_fn(kind: Kind) -> Option<ErrorKind> {
    let Kind::Program {
        free: Some(f),
        extra,
        ..
    } = kind
    else {
        return None;
    };
    // SAFETY: the program gave MPI_Grequest_start a function of the ABI's
    // MPI_Grequest_free_function type and this extra state.
    let rc = crate::state::callback(|| unsafe { f(extra as *mut c_void) });
    kind_of_code(rc)
}

/// Completes request `i` (`blocking`: waits until the program completes it, driving the
/// device's progress meanwhile — another thread may be the one to call
/// `MPI_Grequest_complete`, or a flush's messages may still be on their way): `query_fn`'s
/// status, then `free_fn`, and the request is gone. `None` while it is not complete.
pub(crate) fn complete(st: &State, i: usize, blocking: bool) -> ch4::Result<Option<Status>> {
    let mut idle = 0u32;
    while !done(st, i)? {
        if !blocking {
            st.progress()?;
            return Ok(None);
        }
        idle = if st.progress()? == 0 { idle + 1 } else { 0 };
        st.pause(idle)?;
    }
    let g = st.grequests.remove(i).ok_or_else(gone)?;
    let mut s = query(g.kind);
    let freed = free_fn(g.kind);
    s.error = s.error.or(freed);
    Ok(Some(s))
}

/// Where request `i` stands without completing it (`MPI_Request_get_status`): its status
/// from `query_fn` once complete.
pub(crate) fn peek(st: &State, i: usize) -> ch4::Result<Option<Status>> {
    if !done(st, i)? {
        return Ok(None);
    }
    let kind = st.grequests.with(i, |g| g.kind).ok_or_else(gone)?;
    Ok(Some(query(kind)))
}

/// `MPI_Request_free` of request `i`: `free_fn` now if it is complete, else when
/// `MPI_Grequest_complete` comes. A flush has nothing to clean up: it goes at once, its
/// messages leaving in the background as any buffered send's do.
pub(crate) fn free(st: &State, i: usize) -> ch4::Result<()> {
    let flush = st
        .grequests
        .with(i, |g| matches!(g.kind, Kind::Flush { .. }))
        .ok_or_else(gone)?;
    if flush || done(st, i)? {
        let g = st.grequests.remove(i).ok_or_else(gone)?;
        return match free_fn(g.kind) {
            None => Ok(()),
            Some(k) => Err(ch4::Error::new(k, "the request's free_fn failed")),
        };
    }
    st.grequests.with(i, |g| g.freed = true).ok_or_else(gone)
}

/// `MPI_Cancel` of request `i`: the program's `cancel_fn`, told whether it is complete.
pub(crate) fn cancel(st: &State, i: usize) -> ch4::Result<()> {
    let complete = done(st, i)?;
    let kind = st.grequests.with(i, |g| g.kind).ok_or_else(gone)?;
    let Kind::Program {
        cancel: Some(f),
        extra,
        ..
    } = kind
    else {
        return Ok(());
    };
    // SAFETY: the program gave MPI_Grequest_start a function of the ABI's
    // MPI_Grequest_cancel_function type and this extra state.
    let rc = crate::state::callback(|| unsafe { f(extra as *mut c_void, c_int::from(complete)) });
    match kind_of_code(rc) {
        None => Ok(()),
        Some(k) => Err(ch4::Error::new(k, "the request's cancel_fn failed")),
    }
}

/// `MPI_Grequest_start`.
///
/// # Safety
/// The functions are of the ABI's callback types (or null); `request` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Grequest_start(
    query_fn: Option<QueryFn>,
    free_fn: Option<FreeFn>,
    cancel_fn: Option<CancelFn>,
    extra_state: *mut c_void,
    request: *mut Handle,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Grequest_start", |st| {
        if request.is_null() {
            return Err(null_arg("the request"));
        }
        let h = add(
            st,
            Grequest {
                kind: Kind::Program {
                    query: query_fn,
                    free: free_fn,
                    cancel: cancel_fn,
                    extra: extra_state as usize,
                },
                complete: false,
                freed: false,
            },
        );
        // SAFETY: checked non-null; the caller's contract.
        unsafe { request.write(h) };
        Ok(())
    })
}

/// `MPI_Grequest_complete`: the program's operation is done. A request the program already
/// freed is cleaned up now (its `free_fn`).
#[no_mangle]
pub extern "C" fn MPI_Grequest_complete(request: Handle) -> c_int {
    call(abi::COMM_WORLD, "MPI_Grequest_complete", |st| {
        let Req::Generalized(i) = decode(request)? else {
            return Err(ch4::Error::new(
                ErrorKind::Request,
                "not a generalized request (MPI_Grequest_start)",
            ));
        };
        let freed = st
            .grequests
            .with(i, |g| match g.kind {
                Kind::Program { .. } => {
                    g.complete = true;
                    Ok(g.freed)
                }
                Kind::Flush { .. } => Err(ch4::Error::new(
                    ErrorKind::Request,
                    "a request of MPI_Buffer_iflush is the library's to complete",
                )),
            })
            .ok_or_else(gone)??;
        if freed {
            let g = st.grequests.remove(i).ok_or_else(gone)?;
            if let Some(k) = free_fn(g.kind) {
                return Err(ch4::Error::new(k, "the request's free_fn failed"));
            }
        }
        Ok(())
    })
}

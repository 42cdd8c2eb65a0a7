//! Failure notification: a PMIx event handler that records which ranks of this job ended.
//!
//! PMIx calls handlers on its own progress thread, with no pointer of ours (a notification
//! function has no user data), so what it learns goes into process-wide state, read by the
//! client through [`take`]. One client per process is what PMIx supports anyway.

use std::ffi::CStr;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use pmix_sys::*;

use crate::Error;

/// What the server said about another rank of the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerEvent {
    /// The rank ended with exit code 0 (`PMIX_PROC_TERMINATED` with no error).
    Left(u32),
    /// The rank aborted, was killed, or ended without finalizing (`PMIX_ERR_PROC_ABORTED`,
    /// `PMIX_ERR_PROC_TERM_WO_SYNC`, or `PMIX_PROC_TERMINATED` with a nonzero exit code).
    Failed(u32),
}

/// Events not yet taken, and the namespace whose ranks they are about.
struct Watch {
    nspace: Option<pmix_nspace_t>,
    events: Vec<PeerEvent>,
}

static WATCH: Mutex<Watch> = Mutex::new(Watch {
    nspace: None,
    events: Vec::new(),
});

/// The handler's registration reference plus one; 0 while none is registered.
static REGISTERED: AtomicUsize = AtomicUsize::new(0);

fn watch() -> std::sync::MutexGuard<'static, Watch> {
    // A panic while the lock was held cannot leave the list inconsistent: take it as it is.
    WATCH.lock().unwrap_or_else(|p| p.into_inner())
}

/// The status codes that mean a process ended.
const CODES: [pmix_status_t; 3] = [
    PMIX_ERR_PROC_ABORTED,
    PMIX_PROC_TERMINATED,
    PMIX_ERR_PROC_TERM_WO_SYNC,
];

/// Registers the handler for the ranks of `me`'s namespace; `Ok(false)` when the server
/// refuses it (not supported).
pub(crate) fn register(me: &pmix_proc_t) -> Result<bool, Error> {
    if REGISTERED.load(Ordering::Acquire) != 0 {
        return Ok(true);
    }
    watch().nspace = Some(me.nspace);
    let mut codes = CODES;
    // SAFETY: the codes array is valid for the call (PMIx copies it); no info; the handler is
    // an `extern "C"` function that lives for ever. With a null registration callback the call
    // is blocking and returns the handler's reference (>= 0) or an error.
    let rc = unsafe {
        PMIx_Register_event_handler(
            codes.as_mut_ptr(),
            codes.len(),
            null_mut(),
            0,
            Some(on_event),
            None,
            null_mut(),
        )
    };
    if rc == PMIX_ERR_NOT_SUPPORTED {
        return Ok(false);
    }
    if rc < 0 {
        return Err(Error::new("PMIx_Register_event_handler", rc));
    }
    REGISTERED.store(rc as usize + 1, Ordering::Release);
    Ok(true)
}

/// Removes the handler, if registered (before finalize).
pub(crate) fn unregister() {
    let reg = REGISTERED.swap(0, Ordering::AcqRel);
    if reg != 0 {
        // SAFETY: a reference PMIx gave at registration; no callback.
        unsafe { PMIx_Deregister_event_handler(reg - 1, None, null_mut()) };
    }
}

/// The events recorded since the last call.
pub(crate) fn take() -> Vec<PeerEvent> {
    std::mem::take(&mut watch().events)
}

/// The handler PMIx calls on its progress thread. It records the affected rank (the
/// `PMIX_EVENT_AFFECTED_PROC` info if given, else the event's source) when it belongs to this
/// job, and tells PMIx it is done (the `cbfunc`), so that other handlers run. It never
/// unwinds: nothing in it panics (the lock is taken poisoned or not).
unsafe extern "C" fn on_event(
    _registration: usize,
    status: pmix_status_t,
    source: *const pmix_proc_t,
    info: *mut pmix_info_t,
    ninfo: usize,
    _results: *mut pmix_info_t,
    _nresults: usize,
    cbfunc: pmix_event_notification_cbfunc_fn_t,
    cbdata: *mut core::ffi::c_void,
) {
    let mut affected: Option<pmix_proc_t> = None;
    let mut exit_code: Option<i32> = None;
    if !info.is_null() {
        // SAFETY: PMIx passes `ninfo` valid infos for the duration of the call.
        let infos = unsafe { std::slice::from_raw_parts(info, ninfo) };
        for i in infos {
            // SAFETY: an info's key is a NUL-terminated array of PMIX_MAX_KEYLEN + 1 chars.
            let k = unsafe { CStr::from_ptr(i.key.as_ptr()) };
            // SAFETY: each read is of the member the value's type names.
            unsafe {
                if k == key(PMIX_EVENT_AFFECTED_PROC) && i.value.type_ as u32 == PMIX_PROC {
                    let p = *i.value.data.proc_.as_ref();
                    if !p.is_null() {
                        affected = Some(*p);
                    }
                } else if k == key(PMIX_EXIT_CODE) && i.value.type_ as u32 == PMIX_INT {
                    exit_code = Some(*i.value.data.integer.as_ref());
                }
            }
        }
    }
    if affected.is_none() && !source.is_null() {
        // SAFETY: a non-null source is a valid proc for the call.
        affected = Some(unsafe { *source });
    }
    if let Some(p) = affected {
        let mut w = watch();
        if w.nspace.is_some_and(|ns| ns == p.nspace) && p.rank < PMIX_RANK_VALID {
            let event = if status == PMIX_PROC_TERMINATED && exit_code.unwrap_or(0) == 0 {
                PeerEvent::Left(p.rank)
            } else {
                PeerEvent::Failed(p.rank)
            };
            w.events.push(event);
        }
    }
    if let Some(done) = cbfunc {
        // SAFETY: the completion callback PMIx gave, called once with its own cbdata.
        unsafe {
            done(
                PMIX_EVENT_ACTION_COMPLETE,
                null_mut(),
                0,
                None,
                null_mut(),
                cbdata,
            )
        };
    }
}

//! Nonblocking requests and the scope that keeps them sound.
//!
//! A request borrows its buffer for the scope's lifetime `'a`, which outlives the call to
//! [`Context::scope`](crate::Context::scope). The scope records every request it hands out and,
//! before it returns, completes the ones still pending. Soundness therefore does not depend on a
//! request's `Drop` running: `mem::forget` of a request leaves it in the scope's list, and the
//! scope finishes it while the buffer is still borrowed.

use std::cell::RefCell;
use std::marker::PhantomData;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::rc::Rc;

use ch4_core::transport::{Netmod, Shm};
use ch4_core::{Device, ErrorKind, ReqHandle, Result, Status};

use crate::borrow;

/// Where nonblocking requests live; see [`Context::scope`](crate::Context::scope).
pub struct Scope<'a, N: Netmod, S: Shm> {
    pub(crate) dev: Rc<RefCell<Device<N, S>>>,
    pending: RefCell<Vec<ReqHandle>>,
    /// Invariant in `'a`, so buffers of exactly the scope's lifetime are required.
    _buffers: PhantomData<std::cell::Cell<&'a ()>>,
}

thread_local! {
    /// Emptied request lists of finished scopes, kept for the next scope on this thread (a
    /// device and its scopes never leave their thread): a loop of windows of nonblocking
    /// operations then grows no vector. Measured on the message-rate pattern, growing a fresh
    /// list in every scope cost ~60 instructions per message.
    static SPARE_LISTS: RefCell<Vec<Vec<ReqHandle>>> = const { RefCell::new(Vec::new()) };
}

/// Most spare lists kept per thread (nested scopes each hold one), and the largest kept.
const SPARE_LISTS_MAX: usize = 8;
const SPARE_LIST_CAPACITY_MAX: usize = 1 << 16;

pub(crate) fn scope<'a, N: Netmod, S: Shm, R>(
    dev: Rc<RefCell<Device<N, S>>>,
    f: impl FnOnce(&Scope<'a, N, S>) -> R,
) -> R {
    let list = SPARE_LISTS
        .try_with(|s| s.borrow_mut().pop())
        .ok()
        .flatten()
        .unwrap_or_default();
    let scope = Scope {
        dev,
        pending: RefCell::new(list),
        _buffers: PhantomData,
    };
    let result = catch_unwind(AssertUnwindSafe(|| f(&scope)));
    scope.finish_all();
    let mut list = scope.pending.take();
    if list.capacity() <= SPARE_LIST_CAPACITY_MAX {
        list.clear();
        let _ = SPARE_LISTS.try_with(|s| {
            let mut s = s.borrow_mut();
            if s.len() < SPARE_LISTS_MAX {
                s.push(list);
            }
        });
    }
    match result {
        Ok(r) => r,
        Err(panic) => resume_unwind(panic),
    }
}

impl<'a, N: Netmod, S: Shm> Scope<'a, N, S> {
    pub(crate) fn register(&self, h: ReqHandle) -> Request<'a, '_, N, S> {
        self.pending.borrow_mut().push(h);
        Request {
            handle: h,
            scope: self,
            done: false,
        }
    }

    fn forget_handle(&self, h: ReqHandle) {
        let mut p = self.pending.borrow_mut();
        // The newest requests are at the end and are usually the ones finishing.
        if let Some(i) = p.iter().rposition(|&x| x == h) {
            p.swap_remove(i);
        }
    }

    /// Completes every request still pending, as MPI_Waitall would (a receive that never
    /// matches keeps the scope waiting, exactly like a forgotten MPI_Wait). Whatever cannot
    /// finish because it failed (a dead peer) is released so that no transport refers to its
    /// buffer any more.
    fn finish_all(&self) {
        let mut pending = self.pending.borrow_mut();
        if pending.is_empty() {
            return;
        }
        let handles: Vec<ReqHandle> = std::mem::take(&mut *pending);
        drop(pending);
        let Ok(mut dev) = self.dev.try_borrow_mut() else {
            // Unreachable: the scope's closure has returned, so no borrow is live.
            std::process::abort();
        };
        for h in handles {
            if dev.wait_status(h).is_err() {
                dev.release(h);
            }
        }
    }

    /// Waits for all `requests`; the statuses come back in the same order. Every request is
    /// completed even when one fails; the first failure is returned.
    pub fn wait_all(&self, requests: Vec<Request<'a, '_, N, S>>) -> Result<Vec<Status>> {
        let mut out = Vec::with_capacity(requests.len());
        let mut first_err = None;
        // The usual shape: the requests waited for are the newest of the scope, in the order
        // they were started; then the scope's list is simply cut short, with no list of our own.
        let newest = {
            let pending = self.pending.borrow();
            pending.len() >= requests.len()
                && pending[pending.len() - requests.len()..]
                    .iter()
                    .zip(&requests)
                    .all(|(p, r)| *p == r.handle)
        };
        let mut finished = Vec::new();
        {
            let mut dev = borrow(&self.dev)?;
            for mut r in requests {
                r.done = true;
                if !newest {
                    finished.push(r.handle);
                }
                if r.handle == ReqHandle::DONE {
                    // A send that finished when it started: nothing to ask the device.
                    out.push(Status::EMPTY);
                    continue;
                }
                match dev.wait(r.handle) {
                    Ok(st) => out.push(st),
                    Err(e) => {
                        out.push(Status {
                            error: Some(e.kind()),
                            ..Status::EMPTY
                        });
                        first_err.get_or_insert(e);
                    }
                }
            }
        }
        let mut pending = self.pending.borrow_mut();
        if newest {
            let keep = pending.len() - out.len();
            pending.truncate(keep);
        } else {
            // One pass over the scope's list instead of a search per request.
            finished.sort_unstable_by_key(|h| h.to_raw());
            pending.retain(|h| {
                finished
                    .binary_search_by_key(&h.to_raw(), |f| f.to_raw())
                    .is_err()
            });
        }
        drop(pending);
        match first_err {
            None => Ok(out),
            Some(e) => Err(e),
        }
    }

    /// Waits until one of `requests` completes, removes it from the vector and returns its
    /// former index and status. `Err(Request)` on an empty vector.
    pub fn wait_any(&self, requests: &mut Vec<Request<'a, '_, N, S>>) -> Result<(usize, Status)> {
        if requests.is_empty() {
            return Err(ch4_core::Error::new(
                ErrorKind::Request,
                "wait_any on no requests",
            ));
        }
        let mut idle = 0u32;
        loop {
            for i in 0..requests.len() {
                if let Some(st) = requests[i].poll_done()? {
                    drop(requests.swap_remove(i));
                    return Ok((i, st));
                }
            }
            let n = borrow(&self.dev)?.progress()?;
            idle = if n == 0 { idle + 1 } else { 0 };
            if idle > 64 {
                std::thread::yield_now();
            }
        }
    }

    /// Makes progress once and removes every completed request from `requests`, returning
    /// their former indices and results (MPI_Testsome).
    pub fn test_some(
        &self,
        requests: &mut Vec<Request<'a, '_, N, S>>,
    ) -> Result<Vec<(usize, Result<Status>)>> {
        borrow(&self.dev)?.progress()?;
        let mut done = Vec::new();
        let mut i = 0;
        let mut original = 0;
        while i < requests.len() {
            let finished = {
                let dev = borrow(&self.dev)?;
                dev.is_done(requests[i].handle)?
            };
            if finished {
                let r = requests.remove(i);
                done.push((original, r.wait()));
            } else {
                i += 1;
            }
            original += 1;
        }
        Ok(done)
    }
}

/// A pending nonblocking operation whose buffer is borrowed for `'a`.
///
/// Finish it with [`Request::wait`] or [`Request::test`]. Dropping it without doing so leaves it
/// to the scope, which completes it before the scope returns.
#[must_use = "a request must be waited for; unattended, its scope finishes it at the end"]
pub struct Request<'a, 's, N: Netmod, S: Shm> {
    handle: ReqHandle,
    scope: &'s Scope<'a, N, S>,
    done: bool,
}

impl<N: Netmod, S: Shm> Request<'_, '_, N, S> {
    /// Blocks until the operation completes; an error status (truncation, ready send without
    /// receive, dead peer) is returned as that error.
    pub fn wait(mut self) -> Result<Status> {
        self.done = true;
        let r = borrow(&self.scope.dev)?.wait(self.handle);
        self.scope.forget_handle(self.handle);
        r
    }

    /// Makes progress once; `Ok(Some(status))` when the operation has completed (the request is
    /// then spent: a later call is a `Request` error).
    pub fn test(&mut self) -> Result<Option<Status>> {
        if self.done {
            return Err(ch4_core::Error::new(
                ErrorKind::Request,
                "request already completed",
            ));
        }
        let r = borrow(&self.scope.dev)?.test(self.handle);
        match r {
            Ok(None) => Ok(None),
            other => {
                self.done = true;
                self.scope.forget_handle(self.handle);
                other
            }
        }
    }

    fn poll_done(&mut self) -> Result<Option<Status>> {
        let finished = borrow(&self.scope.dev)?.is_done(self.handle)?;
        if !finished {
            return Ok(None);
        }
        self.done = true;
        let st = borrow(&self.scope.dev)?.wait(self.handle);
        self.scope.forget_handle(self.handle);
        st.map(Some)
    }

    /// Asks to cancel the operation (MPI_Cancel). Still wait for the request; its status's
    /// `cancelled` says whether the cancel took effect.
    pub fn cancel(&self) -> Result<()> {
        borrow(&self.scope.dev)?.cancel(self.handle)
    }
}

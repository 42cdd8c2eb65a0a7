//! Nonblocking requests, the scope that keeps them sound, and request sets.
//!
//! A request borrows its buffer for the scope's lifetime `'a`, which outlives the call to
//! [`Context::scope`](crate::Context::scope). The scope records every request it hands out and,
//! before it returns, completes the ones still pending. Soundness therefore does not depend on a
//! request's `Drop` running: `mem::forget` of a request leaves it in the scope's list, and the
//! scope finishes it while the buffer is still borrowed.
//!
//! # Request sets
//!
//! The wait and test families work on a slice of slots, `&mut [Option<Request>]`, as MPI's work
//! on an array of request handles. One convention holds for all of them:
//!
//! - an index is a position in the slice you pass, and it never shifts: a request that
//!   completes — well or with an error — is taken out of its slot, which becomes `None`
//!   (MPI_REQUEST_NULL);
//! - a `None` slot is inactive and skipped, and so is a request already finished with
//!   [`Request::test`];
//! - every completed request reports its own outcome: `Ok(status)`, or the error it completed
//!   with, whose [`Error::status`](crate::Error::status) keeps source, tag and the bytes that
//!   arrived (MPI_ERR_IN_STATUS: one request's error never hides another's result);
//! - the outer `Result` fails only when the call itself cannot proceed (the device is busy or
//!   failing, a request belongs to another rank's device), and then no slot has changed.
//!
//! [`Scope::wait_all`] consumes its requests instead (slots or plain requests) and returns every
//! status in order.

use std::cell::{Cell, RefCell};
use std::marker::PhantomData;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

use ch4_core::blocking::{DeviceLock, Shared};
use ch4_core::device::status_result;
use ch4_core::transport::{Netmod, Shm};
use ch4_core::{Error, ErrorKind, ReqHandle, Result, Status};

use crate::{RankState, SelectedNetmod, SelectedShm, Single, ThreadLevel};

/// Where nonblocking requests live; see [`Context::scope`](crate::Context::scope).
pub struct Scope<'a, N: Netmod = SelectedNetmod, S: Shm = SelectedShm, L: ThreadLevel = Single> {
    pub(crate) core: ScopeCore<N, S, L>,
    /// Invariant in `'a`, so buffers of exactly the scope's lifetime are required.
    _buffers: PhantomData<std::cell::Cell<&'a ()>>,
}

/// The part of a scope its requests refer to: the rank and the list of pending requests.
pub(crate) struct ScopeCore<N: Netmod, S: Shm, L: ThreadLevel> {
    pub(crate) rank: L::Shared<RankState<N, S, L>>,
    /// The handles of the scope's requests not yet finished.
    pending: RefCell<Vec<ReqHandle>>,
    /// The VCI whose device holds every request of `pending` ([`NO_VCI_YET`] before the
    /// first), or [`MIXED`] once the scope has had requests on two VCIs: a handle names a
    /// request of one VCI's device. Nearly every scope uses one communicator, or several on
    /// one VCI, so its list stays one of handles alone, as below the multiple level, and a
    /// request costs one compare more there (a list of VCIs beside it cost ~25 instructions a
    /// message in the facade's window benchmark). Unused below the multiple level: one VCI.
    vci: Cell<u32>,
    /// Once [`MIXED`], the VCI of each of `pending` (same index).
    pending_vcis: RefCell<Vec<u32>>,
}

/// [`ScopeCore::vci`] before the scope's first request.
const NO_VCI_YET: u32 = u32::MAX;
/// [`ScopeCore::vci`] of a scope with requests on several VCIs.
const MIXED: u32 = u32::MAX - 1;

/// A request of a scope not yet finished: its handle on the device of its VCI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pending {
    handle: ReqHandle,
    vci: usize,
}

thread_local! {
    /// Emptied request lists of finished scopes, kept for the next scope on this thread (a
    /// device and its scopes never leave their thread): a loop of windows of nonblocking
    /// operations then grows no vector. Measured on the message-rate pattern, growing a fresh
    /// list in every scope cost ~60 instructions per message.
    static SPARE_LISTS: RefCell<Vec<Vec<ReqHandle>>> = const { RefCell::new(Vec::new()) };
}

/// A list from `spares`, or a new one.
fn spare<T>(spares: &'static std::thread::LocalKey<RefCell<Vec<Vec<T>>>>) -> Vec<T> {
    spares
        .try_with(|s| s.borrow_mut().pop())
        .ok()
        .flatten()
        .unwrap_or_default()
}

/// Keeps `list`, emptied, for a later scope on this thread.
fn keep<T>(spares: &'static std::thread::LocalKey<RefCell<Vec<Vec<T>>>>, mut list: Vec<T>) {
    if list.capacity() <= SPARE_LIST_CAPACITY_MAX && list.capacity() > 0 {
        list.clear();
        let _ = spares.try_with(|s| {
            let mut s = s.borrow_mut();
            if s.len() < SPARE_LISTS_MAX {
                s.push(list);
            }
        });
    }
}

/// Most spare lists kept per thread (nested scopes each hold one), and the largest kept.
const SPARE_LISTS_MAX: usize = 8;
const SPARE_LIST_CAPACITY_MAX: usize = 1 << 16;

pub(crate) fn scope<'a, N: Netmod, S: Shm, L: ThreadLevel, R>(
    rank: L::Shared<RankState<N, S, L>>,
    f: impl FnOnce(&Scope<'a, N, S, L>) -> R,
) -> R {
    let scope = Scope {
        core: ScopeCore {
            rank,
            pending: RefCell::new(spare(&SPARE_LISTS)),
            vci: Cell::new(if L::YIELDS { NO_VCI_YET } else { 0 }),
            pending_vcis: RefCell::new(Vec::new()),
        },
        _buffers: PhantomData,
    };
    let result = catch_unwind(AssertUnwindSafe(|| f(&scope)));
    scope.core.finish_all();
    keep(&SPARE_LISTS, scope.core.pending.take());
    match result {
        Ok(r) => r,
        Err(panic) => resume_unwind(panic),
    }
}

impl<N: Netmod, S: Shm, L: ThreadLevel> ScopeCore<N, S, L> {
    /// Whether the scope's requests are on several VCIs, so that `pending_vcis` says whose
    /// each is (never below the multiple level).
    #[inline(always)]
    fn mixed(&self) -> bool {
        L::YIELDS && self.vci.get() == MIXED
    }

    /// The VCI all of the scope's requests are on: 0 below the multiple level, before the
    /// first request, and once the scope mixes VCIs (then `pending_vcis` says whose each is).
    #[inline(always)]
    fn home_vci(&self) -> usize {
        match self.vci.get() {
            _ if !L::YIELDS => 0,
            NO_VCI_YET | MIXED => 0,
            one => one as usize,
        }
    }

    /// The VCI of the scope's request at `i` of `pending`.
    #[inline(always)]
    fn vci_at(&self, i: usize, vcis: &[u32]) -> usize {
        if self.mixed() {
            vcis.get(i).map_or(0, |&v| v as usize)
        } else {
            self.home_vci()
        }
    }

    /// Lists request `h` of VCI `vci`.
    #[inline(always)]
    fn register(&self, vci: usize, h: ReqHandle) {
        if L::YIELDS && self.vci.get() != vci as u32 {
            self.register_on_another_vci(vci, h);
        } else {
            self.pending.borrow_mut().push(h);
        }
    }

    /// [`ScopeCore::register`] of the scope's first request, or of one on a VCI other than
    /// the scope's so far (which makes the scope mixed), or of any request of a mixed scope.
    #[cold]
    #[inline(never)]
    fn register_on_another_vci(&self, vci: usize, h: ReqHandle) {
        let mut p = self.pending.borrow_mut();
        let mut vcis = self.pending_vcis.borrow_mut();
        match self.vci.get() {
            NO_VCI_YET => self.vci.set(vci as u32),
            MIXED => vcis.push(vci as u32),
            one => {
                vcis.clear();
                vcis.resize(p.len(), one);
                vcis.push(vci as u32);
                self.vci.set(MIXED);
            }
        }
        p.push(h);
    }

    fn forget_handle(&self, vci: usize, handle: ReqHandle) {
        let mut p = self.pending.borrow_mut();
        // The newest requests are at the end and are usually the ones finishing.
        if !self.mixed() {
            if L::YIELDS && self.vci.get() != vci as u32 {
                // Not a request of this scope: all of its are on another VCI.
                return;
            }
            if let Some(i) = p.iter().rposition(|&x| x == handle) {
                p.swap_remove(i);
            }
            return;
        }
        let mut vcis = self.pending_vcis.borrow_mut();
        let found = p
            .iter()
            .zip(vcis.iter())
            .rposition(|(&x, &v)| x == handle && v as usize == vci);
        if let Some(i) = found {
            p.swap_remove(i);
            vcis.swap_remove(i);
        }
    }

    /// The scope's unfinished requests with their VCIs, taken off its lists.
    fn take_all(&self) -> Vec<Pending> {
        let handles = std::mem::take(&mut *self.pending.borrow_mut());
        let vcis = std::mem::take(&mut *self.pending_vcis.borrow_mut());
        handles
            .into_iter()
            .enumerate()
            .map(|(i, handle)| Pending {
                handle,
                vci: self.vci_at(i, &vcis),
            })
            .collect()
    }

    /// Completes every request still pending, as MPI_Waitall would (a receive that never
    /// matches keeps the scope waiting, exactly like a forgotten MPI_Wait). Whatever cannot
    /// finish because it failed (a dead peer) is released so that no transport refers to its
    /// buffer any more.
    fn finish_all(&self) {
        if self.pending.borrow().is_empty() {
            return;
        }
        let handles = self.take_all();
        if L::YIELDS {
            // Other threads call meanwhile: wait letting go of the device between polls. A
            // device that cannot be entered any more has finalized and never runs again.
            for p in handles {
                wait_one_shared(&Shared(&self.rank.vci(p.vci)), p.handle);
            }
            return;
        }
        // One VCI below the multiple level.
        let Ok(mut dev) = self.rank.device(0) else {
            // The closure has returned, so no borrow of ours is live: the rank has finalized
            // inside the scope. Its device never runs again, so nothing will touch the
            // buffers of the requests it still holds.
            return;
        };
        for Pending { handle, .. } in handles {
            if dev.wait_status(handle).is_err() {
                dev.release(handle);
            }
        }
    }
}

impl<'a, N: Netmod, S: Shm, L: ThreadLevel> Scope<'a, N, S, L> {
    #[inline(always)]
    pub(crate) fn register(&self, vci: usize, h: ReqHandle) -> Request<'_, N, S, L> {
        self.core.register(vci, h);
        Request {
            handle: h,
            vci: vci as u32,
            scope: &self.core,
            done: false,
        }
    }

    pub(crate) fn rank(&self) -> &L::Shared<RankState<N, S, L>> {
        &self.core.rank
    }

    /// Waits for every request and returns every status, in the order given (MPI_Waitall).
    /// Takes plain requests (`vec![r, t]`, `[r, t]`) or slots (`Option<Request>`: a `None`
    /// slot gives an empty status; from a slice of slots, pass
    /// `slots.iter_mut().map(Option::take).collect::<Vec<_>>()`). Every request is completed
    /// even when some fail; if any failed, the error is [`ErrorKind::InStatus`] and
    /// [`Error::statuses`] holds every status, each failed one with its `error` set.
    pub fn wait_all<'s, R>(&'s self, requests: impl Into<Vec<R>>) -> Result<Vec<Status>>
    where
        R: WaitAllItem<'s, N, S, L>,
    {
        let requests: Vec<R> = requests.into();
        let mut out = Vec::with_capacity(requests.len());
        // The usual shape: the requests waited for are the newest of the scope, in the order
        // they were started; then the scope's list is simply cut short, with no list of our own.
        let newest = {
            let pending = self.core.pending.borrow();
            let vcis = self.core.pending_vcis.borrow();
            let from = pending.len().wrapping_sub(requests.len());
            // A spent request's handle was taken off the list, so it cannot match.
            let listed = |p: &ReqHandle, r: &R| {
                r.peek()
                    .is_some_and(|r| *p == r.handle && std::ptr::eq(r.scope, &self.core))
            };
            pending.len() >= requests.len()
                && if self.core.mixed() {
                    pending[from..]
                        .iter()
                        .zip(&vcis[from..])
                        .zip(&requests)
                        .all(|((p, &v), r)| listed(p, r) && r.peek().is_some_and(|r| r.vci == v))
                } else {
                    // Every request of the scope is on its VCI.
                    pending[from..]
                        .iter()
                        .zip(&requests)
                        .all(|(p, r)| listed(p, r))
                }
        };
        let mut finished = Vec::new();
        let mut any_failed = false;
        if L::YIELDS {
            // Fails here, changing nothing, if the device cannot be entered at all.
            let first = self.core.home_vci();
            let mut held = HeldVci {
                rank: &self.core.rank,
                vci: first,
                dev: Some(self.core.rank.device(first)?),
            };
            if newest {
                for r in requests.into_iter().flat_map(WaitAllItem::take) {
                    out.push(held.wait(r.pending()));
                }
            } else {
                self.wait_all_others(&mut |p| held.wait(p), requests, &mut finished, &mut out);
            }
            any_failed = out.iter().any(|st| st.error.is_some());
        } else {
            let mut dev = self.core.rank.device(0)?;
            if newest {
                // Every item holds a live request of this scope (a spent one's handle is off
                // the list, so it could not have matched).
                for r in requests.into_iter().flat_map(WaitAllItem::take) {
                    let st = wait_one(&mut dev, r.handle);
                    any_failed |= st.error.is_some();
                    out.push(st);
                }
            } else {
                self.wait_all_others(
                    &mut |p: Pending| wait_one(&mut dev, p.handle),
                    requests,
                    &mut finished,
                    &mut out,
                );
                any_failed = out.iter().any(|st| st.error.is_some());
            }
        }
        let mut pending = self.core.pending.borrow_mut();
        let mut vcis = self.core.pending_vcis.borrow_mut();
        if newest {
            let keep = pending.len() - out.len();
            pending.truncate(keep);
            vcis.truncate(keep);
        } else {
            // One pass over the scope's list instead of a search per request.
            finished.sort_unstable_by_key(|p| (p.handle.to_raw(), p.vci));
            let done = |handle: ReqHandle, vci: usize| {
                finished
                    .binary_search_by_key(&(handle.to_raw(), vci), |f| (f.handle.to_raw(), f.vci))
                    .is_ok()
            };
            if self.core.mixed() {
                let mut kept = 0;
                for i in 0..pending.len() {
                    if !done(pending[i], vcis[i] as usize) {
                        pending[kept] = pending[i];
                        vcis[kept] = vcis[i];
                        kept += 1;
                    }
                }
                pending.truncate(kept);
                vcis.truncate(kept);
            } else {
                let vci = self.core.home_vci();
                pending.retain(|&h| !done(h, vci));
            }
        }
        drop((pending, vcis));
        if any_failed {
            return Err(in_status(out));
        }
        Ok(out)
    }

    /// [`Scope::wait_all`] for any other set: requests of this scope in any order, spent ones,
    /// inactive slots, requests of enclosing scopes. The handles taken off this scope's list
    /// go to `finished`.
    #[inline(never)]
    fn wait_all_others<'s, R: WaitAllItem<'s, N, S, L>>(
        &'s self,
        wait: &mut impl FnMut(Pending) -> Status,
        requests: Vec<R>,
        finished: &mut Vec<Pending>,
        out: &mut Vec<Status>,
    ) {
        for r in requests {
            let st = match r.take() {
                Some(mut r) if !r.done => {
                    r.done = true;
                    if std::ptr::eq(r.scope, &self.core) {
                        finished.push(r.pending());
                        wait(r.pending())
                    } else if L::same(&r.scope.rank, &self.core.rank) {
                        // A request of an enclosing scope of the same rank.
                        r.scope.forget_handle(r.vci as usize, r.handle);
                        wait(r.pending())
                    } else {
                        // Its handle names a request of another rank's device: left to
                        // its own scope.
                        Status {
                            error: Some(ErrorKind::Arg),
                            ..Status::EMPTY
                        }
                    }
                }
                _ => Status::EMPTY,
            };
            out.push(st);
        }
    }

    /// Completes every active request of `slots` if all of them have completed, after one
    /// round of progress (MPI_Testall): `Ok(Some(statuses))` in slot order (an empty status for
    /// an inactive slot), every slot then `None`; `Ok(None)`, with no slot changed, while any
    /// is pending. When some completed with errors the error is [`ErrorKind::InStatus`] with
    /// every status ([`Error::statuses`]), and every slot is `None` as well.
    pub fn test_all(
        &self,
        slots: &mut [Option<Request<'_, N, S, L>>],
    ) -> Result<Option<Vec<Status>>> {
        self.check_same_rank(slots)?;
        self.progress_set(slots)?;
        for r in active(slots) {
            if !self.is_done(r)? {
                return Ok(None);
            }
        }
        let mut out = Vec::with_capacity(slots.len());
        for slot in slots.iter_mut() {
            let outcome = match slot.as_ref().filter(|r| !r.done) {
                None => Ok(Status::EMPTY),
                Some(_) => self.take(slot),
            };
            *slot = None;
            out.push(outcome.unwrap_or_else(|e| {
                e.status().copied().unwrap_or(Status {
                    error: Some(e.kind()),
                    ..Status::EMPTY
                })
            }));
        }
        if out.iter().any(|st| st.error.is_some()) {
            return Err(in_status(out));
        }
        Ok(Some(out))
    }

    /// Waits until one active request of `slots` completes, takes it out of its slot and
    /// returns its index and outcome (MPI_Waitany); `Ok(None)` when no slot is active.
    pub fn wait_any(
        &self,
        slots: &mut [Option<Request<'_, N, S, L>>],
    ) -> Result<Option<(usize, Result<Status>)>> {
        self.check_same_rank(slots)?;
        let Some(first_vci) = active(slots).next().map(|r| r.vci as usize) else {
            return Ok(None);
        };
        let mut idle = 0u32;
        loop {
            if let Some(i) = self.first_done(slots)? {
                return Ok(Some((i, self.take(&mut slots[i]))));
            }
            if self.progress_set(slots)? == 0 {
                idle += 1;
                if L::YIELDS {
                    self.core.rank.vci(first_vci).between_polls(idle);
                } else {
                    self.core.rank.device(first_vci)?.pause(idle, None);
                }
            } else {
                idle = 0;
            }
        }
    }

    /// Makes one round of progress; if an active request of `slots` has completed, takes it
    /// out of its slot and returns its index and outcome (MPI_Testany). `Ok(None)` when none
    /// has (including when no slot is active).
    pub fn test_any(
        &self,
        slots: &mut [Option<Request<'_, N, S, L>>],
    ) -> Result<Option<(usize, Result<Status>)>> {
        self.check_same_rank(slots)?;
        if self.first_done(slots)?.is_none() {
            self.progress_set(slots)?;
        }
        Ok(self
            .first_done(slots)?
            .map(|i| (i, self.take(&mut slots[i]))))
    }

    /// Waits until at least one active request of `slots` completes, then takes every
    /// completed one out of its slot and returns their indices and outcomes in slot order
    /// (MPI_Waitsome). Empty when no slot is active.
    pub fn wait_some(
        &self,
        slots: &mut [Option<Request<'_, N, S, L>>],
    ) -> Result<Vec<(usize, Result<Status>)>> {
        if let Some((i, first)) = self.wait_any(slots)? {
            let mut out = vec![(i, first)];
            self.collect_done(slots, &mut out)?;
            out.sort_unstable_by_key(|(i, _)| *i);
            return Ok(out);
        }
        Ok(Vec::new())
    }

    /// Makes one round of progress, then takes every completed request out of its slot and
    /// returns their indices and outcomes in slot order (MPI_Testsome); empty when none has
    /// completed.
    pub fn test_some(
        &self,
        slots: &mut [Option<Request<'_, N, S, L>>],
    ) -> Result<Vec<(usize, Result<Status>)>> {
        self.check_same_rank(slots)?;
        self.progress_set(slots)?;
        let mut out = Vec::new();
        self.collect_done(slots, &mut out)?;
        Ok(out)
    }

    /// One round of progress on each VCI that holds an active request of `slots` (below the
    /// multiple level, the one VCI); on a VCI where it found nothing to do, fails the requests
    /// whose peers are gone (as `Device::test` does). Returns the events handled.
    fn progress_set(&self, slots: &[Option<Request<'_, N, S, L>>]) -> Result<usize> {
        let mut handled = 0;
        let mut done_vcis: u64 = 0;
        for r in active(slots) {
            // A set's requests are nearly always on one VCI or a few: each is polled once
            // (VCIs past 64 share bits and may be polled again, which is harmless).
            let bit = 1u64 << (r.vci % 64);
            if done_vcis & bit != 0 {
                continue;
            }
            done_vcis |= bit;
            let mut dev = self.core.rank.device(r.vci as usize)?;
            let n = dev.progress()?;
            if n == 0 {
                for q in active(slots).filter(|q| q.vci == r.vci) {
                    dev.fail_if_peer_gone(q.handle);
                }
            }
            handled += n;
        }
        Ok(handled)
    }

    /// Whether active request `r` has completed (a handle its device no longer knows has).
    fn is_done(&self, r: &Request<'_, N, S, L>) -> Result<bool> {
        Ok(self
            .core
            .rank
            .device(r.vci as usize)?
            .is_done(r.handle)
            .unwrap_or(true))
    }

    /// The index of the first active request that has completed.
    fn first_done(&self, slots: &[Option<Request<'_, N, S, L>>]) -> Result<Option<usize>> {
        for (i, slot) in slots.iter().enumerate() {
            if let Some(r) = slot.as_ref().filter(|r| !r.done) {
                if self.is_done(r)? {
                    return Ok(Some(i));
                }
            }
        }
        Ok(None)
    }

    /// Takes every completed active request out of its slot, appending index and outcome.
    fn collect_done(
        &self,
        slots: &mut [Option<Request<'_, N, S, L>>],
        out: &mut Vec<(usize, Result<Status>)>,
    ) -> Result<()> {
        for (i, slot) in slots.iter_mut().enumerate() {
            let done = match slot.as_ref().filter(|r| !r.done) {
                Some(r) => self.is_done(r)?,
                None => false,
            };
            if done {
                out.push((i, self.take(slot)));
            }
        }
        Ok(())
    }

    /// Takes the completed request out of `slot` and returns its outcome.
    fn take(&self, slot: &mut Option<Request<'_, N, S, L>>) -> Result<Status> {
        match slot.take() {
            Some(mut r) => {
                let mut dev = self.core.rank.device(r.vci as usize)?;
                r.take_outcome(&mut dev)
            }
            None => Err(Error::new(ErrorKind::Internal, "took an empty slot")),
        }
    }

    /// Requests of one set must belong to this scope's rank: their handles name requests of
    /// its devices.
    fn check_same_rank(&self, slots: &[Option<Request<'_, N, S, L>>]) -> Result<()> {
        if active(slots).all(|r| L::same(&r.scope.rank, &self.core.rank)) {
            Ok(())
        } else {
            Err(Error::new(
                ErrorKind::Arg,
                "a request of this set belongs to another rank's device",
            ))
        }
    }
}

/// The active requests of a set (slots that hold a request not yet finished).
fn active<'r, 's, N: Netmod, S: Shm, L: ThreadLevel>(
    slots: &'r [Option<Request<'s, N, S, L>>],
) -> impl Iterator<Item = &'r Request<'s, N, S, L>> {
    slots.iter().flatten().filter(|r| !r.done)
}

/// The [`ErrorKind::InStatus`] error of a set whose statuses are `out`, some with errors; the
/// detail names how many failed and the first.
#[cold]
fn in_status(out: Vec<Status>) -> Error {
    let failed = out.iter().filter(|st| st.error.is_some()).count();
    let (first, st) = out
        .iter()
        .enumerate()
        .find(|(_, st)| st.error.is_some())
        .map(|(i, st)| (i, *st))
        .unwrap_or((0, Status::EMPTY));
    let why = status_result(st)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    Error::in_status(
        format!(
            "{failed} of {} requests failed; request {first}: {why}",
            out.len()
        ),
        out,
    )
}

/// The waits of [`Scope::wait_all`] at the multiple level: requests found complete are taken
/// under one hold of their VCI's lock (a window of small messages is mostly complete by then,
/// and all of it on one VCI); a pending one is waited for with the lock let go between polls.
struct HeldVci<'r, N: Netmod, S: Shm, L: ThreadLevel> {
    rank: &'r RankState<N, S, L>,
    /// The VCI of `dev`.
    vci: usize,
    dev: Option<crate::DeviceGuard<'r, N, S, L>>,
}

impl<N: Netmod, S: Shm, L: ThreadLevel> HeldVci<'_, N, S, L> {
    /// Waits for `p` and returns its status, as [`wait_one`] does.
    #[inline(always)]
    fn wait(&mut self, p: Pending) -> Status {
        if p.handle == ReqHandle::DONE {
            return Status::EMPTY;
        }
        if p.vci == self.vci {
            if let Some(dev) = self.dev.as_mut() {
                if let Ok(Some(st)) = dev.take_completed(p.handle) {
                    return st;
                }
            }
        }
        self.wait_slow(p)
    }

    /// [`HeldVci::wait`] of a request on another VCI, or not complete yet.
    #[inline(never)]
    fn wait_slow(&mut self, p: Pending) -> Status {
        if p.vci != self.vci {
            self.dev = None;
            self.vci = p.vci;
            self.dev = self.rank.device(p.vci).ok();
            if let Some(Ok(Some(st))) = self.dev.as_mut().map(|d| d.take_completed(p.handle)) {
                return st;
            }
        }
        self.dev = None;
        let st = wait_one_shared(&Shared(&self.rank.vci(p.vci)), p.handle);
        self.dev = self.rank.device(p.vci).ok();
        st
    }
}

/// Waits for `h` and returns its status, an error status as a value: at once when it has
/// completed (the common case of a window of small messages), else through the device's
/// waiting loop. A request the device cannot finish is released, so nothing refers to its
/// buffer any more.
#[inline(always)]
fn wait_one<N: Netmod, S: Shm>(dev: &mut ch4_core::Device<N, S>, h: ReqHandle) -> Status {
    if h == ReqHandle::DONE {
        // A send that finished when it started: nothing to ask the device.
        return Status::EMPTY;
    }
    if let Ok(Some(st)) = dev.take_completed(h) {
        return st;
    }
    wait_slow(dev, h)
}

/// [`wait_one`] on a device shared by threads, letting go of it between polls.
fn wait_one_shared<D: DeviceLock>(shared: &Shared<'_, D>, h: ReqHandle) -> Status {
    shared.wait_status(h).unwrap_or_else(|e| {
        if let Ok(mut dev) = shared.0.enter() {
            dev.release(h);
        }
        Status {
            error: Some(e.kind()),
            ..Status::EMPTY
        }
    })
}

#[inline(never)]
fn wait_slow<N: Netmod, S: Shm>(dev: &mut ch4_core::Device<N, S>, h: ReqHandle) -> Status {
    dev.wait_status(h).unwrap_or_else(|e| {
        dev.release(h);
        Status {
            error: Some(e.kind()),
            ..Status::EMPTY
        }
    })
}

/// What [`Scope::wait_all`] takes: a request, or a slot that may hold one (`None` is an
/// inactive slot, as MPI_REQUEST_NULL).
pub trait WaitAllItem<'s, N: Netmod, S: Shm, L: ThreadLevel>: sealed::Sealed {
    /// The request, if any, without taking it.
    fn peek(&self) -> Option<&Request<'s, N, S, L>>;
    /// The request, if any.
    fn take(self) -> Option<Request<'s, N, S, L>>;
}

impl<'s, N: Netmod, S: Shm, L: ThreadLevel> WaitAllItem<'s, N, S, L> for Request<'s, N, S, L> {
    #[inline(always)]
    fn peek(&self) -> Option<&Request<'s, N, S, L>> {
        Some(self)
    }
    #[inline(always)]
    fn take(self) -> Option<Request<'s, N, S, L>> {
        Some(self)
    }
}

impl<'s, N: Netmod, S: Shm, L: ThreadLevel> WaitAllItem<'s, N, S, L>
    for Option<Request<'s, N, S, L>>
{
    #[inline(always)]
    fn peek(&self) -> Option<&Request<'s, N, S, L>> {
        self.as_ref()
    }
    #[inline(always)]
    fn take(self) -> Option<Request<'s, N, S, L>> {
        self
    }
}

mod sealed {
    /// Only the facade's request types are [`super::WaitAllItem`]s.
    pub trait Sealed {}
    impl<N: super::Netmod, S: super::Shm, L: super::ThreadLevel> Sealed
        for super::Request<'_, N, S, L>
    {
    }
    impl<N: super::Netmod, S: super::Shm, L: super::ThreadLevel> Sealed
        for Option<super::Request<'_, N, S, L>>
    {
    }
}

/// A pending nonblocking operation whose buffer is borrowed by its scope.
///
/// Finish it with [`Request::wait`] or [`Request::test`], or as part of a set (see the
/// [`Scope`] methods). Dropping it without doing so leaves it to the scope, which completes it
/// before the scope returns.
#[must_use = "a request must be waited for; unattended, its scope finishes it at the end"]
pub struct Request<'s, N: Netmod = SelectedNetmod, S: Shm = SelectedShm, L: ThreadLevel = Single> {
    handle: ReqHandle,
    /// The VCI whose device holds the request (four bytes: the request stays three words).
    vci: u32,
    scope: &'s ScopeCore<N, S, L>,
    done: bool,
}

impl<N: Netmod, S: Shm, L: ThreadLevel> std::fmt::Debug for Request<'_, N, S, L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request")
            .field("handle", &self.handle)
            .field("done", &self.done)
            .finish()
    }
}

impl<N: Netmod, S: Shm, L: ThreadLevel> Request<'_, N, S, L> {
    /// Blocks until the operation completes; an error status (truncation, ready send without
    /// receive, dead peer) is returned as that error, with the status in
    /// [`Error::status`](crate::Error::status).
    pub fn wait(mut self) -> Result<Status> {
        if self.done {
            return Err(spent());
        }
        self.done = true;
        let r = if L::YIELDS {
            // Other threads call meanwhile: wait letting go of the device between polls.
            Shared(&self.scope.rank.vci(self.vci as usize))
                .wait_status(self.handle)
                .and_then(status_result)
        } else {
            self.scope.rank.device(self.vci as usize)?.wait(self.handle)
        };
        self.scope.forget_handle(self.vci as usize, self.handle);
        r
    }

    /// Makes progress once; `Ok(Some(status))` when the operation has completed (the request is
    /// then spent: a later call is a `Request` error, and request sets skip it).
    pub fn test(&mut self) -> Result<Option<Status>> {
        if self.done {
            return Err(spent());
        }
        let r = self.scope.rank.device(self.vci as usize)?.test(self.handle);
        match r {
            Ok(None) => Ok(None),
            other => {
                self.done = true;
                self.scope.forget_handle(self.vci as usize, self.handle);
                other
            }
        }
    }

    /// The outcome of a request that has completed, freeing it.
    fn take_outcome(&mut self, dev: &mut ch4_core::Device<N, S>) -> Result<Status> {
        self.done = true;
        self.scope.forget_handle(self.vci as usize, self.handle);
        match dev.take_completed(self.handle) {
            Ok(Some(st)) => status_result(st),
            Ok(None) => {
                // Not complete after all (cannot happen: asked only of completed ones); it
                // must not stay behind with our buffer.
                dev.release(self.handle);
                Err(Error::new(
                    ErrorKind::Internal,
                    "request taken before completion",
                ))
            }
            Err(e) => Err(e),
        }
    }

    /// Asks to cancel the operation (MPI_Cancel). Still wait for the request; its status's
    /// `cancelled` says whether the cancel took effect.
    pub fn cancel(&self) -> Result<()> {
        if self.done {
            return Err(spent());
        }
        self.scope
            .rank
            .device(self.vci as usize)?
            .cancel(self.handle)
    }

    /// The request as its scope lists it.
    #[inline(always)]
    fn pending(&self) -> Pending {
        Pending {
            handle: self.handle,
            vci: self.vci as usize,
        }
    }

    /// Whether this request has been completed through [`Request::test`] (it is then spent).
    pub fn is_spent(&self) -> bool {
        self.done
    }
}

#[cold]
fn spent() -> Error {
    Error::new(ErrorKind::Request, "request already completed")
}

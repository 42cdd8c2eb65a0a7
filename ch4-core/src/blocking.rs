//! Blocking operations over a device that one thread owns, or that several threads share.
//!
//! A device owned by one thread (`&mut Device`) blocks the simple way: it holds itself for the
//! whole wait and polls. A device shared by threads (MPI_THREAD_MULTIPLE) sits behind a lock,
//! and a thread that blocks must let go of the lock between two polls: the message it waits
//! for may be one another thread of this rank has yet to send, or to receive, and holding the
//! lock through the wait would deadlock them. MPICH's progress loop does the same
//! (`MPID_THREAD_CS_YIELD` around each poll of `MPIDI_progress_test`).
//!
//! [`Blocking`] names what both kinds offer; the collectives ([`crate::coll`]) are written
//! once over it, so they run on either, and the single-threaded build keeps its direct calls.

use std::ops::DerefMut;

use crate::buffer::{RecvBuf, SendBuf};
use crate::comm::CommId;
use crate::device::{backoff, status_result, Device};
use crate::request::ReqHandle;
use crate::transport::{Netmod, Shm};
use crate::types::{Rank, SendMode, Status, Tag};
use crate::Result;

/// Idle polls in a row between two checks for failed peers in a waiting loop (as the device's
/// own loops).
const PEER_CHECK_EVERY: u32 = 256;

/// A device that blocking operations can run on: lent to one thread, or shared behind a lock.
///
/// `coll` selects the communicator's collective context instead of its point-to-point one:
/// only the collectives of this crate pass `true`.
pub trait Blocking {
    /// The netmod of the device.
    type Net: Netmod;
    /// The shared-memory layer of the device.
    type Shm: Shm;

    /// Runs `f` on the device; `f` must not wait (the device may be locked meanwhile).
    fn visit<R>(
        &mut self,
        f: impl FnOnce(&mut Device<Self::Net, Self::Shm>) -> Result<R>,
    ) -> Result<R>;

    /// Blocking send of `data` (MPI_Send and its modes).
    fn send_on(
        &mut self,
        comm: CommId,
        dest: Rank,
        tag: Tag,
        data: &[u8],
        mode: SendMode,
        coll: bool,
    ) -> Result<()>;

    /// Blocking receive into `buf` (MPI_Recv).
    fn recv_on(
        &mut self,
        comm: CommId,
        src: Rank,
        tag: Tag,
        buf: &mut [u8],
        coll: bool,
    ) -> Result<Status>;

    /// Waits for `h` and frees it; an error status is returned as that error. A request that
    /// cannot finish is removed, so nothing refers to its buffer afterwards.
    fn wait_or_abandon(&mut self, h: ReqHandle) -> Result<Status>;

    /// Waits for `h` and frees it; an error status comes back as a value (`status.error`), as
    /// [`Device::wait_status`] (MPI_Wait, which reports the error in the status).
    fn wait_status(&mut self, h: ReqHandle) -> Result<Status>;

    /// Makes progress until `ready` gives an answer: `ready` runs before and after each
    /// progress step, and `idle_check` every 256th step that found nothing to do (to fail
    /// requests whose peers are gone). The waits over several requests (MPI_Waitall,
    /// MPI_Waitany, MPI_Waitsome) and the blocking probes are this loop.
    fn block_until<R>(
        &mut self,
        ready: impl FnMut(&mut Device<Self::Net, Self::Shm>) -> Result<Option<R>>,
        idle_check: impl FnMut(&mut Device<Self::Net, Self::Shm>),
    ) -> Result<R>;
}

impl<N: Netmod, S: Shm> Blocking for Device<N, S> {
    type Net = N;
    type Shm = S;

    #[inline(always)]
    fn visit<R>(&mut self, f: impl FnOnce(&mut Device<N, S>) -> Result<R>) -> Result<R> {
        f(self)
    }

    #[inline(always)]
    fn send_on(
        &mut self,
        comm: CommId,
        dest: Rank,
        tag: Tag,
        data: &[u8],
        mode: SendMode,
        coll: bool,
    ) -> Result<()> {
        Device::send_on(self, comm, dest, tag, data, mode, coll)
    }

    #[inline(always)]
    fn recv_on(
        &mut self,
        comm: CommId,
        src: Rank,
        tag: Tag,
        buf: &mut [u8],
        coll: bool,
    ) -> Result<Status> {
        Device::recv_on(self, comm, src, tag, buf, coll)
    }

    #[inline(always)]
    fn wait_or_abandon(&mut self, h: ReqHandle) -> Result<Status> {
        Device::wait_or_abandon(self, h)
    }

    #[inline(always)]
    fn wait_status(&mut self, h: ReqHandle) -> Result<Status> {
        Device::wait_status(self, h)
    }

    fn block_until<R>(
        &mut self,
        mut ready: impl FnMut(&mut Device<N, S>) -> Result<Option<R>>,
        mut idle_check: impl FnMut(&mut Device<N, S>),
    ) -> Result<R> {
        let mut idle = 0u32;
        loop {
            if let Some(r) = ready(self)? {
                return Ok(r);
            }
            if self.progress()? == 0 {
                idle += 1;
                if idle % PEER_CHECK_EVERY == 0 {
                    idle_check(self);
                }
                if let Some(r) = ready(self)? {
                    return Ok(r);
                }
                self.pause(idle, None);
            } else {
                idle = 0;
            }
        }
    }
}

/// A lock around one device, as the facade's thread levels provide it.
pub trait DeviceLock {
    /// The netmod of the device.
    type Net: Netmod;
    /// The shared-memory layer of the device.
    type Shm: Shm;
    /// Holds the device until dropped.
    type Guard<'a>: DerefMut<Target = Device<Self::Net, Self::Shm>>
    where
        Self: 'a;

    /// Takes the lock, waiting for another thread that holds it; fails instead when this
    /// thread holds it already (a call from inside a reduction operator) or the device is gone.
    fn enter(&self) -> Result<Self::Guard<'_>>;

    /// Between two polls of a wait, with the lock let go: gives a thread that waits for the
    /// lock its turn, then backs off as every waiting loop does ([`backoff`]).
    fn between_polls(&self, idle: u32) {
        backoff(idle)
    }

    /// Whether another thread waits for the lock. A waiting loop keeps the lock between its
    /// polls while no one does (taking and letting go of an uncontended lock costs two atomic
    /// read-modify-writes a poll), and lets go as soon as someone does. The default, `true`,
    /// lets go at every poll.
    fn contended(&self) -> bool {
        true
    }

    /// One idle poll's pause of a waiting loop that keeps the lock ([`backoff`] unless the
    /// lock knows better).
    fn pause(&self, idle: u32) {
        backoff(idle)
    }

    /// The calling thread's wait has gone past its first idle polls (until
    /// [`DeviceLock::long_wait_ends`]): a lock that counts how many threads of its rank wait
    /// at once can then tell a crowded host (more of them than CPUs to run them, where each
    /// should yield soon) from one thread alone (which should spin).
    fn long_wait_begins(&self) {}

    /// The wait [`DeviceLock::long_wait_begins`] marked has ended.
    fn long_wait_ends(&self) {}
}

/// A long wait of the calling thread, marked on its lock until dropped
/// ([`DeviceLock::long_wait_begins`]).
struct LongWait<'l, L: DeviceLock>(&'l L);

impl<'l, L: DeviceLock> LongWait<'l, L> {
    fn begin(lock: &'l L) -> LongWait<'l, L> {
        lock.long_wait_begins();
        LongWait(lock)
    }
}

impl<L: DeviceLock> Drop for LongWait<'_, L> {
    fn drop(&mut self) {
        self.0.long_wait_ends();
    }
}

/// Idle polls a waiting loop keeps an uncontended lock at most before it lets go anyway (and
/// makes its round of [`DeviceLock::between_polls`]).
const KEEP_LOCK_POLLS: u32 = 64;

/// Blocking operations on a shared device that let go of its lock between polls.
pub struct Shared<'l, L: DeviceLock>(pub &'l L);

impl<L: DeviceLock> Shared<'_, L> {
    /// Polls until `ready` gives an answer, with the lock taken for each poll and let go
    /// between two. `ready` runs before each progress step; when progress finds nothing to do,
    /// every 256th time `idle_check` runs (to fail requests whose peers are
    /// gone).
    pub fn block_until<R>(
        &self,
        ready: impl FnMut(&mut Device<L::Net, L::Shm>) -> Result<Option<R>>,
        idle_check: impl FnMut(&mut Device<L::Net, L::Shm>),
    ) -> Result<R> {
        self.block_holding(self.0.enter()?, ready, idle_check, None)
    }

    /// [`Shared::block_until`] with the lock already held as `dev`, and the wait perhaps
    /// marked long already.
    #[inline(never)]
    fn block_holding<'g, R>(
        &'g self,
        mut dev: L::Guard<'g>,
        mut ready: impl FnMut(&mut Device<L::Net, L::Shm>) -> Result<Option<R>>,
        mut idle_check: impl FnMut(&mut Device<L::Net, L::Shm>),
        mut long_wait: Option<LongWait<'g, L>>,
    ) -> Result<R> {
        let mut idle = 0u32;
        loop {
            if let Some(r) = ready(&mut dev)? {
                return Ok(r);
            }
            if dev.progress()? == 0 {
                idle += 1;
                if idle % PEER_CHECK_EVERY == 0 {
                    idle_check(&mut dev);
                }
            } else {
                idle = 0;
            }
            if let Some(r) = ready(&mut dev)? {
                return Ok(r);
            }
            if (idle != 0 && idle % KEEP_LOCK_POLLS == 0) || self.0.contended() {
                drop(dev);
                if idle >= KEEP_LOCK_POLLS && long_wait.is_none() {
                    long_wait = Some(LongWait::begin(self.0));
                }
                self.0.between_polls(idle);
                dev = self.0.enter()?;
            } else {
                self.0.pause(idle);
            }
        }
    }

    /// Waits for `h` and frees it; an error status comes back as a value (`status.error`), as
    /// [`Device::wait_status`].
    pub fn wait_status(&self, h: ReqHandle) -> Result<Status> {
        if h == ReqHandle::DONE {
            return Ok(Status::EMPTY);
        }
        self.block_until(
            |dev| dev.take_completed(h),
            |dev| {
                dev.fail_if_peer_gone(h);
            },
        )
    }

    /// [`Shared::wait_status`], removing the request if the wait itself fails.
    fn wait_status_or_abandon(&self, h: ReqHandle) -> Result<Status> {
        self.wait_status(h).inspect_err(|_| self.abandon(h))
    }

    /// Waits for `h`, which the caller started under its hold of the lock `dev` (one lock
    /// taken for the call, not two, while no other thread wants it); an error status comes
    /// back as a value. A request whose wait fails is removed. The operations are started by
    /// the callers themselves, not by a closure passed here: the compiler kept such a closure
    /// out of line, and a blocking send at the multiple level cost 59 instructions more than
    /// the single-threaded one (its buffer went by the closure's captures).
    #[inline(always)]
    fn wait_started<'g>(
        &'g self,
        dev: L::Guard<'g>,
        h: ReqHandle,
        long_wait: Option<LongWait<'g, L>>,
    ) -> Result<Status> {
        if h == ReqHandle::DONE {
            return Ok(Status::EMPTY);
        }
        self.wait_pending(dev, h, long_wait)
    }

    /// [`Shared::wait_started`] of a request that did not finish when it started.
    #[inline(never)]
    fn wait_pending<'g>(
        &'g self,
        dev: L::Guard<'g>,
        h: ReqHandle,
        long_wait: Option<LongWait<'g, L>>,
    ) -> Result<Status> {
        self.block_holding(
            dev,
            |dev| dev.take_completed(h),
            |dev| {
                dev.fail_if_peer_gone(h);
            },
            long_wait,
        )
        .inspect_err(|_| self.abandon(h))
    }

    /// Removes `h` from the device. If the device cannot be entered any more (finalized), it
    /// never runs again and nothing touches the request's buffer.
    fn abandon(&self, h: ReqHandle) {
        if let Ok(mut dev) = self.0.enter() {
            dev.release(h);
        }
    }
}

impl<L: DeviceLock> Blocking for Shared<'_, L> {
    type Net = L::Net;
    type Shm = L::Shm;

    #[inline]
    fn visit<R>(&mut self, f: impl FnOnce(&mut Device<L::Net, L::Shm>) -> Result<R>) -> Result<R> {
        f(&mut *self.0.enter()?)
    }

    // Inlined whole into the caller, the device's send included, as a single-threaded
    // blocking send is: through calls the buffer went by the stack, and reading it back
    // stalled behind the previous message's stores into the ring (see
    // `Device::isend_inline`).
    #[inline(always)]
    fn send_on(
        &mut self,
        comm: CommId,
        dest: Rank,
        tag: Tag,
        data: &[u8],
        mode: SendMode,
        coll: bool,
    ) -> Result<()> {
        #[allow(unsafe_code)]
        // SAFETY: `data` is borrowed for this whole call, and the request holding it is waited
        // for, or removed from the device when the wait fails, before we return.
        let buf = unsafe { SendBuf::borrowed(data) };
        let mut dev = self.0.enter()?;
        let h = if coll {
            dev.isend_on(comm, dest, tag, buf, mode, coll)?
        } else {
            dev.isend_inline(comm, dest, tag, buf, mode)?
        };
        status_result(self.wait_started(dev, h, None)?).map(drop)
    }

    fn recv_on(
        &mut self,
        comm: CommId,
        src: Rank,
        tag: Tag,
        buf: &mut [u8],
        coll: bool,
    ) -> Result<Status> {
        let mut dev = self.0.enter()?;
        // From an on-node peer, watch for the message without a request while no other
        // thread wants the device, as a single-threaded receive does: letting go of the lock
        // every so often, as any waiting loop here does, but staying on the direct path (one
        // that fell back to a posted request at the first such pause made a one-thread
        // ping-pong post, match and free a request whenever a reply took more than 64 idle
        // polls). Once another thread wants the device, the receive is posted, so that any
        // thread's progress can complete it.
        let mut idle = 0u32;
        let mut long_wait = None;
        loop {
            let mut stopped = None;
            let direct = dev.recv_direct_until(comm, src, tag, buf, coll, &mut idle, |idle| {
                let contended = self.0.contended();
                if idle % KEEP_LOCK_POLLS == 0 || contended {
                    stopped = Some(contended);
                    return true;
                }
                false
            })?;
            if let Some(st) = direct {
                return status_result(st);
            }
            if stopped != Some(false) {
                // Contended, or not a receive the direct path can take.
                break;
            }
            drop(dev);
            long_wait.get_or_insert_with(|| LongWait::begin(self.0));
            self.0.between_polls(idle);
            dev = self.0.enter()?;
        }
        #[allow(unsafe_code)]
        // SAFETY: `buf` is borrowed mutably for this whole call, and the request holding it is
        // waited for, or removed from the device when the wait fails, before we return.
        let rbuf = unsafe { RecvBuf::borrowed(buf) };
        let h = dev.irecv_on(comm, src, tag, rbuf, coll)?;
        status_result(self.wait_started(dev, h, long_wait)?)
    }

    fn wait_or_abandon(&mut self, h: ReqHandle) -> Result<Status> {
        status_result(self.wait_status_or_abandon(h)?)
    }

    fn wait_status(&mut self, h: ReqHandle) -> Result<Status> {
        Shared::wait_status(self, h)
    }

    fn block_until<R>(
        &mut self,
        ready: impl FnMut(&mut Device<L::Net, L::Shm>) -> Result<Option<R>>,
        idle_check: impl FnMut(&mut Device<L::Net, L::Shm>),
    ) -> Result<R> {
        Shared::block_until(self, ready, idle_check)
    }
}

//! Asynchronous progress: a thread per rank that drives every VCI while the program computes,
//! and the wakers of requests awaited as futures.
//!
//! Without it a transfer moves only while the program is inside a ch4 call: a rendezvous send
//! posted before a long computation sends its request-to-send and then waits, its data
//! unmoved, for the next call. MPICH (`MPIR_CVAR_ASYNC_PROGRESS`) and Open MPI run a progress
//! thread for that; so does ch4, at the multiple thread level (the devices sit behind locks
//! that wait, and a blocked call lets go of them between polls), opt in:
//! [`Context::start_async_progress`](crate::Context::start_async_progress) or
//! `CH4_ASYNC_PROGRESS=1`.
//!
//! One thread per rank, not per VCI: it visits every VCI in turn, taking each lock only if no
//! application thread holds it (`try_enter`), so it never makes a caller wait for more than
//! one round of its progress, and a host of few cores gets one more thread per rank, not one
//! per VCI. It polls while the rank has requests; with none it sleeps, and the next call on the
//! rank (any [`RankState::device`](crate::RankState) at the multiple level) wakes it: a load
//! and a branch per call, at the multiple level only. Past a few thousand idle polls with
//! requests outstanding (a receive whose message is far off) it sleeps too, rather than take a
//! core from the computation it exists to overlap; while a thread of the rank waits (and so
//! drives the devices itself) it naps.
//!
//! Sleeping is `ppoll(2)` on an eventfd that calls ring, and on the descriptors the transports
//! name ([`ch4_core::transport::AmTransport::arm_wakeup`]: TCP's sockets and its epoll
//! instance), so a message that arrives over TCP ends the sleep at once. Transports whose
//! arrivals show on no descriptor (shared memory's rings; libfabric and UCX as ch4 opens them,
//! without a wait object) keep the sleep short: 100 us naps with requests out, 10 ms without.
//! When every transport of the rank is armed the thread sleeps up to 1 ms with requests out and
//! 100 ms without, and wakes only for work.
//!
//! Futures: an [`OwnedRequest`](crate::OwnedRequest) awaited while the thread runs registers
//! its task's waker here; after every round that moved something the thread wakes the tasks
//! whose requests completed, and nobody polls. Without the thread, a polled future drives one
//! round of progress itself and asks to be polled again.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::Waker;
use std::thread::JoinHandle;
use std::time::Duration;

use ch4_core::transport::{Arm, Netmod, Shm, WaitFd};
use ch4_core::{Error, ErrorKind, ReqHandle, Result};
use thread_level::{Multiple, RankLock, SleepFlag, ThreadLevel, VciSet};

use crate::{Context, RankState};

/// Idle rounds spent spinning, then yielding, before the thread naps (with requests out).
const SPIN_ROUNDS: u32 = 64;
const YIELD_ROUNDS: u32 = 4096;
/// A nap between idle rounds once past [`YIELD_ROUNDS`], when some transport cannot wake the
/// thread (shared memory's rings); a new call on the rank ends it.
const NAP: Duration = Duration::from_micros(100);
/// The same when every transport can wake the thread ([`Arm::Armed`]): only a bound.
const ARMED_NAP: Duration = Duration::from_millis(1);
/// A sleep with no request outstanding, to look at arrivals nobody asked for yet (which
/// give their senders' credit back); a call on the rank ends it.
const IDLE_SLEEP: Duration = Duration::from_millis(10);
/// The same when every transport can wake the thread.
const ARMED_IDLE_SLEEP: Duration = Duration::from_millis(100);

/// What the thread sleeps on besides the transports' descriptors: an eventfd that callers
/// ring to wake it (the rank's next call, [`Progress::stop`]).
struct Doorbell {
    fd: OwnedFd,
}

impl Doorbell {
    fn new() -> std::io::Result<Doorbell> {
        // SAFETY: eventfd(2) takes two integers and returns a new descriptor or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` is a descriptor eventfd just made, owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Doorbell { fd })
    }

    /// Wakes the sleeper, or makes its next sleep end at once.
    fn ring(&self) {
        let one: u64 = 1;
        // SAFETY: writes the 8 bytes of `one`, which lives across the call, to our eventfd.
        // It fails only when the counter is full (then a wake-up is pending anyway).
        unsafe {
            libc::write(
                self.fd.as_raw_fd(),
                (&one as *const u64).cast::<libc::c_void>(),
                8,
            )
        };
    }

    /// Sleeps until the doorbell rings, one of `fds` is ready, or `timeout` passes; `polled`
    /// is scratch space kept between sleeps.
    fn sleep(&self, fds: &[WaitFd], timeout: Duration, polled: &mut Vec<libc::pollfd>) {
        polled.clear();
        polled.push(libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        polled.extend(fds.iter().map(|w| libc::pollfd {
            fd: w.fd,
            events: if w.write { libc::POLLOUT } else { libc::POLLIN },
            revents: 0,
        }));
        let ts = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: `polled` holds `polled.len()` initialized pollfd entries and `ts` a valid
        // timespec, both alive across the call; no signal mask is passed. A descriptor closed
        // since a transport named it makes ppoll report it (POLLNVAL) and return: the thread
        // then looks at its transports again, which name only open ones.
        unsafe {
            libc::ppoll(
                polled.as_mut_ptr(),
                polled.len() as libc::nfds_t,
                &ts,
                std::ptr::null(),
            )
        };
        if polled[0].revents != 0 {
            let mut count = [0u8; 8];
            // SAFETY: reads at most 8 bytes into `count`, which is 8 bytes long; resets the
            // eventfd's counter (nonblocking: returns at once if another read took it).
            unsafe {
                libc::read(
                    self.fd.as_raw_fd(),
                    count.as_mut_ptr().cast::<libc::c_void>(),
                    8,
                )
            };
        }
    }
}

/// A task waiting for a request of VCI `vci`.
struct Waiting {
    vci: usize,
    handle: ReqHandle,
    waker: Waker,
}

/// The thread and what it shares with the rank's callers.
struct Running {
    stop: Arc<AtomicBool>,
    doorbell: Arc<Doorbell>,
    join: JoinHandle<()>,
}

/// A rank's asynchronous progress: whether its thread runs, and where futures leave wakers.
#[derive(Default)]
pub(crate) struct Progress {
    /// Whether the thread runs (futures then register wakers instead of polling).
    on: AtomicBool,
    /// Whether the thread sleeps (or is about to): the next call rings its doorbell. The
    /// protocol is model-checked with loom beside the VCI locks it relies on
    /// (`thread_level::SleepFlag`).
    asleep: SleepFlag,
    running: Mutex<Option<Running>>,
    /// Tasks awaiting requests; `waiting` counts them, so the thread looks only when some wait.
    wakers: Mutex<Vec<Waiting>>,
    waiting: AtomicUsize,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing here panics while holding a lock; if something did, the data is still whole.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Progress {
    /// Whether the progress thread runs.
    #[inline(always)]
    pub(crate) fn is_on(&self) -> bool {
        self.on.load(Ordering::Acquire)
    }

    /// Wakes the thread if it sleeps: called at the start of every call at the multiple
    /// level, so that a request posted to a sleeping thread gets its attention at once.
    #[inline(always)]
    pub(crate) fn nudge(&self) {
        if self.asleep.is_set() {
            self.wake_thread();
        }
    }

    #[cold]
    fn wake_thread(&self) {
        self.asleep.clear();
        if let Some(r) = lock(&self.running).as_ref() {
            r.doorbell.ring();
        }
    }

    /// Leaves `waker` to be woken when request `handle` of VCI `vci` completes (replacing an
    /// earlier one of the same request).
    pub(crate) fn register(&self, vci: usize, handle: ReqHandle, waker: &Waker) {
        let mut w = lock(&self.wakers);
        match w.iter_mut().find(|x| x.vci == vci && x.handle == handle) {
            Some(x) => x.waker.clone_from(waker),
            None => {
                w.push(Waiting {
                    vci,
                    handle,
                    waker: waker.clone(),
                });
                self.waiting.fetch_add(1, Ordering::Release);
            }
        }
        drop(w);
        self.nudge();
    }

    /// Forgets the waker of a request that completed or was dropped.
    pub(crate) fn unregister(&self, vci: usize, handle: ReqHandle) {
        if self.waiting.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut w = lock(&self.wakers);
        let before = w.len();
        w.retain(|x| !(x.vci == vci && x.handle == handle));
        self.waiting.fetch_sub(before - w.len(), Ordering::Release);
    }

    /// Stops the thread and waits for it (at finalize, or when asked).
    pub(crate) fn stop(&self) {
        let running = lock(&self.running).take();
        self.on.store(false, Ordering::Release);
        if let Some(r) = running {
            r.stop.store(true, Ordering::Release);
            r.doorbell.ring();
            if r.join.thread().id() != std::thread::current().id() {
                let _ = r.join.join();
            }
        }
        // Tasks still waiting poll for themselves from now on.
        let woken: Vec<Waiting> = std::mem::take(&mut *lock(&self.wakers));
        self.waiting.store(0, Ordering::Release);
        for w in woken {
            w.waker.wake();
        }
    }
}

impl<N, S> Context<N, S, Multiple>
where
    N: Netmod + Send + 'static,
    S: Shm + Send + 'static,
{
    /// Starts this rank's progress thread (see [`crate::progress`]): from now on rendezvous
    /// and pipelined transfers move while the program computes, and awaited requests wake
    /// their tasks without being polled. Does nothing if it runs already. The thread ends at
    /// finalize, at [`Context::stop_async_progress`], or when the rank's last handle goes.
    pub fn start_async_progress(&self) -> Result<()> {
        let rank: &Arc<RankState<N, S, Multiple>> = &self.rank;
        if rank.is_finalized() {
            return Err(Error::new(
                ErrorKind::Comm,
                "this rank has finalized: no more calls on it",
            ));
        }
        let mut running = lock(&rank.progress.running);
        if running.is_some() {
            return Ok(());
        }
        let stop = Arc::new(AtomicBool::new(false));
        let doorbell = Arc::new(Doorbell::new().map_err(|e| {
            Error::new(
                ErrorKind::Internal,
                format!("cannot make the progress thread's eventfd: {e}"),
            )
        })?);
        let weak = Arc::downgrade(rank);
        let join = std::thread::Builder::new()
            .name("ch4-progress".into())
            .spawn({
                let stop = stop.clone();
                let doorbell = doorbell.clone();
                move || drive(weak, stop, doorbell)
            })
            .map_err(|e| {
                Error::new(
                    ErrorKind::Internal,
                    format!("cannot start the progress thread: {e}"),
                )
            })?;
        *running = Some(Running {
            stop,
            doorbell,
            join,
        });
        rank.progress.on.store(true, Ordering::Release);
        // Outside `running`'s lock: a caller holding a VCI takes that lock to wake the thread.
        drop(running);
        self.tell_transports(true);
        Ok(())
    }

    /// Stops the progress thread, if it runs, and waits for it to end.
    pub fn stop_async_progress(&self) {
        self.rank.progress.stop();
        self.tell_transports(false);
    }

    /// Tells every VCI's transports whether the thread drives them
    /// ([`ch4_core::transport::AmTransport::background_progress`]).
    fn tell_transports(&self, on: bool) {
        for lock in self.rank.vcis.all() {
            if let Ok(mut dev) = lock.enter() {
                dev.background_progress(on);
            }
        }
    }

    /// Whether the progress thread runs.
    pub fn async_progress(&self) -> bool {
        self.rank.progress.is_on()
    }
}

/// The thread: rounds of progress on every VCI no caller holds, waking completed requests'
/// tasks, until stopped, finalized, or the rank is gone.
fn drive<N: Netmod, S: Shm>(
    weak: Weak<RankState<N, S, Multiple>>,
    stop: Arc<AtomicBool>,
    doorbell: Arc<Doorbell>,
) {
    let mut idle: u32 = 0;
    let mut fds = Vec::new();
    let mut polled = Vec::new();
    loop {
        if stop.load(Ordering::Acquire) {
            return;
        }
        let Some(rank) = weak.upgrade() else {
            return;
        };
        if rank.is_finalized() {
            return;
        }
        let (moved, outstanding) = round(&rank);
        if moved > 0 && rank.progress.waiting.load(Ordering::Acquire) > 0 {
            wake_completed(&rank);
        }
        let progress = &rank.progress;
        if rank.long_waits.load(Ordering::Relaxed) > 0 {
            // A thread of the rank is in a wait and drives the devices itself: polling beside
            // it only takes turns at its locks and, on a host without a spare core, its CPU.
            drop(rank);
            doorbell.sleep(&[], NAP, &mut polled);
            idle = 0;
            continue;
        }
        if moved > 0 {
            idle = 0;
            continue;
        }
        idle = idle.saturating_add(1);
        if outstanding && idle < SPIN_ROUNDS {
            std::hint::spin_loop();
            continue;
        }
        if outstanding && idle < YIELD_ROUNDS {
            std::thread::yield_now();
            continue;
        }
        // Sleep until a call on the rank rings, a transport's descriptor is ready, or a while
        // (with requests out, their own progress is what the thread waits for; without, it
        // looks at arrivals nobody asked for yet). Asleep first, then one more look at every
        // VCI that also arms its transports: a caller that entered one after that look sees
        // the flag (it looks while holding the VCI, which the look took and let go of after
        // setting it), and one inside it now makes the look give up; either way no request
        // posted meanwhile waits for the sleep to end.
        progress.asleep.set();
        fds.clear();
        let Some((armed, outstanding)) = arm_round(&rank, &mut fds) else {
            progress.asleep.clear();
            continue;
        };
        let timeout = match (outstanding, armed) {
            (true, false) => NAP,
            (true, true) => ARMED_NAP,
            (false, false) => IDLE_SLEEP,
            (false, true) => ARMED_IDLE_SLEEP,
        };
        drop(rank);
        doorbell.sleep(&fds, timeout, &mut polled);
        if let Some(rank) = weak.upgrade() {
            rank.progress.asleep.clear();
        }
        if !outstanding {
            idle = 0;
        }
    }
}

/// The look before a sleep: a round on every VCI that also arms its transports' wake-ups
/// (descriptors into `fds`). `None` when the thread should not sleep: a caller holds a VCI,
/// the round moved something, or a transport has work waiting. Otherwise whether every
/// transport is armed, and whether requests are outstanding.
fn arm_round<N: Netmod, S: Shm>(
    rank: &RankState<N, S, Multiple>,
    fds: &mut Vec<WaitFd>,
) -> Option<(bool, bool)> {
    let mut arm = Arm::Armed;
    let mut outstanding = false;
    for lock in rank.vcis.all() {
        let mut dev = lock.try_enter()?;
        if dev.progress().unwrap_or(0) > 0 {
            return None;
        }
        outstanding |= dev.has_requests();
        arm = arm.and(dev.arm_wakeup(fds));
        if arm == Arm::Busy {
            return None;
        }
    }
    Some((arm == Arm::Armed, outstanding))
}

/// One round on every VCI that no caller holds: the events handled, and whether any VCI has
/// requests outstanding (live in its pool: posted and not yet completed, or completed and not
/// yet waited for).
fn round<N: Netmod, S: Shm>(rank: &RankState<N, S, Multiple>) -> (usize, bool) {
    let mut moved = 0;
    let mut outstanding = false;
    for lock in rank.vcis.all() {
        match lock.try_enter() {
            Some(mut dev) => {
                moved += dev.progress().unwrap_or(0);
                outstanding |= dev.has_requests();
            }
            // A caller holds it: it is making progress itself, and has requests.
            None => outstanding = true,
        }
    }
    (moved, outstanding)
}

/// Wakes the tasks whose requests completed.
fn wake_completed<N: Netmod, S: Shm>(rank: &RankState<N, S, Multiple>) {
    let mut done = Vec::new();
    {
        let mut w = lock(&rank.progress.wakers);
        let before = w.len();
        let mut i = 0;
        while i < w.len() {
            let complete = match rank.vcis.get(w[i].vci).try_enter() {
                Some(dev) => dev.is_done(w[i].handle).unwrap_or(true),
                None => false,
            };
            if complete {
                done.push(w.swap_remove(i));
            } else {
                i += 1;
            }
        }
        rank.progress
            .waiting
            .fetch_sub(before - w.len(), Ordering::Release);
    }
    for w in done {
        w.waker.wake();
    }
}

/// Starts the progress thread of a rank at the multiple level when `CH4_ASYNC_PROGRESS` asks
/// for it; at any other level that is an error, since only the multiple level's devices can be
/// shared with the thread.
pub(crate) fn start_if_asked<N, S, L>(ctx: &Context<N, S, L>) -> Result<()>
where
    N: Netmod + Send + 'static,
    S: Shm + Send + 'static,
    L: ThreadLevel,
{
    if !ch4_core::env::switch(ASYNC_PROGRESS_VAR)?.unwrap_or(false) {
        return Ok(());
    }
    match (ctx as &dyn std::any::Any).downcast_ref::<Context<N, S, Multiple>>() {
        Some(multiple) => multiple.start_async_progress(),
        None => Err(Error::new(
            ErrorKind::Arg,
            format!(
                "{ASYNC_PROGRESS_VAR}=1 needs the multiple thread level (a progress thread shares \
                 the rank's devices); this rank is at {}: start it with init_thread(Multiple)",
                L::LEVEL
            ),
        )),
    }
}

/// The setting that starts the progress thread.
pub(crate) const ASYNC_PROGRESS_VAR: &str = "CH4_ASYNC_PROGRESS";

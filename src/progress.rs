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
//! per VCI. It polls while the rank has requests; with none it parks, and the next call on the
//! rank (any [`RankState::device`](crate::RankState) at the multiple level) unparks it: a load
//! and a branch per call, at the multiple level only. Past a few thousand idle polls with
//! requests outstanding (a receive whose message is far off) it sleeps in short naps rather
//! than take a core from the computation it exists to overlap; while a thread of the rank waits
//! (and so drives the devices itself) it naps too.
//!
//! Futures: an [`OwnedRequest`](crate::OwnedRequest) awaited while the thread runs registers
//! its task's waker here; after every round that moved something the thread wakes the tasks
//! whose requests completed, and nobody polls. Without the thread, a polled future drives one
//! round of progress itself and asks to be polled again.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::Waker;
use std::thread::{JoinHandle, Thread};
use std::time::Duration;

use ch4_core::transport::{Netmod, Shm};
use ch4_core::{Error, ErrorKind, ReqHandle, Result};
use thread_level::{Multiple, RankLock, ThreadLevel, VciSet};

use crate::{Context, RankState};

/// Idle rounds spent spinning, then yielding, before the thread naps (with requests out).
const SPIN_ROUNDS: u32 = 64;
const YIELD_ROUNDS: u32 = 4096;
/// A nap between idle rounds once past [`YIELD_ROUNDS`]; a new call on the rank ends it.
const NAP: Duration = Duration::from_micros(100);

/// A task waiting for a request of VCI `vci`.
struct Waiting {
    vci: usize,
    handle: ReqHandle,
    waker: Waker,
}

/// The thread and what it shares with the rank's callers.
struct Running {
    stop: Arc<AtomicBool>,
    thread: Thread,
    join: JoinHandle<()>,
}

/// A rank's asynchronous progress: whether its thread runs, and where futures leave wakers.
#[derive(Default)]
pub(crate) struct Progress {
    /// Whether the thread runs (futures then register wakers instead of polling).
    on: AtomicBool,
    /// Whether the thread is parked with nothing to do: the next call unparks it.
    asleep: AtomicBool,
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

    /// Unparks the thread if it sleeps: called at the start of every call at the multiple
    /// level, so that a request posted to a sleeping thread gets its attention at once.
    #[inline(always)]
    pub(crate) fn nudge(&self) {
        if self.asleep.load(Ordering::Relaxed) {
            self.wake_thread();
        }
    }

    #[cold]
    fn wake_thread(&self) {
        self.asleep.store(false, Ordering::Relaxed);
        if let Some(r) = lock(&self.running).as_ref() {
            r.thread.unpark();
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
            r.thread.unpark();
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
        let weak = Arc::downgrade(rank);
        let join = std::thread::Builder::new()
            .name("ch4-progress".into())
            .spawn({
                let stop = stop.clone();
                move || drive(weak, stop)
            })
            .map_err(|e| {
                Error::new(
                    ErrorKind::Internal,
                    format!("cannot start the progress thread: {e}"),
                )
            })?;
        *running = Some(Running {
            stop,
            thread: join.thread().clone(),
            join,
        });
        rank.progress.on.store(true, Ordering::Release);
        Ok(())
    }

    /// Stops the progress thread, if it runs, and waits for it to end.
    pub fn stop_async_progress(&self) {
        self.rank.progress.stop();
    }

    /// Whether the progress thread runs.
    pub fn async_progress(&self) -> bool {
        self.rank.progress.is_on()
    }
}

/// The thread: rounds of progress on every VCI no caller holds, waking completed requests'
/// tasks, until stopped, finalized, or the rank is gone.
fn drive<N: Netmod, S: Shm>(rank: Weak<RankState<N, S, Multiple>>, stop: Arc<AtomicBool>) {
    let mut idle: u32 = 0;
    loop {
        if stop.load(Ordering::Acquire) {
            return;
        }
        let Some(rank) = rank.upgrade() else {
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
            std::thread::park_timeout(NAP);
            idle = 0;
            continue;
        }
        if moved > 0 {
            idle = 0;
            continue;
        }
        idle = idle.saturating_add(1);
        if !outstanding {
            // Nothing to drive: sleep until the next call on the rank unparks us (or a
            // while, to look at arrivals nobody asked for yet). Asleep first, then one more
            // look at every VCI: a caller that entered one after that look sees the flag (it
            // looks while holding the VCI, which the look took and let go of after setting
            // it), and one inside it now makes the look find work; either way no request
            // posted meanwhile waits for the nap to end.
            progress.asleep.store(true, Ordering::Relaxed);
            if round(&rank).1 {
                progress.asleep.store(false, Ordering::Relaxed);
                continue;
            }
            drop(rank);
            std::thread::park_timeout(Duration::from_millis(10));
            idle = 0;
        } else if idle < SPIN_ROUNDS {
            std::hint::spin_loop();
        } else if idle < YIELD_ROUNDS {
            std::thread::yield_now();
        } else {
            // A nap, ended early by the next call (the flag as above; a request's own
            // progress is what it waits for here, and a nap's 100 us bounds the rest).
            progress.asleep.store(true, Ordering::Relaxed);
            drop(rank);
            std::thread::park_timeout(NAP);
        }
    }
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

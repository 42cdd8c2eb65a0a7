//! Thread levels (MPI_THREAD_SINGLE … MPI_THREAD_MULTIPLE), stated in the types of a rank's
//! handles: the part of ch4's facade that decides what may cross threads, the locks each level
//! puts around a device, and a rank's set of VCIs. A crate of its own so that its locks are
//! model-checked with loom without building the transports.
//!
//! A rank starts at a level, a type parameter of its [`Context`](../ch4/struct.Context.html) and of every
//! handle made from it, and the level decides what the compiler lets threads do with them:
//!
//! | level | handles are | the device sits behind | a blocking call |
//! |---|---|---|---|
//! | [`Single`], [`Funneled`] | neither `Send` nor `Sync` | a `RefCell` (no lock) | holds the device |
//! | [`Serialized`] | `Send + Sync` | a lock that refuses a second thread | holds the device |
//! | [`Multiple`] | `Send + Sync` | a lock that waits | lets go between polls |
//!
//! The default is [`Single`], whose handles cost what they cost before levels existed: a
//! program that never names a level gets no lock at all. At [`Serialized`] a handle may move to
//! and be used from any thread, and two threads calling at once get an error instead of a race
//! (MPI leaves that erroneous program undefined). At [`Multiple`] any number of threads call at
//! once; a thread blocked in a wait lets go of the device between two polls, so another thread
//! of the rank can send the message it waits for (MPICH's progress loop yields its lock the
//! same way).
//!
//! rsmpi fixed `Send`/`Sync` at compile time while the MPI library chose the level at run
//! time, which was too strict under one MPI and unsound under another (rsmpi issues #12 and
//! #115); here the level provided is the level in the type, and no run-time choice can differ.

use std::cell::{RefCell, RefMut};
use std::ops::{Deref, DerefMut};
use std::rc::Rc;
use std::sync::Arc;

use sync::{AtomicBool, AtomicU32, AtomicUsize, Mutex, MutexGuard, Ordering};

/// The synchronization the locks use: std's, or under `RUSTFLAGS="--cfg loom"` loom's
/// model-checked ones (`scripts/loom.sh`).
mod sync {
    #[cfg(loom)]
    pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
    #[cfg(loom)]
    pub(crate) use loom::sync::MutexGuard;
    #[cfg(loom)]
    pub(crate) use loom::thread::yield_now;
    /// parking_lot's mutex rather than std's: a lock here guards a device for one call, and
    /// std's checks for poisoning (whether the thread is panicking, on every lock and unlock)
    /// were about 20 of the 120 instructions a message one thread paid at the multiple
    /// level (`cargo bench --bench facade_window -- --blocking --multiple` under callgrind).
    /// A panic while the lock is held (a reduction operator's) leaves the device as
    /// consistent as a `RefCell` borrow that unwound does, so poisoning was ignored anyway.
    #[cfg(not(loom))]
    pub(crate) use parking_lot::{Mutex, MutexGuard};
    #[cfg(not(loom))]
    pub(crate) use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};

    /// loom's model of a mutex, with parking_lot's interface (no poisoning: the models do not
    /// panic while holding it).
    #[cfg(loom)]
    pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

    #[cfg(loom)]
    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Self {
            Mutex(loom::sync::Mutex::new(value))
        }
        pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
            self.0.try_lock().ok()
        }
        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            self.0.lock().unwrap_or_else(|p| p.into_inner())
        }
    }
    #[cfg(not(loom))]
    pub(crate) use std::thread::yield_now;

    /// One spin of a waiting loop (loom must see it as a yield, or it cannot schedule the
    /// thread being waited for).
    #[inline(always)]
    pub(crate) fn spin() {
        #[cfg(loom)]
        loom::thread::yield_now();
        #[cfg(not(loom))]
        std::hint::spin_loop();
    }
}

/// The four levels of thread support MPI defines, in increasing order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// MPI_THREAD_SINGLE: the rank has one thread.
    Single,
    /// MPI_THREAD_FUNNELED: the rank may have several threads, and only the one that
    /// started it calls.
    Funneled,
    /// MPI_THREAD_SERIALIZED: any thread calls, never two at once.
    Serialized,
    /// MPI_THREAD_MULTIPLE: any thread calls, at any time.
    Multiple,
}

impl Level {
    /// MPI's name of the level.
    pub fn mpi_name(self) -> &'static str {
        match self {
            Level::Single => "MPI_THREAD_SINGLE",
            Level::Funneled => "MPI_THREAD_FUNNELED",
            Level::Serialized => "MPI_THREAD_SERIALIZED",
            Level::Multiple => "MPI_THREAD_MULTIPLE",
        }
    }
}

impl std::fmt::Display for Level {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.mpi_name())
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A thread level as a type: [`Single`], [`Funneled`], [`Serialized`] or [`Multiple`]. The
/// associated items are how the level builds a rank; they are not for use outside this crate.
pub trait ThreadLevel: sealed::Sealed + Copy + Default + Send + Sync + 'static {
    /// The level as a value.
    const LEVEL: Level;
    /// Whether blocking calls let go of the device between polls.
    #[doc(hidden)]
    const YIELDS: bool;
    /// How handles share the rank: `Rc` or `Arc`.
    #[doc(hidden)]
    type Shared<T>: Clone + Deref<Target = T>;
    /// What guards the device and the rank's other mutable state.
    #[doc(hidden)]
    type Lock<T>: RankLock<T>;
    /// The rank's VCIs: exactly one below [`Multiple`], so the single-threaded levels index
    /// nothing.
    #[doc(hidden)]
    type Vcis<T>: VciSet<T>;
    /// Shares `value` among handles.
    #[doc(hidden)]
    fn share<T>(value: T) -> Self::Shared<T>;
    /// Whether two handles share one value.
    #[doc(hidden)]
    fn same<T>(a: &Self::Shared<T>, b: &Self::Shared<T>) -> bool;
}

/// MPI_THREAD_SINGLE: one thread; handles are neither `Send` nor `Sync`, and nothing is
/// locked. The default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Single;

/// MPI_THREAD_FUNNELED: the rank may run other threads, but its handles cannot reach them
/// (neither `Send` nor `Sync`), so only the thread that started the rank calls. Costs what
/// [`Single`] costs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Funneled;

/// MPI_THREAD_SERIALIZED: handles are `Send + Sync` and any thread calls, one at a time; a
/// call made while another thread is inside one fails with an `Arg` error instead of racing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Serialized;

/// MPI_THREAD_MULTIPLE: handles are `Send + Sync` and any number of threads call at once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Multiple;

impl sealed::Sealed for Single {}
impl sealed::Sealed for Funneled {}
impl sealed::Sealed for Serialized {}
impl sealed::Sealed for Multiple {}

/// A level's [`ThreadLevel`] impl: its value, whether its waits let go of the device, and how
/// its handles share the rank (`Rc` or `Arc`), guard it and hold its VCIs.
macro_rules! thread_level {
    ($t:ty, $level:expr, yields: $yields:expr, $shared:ident, $lock:ident, $vcis:ident) => {
        impl ThreadLevel for $t {
            const LEVEL: Level = $level;
            const YIELDS: bool = $yields;
            type Shared<T> = $shared<T>;
            type Lock<T> = $lock<T>;
            type Vcis<T> = $vcis<T>;
            #[inline(always)]
            fn share<T>(value: T) -> $shared<T> {
                $shared::new(value)
            }
            #[inline(always)]
            fn same<T>(a: &$shared<T>, b: &$shared<T>) -> bool {
                $shared::ptr_eq(a, b)
            }
        }
    };
}

thread_level!(Single, Level::Single, yields: false, Rc, RefCell, One);
thread_level!(Funneled, Level::Funneled, yields: false, Rc, RefCell, One);
thread_level!(Serialized, Level::Serialized, yields: false, Arc, TryLock, One);
thread_level!(Multiple, Level::Multiple, yields: true, Arc, WaitLock, Many);

/// Why a lock refused to be taken.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// This thread holds it already (a call from inside a reduction operator).
    Reentrant,
    /// Another thread holds it, at a level that does not wait ([`Serialized`]).
    Concurrent,
    /// It was closed for good ([`RankLock::close`]): the rank has finalized.
    Closed,
}

/// What guards a rank's mutable state at one level.
#[doc(hidden)]
pub trait RankLock<T> {
    /// Holds the state until dropped.
    type Guard<'a>: DerefMut<Target = T>
    where
        Self: 'a;
    /// A lock around `value`.
    fn new(value: T) -> Self;
    /// Takes the lock; see [`Refused`] for when it is refused.
    fn enter(&self) -> Result<Self::Guard<'_>, Refused>;
    /// Takes the lock if no one holds it, without waiting (another VCI's progress, done in
    /// passing by a thread that waits on its own).
    fn try_enter(&self) -> Option<Self::Guard<'_>>;
    /// Gives the lock up for good: every later [`RankLock::enter`] is refused.
    fn close(guard: Self::Guard<'_>);
    /// Between two polls of a wait that let go of the lock: gives a thread waiting for it its
    /// turn, else backs off as every waiting loop does (`backoff(idle)`).
    fn between_polls(&self, idle: u32, backoff: impl FnOnce(u32)) {
        backoff(idle)
    }
    /// Whether another thread waits to take the lock (a waiting loop that holds it lets go
    /// then). Always, for locks that do not count their waiters.
    fn contended(&self) -> bool {
        true
    }
}

impl<T> RankLock<T> for RefCell<T> {
    type Guard<'a>
        = RefMut<'a, T>
    where
        T: 'a;
    #[inline(always)]
    fn new(value: T) -> Self {
        RefCell::new(value)
    }
    #[inline(always)]
    fn enter(&self) -> Result<RefMut<'_, T>, Refused> {
        // One thread: a borrow that is already out is this thread's own, or finalize's.
        self.try_borrow_mut().map_err(|_| Refused::Reentrant)
    }
    fn try_enter(&self) -> Option<RefMut<'_, T>> {
        self.try_borrow_mut().ok()
    }
    fn close(guard: RefMut<'_, T>) {
        // The state stays borrowed for good, so every later call is refused at no cost to the
        // calls made before.
        std::mem::forget(guard);
    }
}

/// A token of the calling thread, different from every other live thread's and never 0: the
/// address of a thread-local.
#[inline(always)]
fn thread_token() -> usize {
    #[cfg(not(loom))]
    thread_local! {
        static TOKEN: u8 = const { 0 };
    }
    #[cfg(loom)]
    loom::thread_local! {
        static TOKEN: u8 = 0;
    }
    TOKEN.with(|t| t as *const u8 as usize)
}

/// The [`Serialized`] level's lock: taken without waiting, refused while another thread holds
/// it.
#[doc(hidden)]
pub struct TryLock<T> {
    inner: Mutex<T>,
    /// The thread holding it (its [`thread_token`]), 0 when none: tells a re-entry from
    /// another thread's call.
    owner: AtomicUsize,
    closed: AtomicBool,
}

/// A held [`TryLock`] or [`WaitLock`].
#[doc(hidden)]
pub struct OwnedGuard<'a, T> {
    guard: MutexGuard<'a, T>,
    owner: &'a AtomicUsize,
    closed: &'a AtomicBool,
}

impl<T> Deref for OwnedGuard<'_, T> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T> DerefMut for OwnedGuard<'_, T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

impl<T> Drop for OwnedGuard<'_, T> {
    #[inline(always)]
    fn drop(&mut self) {
        // Before the mutex is let go (the field drops after this body).
        self.owner.store(0, Ordering::Relaxed);
    }
}

/// The mutex just taken as a held lock of thread `me`, unless the lock was closed (read under
/// the mutex, so a thread that waited while it closed sees it).
#[inline(always)]
fn admit<'a, T>(
    guard: MutexGuard<'a, T>,
    me: usize,
    owner: &'a AtomicUsize,
    closed: &'a AtomicBool,
) -> Option<OwnedGuard<'a, T>> {
    if closed.load(Ordering::Relaxed) {
        return None;
    }
    owner.store(me, Ordering::Relaxed);
    Some(OwnedGuard {
        guard,
        owner,
        closed,
    })
}

impl<T> RankLock<T> for TryLock<T> {
    type Guard<'a>
        = OwnedGuard<'a, T>
    where
        T: 'a;
    fn new(value: T) -> Self {
        TryLock {
            inner: Mutex::new(value),
            owner: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
        }
    }
    #[inline]
    fn enter(&self) -> Result<OwnedGuard<'_, T>, Refused> {
        let me = thread_token();
        let guard = match self.inner.try_lock() {
            Some(g) => g,
            None => {
                return Err(if self.closed.load(Ordering::Relaxed) {
                    Refused::Closed
                } else if self.owner.load(Ordering::Relaxed) == me {
                    Refused::Reentrant
                } else {
                    Refused::Concurrent
                });
            }
        };
        admit(guard, me, &self.owner, &self.closed).ok_or(Refused::Closed)
    }
    fn try_enter(&self) -> Option<OwnedGuard<'_, T>> {
        self.enter().ok()
    }
    fn close(guard: OwnedGuard<'_, T>) {
        guard.close();
    }
}

impl<T> OwnedGuard<'_, T> {
    /// Marks the lock closed and lets go: whoever takes it next reads the mark under it.
    fn close(self) {
        self.closed.store(true, Ordering::Relaxed);
    }
}

/// The [`Multiple`] level's lock: a mutex that waits, refuses a re-entry by its holder
/// (instead of deadlocking), and hands itself over fairly between the polls of a wait.
#[doc(hidden)]
pub struct WaitLock<T> {
    inner: Mutex<T>,
    /// The thread holding it (its [`thread_token`]), 0 when none.
    owner: AtomicUsize,
    /// Threads waiting to take it: a waiting loop that lets go between polls gives them their
    /// turn before it takes the lock again (a mutex that is let go and at once taken back by
    /// the same thread otherwise starves the one it woke).
    queued: AtomicU32,
    closed: AtomicBool,
}

/// How many spins a waiting loop gives a queued thread to take the lock before it competes
/// again (a woken thread takes a few microseconds to run).
const HANDOVER_SPINS: u32 = 1 << 14;

impl<T> RankLock<T> for WaitLock<T> {
    type Guard<'a>
        = OwnedGuard<'a, T>
    where
        T: 'a;
    fn new(value: T) -> Self {
        WaitLock {
            inner: Mutex::new(value),
            owner: AtomicUsize::new(0),
            queued: AtomicU32::new(0),
            closed: AtomicBool::new(false),
        }
    }
    #[inline]
    fn enter(&self) -> Result<OwnedGuard<'_, T>, Refused> {
        let me = thread_token();
        let guard = match self.inner.try_lock() {
            Some(g) => g,
            None => self.enter_slow(me)?,
        };
        admit(guard, me, &self.owner, &self.closed).ok_or(Refused::Closed)
    }
    fn try_enter(&self) -> Option<OwnedGuard<'_, T>> {
        let guard = self.inner.try_lock()?;
        admit(guard, thread_token(), &self.owner, &self.closed)
    }
    fn close(guard: OwnedGuard<'_, T>) {
        guard.close();
    }
    #[inline(always)]
    fn contended(&self) -> bool {
        self.queued.load(Ordering::Relaxed) != 0
    }
    #[inline]
    fn between_polls(&self, idle: u32, backoff: impl FnOnce(u32)) {
        let queued = self.queued.load(Ordering::Relaxed);
        if queued == 0 {
            backoff(idle);
            return;
        }
        // Someone waits for the lock: let it take the lock before taking it again.
        for i in 0..HANDOVER_SPINS {
            if self.queued.load(Ordering::Relaxed) < queued {
                return;
            }
            if i % 64 == 63 {
                sync::yield_now();
            } else {
                sync::spin();
            }
        }
    }
}

impl<T> WaitLock<T> {
    /// The lock is held: by this thread (refused), or by another (wait for it).
    #[cold]
    #[inline(never)]
    fn enter_slow(&self, me: usize) -> Result<MutexGuard<'_, T>, Refused> {
        if self.owner.load(Ordering::Relaxed) == me {
            return Err(Refused::Reentrant);
        }
        self.queued.fetch_add(1, Ordering::Relaxed);
        let guard = self.inner.lock();
        self.queued.fetch_sub(1, Ordering::Relaxed);
        Ok(guard)
    }
}

/// A rank's VCIs (virtual communication interfaces): each an independent device with its own
/// lock, requests, queues and transports.
#[doc(hidden)]
pub trait VciSet<T> {
    /// The set of `first` and `rest`; a set of one refuses `rest` that is not empty.
    fn new(first: T, rest: Vec<T>) -> Result<Self, Vec<T>>
    where
        Self: Sized;
    /// The set of `first` alone.
    fn one(first: T) -> Self
    where
        Self: Sized;
    /// VCI `i` (the first for an index out of range; indices come from the rank itself).
    fn get(&self, i: usize) -> &T;
    /// How many there are (at least one).
    fn len(&self) -> usize;
    /// Never: a rank has at least one VCI.
    fn is_empty(&self) -> bool {
        false
    }
    /// Every VCI, in order.
    fn all<'a>(&'a self) -> impl Iterator<Item = &'a T>
    where
        T: 'a;
}

/// The one VCI of a rank below [`Multiple`]: `get` ignores its index, so nothing is indexed.
#[doc(hidden)]
pub struct One<T>(T);

impl<T> VciSet<T> for One<T> {
    fn one(first: T) -> Self {
        One(first)
    }
    fn new(first: T, rest: Vec<T>) -> Result<Self, Vec<T>> {
        if rest.is_empty() {
            Ok(One(first))
        } else {
            Err(rest)
        }
    }
    #[inline(always)]
    fn get(&self, _i: usize) -> &T {
        &self.0
    }
    #[inline(always)]
    fn len(&self) -> usize {
        1
    }
    fn all<'a>(&'a self) -> impl Iterator<Item = &'a T>
    where
        T: 'a,
    {
        std::iter::once(&self.0)
    }
}

/// The VCIs of a rank at [`Multiple`].
#[doc(hidden)]
pub struct Many<T> {
    first: T,
    rest: Box<[T]>,
}

impl<T> VciSet<T> for Many<T> {
    fn one(first: T) -> Self {
        Many {
            first,
            rest: Box::new([]),
        }
    }
    fn new(first: T, rest: Vec<T>) -> Result<Self, Vec<T>> {
        Ok(Many {
            first,
            rest: rest.into_boxed_slice(),
        })
    }
    #[inline(always)]
    fn get(&self, i: usize) -> &T {
        match i.checked_sub(1).and_then(|j| self.rest.get(j)) {
            Some(v) => v,
            None => &self.first,
        }
    }
    #[inline(always)]
    fn len(&self) -> usize {
        1 + self.rest.len()
    }
    fn all<'a>(&'a self) -> impl Iterator<Item = &'a T>
    where
        T: 'a,
    {
        std::iter::once(&self.first).chain(self.rest.iter())
    }
}

/// Whether a rank's progress thread sleeps (or is about to): the flag between that thread and
/// the rank's callers, here so that loom checks it beside the VCI locks it relies on.
///
/// The protocol (ch4's `src/progress.rs`): the thread [`set`](SleepFlag::set)s the flag, then
/// takes every VCI once more with `try_enter` for a last look, and sleeps only if that look
/// found nothing to do and no VCI busy. A caller looks at the flag while it holds a VCI
/// ([`is_set`](SleepFlag::is_set)) and, when set, [`clear`](SleepFlag::clear)s it and rings
/// the thread's doorbell (an eventfd, which stays rung until read). A caller that entered a
/// VCI after the thread's last look at it acquired the lock the look released, so it sees the
/// flag; one that held it during the look made the look give up. Plain loads and stores
/// suffice: the VCI locks order them. A wake-up can therefore be rung twice, never lost.
#[doc(hidden)]
pub struct SleepFlag {
    asleep: AtomicBool,
}

impl Default for SleepFlag {
    fn default() -> Self {
        SleepFlag::new()
    }
}

impl SleepFlag {
    /// A flag that says awake.
    pub fn new() -> Self {
        SleepFlag {
            asleep: AtomicBool::new(false),
        }
    }

    /// The thread is about to sleep: before its last look at every VCI.
    #[inline]
    pub fn set(&self) {
        self.asleep.store(true, Ordering::Relaxed);
    }

    /// The thread is awake (it woke, or its last look gave up); also a caller that is about to
    /// ring the doorbell.
    #[inline]
    pub fn clear(&self) {
        self.asleep.store(false, Ordering::Relaxed);
    }

    /// Whether the thread sleeps, looked at by a caller holding a VCI: one load, on every call
    /// at the multiple level.
    #[inline(always)]
    pub fn is_set(&self) -> bool {
        self.asleep.load(Ordering::Relaxed)
    }
}

/// Model checks of the multiple level's lock: `scripts/loom.sh` runs them
/// (`RUSTFLAGS="--cfg loom"`, every interleaving up to a bound of preemptions).
#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use loom::sync::Arc;

    /// Two threads add to a counter under the lock: no update is lost, and a thread that holds
    /// the lock is refused when it takes it again instead of deadlocking.
    #[test]
    fn the_lock_excludes_and_refuses_reentry() {
        loom::model(|| {
            let lock = Arc::new(WaitLock::new(0u32));
            let other = {
                let lock = lock.clone();
                loom::thread::spawn(move || {
                    let mut g = lock.enter().unwrap();
                    *g += 1;
                })
            };
            {
                let mut g = lock.enter().unwrap();
                assert_eq!(lock.enter().err(), Some(Refused::Reentrant));
                *g += 1;
            }
            other.join().unwrap();
            assert_eq!(*lock.enter().unwrap(), 2);
        });
    }

    /// The progress hand-off: a thread waits in a loop that takes the lock for each poll and
    /// lets go between polls (`between_polls`), for a flag that only another thread, which
    /// needs the lock, can set. The waiter must let it in: the model ends in every
    /// interleaving (a starved thread would make loom's run exceed its bound).
    #[test]
    fn a_waiting_thread_hands_the_lock_over() {
        loom::model(|| {
            let lock = Arc::new(WaitLock::new(false));
            let setter = {
                let lock = lock.clone();
                loom::thread::spawn(move || {
                    *lock.enter().unwrap() = true;
                })
            };
            let mut idle = 0;
            loop {
                if *lock.enter().unwrap() {
                    break;
                }
                idle += 1;
                lock.between_polls(idle, |_| loom::thread::yield_now());
            }
            setter.join().unwrap();
        });
    }

    /// The progress thread's sleep against a caller's post (`SleepFlag`, ch4's
    /// `src/progress.rs`): a caller posts one request on one of two VCIs and nudges; the
    /// thread runs rounds, and when a round finds nothing it sets the flag, looks at every VCI
    /// once more with `try_enter` (giving up if one is busy or has work) and sleeps until the
    /// doorbell rings — here with no timeout, so a lost wake-up leaves it asleep for ever and
    /// loom fails the model (a deadlock, or past its bound). The doorbell stands for the
    /// eventfd: rung by adding, read by taking the count, and a ring stays until read.
    fn sleep_against_post(vci_of_post: usize) {
        use loom::sync::atomic::AtomicU64;
        let vcis = Arc::new([WaitLock::new(0u32), WaitLock::new(0u32)]);
        let flag = Arc::new(SleepFlag::new());
        let doorbell = Arc::new(AtomicU64::new(0));
        let caller = {
            let (vcis, flag, doorbell) = (vcis.clone(), flag.clone(), doorbell.clone());
            loom::thread::spawn(move || {
                // `RankState::device`, then the post under the same guard.
                let mut dev = vcis[vci_of_post].enter().unwrap();
                if flag.is_set() {
                    flag.clear();
                    doorbell.fetch_add(1, Ordering::AcqRel);
                }
                *dev += 1;
            })
        };
        // The progress thread (`drive`, `arm_round`).
        'rounds: loop {
            // A round: every VCI no caller holds.
            let mut found = 0;
            for v in vcis.iter() {
                if let Some(d) = v.try_enter() {
                    found += *d;
                }
            }
            if found == 1 {
                break;
            }
            flag.set();
            for v in vcis.iter() {
                match v.try_enter() {
                    Some(d) if *d == 0 => {}
                    _ => {
                        flag.clear();
                        loom::thread::yield_now();
                        continue 'rounds;
                    }
                }
            }
            // Asleep until rung.
            while doorbell.swap(0, Ordering::AcqRel) == 0 {
                loom::thread::yield_now();
            }
            flag.clear();
        }
        caller.join().unwrap();
    }

    #[test]
    fn a_sleeping_progress_thread_is_woken_by_a_post_on_the_first_vci() {
        loom::model(|| sleep_against_post(0));
    }

    #[test]
    fn a_sleeping_progress_thread_is_woken_by_a_post_on_the_last_vci() {
        loom::model(|| sleep_against_post(1));
    }

    /// Closing the lock (finalize) refuses every later entry, on every thread, also one that
    /// was waiting for it while it closed.
    #[test]
    fn a_closed_lock_refuses_everyone() {
        loom::model(|| {
            let lock = Arc::new(WaitLock::new(()));
            let guard = lock.enter().unwrap();
            let waiter = {
                let lock = lock.clone();
                loom::thread::spawn(move || lock.enter().err())
            };
            WaitLock::close(guard);
            assert_eq!(waiter.join().unwrap(), Some(Refused::Closed));
            assert_eq!(lock.enter().err(), Some(Refused::Closed));
        });
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn levels_are_ordered_as_mpi_orders_them() {
        assert!(Level::Single < Level::Funneled);
        assert!(Level::Funneled < Level::Serialized);
        assert!(Level::Serialized < Level::Multiple);
        assert_eq!(Multiple::LEVEL.mpi_name(), "MPI_THREAD_MULTIPLE");
    }

    #[test]
    fn serialized_refuses_a_second_thread_and_a_reentry() {
        let lock = std::sync::Arc::new(TryLock::new(0));
        let g = lock.enter().unwrap();
        assert_eq!(lock.enter().err(), Some(Refused::Reentrant));
        let other = lock.clone();
        let refused = std::thread::spawn(move || other.enter().err())
            .join()
            .unwrap();
        assert_eq!(refused, Some(Refused::Concurrent));
        TryLock::close(g);
        assert_eq!(lock.enter().err(), Some(Refused::Closed));
    }

    #[test]
    fn a_set_of_one_vci_refuses_more_and_indexes_nothing() {
        assert!(One::new(1, vec![2]).is_err());
        let one = One::new(7, Vec::new()).unwrap();
        assert_eq!((*one.get(3), one.len()), (7, 1));
        let many = Many::new(0, vec![1, 2]).unwrap();
        assert_eq!((*many.get(2), *many.get(9), many.len()), (2, 0, 3));
        assert_eq!(many.all().copied().collect::<Vec<_>>(), [0, 1, 2]);
    }
}

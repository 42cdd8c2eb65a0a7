//! The one MPI process this library serves: its ch4 universe, the communicators the program
//! holds handles to, and whose thread may call.
//!
//! The library provides `MPI_THREAD_FUNNELED`: the thread that initialized MPI makes every
//! call. That is checked on each call (`pthread_self`, a few instructions) and a call from
//! another thread fails with an error instead of racing on the device. The state sits in a
//! static cell that only that thread touches, and a call that would re-enter it (none of the
//! library's own code does) fails the same way.

use std::cell::UnsafeCell;
use std::ffi::c_int;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use ch4::process::Universe;
use ch4_core::{CommId, ErrorKind, ReqHandle};

use crate::abi::{self, Handle};
use crate::errors;

/// A communicator the program holds a handle to, and how its errors are reported.
pub(crate) struct CommSlot {
    /// The device's communicator.
    pub id: CommId,
    /// `MPI_ERRORS_ARE_FATAL` (or `MPI_ERRORS_ABORT`): an error ends the job. Otherwise
    /// (`MPI_ERRORS_RETURN`) it is returned.
    pub fatal: bool,
    /// Its Cartesian topology, if it has one (`MPI_Cart_create`).
    pub cart: Option<Cart>,
}

/// A Cartesian topology: the grid's dimensions and which of them wrap around.
#[derive(Clone, Debug)]
pub(crate) struct Cart {
    /// Processes along each dimension.
    pub dims: Vec<c_int>,
    /// Whether each dimension is periodic.
    pub periods: Vec<bool>,
}

/// A persistent request (`MPI_Send_init`, `MPI_Recv_init`): what each `MPI_Start` posts.
pub(crate) struct Persistent {
    /// The send mode; `None` for a receive.
    pub send: Option<ch4_core::SendMode>,
    /// The buffer's address (the program keeps it valid while the request is active).
    pub buf: usize,
    /// The element count.
    pub count: c_int,
    /// The datatype handle.
    pub datatype: Handle,
    /// The destination or source (C's numbering).
    pub peer: c_int,
    /// The tag (C's numbering).
    pub tag: c_int,
    /// The communicator handle.
    pub comm: Handle,
    /// The device request of the current round, while active.
    pub active: Option<ReqHandle>,
}

/// What the library keeps between calls.
pub(crate) struct State {
    /// The process's place in the job.
    pub universe: Universe,
    /// By index: 0 is `MPI_COMM_WORLD`, 1 `MPI_COMM_SELF`, the rest the program's
    /// (`abi::COMM_BASE` + index), `None` once freed.
    pub comms: Vec<Option<CommSlot>>,
    /// Requests freed with `MPI_Request_free` while still active: completed in the background,
    /// their results dropped.
    pub detached: Vec<ReqHandle>,
    /// Persistent requests by index (`abi::persistent_out`), `None` once freed.
    pub persistent: Vec<Option<Persistent>>,
    /// Messages taken by a matched probe, by index (`abi::message_out`), until received.
    pub messages: Vec<Option<ch4_core::Message>>,
    /// The buffer attached for buffered sends: its address and size (`MPI_Buffer_attach`).
    pub bsend_buffer: Option<(usize, usize)>,
    /// Buffered sends in flight and the bytes of the attached buffer each holds.
    pub bsends: Vec<(ReqHandle, usize)>,
    /// Derived datatypes by index (`derived::type_out`), `None` once freed.
    pub types: Vec<Option<crate::derived::Desc>>,
    /// Groups by index (`groups::group_out`), `None` once freed.
    pub groups: Vec<Option<ch4_core::rankmap::Group>>,
    /// A working buffer kept between collectives (`MPI_Reduce_scatter`'s reduced vector).
    pub scratch: Vec<u8>,
}

impl State {
    /// The state of a newly joined process.
    pub fn new(universe: Universe) -> State {
        let world = universe.world().id();
        let me = universe.context().self_comm().id();
        State {
            universe,
            comms: vec![
                Some(CommSlot {
                    id: world,
                    fatal: true,
                    cart: None,
                }),
                Some(CommSlot {
                    id: me,
                    fatal: true,
                    cart: None,
                }),
            ],
            detached: Vec::new(),
            persistent: Vec::new(),
            messages: Vec::new(),
            bsend_buffer: None,
            bsends: Vec::new(),
            types: Vec::new(),
            groups: Vec::new(),
            scratch: Vec::new(),
        }
    }

    /// The slot of communicator handle `h`.
    #[inline(always)]
    pub fn slot(&mut self, h: Handle) -> ch4::Result<&mut CommSlot> {
        let i = match h {
            abi::COMM_WORLD => 0,
            abi::COMM_SELF => 1,
            h if h >= abi::COMM_BASE => h - abi::COMM_BASE,
            _ => usize::MAX,
        };
        match self.comms.get_mut(i) {
            Some(Some(s)) => Ok(s),
            _ => Err(bad_comm(h)),
        }
    }

    /// The device's communicator behind handle `h`.
    #[inline(always)]
    pub fn comm(&mut self, h: Handle) -> ch4::Result<CommId> {
        self.slot(h).map(|s| s.id)
    }

    /// Whether errors on communicator `h` end the job (a handle that names no communicator:
    /// `MPI_COMM_WORLD`'s choice, as for errors that belong to no communicator).
    pub fn fatal(&mut self, h: Handle) -> bool {
        match self.slot(h) {
            Ok(s) => s.fatal,
            Err(_) => self.comms[0].as_ref().map_or(true, |s| s.fatal),
        }
    }

    /// A handle for a new communicator.
    pub fn add_comm(&mut self, id: CommId, fatal: bool) -> Handle {
        let slot = Some(CommSlot {
            id,
            fatal,
            cart: None,
        });
        match self.comms.iter().skip(2).position(Option::is_none) {
            Some(i) => {
                self.comms[i + 2] = slot;
                abi::COMM_BASE + i + 2
            }
            None => {
                self.comms.push(slot);
                abi::COMM_BASE + self.comms.len() - 1
            }
        }
    }

    /// Persistent request `i`.
    pub fn persistent(&mut self, i: usize) -> ch4::Result<&mut Persistent> {
        match self.persistent.get_mut(i) {
            Some(Some(p)) => Ok(p),
            _ => Err(ch4::Error::new(
                ErrorKind::Request,
                "a persistent request that was freed",
            )),
        }
    }

    /// A handle index for a new persistent request.
    pub fn add_persistent(&mut self, p: Persistent) -> usize {
        match self.persistent.iter().position(Option::is_none) {
            Some(i) => {
                self.persistent[i] = Some(p);
                i
            }
            None => {
                self.persistent.push(Some(p));
                self.persistent.len() - 1
            }
        }
    }

    /// The device.
    #[inline(always)]
    pub fn device(&self) -> ch4::Result<std::cell::RefMut<'_, ch4::Device>> {
        self.universe.context().device()
    }

    /// Completes what it can of the requests freed while active.
    #[cold]
    pub fn reap_detached(&mut self) {
        if self.detached.is_empty() {
            return;
        }
        let Ok(mut dev) = self.universe.context().device() else {
            return;
        };
        self.detached
            .retain(|&h| matches!(dev.test_status(h), Ok(None)));
    }
}

#[cold]
fn bad_comm(h: Handle) -> ch4::Error {
    let what = if h == abi::COMM_NULL {
        "MPI_COMM_NULL".to_string()
    } else {
        format!("{h:#x}")
    };
    ch4::Error::new(
        ErrorKind::Comm,
        format!("communicator {what} is not a communicator of this process (freed, or never made)"),
    )
}

/// Where the process stands with MPI.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Phase {
    /// Before `MPI_Init`.
    Before,
    /// Between `MPI_Init` and `MPI_Finalize`.
    Running,
    /// After `MPI_Finalize`.
    After,
}

/// Where the process stands, and whether a call is using the state: `BEFORE`, `IDLE` (MPI
/// running, no call in progress), `BUSY` (a call in progress), `AFTER`. One byte, so the check
/// on every call is one load and a compare. Only the owner thread moves it between `IDLE` and
/// `BUSY`.
static GATE: AtomicU8 = AtomicU8::new(BEFORE);
const BEFORE: u8 = 0;
const IDLE: u8 = 1;
const BUSY: u8 = 2;
const AFTER: u8 = 3;
static OWNER: AtomicUsize = AtomicUsize::new(0);

struct Cell(UnsafeCell<Option<State>>);

// SAFETY: the cell is only reached through `with`, `install` and `take`, which check that the
// caller is the thread recorded in OWNER (the one that initialized MPI) and that no other use
// is in progress (GATE is IDLE, and they set it BUSY while they hold the reference), so at
// most one `&mut State` exists at a time, on one thread.
unsafe impl Sync for Cell {}

static STATE: Cell = Cell(UnsafeCell::new(None));

/// Where the process stands.
pub(crate) fn phase() -> Phase {
    match GATE.load(Ordering::Acquire) {
        BEFORE => Phase::Before,
        AFTER => Phase::After,
        _ => Phase::Running,
    }
}

#[inline(always)]
fn this_thread() -> usize {
    // SAFETY: pthread_self has no preconditions.
    unsafe { libc::pthread_self() as usize }
}

/// Whether the caller is the thread that initialized MPI (`MPI_Is_thread_main`; false before
/// `MPI_Init`).
pub(crate) fn on_main_thread() -> bool {
    phase() != Phase::Before && OWNER.load(Ordering::Relaxed) == this_thread()
}

/// Makes `st` the process's state, owned by the calling thread.
pub(crate) fn install(st: State) {
    OWNER.store(this_thread(), Ordering::Relaxed);
    // SAFETY: called once, from MPI_Init while GATE is BEFORE: no call can be using the cell
    // (`with` refuses until GATE is IDLE).
    unsafe { *STATE.0.get() = Some(st) };
    GATE.store(IDLE, Ordering::Release);
}

/// Takes the state out (MPI_Finalize); later calls find MPI finalized.
pub(crate) fn take() -> Result<State, c_int> {
    check_caller()?;
    GATE.store(AFTER, Ordering::Release);
    // SAFETY: the owner thread, with no use in progress (checked above).
    let st = unsafe { (*STATE.0.get()).take() };
    st.ok_or_else(|| errors::refuse("MPI_Finalize", "MPI is not initialized"))
}

#[inline(always)]
fn check_caller() -> Result<(), c_int> {
    if GATE.load(Ordering::Acquire) != IDLE || OWNER.load(Ordering::Relaxed) != this_thread() {
        return Err(refused());
    }
    Ok(())
}

/// The state, held by one call: while it lives the gate is `BUSY`, so no other reference to
/// the state can be made (another thread is refused by the owner check, a nested call by the
/// gate).
pub(crate) struct Entered {
    st: &'static mut State,
}

impl std::ops::Deref for Entered {
    type Target = State;
    #[inline(always)]
    fn deref(&self) -> &State {
        self.st
    }
}

impl std::ops::DerefMut for Entered {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut State {
        self.st
    }
}

impl Drop for Entered {
    #[inline(always)]
    fn drop(&mut self) {
        GATE.store(IDLE, Ordering::Release);
    }
}

/// Enters the state for one call, on the initializing thread; the error code of a refusal
/// otherwise (MPI not running, another thread, a nested call).
#[inline(always)]
pub(crate) fn enter() -> Result<Entered, c_int> {
    check_caller()?;
    GATE.store(BUSY, Ordering::Relaxed);
    // SAFETY: the owner thread (the only one that touches the cell), with no other use in
    // progress: GATE was IDLE and stays BUSY until the returned guard is dropped, and every
    // way to the cell goes through this check, so this is the only reference while it lives.
    match unsafe { (*STATE.0.get()).as_mut() } {
        Some(st) => Ok(Entered { st }),
        None => {
            GATE.store(IDLE, Ordering::Release);
            Err(not_running())
        }
    }
}

/// Runs `f` on the state (see [`enter`]).
#[inline(always)]
pub(crate) fn with<R>(f: impl FnOnce(&mut State) -> R) -> Result<R, c_int> {
    let mut st = enter()?;
    Ok(f(&mut st))
}

/// Why a call was refused.
#[cold]
#[inline(never)]
fn refused() -> c_int {
    match GATE.load(Ordering::Acquire) {
        BUSY if OWNER.load(Ordering::Relaxed) == this_thread() => errors::refuse(
            "MPI",
            "an MPI call made from inside another one (a callback): not supported",
        ),
        IDLE | BUSY => wrong_thread(),
        _ => not_running(),
    }
}

#[cold]
fn not_running() -> c_int {
    let why = match phase() {
        Phase::Before => "MPI is not initialized (call MPI_Init first)",
        _ => "MPI is finalized",
    };
    errors::refuse("MPI", why)
}

#[cold]
fn wrong_thread() -> c_int {
    errors::refuse(
        "MPI",
        "called from a thread other than the one that initialized MPI \
         (this library provides MPI_THREAD_FUNNELED)",
    )
}

//! The one MPI process this library serves: its ch4 universe, the communicators the program
//! holds handles to, and whose thread may call.
//!
//! The library provides `MPI_THREAD_FUNNELED`: the thread that initialized MPI makes every
//! call. That is checked on each call (one load of the thread's identity and a compare), and
//! a call from another thread fails with an error instead of racing on the device. The state sits in a
//! static cell that only that thread touches, and a call that would re-enter it (none of the
//! library's own code does) fails the same way.

use std::cell::UnsafeCell;
use std::ffi::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};

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
    /// `MPI_COMM_WORLD`'s device communicator (also in `comms[0]`).
    pub world: CommId,
    /// `MPI_COMM_SELF`'s device communicator (also in `comms[1]`).
    pub me: CommId,
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
            world,
            me,
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

    /// The device's communicator behind handle `h`. `MPI_COMM_WORLD` and `MPI_COMM_SELF`, which
    /// most calls name and which cannot be freed, are answered from copies without the table
    /// lookup.
    #[inline(always)]
    pub fn comm(&mut self, h: Handle) -> ch4::Result<CommId> {
        if h == abi::COMM_WORLD {
            return Ok(self.world);
        }
        if h == abi::COMM_SELF {
            return Ok(self.me);
        }
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

/// Where the process stands, who may call, and whether a call is using the state, in one word
/// so that the check on every call is one load and one compare: `BEFORE` (0), `AFTER` (2),
/// the owner thread's identity while MPI runs and no call is in progress, and that identity
/// with bit 0 set while a call is in progress. A thread identity is the address of its thread
/// control block, which is aligned, so it is never 0 or 2 and never has bit 0 set. Only the
/// owner thread moves the word between idle and busy.
static GATE: AtomicUsize = AtomicUsize::new(BEFORE);
const BEFORE: usize = 0;
const AFTER: usize = 2;
const BUSY_BIT: usize = 1;

struct Cell(UnsafeCell<Option<State>>);

// SAFETY: the cell is only reached through `enter`, `install` and `take`, which check that the
// caller is the thread recorded in GATE (the one that initialized MPI) and that no other use
// is in progress (GATE holds the bare identity; they set the busy bit while they hold the
// reference), so at most one `&mut State` exists at a time, on one thread.
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

/// The calling thread's identity: the address of its thread control block. On x86-64 the
/// psABI's TLS rules put that address at `%fs:0` (the TCB points to itself), so reading it is
/// one instruction instead of a call to `pthread_self` through the PLT; elsewhere it is
/// `pthread_self`, which glibc and musl also implement as the TCB's address.
#[inline(always)]
fn this_thread() -> usize {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    {
        let tcb: usize;
        // SAFETY: on x86-64 Linux every thread's %fs base is its TLS block, whose first word
        // is the TCB's own address (x86-64 psABI, "Thread-Local Storage"); the read has no
        // side effects and touches no Rust-visible memory.
        unsafe {
            std::arch::asm!(
                "mov {}, qword ptr fs:[0]",
                out(reg) tcb,
                options(nostack, readonly, preserves_flags, pure)
            )
        };
        tcb
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    {
        // SAFETY: pthread_self has no preconditions.
        unsafe { libc::pthread_self() as usize }
    }
}

/// Whether the caller is the thread that initialized MPI (`MPI_Is_thread_main`; false before
/// `MPI_Init` and after `MPI_Finalize`).
pub(crate) fn on_main_thread() -> bool {
    GATE.load(Ordering::Relaxed) & !BUSY_BIT == this_thread()
}

/// Makes `st` the process's state, owned by the calling thread.
pub(crate) fn install(st: State) {
    // SAFETY: called once, from MPI_Init while GATE is BEFORE: no call can be using the cell
    // (`enter` refuses until GATE holds an owner).
    unsafe { *STATE.0.get() = Some(st) };
    GATE.store(this_thread(), Ordering::Release);
}

/// Takes the state out (MPI_Finalize); later calls find MPI finalized.
pub(crate) fn take() -> Result<State, c_int> {
    check_caller()?;
    GATE.store(AFTER, Ordering::Release);
    // SAFETY: the owner thread, with no use in progress (checked above).
    let st = unsafe { (*STATE.0.get()).take() };
    st.ok_or_else(|| errors::refuse("MPI_Finalize", "MPI is not initialized"))
}

/// The caller's identity if it is the owner and no call is in progress.
#[inline(always)]
fn check_caller() -> Result<usize, c_int> {
    let me = this_thread();
    if GATE.load(Ordering::Acquire) != me {
        return Err(refused());
    }
    Ok(me)
}

/// The state, held by one call: while it lives the gate's busy bit is set, so no other reference to
/// the state can be made (another thread is refused by the owner check, a nested call by the
/// gate).
pub(crate) struct Entered {
    st: &'static mut State,
    /// The caller's identity, which the gate gets back when the call ends.
    me: usize,
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
        GATE.store(self.me, Ordering::Release);
    }
}

/// Enters the state for one call, on the initializing thread; the error code of a refusal
/// otherwise (MPI not running, another thread, a nested call).
#[inline(always)]
pub(crate) fn enter() -> Result<Entered, c_int> {
    let me = check_caller()?;
    GATE.store(me | BUSY_BIT, Ordering::Relaxed);
    // SAFETY: the owner thread (the only one that touches the cell), with no other use in
    // progress: GATE held the bare identity and keeps the busy bit until the returned guard is dropped, and every
    // way to the cell goes through this check, so this is the only reference while it lives.
    match unsafe { (*STATE.0.get()).as_mut() } {
        Some(st) => Ok(Entered { st, me }),
        None => {
            GATE.store(me, Ordering::Release);
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
        BEFORE | AFTER => not_running(),
        g if g == this_thread() | BUSY_BIT => errors::refuse(
            "MPI",
            "an MPI call made from inside another one (a callback): not supported",
        ),
        _ => wrong_thread(),
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

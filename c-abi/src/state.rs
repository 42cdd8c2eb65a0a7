//! The one MPI process this library serves: its ch4 universe, the tables behind the program's
//! handles, and which threads may call.
//!
//! The level is the one `MPI_Init_thread` asked for. Below `MPI_THREAD_MULTIPLE` the rank is
//! the single-threaded one (no lock on the device) and a gate on every call keeps the level's
//! rule: at `SINGLE` and `FUNNELED` only the thread that initialized MPI enters (one load of the
//! thread's identity and a compare, no atomic read-modify-write); at `SERIALIZED` any thread,
//! one at a time (a compare-and-swap). A call that breaks the rule, or re-enters from inside
//! another, fails with an error instead of racing on the device.
//!
//! At `MPI_THREAD_MULTIPLE` the rank has VCIs (`CH4_NUM_VCIS`), each device behind its own
//! lock, and every communicator is bound to one when it is made (the facade's rule: from its
//! context id, so every member picks the same). A call takes only the lock of its
//! communicator's VCI, and a blocking call lets go of it between polls (`call::on_device`), so
//! threads on different communicators never wait for each other and threads on one take
//! turns. The handle tables (communicators, persistent requests, datatypes, groups, probed
//! messages, buffered sends) each sit behind a short lock of their own.
//!
//! Lock order, which keeps the library free of deadlock: a table's lock may be held while a
//! VCI's is taken (completing requests freed while active does), never the other way round; no
//! call holds two tables' locks at once, or any lock while it waits on the network.

use std::cell::UnsafeCell;
use std::ffi::c_int;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use ch4::process::{ProcessNetmod, Universe};
use ch4::SelectedShm as ShmTransport;
use ch4::{DeviceGuard, Multiple, Single};
use ch4_core::{CommId, ErrorKind, ReqHandle};

use crate::abi::{self, Handle};
use crate::errors;

/// A communicator the program holds a handle to, and how its errors are reported.
pub(crate) struct CommSlot {
    /// The device's communicator.
    pub id: CommId,
    /// The VCI it is bound to.
    pub vci: usize,
    /// `MPI_ERRORS_ARE_FATAL` (or `MPI_ERRORS_ABORT`): an error ends the job. Otherwise
    /// (`MPI_ERRORS_RETURN`) it is returned.
    pub fatal: bool,
    /// Its process topology, if it has one (`MPI_Cart_create`, `MPI_Graph_create`,
    /// `MPI_Dist_graph_create`; see `topology`).
    pub topo: Option<crate::topology::Topology>,
}

/// A persistent request (`MPI_Send_init`, `MPI_Recv_init`): what each `MPI_Start` posts.
pub(crate) struct Persistent {
    /// The send mode; `None` for a receive.
    pub send: Option<ch4_core::SendMode>,
    /// A buffered send (`MPI_Bsend_init`): each start copies the data into the attached
    /// buffer's account, as `MPI_Ibsend` does.
    pub buffered: bool,
    /// The buffer's address (the program keeps it valid while the request is active).
    pub buf: usize,
    /// The element count (an `MPI_Count`: the `_c` forms take counts beyond an int).
    pub count: i64,
    /// The datatype handle.
    pub datatype: Handle,
    /// The destination or source (C's numbering).
    pub peer: c_int,
    /// The tag (C's numbering).
    pub tag: c_int,
    /// The communicator handle.
    pub comm: Handle,
    /// The VCI of its communicator.
    pub vci: usize,
    /// The device request of the current round, while active.
    pub active: Option<ReqHandle>,
    /// For a persistent collective (`MPI_Allreduce_init`): the plan each start builds its
    /// schedule from, and the tag reserved for it. The point-to-point fields are then unused.
    pub collective: Option<(crate::collectives::plans::Plan, ch4_core::Tag)>,
}

impl Persistent {
    /// A persistent collective on communicator `comm` (bound to VCI `vci`).
    pub fn collective(
        comm: Handle,
        vci: usize,
        plan: crate::collectives::plans::Plan,
        tag: ch4_core::Tag,
    ) -> Persistent {
        Persistent {
            send: None,
            buffered: false,
            buf: 0,
            count: 0,
            datatype: abi::DATATYPE_NULL,
            peer: 0,
            tag: 0,
            comm,
            vci,
            active: None,
            collective: Some((plan, tag)),
        }
    }
}

/// The process's rank at the level `MPI_Init_thread` gave it.
pub(crate) enum Rank {
    /// `MPI_THREAD_SINGLE`, `FUNNELED` or `SERIALIZED`: one device, no lock; the gate admits
    /// one call at a time.
    Single(Gated),
    /// `MPI_THREAD_MULTIPLE`: the devices of the rank's VCIs, each behind its own lock.
    Multiple(Universe<Multiple>),
}

/// The single-threaded universe, which holds `Rc`s and `RefCell`s and so is neither `Send`
/// nor `Sync` in Rust's eyes.
pub(crate) struct Gated(pub(crate) Universe<Single>);

// SAFETY: a `Gated` exists only in a process initialized below MPI_THREAD_MULTIPLE, and is only
// reached through `enter`, whose gate admits one call at a time (the owner thread alone at
// SINGLE and FUNNELED; one thread at a time, by a compare-and-swap, at SERIALIZED). The gate's
// release store when a call ends and acquire load when the next begins order every access of
// one call before the next one's, so the `Rc` counts and `RefCell` flags inside are never
// touched by two threads at once; no `Rc` of it escapes a call (the library keeps only ids).
unsafe impl Sync for Gated {}
// SAFETY: as for `Sync`: the value moves into the static once, at MPI_Init, and is then only
// used under the gate.
unsafe impl Send for Gated {}

/// A table of the library's, behind a short lock: at `MPI_THREAD_MULTIPLE` several calls use
/// them at once. No call waits on the device while it holds one.
pub(crate) struct Table<T>(Mutex<T>);

impl<T> Table<T> {
    fn new(value: T) -> Table<T> {
        Table(Mutex::new(value))
    }

    /// The table, held until the guard drops. A panic while it was held (none of the
    /// library's code panics) leaves it as it was.
    #[inline(always)]
    pub fn lock(&self) -> MutexGuard<'_, T> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The tables of handles: objects by index, `None` where one was freed.
impl<T> Table<Vec<Option<T>>> {
    /// Puts `value` in the first free slot; its index.
    pub fn insert(&self, value: T) -> usize {
        self.insert_from(0, value)
    }

    /// [`Table::insert`] at index `first` or above.
    pub fn insert_from(&self, first: usize, value: T) -> usize {
        let mut v = self.lock();
        match v.iter().skip(first).position(Option::is_none) {
            Some(i) => {
                v[first + i] = Some(value);
                first + i
            }
            None => {
                v.push(Some(value));
                v.len() - 1
            }
        }
    }

    /// Runs `f` on the object at `i`, if there is one.
    pub fn with<R>(&self, i: usize, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        self.lock().get_mut(i).and_then(Option::as_mut).map(f)
    }

    /// A copy of the object at `i`, if there is one.
    pub fn cloned(&self, i: usize) -> Option<T>
    where
        T: Clone,
    {
        self.with(i, |t| t.clone())
    }

    /// Takes the object at `i` out, if there is one.
    pub fn remove(&self, i: usize) -> Option<T> {
        self.lock().get_mut(i).and_then(Option::take)
    }
}

/// The device of one VCI, held: a `RefMut` below `MPI_THREAD_MULTIPLE`, the VCI's lock at it.
pub(crate) enum Dev<'a> {
    /// The one device.
    Single(DeviceGuard<'a, ProcessNetmod, ShmTransport, Single>),
    /// One VCI's device.
    Multiple(DeviceGuard<'a, ProcessNetmod, ShmTransport, Multiple>),
}

impl std::ops::Deref for Dev<'_> {
    type Target = Device;
    #[inline(always)]
    fn deref(&self) -> &Device {
        match self {
            Dev::Single(d) => d,
            Dev::Multiple(d) => d,
        }
    }
}

impl std::ops::DerefMut for Dev<'_> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut Device {
        match self {
            Dev::Single(d) => d,
            Dev::Multiple(d) => d,
        }
    }
}

/// A device request and the VCI whose device holds it, packed as its C handle carries them
/// (`abi::request_out`): decoding a handle is then a test of its kind, and the single-threaded
/// copies of the hot functions, where every VCI is 0, read the device's handle with no
/// unpacking at all ([`DevReq::handle_at`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DevReq {
    /// The device handle's 64 bits with the VCI in bits 24..30 of its index
    /// (`abi::VCI_SHIFT`), except for `ReqHandle::DONE`, whose index has every bit set already
    /// (it names no request on any VCI).
    packed: u64,
}

impl DevReq {
    /// Request `h` of VCI `vci`.
    #[inline(always)]
    pub fn new(h: ReqHandle, vci: usize) -> DevReq {
        DevReq {
            packed: h.to_raw() | ((vci as u64) << abi::VCI_SHIFT) & abi::VCI_MASK,
        }
    }

    /// From the bits of a C handle (its kind bits cleared).
    #[inline(always)]
    pub fn from_packed(packed: u64) -> DevReq {
        DevReq { packed }
    }

    /// The bits a C handle carries.
    #[inline(always)]
    pub fn packed(self) -> u64 {
        self.packed
    }

    /// Whether this is `ReqHandle::DONE`, whose index bits are all set.
    #[inline(always)]
    fn done(self) -> bool {
        self.packed & abi::INDEX_MASK == abi::INDEX_MASK
    }

    /// The device's handle.
    #[inline(always)]
    pub fn handle(self) -> ReqHandle {
        let vci_bits = if self.done() {
            0
        } else {
            self.packed & abi::VCI_MASK
        };
        ReqHandle::from_raw(self.packed & !vci_bits)
    }

    /// The device's handle in the copy of a level: below `MPI_THREAD_MULTIPLE` (`MT` false)
    /// every request is VCI 0's, so the bits are the handle as they are.
    #[inline(always)]
    pub fn handle_at<const MT: bool>(self) -> ReqHandle {
        if MT {
            self.handle()
        } else {
            ReqHandle::from_raw(self.packed)
        }
    }

    /// The VCI whose device holds it.
    #[inline(always)]
    pub fn vci(self) -> usize {
        if self.done() {
            0
        } else {
            ((self.packed & abi::VCI_MASK) >> abi::VCI_SHIFT) as usize
        }
    }
}

/// A communicator as calls use it: the device's id and its VCI.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CommRef {
    /// The device's communicator on its VCI.
    pub id: CommId,
    /// The VCI the communicator is bound to.
    pub vci: usize,
}

/// What the library keeps between calls.
pub(crate) struct State {
    /// The process's place in the job, at its thread level.
    pub rank: Rank,
    /// The level provided (`MPI_Query_thread`).
    pub level: c_int,
    /// `MPI_COMM_WORLD`'s device communicator (also in `comms[0]`), on VCI 0.
    pub world: CommId,
    /// `MPI_COMM_SELF`'s device communicator (also in `comms[1]`), on VCI 0.
    pub me: CommId,
    /// By index: 0 is `MPI_COMM_WORLD`, 1 `MPI_COMM_SELF`, the rest the program's
    /// (`abi::COMM_BASE` + index), `None` once freed.
    pub comms: Table<Vec<Option<CommSlot>>>,
    /// Requests freed with `MPI_Request_free` while still active: completed in the background,
    /// their results dropped.
    pub detached: Table<Vec<DevReq>>,
    /// Whether `detached` may hold anything: read without its lock by every completion.
    any_detached: AtomicBool,
    /// Persistent requests by index (`abi::persistent_out`), `None` once freed.
    pub persistent: Table<Vec<Option<Persistent>>>,
    /// Messages taken by a matched probe, with their VCIs, by index (`abi::message_out`),
    /// until received.
    pub messages: Table<Vec<Option<(ch4_core::Message, usize)>>>,
    /// Buffered sends: the attached buffers (the process's, the communicators') and the sends
    /// in flight.
    pub bsend: Table<crate::pt2pt::Bsend>,
    /// Generalized requests by index (`abi::grequest_out`), until completed and freed.
    pub grequests: Table<Vec<Option<crate::grequests::Grequest>>>,
    /// Partitioned requests by index (`abi::partitioned_out`), `None` once freed.
    pub partitioned: Table<crate::pt2pt::Partitions>,
    /// Derived datatypes by index (`derived::type_out`), `None` once freed.
    pub types: Table<Vec<Option<crate::derived::Desc>>>,
    /// Groups by index (`groups::group_out`), `None` once freed.
    pub groups: Table<Vec<Option<ch4_core::rankmap::Group>>>,
    /// The program's reduction operations by index (`ops::op_out`), `None` once freed.
    pub ops: Table<Vec<Option<crate::ops::UserOp>>>,
    /// A working buffer kept between collectives (`MPI_Reduce_scatter`'s reduced vector; a
    /// fresh one page-faults on every call). A call takes it out while it works.
    pub scratch: Table<Vec<u8>>,
}

/// The lock of one VCI of a rank at `MPI_THREAD_MULTIPLE`.
pub(crate) type VciLock<'r> = ch4::VciLock<'r, ProcessNetmod, ShmTransport, Multiple>;

/// The device type of this build's process mode.
pub(crate) type Device = ch4_core::Device<ProcessNetmod, ShmTransport>;

impl State {
    /// The state of a newly joined process.
    fn new(rank: Rank, level: c_int) -> State {
        let (world, me) = match &rank {
            Rank::Single(u) => (u.0.world().id(), u.0.context().self_comm().id()),
            Rank::Multiple(u) => (u.world().id(), u.context().self_comm().id()),
        };
        let predefined = |id| {
            Some(CommSlot {
                id,
                vci: 0,
                fatal: true,
                topo: None,
            })
        };
        State {
            rank,
            level,
            world,
            me,
            comms: Table::new(vec![predefined(world), predefined(me)]),
            detached: Table::new(Vec::new()),
            any_detached: AtomicBool::new(false),
            persistent: Table::new(Vec::new()),
            messages: Table::new(Vec::new()),
            bsend: Table::new(Default::default()),
            grequests: Table::new(Vec::new()),
            partitioned: Table::new(Default::default()),
            types: Table::new(Vec::new()),
            groups: Table::new(Vec::new()),
            ops: Table::new(Vec::new()),
            scratch: Table::new(Vec::new()),
        }
    }

    /// Whether the rank is below `MPI_THREAD_MULTIPLE` (the hot functions' one dispatch).
    #[inline(always)]
    pub fn single(&self) -> bool {
        matches!(self.rank, Rank::Single(_))
    }

    /// Runs `f` on the slot of communicator handle `h`.
    pub fn with_slot<R>(&self, h: Handle, f: impl FnOnce(&mut CommSlot) -> R) -> ch4::Result<R> {
        self.comms.with(slot_index(h), f).ok_or_else(|| bad_comm(h))
    }

    /// The device's communicator behind handle `h`, and its VCI. `MPI_COMM_WORLD` and
    /// `MPI_COMM_SELF`, which most calls name and which cannot be freed, are answered from
    /// copies without the table.
    #[inline(always)]
    pub fn comm(&self, h: Handle) -> ch4::Result<CommRef> {
        if h == abi::COMM_WORLD {
            return Ok(CommRef {
                id: self.world,
                vci: 0,
            });
        }
        if h == abi::COMM_SELF {
            return Ok(CommRef {
                id: self.me,
                vci: 0,
            });
        }
        self.comm_in_table(h)
    }

    /// [`State::comm`] in the copy of one level (`MT`: `MPI_THREAD_MULTIPLE`). Below it every
    /// communicator is VCI 0's, and only the id is looked up: returned alone it travels in a
    /// register, where the pair went through memory (stored as two halves and read back
    /// whole, a store-forwarding stall that cost `MPI_Isend` a fifth of its time).
    #[inline(always)]
    pub fn comm_at<const MT: bool>(&self, h: Handle) -> ch4::Result<CommRef> {
        if MT {
            return self.comm(h);
        }
        let id = if h == abi::COMM_WORLD {
            self.world
        } else if h == abi::COMM_SELF {
            self.me
        } else {
            self.comm_id_in_table(h)?
        };
        Ok(CommRef { id, vci: 0 })
    }

    #[inline(never)]
    fn comm_id_in_table(&self, h: Handle) -> ch4::Result<CommId> {
        self.with_slot(h, |s| s.id)
    }

    #[inline(never)]
    fn comm_in_table(&self, h: Handle) -> ch4::Result<CommRef> {
        self.with_slot(h, |s| CommRef {
            id: s.id,
            vci: s.vci,
        })
    }

    /// Whether errors on communicator `h` end the job (a handle that names no communicator:
    /// `MPI_COMM_WORLD`'s choice, as for errors that belong to no communicator).
    pub fn fatal(&self, h: Handle) -> bool {
        let comms = self.comms.lock();
        match comms.get(slot_index(h)) {
            Some(Some(s)) => s.fatal,
            _ => comms[0].as_ref().map_or(true, |s| s.fatal),
        }
    }

    /// A handle for a new communicator on VCI `vci`.
    pub fn add_comm(&self, id: CommId, vci: usize, fatal: bool) -> Handle {
        let slot = CommSlot {
            id,
            vci,
            fatal,
            topo: None,
        };
        abi::COMM_BASE + self.comms.insert_from(2, slot)
    }

    /// Runs `f` on persistent request `i`.
    pub fn with_persistent<R>(
        &self,
        i: usize,
        f: impl FnOnce(&mut Persistent) -> R,
    ) -> ch4::Result<R> {
        self.persistent.with(i, f).ok_or_else(|| {
            ch4::Error::new(ErrorKind::Request, "a persistent request that was freed")
        })
    }

    /// A handle index for a new persistent request.
    pub fn add_persistent(&self, p: Persistent) -> usize {
        self.persistent.insert(p)
    }

    /// The device of VCI `vci`, held for a step that does not wait (a blocking one goes through
    /// [`on_device`](crate::call::on_device), which lets other threads in between polls).
    #[inline(always)]
    pub fn device(&self, vci: usize) -> ch4::Result<Dev<'_>> {
        match &self.rank {
            Rank::Single(u) => Ok(Dev::Single(u.0.context().device()?)),
            Rank::Multiple(u) => Ok(Dev::Multiple(u.context().device_at(vci)?)),
        }
    }

    /// The rank's VCIs.
    pub fn vcis(&self) -> usize {
        match &self.rank {
            Rank::Single(_) => 1,
            Rank::Multiple(u) => u.context().vcis(),
        }
    }

    /// One round of progress on every VCI (a wait over requests of several).
    pub fn progress(&self) -> ch4::Result<usize> {
        let mut n = 0;
        for vci in 0..self.vcis() {
            n += self.device(vci)?.progress()?;
        }
        Ok(n)
    }

    /// Between two passes of a waiting loop that found nothing: the device's pause below
    /// `MPI_THREAD_MULTIPLE`; a backoff with no lock held at it.
    pub fn pause(&self, idle: u32) -> ch4::Result<()> {
        match &self.rank {
            Rank::Single(_) => self.device(0)?.pause(idle, None),
            Rank::Multiple(_) => ch4_core::device::backoff(idle),
        }
        Ok(())
    }

    /// Adds a communicator agreed on by its members to its VCI's device.
    pub fn adopt_comm(&self, c: ch4_core::comm::Comm) -> ch4::Result<CommRef> {
        match &self.rank {
            Rank::Single(u) => Ok(CommRef {
                id: u.0.context().device()?.adopt_comm(c)?,
                vci: 0,
            }),
            Rank::Multiple(u) => {
                let (vci, id) = u.context().adopt_comm(c)?;
                Ok(CommRef { id, vci })
            }
        }
    }

    /// Ends the whole job (PMI abort).
    pub fn abort(&self, code: i32, message: &str) -> ! {
        match &self.rank {
            Rank::Single(u) => u.0.abort(code, message),
            Rank::Multiple(u) => u.abort(code, message),
        }
    }

    /// Whether requests freed while active may still wait to be completed.
    #[inline(always)]
    pub fn any_detached(&self) -> bool {
        self.any_detached.load(Ordering::Relaxed)
    }

    /// Keeps `r`, freed while active, to be completed in the background.
    pub fn detach(&self, r: DevReq) {
        self.detached.lock().push(r);
        self.any_detached.store(true, Ordering::Relaxed);
    }

    /// Completes what it can of the requests freed while active.
    #[cold]
    pub fn reap_detached(&self) {
        let mut detached = self.detached.lock();
        detached.retain(|r| match self.device(r.vci()) {
            Ok(mut dev) => matches!(dev.test_status(r.handle()), Ok(None)),
            Err(_) => true,
        });
        self.any_detached
            .store(!detached.is_empty(), Ordering::Relaxed);
    }
}

/// The table index of communicator handle `h` (out of range for anything else).
#[inline(always)]
fn slot_index(h: Handle) -> usize {
    match h {
        abi::COMM_WORLD => 0,
        abi::COMM_SELF => 1,
        h if h >= abi::COMM_BASE => h - abi::COMM_BASE,
        _ => usize::MAX,
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
/// so that the check on every call is one load and one compare:
///
/// - `BEFORE` (0) and `AFTER` (2): outside MPI.
/// - At `MPI_THREAD_SINGLE` and `FUNNELED`: the owner thread's identity while no call is in
///   progress, and that identity with bit 0 set while one is. A thread identity is the address
///   of its thread control block, which is aligned, so it is never one of the small values
///   here and never has bit 0 set. Only the owner thread moves the word between idle and busy.
/// - At `MPI_THREAD_SERIALIZED`: `SERIALIZED` while no call is in progress, with bit 0 set
///   while one is; any thread may take it, by a compare-and-swap.
/// - At `MPI_THREAD_MULTIPLE`: `MULTIPLE`, for good: calls run at once, and the state's own
///   locks (the tables', each VCI's) keep them apart.
static GATE: AtomicUsize = AtomicUsize::new(BEFORE);
const BEFORE: usize = 0;
const AFTER: usize = 2;
const MULTIPLE: usize = 4;
const SERIALIZED: usize = 6;
const BUSY_BIT: usize = 1;

/// The thread that initialized MPI (`MPI_Is_thread_main`).
static MAIN_THREAD: AtomicUsize = AtomicUsize::new(0);

/// The state, made once by `MPI_Init` and kept until the process ends: at
/// `MPI_THREAD_MULTIPLE` another thread may still be in a call when `MPI_Finalize` runs (an
/// erroneous program, which gets errors rather than a freed state). A static in place rather
/// than a pointer or a `OnceLock`: the hot functions then find `MPI_COMM_WORLD`'s id at a fixed
/// address, with no load of a pointer and no check of a once-flag.
static STATE: StateCell = StateCell(UnsafeCell::new(MaybeUninit::uninit()));

/// Whether `MPI_Init` has begun making the state (two threads that call it at once: the second
/// is refused).
static INSTALLING: AtomicBool = AtomicBool::new(false);

struct StateCell(UnsafeCell<MaybeUninit<State>>);

// SAFETY: the cell is written once, by `install`, before the gate leaves BEFORE (a release
// store), and never again; it is read only through `state`, by callers that saw the gate past
// BEFORE with an acquire load (or a successful compare-and-swap). `State` is `Sync` (its
// tables are behind locks, its universe behind the gate or its VCIs' locks).
unsafe impl Sync for StateCell {}

/// The state.
///
/// # Safety
/// The caller saw the gate past `BEFORE` with an acquire load: `install` has written the state.
#[inline(always)]
unsafe fn state() -> &'static State {
    // SAFETY: the caller's contract: initialized, and never written again.
    unsafe { (*STATE.0.get()).assume_init_ref() }
}

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
    phase() == Phase::Running && MAIN_THREAD.load(Ordering::Relaxed) == this_thread()
}

/// Joins the job at the thread level `required` asks for (`MPI_THREAD_SINGLE` ..
/// `MPI_THREAD_MULTIPLE`) and makes the state; returns the level provided, which is the one
/// asked for.
pub(crate) fn install(required: c_int) -> ch4::Result<c_int> {
    if INSTALLING.swap(true, Ordering::AcqRel) {
        return Err(ch4::Error::new(
            ErrorKind::Arg,
            "MPI was already initialized",
        ));
    }
    let level = required.clamp(abi::THREAD_SINGLE, abi::THREAD_MULTIPLE);
    // A progress thread shares the rank's devices, which only the multiple level's locks
    // allow: with CH4_ASYNC_PROGRESS on, the rank runs at that level inside whatever level the
    // program asked for (as MPICH does), which is still the level it is told it has.
    let async_progress = ch4_core::env::switch("CH4_ASYNC_PROGRESS")?.unwrap_or(false);
    let (rank, gate) = if level == abi::THREAD_MULTIPLE || async_progress {
        (
            Rank::Multiple(ch4::process::init_thread(Multiple)?),
            MULTIPLE,
        )
    } else {
        let u = Gated(ch4::process::init()?);
        let gate = if level == abi::THREAD_SERIALIZED {
            SERIALIZED
        } else {
            this_thread()
        };
        (Rank::Single(u), gate)
    };
    // SAFETY: the INSTALLING flag (taken above) makes this the only write ever, and no call
    // reads the cell before the gate's release store below.
    unsafe { (*STATE.0.get()).write(State::new(rank, level)) };
    MAIN_THREAD.store(this_thread(), Ordering::Relaxed);
    GATE.store(gate, Ordering::Release);
    Ok(level)
}

/// Closes the gate for `MPI_Finalize`: later calls find MPI finalized. Below
/// `MPI_THREAD_MULTIPLE` the caller must be one the gate would let in, with no call in
/// progress.
pub(crate) fn leave() -> Result<&'static State, c_int> {
    let g = GATE.load(Ordering::Acquire);
    let admitted = match g {
        MULTIPLE | SERIALIZED => GATE
            .compare_exchange(g, AFTER, Ordering::AcqRel, Ordering::Acquire)
            .is_ok(),
        g if g == this_thread() => {
            GATE.store(AFTER, Ordering::Release);
            true
        }
        _ => false,
    };
    if !admitted {
        return Err(refused());
    }
    // SAFETY: admitted: the gate was past BEFORE.
    Ok(unsafe { state() })
}

/// The state, held by one call. Below `MPI_THREAD_MULTIPLE` the gate is busy while it lives,
/// so no other call can enter (another thread is refused, a nested call too); at
/// `MPI_THREAD_MULTIPLE` the state is shared and its locks keep calls apart.
pub(crate) struct Entered {
    st: &'static State,
    /// What the gate gets back when the call ends (0: nothing, at `MPI_THREAD_MULTIPLE`).
    restore: usize,
}

impl std::ops::Deref for Entered {
    type Target = State;
    #[inline(always)]
    fn deref(&self) -> &State {
        self.st
    }
}

impl Drop for Entered {
    #[inline(always)]
    fn drop(&mut self) {
        if self.restore != 0 {
            GATE.store(self.restore, Ordering::Release);
        }
    }
}

/// Enters the state for one call; the error code of a refusal otherwise (MPI not running,
/// another thread below `MPI_THREAD_SERIALIZED`, two at once at it).
#[inline(always)]
pub(crate) fn enter() -> Result<Entered, c_int> {
    let me = this_thread();
    let g = GATE.load(Ordering::Acquire);
    if g != me {
        return enter_other(g);
    }
    GATE.store(me | BUSY_BIT, Ordering::Relaxed);
    Ok(Entered {
        // SAFETY: the gate held this thread's identity: past BEFORE.
        st: unsafe { state() },
        restore: me,
    })
}

/// [`enter`] for the thread that owns a rank below `MPI_THREAD_SERIALIZED`, `None` for every
/// other case. The hot functions (send, receive, wait) start with it and hand every other case
/// to an out-of-line copy of themselves that calls [`enter`]: the compare is then their only
/// branch before the body, and their arguments stay in the registers they came in.
#[inline(always)]
pub(crate) fn enter_owner() -> Option<Entered> {
    let me = this_thread();
    if GATE.load(Ordering::Acquire) != me {
        return None;
    }
    GATE.store(me | BUSY_BIT, Ordering::Relaxed);
    Some(Entered {
        // SAFETY: the gate held this thread's identity: past BEFORE.
        st: unsafe { state() },
        restore: me,
    })
}

/// [`enter`] at `MPI_THREAD_MULTIPLE` and `SERIALIZED` (or a refusal), out of line so that
/// the single-threaded check stays one compare.
#[inline(never)]
fn enter_other(g: usize) -> Result<Entered, c_int> {
    let restore = match g {
        MULTIPLE => 0,
        SERIALIZED
            if GATE
                .compare_exchange(
                    SERIALIZED,
                    SERIALIZED | BUSY_BIT,
                    Ordering::Acquire,
                    Ordering::Acquire,
                )
                .is_ok() =>
        {
            SERIALIZED
        }
        // A call from inside another on the thread that owns a single-threaded rank: a
        // reduction's function, an error handler or an attribute's callback asking about a
        // datatype or a communicator, as MPI lets them (MPICH's tests do). It leaves the gate
        // busy for the call around it; the device, which that call may hold, refuses a second
        // holder with an error (`DeviceGuard`), so a nested call that needs it fails cleanly.
        g if g == this_thread() | BUSY_BIT => g,
        _ => return Err(refused()),
    };
    Ok(Entered {
        // SAFETY: the gate was MULTIPLE or SERIALIZED (acquire load or CAS), or this thread's
        // own, busy with the call this one is nested in: past BEFORE.
        st: unsafe { state() },
        restore,
    })
}

/// Runs the program's callback `f` (an attribute's copy or delete function, an error handler)
/// from inside a call, so that it may make MPI calls of its own, as the standard lets it (MPI
/// 4.1, sections 7.7.2 and 9.3; MPICH's tests call `MPI_Comm_rank`, `MPI_Comm_get_attr` and
/// `MPI_Comm_delete_attr` from delete functions). Below `MPI_THREAD_MULTIPLE` the gate is let
/// go for the callback's time and taken back after it: the caller must hold no table lock and
/// no device across `f`, as a call that has not begun would not. At `MPI_THREAD_MULTIPLE`
/// the gate holds nothing back and `f` just runs.
pub(crate) fn callback<R>(f: impl FnOnce() -> R) -> R {
    let g = GATE.load(Ordering::Relaxed);
    if g & BUSY_BIT == 0 {
        return f();
    }
    let idle = g & !BUSY_BIT;
    GATE.store(idle, Ordering::Release);
    let r = f();
    // Taken back only if the callback left it idle (it may have finalized MPI).
    let _ = GATE.compare_exchange(idle, g, Ordering::Acquire, Ordering::Relaxed);
    r
}

/// Runs `f` on the state (see [`enter`]).
#[inline(always)]
pub(crate) fn with<R>(f: impl FnOnce(&State) -> R) -> Result<R, c_int> {
    let st = enter()?;
    Ok(f(&st))
}

/// Why a call was refused.
#[cold]
#[inline(never)]
fn refused() -> c_int {
    match GATE.load(Ordering::Acquire) {
        BEFORE | AFTER => not_running(),
        g if g == SERIALIZED | BUSY_BIT => errors::refuse(
            "MPI",
            "two threads called at once, or a call was made from inside another one \
             (this process was initialized at MPI_THREAD_SERIALIZED)",
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
         (this process was initialized at MPI_THREAD_FUNNELED or below: \
         MPI_Init_thread with MPI_THREAD_MULTIPLE lets every thread call)",
    )
}

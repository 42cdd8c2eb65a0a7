//! ch4: an MPI point-to-point engine after MPICH's CH4 design, with a safe Rust API.
//!
//! The device underneath, `ch4_core::Device<N, S>`, is generic over the network module `N` and
//! the shared-memory layer `S`; every send and receive path is monomorphized for them. This
//! crate picks them for the build (Cargo features choose the netmod) and wraps the device in an
//! API that cannot be misused into undefined behaviour: typed buffers, `Result` for everything a
//! user or peer can get wrong, and nonblocking operations whose buffers are borrowed by a
//! [`scope`](Context::scope) that completes every request before the borrow ends.
//!
//! ```
//! use ch4::threads::Threads;
//!
//! // Four ranks as four threads of this process.
//! let sums = Threads::new(4).run(|ctx| {
//!     let world = ctx.world();
//!     let (rank, size) = (world.rank(), world.size());
//!     // Pass a token around the ring.
//!     let mut token = [0u64];
//!     if rank == 0 {
//!         world.send(&[1u64], 1, 0)?;
//!         world.recv(&mut token, size - 1, 0)?;
//!     } else {
//!         world.recv(&mut token, rank - 1, 0)?;
//!         token[0] += 1;
//!         world.send(&token, (rank + 1) % size, 0)?;
//!     }
//!     // And add up the ranks.
//!     let mut total = [0u64];
//!     world.allreduce(&[rank as u64], &mut total, ch4::op::sum)?;
//!     Ok(total[0])
//! })
//! .unwrap();
//! assert_eq!(sums, vec![6, 6, 6, 6]);
//! ```
#![deny(unsafe_op_in_unsafe_fn)]

mod communicator;
pub use thread_level as level;
pub mod log;
pub mod op;
mod owned;
pub mod process;
mod process_manager;
pub mod progress;
mod request;
pub mod settings;
pub mod threads;

use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use ch4_core::blocking::DeviceLock;

use crate::level::{RankLock, Refused, VciSet};

pub use ch4_core::coll::UNDEFINED;
pub use ch4_core::comm::CommId;
pub use ch4_core::core::DeviceConfig;
pub use ch4_core::datatype::{Layout, Pod, Zeroable};
pub use ch4_core::rankmap::{Group, RankMap};
pub use ch4_core::transport::{Netmod, NoShm, PeerState, Shm};
pub use ch4_core::{
    Error, ErrorKind, Result, SendMode, Status, ANY_SOURCE, ANY_TAG, PROC_NULL, TAG_UB,
};
pub use ch4_core::{Rank, Tag};
pub use communicator::{Communicator, Message, Probed};
pub use level::{Funneled, Level, Multiple, Serialized, Single, ThreadLevel};
pub use owned::OwnedRequest;
pub use request::{Request, Scope, WaitAllItem};

/// Re-exported so users can name the device type of their build.
pub use ch4_core::Device as GenericDevice;

/// The netmod of this build, which both process mode and ranks as threads use for peers on
/// other nodes: with more than one of the `tcp`, `ofi` and `ucx` features, the one `CH4_NETMOD`
/// chooses when the job starts ([`netmod_any::AnyNetmod`]: an enum dispatched by `match`).
#[cfg(any(
    all(feature = "tcp", feature = "ofi"),
    all(feature = "tcp", feature = "ucx"),
    all(feature = "ofi", feature = "ucx")
))]
pub type SelectedNetmod = netmod_any::AnyNetmod;
/// The netmod of this build, which both process mode and ranks as threads use for peers on
/// other nodes: the libfabric netmod, the only one built in.
#[cfg(all(feature = "ofi", not(any(feature = "tcp", feature = "ucx"))))]
pub type SelectedNetmod = netmod_ofi::OfiNetmod;
/// The netmod of this build, which both process mode and ranks as threads use for peers on
/// other nodes: the UCX netmod, the only one built in.
#[cfg(all(feature = "ucx", not(any(feature = "tcp", feature = "ofi"))))]
pub type SelectedNetmod = netmod_ucx::UcxNetmod;
/// The netmod of this build, which both process mode and ranks as threads use for peers on
/// other nodes: the TCP netmod, the only one built in (the default), over one rail or the several
/// `CH4_RAILS` names.
#[cfg(all(feature = "tcp", not(any(feature = "ofi", feature = "ucx"))))]
pub type SelectedNetmod = netmod_rails::TcpRails;
/// The netmod of this build: none (a job must then fit on one node).
#[cfg(not(any(feature = "tcp", feature = "ofi", feature = "ucx")))]
pub type SelectedNetmod = ch4_core::transport::NoNetmod;
/// The shared-memory layer of this build: lock-free per-pair rings in a node segment.
pub type SelectedShm = shm::ShmTransport;
/// The device of this build.
pub type Device = ch4_core::Device<SelectedNetmod, SelectedShm>;

/// How long finalize waits for queued output to reach live peers, and for requests whose
/// owners dropped them to finish.
pub(crate) const FINALIZE_LIMIT: Duration = Duration::from_secs(60);

/// Drives every device in turn until none holds output for a live peer (or a close under
/// way): [`ch4_core::Device::flush`] across a rank's VCIs, bounded by `limit`.
fn flush_together<N, S, G>(devs: &mut [G], limit: Duration) -> Result<()>
where
    N: ch4_core::transport::Netmod,
    S: ch4_core::transport::Shm,
    G: std::ops::DerefMut<Target = ch4_core::Device<N, S>>,
{
    let start = std::time::Instant::now();
    while devs.iter().any(|d| d.has_queued_output()) {
        if start.elapsed() > limit {
            return Err(Error::new(
                ErrorKind::Pending,
                format!("output still queued after {limit:?}: a peer stopped receiving"),
            ));
        }
        let mut moved = 0;
        for dev in devs.iter_mut() {
            moved += dev.progress()?;
        }
        if moved == 0 {
            std::thread::yield_now();
        }
    }
    Ok(())
}

/// One rank's handle on its device: where communicators and scopes come from.
///
/// The type parameters default to this build's transports ([`SelectedNetmod`],
/// [`SelectedShm`]), which both process mode ([`process::init`]) and ranks as threads
/// ([`threads::Threads::run`]) use, so rank code can take a plain `Context` and run either way:
///
/// ```
/// fn rank_main(ctx: ch4::Context) -> ch4::Result<u32> {
///     let world = ctx.world();
///     let mut total = [0u32];
///     world.allreduce(&[1u32], &mut total, ch4::op::sum)?;
///     Ok(total[0])
/// }
/// let totals = ch4::threads::Threads::new(3).run(rank_main)?;
/// assert_eq!(totals, [3, 3, 3]);
/// # Ok::<(), ch4::Error>(())
/// ```
///
/// The thread level `L` ([`level`]) says which threads may use the context and the handles
/// made from it: at the default, [`Single`], it is neither `Send` nor `Sync` and nothing is
/// locked; at [`Multiple`] it is both, and threads call at once.
pub struct Context<N: Netmod = SelectedNetmod, S: Shm = SelectedShm, L: ThreadLevel = Single> {
    rank: L::Shared<RankState<N, S, L>>,
}

impl<N: Netmod, S: Shm, L: ThreadLevel> Clone for Context<N, S, L> {
    fn clone(&self) -> Self {
        Context {
            rank: self.rank.clone(),
        }
    }
}

impl<N: Netmod, S: Shm> Context<N, S> {
    /// Wraps a device that has already been connected to its peers, at the [`Single`] level.
    pub fn new(device: ch4_core::Device<N, S>) -> Context<N, S> {
        Context::at_level(device)
    }
}

impl<N: Netmod, S: Shm, L: ThreadLevel> Context<N, S, L> {
    /// Wraps a device that has already been connected to its peers, at the thread level `L`
    /// (`Context::<_, _, Multiple>::at_level(device)`).
    pub fn at_level(device: ch4_core::Device<N, S>) -> Context<N, S, L> {
        let (world, self_comm) = (device.world(), device.self_comm());
        Context::of_vcis(world, self_comm, L::Vcis::one(L::Lock::new(device)))
    }

    /// Wraps the devices of a rank's VCIs (virtual communication interfaces): `first`, which
    /// carries the world communicator, and `rest`, each connected to the same VCI of every
    /// other rank. Below [`Multiple`] a rank has one VCI, and `rest` must be empty.
    ///
    /// Every communicator is bound to one VCI when it is made, chosen from its context id
    /// (which all members agree on) so that all members pick the same one and all of the
    /// communicator's traffic, wildcard receives included, stays on it: MPI's ordering holds
    /// without matching across VCIs.
    pub fn with_vcis(
        first: ch4_core::Device<N, S>,
        mut rest: Vec<ch4_core::Device<N, S>>,
    ) -> Result<Context<N, S, L>> {
        for d in &mut rest {
            d.share_context_ids(&first);
        }
        let (world, self_comm) = (first.world(), first.self_comm());
        let locks = rest.into_iter().map(L::Lock::new).collect();
        let vcis = L::Vcis::new(L::Lock::new(first), locks).map_err(|_| {
            Error::new(
                ErrorKind::Arg,
                format!(
                    "several VCIs need the multiple thread level; this rank is at {}",
                    L::LEVEL
                ),
            )
        })?;
        Ok(Context::of_vcis(world, self_comm, vcis))
    }

    /// The context of a rank whose devices are `vcis`, the first holding `world` and
    /// `self_comm`.
    fn of_vcis(
        world: CommId,
        self_comm: CommId,
        vcis: L::Vcis<L::Lock<ch4_core::Device<N, S>>>,
    ) -> Context<N, S, L> {
        Context {
            rank: L::share(RankState {
                world,
                self_comm,
                vcis,
                detached: L::Lock::new(Vec::new()),
                finalized: AtomicBool::new(false),
                long_waits: AtomicU32::new(0),
                progress: progress::Progress::default(),
                long_waits_uncrowded: AtomicU32::new(u32::MAX),
            }),
        }
    }

    /// See [`RankState::set_long_waits_uncrowded`].
    pub(crate) fn set_long_waits_uncrowded(&self, threads: u32) {
        let rank: &RankState<N, S, L> = &self.rank;
        rank.set_long_waits_uncrowded(threads);
    }

    /// How many VCIs this rank has (`CH4_NUM_VCIS` at [`Multiple`], else 1).
    pub fn vcis(&self) -> usize {
        self.rank.vcis.len()
    }

    /// The largest tag a message may carry in this job (MPI_TAG_UB): what the networks this
    /// rank runs on carry (2^24 - 1 over libfabric and UCX, whose match bits hold the tag
    /// beside the context and the source), the same at every rank of the job. Fails only
    /// after finalize. [`TAG_UB`] is ch4's own limit, an upper bound of this one.
    pub fn tag_ub(&self) -> Result<Tag> {
        Ok(self.rank.device(0)?.tag_ub())
    }

    /// The thread level this rank provides (MPI_Query_thread): the level of its type.
    pub fn thread_level(&self) -> Level {
        L::LEVEL
    }

    /// All processes of the job.
    pub fn world(&self) -> Communicator<N, S, L> {
        Communicator::new(self.rank.clone(), 0, self.rank.world)
    }

    /// This process alone.
    pub fn self_comm(&self) -> Communicator<N, S, L> {
        Communicator::new(self.rank.clone(), 0, self.rank.self_comm)
    }

    /// Makes one round of progress on every transport; returns how many events it handled.
    pub fn progress(&self) -> Result<usize> {
        let mut n = 0;
        for vci in 0..self.rank.vcis.len() {
            n += self.rank.device(vci)?.progress()?;
        }
        self.rank.reap_detached();
        Ok(n)
    }

    /// The device of the first VCI (the world communicator's) itself, for what the safe API
    /// does not cover; [`Communicator::device`] gives a communicator's. Fails if it is already
    /// borrowed (a call from inside a reduction closure, for instance) or finalized.
    pub fn device(&self) -> Result<DeviceGuard<'_, N, S, L>> {
        self.rank.device(0)
    }

    /// The device of VCI `vci`, held, as [`Context::device`] holds the first; an index past
    /// the last VCI names the first. Blocking on it while it is held keeps other threads off
    /// the VCI: a blocking operation runs on [`Context::vci_lock`] instead.
    pub fn device_at(&self, vci: usize) -> Result<DeviceGuard<'_, N, S, L>> {
        self.rank
            .device(if vci < self.rank.vcis.len() { vci } else { 0 })
    }

    /// VCI `vci`'s device behind its lock, for code that drives the device directly (the C
    /// library does, with its own handles): a step that does not wait holds it
    /// ([`DeviceLock::enter`]); a blocking one runs on [`ch4_core::blocking::Shared`] over it,
    /// which lets other threads in between polls. An index past the last VCI names the first.
    pub fn vci_lock(&self, vci: usize) -> VciLock<'_, N, S, L> {
        self.rank
            .vci(if vci < self.rank.vcis.len() { vci } else { 0 })
    }

    /// The VCI a communicator with point-to-point context id `context` is bound to (the same
    /// on every member, see [`Context::with_vcis`]).
    pub fn vci_of_context(&self, context: u32) -> usize {
        self.rank.vci_of_context(context)
    }

    /// Adds a communicator just agreed on by its members (with [`ch4_core::coll::new_dup`],
    /// `new_split` or `new_create` on its parent's VCI) to the VCI its context id binds it to;
    /// returns that VCI and the communicator's id there. [`Communicator::dup`] and its kin do
    /// this themselves; code that holds raw communicator ids (the C library) calls it.
    pub fn adopt_comm(&self, comm: ch4_core::comm::Comm) -> Result<(usize, CommId)> {
        let vci = self.rank.vci_of_context(comm.context);
        let id = self.rank.device(vci)?.adopt_comm(comm)?;
        Ok((vci, id))
    }

    /// Runs `f` with a scope for nonblocking operations. Buffers lent to requests made in the
    /// scope must outlive it; when `f` returns (or panics), every request of the scope that is
    /// still pending is completed first — so even a forgotten request cannot outlive its buffer.
    pub fn scope<'a, R>(&self, f: impl FnOnce(&Scope<'a, N, S, L>) -> R) -> R {
        request::scope(self.rank.clone(), f)
    }

    /// The settings this rank runs with: every `CH4_*` setting that applies to it, the value in
    /// force (after defaults, the environment and the program's own choices) and what the
    /// environment said (MPICH's `MPIR_CVAR_DEBUG_SUMMARY`; `CH4_DEBUG_SUMMARY=1` prints it
    /// at start-up).
    pub fn settings(&self) -> Result<settings::Summary> {
        let dev = self.device()?;
        let mut summary = settings::Summary::of(&dev);
        summary.note_threads(L::LEVEL, self.vcis());
        Ok(summary)
    }

    /// Leaves the job in order (MPI_Finalize for this rank): waits for requests whose owners
    /// dropped them (bounded), flushes what the transports still hold for live peers and tells
    /// the peers this rank left, so their requests that wait on it fail instead of hanging.
    /// Every later call on this rank's communicators fails with a [`ErrorKind::Comm`] error.
    ///
    /// Fails with [`ErrorKind::Pending`], changing nothing, while requests of this rank are
    /// pending (complete them first, as MPI requires); with the flush's error when a peer
    /// stopped receiving (the rank is finalized all the same). Finalizing twice is a no-op.
    pub fn finalize(&self) -> Result<()> {
        self.rank.finalize()
    }

    /// Whether [`Context::finalize`] has run.
    pub fn is_finalized(&self) -> bool {
        self.rank.is_finalized()
    }
}

/// The device of a rank at level `L`, held for the guard's lifetime (a `RefMut` at the
/// single-threaded levels, a lock's guard at the others).
pub type DeviceGuard<'a, N, S, L> =
    <<L as ThreadLevel>::Lock<ch4_core::Device<N, S>> as RankLock<ch4_core::Device<N, S>>>::Guard<
        'a,
    >;

/// The list of dropped owned requests' buffers, held.
type DetachedGuard<'a, L> =
    <<L as ThreadLevel>::Lock<Vec<Detached>> as RankLock<Vec<Detached>>>::Guard<'a>;

/// A buffer kept alive for a dropped owned request until the device lets it go.
pub(crate) struct Detached {
    /// The VCI whose device holds the request.
    pub(crate) vci: usize,
    pub(crate) handle: ch4_core::ReqHandle,
    pub(crate) _buffer: Box<dyn Any + Send>,
}

/// What every handle on one rank shares: the device, the buffers of owned requests whose owners
/// dropped them while the network could still use them, and whether the rank has finalized.
///
/// Field order matters: the device is dropped before the buffers it may still point into.
pub(crate) struct RankState<N: Netmod, S: Shm, L: ThreadLevel> {
    /// The devices of the rank's VCIs, each behind its lock.
    pub(crate) vcis: L::Vcis<L::Lock<ch4_core::Device<N, S>>>,
    /// The device's world and self communicators (fixed for its life).
    world: CommId,
    self_comm: CommId,
    pub(crate) detached: L::Lock<Vec<Detached>>,
    finalized: AtomicBool,
    /// At the multiple level, the threads of this rank in a wait past its first idle polls.
    long_waits: AtomicU32,
    /// Asynchronous progress: the thread, when one runs, and awaiting tasks' wakers.
    pub(crate) progress: progress::Progress,
    /// The most `long_waits` this host runs without crowding its CPUs: its CPUs shared
    /// evenly among its ranks, set at launch; `u32::MAX` (never crowded) for a context made
    /// from devices by hand, and when `CH4_YIELD` chose for every wait.
    long_waits_uncrowded: AtomicU32,
}

impl<N: Netmod, S: Shm, L: ThreadLevel> RankState<N, S, L> {
    /// Takes the device, turning a reentrant use (a call from inside a reduction operator), a
    /// second thread's call at the serialized level, or a use after finalize into an error
    /// rather than a panic or a deadlock.
    #[inline(always)]
    pub(crate) fn device(&self, vci: usize) -> Result<DeviceGuard<'_, N, S, L>> {
        match self.vcis.get(vci).enter() {
            Ok(d) => {
                if L::YIELDS {
                    // A request may be posted now: a sleeping progress thread gets up for it.
                    // Looked at with the VCI held, so a thread that went to sleep after its
                    // last look at this VCI is seen asleep here (see `progress::drive`).
                    self.progress.nudge();
                }
                Ok(d)
            }
            Err(why) => Err(self.busy(why)),
        }
    }

    /// The VCI a new communicator with context id `context` is bound to: the same on every
    /// member, since all agree on the id. Consecutive ids go round the VCIs (each id pair,
    /// point-to-point and collective, is one slot).
    pub(crate) fn vci_of_context(&self, context: u32) -> usize {
        (context as usize / 2) % self.vcis.len()
    }

    /// VCI `vci` as a lock that blocking operations let go of between polls.
    pub(crate) fn vci(&self, vci: usize) -> VciLock<'_, N, S, L> {
        VciLock { rank: self, vci }
    }

    /// One round of progress on every VCI but `busy` that no other thread holds: a thread
    /// waiting on its own VCI does it now and then, so that traffic on VCIs no thread waits on
    /// still moves (MPI's progress rule: any blocked call makes progress on everything).
    #[cold]
    fn progress_others(&self, busy: usize) {
        for (i, lock) in self.vcis.all().enumerate() {
            if i != busy {
                if let Some(mut dev) = lock.try_enter() {
                    let _ = dev.progress();
                }
            }
        }
    }

    /// Whether more threads of this rank wait at once than the host has CPUs for (at the
    /// multiple level): each waiting loop of the rank then pauses as on a host with more
    /// ranks than CPUs, yielding at every idle poll past its first 64. The idle policy set
    /// at start-up counts ranks, not threads, so a rank with one communicating thread spins
    /// as a single-threaded one does: counting each VCI as a thread instead made one
    /// thread's waits yield (a quarter of a one-thread ping-pong went to `sched_yield`).
    #[inline(always)]
    fn crowded(&self) -> bool {
        L::YIELDS
            && self.long_waits.load(Ordering::Relaxed)
                > self.long_waits_uncrowded.load(Ordering::Relaxed)
    }

    /// Sets how many threads of this rank may wait at once before the host is crowded
    /// (see [`RankState::crowded`]).
    pub(crate) fn set_long_waits_uncrowded(&self, threads: u32) {
        self.long_waits_uncrowded.store(threads, Ordering::Relaxed);
    }

    /// The list of dropped owned requests' buffers, if no one else holds it.
    pub(crate) fn detached(&self) -> Option<DetachedGuard<'_, L>> {
        self.detached.enter().ok()
    }

    #[cold]
    fn busy(&self, why: Refused) -> Error {
        if why == Refused::Closed || self.is_finalized() {
            Error::new(
                ErrorKind::Comm,
                "this rank has finalized: no more calls on it",
            )
        } else if why == Refused::Concurrent {
            Error::new(
                ErrorKind::Arg,
                "two threads called at once on a rank at MPI_THREAD_SERIALIZED: start it at \
                 Multiple for concurrent calls",
            )
        } else {
            Error::new(
                ErrorKind::Arg,
                "the device is busy: ch4 calls cannot be made from inside a reduction operator",
            )
        }
    }

    /// Frees the buffers of dropped owned requests that have completed.
    pub(crate) fn reap_detached(&self) {
        let Some(mut detached) = self.detached() else {
            return;
        };
        if detached.is_empty() {
            return;
        }
        // A request that completed (or whose handle is no longer known) no longer touches its
        // buffer; its status was given up when its owner dropped it.
        detached.retain(|d| match self.vcis.get(d.vci).enter() {
            Ok(mut dev) => matches!(dev.take_completed(d.handle), Ok(None)),
            Err(_) => true,
        });
    }

    /// See [`Context::finalize`].
    pub(crate) fn finalize(&self) -> Result<()> {
        self.finalize_with(false, &mut || Ok(()))
    }

    /// [`RankState::finalize`], running `before_close` once the transports have flushed what
    /// they hold and before they close their connections (process mode's barrier there: a
    /// rank that waited in it before flushing would hold back data its peers wait for).
    pub(crate) fn finalize_then(&self, before_close: &mut dyn FnMut() -> Result<()>) -> Result<()> {
        self.finalize_with(false, before_close)
    }

    /// Finalizes even with requests pending: they are abandoned with the frozen device (which
    /// never touches their buffers again). Process mode's last resort when a program leaves
    /// without completing them.
    pub(crate) fn finalize_anyway(&self) -> Result<()> {
        self.finalize_with(true, &mut || Ok(()))
    }

    pub(crate) fn is_finalized(&self) -> bool {
        self.finalized.load(Ordering::Relaxed)
    }

    fn finalize_with(
        &self,
        anyway: bool,
        before_close: &mut dyn FnMut() -> Result<()>,
    ) -> Result<()> {
        if self.is_finalized() {
            return Ok(());
        }
        // The progress thread goes first: from here on this thread drives the devices.
        self.progress.stop();
        // Owned requests whose owners dropped them go on; give them their time (a send to a
        // peer that left, or that failed, ends at once).
        let start = std::time::Instant::now();
        loop {
            self.reap_detached();
            let handles: Vec<(usize, ch4_core::ReqHandle)> = match self.detached() {
                Some(d) => d.iter().map(|d| (d.vci, d.handle)).collect(),
                None => Vec::new(),
            };
            if handles.is_empty() || start.elapsed() > FINALIZE_LIMIT {
                break;
            }
            let mut moved = 0;
            for vci in 0..self.vcis.len() {
                let mut dev = self.device(vci)?;
                if dev.progress()? == 0 {
                    for &(_, h) in handles.iter().filter(|(v, _)| *v == vci) {
                        dev.fail_if_peer_gone(h);
                    }
                } else {
                    moved += 1;
                }
            }
            if moved == 0 {
                std::thread::yield_now();
            }
        }
        // Read before the VCIs are taken: the list's lock is always taken before a VCI's,
        // never after (`reap_detached` holds it while it enters them).
        let detached = self.detached().map_or(0, |d| d.len());
        // Every VCI at once, in order (the one place a rank takes them all): no thread calls
        // while the rank leaves.
        let mut devs = Vec::with_capacity(self.vcis.len());
        for vci in 0..self.vcis.len() {
            devs.push(self.device(vci)?);
        }
        // Let the networks finish what they already took on: a natively matching NIC may hold
        // a matched receive's data, to be reported by a later completion. A peer that stopped
        // receiving is finalize's error, reported by `Device::finalize` below.
        for dev in &mut devs {
            let _ = dev.flush(FINALIZE_LIMIT);
        }
        let pending = devs
            .iter()
            .map(|d| d.pending_requests())
            .sum::<usize>()
            .saturating_sub(detached);
        if pending > 0 && !anyway {
            return Err(Error::new(
                ErrorKind::Pending,
                format!(
                    "{pending} requests of this rank are still pending: complete them before \
                     finalizing"
                ),
            ));
        }
        let mut flushed = before_close();
        for dev in &mut devs {
            let r = dev.flush(FINALIZE_LIMIT);
            if flushed.is_ok() {
                flushed = r;
            }
        }
        // Every VCI's close begins before any is driven, and all are driven together: a peer's
        // close on one VCI waits for this rank to answer on that VCI, which a rank closing its
        // VCIs one after another had already left (UCX's endpoint flush then ran out its time).
        for dev in &mut devs {
            dev.close_connections();
        }
        let r = flush_together(&mut devs, FINALIZE_LIMIT);
        if flushed.is_ok() {
            flushed = r;
        }
        self.finalized.store(true, Ordering::Relaxed);
        // From now on no device can be taken, so every later call fails with `busy`'s
        // "finalized" error.
        for dev in devs {
            L::Lock::close(dev);
        }
        flushed
    }
}

/// One VCI of a rank, as the lock that blocking operations on it let go of between polls.
///
/// [`Context::vci_lock`] gives it to code that drives the device itself (the C library):
/// with [`ch4_core::blocking::Shared`] it runs the blocking operations of
/// [`ch4_core::blocking::Blocking`] and [`ch4_core::coll`], and [`DeviceLock::enter`] holds
/// the VCI's device for a step that does not wait.
pub struct VciLock<'r, N: Netmod, S: Shm, L: ThreadLevel> {
    rank: &'r RankState<N, S, L>,
    vci: usize,
}

/// Idle polls of a wait on one VCI between two rounds of progress on the others.
const OTHER_VCIS_EVERY: u32 = 64;

impl<N: Netmod, S: Shm, L: ThreadLevel> DeviceLock for VciLock<'_, N, S, L> {
    type Net = N;
    type Shm = S;
    type Guard<'a>
        = DeviceGuard<'a, N, S, L>
    where
        Self: 'a;

    #[inline(always)]
    fn enter(&self) -> Result<DeviceGuard<'_, N, S, L>> {
        self.rank.device(self.vci)
    }

    #[inline(always)]
    fn contended(&self) -> bool {
        self.rank.vcis.get(self.vci).contended()
    }

    #[inline]
    fn pause(&self, idle: u32) {
        if self.rank.crowded() {
            crowded_pause(idle);
        } else {
            ch4_core::device::backoff(idle);
        }
    }

    #[inline]
    fn between_polls(&self, idle: u32) {
        if idle != 0 && idle % OTHER_VCIS_EVERY == 0 && self.rank.vcis.len() > 1 {
            self.rank.progress_others(self.vci);
        }
        self.rank
            .vcis
            .get(self.vci)
            .between_polls(idle, |idle| self.pause(idle))
    }

    fn long_wait_begins(&self) {
        if L::YIELDS {
            self.rank.long_waits.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn long_wait_ends(&self) {
        if L::YIELDS {
            self.rank.long_waits.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// An idle poll's pause while more threads of the rank wait than the host has CPUs for: what
/// every waiting loop does on a host with more ranks than CPUs (`CH4_YIELD=auto`), a pause at
/// each poll and a yield past the first 64.
#[inline]
fn crowded_pause(idle: u32) {
    if idle > ch4_core::device::YIELD_SOON {
        std::thread::yield_now();
    } else {
        std::hint::spin_loop();
    }
}

/// Runs a blocking operation on VCI `$vci` of `$rank` (a `RankState`) through `ch4_core::blocking::Blocking`
/// as `$b`: at a level whose blocking calls let go of the device between polls, on the shared
/// device; at the others, on the device held for the whole call, as before levels existed.
/// Both arms are compiled; the level's constant removes one.
macro_rules! blocking {
    ($L:ty, $rank:expr, $vci:expr, |$b:ident| $body:expr) => {{
        let rank = &*$rank;
        if <$L as $crate::level::ThreadLevel>::YIELDS {
            let vci = rank.vci($vci);
            let mut shared = ch4_core::blocking::Shared(&vci);
            let $b = &mut shared;
            $body
        } else {
            let mut dev = rank.device($vci)?;
            let $b = &mut *dev;
            $body
        }
    }};
}
pub(crate) use blocking;

/// The README's code runs as a doctest, so the example users copy first cannot rot.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

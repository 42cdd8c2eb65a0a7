//! Schedules: collectives that run in the background of the device's progress, so a program
//! can start one (`MPI_Iallreduce`, a persistent `MPI_Allreduce_init` started with
//! `MPI_Start`) and compute while it moves.
//!
//! A schedule is what MPICH calls a transport-independent schedule (`MPIR_TSP_sched`, in
//! `src/mpi/coll/transports/gentran`): a list of sends, receives and local steps over buffers
//! the schedule owns, built once by an algorithm (`crate::nbc`) and then run by the device's
//! progress without the program's thread. Ours has MPICH's older dependency rule
//! (`MPIDU_Sched` with `SCHED_BARRIER`s): sends and receives start as soon as they are
//! reached; a local step (a fold, a copy, a delivery to the program's buffer) or an explicit
//! fence first waits for every send and receive started before it. That is all the classic
//! algorithms need — each round is "send and receive, then fold" — and it needs no graph.
//!
//! Everything a schedule touches is its own: the program's send data is copied in when the
//! collective starts (MPI forbids changing it until completion anyway, and the copy costs
//! nothing at the sizes nonblocking collectives are used for), each send lends the device a
//! copy of its bytes, each receive gets a buffer of its own, and results reach the program's
//! memory through [`RecvBuf`]s the caller made, written only by delivery steps. So the engine
//! needs no `unsafe` and a schedule can be dropped at any point: its pending requests are
//! released first.
//!
//! Every schedule runs on its communicator's collective context with a tag of its own, taken
//! from a counter the communicator keeps: MPI requires the members to start collectives on a
//! communicator in the same order, so the n-th schedule has the same tag everywhere and two
//! outstanding ones never take each other's messages. A persistent collective reserves its tag
//! once, when it is made, from a second range: its starts may then interleave with other
//! collectives' in any order the program keeps consistently. Within a schedule, an algorithm
//! may split its messages over [`PHASES`] sub-tags (a Cartesian neighbourhood collective tells
//! the two directions of a dimension apart this way).

use crate::buffer::{RecvBuf, SendBuf};
use crate::comm::CommId;
use crate::device::Device;
use crate::request::{ReqHandle, Request, RequestKind};
use crate::spares::Spares;
use crate::transport::{Netmod, Shm};
use crate::types::{Rank, Status, Tag, PROC_NULL};
use crate::{Error, ErrorKind, Result};

/// The fold of a reduction: `fold(acc, other)` computes `acc op other` into `acc`, over
/// buffers of one length (a whole number of elements).
pub type Fold = Box<dyn FnMut(&mut [u8], &[u8]) + Send>;

/// Sub-tags a schedule may use ([`Schedule::send_phase`]).
pub const PHASES: Tag = 64;

/// Tags below this are the blocking collectives' fixed ones.
const TAG_BASE: Tag = 1024;

/// The first tag above the schedules' two ranges (the tags of `MPI_Comm_create_group` start
/// there).
pub const TAGS_END: Tag = TAG_BASE + (2 * SLOTS * PHASES as u32) as Tag;

/// Tag slots of each range: schedules started one by one take them in turn, persistent ones
/// keep theirs. 4,096 outstanding schedules on one communicator before a tag comes round again.
const SLOTS: u32 = 4096;

/// A buffer of a schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Buf(usize);

/// A byte range of one of a schedule's buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slice {
    buf: Buf,
    off: usize,
    len: usize,
}

impl Slice {
    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The `len` bytes at `off` within this range (clamped to it).
    pub fn sub(&self, off: usize, len: usize) -> Slice {
        let off = off.min(self.len);
        Slice {
            buf: self.buf,
            off: self.off + off,
            len: len.min(self.len - off),
        }
    }
}

/// One of the program's receive buffers a schedule delivers to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Out(usize);

/// A step of a schedule.
enum Step {
    /// Starts a send of a copy of `from` to `to` (of the local group when `local`).
    Send {
        to: Rank,
        phase: Tag,
        from: Slice,
        local: bool,
    },
    /// Starts a receive of exactly `into.len` bytes from `from` (of the local group when
    /// `local`) into `into`.
    Recv {
        from: Rank,
        phase: Tag,
        into: Slice,
        local: bool,
    },
    /// Waits, then `acc = acc op other` (or `other op acc` when `other_first`).
    Fold {
        acc: Slice,
        other: Slice,
        other_first: bool,
    },
    /// Waits, then copies `from` over `to` (of one length).
    Copy { from: Slice, to: Slice },
    /// Waits, then writes `from` into the program's buffer `out` at packed offset `offset`.
    Deliver {
        from: Slice,
        out: Out,
        offset: usize,
    },
    /// Waits for every send and receive started so far.
    Fence,
    /// Waits, then runs the next round of context-id agreement `n` of the schedule
    /// ([`Schedule::agree_contexts`]), which may add the steps of another round after it.
    Agree(usize),
    /// Waits, then gives communicator `comm` the context ids in `recv` (which it receives on)
    /// and `send` (which it sends with), little-endian words ([`Schedule::install`]).
    Install {
        comm: CommId,
        recv: Slice,
        send: Slice,
    },
}

/// Where a context-id agreement of a schedule stands (see [`Schedule::agree_contexts`]).
struct Agreement {
    /// This member's rank and the number of members, over which it allreduces.
    rank: Rank,
    size: Rank,
    /// Whether it runs within an intercommunicator's local group.
    local: bool,
    /// How many ids it agrees on.
    ids: usize,
    /// Where the agreed ids go.
    out: Slice,
    /// The ids this member reserved in the last round, until all confirm them.
    taken: Vec<crate::types::ContextId>,
    /// The buffer the current round allreduces (the masks, then the confirmations).
    acc: Option<Slice>,
    /// Whether the next round confirms a reservation (else it reads the masks' AND).
    confirming: bool,
}

/// Where a pending receive's bytes go when it completes.
enum Landing {
    /// A send: nothing comes back.
    Sent,
    /// Copied into this range (whose length the message must have).
    Into(Slice),
}

/// A collective as a list of steps over buffers of its own, built by an algorithm and run by
/// [`Device::start_schedule`].
pub struct Schedule {
    comm: CommId,
    /// An intercommunicator's communicator of its local group, set when the schedule starts.
    local: Option<CommId>,
    /// Whether the sends and receives added now go to the local group
    /// ([`Schedule::within_local`]).
    on_local: bool,
    bufs: Vec<Vec<u8>>,
    /// The working buffers ([`Schedule::scratch`]) by index and length, made when the
    /// schedule starts, from the device's spares (`crate::spares`).
    scratch: Vec<(usize, usize)>,
    outs: Vec<RecvBuf>,
    steps: Vec<Step>,
    fold: Option<Fold>,
    /// The next step to run.
    next: usize,
    /// Sends and receives started and not yet complete.
    pending: Vec<(ReqHandle, Landing)>,
    /// The tag its messages carry (phase 0), set when it starts.
    tag: Tag,
    /// Scratch for folds whose other operand goes first, and for steps within one buffer.
    front: Vec<u8>,
    /// Its context-id agreements.
    agreements: Vec<Agreement>,
}

impl Schedule {
    /// An empty schedule of a collective over `comm`.
    pub fn new(comm: CommId) -> Schedule {
        Schedule {
            comm,
            local: None,
            on_local: false,
            bufs: Vec::new(),
            scratch: Vec::new(),
            outs: Vec::new(),
            steps: Vec::new(),
            fold: None,
            next: 0,
            pending: Vec::new(),
            tag: 0,
            front: Vec::new(),
            agreements: Vec::new(),
        }
    }

    /// Its communicator.
    pub fn comm(&self) -> CommId {
        self.comm
    }

    /// Gives the schedule `bytes` (the program's send data, copied); the whole of it.
    pub fn buffer(&mut self, bytes: Vec<u8>) -> Slice {
        let len = bytes.len();
        self.bufs.push(bytes);
        Slice {
            buf: Buf(self.bufs.len() - 1),
            off: 0,
            len,
        }
    }

    /// A zeroed working buffer of `len` bytes; the whole of it. It is made when the schedule
    /// starts, from memory earlier schedules left where there is some.
    pub fn scratch(&mut self, len: usize) -> Slice {
        let slice = self.buffer(Vec::new());
        self.scratch.push((slice.buf.0, len));
        Slice { len, ..slice }
    }

    /// Makes the working buffers ([`Schedule::scratch`]) not made yet and a large enough
    /// staging buffer for folds and copies, from `spares`: when the schedule starts, and again
    /// when a running step adds steps (a context-id agreement's next round).
    fn make_buffers(&mut self, spares: &mut Spares) {
        for (i, len) in std::mem::take(&mut self.scratch) {
            self.bufs[i] = spares.take_zeroed(len);
        }
        let staged = self
            .steps
            .iter()
            .map(|step| match step {
                Step::Fold {
                    acc, other_first, ..
                } if *other_first => acc.len,
                Step::Copy { from, to } if from.buf == to.buf => from.len,
                _ => 0,
            })
            .max()
            .unwrap_or(0);
        if staged > self.front.capacity() {
            let old = std::mem::replace(&mut self.front, spares.take_empty(staged));
            spares.give(old);
        }
    }

    /// Gives every buffer of the schedule to `spares`.
    fn give_buffers(&mut self, spares: &mut Spares) {
        for b in self.bufs.drain(..) {
            spares.give(b);
        }
        spares.give(std::mem::take(&mut self.front));
    }

    /// Gives the schedule one of the program's receive buffers, written only by
    /// [`Schedule::deliver`] steps.
    pub fn output(&mut self, buf: RecvBuf) -> Out {
        self.outs.push(buf);
        Out(self.outs.len() - 1)
    }

    /// Sets the reduction that [`Schedule::fold`] steps apply.
    pub fn set_fold(&mut self, fold: Fold) {
        self.fold = Some(fold);
    }

    /// On an intercommunicator, makes the sends and receives added from now on go to the
    /// members of the local group (`true`: an algorithm of `crate::nbc` then works within the
    /// group, by local ranks) or to the remote group's (`false`, the start). Both run on the
    /// schedule's tag, on different contexts.
    pub fn within_local(&mut self, on: bool) {
        self.on_local = on;
    }

    /// Sends a copy of `from` to member `to` (nothing for `PROC_NULL`).
    pub fn send(&mut self, to: Rank, from: Slice) {
        self.send_phase(to, 0, from)
    }

    /// [`Schedule::send`] on sub-tag `phase` (below [`PHASES`]).
    pub fn send_phase(&mut self, to: Rank, phase: Tag, from: Slice) {
        if to != PROC_NULL {
            let local = self.on_local;
            self.steps.push(Step::Send {
                to,
                phase,
                from,
                local,
            });
        }
    }

    /// Receives exactly `into.len()` bytes from member `from` into `into` (nothing for
    /// `PROC_NULL`).
    pub fn recv(&mut self, from: Rank, into: Slice) {
        self.recv_phase(from, 0, into)
    }

    /// [`Schedule::recv`] on sub-tag `phase` (below [`PHASES`]).
    pub fn recv_phase(&mut self, from: Rank, phase: Tag, into: Slice) {
        if from != PROC_NULL {
            let local = self.on_local;
            self.steps.push(Step::Recv {
                from,
                phase,
                into,
                local,
            });
        }
    }

    /// Folds `other` into `acc` with the schedule's reduction: `acc op other`, or
    /// `other op acc` when `other_first` (the other operand holds lower ranks' data, and the
    /// operation need not commute).
    pub fn fold(&mut self, acc: Slice, other: Slice, other_first: bool) {
        self.steps.push(Step::Fold {
            acc,
            other,
            other_first,
        });
    }

    /// Copies `from` over `to`.
    pub fn copy(&mut self, from: Slice, to: Slice) {
        self.steps.push(Step::Copy { from, to });
    }

    /// Writes `from` into the program's buffer `out` at packed byte `offset`.
    pub fn deliver(&mut self, from: Slice, out: Out, offset: usize) {
        self.steps.push(Step::Deliver { from, out, offset });
    }

    /// Agrees with the members (this one `rank` of `size`; within the local group after
    /// [`Schedule::within_local`]) on `ids` context ids free at every one of them and takes
    /// them, without holding the process's context ids while it waits (MPI_Comm_idup): a
    /// round allreduces the members' free masks (an AND), each member reserves the lowest
    /// `ids` ids of the result if they are still free and no blocking agreement holds its
    /// mask ([`crate::comm::ContextIds::try_take`]), and a second allreduce confirms the
    /// reservations, or undoes them all and starts again. The returned range gets the ids,
    /// little-endian words, before the steps added after this one run. The schedule's fold is
    /// the AND it needs (a schedule with another reduction cannot agree).
    pub fn agree_contexts(&mut self, rank: Rank, size: Rank, ids: usize) -> Slice {
        let out = self.scratch(4 * ids);
        self.set_fold(Box::new(|acc: &mut [u8], other: &[u8]| {
            for (a, o) in acc.iter_mut().zip(other) {
                *a &= o;
            }
        }));
        self.agreements.push(Agreement {
            rank,
            size,
            local: self.on_local,
            ids,
            out,
            taken: Vec::new(),
            acc: None,
            confirming: false,
        });
        self.steps.push(Step::Agree(self.agreements.len() - 1));
        out
    }

    /// Gives communicator `comm` (of the device the schedule runs on) the context ids in
    /// `recv` and `send` (4 bytes each, as [`Schedule::agree_contexts`] writes them) once the
    /// steps before this one are done: how a communicator made at once with a pending context
    /// id ([`crate::comm::PENDING_CONTEXT`]) gets its own.
    pub fn install(&mut self, comm: CommId, recv: Slice, send: Slice) {
        self.steps.push(Step::Install { comm, recv, send });
    }

    /// Waits for every send and receive started before this point.
    pub fn fence(&mut self) {
        if !matches!(self.steps.last(), None | Some(Step::Fence)) {
            self.steps.push(Step::Fence);
        }
    }

    /// Checks the steps against the buffers before the schedule runs: a bad range is an
    /// algorithm's bug, reported as an error rather than found by a panic halfway.
    fn check(&self) -> Result<()> {
        let ok = |s: &Slice| {
            self.bufs
                .get(s.buf.0)
                .is_some_and(|b| s.off.checked_add(s.len).is_some_and(|e| e <= b.len()))
        };
        let bad = |what: &str| {
            Err(Error::new(
                ErrorKind::Internal,
                format!("a collective's schedule has a bad {what}"),
            ))
        };
        let reach = |local: &bool| !*local || self.local.is_some();
        for step in &self.steps {
            let fine = match step {
                Step::Send {
                    from, phase, local, ..
                } => ok(from) && (0..PHASES).contains(phase) && reach(local),
                Step::Recv {
                    into, phase, local, ..
                } => ok(into) && (0..PHASES).contains(phase) && reach(local),
                Step::Fold { acc, other, .. } => {
                    ok(acc) && ok(other) && acc.len == other.len && self.fold.is_some()
                }
                Step::Copy { from, to } => ok(from) && ok(to) && from.len == to.len,
                Step::Deliver { from, out, .. } => ok(from) && out.0 < self.outs.len(),
                Step::Fence => true,
                Step::Agree(i) => self
                    .agreements
                    .get(*i)
                    .is_some_and(|a| ok(&a.out) && reach(&a.local)),
                Step::Install { recv, send, .. } => {
                    ok(recv) && ok(send) && recv.len == 4 && send.len == 4
                }
            };
            if !fine {
                return bad("step");
            }
        }
        Ok(())
    }

    /// The communicator a send or receive goes on (checked: a local one has `local`).
    fn target(&self, local: bool) -> CommId {
        match (local, self.local) {
            (true, Some(l)) => l,
            _ => self.comm,
        }
    }

    fn bytes(&self, s: Slice) -> &[u8] {
        &self.bufs[s.buf.0][s.off..s.off + s.len]
    }

    /// Runs local step `step` (the pending list is empty).
    fn run_local(&mut self, step: usize) -> Result<()> {
        match self.steps[step] {
            Step::Fold {
                acc,
                other,
                other_first,
            } => {
                let Some(fold) = self.fold.as_mut() else {
                    return Err(Error::new(
                        ErrorKind::Internal,
                        "a fold without a reduction",
                    ));
                };
                if !other_first {
                    if let Some((a, o)) = two_ranges(&mut self.bufs, acc, other) {
                        fold(a, o);
                        return Ok(());
                    }
                }
                // Staged through `front`: the operand goes first (front = other op acc, then
                // acc = front), or both ranges are in one buffer.
                self.front.clear();
                self.front
                    .extend_from_slice(&self.bufs[other.buf.0][other.off..other.off + other.len]);
                let a = &mut self.bufs[acc.buf.0][acc.off..acc.off + acc.len];
                if other_first {
                    fold(&mut self.front, a);
                    a.copy_from_slice(&self.front);
                } else {
                    fold(a, &self.front);
                }
            }
            Step::Copy { from, to } => {
                if let Some((t, f)) = two_ranges(&mut self.bufs, to, from) {
                    t.copy_from_slice(f);
                    return Ok(());
                }
                self.front.clear();
                self.front
                    .extend_from_slice(&self.bufs[from.buf.0][from.off..from.off + from.len]);
                self.bufs[to.buf.0][to.off..to.off + to.len].copy_from_slice(&self.front);
            }
            Step::Deliver { from, out, offset } => {
                let data = &self.bufs[from.buf.0][from.off..from.off + from.len];
                if self.outs[out.0].write_at(offset, data) != data.len() {
                    return Err(Error::new(
                        ErrorKind::Count,
                        "a collective's result does not fit its receive buffer",
                    ));
                }
            }
            Step::Fence
            | Step::Send { .. }
            | Step::Recv { .. }
            | Step::Agree(_)
            | Step::Install { .. } => {}
        }
        Ok(())
    }
}

/// Range `a` to write and range `b` to read, when they lie in different buffers (else `None`:
/// one buffer cannot be lent twice).
fn two_ranges(bufs: &mut [Vec<u8>], a: Slice, b: Slice) -> Option<(&mut [u8], &[u8])> {
    let (ai, bi) = (a.buf.0, b.buf.0);
    if ai == bi {
        return None;
    }
    let (wa, wb) = if ai < bi {
        let (lo, hi) = bufs.split_at_mut(bi);
        (&mut lo[ai], &hi[0])
    } else {
        let (lo, hi) = bufs.split_at_mut(ai);
        (&mut hi[0], &lo[bi])
    };
    Some((&mut wa[a.off..a.off + a.len], &wb[b.off..b.off + b.len]))
}

/// A schedule the device runs, and the request that completes when it ends.
pub(crate) struct Running {
    request: ReqHandle,
    schedule: Schedule,
}

/// The tag slots a communicator has handed out (in [`crate::comm::Comm`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct TagCounter {
    started: u32,
    persistent: u32,
}

impl<N: Netmod, S: Shm> Device<N, S> {
    /// Reserves a tag for a persistent collective on `comm`, to pass to every
    /// [`Device::start_schedule`] of it. Every member must make its persistent collectives on
    /// `comm` in the same order (MPI's rule for their initialization calls).
    pub fn reserve_schedule_tag(&mut self, comm: CommId) -> Result<Tag> {
        let c = self.core.comm_mut(comm)?;
        let slot = c.schedule_tags.persistent % SLOTS;
        c.schedule_tags.persistent = c.schedule_tags.persistent.wrapping_add(1);
        Ok(TAG_BASE + ((SLOTS + slot) * PHASES as u32) as Tag)
    }

    /// Starts `schedule` and returns its request, which completes (with an error status if a
    /// step failed) when its last step has run; waiting for it, testing it or any other
    /// progress of the device moves it on. `tag` is a persistent collective's reserved tag
    /// ([`Device::reserve_schedule_tag`]), or `None` to take the communicator's next one.
    pub fn start_schedule(
        &mut self,
        mut schedule: Schedule,
        tag: Option<Tag>,
    ) -> Result<ReqHandle> {
        let c = self.core.comm_mut(schedule.comm)?;
        schedule.local = c.local;
        schedule.make_buffers(&mut self.schedule_spares);
        schedule.check()?;
        let c = self.core.comm_mut(schedule.comm)?;
        schedule.tag = match tag {
            Some(t) => t,
            None => {
                let slot = c.schedule_tags.started % SLOTS;
                c.schedule_tags.started = c.schedule_tags.started.wrapping_add(1);
                TAG_BASE + (slot * PHASES as u32) as Tag
            }
        };
        if schedule.tag + PHASES - 1 > self.tag_ub() {
            return Err(Error::new(
                ErrorKind::Internal,
                "the network's tags are too few for collective schedules",
            ));
        }
        let request = self.core.requests.insert(Request {
            complete: false,
            status: Status::EMPTY,
            kind: RequestKind::Schedule,
        })?;
        let mut running = Running { request, schedule };
        // Start what can start now: the first messages leave before this returns.
        match self.advance(&mut running) {
            Ok((_, true)) => self.finish(running, None),
            Ok((_, false)) => self.schedules.push(running),
            Err(e) => self.finish(running, Some(e)),
        }
        Ok(request)
    }

    /// Moves every running schedule on as far as it can go now; how many steps ran. Called by
    /// [`Device::progress`] when any schedule runs.
    #[cold]
    #[inline(never)]
    pub(crate) fn advance_schedules(&mut self) -> usize {
        let mut running = std::mem::take(&mut self.schedules);
        let mut events = 0;
        let mut i = 0;
        while i < running.len() {
            match self.advance(&mut running[i]) {
                Ok((n, false)) => {
                    events += n;
                    i += 1;
                }
                Ok((n, true)) => {
                    events += n + 1;
                    let r = running.swap_remove(i);
                    self.finish(r, None);
                }
                Err(e) => {
                    events += 1;
                    let r = running.swap_remove(i);
                    self.finish(r, Some(e));
                }
            }
        }
        // Schedules started while these ran (none today) come after them.
        running.append(&mut self.schedules);
        self.schedules = running;
        events
    }

    /// Fails the pending sends and receives of the schedule behind request `h` whose peers are
    /// gone (see [`Device::fail_if_peer_gone`]); its next advance then ends it with that
    /// error. Whether any was failed.
    pub(crate) fn fail_schedule_if_peer_gone(&mut self, h: ReqHandle) -> bool {
        let Some(i) = self.schedules.iter().position(|r| r.request == h) else {
            return false;
        };
        let handles: Vec<ReqHandle> = self.schedules[i]
            .schedule
            .pending
            .iter()
            .map(|(h, _)| *h)
            .collect();
        let mut failed = false;
        for h in handles {
            failed |= self.fail_if_peer_gone(h);
        }
        if failed {
            self.advance_schedules();
        }
        failed
    }

    /// Ends a schedule: releases what it still has pending and completes its request, with
    /// `error` in its status if it failed. A request the program already let go of (a
    /// released handle) is simply forgotten.
    fn finish(&mut self, running: Running, error: Option<Error>) {
        let Running {
            request,
            mut schedule,
        } = running;
        for (h, _) in schedule.pending.drain(..) {
            self.release(h);
        }
        schedule.give_buffers(&mut self.schedule_spares);
        if let Some(e) = &error {
            tracing::debug!(error = %e, "a collective's schedule failed");
        }
        if let Some(r) = self.core.requests.get_mut(request) {
            r.status.error = error.map(|e| e.kind());
            r.complete = true;
        }
    }

    /// Runs `r` until it must wait for a message: how many steps ran, and whether it is done.
    fn advance(&mut self, r: &mut Running) -> Result<(usize, bool)> {
        if self.core.requests.get(r.request).is_none() {
            // Released by the program: nobody will ask for its result.
            return Ok((0, true));
        }
        let s = &mut r.schedule;
        let mut ran = 0;
        loop {
            ran += self.collect(s)?;
            let Some(step) = s.steps.get(s.next) else {
                return Ok((ran, s.pending.is_empty()));
            };
            match *step {
                Step::Send {
                    to,
                    phase,
                    from,
                    local,
                } => {
                    let mut copy = self.schedule_spares.take(from.len);
                    copy.copy_from_slice(s.bytes(from));
                    let buf = SendBuf::owned(copy);
                    let comm = s.target(local);
                    let h = self.isend_scheduled(comm, to, s.tag + phase, buf)?;
                    if h != ReqHandle::DONE {
                        s.pending.push((h, Landing::Sent));
                    }
                }
                Step::Recv {
                    from,
                    phase,
                    into,
                    local,
                } => {
                    let comm = s.target(local);
                    let landing = RecvBuf::owned_vec(self.schedule_spares.take(into.len));
                    let h = self.irecv_scheduled(comm, from, s.tag + phase, landing)?;
                    s.pending.push((h, Landing::Into(into)));
                }
                Step::Agree(i) => {
                    if !s.pending.is_empty() {
                        return Ok((ran, false));
                    }
                    self.agree_round(s, i)?;
                }
                Step::Install { comm, recv, send } => {
                    if !s.pending.is_empty() {
                        return Ok((ran, false));
                    }
                    let word = |sl: Slice| {
                        let b = s.bytes(sl);
                        u32::from_le_bytes([b[0], b[1], b[2], b[3]])
                    };
                    let (recv, send) = (word(recv), word(send));
                    let c = self.core.comm_mut(comm)?;
                    c.context = recv;
                    c.send_context = send;
                }
                _ => {
                    if !s.pending.is_empty() {
                        return Ok((ran, false));
                    }
                    s.run_local(s.next)?;
                }
            }
            s.next += 1;
            ran += 1;
        }
    }

    /// Runs the next round of agreement `i` of `s` (see [`Schedule::agree_contexts`]): reads
    /// the result of the round that ended, if any, and adds the steps of the next one right
    /// after the current step, or writes the agreed ids.
    fn agree_round(&mut self, s: &mut Schedule, i: usize) -> Result<()> {
        use crate::comm::{lowest_free, CONTEXT_WORDS};
        let Some(a) = s.agreements.get(i) else {
            return Err(Error::new(ErrorKind::Internal, "a schedule's agreement"));
        };
        let (rank, size, local, ids) = (a.rank, a.size, a.local, a.ids);
        let outcome = a.acc.map(|acc| s.bytes(acc).to_vec());
        let contexts = self.core.contexts.clone();
        // What the next round allreduces, if there is one.
        let next: Option<(Vec<u8>, bool)> = match (outcome, a.confirming) {
            (Some(flag), true) if flag.iter().all(|&b| b == 0xff) => {
                // Every member reserved the candidates: they are the communicator's.
                let mut words = Vec::with_capacity(4 * ids);
                for &c in &a.taken {
                    words.extend_from_slice(&c.to_le_bytes());
                }
                let out = a.out;
                s.bufs[out.buf.0][out.off..out.off + out.len].copy_from_slice(&words);
                None
            }
            (Some(masks), false) => {
                let mut agreed = [0u64; CONTEXT_WORDS];
                for (w, chunk) in agreed.iter_mut().zip(masks.chunks_exact(8)) {
                    *w = u64::from_le_bytes(chunk.try_into().unwrap_or_default());
                }
                let candidates = lowest_free(&agreed, ids);
                if candidates.len() < ids {
                    return Err(Error::new(
                        ErrorKind::Exhausted,
                        "no context id free on every member",
                    ));
                }
                let took = contexts.try_take(&candidates);
                if took {
                    s.agreements[i].taken = candidates;
                }
                Some((vec![if took { 0xff } else { 0 }; 8], true))
            }
            _ => {
                // The start, or a confirmation that failed somewhere: undo, and read the
                // masks again.
                for c in std::mem::take(&mut s.agreements[i].taken) {
                    contexts.release(c);
                }
                let mut bytes = Vec::with_capacity(8 * CONTEXT_WORDS);
                for w in contexts.snapshot() {
                    bytes.extend_from_slice(&w.to_le_bytes());
                }
                Some((bytes, false))
            }
        };
        let Some((contribution, confirming)) = next else {
            return Ok(());
        };
        // The next round's steps go right after this one, before the steps that follow.
        let tail = s.steps.split_off(s.next + 1);
        let was_local = s.on_local;
        s.on_local = local;
        let acc = s.buffer(contribution);
        crate::nbc::allreduce(s, rank, size, acc);
        s.steps.push(Step::Agree(i));
        s.on_local = was_local;
        s.steps.extend(tail);
        // The round's working buffers, made now that it runs; and its steps checked like
        // the schedule's first ones.
        s.make_buffers(&mut self.schedule_spares);
        s.check()?;
        let a = &mut s.agreements[i];
        a.acc = Some(acc);
        a.confirming = confirming;
        Ok(())
    }

    /// Takes in the schedule's completed sends and receives; how many.
    fn collect(&mut self, s: &mut Schedule) -> Result<usize> {
        let mut done = 0;
        let mut i = 0;
        while i < s.pending.len() {
            let h = s.pending[i].0;
            let complete = match self.core.requests.get(h) {
                Some(req) => req.complete,
                None => {
                    return Err(Error::new(
                        ErrorKind::Internal,
                        "a collective's message request vanished",
                    ))
                }
            };
            if !complete {
                i += 1;
                continue;
            }
            let (_, landing) = s.pending.swap_remove(i);
            let Some(req) = self.core.requests.remove(h) else {
                continue;
            };
            done += 1;
            if let Some(kind) = req.status.error {
                return Err(Error::new(
                    kind,
                    "a message of a nonblocking collective failed",
                ));
            }
            if let Landing::Into(into) = landing {
                let RequestKind::Recv(recv) = req.kind else {
                    return Err(Error::new(ErrorKind::Internal, "a receive that is not one"));
                };
                if req.status.bytes != into.len {
                    return Err(Error::new(
                        ErrorKind::Count,
                        format!(
                            "a collective expected {} bytes from rank {}, got {}",
                            into.len, req.status.source, req.status.bytes
                        ),
                    ));
                }
                let data = recv.buf.into_owned()?;
                let whole = &mut s.bufs[into.buf.0];
                if into.off == 0 && into.len == whole.len() && data.len() == into.len {
                    // The message filled a buffer of its own: it becomes that buffer.
                    let old = std::mem::replace(whole, data);
                    self.schedule_spares.give(old);
                } else {
                    whole[into.off..into.off + into.len].copy_from_slice(&data[..into.len]);
                    self.schedule_spares.give(data);
                }
            }
        }
        Ok(done)
    }
}

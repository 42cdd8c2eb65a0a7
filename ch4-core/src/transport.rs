//! The contracts between the device and the transports under it.
//!
//! Every transport speaks the mandatory active-message API ([`AmTransport`]): send a message made
//! of a handler id, a small header and a payload; poll for arrived ones and hand each to a sink.
//! How MPI send/receive is carried out over a transport is its [`P2p`] engine, named by an
//! associated type: a network that matches in hardware or in its library brings its own engine,
//! the others name `am_fallback::Am` and get MPI semantics built on active messages with matching
//! in the core. The choice is made at compile time, so after monomorphization each call goes
//! straight into one engine — no function table, no `dyn`.

use crate::buffer::SendBuf;
use crate::core::{Core, CtrlPacket};
use crate::request::{Message, ReqHandle, Route};
pub use crate::types::HandlerId;
use crate::types::{Envelope, Gpid, SendMode, Status, Tag, TAG_UB};
use crate::Result;

/// The mandatory active-message API every transport implements (CH4's AM API; Nemesis's iSend /
/// handle_pkt pair).
///
/// Rules, from the Nemesis netmod API: `am_send` never blocks — a transport that cannot put the
/// bytes on the wire at once copies them into its own send queue and finishes from `am_poll`;
/// messages are delivered whole (a transport that receives fragments reassembles them).
pub trait AmTransport: Sized {
    /// Whether two active messages to the same peer always arrive in the order they were sent
    /// (Nemesis `get_ordering`). When false, the AM fallback numbers and reorders them.
    const AM_ORDERED: bool;
    /// A short name for logs and benchmark output.
    const NAME: &'static str;

    /// Messages up to this many bytes go eagerly; longer ones by rendezvous.
    fn eager_limit(&self) -> usize;
    /// The largest payload one active message may carry; longer data is streamed in pieces,
    /// each tagged with its offset.
    fn am_max_payload(&self) -> usize;
    /// Sends one active message to `dest`. The payload is the concatenation of `payload`'s
    /// slices. On return the transport no longer needs any of the borrowed bytes.
    fn am_send(
        &mut self,
        dest: Gpid,
        handler: HandlerId,
        header: &[u8],
        payload: &[&[u8]],
    ) -> Result<()>;
    /// Delivers up to `budget` arrived messages to `sink`, finishes queued sends, and returns
    /// how many messages it delivered.
    fn am_poll<K: AmSink>(&mut self, sink: &mut K, budget: usize) -> Result<usize>;
    /// Whether `gpid` is still in the job, left it in order (finalized) or failed (its
    /// connection broke, its process died or its rank thread ended with an error). Either way
    /// a peer that is not [`PeerState::Alive`] sends nothing more once what it sent before has
    /// been delivered.
    fn peer_state(&self, _gpid: Gpid) -> PeerState {
        PeerState::Alive
    }
    /// The settings this transport runs with, as (environment variable, value in force): what
    /// a program prints to show its configuration (`ch4::Context::settings`). Cold; transports
    /// without settings keep the empty default.
    fn settings(&self) -> Vec<(&'static str, String)> {
        Vec::new()
    }
    /// Whether `gpid` will never send again: it failed or left (see [`AmTransport::peer_state`]).
    fn peer_failed(&self, gpid: Gpid) -> bool {
        self.peer_state(gpid) != PeerState::Alive
    }

    /// Whether bytes accepted by `am_send` still wait inside the transport (a full ring, a busy
    /// socket) for a live peer. A process must not exit while this is true: finalize drives
    /// progress until it is false.
    fn has_queued_output(&self) -> bool {
        false
    }

    /// The process is leaving the job (finalize): close every connection in order once what
    /// was sent on it is out, telling the peer we are gone. Never blocks; `has_queued_output`
    /// stays true until the goodbyes are written (or the transport gives up on a peer that
    /// stopped reading), and progress drives them. Transports without connections do nothing.
    fn close_connections(&mut self) {}

    /// Readies this transport for a thread that wants to sleep until it has something to do
    /// (the asynchronous progress thread, `ch4::progress`), right after a progress call that
    /// found nothing: pushes onto `out` the descriptors whose readiness will announce its next
    /// work, or says it has work now, or that it cannot tell. Called with the transport's
    /// device held; the sleep happens after letting go of it, so an arrival in between makes
    /// a descriptor ready and the sleep ends at once. Transports that are polled for their
    /// arrivals (shared-memory rings, natively matching netmods without a wait object) keep
    /// the default, and the thread sleeps only for short naps while requests are out.
    fn arm_wakeup(&mut self, _out: &mut Vec<WaitFd>) -> Arm {
        Arm::Unable
    }

    /// A progress thread now drives this transport between the program's calls (`on`), or no
    /// longer does. Work a transport does inside a call because nobody else would (TCP writes
    /// a rendezvous message's first piece inside the send) is then better left to the
    /// thread, since the program's thread cannot compute while it copies. Default: nothing.
    fn background_progress(&mut self, _on: bool) {}

    /// Whether a message of `bytes` (header + payload) to `dest` would go out at once rather
    /// than wait in the transport's own queue. Streaming rendezvous data asks first, so a large
    /// message waits for room instead of being copied aside.
    fn can_send_now(&mut self, _dest: Gpid, _bytes: usize) -> bool {
        true
    }

    /// Whether the next rendezvous data piece of `bytes` to `dest` would go out at once: as
    /// [`AmTransport::can_send_now`], unless the transport sends data elsewhere than the
    /// messages that match (rails stripe it over several connections).
    #[inline(always)]
    fn can_stream_now(&mut self, dest: Gpid, bytes: usize) -> bool {
        self.can_send_now(dest, bytes)
    }

    /// How many bytes the next rendezvous piece streamed after a clear-to-send carries:
    /// `crowded` when other sends on the route wait to stream too. At most
    /// [`AmTransport::am_max_payload`], which the default answers either way.
    #[inline(always)]
    fn stream_piece(&self, _crowded: bool) -> usize {
        self.am_max_payload()
    }

    /// How many bytes of a rendezvous message sent alone may ride with its request-to-send
    /// (0: none).
    ///
    /// Open MPI's ob1 sends the first fragment with its rendezvous header for the same reason:
    /// the data moves during what would be the handshake's round trip. The receiver matches on
    /// the header, reads the piece straight into the buffer where the transport can place it,
    /// and answers with the clear-to-send for the rest once the piece is in. The piece is
    /// charged to the receiver's eager credit (an unexpected request-to-send keeps it); without
    /// credit the request-to-send goes bare.
    /// Worth it only where the data is copied through the transport anyway: a transport with a
    /// single-copy read ([`AmTransport::offers_peer_read`]) keeps 0.
    #[inline(always)]
    fn first_piece(&self) -> usize {
        0
    }

    /// Whether a rendezvous message of `bytes` to `dest` should offer the receiver a single
    /// copy out of our memory (LMT Get: Linux CMA on shared memory). The offer is the send
    /// buffer's address; the receiver may still decline and ask for the data to be streamed.
    #[inline(always)]
    fn offers_peer_read(&self, _dest: Gpid, _bytes: usize) -> bool {
        false
    }

    /// Whether the receiver should take an offered buffer of `bytes` by a single-copy read
    /// rather than have it streamed: for a lone message (`both_ways` false: no other receive
    /// waiting), or while this process is itself sending large messages (`both_ways` true:
    /// then each side reading its incoming data copies every byte once, where streaming in both
    /// directions copies it twice on each side).
    #[inline(always)]
    fn read_pays(&self, _bytes: usize, _both_ways: bool) -> bool {
        false
    }

    /// Copies `into.len()` bytes at address `addr` of process `src`'s memory into `into` (the
    /// receiving half of LMT Get). `Ok(PeerRead::Unavailable)` declines — the transport cannot
    /// read that peer (not supported, forbidden by the kernel, a bad address) and the data must
    /// be streamed instead; an error means the peer is gone.
    fn read_peer(&mut self, _src: Gpid, _addr: u64, _into: &mut [u8]) -> Result<PeerRead> {
        Ok(PeerRead::Unavailable)
    }
}

/// Sends a queued control packet on `transport`; a droppable one's failure is ignored (see
/// [`CtrlPacket::droppable`]), and so is any packet's to a peer that is gone (`PeerFailed`):
/// the replies a dead peer will never read (a clear-to-send, an acknowledgement, credit) are
/// for operations that depend on it, which fail with it when they are waited for. Returned
/// from progress, the error failed whatever wait happened to run it — a receive from another,
/// live peer.
#[inline]
pub fn send_ctrl<T: AmTransport>(transport: &mut T, p: &CtrlPacket) -> Result<()> {
    match transport.am_send(p.dest, p.handler, p.header(), &[]) {
        Err(_) if p.droppable => Ok(()),
        Err(e) if e.kind() == crate::ErrorKind::PeerFailed => {
            tracing::debug!(dest = p.dest, "a control packet for a gone peer dropped");
            Ok(())
        }
        other => other,
    }
}

/// Whether a peer is still in the job, as far as a transport can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerState {
    /// Running (or not known to have stopped).
    Alive,
    /// Finalized and left the job in order: requests that wait on it alone fail, but it is no
    /// fault, so receives from ANY_SOURCE are not failed for it.
    Left,
    /// Died: killed, crashed, its connection broke, or its rank thread ended with an error or a
    /// panic. ANY_SOURCE receives on a communicator it belongs to fail too (ULFM's
    /// MPIX_ERR_PROC_FAILED_PENDING), since the message they wait for may have been its.
    Failed,
}

/// The outcome of [`AmTransport::read_peer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerRead {
    /// Every byte was copied.
    Copied,
    /// Nothing usable was copied; fall back to streaming the data.
    Unavailable,
}

/// Receives the active messages a transport delivers.
pub trait AmSink {
    /// One whole message from `src`. `header` and `payload` are only valid during the call.
    fn deliver(
        &mut self,
        src: Gpid,
        handler: HandlerId,
        header: &[u8],
        payload: &[u8],
    ) -> Result<()>;

    /// Where the `len`-byte payload of a message with this header belongs, when the engine can
    /// take it there directly (rendezvous data for a matched, contiguous receive). A transport
    /// that receives a message in pieces (a byte stream) may read the payload straight into this
    /// slice — no intermediate copy — and then report it with [`AmSink::placed`] instead of
    /// delivering it. Asked again with the same header, the answer is the same slice until
    /// `placed` is called.
    fn destination(
        &mut self,
        _src: Gpid,
        _handler: HandlerId,
        _header: &[u8],
        _len: usize,
    ) -> Option<&mut [u8]> {
        None
    }

    /// Like [`AmSink::destination`], for a receive whose buffer has a noncontiguous layout:
    /// the pieces of user memory the payload fills, in order (at most `max_pieces`, so a
    /// transport can read into them with one `readv`). `None` when there is no such list; the
    /// payload is then delivered as usual. Completion is reported with [`AmSink::placed`].
    fn scattered_destination(
        &mut self,
        _src: Gpid,
        _handler: HandlerId,
        _header: &[u8],
        _len: usize,
        _max_pieces: usize,
    ) -> Option<smallvec::SmallVec<[&mut [u8]; 8]>> {
        None
    }

    /// The payload (`len` bytes) of the message with this header was written into the slice
    /// [`AmSink::destination`] (or the pieces [`AmSink::scattered_destination`]) gave for it.
    fn placed(
        &mut self,
        src: Gpid,
        _handler: HandlerId,
        _header: &[u8],
        _len: usize,
    ) -> Result<()> {
        Err(crate::Error::new(
            crate::ErrorKind::Internal,
            format!("a message from process {src} was placed without a destination"),
        ))
    }

    /// Whether the poll should go on after a delivery. A blocking receive's sink that has its
    /// message says no: polling on would read the line of the sender's next record, pulling it
    /// into this core's cache just before the sender must take it back to write.
    #[inline(always)]
    fn wants_more(&self) -> bool {
        true
    }
}

/// A descriptor to sleep on until it is ready ([`AmTransport::arm_wakeup`]), as `poll(2)`
/// takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitFd {
    /// The descriptor (a socket, an epoll instance): borrowed, owned by the transport.
    pub fd: std::os::fd::RawFd,
    /// Whether writing, not reading, is what it waits for (output queued behind a full
    /// socket).
    pub write: bool,
}

/// What [`AmTransport::arm_wakeup`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arm {
    /// Every piece of work this transport can get makes a descriptor it pushed ready: a
    /// sleeper may wait on them for as long as it likes.
    Armed,
    /// Work waits already (messages held back by a poll's budget, a read paused): poll
    /// again, do not sleep.
    Busy,
    /// Arrivals do not show on any descriptor: sleep only briefly.
    Unable,
}

impl Arm {
    /// Both transports of a device together: busy if either is, armed only if both are.
    pub fn and(self, other: Arm) -> Arm {
        match (self, other) {
            (Arm::Busy, _) | (_, Arm::Busy) => Arm::Busy,
            (Arm::Armed, Arm::Armed) => Arm::Armed,
            _ => Arm::Unable,
        }
    }
}

/// A network module: the transport to processes on other nodes.
pub trait Netmod: AmTransport {
    /// How MPI send/receive is carried out on this network: its native engine, or
    /// `am_fallback::Am` for networks without tag matching.
    type P2p: P2p<Self>;
}

/// The integrated shared-memory layer: the transport to processes on this node (and to self).
///
/// Shared memory always matches in the core's queues (its engine must have
/// `NATIVE_MATCHING == false`), which is what lets an ANY_SOURCE receive over shm and an
/// active-message netmod be one posted entry.
pub trait Shm: AmTransport {
    /// The engine; in practice `am_fallback::Am`.
    type P2p: P2p<Self>;
    /// False only for [`NoShm`]: then every peer, self included, goes through the netmod.
    const PRESENT: bool = true;
    /// Whether `gpid` is reached through shared memory.
    fn is_local(&self, gpid: Gpid) -> bool;

    /// Whether the on-node process `peer` last ran on the CPU this rank runs on now; `None`
    /// asks about the on-node process this rank last received from, the likeliest one it waits
    /// for. Such a peer cannot run until this rank gives up the CPU, so polling for it only
    /// delays it: [`Device::pause`](crate::device::Device::pause) then moves off the CPU or
    /// yields at once instead of after its idle polls. Called only from idle loops.
    fn peer_shares_cpu(&mut self, _peer: Option<Gpid>) -> bool {
        false
    }

    /// Moves the calling thread to another CPU it may run on, one where fewer of this node's
    /// ranks last ran, leaving its allowed CPUs as they were (so the scheduler may move it
    /// again); at most now and then. Returns whether it moved. Called only when
    /// [`Shm::peer_shares_cpu`] said yes.
    fn move_off_cpu(&mut self) -> bool {
        false
    }

    /// Watches for a message from the on-node process `peer` alone, for up to `loads` loads of
    /// the line its next one will arrive in, and returns whether something may have arrived
    /// (`true` at once when the transport cannot tell cheaply, or something waits elsewhere:
    /// the caller then polls in full). A blocking receive from `peer` calls it between its
    /// progress polls while it spins ([`crate::device::set_tight_spin`]), so that it sees its
    /// message a few nanoseconds after it lands rather than up to a whole progress poll later.
    #[inline(always)]
    fn watch_for_arrival(&mut self, _peer: Gpid, _loads: usize) -> bool {
        true
    }

    // The node's collective lanes ([`crate::node_coll`]): per slot and local rank an arrival
    // word and two outboxes in the shared segment. A layer without them keeps the defaults,
    // and every collective goes point to point.

    /// Bytes of each collective outbox, the largest part of a collective that goes through the
    /// lanes; 0 when this layer never has lanes. A constant, so that every member of a job
    /// decides alike which collectives take the lanes (whether a node has them is for the
    /// agreement to find out: [`Shm::coll_local`]).
    const COLL_OUTBOX: usize = 0;

    /// The local index of `gpid` in the collective lanes, when it has lanes on this node.
    fn coll_local(&self, _gpid: Gpid) -> Option<u32> {
        None
    }

    /// Offers the collective slots this process has never used and no other agreement holds
    /// (bit `k` for slot `k`), and holds them until [`Shm::coll_conclude`].
    fn coll_offer(&mut self) -> u64 {
        0
    }

    /// Ends the agreement that `offered` came from: slot `taken` is used from now on (and
    /// never offered again: a member of its last communicator may still read its outboxes),
    /// the rest of the offer is free again.
    fn coll_conclude(&mut self, _offered: u64, _taken: Option<u32>) {}

    /// The number of the last collective operation local rank `local` entered on `slot`
    /// (an acquire load: what it published before is visible after).
    fn coll_arrived(&self, _slot: u32, _local: u32) -> u64 {
        0
    }

    /// Says that this rank has entered operation `op` on `slot` (a release store: what it
    /// published for `op` is visible to whoever sees the number).
    fn coll_arrive(&self, _slot: u32, _op: u64) {}

    /// Copies `data` (at most [`Shm::coll_outbox`] bytes) into this rank's outbox for
    /// operation `op` on `slot`, with its length.
    fn coll_publish(&self, _slot: u32, _op: u64, _data: &[u8]) {}

    /// Runs `f` on what local rank `local` published for operation `op` on `slot`. Only
    /// called once that rank's arrival number is `op` or more, and before this rank enters
    /// `op + 1`: the outbox is not written meanwhile.
    fn coll_read<R>(&self, _slot: u32, _local: u32, _op: u64, f: impl FnOnce(&[u8]) -> R) -> R {
        f(&[])
    }
}

/// What an engine call may borrow: the core's queues and pool, its own transport, and a way to
/// cancel an ANY_SOURCE receive's partner in the other transport.
pub struct Cx<'a, T, P> {
    /// Requests, matching queues, communicators, per-route protocol state.
    pub core: &'a mut Core,
    /// The transport this engine drives.
    pub transport: &'a mut T,
    /// Which route `transport` is.
    pub route: Route,
    /// Resolves ANY_SOURCE partners (see [`Partner`]).
    pub partner: &'a mut P,
}

/// Cancels the netmod half of an ANY_SOURCE receive before the core's half takes a message.
///
/// The rule (CH4's anysource partner, done right): whoever matches first must first cancel the
/// other half; if that cancel fails, the other half has already matched and will complete the
/// request, so the first must leave its message for another receive. A message is never
/// delivered twice and never lost.
pub trait Partner {
    /// Whether a receive can have a netmod half at all (the netmod matches natively). A
    /// constant, so that builds without such a netmod drop the partner check from the path
    /// of every arriving message.
    const NATIVE_HALVES: bool;
    /// Tries to cancel the netmod half of `req`. `Ok(true)`: cancelled, the caller may take the
    /// message. `Ok(false)`: the netmod matched first.
    fn cancel_partner(&mut self, core: &mut Core, req: ReqHandle) -> Result<bool>;
}

/// The partner resolver for calls that can never meet a partnered request.
pub struct NoPartner;

impl Partner for NoPartner {
    const NATIVE_HALVES: bool = false;
    #[inline(always)]
    fn cancel_partner(&mut self, _core: &mut Core, _req: ReqHandle) -> Result<bool> {
        Ok(true)
    }
}

/// The arguments of one send, as the device hands them to an engine.
pub struct SendOp {
    /// The receiving process.
    pub dest: Gpid,
    /// Context, the sender's rank in the communicator, tag.
    pub env: Envelope,
    /// The data. For a blocking send the device waits for the request (if the engine made
    /// one) before the user's borrow ends.
    pub buf: SendBuf,
    /// Standard, synchronous or ready.
    pub mode: SendMode,
}

/// The outcome of one step of a blocking receive's direct path ([`P2p::recv_direct`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direct {
    /// The receive completed into the caller's buffer, with this status.
    Done(Status),
    /// Nothing for it yet; step again (the engine made progress on its transport meanwhile).
    Pending,
    /// The direct path cannot serve this receive (a rendezvous message, other receives posted,
    /// a transport that reorders): post an ordinary receive instead.
    Fallback,
}

/// What an engine's network can carry, declared by the engine ([`P2p::caps`]) and enforced by
/// the device before anything reaches the engine: a natively matching network packs rank, tag
/// and context id into its match bits and has its own limits, where the core's queues have
/// none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// The largest tag a message can carry (the device's MPI_TAG_UB is the smallest of its
    /// engines').
    pub tag_ub: Tag,
    /// The most processes a job may have to be reachable through this engine.
    pub max_processes: u64,
    /// Whether a ready-mode send that finds no posted receive is detected and reported
    /// ([`ErrorKind::ReadyNotPosted`](crate::ErrorKind::ReadyNotPosted)). The core's queues
    /// see it; a network that matches in the NIC cannot (MPI makes it the program's error
    /// either way), so tests of it are gated on this.
    pub detects_unmatched_ready: bool,
    /// Whether a truncated receive holds the message's first bytes (the buffer's worth). The
    /// core's queues fill it; some networks write nothing (libfabric 1.17's `tcp;ofi_rxm`), and
    /// MPI leaves it open. The error and "nothing past the buffer" hold everywhere.
    pub fills_truncated: bool,
    /// The most pieces of a gather list the network takes in one operation.
    pub iov_limit: usize,
    /// The longest message in bytes.
    pub max_message: usize,
}

impl Caps {
    /// The core's own limits: what the active-message engines (and the shm layer) carry.
    pub const CORE: Caps = Caps {
        tag_ub: TAG_UB,
        max_processes: Gpid::MAX as u64,
        detects_unmatched_ready: true,
        fills_truncated: true,
        iov_limit: usize::MAX,
        max_message: usize::MAX,
    };

    /// The limits of two engines together (a device reaches peers through both).
    pub fn meet(self, other: Caps) -> Caps {
        Caps {
            tag_ub: self.tag_ub.min(other.tag_ub),
            max_processes: self.max_processes.min(other.max_processes),
            detects_unmatched_ready: self.detects_unmatched_ready && other.detects_unmatched_ready,
            fills_truncated: self.fills_truncated && other.fills_truncated,
            iov_limit: self.iov_limit.min(other.iov_limit),
            max_message: self.max_message.min(other.max_message),
        }
    }
}

/// A point-to-point engine: MPI send/receive semantics over one transport.
///
/// Engines keep their per-operation state in the core's requests and their unmatched messages
/// in the core's queues (AM fallback) or inside the network (native engines).
///
/// Every engine bounds the memory a flood can take (the flow-control contract): what it copies
/// aside for a peer that is not taking data, and what a receiver holds of messages it has not
/// matched, stay within a documented limit per peer and in total, whatever the program sends.
/// A blocking send beyond the limit waits ([`P2p::send_ready`]); a nonblocking one keeps its
/// data in the user's buffer (it is lent to the request anyway). The AM fallback does it with
/// eager credit (`ch4_core::core::AmRouteState::credit`); a native engine relies on its
/// network's own flow control where it has one (libfabric's resource management, UCX's
/// rendezvous thresholds) and on the same credit scheme where it does not.
pub trait P2p<T: AmTransport> {
    /// Whether this engine matches messages itself (in the network) instead of in the core;
    /// for an engine that chooses among networks at run time, whether it *may*
    /// ([`P2p::native_matching`] answers for the one chosen).
    const NATIVE_MATCHING: bool;
    /// The largest tag this engine carries; for an engine that chooses among networks at run
    /// time, the largest any of them carries ([`P2p::tag_ub`] answers for the one chosen).
    const TAG_UB: Tag = TAG_UB;

    /// Whether this engine, over `transport`, matches messages itself. The device asks this,
    /// not the constant: an engine over one network keeps the default, which returns the
    /// constant, so the question folds away after inlining.
    #[inline(always)]
    fn native_matching(_transport: &T) -> bool {
        Self::NATIVE_MATCHING
    }

    /// The largest tag this engine carries over `transport`. The default returns
    /// [`P2p::TAG_UB`], so the device's tag check stays a compare with an immediate for an
    /// engine over one network.
    #[inline(always)]
    fn tag_ub(_transport: &T) -> Tag {
        Self::TAG_UB
    }

    /// Starts a send. Returns the request when one was made, else [`ReqHandle::DONE`]: only a
    /// send that cannot finish at once gets one (CH3's iStartMsg: most small sends create no
    /// request at all).
    fn isend<P: Partner>(cx: &mut Cx<'_, T, P>, op: SendOp) -> Result<ReqHandle>;
    /// Starts the receive `req` (already in the pool with its [`crate::RecvState`]), which
    /// accepts `want` (its `RecvState::want`, handed over so that an engine need not read back
    /// the request just written: on this project's host that read-back stalled on the stores
    /// still in flight); may complete it at once. `from` is the process `want.source` names
    /// (`None` for any source): an engine that matches in the network may post the receive
    /// for that process's address alone, so that nothing sent from another address can
    /// complete it, whatever its match bits say (MPICH's OFI netmod posts `fi_trecvmsg` with
    /// the source's address the same way).
    fn irecv<P: Partner>(
        cx: &mut Cx<'_, T, P>,
        req: ReqHandle,
        want: &Envelope,
        from: Option<Gpid>,
    ) -> Result<()>;
    /// Cancels an unmatched receive. `Ok(true)`: cancelled; `Ok(false)`: already matched.
    ///
    /// The answer is definite: a natively matching engine asks its network and answers only
    /// once the network has said which (libfabric reports it through the completion queue, not
    /// through `fi_cancel`'s return code), driving only its own transport meanwhile, at most
    /// for [`DeviceConfig::cancel_limit`](crate::core::DeviceConfig::cancel_limit); past it
    /// the call fails with [`ErrorKind::Pending`](crate::ErrorKind::Pending) and the receive stays
    /// [`NativeHalf::CancelAsked`](crate::request::NativeHalf::CancelAsked).
    fn cancel_recv<P: Partner>(cx: &mut Cx<'_, T, P>, req: ReqHandle) -> Result<bool>;
    /// Asks to cancel a send; the request completes (cancelled or not) when the answer is in.
    fn cancel_send<P: Partner>(cx: &mut Cx<'_, T, P>, req: ReqHandle) -> Result<()>;
    /// Looks for a matching message without receiving it; `from` as in [`P2p::irecv`].
    fn iprobe<P: Partner>(
        cx: &mut Cx<'_, T, P>,
        want: &Envelope,
        from: Option<Gpid>,
    ) -> Result<Option<Status>>;
    /// Takes a matching message out of matching, for a later [`P2p::imrecv`]; `from` as in
    /// [`P2p::irecv`].
    fn improbe<P: Partner>(
        cx: &mut Cx<'_, T, P>,
        want: &Envelope,
        from: Option<Gpid>,
    ) -> Result<Option<(Message, Status)>>;
    /// Receives a message taken by [`P2p::improbe`] into request `req`.
    fn imrecv<P: Partner>(cx: &mut Cx<'_, T, P>, msg: Message, req: ReqHandle) -> Result<()>;
    /// Whether a *blocking* send of `total` bytes to `dest` may start now. `false` asks the
    /// device to make progress and ask again: the engine's flow control (the AM fallback's eager
    /// credit) has no room, and a blocking send waits for room rather than switching protocol
    /// — it then keeps the eager protocol's buffering, so a receiver that takes a sender's
    /// messages a little out of order still gets them all. Nonblocking sends never wait here;
    /// an engine deals with them in `isend` (the AM fallback sends them by rendezvous, their
    /// data staying in the user's buffer).
    #[inline(always)]
    fn send_ready<P: Partner>(_cx: &mut Cx<'_, T, P>, _dest: Gpid, _total: usize) -> bool {
        true
    }
    /// What this engine's network can carry (its `tag_ub` is [`P2p::TAG_UB`]). The
    /// active-message engines carry whatever the core does.
    #[inline(always)]
    fn caps(_transport: &T) -> Caps {
        Caps::CORE
    }
    /// Makes the network let go of request `req` before the core frees it: after this returns
    /// `Ok`, the network neither reads nor writes the request's buffer again and will report
    /// nothing more about it. The device calls it before removing a request that a natively
    /// matching engine may still hold (a receive whose [`NativeHalf`](crate::request::NativeHalf)
    /// holds the buffer, a send still in the network) — when a scope is released after an
    /// error, a request is abandoned or its peer failed — never just dropping it, because the
    /// network would go on writing into memory the program has taken back.
    ///
    /// It drives only this engine's own transport, at most for the device's cancel limit
    /// ([`DeviceConfig::cancel_limit`](crate::core::DeviceConfig::cancel_limit)). If the
    /// network does not let go by then, the engine must make it (close the endpoint, which
    /// ends every operation on it) and return the error, leaving the netmod failed: memory
    /// safety outranks the netmod. The active-message engines hold no buffer outside progress
    /// calls and keep the default.
    #[inline(always)]
    fn quiesce<P: Partner>(_cx: &mut Cx<'_, T, P>, _req: ReqHandle) -> Result<()> {
        Ok(())
    }
    /// Drops a message taken by a matched probe that will not be received (MPI has no call for
    /// it, but a Rust value can be dropped): the network discards it (libfabric's `FI_CLAIM |
    /// FI_DISCARD`) and a rendezvous sender is released, instead of the message leaking and
    /// its sender hanging.
    fn discard<P: Partner>(cx: &mut Cx<'_, T, P>, msg: Message) -> Result<()>;
    /// Moves pending work forward: delivers arrivals, streams rendezvous data, sends replies.
    /// Bounded work per call; returns a count of events handled (0 = idle).
    fn progress<P: Partner>(cx: &mut Cx<'_, T, P>) -> Result<usize>;

    /// One step of a blocking receive for `want` straight into `buf`, with no request and no
    /// posted-queue entry (the "direct match" of a small message). Also makes the progress a
    /// [`P2p::progress`] call would. Engines that cannot do it keep the default: `Fallback`.
    #[inline(always)]
    fn recv_direct<P: Partner>(
        _cx: &mut Cx<'_, T, P>,
        _want: &Envelope,
        _buf: &mut [u8],
    ) -> Result<Direct> {
        Ok(Direct::Fallback)
    }
}

/// "No shared memory": every peer, self included, is reached through the netmod.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoShm;

impl AmTransport for NoShm {
    const AM_ORDERED: bool = true;
    const NAME: &'static str = "none";

    fn eager_limit(&self) -> usize {
        0
    }
    fn am_max_payload(&self) -> usize {
        0
    }
    fn am_send(&mut self, dest: Gpid, _: HandlerId, _: &[u8], _: &[&[u8]]) -> Result<()> {
        crate::bail!(Internal, "NoShm asked to send to process {dest}")
    }
    fn am_poll<K: AmSink>(&mut self, _sink: &mut K, _budget: usize) -> Result<usize> {
        Ok(0)
    }
}

impl Shm for NoShm {
    type P2p = NoEngine;
    const PRESENT: bool = false;
    #[inline(always)]
    fn is_local(&self, _gpid: Gpid) -> bool {
        false
    }
}

/// The engine of [`NoShm`]: never called, because no peer routes to it.
pub struct NoEngine;

impl<T: AmTransport> P2p<T> for NoEngine {
    const NATIVE_MATCHING: bool = false;

    fn isend<P: Partner>(_: &mut Cx<'_, T, P>, _: SendOp) -> Result<ReqHandle> {
        crate::bail!(Internal, "send routed to a transport that is not there")
    }
    fn irecv<P: Partner>(
        _: &mut Cx<'_, T, P>,
        _: ReqHandle,
        _: &Envelope,
        _: Option<Gpid>,
    ) -> Result<()> {
        crate::bail!(Internal, "receive routed to a transport that is not there")
    }
    fn cancel_recv<P: Partner>(_: &mut Cx<'_, T, P>, _: ReqHandle) -> Result<bool> {
        Ok(false)
    }
    fn cancel_send<P: Partner>(_: &mut Cx<'_, T, P>, _: ReqHandle) -> Result<()> {
        Ok(())
    }
    fn iprobe<P: Partner>(
        _: &mut Cx<'_, T, P>,
        _: &Envelope,
        _: Option<Gpid>,
    ) -> Result<Option<Status>> {
        Ok(None)
    }
    fn improbe<P: Partner>(
        _: &mut Cx<'_, T, P>,
        _: &Envelope,
        _: Option<Gpid>,
    ) -> Result<Option<(Message, Status)>> {
        Ok(None)
    }
    fn imrecv<P: Partner>(_: &mut Cx<'_, T, P>, _: Message, _: ReqHandle) -> Result<()> {
        crate::bail!(Internal, "message routed to a transport that is not there")
    }
    fn discard<P: Partner>(_: &mut Cx<'_, T, P>, _: Message) -> Result<()> {
        Ok(())
    }
    fn progress<P: Partner>(_: &mut Cx<'_, T, P>) -> Result<usize> {
        Ok(0)
    }
}

/// "No network": a build without a network netmod. Every peer must be reached through shared
/// memory; the process-mode bootstrap refuses a job that spans nodes, so nothing routes here.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoNetmod;

impl AmTransport for NoNetmod {
    const AM_ORDERED: bool = true;
    const NAME: &'static str = "none";

    fn eager_limit(&self) -> usize {
        0
    }
    fn am_max_payload(&self) -> usize {
        0
    }
    fn am_send(&mut self, dest: Gpid, _: HandlerId, _: &[u8], _: &[&[u8]]) -> Result<()> {
        crate::bail!(
            Transport,
            "process {dest} is on another node and this build has no network netmod"
        )
    }
    #[inline(always)]
    fn am_poll<K: AmSink>(&mut self, _sink: &mut K, _budget: usize) -> Result<usize> {
        Ok(0)
    }
    fn arm_wakeup(&mut self, _out: &mut Vec<WaitFd>) -> Arm {
        // No network: nothing arrives through it.
        Arm::Armed
    }
}

impl Netmod for NoNetmod {
    type P2p = NoEngine;
}

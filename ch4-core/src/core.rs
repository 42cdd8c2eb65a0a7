//! The device's state that does not belong to a transport: the request pool, the matching
//! queues, the communicator table, and the per-route state of the active-message protocol.
//!
//! Engines receive a `&mut Core` for the duration of one call (see [`crate::transport::Cx`]);
//! everything they keep between calls lives here, where the device can see it.

use std::collections::{BTreeMap, VecDeque};

use rustc_hash::FxHashMap;

use crate::comm::{Comm, CommId, ContextIds};
use crate::matching::{PostedQueue, UnexpectedQueue};
use crate::pool::{Pool, PoolConfig};
use crate::request::{NativeHalf, ReqHandle, Request, RequestKind, Route, Unexpected};
use crate::types::{ContextId, Gpid, HandlerId, Rank, Status};
use crate::{Error, ErrorKind, Result};

/// The longest control header the outbox holds (every control packet of the AM protocol fits).
pub const CTRL_HEADER_MAX: usize = 48;

/// A header-only reply waiting for its transport (clear-to-send, acknowledgements). Replies are
/// queued rather than sent from inside a delivery because the transport is busy delivering.
#[derive(Clone, Copy)]
pub struct CtrlPacket {
    /// The receiving process.
    pub dest: Gpid,
    /// Its handler.
    pub handler: HandlerId,
    /// Header bytes `[..len]`.
    pub header: [u8; CTRL_HEADER_MAX],
    /// Used length of `header`.
    pub len: u8,
    /// Whether the packet may be lost when its receiver is gone (returned credit, which only a
    /// live sender needs); a failure to send any other control packet is an error.
    pub droppable: bool,
}

impl CtrlPacket {
    /// A control packet carrying `header` (at most [`CTRL_HEADER_MAX`] bytes).
    pub fn new(dest: Gpid, handler: HandlerId, header: &[u8]) -> Result<CtrlPacket> {
        let mut p = CtrlPacket {
            dest,
            handler,
            header: [0; CTRL_HEADER_MAX],
            len: header.len() as u8,
            droppable: false,
        };
        p.header
            .get_mut(..header.len())
            .ok_or_else(|| Error::new(ErrorKind::Internal, "control header too long"))?
            .copy_from_slice(header);
        Ok(p)
    }

    /// The header bytes.
    pub fn header(&self) -> &[u8] {
        &self.header[..self.len as usize]
    }
}

/// A message that arrived ahead of its turn on a transport that does not keep order.
pub struct HeldPacket {
    /// Handler id.
    pub handler: HandlerId,
    /// Header bytes.
    pub header: Vec<u8>,
    /// Payload bytes.
    pub payload: Vec<u8>,
}

/// The active-message protocol's state on one route.
#[derive(Default)]
pub struct AmRouteState {
    /// Replies waiting to be sent on this route.
    pub outbox: VecDeque<CtrlPacket>,
    /// Sends with rendezvous data still to stream on this route.
    pub streaming: VecDeque<ReqHandle>,
    /// Next matching-packet sequence number per destination (unordered transports only).
    pub seq_out: FxHashMap<Gpid, u32>,
    /// Next expected sequence number per source (unordered transports only).
    pub seq_in: FxHashMap<Gpid, u32>,
    /// Matching packets that arrived early, per source, by sequence number.
    pub held: FxHashMap<Gpid, BTreeMap<u32, HeldPacket>>,
    /// Reused buffer for packing noncontiguous rendezvous data.
    pub scratch: Vec<u8>,
    /// Matched rendezvous receives whose data the transport will read from the sender (LMT Get).
    pub reads: VecDeque<PeerReadJob>,
    /// Receives matched by a request-to-send whose first piece the transport is reading
    /// straight into their buffers: what the transport's further questions about the piece
    /// (where it goes, as more of it arrives) and its report that the piece is in place refer
    /// to. A transport reads one frame of a peer at a time, so a process has at most one here.
    pub placing: Vec<FirstPiece>,
    /// Rendezvous sends of this process on this route whose data has not all moved (streamed
    /// after a clear-to-send, or read by the receiver): while there are some, it is sending
    /// large messages, and reading the ones it receives copies each byte once per direction
    /// ([`crate::transport::AmTransport::read_pays`]). A send that never finishes (a receiver
    /// that died, a cancelled send) leaves it high; `rendezvous_sent` bounds how long that
    /// counts.
    pub rendezvous_in_flight: usize,
    /// When this process last started a rendezvous send on this route.
    pub rendezvous_sent: Option<std::time::Instant>,
    /// The first process this route reaches: `credit` and `consumed` hold the processes from
    /// here on (a node's block of processes for the shared-memory route, every process for the
    /// network's), so a job of a million processes keeps shared-memory credit only for the
    /// few on its node. A process outside the window has no credit: its sends cannot be eager
    /// on this route, which no route that reaches it asks.
    pub first: Gpid,
    /// Eager credit left towards each process (indexed by process id less [`Self::first`]), in credit bytes
    /// ([`credit_cost`]): an eager message that would overdraw it goes by rendezvous instead, so
    /// a receiver never holds more than its senders' credit of unexpected eager data, and a
    /// sender never more than its credit of copies waiting for a full ring or socket (flow
    /// control of eager buffers, which the CH3 TCP notes call not optional).
    pub credit: Vec<u64>,
    /// Credit consumed from each source's eager messages (delivered to a receive, or dropped)
    /// and not yet given back.
    pub consumed: Vec<u64>,
    /// What a process's credit starts at (see [`DeviceConfig::eager_credit`]).
    pub credit_init: u64,
    /// Consumed credit is given back to its sender once it reaches this much.
    pub credit_return_at: u64,
}

/// Credit bytes an eager message of `total` bytes costs: its data and what the receiver keeps
/// beside an unexpected message (its record and queue entry). A protocol constant: sender and
/// receiver must count alike.
#[inline(always)]
pub const fn credit_cost(total: usize) -> u64 {
    (total as u64).saturating_add(CREDIT_OVERHEAD as u64)
}

/// [`credit_cost`] of a message this process sends: the senders' callers pass an eager
/// message's length (checked against the eager limit first) or a netmod's fixed charge, so the
/// sum cannot overflow and needs no saturation — three instructions fewer on every eager send,
/// which checks and spends it. Equal to [`credit_cost`] for every such length.
#[inline(always)]
const fn local_credit_cost(total: usize) -> u64 {
    total as u64 + CREDIT_OVERHEAD as u64
}

/// The per-message part of [`credit_cost`].
pub const CREDIT_OVERHEAD: usize = 128;

impl AmRouteState {
    /// The state of one route that reaches the processes `reach` (see [`Self::first`]), every
    /// credit at `init`.
    pub fn new(reach: std::ops::Range<Gpid>, init: u64) -> AmRouteState {
        let count = reach.end.saturating_sub(reach.start) as usize;
        AmRouteState {
            first: reach.start,
            credit: vec![init; count],
            consumed: vec![0; count],
            credit_init: init,
            credit_return_at: (init / 4).max(1),
            ..AmRouteState::default()
        }
    }
}

/// A receive matched by a request-to-send whose first piece is being read into its buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FirstPiece {
    /// The sending process.
    pub src: Gpid,
    /// The sender's request id, from the request-to-send.
    pub sreq: u64,
    /// The receive.
    pub req: ReqHandle,
    /// What the receive accepts of the message: the clear-to-send sent once the piece is in.
    pub accept: usize,
}

/// A matched receive waiting for its single-copy read (LMT Get).
#[derive(Debug, Clone, Copy)]
pub struct PeerReadJob {
    /// The receive.
    pub req: ReqHandle,
    /// The sending process.
    pub src: Gpid,
    /// The sender's buffer in its own address space.
    pub addr: u64,
    /// The sender's request, told when the copy is done.
    pub sreq: u64,
}

/// Settings of a device, from the defaults or the environment.
#[derive(Debug, Clone, Copy)]
pub struct DeviceConfig {
    /// Request pool sizing (CH4 memory objects).
    pub requests: PoolConfig,
    /// How many arrivals one progress call delivers per transport at most.
    pub poll_budget: usize,
    /// How many rendezvous data pieces one progress call streams per route at most.
    pub stream_budget: usize,
    /// The most eager data (in [`credit_cost`] bytes) this process sends one peer before that
    /// peer has received it; beyond it, a blocking send waits for credit to come back and a
    /// nonblocking one goes by rendezvous. `CH4_EAGER_CREDIT`.
    pub eager_credit: usize,
    /// The eager credit of all peers together: a peer's credit is this divided by the number
    /// of peers (at least [`MIN_EAGER_CREDIT`]), capped by `eager_credit`. Bounds what a receiver
    /// holds of unexpected eager data from all its senders. `CH4_EAGER_CREDIT_TOTAL`.
    pub eager_credit_total: usize,
    /// How long a natively matching engine may drive its network for one definite answer: a
    /// cancel's outcome ([`P2p::cancel_recv`](crate::transport::P2p::cancel_recv)) or the
    /// release of a request's buffer ([`P2p::quiesce`](crate::transport::P2p::quiesce)). A
    /// healthy network answers within microseconds; the limit turns a wedged one into an error
    /// instead of a hang.
    pub cancel_limit: std::time::Duration,
}

/// Default of [`DeviceConfig::eager_credit`]: a window of 64 eager messages of the largest eager
/// size (shm 32 KiB, TCP 64 KiB) fits, so osu_bw never falls back to rendezvous.
pub const DEFAULT_EAGER_CREDIT: usize = 8 << 20;
/// Default of [`DeviceConfig::eager_credit_total`].
pub const DEFAULT_EAGER_CREDIT_TOTAL: usize = 32 << 20;
/// A peer's credit when [`DeviceConfig::eager_credit_total`] is shared by very many peers.
pub const MIN_EAGER_CREDIT: usize = 256 << 10;

impl Default for DeviceConfig {
    fn default() -> Self {
        DeviceConfig {
            requests: PoolConfig {
                min: 256,
                chunk: 256,
                max: 1 << 22,
            },
            poll_budget: 64,
            stream_budget: 8,
            eager_credit: DEFAULT_EAGER_CREDIT,
            eager_credit_total: DEFAULT_EAGER_CREDIT_TOTAL,
            cancel_limit: std::time::Duration::from_secs(10),
        }
    }
}

impl DeviceConfig {
    /// The defaults, with `CH4_EAGER_CREDIT` and `CH4_EAGER_CREDIT_TOTAL` applied; a value
    /// that does not parse is an error.
    pub fn from_env() -> Result<DeviceConfig> {
        let mut c = DeviceConfig::default();
        if let Some(v) = crate::env::bytes("CH4_EAGER_CREDIT")? {
            c.eager_credit = v;
        }
        if let Some(v) = crate::env::bytes("CH4_EAGER_CREDIT_TOTAL")? {
            c.eager_credit_total = v;
        }
        Ok(c)
    }

    /// The credit each peer starts with in a job of `world_size` processes.
    pub fn credit_per_peer(&self, world_size: u32) -> u64 {
        let peers = (world_size as usize).saturating_sub(1).max(1);
        let share = (self.eager_credit_total / peers).max(MIN_EAGER_CREDIT);
        share.min(self.eager_credit) as u64
    }
}

/// The settings this crate reads from the environment (see [`crate::env`]).
pub const SETTINGS: &[crate::env::Setting] = &[
    crate::env::Setting::new(
        "CH4_EAGER_CREDIT",
        "8M",
        "eager data (plus 128 bytes a message) a rank sends one peer before the peer has received it; beyond, a blocking send waits for credit to come back and a nonblocking one goes by rendezvous (its data stays in the user's buffer)",
    ),
    crate::env::Setting::new(
        "CH4_EAGER_CREDIT_TOTAL",
        "32M",
        "the eager credit of all peers together (a peer gets this over the number of peers, at least 256K, at most CH4_EAGER_CREDIT): bounds a receiver's unexpected eager data and a sender's queued copies",
    ),
];

/// What the engines borrow from the device.
pub struct Core {
    /// This process's id in the job.
    pub gpid: Gpid,
    /// Processes in the job.
    pub world_size: u32,
    /// All requests.
    pub requests: Pool<Request>,
    /// Receives waiting for a message (for shm and active-message netmods).
    pub posted: PostedQueue<ReqHandle>,
    /// Messages waiting for a receive (for shm and active-message netmods).
    pub unexpected: UnexpectedQueue<Unexpected>,
    /// Live communicators.
    pub comms: Pool<Comm>,
    /// Free context ids.
    pub contexts: ContextIds,
    /// Per-route active-message protocol state, indexed by [`Route::index`].
    pub am: [AmRouteState; 2],
    /// Settings.
    pub config: DeviceConfig,
    /// The world communicator.
    pub world: CommId,
    /// The self communicator.
    pub self_comm: CommId,
    /// Buffers of consumed unexpected eager messages, kept for the next early arrival so that a
    /// burst of them does not cost an allocation each (bounded in count and size).
    pub spare_buffers: Vec<Vec<u8>>,
    /// The reductions' working buffers (the partial result and the incoming contribution),
    /// kept between collectives: allocated afresh, a large reduction's buffers are new pages
    /// every time, and their page faults cost more than the reduction (a 1 MiB allreduce of
    /// two processes took 0.9 ms, most of it faulting).
    pub coll_scratch: [Vec<u8>; 2],
}

/// Spare unexpected-message buffers the core keeps at most.
const SPARE_BUFFERS: usize = 256;
/// Larger buffers are freed rather than kept.
const SPARE_BUFFER_MAX: usize = 64 << 10;

impl Core {
    /// A buffer holding a copy of `bytes`, from the spares when one is there.
    #[inline]
    pub fn buffer_from(&mut self, bytes: &[u8]) -> Vec<u8> {
        let mut v = self.spare_buffers.pop().unwrap_or_default();
        v.clear();
        v.extend_from_slice(bytes);
        v
    }

    /// Returns a buffer from [`Core::buffer_from`] once its message has been delivered.
    #[inline]
    pub fn recycle_buffer(&mut self, v: Vec<u8>) {
        if self.spare_buffers.len() < SPARE_BUFFERS && v.capacity() <= SPARE_BUFFER_MAX {
            self.spare_buffers.push(v);
        }
    }
}

impl Core {
    #[cfg(test)]
    pub(crate) fn new(gpid: Gpid, world_size: u32, config: DeviceConfig) -> Result<Core> {
        Core::with_reach(gpid, world_size, config, [0..world_size, 0..world_size])
    }

    /// [`Core::new`] with each route's credit kept only for the processes it reaches (indexed
    /// by [`Route::index`]; see [`AmRouteState::first`]).
    pub(crate) fn with_reach(
        gpid: Gpid,
        world_size: u32,
        config: DeviceConfig,
        reach: [std::ops::Range<Gpid>; 2],
    ) -> Result<Core> {
        use crate::rankmap::Group;
        if gpid >= world_size {
            crate::bail!(Arg, "process {gpid} outside a job of {world_size}");
        }
        let mut comms = Pool::new(PoolConfig {
            min: 16,
            chunk: 16,
            max: crate::comm::CONTEXT_SLOTS,
        })?;
        let world = CommId(comms.insert(Comm::intra(0, gpid as i32, Group::world(world_size)))?);
        let self_group = Group::world(world_size).incl(&[gpid as i32])?;
        let self_comm = CommId(comms.insert(Comm::intra(2, 0, self_group))?);
        Ok(Core {
            gpid,
            world_size,
            requests: Pool::new(config.requests)?,
            posted: PostedQueue::new(),
            unexpected: UnexpectedQueue::new(),
            comms,
            coll_scratch: [Vec::new(), Vec::new()],
            contexts: ContextIds::default(),
            am: {
                let init = config.credit_per_peer(world_size);
                reach.map(|r| AmRouteState::new(r, init))
            },
            config,
            world,
            self_comm,
            spare_buffers: Vec::new(),
        })
    }

    /// The communicator `id`, to change.
    pub(crate) fn comm_mut(&mut self, id: CommId) -> Result<&mut Comm> {
        self.comms.get_mut(id.0).ok_or_else(|| {
            Error::new(
                ErrorKind::Comm,
                "communicator was freed or does not belong to this device",
            )
        })
    }

    /// The communicator behind `id`, or a `Comm` error when it was freed or never existed.
    #[inline(always)]
    pub fn comm(&self, id: CommId) -> Result<&Comm> {
        match self.comms.get(id.0) {
            Some(c) => Ok(c),
            None => Err(Error::new(
                ErrorKind::Comm,
                "communicator was freed or does not belong to this device",
            )),
        }
    }

    /// The process that is rank `rank` of the communicator whose point-to-point or collective
    /// context is `context`, if there is one: for a network that reports a message's
    /// communicator rank but not its sending process (UCX's tagged receives report only the
    /// tag and the length). A scan of the live communicators, which are few in practice.
    pub fn process_of(&self, context: ContextId, rank: Rank) -> Option<Gpid> {
        let p2p = context & !1;
        self.comms
            .iter()
            .find(|(_, c)| c.context == p2p)
            .and_then(|(_, c)| c.peers().gpid(rank))
    }

    /// The request behind `h`, or a `Request` error when it is stale.
    #[inline(always)]
    pub fn request_mut(&mut self, h: ReqHandle) -> Result<&mut Request> {
        match self.requests.get_mut(h) {
            Some(r) => Ok(r),
            None => Err(Error::new(
                ErrorKind::Request,
                "request handle is stale: already completed and freed, or never made",
            )),
        }
    }

    /// Finishes receive `h` with `status`. Removes its entry from the core's posted queue if it
    /// still has one (the netmod half of an ANY_SOURCE pair completed first).
    #[inline]
    pub fn complete_recv(&mut self, h: ReqHandle, status: Status) {
        let Some(req) = self.requests.get_mut(h) else {
            return;
        };
        let mut unpost = None;
        if let RequestKind::Recv(r) = &mut req.kind {
            unpost = r.posted.take();
            // Whoever completes a receive owns it: a natively matching engine completes only
            // what its network has finished with, and the core's queues complete a partnered
            // receive only after cancelling its network half for certain.
            debug_assert!(
                !matches!(
                    r.native,
                    NativeHalf::CancelAsked { .. } | NativeHalf::Posted { .. }
                ),
                "a receive completed while its network half may still match: {:?}",
                r.native
            );
            r.native = NativeHalf::NotPosted;
        }
        req.status = status;
        req.complete = true;
        if let Some(id) = unpost {
            self.posted.remove(id);
        }
    }

    /// Marks an event of send `h` done (data streamed, acknowledgement in); completes the send
    /// when none remain.
    #[inline]
    pub fn send_event_done(&mut self, h: ReqHandle) {
        if let Some(req) = self.requests.get_mut(h) {
            if let RequestKind::Send(s) = &mut req.kind {
                s.pending = s.pending.saturating_sub(1);
                if s.pending == 0 {
                    req.complete = true;
                }
            }
        }
    }

    /// Queues a control packet for `route`.
    #[inline]
    pub fn queue_ctrl(&mut self, route: Route, packet: CtrlPacket) {
        self.am[route.index()].outbox.push_back(packet);
    }

    /// Whether an eager message of `total` bytes to `dest` is within its credit.
    #[inline(always)]
    pub fn has_credit(&self, route: Route, dest: Gpid, total: usize) -> bool {
        let st = &self.am[route.index()];
        st.credit
            .get(dest.wrapping_sub(st.first) as usize)
            .is_some_and(|&c| c >= local_credit_cost(total))
    }

    /// Spends the credit of an eager message of `total` bytes to `dest` if there is enough:
    /// the check of [`Core::has_credit`] and the subtraction in one look at the counter (the
    /// eager send path's; a caller that then cannot send gives it back with
    /// [`Core::refund_credit`]).
    #[inline(always)]
    pub fn take_credit(&mut self, route: Route, dest: Gpid, total: usize) -> bool {
        let cost = local_credit_cost(total);
        let st = &mut self.am[route.index()];
        match st.credit.get_mut(dest.wrapping_sub(st.first) as usize) {
            Some(c) if *c >= cost => {
                *c -= cost;
                true
            }
            _ => false,
        }
    }

    /// Gives back credit taken with [`Core::take_credit`] for a message that was not sent.
    #[cold]
    pub fn refund_credit(&mut self, route: Route, dest: Gpid, total: usize) {
        self.credit_returned(route, dest, local_credit_cost(total));
    }

    /// Credit `dest` gave back (capped at the initial credit: more is a peer's mistake).
    pub fn credit_returned(&mut self, route: Route, dest: Gpid, amount: u64) {
        let st = &mut self.am[route.index()];
        if let Some(c) = st.credit.get_mut(dest.wrapping_sub(st.first) as usize) {
            *c = c.saturating_add(amount).min(st.credit_init);
        }
    }

    /// Counts an eager message of `total` bytes from `src` as consumed (delivered to a receive,
    /// or dropped); returns the credit to give back to `src` once enough has been consumed.
    #[inline(always)]
    pub fn consume_credit(&mut self, route: Route, src: Gpid, total: usize) -> Option<u64> {
        self.am[route.index()].consume_credit(src, total)
    }
}

impl AmRouteState {
    /// [`Core::consume_credit`] on this route: the engine's hot delivery path holds a request
    /// of the core while it calls this, so it is reachable without borrowing the whole core.
    #[inline(always)]
    pub fn consume_credit(&mut self, src: Gpid, total: usize) -> Option<u64> {
        let c = self
            .consumed
            .get_mut(src.wrapping_sub(self.first) as usize)?;
        *c = c.saturating_add(credit_cost(total));
        if *c < self.credit_return_at {
            return None;
        }
        Some(std::mem::take(c))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_of_a_rank_is_found_by_either_context_of_its_communicator() {
        let core = Core::new(1, 4, DeviceConfig::default()).unwrap();
        assert_eq!(core.process_of(0, 2), Some(2), "world, point-to-point");
        assert_eq!(core.process_of(1, 3), Some(3), "world, collectives");
        assert_eq!(
            core.process_of(2, 0),
            Some(1),
            "self: its one member is this process"
        );
        assert_eq!(core.process_of(2, 1), None, "no such rank");
        assert_eq!(core.process_of(8, 0), None, "no such communicator");
    }
}

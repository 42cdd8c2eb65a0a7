//! The device's state that does not belong to a transport: the request pool, the matching
//! queues, the communicator table, and the per-route state of the active-message protocol.
//!
//! Engines receive a `&mut Core` for the duration of one call (see [`crate::transport::Cx`]);
//! everything they keep between calls lives here, where the device can see it.

use std::collections::{BTreeMap, VecDeque};

use rustc_hash::FxHashMap;

use crate::comm::{Comm, CommId, ContextMask};
use crate::matching::{PostedQueue, UnexpectedQueue};
use crate::pool::{Pool, PoolConfig};
use crate::request::{ReqHandle, Request, RequestKind, Route, Unexpected};
use crate::transport::HandlerId;
use crate::types::{Gpid, Status};
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
}

impl CtrlPacket {
    /// A control packet carrying `header` (at most [`CTRL_HEADER_MAX`] bytes).
    pub fn new(dest: Gpid, handler: HandlerId, header: &[u8]) -> Result<CtrlPacket> {
        let mut p = CtrlPacket {
            dest,
            handler,
            header: [0; CTRL_HEADER_MAX],
            len: header.len() as u8,
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
}

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
        }
    }
}

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
    pub contexts: ContextMask,
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
    pub(crate) fn new(gpid: Gpid, world_size: u32, config: DeviceConfig) -> Result<Core> {
        use crate::rankmap::Group;
        if gpid >= world_size {
            crate::bail!(Arg, "process {gpid} outside a job of {world_size}");
        }
        let mut comms = Pool::new(PoolConfig {
            min: 16,
            chunk: 16,
            max: crate::comm::CONTEXT_SLOTS,
        })?;
        let world = CommId(comms.insert(Comm {
            context: 0,
            rank: gpid as i32,
            group: Group::world(world_size),
        })?);
        let self_group = Group::world(world_size).incl(&[gpid as i32])?;
        let self_comm = CommId(comms.insert(Comm {
            context: 2,
            rank: 0,
            group: self_group,
        })?);
        Ok(Core {
            gpid,
            world_size,
            requests: Pool::new(config.requests)?,
            posted: PostedQueue::new(),
            unexpected: UnexpectedQueue::new(),
            comms,
            contexts: ContextMask::default(),
            am: Default::default(),
            config,
            world,
            self_comm,
            spare_buffers: Vec::new(),
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
            r.partnered = false;
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
}

//! `OfiNetmod`: one tagged RDM endpoint of a rank, the contexts of its outstanding operations
//! and the posts the provider refused, as ch4's netmod ([`Netmod`], [`Bootstrap`]).

use std::collections::{HashMap, VecDeque};
use std::ptr::null_mut;

use ch4_core::bootstrap::Bootstrap;
use ch4_core::native::{OpContexts, OpIndex};
use ch4_core::transport::{AmSink, AmTransport, HandlerId, Netmod};
use ch4_core::{Error, ErrorKind, Gpid, PeerState, ReqHandle, Result};
use libfabric_sys::{
    fi_context2, fi_msg_tagged, iovec, FI_ADDR_UNSPEC, FI_COMPLETION, FI_REMOTE_CQ_DATA,
};

use crate::engine::OfiEngine;
use crate::provider::{select, Endpoint, Hints, Posted, Region, MIN_MAX_MSG_SIZE};
use crate::tag;

/// What the engine keeps with one outstanding operation.
pub(crate) struct Op {
    /// The request it serves ([`ReqHandle::DONE`] for a probe's peek).
    pub req: ReqHandle,
    pub kind: OpKind,
    /// A contiguous stand-in for a buffer with a layout that has more pieces than the
    /// provider's iovec limit: a send's packed copy, or a receive's landing place, unpacked at
    /// completion.
    pub bounce: Option<Vec<u8>>,
    /// The pieces of a buffer with a layout, as the provider's gather (send) or scatter
    /// (receive) list, when there are few enough: the data moves in place, no copy. Kept here
    /// until the completion, since the call may not be the provider's last look at it.
    pub pieces: Option<Box<[iovec]>>,
}

/// What an operation is.
pub(crate) enum OpKind {
    /// A tagged send from the request's buffer.
    Send,
    /// A synchronous send's acknowledgement receive (no data).
    AckRecv,
    /// A tagged receive into the request's buffer.
    Recv,
    /// A probe's peek (`FI_PEEK`, with `claim`: `| FI_CLAIM`); the answer once it completed.
    Peek { claim: bool, found: Option<Peeked> },
    /// A message claimed by a matched probe, waiting for its receive or its discard.
    Claimed(Peeked),
    /// A claimed message being discarded (`FI_CLAIM | FI_DISCARD`).
    Discarding,
    /// A large message's acknowledgement receive (see [`crate::large`]): its end closes the
    /// region the receiver read the message from, then completes the send.
    LargeAck(Option<Region>),
    /// A receive of a large message's [`Descriptor`] (into the operation's bounce buffer), for
    /// the large receive in slot `parent`, or, for a probe, to be kept in
    /// [`OfiNetmod::descriptors`].
    Control { parent: Option<OpIndex> },
    /// A receive whose stub matched a large message: no provider operation, the engine's own
    /// record while it fetches the descriptor and reads the data.
    LargeRecv(LargeRecv),
    /// One read of a large receive's data, for the large receive in slot `parent`.
    ReadChunk { parent: OpIndex },
    /// A receive for eager credit given back by any process (see [`crate::credit`]).
    CreditRecv,
}

/// A large message as its sender describes it: its length and the region to read it from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Descriptor {
    pub len: u64,
    pub addr: u64,
    pub key: u64,
}

impl Descriptor {
    /// Bytes on the wire: three little-endian words.
    pub const SIZE: usize = 24;

    pub fn to_bytes(self) -> Vec<u8> {
        [self.len, self.addr, self.key]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect()
    }

    /// `None` unless `b` is exactly a descriptor.
    pub fn from_bytes(b: &[u8]) -> Option<Descriptor> {
        let w = |i: usize| {
            Some(u64::from_le_bytes(
                b.get(i * 8..i * 8 + 8)?.try_into().ok()?,
            ))
        };
        (b.len() == Self::SIZE).then_some(())?;
        Some(Descriptor {
            len: w(0)?,
            addr: w(1)?,
            key: w(2)?,
        })
    }
}

/// The engine's record of a receive reading a large message.
pub(crate) struct LargeRecv {
    /// The stub's match bits and remote CQ data (source, tag, sender, acknowledgement name).
    pub bits: u64,
    pub data: u64,
    /// Where the data lands: the receive's buffer, or the record's bounce buffer.
    pub dst: *mut u8,
    /// Bytes to read: the message's length, or the buffer's when it is shorter.
    pub len: usize,
    /// The descriptor once it is in.
    pub desc: Option<Descriptor>,
    /// Bytes whose reads have been posted, and reads outstanding.
    pub next: usize,
    pub out: u32,
    /// Whether the message was longer than the buffer.
    pub truncated: bool,
    /// The first failure of a read: the receive fails once the others are in.
    pub error: Option<ErrorKind>,
    /// When the receive, its reads all in and one failed, began to wait for the peer watch to
    /// say whether its sender died (see `large::settle_failed`).
    pub failed_at: Option<std::time::Instant>,
}

/// What a peek learned of a message (`None` inside [`OpKind::Peek`]'s `found`: no message).
#[derive(Clone, Copy)]
pub(crate) struct Peeked {
    pub bits: u64,
    pub len: usize,
    pub data: u64,
}

/// A send the provider refused for now ("try again"), kept in order.
pub(crate) struct QueuedSend {
    pub dest: Gpid,
    pub tag: u64,
    pub data: u64,
    pub payload: Payload,
}

/// The bytes of a queued send.
pub(crate) enum Payload {
    /// A copy (a small message, whose buffer the program got back at once; an acknowledgement).
    Copy(Vec<u8>),
    /// The request's own buffer, sent with operation `op`'s context.
    Raw {
        ptr: *const u8,
        len: usize,
        op: OpIndex,
    },
    /// The pieces of the request's buffer that operation `op` keeps ([`Op::pieces`]), sent as
    /// one message from where they lie.
    Gather { op: OpIndex },
}

impl Payload {
    /// The operation a queued send belongs to (none for a copy: it has no request).
    pub(crate) fn op(&self) -> Option<OpIndex> {
        match self {
            Payload::Copy(_) => None,
            Payload::Raw { op, .. } | Payload::Gather { op } => Some(*op),
        }
    }
}

/// A receive the provider refused for now, kept in order (receives match in posting order).
pub(crate) struct QueuedRecv {
    pub op: OpIndex,
    pub dst: *mut u8,
    pub cap: usize,
    pub bits: u64,
    pub ignore: u64,
    /// The address it accepts messages from ([`OfiNetmod::source_address`]), or
    /// `FI_ADDR_UNSPEC` for any.
    pub src: u64,
    /// A receive of the program's point-to-point traffic, posted within
    /// [`OfiNetmod::program_cap`]; else one of the library's own (a collective's, an
    /// acknowledgement's, returned credit, a large message's parts), posted within the rest.
    pub program: bool,
}

/// The provider's receive slots kept from the program's point-to-point receives for the
/// library's own: libfabric's rxm holds `rx_size` (2,048) posted receives and refuses more; a
/// program that posts thousands must not leave none for the collectives, acknowledgements and
/// credit its peers' progress depends on. An eighth of the provider's slots, 16 to 256.
fn reserved_receive_slots(rx_size: usize) -> usize {
    (rx_size / 8).clamp(16, 256)
}

/// The libfabric netmod of one rank.
pub struct OfiNetmod {
    /// First, so that it is closed (ending every operation) before the contexts it may still
    /// write are freed. `None` for a job on one node (nothing goes through the network), and
    /// after the endpoint was closed because an operation would not end.
    pub(crate) ep: Option<Endpoint>,
    pub(crate) ops: OpContexts<fi_context2, Op>,
    pub(crate) sends: VecDeque<QueuedSend>,
    /// The program's point-to-point receives waiting for a slot, in posting order.
    pub(crate) recvs: VecDeque<QueuedRecv>,
    /// The library's own receives the provider refused for now, in posting order. The two
    /// queues never hold receives that one message could match (other contexts, other tag
    /// spaces), so neither waits for the other.
    pub(crate) own_recvs: VecDeque<QueuedRecv>,
    /// The program's receives in the provider now, and which operations they are.
    program_posted: usize,
    program_ops: Vec<bool>,
    /// At most this many of the program's receives are in the provider at once (see
    /// [`reserved_receive_slots`]).
    program_cap: usize,
    pub(crate) me: Gpid,
    size: u32,
    /// Messages up to this size are injected (copied by the provider, no completion).
    pub(crate) inject: usize,
    /// The longest message handed to the provider in one operation: its `max_msg_size`, or
    /// less where [`Hints::max_msg_size`] says so. Longer ones go by RMA read.
    pub(crate) max_msg: usize,
    /// Messages longer than this go by RMA read ([`crate::large`]) even when the provider
    /// would take them whole: over rxm, its eager limit (see [`read_above`]); elsewhere
    /// `max_msg`.
    pub(crate) read_above: usize,
    /// What the provider holds for one unexpected message, the eager credit's price of a
    /// message (`crate::credit`): rxm's buffer size over `ofi_rxm`, else
    /// [`MESSAGE_CHARGE`](crate::credit::MESSAGE_CHARGE).
    pub(crate) message_price: usize,
    /// Nonblocking sends that went without their receiver's eager credit.
    pub(crate) uncredited_sends: u64,
    /// The longest message sent by RMA read whose stub carries its descriptor
    /// ([`tag::INLINE`]); longer ones send it separately.
    pub(crate) inline_max: usize,
    /// Large messages' descriptors received for a probe and not yet used by a receive, by
    /// sender and acknowledgement name.
    pub(crate) descriptors: HashMap<(Gpid, u32), Descriptor>,
    /// Large receives with reads still to post (the provider refused one for now).
    pub(crate) reading: Vec<OpIndex>,
    /// Large receives whose read failed, waiting for the peer watch (`large::settle_failed`).
    pub(crate) suspects: Vec<OpIndex>,
    /// Spare landing buffers of a stub's size for receives shorter than a stub (the engine's
    /// `landing`), kept so that small receives do not allocate one each.
    pub(crate) stub_rooms: Vec<Vec<u8>>,
    /// Receives for returned eager credit among `ops` (always posted while the endpoint is
    /// open; not counted as outstanding).
    pub(crate) credit_receives: usize,
    /// Credit messages the provider refused for now, by receiver and number of messages (see
    /// [`crate::credit`]): retried from progress, never counted as queued output.
    pub(crate) credit_out: Vec<(Gpid, u32)>,
    /// Whether receives name the address they accept (`FI_DIRECTED_RECV`, granted by the
    /// provider): see [`OfiNetmod::source_address`].
    directed: bool,
    /// Why the endpoint was closed, once it was.
    closed: Option<&'static str>,
    /// Where this rank learns that a peer failed or left (see [`OfiNetmod::watch_peers`]).
    watch: Option<PeerWatch>,
}

pub use ch4_core::bootstrap::PeerWatch;

/// Spare landing buffers of a stub's size a netmod keeps ([`OfiNetmod::keep_stub_room`]):
/// enough for a window of short receives.
const STUB_ROOMS_KEPT: usize = 64;

// SAFETY: the endpoint is `Send` (see `Endpoint`); the other raw pointers (operation contexts,
// queued buffers) point into this netmod's own table or into buffers lent to requests of the one
// device that owns this netmod, and are used only inside that device's calls, which take it by
// `&mut`: whichever thread has the device has the netmod.
unsafe impl Send for OfiNetmod {}

impl OfiNetmod {
    /// The endpoint, or the error of a netmod that has none.
    #[inline(always)]
    pub(crate) fn ep(&self) -> Result<&Endpoint> {
        match &self.ep {
            Some(ep) => Ok(ep),
            None => Err(self.no_endpoint()),
        }
    }

    #[cold]
    fn no_endpoint(&self) -> Error {
        Error::new(
            ErrorKind::Transport,
            match self.closed {
                Some(why) => format!("the OFI endpoint was closed: {why}"),
                None => "the OFI netmod was not opened: this job was started on one node".into(),
            },
        )
    }

    /// The address a receive of a message from process `from` (`None`: any process) is posted
    /// for. The provider then matches it only with messages that came from that process's
    /// address-vector entry: a process outside the job, which the address vector does not
    /// hold, cannot complete it by writing a rank's match bits and CQ data, nor can one rank
    /// pass for another. Without `FI_DIRECTED_RECV` every receive takes any address, and
    /// only the match bits say who sent.
    #[inline(always)]
    pub(crate) fn source_address(&self, from: Option<Gpid>) -> u64 {
        match from {
            Some(g) if self.directed => u64::from(g),
            _ => FI_ADDR_UNSPEC,
        }
    }

    /// The provider this netmod runs over, if it is open.
    pub fn provider(&self) -> Option<&str> {
        self.ep.as_ref().map(|e| e.info().provider())
    }

    /// Makes `watch` this netmod's view of which peers are gone (ranks as threads pass the
    /// job's record, so a receive from a rank that failed fails instead of waiting).
    pub fn watch_peers(&mut self, watch: PeerWatch) {
        self.watch = Some(watch);
    }

    /// Operations the provider has not reported complete yet (beyond the receives kept
    /// posted for returned credit).
    pub fn outstanding(&self) -> usize {
        self.ops.len() - self.credit_receives
    }

    /// How many nonblocking sends went without their receiver's eager credit and whole, as
    /// synchronous sends (each completes only once its receiver has matched it; longer ones
    /// go by RMA read and are not counted here): see `crate::credit`.
    pub fn sends_without_credit(&self) -> u64 {
        self.uncredited_sends
    }

    /// Buffers lent to peers' RMA reads (large messages sent and not yet acknowledged).
    pub fn regions(&self) -> usize {
        self.ep.as_ref().map_or(0, Endpoint::regions)
    }

    /// The longest message handed to the provider in one operation; longer ones go by RMA
    /// read.
    pub fn max_message(&self) -> usize {
        self.max_msg
    }

    /// Keeps a finished receive's bounce buffer for the next short receive if it is a stub's
    /// size, up to [`STUB_ROOMS_KEPT`] of them.
    #[inline]
    pub(crate) fn keep_stub_room(&mut self, bounce: Option<Vec<u8>>) {
        if let Some(b) = bounce {
            if b.len() == tag::INLINE_STUB_BYTES && self.stub_rooms.len() < STUB_ROOMS_KEPT {
                self.stub_rooms.push(b);
            }
        }
    }

    /// The longest message sent whole through the provider; longer ones go by this netmod's
    /// RMA read (the protocol of the crate's `large` module).
    pub fn read_above(&self) -> usize {
        self.read_above
    }

    /// Closes the endpoint, which ends every operation on it: nothing is written into a
    /// posted buffer afterwards: the last resort when the provider is wedged.
    pub(crate) fn close(&mut self, why: &'static str) {
        self.ep = None;
        self.closed = Some(why);
        self.sends.clear();
        self.recvs.clear();
        self.own_recvs.clear();
        self.program_posted = 0;
        self.program_ops.clear();
        self.ops = OpContexts::new();
        self.descriptors.clear();
        self.reading.clear();
        self.credit_receives = 0;
        self.credit_out.clear();
    }

    /// Posts (or, behind earlier refused ones, queues) a send; errors other than "try again"
    /// are returned.
    pub(crate) fn send_in_order(&mut self, q: QueuedSend) -> Result<()> {
        if self.sends.is_empty() && self.post_send(&q)? {
            return Ok(());
        }
        self.sends.push_back(q);
        Ok(())
    }

    /// Posts (or queues) a receive: a program's behind the program's refused ones and within
    /// its share of the provider's slots, one of the library's behind the library's.
    pub(crate) fn recv_in_order(&mut self, q: QueuedRecv) -> Result<()> {
        if q.program {
            if self.recvs.is_empty()
                && self.program_posted < self.program_cap
                && self.post_recv(&q)?
            {
                self.count_program(q.op);
                return Ok(());
            }
            self.recvs.push_back(q);
        } else {
            if self.own_recvs.is_empty() && self.post_recv(&q)? {
                return Ok(());
            }
            self.own_recvs.push_back(q);
        }
        Ok(())
    }

    fn count_program(&mut self, op: OpIndex) {
        let i = op as usize;
        if self.program_ops.len() <= i {
            self.program_ops.resize(i + 1, false);
        }
        self.program_ops[i] = true;
        self.program_posted += 1;
    }

    /// Operation `op` left the provider (its completion was read): a program receive's slot
    /// is free again.
    #[inline]
    pub(crate) fn left_provider(&mut self, op: OpIndex) {
        if let Some(counted) = self.program_ops.get_mut(op as usize) {
            if *counted {
                *counted = false;
                self.program_posted -= 1;
            }
        }
    }

    /// Takes receive `op` out of the queues if the provider never had it; whether it did.
    pub(crate) fn unqueue_recv(&mut self, op: OpIndex) -> bool {
        let queued = self.recvs.len() + self.own_recvs.len();
        self.recvs.retain(|q| q.op != op);
        self.own_recvs.retain(|q| q.op != op);
        self.recvs.len() + self.own_recvs.len() < queued
    }

    /// One attempt to post `q`: `Ok(false)` when the provider said "try again".
    fn post_send(&self, q: &QueuedSend) -> Result<bool> {
        let ep = self.ep()?;
        let posted = match &q.payload {
            Payload::Copy(v) if v.len() <= self.inject => {
                ep.tinjectdata(v, q.data, u64::from(q.dest), q.tag)?
            }
            Payload::Copy(_) => {
                return Err(Error::new(
                    ErrorKind::Internal,
                    "a queued copy longer than the inject size",
                ))
            }
            Payload::Gather { op } => {
                let ctx = self.ops.context_ptr(*op).ok_or_else(vanished)?;
                let iov = self
                    .ops
                    .get(*op)
                    .and_then(|o| o.pieces.as_deref())
                    .ok_or_else(vanished)?;
                let msg = fi_msg_tagged {
                    msg_iov: iov.as_ptr(),
                    desc: null_mut(),
                    iov_count: iov.len(),
                    addr: u64::from(q.dest),
                    tag: q.tag,
                    ignore: 0,
                    context: ctx.cast(),
                    data: q.data,
                };
                // SAFETY: the pieces are the request's buffer, which the device keeps until
                // this operation's completion is read (`P2p::quiesce`); the iovec array lives
                // in the operation as long; `ctx` is the operation's fixed slot.
                unsafe { ep.tsendmsg(&msg, FI_REMOTE_CQ_DATA | FI_COMPLETION)? }
            }
            Payload::Raw { ptr, len, op } => {
                let ctx = self.ops.context_ptr(*op).ok_or_else(vanished)?;
                // SAFETY: `ptr`/`len` are the request's buffer (its raw parts, or the bounce
                // copy its operation owns), which the device keeps until this operation's
                // completion is read (`P2p::quiesce`); `ctx` is the operation's slot, fixed
                // until then.
                unsafe {
                    ep.tsenddata(
                        *ptr,
                        *len,
                        null_mut(),
                        q.data,
                        u64::from(q.dest),
                        q.tag,
                        ctx,
                    )?
                }
            }
        };
        Ok(posted == Posted::Done)
    }

    fn post_recv(&self, q: &QueuedRecv) -> Result<bool> {
        let ep = self.ep()?;
        let ctx = self.ops.context_ptr(q.op).ok_or_else(vanished)?;
        if let Some(iov) = self.ops.get(q.op).and_then(|o| o.pieces.as_deref()) {
            let msg = fi_msg_tagged {
                msg_iov: iov.as_ptr(),
                desc: null_mut(),
                iov_count: iov.len(),
                addr: q.src,
                tag: q.bits,
                ignore: q.ignore,
                context: ctx.cast(),
                data: 0,
            };
            // SAFETY: the pieces are the receive's buffer, kept by the device until the
            // completion is read (`P2p::quiesce`), the iovec array by the operation as long;
            // `ctx` is the operation's fixed slot.
            let posted = unsafe { ep.trecvmsg(&msg, FI_COMPLETION)? };
            return Ok(posted == Posted::Done);
        }
        // SAFETY: `dst`/`cap` are the receive's buffer (raw parts, or its operation's bounce
        // buffer), kept by the device until the completion is read (`P2p::quiesce`); `ctx` is
        // the operation's fixed slot.
        let posted = unsafe { ep.trecv(q.dst, q.cap, q.src, q.bits, q.ignore, ctx)? };
        Ok(posted == Posted::Done)
    }

    /// Retries refused posts in order, until the provider refuses again.
    pub(crate) fn retry_queued(&mut self) -> Result<usize> {
        let mut n = 0;
        while let Some(q) = self.sends.front() {
            if !self.post_send(q)? {
                break;
            }
            self.sends.pop_front();
            n += 1;
        }
        while let Some(q) = self.own_recvs.front() {
            if !self.post_recv(q)? {
                break;
            }
            self.own_recvs.pop_front();
            n += 1;
        }
        while let Some(q) = self.recvs.front() {
            if self.program_posted >= self.program_cap || !self.post_recv(q)? {
                break;
            }
            let op = q.op;
            self.recvs.pop_front();
            self.count_program(op);
            n += 1;
        }
        Ok(n)
    }
}

#[cold]
pub(crate) fn vanished() -> Error {
    Error::new(ErrorKind::Internal, "an OFI operation's slot vanished")
}

/// The OFI netmod carries no active messages: every MPI operation maps to tagged messages
/// (synchronous acknowledgements in a tag space of their own), and cancelling a send is refused
/// as NICs refuse it (MPI allows it). The calls exist because every netmod is an
/// `AmTransport`; only the engine's own progress ever polls this netmod.
impl AmTransport for OfiNetmod {
    const AM_ORDERED: bool = true;
    const NAME: &'static str = "ofi";

    fn eager_limit(&self) -> usize {
        self.inject
    }

    fn am_max_payload(&self) -> usize {
        0
    }

    fn am_send(&mut self, dest: Gpid, handler: HandlerId, _: &[u8], _: &[&[u8]]) -> Result<()> {
        Err(Error::new(
            ErrorKind::Internal,
            format!(
                "active message {handler} to {dest}: the OFI netmod carries only tagged messages"
            ),
        ))
    }

    fn am_poll<K: AmSink>(&mut self, _sink: &mut K, _budget: usize) -> Result<usize> {
        Ok(0)
    }

    fn settings(&self) -> Vec<(&'static str, String)> {
        let rxm = |name: &str| std::env::var(name).unwrap_or_else(|_| "unset".to_string());
        let provider = match &self.ep {
            Some(ep) => {
                let (major, minor) = crate::provider::linked_version();
                format!(
                    "{} (libfabric {major}.{minor}, inject {} B, read by RMA above {} B)",
                    ep.info().provider(),
                    ep.info().inject_size(),
                    self.read_above
                )
            }
            None => "(not opened: one node)".to_string(),
        };
        vec![
            ("FI_PROVIDER", provider),
            ("CH4_OFI_MAX_MSG_SIZE", self.max_msg.to_string()),
            (
                "FI_OFI_RXM_ENABLE_DYN_RBUF",
                rxm("FI_OFI_RXM_ENABLE_DYN_RBUF"),
            ),
            ("FI_OFI_RXM_SAR_LIMIT", rxm("FI_OFI_RXM_SAR_LIMIT")),
            ("FI_OFI_RXM_BUFFER_SIZE", rxm("FI_OFI_RXM_BUFFER_SIZE")),
        ]
    }

    fn has_queued_output(&self) -> bool {
        !self.sends.is_empty() || !self.recvs.is_empty() || !self.own_recvs.is_empty()
    }

    fn peer_state(&self, gpid: Gpid) -> PeerState {
        match &self.watch {
            Some(w) => w(gpid),
            None => PeerState::Alive,
        }
    }
}

impl Netmod for OfiNetmod {
    type P2p = OfiEngine;
}

impl Bootstrap for OfiNetmod {
    /// Selects the provider (`FI_PROVIDER`, else the first that offers tagged RDM messaging in
    /// order) and opens its endpoint — only when the job spans nodes. The provider must carry
    /// 64 match bits and 8 bytes of remote CQ data (see [`crate::tag`]).
    fn open(rank: Gpid, size: u32, _job_key: u64, spans_nodes: bool) -> Result<Self> {
        OfiNetmod::open_with(&Hints::from_env()?, rank, size, spans_nodes)
    }

    fn business_card(&self) -> Result<Vec<u8>> {
        self.ep()?.name()
    }

    /// The provider cannot tell a dead peer from a slow one (rxm retries its address for
    /// ever), so this netmod's peers are only ever as alive as `watch` says.
    fn watch_peers(&mut self, watch: PeerWatch) {
        OfiNetmod::watch_peers(self, watch);
    }

    fn learn_cards(&mut self, cards: &[Vec<u8>]) -> Result<()> {
        if cards.len() != self.size as usize {
            return Err(Error::new(
                ErrorKind::Internal,
                format!("{} business cards for a job of {}", cards.len(), self.size),
            ));
        }
        let ep = self.ep.as_mut().ok_or_else(|| {
            Error::new(
                ErrorKind::Transport,
                "the OFI netmod has no endpoint to introduce",
            )
        })?;
        for (rank, card) in cards.iter().enumerate() {
            if !ep.is_name(card)? {
                return Err(Error::new(
                    ErrorKind::Transport,
                    format!(
                        "rank {rank} published a card that is no {} address ({} bytes)",
                        ep.info().provider(),
                        card.len()
                    ),
                ));
            }
        }
        let names: Vec<u8> = cards.concat();
        // In process order, all at once: a process's address is its number.
        ep.insert_addresses(&names, cards.len())?;
        for _ in 0..crate::credit::CREDIT_RECEIVES {
            crate::credit::post_receive(self)?;
        }
        Ok(())
    }
}

impl OfiNetmod {
    /// [`Bootstrap::open`] with the provider chosen by `hints` instead of the environment
    /// (libfabric reads `FI_PROVIDER` once per process, so a program that wants two providers
    /// names them here).
    pub fn open_with(hints: &Hints, rank: Gpid, size: u32, spans_nodes: bool) -> Result<Self> {
        if u64::from(size) > tag::MAX_PROCESSES {
            return Err(Error::new(
                ErrorKind::Arg,
                format!(
                    "a job of {size} processes: the OFI netmod's match bits carry at most {}",
                    tag::MAX_PROCESSES
                ),
            ));
        }
        if hints.max_msg_size.is_some_and(|m| m < MIN_MAX_MSG_SIZE) {
            return Err(Error::new(
                ErrorKind::Arg,
                format!(
                    "a largest message below {MIN_MAX_MSG_SIZE} bytes cannot carry the protocols"
                ),
            ));
        }
        let mut net = OfiNetmod {
            ep: None,
            ops: OpContexts::new(),
            sends: VecDeque::new(),
            recvs: VecDeque::new(),
            own_recvs: VecDeque::new(),
            program_posted: 0,
            program_ops: Vec::new(),
            program_cap: usize::MAX,
            me: rank,
            size,
            inject: 0,
            max_msg: usize::MAX,
            read_above: usize::MAX,
            message_price: crate::credit::MESSAGE_CHARGE,
            uncredited_sends: 0,
            inline_max: if hints.separate_descriptors {
                0
            } else {
                tag::INLINE_MAX_LEN
            },
            descriptors: HashMap::new(),
            reading: Vec::new(),
            suspects: Vec::new(),
            stub_rooms: Vec::new(),
            credit_receives: 0,
            credit_out: Vec::new(),
            directed: false,
            closed: None,
            watch: None,
        };
        if !spans_nodes {
            return Ok(net);
        }
        let info = select(hints)?;
        if info.provider() == "shm" && info.provider_version() < (118, 0) {
            // Seen on 1.17: an unexpected message does not match a receive with wildcards
            // (an ignore mask), and FI_PEEK is ignored — MPI's matching cannot be built on it.
            return Err(Error::new(
                ErrorKind::Transport,
                format!(
                    "libfabric's shm provider {}.{} cannot carry MPI matching (unexpected \
                     messages never match wildcard receives, probes are ignored); ch4's own \
                     shared-memory layer carries on-node traffic: choose a network provider \
                     (FI_PROVIDER=tcp)",
                    info.provider_version().0 / 100,
                    info.provider_version().0 % 100
                ),
            ));
        }
        let mut missing = Vec::new();
        if info.tag_bits() < 64 {
            missing.push(format!("64 tag bits (it has {})", info.tag_bits()));
        }
        if info.cq_data_size() < 8 {
            missing.push(format!(
                "8 bytes of remote CQ data (it has {})",
                info.cq_data_size()
            ));
        }
        if !missing.is_empty() {
            return Err(Error::new(
                ErrorKind::Transport,
                format!(
                    "libfabric provider {} lacks what the OFI netmod needs: {}",
                    info.provider(),
                    missing.join(", ")
                ),
            ));
        }
        if info.rx_size() > 0 {
            net.program_cap =
                info.rx_size() - reserved_receive_slots(info.rx_size()).min(info.rx_size() / 2);
        }
        net.inject = info.inject_size();
        net.max_msg = match hints.max_msg_size {
            Some(m) => m.min(info.max_msg_size()),
            None => info.max_msg_size(),
        };
        net.directed = info.directed_recv();
        net.ep = Some(Endpoint::open(info, size as usize)?);
        net.read_above = read_above(&net);
        if net
            .ep
            .as_ref()
            .is_some_and(|ep| ep.info().provider().contains("ofi_rxm"))
        {
            net.message_price = crate::provider::rxm_eager_limit();
        }
        Ok(net)
    }
}

/// Where this netmod's own RMA-read protocol takes over from the provider's: above rxm's eager
/// limit over `ofi_rxm` (when the protocol is usable), above the largest message elsewhere.
///
/// rxm's own protocols for longer messages (segmentation and rendezvous) keep a pointer to the
/// connection in an unexpected message, and when the peer dies rxm frees that connection
/// without removing its messages (`rxm_process_shutdown` → `rxm_close_conn`, `rxm_free_conn`,
/// in every release up to 1.22 at least): a receive that later matches the rendezvous header
/// reads through the freed connection (`rxm_handle_rndv` → `conn->msg_ep`, null) and the
/// process dies of a segmentation fault. Its eager messages are copied from a shared receive
/// buffer and never touch the connection again. So a message longer than the eager limit
/// goes by [`crate::large`]: its stub and descriptor are eager, and its read, addressed to the
/// peer's address instead of to a stored connection, fails or waits until the peer watch
/// fails the receive.
fn read_above(net: &OfiNetmod) -> usize {
    match &net.ep {
        Some(ep) if ep.info().provider().contains("ofi_rxm") && crate::large::usable(net) => {
            crate::provider::rxm_eager_limit().min(net.max_msg)
        }
        _ => net.max_msg,
    }
}

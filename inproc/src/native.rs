//! A netmod engine that matches "in the network", as libfabric's tagged API or UCX's tag API
//! do, over a simulated NIC that behaves like a real one where the core's contracts are at stake.
//!
//! The `Nic` keeps its own posted and unexpected tables and knows operations only by their
//! context pointers, which the engine keeps in [`OpContexts`] (fixed addresses while the request
//! pool grows). Like a real NIC it is asynchronous:
//!
//! - every completion (a receive's, a send's, a cancel's) is reported through a completion queue
//!   one to [`MAX_DELAY`] polls after the event, in an order of its own;
//! - a matched receive's data is written into the receive buffer through a raw pointer when its
//!   completion is reported, and a large send's data is read from the user's buffer when the NIC
//!   transmits it, later — so a buffer the core freed too early is visibly wrong;
//! - a cancel is answered through the completion queue, and fails when the receive has already
//!   matched (its data in flight);
//! - posting fails with "try again" when the transmit queue is full ([`TX_DEPTH`]); the engine
//!   keeps refused sends in order and retries them from progress;
//! - it cannot tell a ready-mode send that found no receive (no NIC can).
//!
//! Delays are drawn from a generator seeded by the rank, so every run of a test is the same.

#![allow(unsafe_code)] // the simulated NIC's DMA: raw reads and writes of posted buffers

use std::collections::VecDeque;

use ch4_core::matching::{PostedId, PostedQueue, UnexpectedQueue};
use ch4_core::native::{self, word_of, CancelStep, Holding, OpContexts, OpIndex};
use ch4_core::pool::Handle;
use ch4_core::request::{msg_flags, Message, ReqHandle, Request, RequestKind};
use ch4_core::transport::{AmSink, Caps, Cx, HandlerId, P2p, Partner, SendOp};
use ch4_core::{Envelope, Error, ErrorKind, Gpid, Result, SendMode, Status};
use rustc_hash::FxHashMap;

use crate::{Endpoint, InprocNet, Native};

/// Handler id of a tagged message (never used by the active-message protocol).
const TAGGED: HandlerId = 0xF0;
/// Handler id of a synchronous-send acknowledgement.
const TAGGED_ACK: HandlerId = 0xF1;

/// Messages up to this size are "injected": copied at once, no request, no completion.
pub const INJECT_LIMIT: usize = 64;
/// Sends the NIC accepts before it answers "try again".
pub const TX_DEPTH: usize = 8;
/// The most polls a completion waits in the NIC before it is reported.
pub const MAX_DELAY: u64 = 3;
/// Tags this NIC carries: fewer than the core's, as a real match-bit layout leaves.
pub const NIC_TAG_UB: i32 = (1 << 28) - 1;

/// The wire header of a tagged message.
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct TagHeader {
    context: u32,
    source: i32,
    tag: i32,
    flags: u32,
    sreq: u64,
}

/// An operation context, the size of libfabric's `fi_context2`: what the NIC names an
/// operation by.
#[derive(Default)]
pub struct OpContext(#[allow(dead_code)] [usize; 8]); // scratch space only: never read here

/// What the engine keeps with an outstanding operation.
struct OpEntry {
    req: ReqHandle,
    /// A contiguous stand-in for a receive buffer with a layout, unpacked at completion; or
    /// the packed copy of a send with a layout.
    bounce: Option<Vec<u8>>,
}

/// A tagged message the NIC holds before any receive asked for it (or claimed by a probe).
struct Arrived {
    src: Gpid,
    flags: u32,
    sreq: u64,
    data: Vec<u8>,
}

/// A receive posted in the NIC: where to write, and by which context to report.
struct NicRecv {
    ctx: *mut OpContext,
    dst: *mut u8,
    cap: usize,
}

/// Bytes the NIC will transmit: its own copy (inject) or the user's buffer (a send with a
/// context, read at transmit time).
enum TxData {
    Copy(Vec<u8>),
    Raw {
        ptr: *const u8,
        len: usize,
        ctx: *mut OpContext,
    },
}

struct NicSend {
    dest: Gpid,
    hdr: TagHeader,
    data: TxData,
}

/// A completion waiting for its poll.
struct Cqe {
    due: u64,
    ctx: *mut OpContext,
    event: Event,
}

enum Event {
    /// A receive matched: `data` is written to (`dst`, `cap`) when the completion is reported.
    Recv {
        env: Envelope,
        msg: Arrived,
        dst: *mut u8,
        cap: usize,
    },
    /// A send left; `Err` when its peer was gone.
    Sent(std::result::Result<(), ErrorKind>),
    /// A receive was cancelled.
    Cancelled,
}

/// The simulated network interface of one rank.
#[derive(Default)]
struct Nic {
    posted: PostedQueue<NicRecv>,
    /// Posted receives by context address, for cancel.
    posted_by_ctx: FxHashMap<usize, PostedId>,
    unexpected: UnexpectedQueue<Arrived>,
    tx: VecDeque<NicSend>,
    cq: Vec<Cqe>,
    clock: u64,
    rng: u64,
    /// Messages taken by a matched probe (FI_CLAIM), by token.
    claimed: FxHashMap<u64, Arrived>,
    next_token: u64,
    /// Closed after a quiesce failed: every operation ended, nothing is written any more.
    closed: bool,
    /// Reports no completions while set (a wedged network, for tests).
    stalled: bool,
}

impl Nic {
    fn delay(&mut self) -> u64 {
        // SplitMix64 step.
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        1 + (z ^ (z >> 31)) % MAX_DELAY
    }

    fn complete_later(&mut self, ctx: *mut OpContext, event: Event) {
        let due = self.clock + self.delay();
        self.cq.push(Cqe { due, ctx, event });
    }

    /// `fi_tsend`/`fi_tinject`: `false` for "try again" (transmit queue full).
    fn post_send(&mut self, send: NicSend) -> std::result::Result<(), NicSend> {
        if self.tx.len() >= TX_DEPTH {
            return Err(send);
        }
        self.tx.push_back(send);
        Ok(())
    }

    /// Receive `recv` took message `msg`: its data lands, and it is reported, a few polls later.
    fn matched(&mut self, recv: NicRecv, env: Envelope, msg: Arrived) {
        let NicRecv { ctx, dst, cap } = recv;
        self.complete_later(ctx, Event::Recv { env, msg, dst, cap });
    }

    /// `fi_trecv`: match against held messages, else post.
    fn post_recv(&mut self, want: Envelope, recv: NicRecv) {
        match self.unexpected.take_match(&want) {
            Some((_, env, msg)) => self.matched(recv, env, msg),
            None => {
                let key = recv.ctx as usize;
                let id = self.posted.post(want, recv);
                self.posted_by_ctx.insert(key, id);
            }
        }
    }

    /// `fi_cancel`: an unmatched receive is reported cancelled later; a matched one completes
    /// normally. Says nothing now, as the real call does not.
    fn cancel(&mut self, ctx: *mut OpContext) {
        if let Some(id) = self.posted_by_ctx.remove(&(ctx as usize)) {
            if self.posted.remove(id).is_some() {
                self.complete_later(ctx, Event::Cancelled);
            }
        }
    }

    /// A tagged message arrived from the wire.
    fn arrive(&mut self, env: Envelope, msg: Arrived) {
        match self.posted.take_match(&env) {
            Some((_, _, recv)) => {
                self.posted_by_ctx.remove(&(recv.ctx as usize));
                self.matched(recv, env, msg);
            }
            None => {
                self.unexpected.push(env, msg);
            }
        }
    }

    /// Transmits up to `budget` queued sends.
    fn transmit(&mut self, ep: &Endpoint, budget: usize) -> usize {
        let mut n = 0;
        while n < budget {
            let Some(send) = self.tx.pop_front() else {
                break;
            };
            n += 1;
            let hdr = bytemuck::bytes_of(&send.hdr);
            match send.data {
                TxData::Copy(data) => {
                    // An inject to a peer that is gone is lost, as on a real network.
                    let _ = ep.send(send.dest, TAGGED, hdr, &[&data]);
                }
                TxData::Raw { ptr, len, ctx } => {
                    // SAFETY: the engine posted this send with the pointer and length of a
                    // contiguous buffer its request holds (`SendBuf::raw_parts` or the request's
                    // bounce copy), and by the native-engine contract the request is not
                    // removed until this send's completion is read (`P2p::quiesce`), which
                    // happens after this transmit queued it.
                    let data = unsafe { std::slice::from_raw_parts(ptr, len) };
                    let r = ep
                        .send(send.dest, TAGGED, hdr, &[data])
                        .map_err(|e| e.kind());
                    self.complete_later(ctx, Event::Sent(r));
                }
            }
        }
        n
    }

    /// Reports the completions that are due, writing matched data into its buffers first.
    fn reap(&mut self) -> Vec<(*mut OpContext, Event)> {
        if self.stalled {
            return Vec::new();
        }
        self.clock += 1;
        let clock = self.clock;
        let (due, later): (Vec<Cqe>, Vec<Cqe>) = std::mem::take(&mut self.cq)
            .into_iter()
            .partition(|c| c.due <= clock);
        self.cq = later;
        due.into_iter()
            .map(|c| {
                if let Event::Recv { msg, dst, cap, .. } = &c.event {
                    let n = msg.data.len().min(*cap);
                    // SAFETY: `dst`/`cap` came from the receive's buffer when it was posted
                    // (`RecvBuf::raw_parts`, or the operation's bounce buffer, whose heap block
                    // does not move); the engine keeps the request, and with it the buffer,
                    // until it has read this completion (`P2p::quiesce`). `n <= cap`, and the
                    // source is the NIC's own copy, which cannot overlap user memory.
                    unsafe { std::ptr::copy_nonoverlapping(msg.data.as_ptr(), *dst, n) };
                }
                (c.ctx, c.event)
            })
            .collect()
    }

    /// Ends every operation without reporting it (closing the endpoint): nothing is read or
    /// written through a posted pointer afterwards.
    fn close(&mut self) {
        self.posted = PostedQueue::default();
        self.posted_by_ctx.clear();
        self.tx.retain(|s| matches!(s.data, TxData::Copy(_)));
        self.cq.clear();
        self.closed = true;
    }
}

/// The engine of the natively matching in-process netmod: the simulated NIC, the contexts of
/// its outstanding operations, and the sends it refused until there is room.
#[derive(Default)]
pub struct NativeEngine {
    nic: Nic,
    ops: OpContexts<OpContext, OpEntry>,
    /// Sends the NIC refused ("try again"), in order; later sends queue behind them.
    backlog: VecDeque<NicSend>,
}

// SAFETY: the raw pointers a `NativeEngine` holds (in its NIC and its backlog) point into buffers lent to requests of the one device
// that owns this NIC (through its netmod), and are dereferenced only inside that device's
// calls, which take it by `&mut`: whichever thread has the device has the NIC, and no two
// threads use them at once. The thread runner moves the netmod into its rank's thread before
// the device exists, when the NIC holds no pointer at all.
unsafe impl Send for NativeEngine {}

impl NativeEngine {
    /// An engine whose NIC draws its delays from a generator seeded with `seed`.
    pub fn seeded(seed: u64) -> NativeEngine {
        let mut e = NativeEngine::default();
        e.nic.rng = seed;
        e
    }

    /// Whether the NIC still has work of its own: sends to transmit or refused, completions
    /// to report (a flush drives progress until it has none).
    pub fn busy(&self) -> bool {
        !self.backlog.is_empty() || !self.nic.tx.is_empty() || !self.nic.cq.is_empty()
    }

    /// Makes the NIC stop (or resume) reporting completions, as a wedged network would: tests
    /// of the core's bounded waits use it.
    pub fn set_stalled(&mut self, stalled: bool) {
        self.nic.stalled = stalled;
    }

    /// Whether the NIC was closed because an operation would not end in time.
    pub fn is_closed(&self) -> bool {
        self.nic.closed
    }

    /// Operations the NIC has not reported complete yet.
    pub fn outstanding(&self) -> usize {
        self.ops.len()
    }
}

type Net = InprocNet<Native>;

fn vanished() -> Error {
    Error::new(
        ErrorKind::Internal,
        "an operation slot vanished as it was posted",
    )
}

fn closed_error() -> Error {
    Error::new(
        ErrorKind::Transport,
        "the in-process NIC was closed after an operation would not end",
    )
}

impl P2p<Net> for NativeEngine {
    const NATIVE_MATCHING: bool = true;
    const TAG_UB: i32 = NIC_TAG_UB;

    fn caps(_t: &Net) -> Caps {
        Caps {
            tag_ub: NIC_TAG_UB,
            detects_unmatched_ready: false,
            ..Caps::CORE
        }
    }

    fn isend<P: Partner>(cx: &mut Cx<'_, Net, P>, op: SendOp) -> Result<ReqHandle> {
        let eng = &mut cx.transport.native;
        if eng.nic.closed {
            return Err(closed_error());
        }
        let sync = op.mode == SendMode::Synchronous;
        let flags = match op.mode {
            SendMode::Standard => 0,
            SendMode::Synchronous => msg_flags::SYNC,
            SendMode::Ready => msg_flags::READY,
        };
        let mut hdr = TagHeader {
            context: op.env.context,
            source: op.env.source,
            tag: op.env.tag,
            flags,
            sreq: 0,
        };
        let total = op.buf.packed_len();
        if total <= INJECT_LIMIT && !sync {
            let data = op.buf.to_vec()?;
            post_in_order(
                eng,
                &cx.transport.ep,
                NicSend {
                    dest: op.dest,
                    hdr,
                    data: TxData::Copy(data),
                },
            );
            return Ok(ReqHandle::DONE);
        }
        // Sent from the user's buffer: a request holds it until the NIC reports the send.
        let dest = op.dest;
        let h = cx.core.requests.insert(Request::handed_to_network(
            cx.route,
            op,
            total,
            1 + u8::from(sync),
        ))?;
        if sync {
            hdr.sreq = h.to_raw();
        }
        let Some(Request {
            kind: RequestKind::Send(s),
            ..
        }) = cx.core.requests.get_mut(h)
        else {
            return Err(Error::new(ErrorKind::Internal, "send request vanished"));
        };
        let bounce = match s.buf.raw_parts() {
            Some(_) => None,
            None => Some(s.buf.to_vec()?),
        };
        let i = eng.ops.insert(OpEntry { req: h, bounce });
        s.engine = word_of(i);
        let (ptr, len) = match (
            &eng.ops.get(i).and_then(|e| e.bounce.as_ref()),
            s.buf.raw_parts(),
        ) {
            (Some(b), _) => (b.as_ptr(), b.len()),
            (None, Some(p)) => p,
            (None, None) => return Err(vanished()),
        };
        let ctx = eng.ops.context_ptr(i).ok_or_else(vanished)?;
        post_in_order(
            eng,
            &cx.transport.ep,
            NicSend {
                dest,
                hdr,
                data: TxData::Raw { ptr, len, ctx },
            },
        );
        Ok(h)
    }

    fn irecv<P: Partner>(
        cx: &mut Cx<'_, Net, P>,
        req: ReqHandle,
        want: &Envelope,
        // The simulated NIC carries only the job's own ranks.
        _from: Option<Gpid>,
    ) -> Result<()> {
        let eng = &mut cx.transport.native;
        if eng.nic.closed {
            return Err(closed_error());
        }
        let Some(r) = cx.core.requests.get_mut(req).and_then(Request::recv_mut) else {
            return Err(Error::new(
                ErrorKind::Internal,
                "native irecv on a non-receive",
            ));
        };
        let recv = recv_op(&mut eng.ops, req, r)?;
        eng.nic.post_recv(*want, recv);
        Ok(())
    }

    fn cancel_recv<P: Partner>(cx: &mut Cx<'_, Net, P>, req: ReqHandle) -> Result<bool> {
        let op = match native::begin_cancel(cx.core, req) {
            CancelStep::Answered(cancelled) => return Ok(cancelled),
            CancelStep::Ask(op) => op,
        };
        let eng = &mut cx.transport.native;
        let Some((i, ctx)) = op.and_then(|i| Some((i, eng.ops.context_ptr(i)?))) else {
            // No operation in the NIC (it was closed, which ended them all): cancelled.
            if let Some(r) = cx.core.requests.get_mut(req).and_then(Request::recv_mut) {
                native::released(r);
            }
            return Ok(true);
        };
        eng.nic.cancel(ctx);
        // The answer comes through the completion queue: drive this engine alone until the
        // operation is reported, cancelled or matched.
        drive_until_released(cx, i, req)?;
        Ok(native::cancel_answer(cx.core, req))
    }

    fn cancel_send<P: Partner>(_cx: &mut Cx<'_, Net, P>, _req: ReqHandle) -> Result<()> {
        // Like most NICs, this one cannot take back a tagged send: the cancel fails, which MPI
        // allows; the request completes normally.
        Ok(())
    }

    fn iprobe<P: Partner>(
        cx: &mut Cx<'_, Net, P>,
        want: &Envelope,
        _from: Option<Gpid>,
    ) -> Result<Option<Status>> {
        Ok(cx
            .transport
            .native
            .nic
            .unexpected
            .find(want)
            .map(|(_, env, m)| Status::ok(env.source, env.tag, m.data.len())))
    }

    fn improbe<P: Partner>(
        cx: &mut Cx<'_, Net, P>,
        want: &Envelope,
        _from: Option<Gpid>,
    ) -> Result<Option<(Message, Status)>> {
        let nic = &mut cx.transport.native.nic;
        Ok(nic.unexpected.take_match(want).map(|(_, env, m)| {
            let st = Status::ok(env.source, env.tag, m.data.len());
            nic.next_token += 1;
            let token = nic.next_token;
            let src = m.src;
            nic.claimed.insert(token, m);
            (Message::Native { env, src, token }, st)
        }))
    }

    fn imrecv<P: Partner>(cx: &mut Cx<'_, Net, P>, msg: Message, req: ReqHandle) -> Result<()> {
        let Message::Native { env, token, .. } = msg else {
            return Err(Error::new(
                ErrorKind::Internal,
                "non-native message to native engine",
            ));
        };
        let eng = &mut cx.transport.native;
        let Some(m) = eng.nic.claimed.remove(&token) else {
            return Err(Error::new(
                ErrorKind::Request,
                "matched-probe message already received",
            ));
        };
        let Some(r) = cx.core.requests.get_mut(req).and_then(Request::recv_mut) else {
            return Err(Error::new(ErrorKind::Internal, "imrecv on a non-receive"));
        };
        // FI_CLAIM: the claimed message is delivered to this receive, later.
        let recv = recv_op(&mut eng.ops, req, r)?;
        eng.nic.matched(recv, env, m);
        Ok(())
    }

    fn discard<P: Partner>(cx: &mut Cx<'_, Net, P>, msg: Message) -> Result<()> {
        let Message::Native { token, .. } = msg else {
            return Ok(());
        };
        // FI_CLAIM | FI_DISCARD: the message is dropped; a synchronous sender learns that it
        // matched.
        match cx.transport.native.nic.claimed.remove(&token) {
            Some(m) if m.flags & msg_flags::SYNC != 0 => {
                cx.transport
                    .ep
                    .send(m.src, TAGGED_ACK, &m.sreq.to_le_bytes(), &[])
            }
            _ => Ok(()),
        }
    }

    fn quiesce<P: Partner>(cx: &mut Cx<'_, Net, P>, req: ReqHandle) -> Result<()> {
        let i = match native::holding(cx.core, req) {
            // Whatever the cancel's answer, the operation has ended once it comes.
            Holding::PostedReceive => return Self::cancel_recv(cx, req).map(drop),
            Holding::Op(Some(i)) => i,
            Holding::Op(None) => return Ok(()),
        };
        // A send the NIC refused is still in the backlog: take it back.
        let eng = &mut cx.transport.native;
        let Some(ctx) = eng.ops.context_ptr(i) else {
            return Ok(()); // already reported, or ended by closing the NIC
        };
        let queued = eng.backlog.len();
        eng.backlog
            .retain(|s| !matches!(s.data, TxData::Raw { ctx: c, .. } if c == ctx));
        if eng.backlog.len() < queued {
            eng.ops.remove(i);
            if let Some(s) = cx.core.requests.get_mut(req).and_then(Request::send_mut) {
                s.engine = 0;
            }
            return Ok(());
        }
        drive_until_released(cx, i, req)
    }

    fn progress<P: Partner>(cx: &mut Cx<'_, Net, P>) -> Result<usize> {
        progress_own(cx)
    }
}

/// Takes an operation slot for receive `req` and says where the NIC is to write: the user's
/// buffer through its raw parts, or a bounce buffer the slot owns when the buffer has a layout
/// (unpacked at completion).
fn recv_op(
    ops: &mut OpContexts<OpContext, OpEntry>,
    req: ReqHandle,
    r: &mut ch4_core::RecvState,
) -> Result<NicRecv> {
    let bounce = match r.buf.raw_parts() {
        Some(_) => None,
        None => Some(vec![0u8; r.buf.capacity()]),
    };
    let i = ops.insert(OpEntry { req, bounce });
    r.engine = word_of(i);
    let (dst, cap) = match ops.get_mut(i).and_then(|e| e.bounce.as_mut()) {
        Some(b) => (b.as_mut_ptr(), b.len()),
        None => r.buf.raw_parts().unwrap_or((std::ptr::null_mut(), 0)),
    };
    let ctx = ops.context_ptr(i).ok_or_else(vanished)?;
    Ok(NicRecv { ctx, dst, cap })
}

/// Hands `send` to the NIC behind any send it refused earlier (non-overtaking), keeping it in
/// the backlog when the NIC says "try again". A small message the NIC can send at once (nothing
/// queued before it) leaves at once, as an eager send does on a real provider; a large one
/// waits for the sender's progress (the provider's rendezvous), so the transmit queue can fill.
fn post_in_order(eng: &mut NativeEngine, ep: &Endpoint, send: NicSend) {
    if !eng.backlog.is_empty() {
        eng.backlog.push_back(send);
        return;
    }
    let eager = matches!(send.data, TxData::Copy(_));
    match eng.nic.post_send(send) {
        Ok(()) if eager && eng.nic.tx.len() == 1 => {
            eng.nic.transmit(ep, 1);
        }
        Ok(()) => {}
        Err(send) => eng.backlog.push_back(send),
    }
}

/// One progress step of this engine alone: retry refused sends, transmit, take arrivals, read
/// the completions that are due.
fn progress_own<P: Partner>(cx: &mut Cx<'_, Net, P>) -> Result<usize> {
    let budget = cx.core.config.poll_budget;
    let t = &mut *cx.transport;
    let eng = &mut t.native;
    let mut n = 0;
    while let Some(send) = eng.backlog.pop_front() {
        if let Err(send) = eng.nic.post_send(send) {
            eng.backlog.push_front(send);
            break;
        }
        n += 1;
    }
    n += eng.nic.transmit(&t.ep, budget);
    // Completions first, arrivals after: a receive matched by this call's arrivals completes
    // at the next call at the earliest, so its data is visibly "in flight" in between.
    let due = eng.nic.reap();
    let mut sink = TaggedSink {
        nic: &mut eng.nic,
        core: cx.core,
    };
    n += t.ep.poll(&mut sink, budget)?;
    for (ctx, event) in due {
        n += 1;
        // A context the table does not know is a stale or bogus report: drop it.
        let Some(i) = eng.ops.find(ctx) else {
            continue;
        };
        let Some(entry) = eng.ops.remove(i) else {
            continue;
        };
        match event {
            Event::Recv { env, msg, .. } => {
                if msg.flags & msg_flags::SYNC != 0 {
                    t.ep.send(msg.src, TAGGED_ACK, &msg.sreq.to_le_bytes(), &[])?;
                }
                let Some(r) = cx
                    .core
                    .requests
                    .get_mut(entry.req)
                    .and_then(Request::recv_mut)
                else {
                    continue; // the receive is gone (its completion came after a quiesce)
                };
                native::released(r);
                r.source_process = msg.src;
                let written = match &entry.bounce {
                    Some(b) => r.buf.write_at(0, &b[..msg.data.len().min(b.len())]),
                    None => msg.data.len().min(r.buf.capacity()),
                };
                let mut st = Status::ok(env.source, env.tag, written);
                if msg.data.len() > written {
                    st.error = Some(ErrorKind::Truncate);
                }
                cx.core.complete_recv(entry.req, st);
            }
            Event::Sent(result) => {
                let Some(req) = cx.core.requests.get_mut(entry.req) else {
                    continue;
                };
                if let Some(s) = req.send_mut() {
                    s.engine = 0;
                }
                match result {
                    Ok(()) => cx.core.send_event_done(entry.req),
                    Err(kind) => {
                        req.status.error = Some(kind);
                        req.complete = true;
                    }
                }
            }
            Event::Cancelled => {
                if let Some(r) = cx
                    .core
                    .requests
                    .get_mut(entry.req)
                    .and_then(Request::recv_mut)
                {
                    native::released(r);
                }
            }
        }
    }
    Ok(n)
}

/// Drives this engine until operation `i` of request `req` has been reported (its slot freed),
/// within the device's cancel limit; past it the NIC is closed, which ends every operation.
fn drive_until_released<P: Partner>(
    cx: &mut Cx<'_, Net, P>,
    i: OpIndex,
    req: ReqHandle,
) -> Result<()> {
    native::drive_until_released(
        cx,
        |net| net.native.ops.get(i).is_some_and(|e| e.req == req),
        progress_own,
        |cx| {
            cx.transport.native.nic.close();
            let eng = &mut cx.transport.native;
            eng.backlog.retain(|s| matches!(s.data, TxData::Copy(_)));
            eng.ops = OpContexts::new();
        },
    )
}

struct TaggedSink<'a> {
    nic: &'a mut Nic,
    core: &'a mut ch4_core::core::Core,
}

impl AmSink for TaggedSink<'_> {
    fn deliver(&mut self, src: Gpid, h: HandlerId, header: &[u8], payload: &[u8]) -> Result<()> {
        match h {
            TAGGED => {
                let hdr: TagHeader = bytemuck::try_pod_read_unaligned(header)
                    .map_err(|_| Error::new(ErrorKind::Protocol, "short tagged header"))?;
                let env = Envelope {
                    context: hdr.context,
                    source: hdr.source,
                    tag: hdr.tag,
                };
                self.nic.arrive(
                    env,
                    Arrived {
                        src,
                        flags: hdr.flags,
                        sreq: hdr.sreq,
                        data: payload.to_vec(),
                    },
                );
                Ok(())
            }
            TAGGED_ACK => {
                let raw = u64::from_le_bytes(
                    header
                        .try_into()
                        .map_err(|_| Error::new(ErrorKind::Protocol, "short tagged ack"))?,
                );
                let h = Handle::from_raw(raw);
                // A send released after an error may be gone by the time its ack comes.
                if self.core.requests.get(h).is_some() {
                    self.core.send_event_done(h);
                }
                Ok(())
            }
            other => Err(Error::new(
                ErrorKind::Protocol,
                format!("native netmod got active message {other}; it speaks only tagged"),
            )),
        }
    }
}

//! am-fallback: MPI point-to-point semantics built on a transport's active messages.
//!
//! A transport that cannot match messages itself (shared memory, TCP) names [`Am`] as its
//! point-to-point engine and gets the whole of MPI's send/receive semantics: eager sends for
//! short messages, rendezvous (RTS / CTS / DATA) for long ones with the threshold set by the
//! transport, synchronous-send acknowledgement, ready-send detection, probe and matched probe,
//! cancel of receives and of unmatched sends, truncation that never writes past the buffer,
//! and, for transports that may reorder, sequence numbers that restore MPI's non-overtaking order.
//!
//! Matching happens in the core's queues, so shm and an active-message netmod share them. The
//! engine keeps no state of its own: its per-operation state lives in the core's requests, and
//! its per-route state (replies waiting, sends streaming, sequence numbers) in
//! [`ch4_core::core::AmRouteState`]. It is sans-IO in the sense that matters for testing: every
//! input is a call with bytes, every output a call on the transport trait, so an in-memory
//! transport drives it deterministically.
//!
//! Large messages use CH3 Nemesis's LMT modes. *Null/Cooperative*: after the clear-to-send the
//! sender streams the data in pieces tagged with offsets; over shared memory this is the
//! cooperative pipelined copy, the sender copying piece n+1 into the ring while the receiver
//! copies piece n out. *Get*: a transport that can read a peer's memory
//! ([`AmTransport::offers_peer_read`], shm's CMA) makes the request-to-send carry the buffer's
//! address, and the receiver copies the data in one step and answers `GET_DONE`; the receiver
//! may always decline and ask for the stream instead. *Put* (the sender writing into the
//! receiver's buffer) belongs to RDMA networks, whose netmods match natively and bring their own
//! engine.
#![deny(unsafe_code)]

pub mod wire;

use ch4_core::core::{Core, CtrlPacket, HeldPacket, PeerReadJob};
use ch4_core::pool::Handle;
use ch4_core::request::{
    msg_flags, CancelState, Message, RecvState, ReqHandle, Request, RequestKind, Route, SendState,
    Unexpected,
};
use ch4_core::transport::{
    AmSink, AmTransport, Cx, Direct, HandlerId, P2p, Partner, PeerRead, SendOp,
};
use ch4_core::{Envelope, Error, ErrorKind, Gpid, Result, SendMode, Status};
use wire::{handler, AckHeader, CancelHeader, CtsHeader, DataHeader, MatchHeader, ReadableRts};

/// The active-message point-to-point engine. Name it as a transport's `P2p` type.
pub struct Am;

impl<T: AmTransport> P2p<T> for Am {
    const NATIVE_MATCHING: bool = false;

    #[inline(always)]
    fn isend<P: Partner>(cx: &mut Cx<'_, T, P>, op: SendOp) -> Result<ReqHandle> {
        isend(cx, op)
    }

    #[inline(always)]
    fn irecv<P: Partner>(cx: &mut Cx<'_, T, P>, req: ReqHandle) -> Result<()> {
        let core = &mut *cx.core;
        let Some(r) = core.requests.get_mut(req).and_then(Request::recv_mut) else {
            return Err(Error::new(
                ErrorKind::Internal,
                "irecv on a missing or send request",
            ));
        };
        let want = r.want;
        match core.unexpected.take_match(&want) {
            Some((_, env, msg)) => match_unexpected(core, req, env, msg),
            None => {
                // The queues and the pool are separate fields: post while holding the request.
                r.posted = Some(core.posted.post(want, req));
                Ok(())
            }
        }
    }

    fn cancel_recv<P: Partner>(cx: &mut Cx<'_, T, P>, req: ReqHandle) -> Result<bool> {
        let core = &mut *cx.core;
        let posted = core
            .requests
            .get_mut(req)
            .and_then(Request::recv_mut)
            .and_then(|r| r.posted.take());
        Ok(posted.is_some_and(|id| core.posted.remove(id).is_some()))
    }

    fn cancel_send<P: Partner>(cx: &mut Cx<'_, T, P>, req: ReqHandle) -> Result<()> {
        let r = cx.core.request_mut(req)?;
        let RequestKind::Send(s) = &mut r.kind else {
            return Err(Error::new(ErrorKind::Internal, "cancel_send on a receive"));
        };
        if s.cancel != CancelState::None {
            return Ok(());
        }
        s.cancel = CancelState::Requested;
        s.pending += 1;
        r.complete = false;
        let hdr = CancelHeader {
            context: s.env.context,
            source: s.env.source,
            tag: s.env.tag,
            reserved: 0,
            sreq: req.to_raw(),
        };
        let dest = s.dest;
        cx.transport
            .am_send(dest, handler::CANCEL_REQ, bytemuck::bytes_of(&hdr), &[])
    }

    fn iprobe<P: Partner>(cx: &mut Cx<'_, T, P>, want: &Envelope) -> Result<Option<Status>> {
        Ok(cx
            .core
            .unexpected
            .find(want)
            .map(|(_, env, msg)| Status::ok(env.source, env.tag, msg.total)))
    }

    fn improbe<P: Partner>(
        cx: &mut Cx<'_, T, P>,
        want: &Envelope,
    ) -> Result<Option<(Message, Status)>> {
        Ok(cx.core.unexpected.take_match(want).map(|(_, env, msg)| {
            let st = Status::ok(env.source, env.tag, msg.total);
            (Message::Am { env, msg }, st)
        }))
    }

    fn imrecv<P: Partner>(cx: &mut Cx<'_, T, P>, msg: Message, req: ReqHandle) -> Result<()> {
        match msg {
            Message::Am { env, msg } => match_unexpected(cx.core, req, env, msg),
            _ => Err(Error::new(
                ErrorKind::Internal,
                "a native message handed to the active-message engine",
            )),
        }
    }

    /// A blocking eager send waits for the receiver's credit (see `ch4_core::core::AmRouteState`).
    #[inline(always)]
    fn send_ready<P: Partner>(cx: &mut Cx<'_, T, P>, dest: Gpid, total: usize) -> bool {
        total > cx.transport.eager_limit() || cx.core.has_credit(cx.route, dest, total)
    }

    #[inline]
    fn progress<P: Partner>(cx: &mut Cx<'_, T, P>) -> Result<usize> {
        progress(cx)
    }

    #[inline]
    fn recv_direct<P: Partner>(
        cx: &mut Cx<'_, T, P>,
        want: &Envelope,
        buf: &mut [u8],
    ) -> Result<Direct> {
        recv_direct(cx, want, buf)
    }
}

// ------------------------------------------------------------------- sends

#[inline(always)]
fn mode_flags(mode: SendMode) -> u32 {
    match mode {
        SendMode::Standard => 0,
        SendMode::Synchronous => msg_flags::SYNC,
        SendMode::Ready => msg_flags::READY,
    }
}

/// The next sequence number towards `dest` (unordered transports only). Taken only right before
/// the packet goes out; a send that fails gives it back with [`unsend_seq`], or the receiver
/// would wait for the gap forever.
#[inline(always)]
fn next_seq<T: AmTransport>(core: &mut Core, route: Route, dest: Gpid) -> u32 {
    if T::AM_ORDERED {
        return 0;
    }
    let seq = core.am[route.index()].seq_out.entry(dest).or_insert(0);
    let s = *seq;
    *seq = seq.wrapping_add(1);
    s
}

/// Returns the sequence number of a packet that was not sent after all.
#[cold]
fn unsend_seq<T: AmTransport>(core: &mut Core, route: Route, dest: Gpid) {
    if !T::AM_ORDERED {
        if let Some(seq) = core.am[route.index()].seq_out.get_mut(&dest) {
            *seq = seq.wrapping_sub(1);
        }
    }
}

/// Eager messages at least this long go by rendezvous when the transport cannot take them at
/// once (a full shared-memory ring): waiting, an eager message must be copied aside and copied
/// again later, while a request-to-send is small and its data streams from the user's buffer
/// once there is room. Measured with osu_bibw (both directions, windows of 64; 5 interleaved
/// rounds, medians): 16 KiB 4.7 -> 10.0 GB/s, 32 KiB 5.0 -> 8.0, 64 KiB 7.0 -> 8.0, osu_bw and
/// latency unchanged. Shorter messages keep the eager path: copying them aside costs less than
/// the rendezvous round trip.
const EAGER_ONLY_WITH_ROOM: usize = 4096;

#[inline(always)]
fn isend<T: AmTransport, P: Partner>(cx: &mut Cx<'_, T, P>, op: SendOp) -> Result<ReqHandle> {
    let total = op.buf.packed_len();
    // Eager when short enough, with room for a larger one, and within the receiver's credit:
    // beyond it the message goes by rendezvous, its data staying in the sender's buffer.
    let eager = total <= cx.transport.eager_limit()
        && (total < EAGER_ONLY_WITH_ROOM
            || cx
                .transport
                .can_send_now(op.dest, std::mem::size_of::<MatchHeader>() + total))
        && cx.core.has_credit(cx.route, op.dest, total);
    let sync = op.mode == SendMode::Synchronous;
    let needs_req = !eager || sync;
    let mut hdr = MatchHeader {
        context: op.env.context,
        source: op.env.source,
        tag: op.env.tag,
        flags: mode_flags(op.mode),
        seq: 0,
        reserved: 0,
        sreq: 0,
        total: total as u64,
    };
    if !needs_req {
        // The iStartMsg path: a small standard send leaves at once and needs no request.
        hdr.seq = next_seq::<T>(cx.core, cx.route, op.dest);
        // Spent as the message goes: if the transport fails it, its peer is gone and its
        // credit no longer matters.
        cx.core.spend_credit(cx.route, op.dest, total);
        let sent = send_eager(cx.transport, op.dest, &hdr, &op.buf);
        if sent.is_err() {
            unsend_seq::<T>(cx.core, cx.route, op.dest);
        }
        return sent.map(|()| ReqHandle::DONE);
    }
    // Eager: owed only the synchronous ack. Rendezvous: owed the data streamed after the CTS
    // (a CTS implies a match, so a synchronous rendezvous needs no separate ack).
    let pending = u8::from(!eager || sync);
    let dest = op.dest;
    let h = cx.core.requests.insert(Request {
        complete: pending == 0,
        status: Status::EMPTY,
        kind: RequestKind::Send(SendState {
            route: cx.route,
            dest,
            env: op.env,
            mode: op.mode,
            buf: op.buf,
            total,
            sent: 0,
            accepted: 0,
            peer_req: 0,
            pending,
            cancel: CancelState::None,
        }),
    })?;
    hdr.sreq = h.to_raw();
    hdr.seq = next_seq::<T>(cx.core, cx.route, dest);
    if eager {
        cx.core.spend_credit(cx.route, dest, total);
    }
    let sent = match cx.core.requests.get(h).map(|r| &r.kind) {
        Some(RequestKind::Send(s)) if eager => send_eager(cx.transport, dest, &hdr, &s.buf),
        Some(RequestKind::Send(s)) => send_rts(cx.transport, dest, &hdr, &s.buf),
        Some(_) => Err(Error::new(
            ErrorKind::Internal,
            "send request is not a send",
        )),
        None => Err(Error::new(ErrorKind::Internal, "send request vanished")),
    };
    match sent {
        Ok(()) => Ok(h),
        Err(e) => {
            unsend_seq::<T>(cx.core, cx.route, dest);
            cx.core.requests.remove(h);
            Err(e)
        }
    }
}

/// A noncontiguous send's blocks go to the transport as they lie (a gather list) when a message,
/// or a rendezvous piece of one, spans at most this many; more (small) blocks are packed first,
/// since a transport's per-piece cost would then exceed the copy saved. Over TCP (`cargo bench
/// -p netmod-tcp --bench strided`, 4 MiB strided sends, gather against packing, medians of 3
/// runs of 3): 1.45x at 16 KiB blocks, 1.29x at 64 KiB, 1.6x at 256 KiB.
const GATHER_MAX: usize = 64;

#[inline(always)]
fn send_eager<T: AmTransport>(
    transport: &mut T,
    dest: Gpid,
    hdr: &MatchHeader,
    buf: &ch4_core::buffer::SendBuf,
) -> Result<()> {
    match buf.contiguous() {
        Some(data) => transport.am_send(dest, handler::EAGER, bytemuck::bytes_of(hdr), &[data]),
        None => send_eager_noncontiguous(transport, dest, hdr, buf),
    }
}

/// [`send_eager`] of a message with a layout, out of line so the contiguous path stays small.
#[inline(never)]
fn send_eager_noncontiguous<T: AmTransport>(
    transport: &mut T,
    dest: Gpid,
    hdr: &MatchHeader,
    buf: &ch4_core::buffer::SendBuf,
) -> Result<()> {
    let header = bytemuck::bytes_of(hdr);
    if let Some(pieces) = buf.segments(0, buf.packed_len(), GATHER_MAX) {
        return transport.am_send(dest, handler::EAGER, header, &pieces);
    }
    let packed = buf.to_vec()?;
    transport.am_send(dest, handler::EAGER, header, &[&packed])
}

/// Sends a request-to-send, offering the buffer for a single-copy read when the transport can
/// do one and the data is contiguous.
#[inline]
fn send_rts<T: AmTransport>(
    transport: &mut T,
    dest: Gpid,
    hdr: &MatchHeader,
    buf: &ch4_core::buffer::SendBuf,
) -> Result<()> {
    if let Some(data) = buf.contiguous() {
        if transport.offers_peer_read(dest, data.len()) {
            let offer = ReadableRts {
                m: *hdr,
                addr: data.as_ptr() as u64,
            };
            return transport.am_send(dest, handler::RTS_GET, bytemuck::bytes_of(&offer), &[]);
        }
    }
    transport.am_send(dest, handler::RTS, bytemuck::bytes_of(hdr), &[])
}

/// Carries out the single-copy reads (LMT Get) of matched rendezvous receives: copy, tell the
/// sender, complete. A read the transport declines turns into an ordinary clear-to-send, so the
/// data is streamed instead; a sender that died fails the receive.
///
/// Only a lone message is read: one matched, and no other receive waiting. Otherwise the
/// traffic is a stream (a bandwidth-bound window of receives), and the streamed mode moves it
/// faster: the sender copies pieces into the ring while we copy earlier ones out, two cores at
/// work instead of one (measured on this project's 2-core host: single copy 0.5-0.8x the
/// streamed bandwidth for a window of 64 at 64 KiB-4 MiB, but 2x better latency for one message
/// of 64-256 KiB).
#[inline(never)]
fn run_peer_reads<T: AmTransport>(
    core: &mut Core,
    transport: &mut T,
    route: Route,
) -> Result<usize> {
    let mut done = 0;
    let lone = core.am[route.index()].reads.len() == 1 && core.posted.is_empty();
    while let Some(job) = core.am[route.index()].reads.pop_front() {
        let Some(r) = core.requests.get_mut(job.req) else {
            continue;
        };
        let RequestKind::Recv(rs) = &mut r.kind else {
            continue;
        };
        let accept = rs.expected;
        let outcome = match rs.buf.contiguous_mut() {
            _ if !lone => Ok(PeerRead::Unavailable),
            Some(dst) => transport.read_peer(job.src, job.addr, &mut dst[..accept]),
            None => read_peer_unpacking(
                transport,
                job,
                &mut rs.buf,
                accept,
                &mut core.am[route.index()].scratch,
            ),
        };
        let mut status = r.status;
        match outcome {
            Ok(PeerRead::Copied) => {
                status.bytes = accept;
                ack(
                    core,
                    route,
                    job.src,
                    handler::GET_DONE,
                    job.sreq,
                    accept as u64,
                )?;
                core.complete_recv(job.req, status);
            }
            Ok(PeerRead::Unavailable) => {
                queue_cts(core, route, job.src, job.sreq, job.req, accept)?;
            }
            Err(e) => {
                tracing::warn!(src = job.src, error = %e, "single-copy read failed");
                status.error = Some(e.kind());
                core.complete_recv(job.req, status);
            }
        }
        done += 1;
    }
    Ok(done)
}

/// A single-copy read into a noncontiguous receive: read pieces into scratch, unpack each.
fn read_peer_unpacking<T: AmTransport>(
    transport: &mut T,
    job: PeerReadJob,
    buf: &mut ch4_core::buffer::RecvBuf,
    accept: usize,
    scratch: &mut Vec<u8>,
) -> Result<PeerRead> {
    const PIECE: usize = 256 << 10;
    let mut offset = 0;
    while offset < accept {
        let n = PIECE.min(accept - offset);
        scratch.resize(n, 0);
        match transport.read_peer(
            job.src,
            job.addr.wrapping_add(offset as u64),
            &mut scratch[..n],
        )? {
            PeerRead::Copied => {}
            PeerRead::Unavailable => return Ok(PeerRead::Unavailable),
        }
        buf.write_at(offset, &scratch[..n]);
        offset += n;
    }
    Ok(PeerRead::Copied)
}

/// Streams rendezvous data for sends whose CTS has arrived, a bounded number of pieces per call.
fn stream_pending<T: AmTransport>(
    core: &mut Core,
    transport: &mut T,
    route: Route,
) -> Result<usize> {
    let piece = transport.am_max_payload().max(1);
    let mut done = 0;
    let budget = core.config.stream_budget;
    while done < budget {
        let Some(h) = core.am[route.index()].streaming.pop_front() else {
            break;
        };
        let mut scratch = std::mem::take(&mut core.am[route.index()].scratch);
        let Some(RequestKind::Send(s)) = core.requests.get_mut(h).map(|r| &mut r.kind) else {
            core.am[route.index()].scratch = scratch;
            continue; // abandoned while streaming
        };
        let end = s.accepted.min(s.sent.saturating_add(piece));
        if !transport.can_send_now(s.dest, std::mem::size_of::<DataHeader>() + (end - s.sent)) {
            // No room: wait for the receiver rather than have the transport copy the piece
            // aside. Progress brings us back here.
            core.am[route.index()].scratch = scratch;
            core.am[route.index()].streaming.push_front(h);
            break;
        }
        let hdr = DataHeader {
            rreq: s.peer_req,
            offset: s.sent as u64,
        };
        let sent = match s.buf.contiguous() {
            Some(data) => {
                let chunk = data.get(s.sent..end).unwrap_or(&[]);
                transport.am_send(s.dest, handler::DATA, bytemuck::bytes_of(&hdr), &[chunk])
            }
            None => {
                // The blocks as they lie (the transport gathers them: one copy fewer), or
                // packed when they are many.
                let payload = match s.buf.segments(s.sent, end - s.sent, GATHER_MAX) {
                    Some(pieces) => pieces,
                    None => {
                        scratch.resize(end - s.sent, 0);
                        let n = s.buf.pack_range(s.sent, &mut scratch)?;
                        smallvec::smallvec![&scratch[..n]]
                    }
                };
                transport.am_send(s.dest, handler::DATA, bytemuck::bytes_of(&hdr), &payload)
            }
        };
        core.am[route.index()].scratch = scratch;
        sent?;
        s.sent = end;
        done += 1;
        if s.sent >= s.accepted {
            core.send_event_done(h);
        } else {
            core.am[route.index()].streaming.push_back(h);
        }
    }
    Ok(done)
}

// ---------------------------------------------------------------- receives

/// Delivers a message taken from the unexpected queue (or by a matched probe) to `req`.
fn match_unexpected(core: &mut Core, req: ReqHandle, env: Envelope, msg: Unexpected) -> Result<()> {
    match msg.data {
        Some(data) => {
            let r = deliver_eager(
                core, msg.route, msg.src, req, env, msg.flags, msg.sreq, &data,
            );
            core.recycle_buffer(data);
            r
        }
        None => accept_rts(
            core,
            msg.route,
            msg.src,
            req,
            env,
            msg.flags,
            msg.sreq,
            msg.total,
            msg.remote_addr,
        ),
    }
}

/// Copies an eager message into a matched receive and completes it.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn deliver_eager(
    core: &mut Core,
    route: Route,
    src: Gpid,
    req: ReqHandle,
    env: Envelope,
    flags: u32,
    sreq: u64,
    data: &[u8],
) -> Result<()> {
    let r = core
        .requests
        .get_mut(req)
        .and_then(Request::recv_mut)
        .ok_or_else(|| Error::new(ErrorKind::Internal, "matched receive vanished"))?;
    let written = r.buf.write_at(0, data);
    let mut status = Status::ok(env.source, env.tag, written);
    status.error = completion_error(flags, data.len(), written);
    if flags & msg_flags::SYNC != 0 {
        ack(core, route, src, handler::SYNC_ACK, sreq, 0)?;
    }
    core.complete_recv(req, status);
    consumed(core, route, src, data.len())
}

/// An eager message of `total` bytes from `src` was delivered or dropped: count its credit as
/// consumed, and give the sender back what has added up.
#[inline(always)]
fn consumed(core: &mut Core, route: Route, src: Gpid, total: usize) -> Result<()> {
    match core.consume_credit(route, src, total) {
        None => Ok(()),
        Some(amount) => give_back_credit(core, route, src, amount),
    }
}

#[cold]
fn give_back_credit(core: &mut Core, route: Route, src: Gpid, amount: u64) -> Result<()> {
    let a = AckHeader {
        sreq: 0,
        value: amount,
    };
    let mut p = CtrlPacket::new(src, handler::CREDIT, bytemuck::bytes_of(&a))?;
    // A sender that has left needs no credit.
    p.droppable = true;
    core.queue_ctrl(route, p);
    Ok(())
}

#[inline(always)]
fn completion_error(flags: u32, total: usize, written: usize) -> Option<ErrorKind> {
    if flags & msg_flags::READY_UNMATCHED != 0 {
        Some(ErrorKind::ReadyNotPosted)
    } else if total > written {
        Some(ErrorKind::Truncate)
    } else {
        None
    }
}

/// Answers a request-to-send matched by `req`: with a clear-to-send, or, when the sender offered
/// its buffer at `remote_addr`, by queueing the single-copy read.
#[allow(clippy::too_many_arguments)]
fn accept_rts(
    core: &mut Core,
    route: Route,
    src: Gpid,
    req: ReqHandle,
    env: Envelope,
    flags: u32,
    sreq: u64,
    total: usize,
    remote_addr: u64,
) -> Result<()> {
    let r = core
        .requests
        .get_mut(req)
        .ok_or_else(|| Error::new(ErrorKind::Internal, "matched receive vanished"))?;
    let RequestKind::Recv(rs) = &mut r.kind else {
        return Err(Error::new(
            ErrorKind::Internal,
            "RTS matched a send request",
        ));
    };
    let accept = total.min(rs.buf.capacity());
    rs.msg_bytes = total;
    rs.expected = accept;
    rs.received = 0;
    r.status = Status::ok(env.source, env.tag, 0);
    r.status.error = completion_error(flags, total, accept);
    // A single-copy read only for a lone message (see `run_peer_reads`): with other receives
    // waiting, answer at once and let the data stream.
    if remote_addr != 0 && accept > 0 && core.posted.is_empty() {
        tracing::debug!(
            src,
            total,
            accept,
            "rendezvous matched, reading the sender's buffer"
        );
        core.am[route.index()].reads.push_back(PeerReadJob {
            req,
            src,
            addr: remote_addr,
            sreq,
        });
        return Ok(());
    }
    tracing::debug!(src, total, accept, "rendezvous matched, sending CTS");
    let status = r.status;
    queue_cts(core, route, src, sreq, req, accept)?;
    if accept == 0 {
        core.complete_recv(req, status);
    }
    Ok(())
}

/// Queues the clear-to-send that tells the sender of `sreq` to stream `accept` bytes to `req`.
fn queue_cts(
    core: &mut Core,
    route: Route,
    src: Gpid,
    sreq: u64,
    req: ReqHandle,
    accept: usize,
) -> Result<()> {
    let cts = CtsHeader {
        sreq,
        rreq: req.to_raw(),
        accept: accept as u64,
    };
    core.queue_ctrl(
        route,
        CtrlPacket::new(src, handler::CTS, bytemuck::bytes_of(&cts))?,
    );
    Ok(())
}

fn ack(
    core: &mut Core,
    route: Route,
    dest: Gpid,
    handler: HandlerId,
    sreq: u64,
    value: u64,
) -> Result<()> {
    let a = AckHeader { sreq, value };
    core.queue_ctrl(
        route,
        CtrlPacket::new(dest, handler, bytemuck::bytes_of(&a))?,
    );
    Ok(())
}

// ------------------------------------------------------- direct receives

/// The direct path of a blocking receive (see `P2p::recv_direct`): no request, no posted entry.
///
/// MPI's order is kept by three rules: a message already waiting in the unexpected queue is
/// served first (and a waiting rendezvous one sends us to the ordinary path); the path is only
/// taken while no other receive is posted, so no earlier receive can be owed the message; and
/// once a matching message has gone the ordinary way during a poll (a request-to-send), later
/// matching messages are not intercepted either.
#[inline]
fn recv_direct<T: AmTransport, P: Partner>(
    cx: &mut Cx<'_, T, P>,
    want: &Envelope,
    buf: &mut [u8],
) -> Result<Direct> {
    if !T::AM_ORDERED {
        return Ok(Direct::Fallback);
    }
    let core = &mut *cx.core;
    if let Some((_, _, waiting)) = core.unexpected.find(want) {
        if waiting.data.is_none() {
            return Ok(Direct::Fallback);
        }
        let Some((_, env, msg)) = core.unexpected.take_match(want) else {
            return Ok(Direct::Fallback);
        };
        let data = msg.data.unwrap_or_default();
        let st = copy_direct(
            core, msg.route, msg.src, env, msg.flags, msg.sreq, &data, buf,
        );
        core.recycle_buffer(data);
        return st.map(Direct::Done);
    }
    if !core.posted.is_empty() {
        return Ok(Direct::Fallback);
    }
    let Cx {
        core,
        transport,
        route,
        partner,
    } = cx;
    let route = *route;
    let budget = core.config.poll_budget;
    let mut sink = DirectSink {
        inner: Dispatch::<T, P>::new(core, partner, route),
        want: *want,
        buf,
        done: None,
        blocked: false,
    };
    transport.am_poll(&mut sink, budget)?;
    let (done, blocked) = (sink.done, sink.blocked);
    finish_poll(core, *transport, route)?;
    Ok(match done {
        Some(st) => Direct::Done(st),
        None if blocked => Direct::Fallback,
        None => Direct::Pending,
    })
}

/// Copies an eager message into a direct receive's buffer and acknowledges a synchronous send.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn copy_direct(
    core: &mut Core,
    route: Route,
    src: Gpid,
    env: Envelope,
    flags: u32,
    sreq: u64,
    data: &[u8],
    buf: &mut [u8],
) -> Result<Status> {
    let n = data.len().min(buf.len());
    buf[..n].copy_from_slice(&data[..n]);
    let mut st = Status::ok(env.source, env.tag, n);
    st.error = completion_error(flags, data.len(), n);
    if flags & msg_flags::SYNC != 0 {
        ack(core, route, src, handler::SYNC_ACK, sreq, 0)?;
    }
    consumed(core, route, src, data.len())?;
    Ok(st)
}

/// A matching packet must carry exactly the bytes its header announces.
#[inline(always)]
fn check_carried(src: Gpid, announced: u64, carried: usize) -> Result<()> {
    if carried as u64 == announced {
        return Ok(());
    }
    Err(Error::new(
        ErrorKind::Protocol,
        format!("process {src}: packet announces {announced} bytes but carries {carried}"),
    ))
}

/// The sink of a direct receive's poll: takes the first eager message the receive accepts,
/// hands everything else to the ordinary dispatch.
struct DirectSink<'a, 'b, T, P> {
    inner: Dispatch<'a, T, P>,
    want: Envelope,
    buf: &'b mut [u8],
    done: Option<Status>,
    /// A matching message went the ordinary way: nothing after it may be intercepted.
    blocked: bool,
}

impl<T: AmTransport, P: Partner> AmSink for DirectSink<'_, '_, T, P> {
    #[inline(always)]
    fn deliver(&mut self, src: Gpid, h: HandlerId, header: &[u8], payload: &[u8]) -> Result<()> {
        if self.done.is_none()
            && !self.blocked
            && matches!(h, handler::EAGER | handler::RTS | handler::RTS_GET)
        {
            let (hdr, _) = wire::parse_match(h, header)?;
            let env = Envelope {
                context: hdr.context,
                source: hdr.source,
                tag: hdr.tag,
            };
            if self.want.accepts(&env) {
                if h == handler::EAGER && self.inner.core.posted.is_empty() {
                    check_carried(src, hdr.total, payload.len())?;
                    let route = self.inner.route;
                    let st = copy_direct(
                        self.inner.core,
                        route,
                        src,
                        env,
                        hdr.flags,
                        hdr.sreq,
                        payload,
                        self.buf,
                    )?;
                    self.done = Some(st);
                    return Ok(());
                }
                self.blocked = true;
            }
        }
        self.inner.deliver(src, h, header, payload)
    }

    #[inline(always)]
    fn wants_more(&self) -> bool {
        self.done.is_none()
    }

    fn destination(
        &mut self,
        src: Gpid,
        h: HandlerId,
        header: &[u8],
        len: usize,
    ) -> Option<&mut [u8]> {
        self.inner.destination(src, h, header, len)
    }

    fn scattered_destination(
        &mut self,
        src: Gpid,
        h: HandlerId,
        header: &[u8],
        len: usize,
        max_pieces: usize,
    ) -> Option<smallvec::SmallVec<[&mut [u8]; 8]>> {
        self.inner
            .scattered_destination(src, h, header, len, max_pieces)
    }

    fn placed(&mut self, src: Gpid, h: HandlerId, header: &[u8], len: usize) -> Result<()> {
        self.inner.placed(src, h, header, len)
    }
}

// ---------------------------------------------------------------- progress

fn progress<T: AmTransport, P: Partner>(cx: &mut Cx<'_, T, P>) -> Result<usize> {
    let Cx {
        core,
        transport,
        route,
        partner,
    } = cx;
    let route = *route;
    let budget = core.config.poll_budget;
    let mut sink = Dispatch::<T, P>::new(core, partner, route);
    let n = transport.am_poll(&mut sink, budget)?;
    Ok(n + finish_poll(core, *transport, route)?)
}

/// After a poll: sends our own route's replies now (the device flushes the other route's) and
/// streams rendezvous data. Returns the data pieces sent.
#[inline(always)]
fn finish_poll<T: AmTransport>(core: &mut Core, transport: &mut T, route: Route) -> Result<usize> {
    let mut events = 0;
    if !core.am[route.index()].reads.is_empty() {
        events += run_peer_reads(core, transport, route)?;
    }
    while let Some(p) = core.am[route.index()].outbox.pop_front() {
        p.send(transport)?;
    }
    if core.am[route.index()].streaming.is_empty() {
        return Ok(events);
    }
    Ok(events + stream_pending(core, transport, route)?)
}

/// Hands each arrived active message to its handler.
struct Dispatch<'a, T, P> {
    core: &'a mut Core,
    partner: &'a mut P,
    route: Route,
    _transport: std::marker::PhantomData<T>,
}

impl<T: AmTransport, P: Partner> AmSink for Dispatch<'_, T, P> {
    #[inline]
    fn deliver(&mut self, src: Gpid, h: HandlerId, header: &[u8], payload: &[u8]) -> Result<()> {
        match h {
            handler::EAGER | handler::RTS | handler::RTS_GET => {
                let (hdr, addr) = wire::parse_match(h, header)?;
                if T::AM_ORDERED {
                    self.on_match_packet(src, h, &hdr, addr, payload)
                } else {
                    self.in_order(src, h, hdr, addr, header, payload)
                }
            }
            handler::CTS => self.on_cts(wire::parse(header)?),
            handler::DATA => self.on_data(src, wire::parse(header)?, payload),
            handler::SYNC_ACK => {
                let a: AckHeader = wire::parse(header)?;
                let sreq = self.send_request(a.sreq)?;
                self.core.send_event_done(sreq);
                Ok(())
            }
            handler::CANCEL_REQ => self.on_cancel_req(src, wire::parse(header)?),
            handler::CANCEL_ACK => self.on_cancel_ack(wire::parse(header)?),
            handler::GET_DONE => self.on_get_done(wire::parse(header)?),
            handler::CREDIT => {
                let a: AckHeader = wire::parse(header)?;
                self.core.credit_returned(self.route, src, a.value);
                Ok(())
            }
            other => Err(Error::new(
                ErrorKind::Protocol,
                format!("unknown active-message handler {other} from process {src}"),
            )),
        }
    }

    /// Rendezvous data for a matched receive with a contiguous buffer: its place in the buffer.
    fn destination(
        &mut self,
        _src: Gpid,
        h: HandlerId,
        header: &[u8],
        len: usize,
    ) -> Option<&mut [u8]> {
        let (rs, offset) = self.data_receive(h, header, len)?;
        rs.buf.contiguous_mut()?.get_mut(offset..offset + len)
    }

    /// Rendezvous data for a matched receive with a noncontiguous layout: the pieces of the
    /// user's buffer it fills.
    fn scattered_destination(
        &mut self,
        _src: Gpid,
        h: HandlerId,
        header: &[u8],
        len: usize,
        max_pieces: usize,
    ) -> Option<smallvec::SmallVec<[&mut [u8]; 8]>> {
        let (rs, offset) = self.data_receive(h, header, len)?;
        rs.buf.segments_mut(offset, len, max_pieces)
    }

    fn placed(&mut self, src: Gpid, h: HandlerId, header: &[u8], len: usize) -> Result<()> {
        if h != handler::DATA {
            return Err(Error::new(
                ErrorKind::Internal,
                format!("handler {h} from process {src} was placed directly"),
            ));
        }
        let d: DataHeader = wire::parse(header)?;
        let h = self.data_target(src, d, len)?;
        self.account_data(h, len);
        Ok(())
    }
}

impl<'a, T: AmTransport, P: Partner> Dispatch<'a, T, P> {
    /// The live receive a DATA message with this header and `len` payload bytes belongs to,
    /// and the data's offset in it — if the piece lies within what the receive accepts.
    fn data_receive(
        &mut self,
        h: HandlerId,
        header: &[u8],
        len: usize,
    ) -> Option<(&mut RecvState, usize)> {
        if h != handler::DATA {
            return None;
        }
        let d: DataHeader = wire::parse(header).ok()?;
        let r = self.core.requests.get_mut(Handle::from_raw(d.rreq))?;
        if r.complete {
            return None;
        }
        let RequestKind::Recv(rs) = &mut r.kind else {
            return None;
        };
        let offset = usize::try_from(d.offset).ok()?;
        (offset.checked_add(len)? <= rs.expected).then_some((rs, offset))
    }

    /// The dispatcher for one poll of `route`.
    #[inline(always)]
    fn new(core: &'a mut Core, partner: &'a mut P, route: Route) -> Self {
        Dispatch {
            core,
            partner,
            route,
            _transport: std::marker::PhantomData,
        }
    }

    /// A send request named by a peer, checked: a forged or stale id is a protocol error.
    fn send_request(&mut self, raw: u64) -> Result<ReqHandle> {
        let h = Handle::from_raw(raw);
        match self.core.requests.get(h).map(|r| &r.kind) {
            Some(RequestKind::Send(_)) => Ok(h),
            _ => Err(Error::new(
                ErrorKind::Protocol,
                format!("peer named send request {raw:#x}, which does not exist"),
            )),
        }
    }

    /// Restores per-source order on transports that may reorder.
    #[cold]
    fn in_order(
        &mut self,
        src: Gpid,
        h: HandlerId,
        hdr: MatchHeader,
        addr: u64,
        header: &[u8],
        payload: &[u8],
    ) -> Result<()> {
        let state = &mut self.core.am[self.route.index()];
        let expected = *state.seq_in.get(&src).unwrap_or(&0);
        let ahead = hdr.seq.wrapping_sub(expected);
        if ahead != 0 {
            if ahead > u32::MAX / 2 {
                return Err(Error::new(
                    ErrorKind::Protocol,
                    format!("process {src} sent sequence {} twice", hdr.seq),
                ));
            }
            state.held.entry(src).or_default().insert(
                hdr.seq,
                HeldPacket {
                    handler: h,
                    header: header.to_vec(),
                    payload: payload.to_vec(),
                },
            );
            return Ok(());
        }
        self.on_match_packet(src, h, &hdr, addr, payload)?;
        let mut next = expected.wrapping_add(1);
        loop {
            let state = &mut self.core.am[self.route.index()];
            let held = state.held.get_mut(&src).and_then(|m| m.remove(&next));
            let Some(p) = held else { break };
            let (hdr, addr) = wire::parse_match(p.handler, &p.header)?;
            self.on_match_packet(src, p.handler, &hdr, addr, &p.payload)?;
            next = next.wrapping_add(1);
        }
        self.core.am[self.route.index()].seq_in.insert(src, next);
        Ok(())
    }

    /// An eager message or request-to-send: match it against posted receives, or queue it.
    #[inline(always)]
    fn on_match_packet(
        &mut self,
        src: Gpid,
        h: HandlerId,
        hdr: &MatchHeader,
        remote_addr: u64,
        payload: &[u8],
    ) -> Result<()> {
        let total = usize::try_from(hdr.total)
            .map_err(|_| Error::new(ErrorKind::Protocol, "message length does not fit"))?;
        let eager = h == handler::EAGER;
        // An eager packet carries its whole message; a request-to-send carries nothing.
        check_carried(src, if eager { hdr.total } else { 0 }, payload.len())?;
        let env = Envelope {
            context: hdr.context,
            source: hdr.source,
            tag: hdr.tag,
        };
        while let Some((_, _, req)) = self.core.posted.take_match(&env) {
            let Some(r) = self.core.requests.get_mut(req) else {
                continue;
            };
            let RequestKind::Recv(rs) = &mut r.kind else {
                continue;
            };
            rs.posted = None;
            let partnered = rs.partnered;
            if eager && !partnered {
                // The common case, with one request lookup: copy, set the status, complete.
                let written = rs.buf.write_at(0, payload);
                let mut status = Status::ok(env.source, env.tag, written);
                status.error = completion_error(hdr.flags, payload.len(), written);
                r.status = status;
                r.complete = true;
                if hdr.flags & msg_flags::SYNC != 0 {
                    ack(self.core, self.route, src, handler::SYNC_ACK, hdr.sreq, 0)?;
                }
                return consumed(self.core, self.route, src, payload.len());
            }
            // An ANY_SOURCE receive also posted in a natively matching netmod: take it only if
            // its netmod half can still be cancelled; otherwise the netmod matched it first.
            if partnered && !self.partner.cancel_partner(self.core, req)? {
                continue;
            }
            return if eager {
                deliver_eager(
                    self.core, self.route, src, req, env, hdr.flags, hdr.sreq, payload,
                )
            } else {
                accept_rts(
                    self.core,
                    self.route,
                    src,
                    req,
                    env,
                    hdr.flags,
                    hdr.sreq,
                    total,
                    remote_addr,
                )
            };
        }
        let mut flags = hdr.flags;
        if flags & msg_flags::READY != 0 {
            tracing::warn!(
                src,
                tag = hdr.tag,
                "ready-mode send arrived before its receive"
            );
            flags |= msg_flags::READY_UNMATCHED;
        }
        let data = eager.then(|| self.core.buffer_from(payload));
        self.core.unexpected.push(
            env,
            Unexpected {
                route: self.route,
                src,
                flags,
                sreq: hdr.sreq,
                total,
                data,
                remote_addr,
            },
        );
        Ok(())
    }

    fn on_cts(&mut self, cts: CtsHeader) -> Result<()> {
        let h = self.send_request(cts.sreq)?;
        let Some(RequestKind::Send(s)) = self.core.requests.get_mut(h).map(|r| &mut r.kind) else {
            return Ok(());
        };
        if s.peer_req != 0 || cts.accept > s.total as u64 {
            return Err(Error::new(
                ErrorKind::Protocol,
                format!(
                    "unexpected or oversized CTS for send request {:#x}",
                    cts.sreq
                ),
            ));
        }
        s.peer_req = cts.rreq;
        s.accepted = cts.accept as usize;
        if s.accepted == 0 {
            self.core.send_event_done(h);
        } else {
            self.core.am[self.route.index()].streaming.push_back(h);
        }
        Ok(())
    }

    #[inline]
    fn on_data(&mut self, src: Gpid, d: DataHeader, payload: &[u8]) -> Result<()> {
        let h = self.data_target(src, d, payload.len())?;
        let written = match self.core.requests.get_mut(h).map(|r| &mut r.kind) {
            Some(RequestKind::Recv(rs)) => rs.buf.write_at(d.offset as usize, payload),
            _ => 0,
        };
        self.account_data(h, written);
        Ok(())
    }

    /// Checks that a data piece of `len` bytes belongs to a live receive and fits what it
    /// accepted; returns that receive.
    fn data_target(&mut self, src: Gpid, d: DataHeader, len: usize) -> Result<Handle> {
        let h = Handle::from_raw(d.rreq);
        let r = self.core.requests.get_mut(h).ok_or_else(|| {
            Error::new(
                ErrorKind::Protocol,
                format!("process {src} sent data for unknown request {:#x}", d.rreq),
            )
        })?;
        let RequestKind::Recv(rs) = &mut r.kind else {
            return Err(Error::new(ErrorKind::Protocol, "data for a send request"));
        };
        let offset = d.offset as usize;
        if offset.saturating_add(len) > rs.expected || r.complete {
            return Err(Error::new(
                ErrorKind::Protocol,
                format!("process {src} sent data beyond what the receive accepted"),
            ));
        }
        Ok(h)
    }

    /// Counts `n` bytes of data into receive `h` and completes it once all have come.
    fn account_data(&mut self, h: Handle, n: usize) {
        let Some(r) = self.core.requests.get_mut(h) else {
            return;
        };
        let RequestKind::Recv(rs) = &mut r.kind else {
            return;
        };
        rs.received += n;
        if rs.received >= rs.expected {
            let mut status = r.status;
            status.bytes = rs.received;
            self.core.complete_recv(h, status);
        }
    }

    /// The receiver read our offered buffer (LMT Get): the send is done.
    fn on_get_done(&mut self, a: AckHeader) -> Result<()> {
        let h = self.send_request(a.sreq)?;
        let Some(RequestKind::Send(s)) = self.core.requests.get_mut(h).map(|r| &mut r.kind) else {
            return Ok(());
        };
        if s.peer_req != 0 || s.accepted != 0 || a.value > s.total as u64 {
            return Err(Error::new(
                ErrorKind::Protocol,
                format!("unexpected read-done for send request {:#x}", a.sreq),
            ));
        }
        s.accepted = a.value as usize;
        s.sent = s.accepted;
        self.core.send_event_done(h);
        Ok(())
    }

    fn on_cancel_req(&mut self, src: Gpid, c: CancelHeader) -> Result<()> {
        let env = Envelope {
            context: c.context,
            source: c.source,
            tag: c.tag,
        };
        let removed = self
            .core
            .unexpected
            .remove_first_where(&env, |u| u.src == src && u.sreq == c.sreq);
        if let Some((_, Unexpected { data: Some(d), .. })) = &removed {
            consumed(self.core, self.route, src, d.len())?;
        }
        let removed = removed.is_some();
        ack(
            self.core,
            self.route,
            src,
            handler::CANCEL_ACK,
            c.sreq,
            u64::from(removed),
        )
    }

    fn on_cancel_ack(&mut self, a: AckHeader) -> Result<()> {
        let h = self.send_request(a.sreq)?;
        let Some(r) = self.core.requests.get_mut(h) else {
            return Ok(());
        };
        let RequestKind::Send(s) = &mut r.kind else {
            return Ok(());
        };
        let removed = a.value == 1;
        s.cancel = CancelState::Answered(removed);
        if removed {
            s.pending = 0;
            r.status.cancelled = true;
            r.complete = true;
        } else {
            self.core.send_event_done(h);
        }
        Ok(())
    }
}

//! `OfiEngine`: MPI point-to-point on libfabric's tagged messages, matched by the provider —
//! ch4-core's native-engine contract (ARCHITECTURE.md, "Natively matching engines") over a real,
//! asynchronous network.
//!
//! - Sends: up to the inject size (and not synchronous) `fi_tinjectdata`, which copies, with no
//!   request; longer ones `fi_tsenddata` from the user's buffer, completed by the provider's
//!   completion; large messages go by the provider's own rendezvous. A layout of at most the
//!   provider's iovec limit of pieces goes as a gather list (`fi_tsendmsg` with remote CQ
//!   data), one with more as a packed copy. A synchronous send first posts a receive for its acknowledgement (in the ACK
//!   tag space, named in the message's CQ data) and completes when both are done.
//! - Receives: `fi_trecv` into the user's buffer (for a layout, `fi_trecvmsg` with its pieces
//!   as the scatter list, or a bounce buffer when they are too many), any source
//!   (the rank is in the match bits); the completion brings the tag, the length and, in the CQ
//!   data, the sender's process.
//! - Probes: `FI_PEEK` (`| FI_CLAIM` for a matched probe, whose message is then received with
//!   `FI_CLAIM` or dropped with `FI_CLAIM | FI_DISCARD`), answered through the completion queue.
//! - Cancel: `fi_cancel`, then this engine's completion queue until the operation is reported
//!   cancelled or complete; never trusted from the call's return code.
//! - Posts the provider refuses ("try again") wait in order and are retried from progress.

use std::time::Instant;

use ch4_core::native::{self, message_credit, word_of, CancelStep, Holding, OpIndex};
use ch4_core::request::{Message, RecvState, ReqHandle, Request, RequestKind};
use ch4_core::transport::{Caps, Cx, P2p, Partner, SendOp};
use ch4_core::{AmTransport, Envelope, Error, ErrorKind, PeerState, Result, SendMode, Status};
use libfabric_sys::{
    fi_cq_tagged_entry, fi_msg_tagged, iovec, FI_ADDR_UNSPEC, FI_CLAIM, FI_DISCARD, FI_ENOMSG,
    FI_PEEK,
};

use crate::credit;
use crate::large;
use crate::netmod::{vanished, OfiNetmod, Op, OpKind, Payload, Peeked, QueuedRecv, QueuedSend};
use crate::provider::{self, Completions, CqError, Posted};
use crate::tag;

/// The engine of [`OfiNetmod`] (all its state lives in the netmod and the core's requests).
pub struct OfiEngine;

type Net = OfiNetmod;

/// Completions read per `fi_cq_read`.
const CQ_BATCH: usize = 32;

impl P2p<Net> for OfiEngine {
    const NATIVE_MATCHING: bool = true;
    const TAG_UB: i32 = tag::TAG_UB;

    fn caps(net: &Net) -> Caps {
        let (iov_limit, max_message) = match &net.ep {
            // Past the largest message the provider takes, messages go by RMA read.
            Some(ep) if ep.rma_unusable().is_none() => (ep.info().iov_limit(), usize::MAX),
            Some(ep) => (ep.info().iov_limit(), net.max_msg),
            None => (usize::MAX, usize::MAX),
        };
        Caps {
            tag_ub: tag::TAG_UB,
            max_processes: tag::MAX_PROCESSES,
            detects_unmatched_ready: false,
            fills_truncated: truncation_fills(net),
            iov_limit,
            max_message,
        }
    }

    #[inline]
    fn isend<P: Partner>(cx: &mut Cx<'_, Net, P>, op: SendOp) -> Result<ReqHandle> {
        let mut sync = op.mode == SendMode::Synchronous;
        let bits = tag::send_tag(&op.env)?;
        let total = op.buf.packed_len();
        if total > cx.transport.read_above {
            // Longer than the provider takes (or than rxm's eager limit: see
            // `netmod::read_above`): the receiver reads it from the user's buffer once it has
            // matched it.
            return large::start_send(cx, op, bits, total);
        }
        let mut uncredited = 0;
        if !message_credit::take(cx.core, cx.route, op.dest, cx.transport.message_price) {
            // Beyond the receiver's credit (see `crate::credit`): a message no longer than
            // what the provider holds for a stub goes whole, as a synchronous send that owes
            // no credit; a longer one is read by the receiver once it has matched it.
            if total > cx.transport.message_price && large::usable(cx.transport) {
                return large::start_send(cx, op, bits, total);
            }
            went_without_credit(cx.transport);
            uncredited = tag::UNCREDITED;
            sync = true;
        }
        let net = &mut *cx.transport;
        if !sync && total <= net.inject {
            if let Some(data) = op.buf.contiguous() {
                let q = QueuedSend {
                    dest: op.dest,
                    tag: bits,
                    data: tag::cq_data(net.me, 0),
                    payload: Payload::Copy(Vec::new()),
                };
                if net.sends.is_empty() {
                    // The provider copies it: done at once, with no request.
                    if net
                        .ep()?
                        .tinjectdata(data, q.data, u64::from(op.dest), bits)?
                        == Posted::Done
                    {
                        return Ok(ReqHandle::DONE);
                    }
                }
                net.sends.push_back(QueuedSend {
                    payload: Payload::Copy(data.to_vec()),
                    ..q
                });
                return Ok(ReqHandle::DONE);
            }
        }
        start_send(cx, op, bits, total, sync, uncredited)
    }

    fn irecv<P: Partner>(
        cx: &mut Cx<'_, Net, P>,
        req: ReqHandle,
        want: &Envelope,
        from: Option<ch4_core::Gpid>,
    ) -> Result<()> {
        let Some(r) = cx.core.requests.get_mut(req).and_then(Request::recv_mut) else {
            return Err(Error::new(
                ErrorKind::Internal,
                "OFI irecv on a non-receive",
            ));
        };
        let (bits, ignore) = tag::recv_tag(want)?;
        let net = &mut *cx.transport;
        let (i, dst, cap) = recv_slot(net, req, r)?;
        let posted = net.recv_in_order(QueuedRecv {
            op: i,
            dst,
            cap,
            bits,
            ignore,
            src: net.source_address(from),
            // The program's traffic is on even context ids, each communicator's collectives
            // on the odd one after (`ch4_core::comm::Comm::coll_context`).
            program: want.context % 2 == 0,
        });
        if posted.is_err() {
            net.ops.remove(i);
            r.engine = 0;
        }
        posted
    }

    fn cancel_recv<P: Partner>(cx: &mut Cx<'_, Net, P>, req: ReqHandle) -> Result<bool> {
        let op = match native::begin_cancel(cx.core, req) {
            CancelStep::Answered(cancelled) => return Ok(cancelled),
            CancelStep::Ask(op) => op,
        };
        let net = &mut *cx.transport;
        let Some(r) = cx.core.requests.get_mut(req).and_then(Request::recv_mut) else {
            return Ok(true);
        };
        let Some(i) = op.filter(|&i| net.ops.get(i).is_some_and(|o| o.req == req)) else {
            // No operation in the provider (the endpoint was closed, ending them all).
            native::released(r);
            return Ok(true);
        };
        // Not yet handed to the provider: take it back, cancelled for certain.
        if net.unqueue_recv(i) {
            net.ops.remove(i);
            native::released(r);
            return Ok(true);
        }
        let ctx = net.ops.context_ptr(i).ok_or_else(vanished)?;
        // SAFETY: `ctx` is the context of this endpoint's outstanding receive `i`.
        unsafe { net.ep()?.cancel(ctx)? };
        // The answer comes through the completion queue: cancelled, or completed after all.
        drive_until_released(cx, i, req)?;
        Ok(native::cancel_answer(cx.core, req))
    }

    /// A blocking send waits for its receiver's credit (see [`crate::credit`]), unless it
    /// goes by RMA read anyway.
    #[inline(always)]
    fn send_ready<P: Partner>(cx: &mut Cx<'_, Net, P>, dest: ch4_core::Gpid, total: usize) -> bool {
        total > cx.transport.read_above
            || message_credit::available(cx.core, cx.route, dest, cx.transport.message_price)
    }

    fn cancel_send<P: Partner>(_cx: &mut Cx<'_, Net, P>, _req: ReqHandle) -> Result<()> {
        // A tagged send cannot be taken back from the provider: the cancel fails, as MPI
        // allows, and the send completes normally.
        Ok(())
    }

    fn iprobe<P: Partner>(
        cx: &mut Cx<'_, Net, P>,
        want: &Envelope,
        from: Option<ch4_core::Gpid>,
    ) -> Result<Option<Status>> {
        Ok(peek(cx, want, false, from)?.map(|(_, p)| probe_status(&p)))
    }

    fn improbe<P: Partner>(
        cx: &mut Cx<'_, Net, P>,
        want: &Envelope,
        from: Option<ch4_core::Gpid>,
    ) -> Result<Option<(Message, Status)>> {
        let Some((i, p)) = peek(cx, want, true, from)? else {
            return Ok(None);
        };
        let (source, tag) = tag::source_and_tag(p.bits);
        let (src, _) = tag::from_cq_data(p.data);
        let env = Envelope {
            context: want.context,
            source,
            tag,
        };
        Ok(Some((
            Message::Native {
                env,
                src,
                token: u64::from(i),
            },
            probe_status(&p),
        )))
    }

    fn imrecv<P: Partner>(cx: &mut Cx<'_, Net, P>, msg: Message, req: ReqHandle) -> Result<()> {
        let Message::Native { token, .. } = msg else {
            return Err(Error::new(
                ErrorKind::Internal,
                "a message of the core's queues handed to the OFI engine",
            ));
        };
        let net = &mut *cx.transport;
        let i = token as OpIndex;
        let Some(Op {
            kind: OpKind::Claimed(peeked),
            ..
        }) = net.ops.get(i)
        else {
            return Err(Error::new(
                ErrorKind::Request,
                "matched-probe message already received",
            ));
        };
        let peeked = *peeked;
        let Some(r) = cx.core.requests.get_mut(req).and_then(Request::recv_mut) else {
            return Err(Error::new(
                ErrorKind::Internal,
                "OFI imrecv on a non-receive",
            ));
        };
        let rx_limit = net.ep()?.info().rx_iov_limit();
        let (dst, cap, (bounce, pieces)) = landing(r, rx_limit, &mut net.stub_rooms);
        if let Some(o) = net.ops.get_mut(i) {
            *o = Op {
                req,
                kind: OpKind::Recv,
                bounce,
                pieces,
            };
        }
        let dst = match net.ops.get_mut(i).and_then(|o| o.bounce.as_mut()) {
            Some(b) => b.as_mut_ptr(),
            None => dst,
        };
        r.engine = word_of(i);
        let one = [iovec {
            iov_base: dst.cast(),
            iov_len: cap,
        }];
        let iov: *const [iovec] = match net.ops.get(i).and_then(|o| o.pieces.as_deref()) {
            Some(p) => p,
            None => &one,
        };
        // SAFETY: `iov` points either at `one`, alive to the end of this function, or at the
        // operation's own pieces, which nothing touches until its completion.
        claim(net, i, &peeked, Some(unsafe { &*iov }), FI_CLAIM)
    }

    fn discard<P: Partner>(cx: &mut Cx<'_, Net, P>, msg: Message) -> Result<()> {
        let Message::Native { token, .. } = msg else {
            return Ok(());
        };
        let net = &mut *cx.transport;
        let i = token as OpIndex;
        let Some(Op {
            kind: OpKind::Claimed(p),
            ..
        }) = net.ops.get(i)
        else {
            return Ok(());
        };
        let p = *p;
        if tag::is_inline(p.data) {
            // A large message's stub that carries its acknowledgement name: receive it to
            // learn the name, then let the sender go unread (on its completion).
            let mut b = vec![0u8; tag::INLINE_STUB_BYTES];
            let one = [iov_of(b.as_mut_ptr(), b.len())];
            if let Some(o) = net.ops.get_mut(i) {
                o.kind = OpKind::Discarding;
                // The vector's heap block does not move with it: `one` still points into it.
                o.bounce = Some(b);
            }
            return claim(net, i, &p, Some(&one), FI_CLAIM);
        }
        // The message matched (the probe took it): a synchronous sender is acknowledged, and
        // a large message's sender let go unread.
        acknowledge(net, p.data)?;
        if tag::is_large(p.data) {
            net.descriptors.remove(&tag::from_cq_data(p.data));
        }
        if let Some(o) = net.ops.get_mut(i) {
            o.kind = OpKind::Discarding;
        }
        claim(net, i, &p, None, FI_CLAIM | FI_DISCARD)?;
        if !tag::is_large(p.data) {
            credit::consumed(cx, p.data);
        }
        Ok(())
    }

    fn quiesce<P: Partner>(cx: &mut Cx<'_, Net, P>, req: ReqHandle) -> Result<()> {
        let op = match native::holding(cx.core, req) {
            // Whatever the cancel's answer, the operation has ended once it comes.
            Holding::PostedReceive => return Self::cancel_recv(cx, req).map(drop),
            Holding::Op(op) => op,
        };
        let net = &mut *cx.transport;
        let Some(i) = op.filter(|&i| net.ops.get(i).is_some_and(|o| o.req == req)) else {
            return Ok(());
        };
        // A large receive waiting only for refused reads holds nothing in the provider.
        if large::end_if_idle(cx, i)? {
            return Ok(());
        }
        let net = &mut *cx.transport;
        // A send the provider refused is still queued here: take it back.
        let queued = net.sends.len();
        net.sends.retain(|q| q.payload.op() != Some(i));
        if net.sends.len() < queued {
            net.ops.remove(i);
            if let Some(s) = cx.core.requests.get_mut(req).and_then(Request::send_mut) {
                s.engine = 0;
            }
            return Ok(());
        }
        // A large send waits for its receiver's acknowledgement, which may never come: stop
        // waiting (the region closes with it).
        if large::stop_waiting_for_ack(net, i)? {
            if let Some(s) = cx.core.requests.get_mut(req).and_then(Request::send_mut) {
                s.engine = 0;
            }
            return Ok(());
        }
        drive_until_released(cx, i, req)
    }

    #[inline]
    fn progress<P: Partner>(cx: &mut Cx<'_, Net, P>) -> Result<usize> {
        progress_own(cx)
    }
}

/// Counts a nonblocking send short enough to go whole that went without its receiver's
/// credit (and so as a synchronous send: see `isend`).
#[cold]
fn went_without_credit(net: &mut Net) {
    net.uncredited_sends += 1;
}

/// The send path past the inject case: a request, an operation slot, and the message posted
/// from the user's buffer (or queued behind earlier refused ones).
fn start_send<P: Partner>(
    cx: &mut Cx<'_, Net, P>,
    op: SendOp,
    bits: u64,
    total: usize,
    sync: bool,
    uncredited: u32,
) -> Result<ReqHandle> {
    let dest = op.dest;
    let staging: Staging = match op.buf.raw_parts() {
        Some(_) => (None, None),
        None => {
            let limit = cx.transport.ep()?.info().iov_limit();
            match op.buf.segments(0, total, limit) {
                Some(p) => (
                    None,
                    Some(p.iter().map(|s| iov_of(s.as_ptr(), s.len())).collect()),
                ),
                None => (Some(op.buf.to_vec()?), None),
            }
        }
    };
    let h = cx.core.requests.insert(Request::handed_to_network(
        cx.route,
        op,
        total,
        1 + u8::from(sync),
    ))?;
    let started = post_send(cx, h, dest, bits, sync, uncredited, staging);
    if let Err(e) = started {
        // Nothing reached the provider (posting failed outright): forget the operations.
        let net = &mut *cx.transport;
        let ids: Vec<OpIndex> = net
            .ops
            .iter()
            .filter(|(_, o)| o.req == h)
            .map(|(i, _)| i)
            .collect();
        for i in ids {
            net.ops.remove(i);
        }
        cx.core.requests.remove(h);
        return Err(e);
    }
    Ok(h)
}

fn post_send<P: Partner>(
    cx: &mut Cx<'_, Net, P>,
    h: ReqHandle,
    dest: ch4_core::Gpid,
    bits: u64,
    sync: bool,
    uncredited: u32,
    (bounce, pieces): Staging,
) -> Result<()> {
    let net = &mut *cx.transport;
    let mut ack = 0u32;
    if sync {
        // The acknowledgement's receive goes first, so the acknowledgement never waits.
        let a = net.ops.insert(Op {
            req: h,
            kind: OpKind::AckRecv,
            bounce: None,
            pieces: None,
        });
        // On an error the caller forgets this operation with the request's others.
        ack = tag::ack_name_of(a)?;
        net.recv_in_order(QueuedRecv {
            op: a,
            dst: std::ptr::null_mut(),
            cap: 0,
            bits: tag::ack_tag(ack),
            ignore: 0,
            // Only the receiver acknowledges.
            src: net.source_address(Some(dest)),
            program: false,
        })?;
    }
    let i = net.ops.insert(Op {
        req: h,
        kind: OpKind::Send,
        bounce,
        pieces,
    });
    let Some(Request {
        kind: RequestKind::Send(s),
        ..
    }) = cx.core.requests.get_mut(h)
    else {
        return Err(Error::new(ErrorKind::Internal, "OFI send request vanished"));
    };
    s.engine = word_of(i);
    let payload = match (
        net.ops
            .get(i)
            .map(|o| (o.bounce.as_ref(), o.pieces.is_some())),
        s.buf.raw_parts(),
    ) {
        (Some((_, true)), _) => Payload::Gather { op: i },
        (Some((Some(b), _)), _) => Payload::Raw {
            ptr: b.as_ptr(),
            len: b.len(),
            op: i,
        },
        (Some(_), Some((ptr, len))) => Payload::Raw { ptr, len, op: i },
        _ => return Err(vanished()),
    };
    net.send_in_order(QueuedSend {
        dest,
        tag: bits,
        data: tag::cq_data(net.me, ack | uncredited),
        payload,
    })
}

/// Where a buffer with a layout is staged for the provider: a packed copy, or its pieces.
type Staging = (Option<Vec<u8>>, Option<Box<[iovec]>>);

/// One entry of a gather or scatter list.
fn iov_of(ptr: *const u8, len: usize) -> iovec {
    iovec {
        iov_base: ptr as *mut std::ffi::c_void,
        iov_len: len,
    }
}

/// Takes an operation slot for receive `req` and says where the provider writes.
fn recv_slot(
    net: &mut Net,
    req: ReqHandle,
    r: &mut RecvState,
) -> Result<(OpIndex, *mut u8, usize)> {
    let rx_limit = net.ep()?.info().rx_iov_limit();
    let (dst, cap, (bounce, pieces)) = landing(r, rx_limit, &mut net.stub_rooms);
    let i = net.ops.insert(Op {
        req,
        kind: OpKind::Recv,
        bounce,
        pieces,
    });
    r.engine = word_of(i);
    let dst = match net.ops.get_mut(i).and_then(|o| o.bounce.as_mut()) {
        Some(b) => b.as_mut_ptr(),
        None => dst,
    };
    Ok((i, dst, cap))
}

/// Where a receive lands: the user's buffer through its raw parts; for a buffer with a
/// layout, its pieces as a scatter list when there are at most `rx_limit` of them, else a
/// bounce buffer of its capacity (the pointer is then the bounce buffer's, fixed once the
/// buffer is in its slot). A receive shorter than a large message's stub
/// ([`tag::INLINE_STUB_BYTES`]) lands in a bounce buffer of the stub's size, so that a stub
/// it matches arrives whole; one of `spare` if there is one (small receives are the common
/// ones: no allocation for each).
fn landing(
    r: &mut RecvState,
    rx_limit: usize,
    spare: &mut Vec<Vec<u8>>,
) -> (*mut u8, usize, Staging) {
    let cap = r.buf.capacity();
    if cap < tag::INLINE_STUB_BYTES {
        // Room for a large message's stub, which carries what the read needs: a shorter
        // message is copied out (and a longer one reported truncated) by `finish_recv`.
        let room = spare
            .pop()
            .unwrap_or_else(|| vec![0u8; tag::INLINE_STUB_BYTES]);
        return (std::ptr::null_mut(), room.len(), (Some(room), None));
    }
    if let Some((p, n)) = r.buf.raw_parts() {
        return (p, n, (None, None));
    }
    if let Some(pieces) = r.buf.segments_mut(0, cap, rx_limit) {
        let iov = pieces.iter().map(|s| iov_of(s.as_ptr(), s.len())).collect();
        return (std::ptr::null_mut(), cap, (None, Some(iov)));
    }
    (std::ptr::null_mut(), cap, (Some(vec![0u8; cap]), None))
}

/// A `FI_CLAIM` receive (or discard) of the message operation `i` claimed.
fn claim(
    net: &mut Net,
    i: OpIndex,
    peeked: &Peeked,
    iov: Option<&[iovec]>,
    flags: u64,
) -> Result<()> {
    let ctx = net.ops.context_ptr(i).ok_or_else(vanished)?;
    // The claimed message's own tag and source: libfabric 1.17's rxm finds the message by the
    // context alone, 2.x's tcp provider matches the claim against the message like a receive.
    let msg = fi_msg_tagged {
        msg_iov: iov.map_or(std::ptr::null(), |v| v.as_ptr()),
        desc: std::ptr::null_mut(),
        iov_count: iov.map_or(0, |v| v.len()),
        addr: FI_ADDR_UNSPEC,
        tag: peeked.bits,
        ignore: 0,
        context: ctx.cast(),
        data: 0,
    };
    // SAFETY: the iovec (if any) describes the receive's landing place, kept by the device
    // until the completion is read; `ctx` is the claimed operation's fixed slot, as FI_CLAIM
    // requires (the peek's context).
    match unsafe { net.ep()?.trecvmsg(&msg, flags)? } {
        Posted::Done => Ok(()),
        Posted::Again | Posted::NoMessage => Err(Error::new(
            ErrorKind::Exhausted,
            "the provider refused a claimed receive for now; try again",
        )),
    }
}

/// A probe: posts a peek and reads this engine's completions until its answer is in. With
/// `claim`, a found message stays claimed in the returned slot. A probe that names its source
/// looks only at what came from that process's address, as its receive would
/// (`OfiNetmod::source_address`).
fn peek<P: Partner>(
    cx: &mut Cx<'_, Net, P>,
    want: &Envelope,
    claim: bool,
    from: Option<ch4_core::Gpid>,
) -> Result<Option<(OpIndex, Peeked)>> {
    let (bits, ignore) = tag::recv_tag(want)?;
    let net = &mut *cx.transport;
    let i = net.ops.insert(Op {
        req: ReqHandle::DONE,
        kind: OpKind::Peek { claim, found: None },
        bounce: None,
        pieces: None,
    });
    let ctx = net.ops.context_ptr(i).ok_or_else(vanished)?;
    let msg = fi_msg_tagged {
        msg_iov: std::ptr::null(),
        desc: std::ptr::null_mut(),
        iov_count: 0,
        addr: net.source_address(from),
        tag: bits,
        ignore,
        context: ctx.cast(),
        data: 0,
    };
    let flags = if claim { FI_PEEK | FI_CLAIM } else { FI_PEEK };
    // SAFETY: a peek moves no data; `ctx` is the fixed slot of operation `i`, freed only
    // after its completion is read below (or the endpoint closed).
    let posted = unsafe { net.ep().and_then(|ep| ep.trecvmsg(&msg, flags)) };
    match posted {
        Ok(Posted::Done) => {}
        Ok(Posted::Again | Posted::NoMessage) => {
            // No room to ask now, or nothing there: nothing found yet, as an iprobe may say.
            net.ops.remove(i);
            return Ok(None);
        }
        Err(e) => {
            net.ops.remove(i);
            return Err(e);
        }
    }
    let start = Instant::now();
    let limit = cx.core.config.cancel_limit;
    loop {
        match cx.transport.ops.get(i).map(|o| &o.kind) {
            Some(OpKind::Peek { found: Some(_), .. }) | Some(OpKind::Claimed(_)) => break,
            Some(_) => {}
            None => return Ok(None), // answered "no message" (or the endpoint closed)
        }
        if start.elapsed() > limit {
            close_and_fail(cx, "an operation would not end");
            return Err(Error::new(
                ErrorKind::Pending,
                format!("the provider did not answer a probe within {limit:?}"),
            ));
        }
        progress_own(cx)?;
    }
    let net = &mut *cx.transport;
    let found = match net.ops.get(i).map(|o| &o.kind) {
        Some(OpKind::Claimed(p)) => (i, *p),
        Some(OpKind::Peek { found: Some(p), .. }) => {
            let p = *p;
            net.ops.remove(i);
            (i, p)
        }
        _ => return Ok(None),
    };
    let (i, mut p) = found;
    if tag::is_large(p.data) {
        // The stub's length is 0: the message's is in its descriptor.
        p.len = large::probed_len(cx, &p)?;
    }
    Ok(Some((i, p)))
}

fn probe_status(p: &Peeked) -> Status {
    let (source, tag) = tag::source_and_tag(p.bits);
    Status::ok(source, tag, p.len)
}

/// Answers a synchronous sender whose message (its CQ `data` names an acknowledgement)
/// matched here.
pub(crate) fn acknowledge(net: &mut Net, data: u64) -> Result<()> {
    if tag::is_inline(data) {
        // Its low bits are a length, not a name: the name is in the stub's payload (see
        // `large::inline_data`). Only a malformed message gets here.
        tracing::error!(data, "no acknowledgement for a stub's raw CQ data");
        return Ok(());
    }
    let (src, _) = tag::from_cq_data(data);
    let ack = tag::ack_name(data);
    if ack == 0 {
        return Ok(());
    }
    net.send_in_order(QueuedSend {
        dest: src,
        tag: tag::ack_tag(ack),
        data: tag::cq_data(net.me, 0),
        payload: Payload::Copy(Vec::new()),
    })
}

/// One progress step of this engine alone: refused posts retried, then completions read in
/// batches until the queue is empty.
pub(crate) fn progress_own<P: Partner>(cx: &mut Cx<'_, Net, P>) -> Result<usize> {
    if cx.transport.ep.is_none() {
        return Ok(0);
    }
    let mut n = cx.transport.retry_queued()?;
    if n == 0 && !cx.transport.sends.is_empty() {
        drop_sends_to_a_gone_peer(cx);
    }
    if !cx.transport.credit_out.is_empty() {
        credit::retry_refused(cx.transport);
    }
    if !cx.transport.reading.is_empty() {
        large::post_refused_reads(cx)?;
    }
    if !cx.transport.suspects.is_empty() {
        large::recheck_suspects(cx)?;
    }
    let mut entries = [fi_cq_tagged_entry::default(); CQ_BATCH];
    // A completion may close the endpoint (see `close_and_fail`): then the loop ends.
    while let Some(ep) = &cx.transport.ep {
        match ep.poll(&mut entries)? {
            Completions::Read(0) => break,
            Completions::Read(k) => {
                for e in &entries[..k] {
                    completed(cx, e)?;
                }
                n += k;
                if k < CQ_BATCH {
                    break;
                }
            }
            Completions::Failed(e) => {
                failed(cx, &e)?;
                n += 1;
            }
        }
    }
    Ok(n)
}

/// The queue's first send was refused again: if its receiver is gone (rxm refuses a dead
/// peer's sends for ever, trying to reconnect), drop every queued send to it, so that the
/// sends to live peers behind them go. A send with a request fails it with `PeerFailed`;
/// copies (small messages the program already counts as sent, acknowledgements, credit)
/// just go. Order holds: only that receiver's sends leave the queue.
#[cold]
fn drop_sends_to_a_gone_peer<P: Partner>(cx: &mut Cx<'_, Net, P>) {
    let net = &mut *cx.transport;
    let Some(dest) = net.sends.front().map(|q| q.dest) else {
        return;
    };
    if net.peer_state(dest) == PeerState::Alive {
        return;
    }
    let mut failed = Vec::new();
    net.sends.retain(|q| {
        if q.dest != dest {
            return true;
        }
        failed.extend(q.payload.op());
        false
    });
    tracing::warn!(dest, "dropping queued sends to a process that is gone");
    for i in failed {
        let Some(op) = net.ops.remove(i) else {
            continue;
        };
        if let Some(req) = cx.core.requests.get_mut(op.req) {
            if let RequestKind::Send(s) = &mut req.kind {
                s.engine = 0;
            }
            req.status.error = Some(ErrorKind::PeerFailed);
            req.complete = true;
        }
    }
}

/// A successful completion.
fn completed<P: Partner>(cx: &mut Cx<'_, Net, P>, e: &fi_cq_tagged_entry) -> Result<()> {
    let net = &mut *cx.transport;
    // A context the table does not know is stale (its request went after a quiesce): drop it.
    let Some(i) = net.ops.find(e.op_context.cast()) else {
        return Ok(());
    };
    let Some(op) = net.ops.get_mut(i) else {
        return Ok(());
    };
    if let OpKind::Peek { claim, found } = &mut op.kind {
        let p = Peeked {
            bits: e.tag,
            len: e.len,
            data: e.data,
        };
        if *claim {
            op.kind = OpKind::Claimed(p);
        } else {
            *found = Some(p);
        }
        return Ok(());
    }
    net.left_provider(i);
    let Some(op) = net.ops.remove(i) else {
        return Ok(());
    };
    match op.kind {
        OpKind::Send => {
            if let Some(s) = cx.core.requests.get_mut(op.req).and_then(Request::send_mut) {
                s.engine = 0;
                cx.core.send_event_done(op.req);
            }
        }
        OpKind::AckRecv => {
            if cx.core.requests.get(op.req).is_some() {
                cx.core.send_event_done(op.req);
            }
        }
        OpKind::Recv if tag::is_large(e.data) => large::stub_matched(cx, op, e.tag, e.data, e.len)?,
        OpKind::Recv => finish_recv(cx, op, e.tag, e.data, e.len, false)?,
        OpKind::LargeAck(region) => large::acknowledged(cx, op.req, region, None),
        OpKind::Control { .. } => large::descriptor_in(cx, op, e.tag, e.len)?,
        OpKind::ReadChunk { parent } => large::read_done(cx, parent, None)?,
        OpKind::CreditRecv => {
            cx.transport.credit_receives -= 1;
            credit::returned(cx, e.data)?;
        }
        OpKind::Discarding if tag::is_inline(e.data) => {
            let stub = op.bounce.as_deref().and_then(|b| b.get(..e.len));
            match stub.and_then(large::parse_inline_stub) {
                Some((ack, _)) => acknowledge(cx.transport, large::inline_data(e.data, ack))?,
                None => tracing::error!("a discarded large message's stub was malformed"),
            }
        }
        OpKind::Discarding | OpKind::Claimed(_) | OpKind::Peek { .. } | OpKind::LargeRecv(_) => {}
    }
    Ok(())
}

/// A receive's data is in: unpack a bounce buffer, acknowledge a synchronous sender, complete.
pub(crate) fn finish_recv<P: Partner>(
    cx: &mut Cx<'_, Net, P>,
    op: Op,
    bits: u64,
    data: u64,
    len: usize,
    truncated: bool,
) -> Result<()> {
    acknowledge(cx.transport, data)?;
    if !tag::is_large(data) {
        credit::consumed(cx, data);
    }
    let Some(r) = cx.core.requests.get_mut(op.req).and_then(Request::recv_mut) else {
        return Ok(()); // the receive is gone (its completion came after a quiesce)
    };
    let (source, tag) = tag::source_and_tag(bits);
    native::released(r);
    r.source_process = tag::from_cq_data(data).0;
    let written = match &op.bounce {
        Some(b) => r.buf.write_at(0, &b[..len.min(b.len())]),
        None => len.min(r.buf.capacity()),
    };
    let mut st = Status::ok(source, tag, written);
    // A bounce buffer may hold more than the receive's capacity (see `landing`).
    if truncated || len > r.buf.capacity() {
        st.error = Some(ErrorKind::Truncate);
    }
    cx.core.complete_recv(op.req, st);
    cx.transport.keep_stub_room(op.bounce);
    Ok(())
}

/// An error completion: a cancelled or truncated receive, a probe that found nothing, a failed
/// operation.
fn failed<P: Partner>(cx: &mut Cx<'_, Net, P>, e: &CqError) -> Result<()> {
    let net = &mut *cx.transport;
    let Some(i) = net.ops.find(e.op_context.cast()) else {
        return Ok(());
    };
    if let Some(Op {
        kind: OpKind::Peek { .. },
        ..
    }) = net.ops.get(i)
    {
        // FI_ENOMSG: nothing matches (any other error: nothing we can report as found).
        if e.err != FI_ENOMSG {
            tracing::warn!(error = %net.ep()?.completion_error(e), "a probe failed");
        }
        net.ops.remove(i);
        return Ok(());
    }
    let error = net.ep()?.completion_error(e);
    net.left_provider(i);
    let Some(op) = net.ops.remove(i) else {
        return Ok(());
    };
    match op.kind {
        OpKind::Recv if e.is_canceled() => {
            if let Some(r) = cx.core.requests.get_mut(op.req).and_then(Request::recv_mut) {
                native::released(r);
            }
        }
        OpKind::Recv if e.is_truncation() => {
            // libfabric 1.17 reports neither the message's length nor what it wrote (len and
            // olen are 0): where the provider is known to fill the buffer, all of it counts
            // as delivered (a packed bounce buffer is unpacked); elsewhere none of it.
            let delivered = if e.len > 0 {
                e.len
            } else if truncation_fills(cx.transport) {
                usize::MAX
            } else {
                0
            };
            finish_recv(cx, op, e.tag, e.data, delivered, true)?;
            if truncation_breaks_endpoint(cx.transport) {
                // libfabric 1.17's tcp;ofi_rxm with dynamic receive buffers (turned off by
                // this crate unless the user turned them on) stops delivering on an endpoint
                // once it has truncated a message (libfabric issue 8274, fixed in 1.18): close
                // it, so that everything waiting on it fails with this reason, not a hang.
                tracing::error!(
                    "a truncated receive wedged libfabric 1.17's tcp;ofi_rxm endpoint; closing it"
                );
                close_and_fail(
                    cx,
                    "a truncated receive wedged libfabric 1.17's tcp;ofi_rxm",
                );
            }
        }
        OpKind::Recv | OpKind::Send => {
            if let Some(req) = cx.core.requests.get_mut(op.req) {
                match &mut req.kind {
                    RequestKind::Recv(r) => {
                        native::released(r);
                    }
                    RequestKind::Send(s) => s.engine = 0,
                    RequestKind::Done | RequestKind::Schedule => {}
                }
                req.status.error = Some(error.kind());
                req.complete = true;
            }
            tracing::warn!(%error, "an OFI operation failed");
        }
        OpKind::AckRecv if e.is_canceled() => {}
        OpKind::AckRecv => {
            if let Some(req) = cx.core.requests.get_mut(op.req) {
                req.status.error = Some(error.kind());
                req.complete = true;
            }
        }
        OpKind::LargeAck(region) => {
            large::acknowledged(cx, op.req, region, Some(error.kind()));
            tracing::warn!(%error, "a large message's acknowledgement failed");
        }
        OpKind::Control {
            parent: Some(parent),
        } => {
            tracing::warn!(%error, "a large message's descriptor could not be received");
            large::fail(cx, parent, error.kind())?;
        }
        OpKind::ReadChunk { parent } => {
            tracing::warn!(%error, "a large message's read failed");
            large::read_done(cx, parent, Some(error.kind()))?;
        }
        OpKind::CreditRecv => {
            cx.transport.credit_receives -= 1;
            if !e.is_canceled() {
                tracing::warn!(%error, "a receive for returned credit failed; posting another");
                credit::post_receive(cx.transport)?;
            }
        }
        OpKind::Control { parent: None }
        | OpKind::Discarding
        | OpKind::Claimed(_)
        | OpKind::Peek { .. }
        | OpKind::LargeRecv(_) => {}
    }
    Ok(())
}

/// Whether this provider writes the part of a truncated message that fits: `tcp;ofi_rxm` does
/// when it receives through its own buffers (not with 1.17's dynamic receive buffers, which
/// write nothing); other providers are not relied on.
fn truncation_fills(net: &Net) -> bool {
    net.ep.as_ref().is_some_and(|ep| {
        ep.info().provider().contains("ofi_rxm") && !provider::rxm_truncation_breaks_endpoint()
    })
}

/// Whether this provider stops working after truncating a message (libfabric < 1.18's rxm
/// with dynamic receive buffers).
fn truncation_breaks_endpoint(net: &Net) -> bool {
    net.ep.as_ref().is_some_and(|ep| {
        ep.info().provider().contains("ofi_rxm") && provider::rxm_truncation_breaks_endpoint()
    })
}

/// Closes the endpoint (ending every operation on it, so nothing writes a posted buffer any
/// more) and fails every request that had an operation there: they can no longer complete.
pub(crate) fn close_and_fail<P: Partner>(cx: &mut Cx<'_, Net, P>, why: &'static str) {
    let reqs: Vec<ReqHandle> = cx.transport.ops.iter().map(|(_, o)| o.req).collect();
    cx.transport.close(why);
    native::fail_all(cx.core, reqs, ErrorKind::Transport);
}

/// Reads this engine's completions until operation `i` of request `req` has been reported
/// (its slot freed), within the device's cancel limit; past it the endpoint is closed, which
/// ends every operation on it.
fn drive_until_released<P: Partner>(
    cx: &mut Cx<'_, Net, P>,
    i: OpIndex,
    req: ReqHandle,
) -> Result<()> {
    native::drive_until_released(
        cx,
        |net| net.ops.get(i).is_some_and(|o| o.req == req),
        progress_own,
        |cx| close_and_fail(cx, "an operation would not end"),
    )
}

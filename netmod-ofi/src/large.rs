//! Messages longer than the provider's largest (`max_msg_size`, or `CH4_OFI_MAX_MSG_SIZE`),
//! longer than rxm's eager limit over `ofi_rxm` (whose own protocols for them crash when the
//! sender dies: see `netmod::read_above`), or beyond the receiver's eager credit: sent by RMA
//! read, the "LMT get" of MPICH's Nemesis and the "huge" protocol of its ch4:ofi.
//!
//! The sender registers the message's buffer for remote reads and injects one small message,
//! the **stub**, with the user's match bits: its 32-byte payload is the acknowledgement name and
//! the **descriptor** (length, address, key: [`Descriptor`]), its remote CQ data the sender's
//! process and the message's length with the [`tag::LARGE`] and [`tag::INLINE`] flags.
//!
//! The stub is what MPI matching sees: a receive (or probe) matches it in the provider, in
//! order with every other message from that sender. It lands where the receive's data would
//! (a receive shorter than the stub lands in a bounce buffer of the stub's size), the receiver
//! takes the descriptor from there, reads the message (or the buffer's worth of it:
//! truncation) in pieces of at most the largest message over the stub's bytes, and
//! acknowledges; the acknowledgement closes the sender's region and completes the send, which
//! is therefore synchronous whatever its mode. A probe reports the length from the CQ data; a
//! discarded matched-probe stub is received into a buffer of its own for the name, and its
//! sender acknowledged without being read.
//!
//! A message of 1 GiB or more (too long for the CQ data's 30 bits of length) sends the
//! descriptor in a message of its own first, in the control tag space named by the sender's
//! process and the acknowledgement name ([`tag::control_tag`]), and an empty stub whose CQ
//! data carries the name; the receiver fetches the descriptor with a receive of exactly that
//! tag, and a probe fetches it too to report the length, keeping it for the receive. Carrying
//! the descriptor in the stub saves that second message: against it, at 32-128 KiB over
//! `tcp;ofi_rxm` (medians of 6 interleaved rounds), `osu_latency` 0.87-0.90x and `osu_bw`
//! 1.20-1.29x.
//!
//! Unlike MPICH's ch4:ofi, no data travels with the stub: the descriptor names the whole
//! message, so a receive buffer with a layout is read into a packed copy and unpacked once.

use ch4_core::native::{self, word_of, OpIndex};
use ch4_core::request::{NativeHalf, RecvState, Request, RequestKind};
use ch4_core::transport::{Cx, Partner, SendOp};
use ch4_core::{AmTransport, Error, ErrorKind, Gpid, PeerState, ReqHandle, Result, Status};

use crate::engine::{acknowledge, close_and_fail, finish_recv, progress_own};
use crate::netmod::{
    vanished, Descriptor, LargeRecv, OfiNetmod, Op, OpKind, Payload, Peeked, QueuedRecv, QueuedSend,
};
use crate::provider::Posted;
use crate::tag;

type Net = OfiNetmod;

/// Reads of one message in flight at once: enough to keep the provider streaming, few enough
/// to leave its transmit queue to other traffic.
const READ_WINDOW: u32 = 8;

/// Whether messages can go by RMA read on this endpoint (its provider offers usable RMA and
/// injects a [`Descriptor`]).
#[inline]
pub(crate) fn usable(net: &Net) -> bool {
    net.ep
        .as_ref()
        .is_some_and(|ep| ep.rma_unusable().is_none() && net.inject >= Descriptor::SIZE)
}

/// Starts a send of `total` bytes by RMA read: more than the provider takes in one message, or
/// beyond the receiver's eager credit ([`crate::credit`]).
pub(crate) fn start_send<P: Partner>(
    cx: &mut Cx<'_, Net, P>,
    op: SendOp,
    bits: u64,
    total: usize,
) -> Result<ReqHandle> {
    let net = &mut *cx.transport;
    let max = net.max_msg;
    if let Some(why) = net.ep()?.rma_unusable() {
        return Err(Error::new(
            ErrorKind::Count,
            format!(
                "a message of {total} bytes exceeds the OFI provider's largest ({max}), and it \
                 cannot be read remotely instead: {why}"
            ),
        ));
    }
    if net.inject < Descriptor::SIZE {
        return Err(Error::new(
            ErrorKind::Count,
            format!(
                "a message of {total} bytes exceeds the OFI provider's largest ({max}), and its \
                 inject size ({}) cannot carry the descriptor of a remote read",
                net.inject
            ),
        ));
    }
    let dest = op.dest;
    let packed = match op.buf.raw_parts() {
        Some(_) => None,
        None => Some(op.buf.to_vec()?),
    };
    // Pending: the acknowledgement alone, which comes once the receiver has read everything.
    let h = cx
        .core
        .requests
        .insert(Request::handed_to_network(cx.route, op, total, 1))?;
    let net = &mut *cx.transport;
    let a = net.ops.insert(Op {
        req: h,
        kind: OpKind::LargeAck(None),
        bounce: packed,
        pieces: None,
    });
    if let Err(e) = post_send(cx, h, a, dest, bits, total) {
        cx.core.requests.remove(h);
        return Err(e);
    }
    Ok(h)
}

/// Registers the send's buffer and posts the acknowledgement's receive, the descriptor and the
/// stub, in that order.
fn post_send<P: Partner>(
    cx: &mut Cx<'_, Net, P>,
    h: ReqHandle,
    a: OpIndex,
    dest: Gpid,
    bits: u64,
    total: usize,
) -> Result<()> {
    let net = &mut *cx.transport;
    let ack = match tag::ack_name_of(a) {
        Ok(ack) => ack,
        Err(e) => {
            net.ops.remove(a);
            return Err(e);
        }
    };
    let Some(Request {
        kind: RequestKind::Send(s),
        ..
    }) = cx.core.requests.get_mut(h)
    else {
        net.ops.remove(a);
        return Err(Error::new(ErrorKind::Internal, "OFI send request vanished"));
    };
    let (ptr, len) = match (
        net.ops.get(a).and_then(|o| o.bounce.as_ref()),
        s.buf.raw_parts(),
    ) {
        (Some(b), _) => (b.as_ptr(), b.len()),
        (None, Some(parts)) => parts,
        (None, None) => {
            net.ops.remove(a);
            return Err(vanished());
        }
    };
    // SAFETY: `ptr[..len]` is the request's buffer (or the packed copy its acknowledgement
    // operation owns), which the device keeps until that operation ends (`P2p::quiesce` waits
    // for it); the region is closed when it ends, or with the endpoint.
    let region = match unsafe { net.ep().and_then(|ep| ep.register(ptr, len)) } {
        Ok(r) => r,
        Err(e) => {
            net.ops.remove(a);
            return Err(e);
        }
    };
    let desc = Descriptor {
        len: total as u64,
        addr: region.addr,
        key: region.key,
    };
    if let Some(o) = net.ops.get_mut(a) {
        o.kind = OpKind::LargeAck(Some(region));
    }
    if let Err(e) = net.recv_in_order(QueuedRecv {
        op: a,
        dst: std::ptr::null_mut(),
        cap: 0,
        bits: tag::ack_tag(ack),
        ignore: 0,
        // Only the receiver acknowledges.
        src: net.source_address(Some(dest)),
        program: false,
    }) {
        // Nothing was posted.
        take_back(net, a);
        return Err(e);
    }
    let sent = if total <= net.inline_max && net.inject >= tag::INLINE_STUB_BYTES {
        // One message: the stub carries the descriptor, its CQ data the length for probes.
        net.send_in_order(QueuedSend {
            dest,
            tag: bits,
            data: tag::cq_data(net.me, total as u32 | tag::LARGE | tag::INLINE),
            payload: Payload::Copy(inline_stub(ack, desc)),
        })
    } else {
        net.send_in_order(QueuedSend {
            dest,
            tag: tag::control_tag(net.me, ack),
            data: tag::cq_data(net.me, 0),
            payload: Payload::Copy(desc.to_bytes()),
        })
        .and_then(|()| {
            net.send_in_order(QueuedSend {
                dest,
                tag: bits,
                data: tag::cq_data(net.me, ack | tag::LARGE),
                payload: Payload::Copy(Vec::new()),
            })
        })
    };
    if let Err(e) = sent {
        // The receiver may have the descriptor but never gets the stub, so nothing reads the
        // region: take the acknowledgement's receive back.
        if net.unqueue_recv(a) {
            take_back(net, a);
        } else if let Some(ctx) = net.ops.context_ptr(a) {
            // In the provider: its cancelled completion closes the region; the request it
            // would complete is gone.
            if let Some(o) = net.ops.get_mut(a) {
                o.req = ReqHandle::DONE;
            }
            if let Ok(ep) = net.ep() {
                // SAFETY: `ctx` is the context of this endpoint's outstanding receive `a`.
                let _ = unsafe { ep.cancel(ctx) };
            }
        }
        return Err(e);
    }
    s.engine = word_of(a);
    Ok(())
}

/// The payload of a stub that carries its descriptor ([`tag::INLINE`]).
pub(crate) fn inline_stub(ack: u32, desc: Descriptor) -> Vec<u8> {
    let mut b = u64::from(ack).to_le_bytes().to_vec();
    b.extend(desc.to_bytes());
    b
}

/// The acknowledgement name and descriptor of a stub's payload, `None` unless `b` is one.
pub(crate) fn parse_inline_stub(b: &[u8]) -> Option<(u32, Descriptor)> {
    if b.len() != tag::INLINE_STUB_BYTES {
        return None;
    }
    let ack = u32::try_from(u64::from_le_bytes(b[..8].try_into().ok()?)).ok()?;
    if ack == 0 || ack & (tag::LARGE | tag::INLINE) != 0 {
        return None;
    }
    Some((ack, Descriptor::from_bytes(&b[8..])?))
}

/// The remote CQ data a stub that carries its descriptor stands for once its payload is read:
/// the old form, sender and acknowledgement name, which the rest of this module works with.
pub(crate) fn inline_data(data: u64, ack: u32) -> u64 {
    tag::cq_data((data >> 32) as Gpid, ack | tag::LARGE)
}

/// For [`P2p::quiesce`](ch4_core::transport::P2p::quiesce) of a large send: makes operation
/// `a`, if it is the send's receive for its acknowledgement, end. One the provider refused is
/// taken back at once (`true`: nothing is left); a posted one is cancelled (`false`: its
/// cancelled completion, which the caller waits for, closes the region). Without this a send
/// whose receiver died waits out the cancel limit, which then closes the endpoint.
///
/// If the receiver is alive and reading, its read fails once the region is closed: the send
/// is being abandoned, so it gets no data it could mistake for whole.
pub(crate) fn stop_waiting_for_ack(net: &mut Net, a: OpIndex) -> Result<bool> {
    if !matches!(net.ops.get(a).map(|o| &o.kind), Some(OpKind::LargeAck(_))) {
        return Ok(false);
    }
    if net.unqueue_recv(a) {
        take_back(net, a);
        return Ok(true);
    }
    if let Some(ctx) = net.ops.context_ptr(a) {
        // SAFETY: `ctx` is the context of this endpoint's outstanding receive `a`.
        unsafe { net.ep()?.cancel(ctx)? };
    }
    Ok(false)
}

/// Forgets acknowledgement operation `a`, which the provider does not hold, closing its region.
fn take_back(net: &mut Net, a: OpIndex) {
    if let Some(Op {
        kind: OpKind::LargeAck(Some(region)),
        ..
    }) = net.ops.remove(a)
    {
        if let Some(ep) = &net.ep {
            ep.deregister(region);
        }
    }
}

/// The receiver has read the message (or failed, or dropped it): close the region, complete
/// the send (with `error`, if any).
pub(crate) fn acknowledged<P: Partner>(
    cx: &mut Cx<'_, Net, P>,
    req: ReqHandle,
    region: Option<crate::provider::Region>,
    error: Option<ErrorKind>,
) {
    if let (Some(r), Some(ep)) = (region, &cx.transport.ep) {
        ep.deregister(r);
    }
    let Some(request) = cx.core.requests.get_mut(req) else {
        return;
    };
    if let RequestKind::Send(s) = &mut request.kind {
        s.engine = 0;
    }
    match error {
        None => cx.core.send_event_done(req),
        Some(kind) => {
            request.status.error = Some(kind);
            request.complete = true;
        }
    }
}

/// A receive (`op`, its slot already freed) matched the stub of a large message: the receive
/// now belongs to the network until the data is read; fetch the descriptor, then read.
pub(crate) fn stub_matched<P: Partner>(
    cx: &mut Cx<'_, Net, P>,
    op: Op,
    bits: u64,
    data: u64,
    len: usize,
) -> Result<()> {
    // A stub that carries its descriptor: read it from where the stub landed.
    let (data, inline) = if tag::is_inline(data) {
        let parsed = cx
            .core
            .requests
            .get_mut(op.req)
            .and_then(Request::recv_mut)
            .and_then(|r| landed_prefix(&op, r, len))
            .as_deref()
            .and_then(parse_inline_stub)
            .filter(|(_, d)| d.len == tag::inline_len(data) as u64);
        match parsed {
            Some((ack, desc)) => (inline_data(data, ack), Some(desc)),
            None => return malformed_stub(cx, op, bits, data, len),
        }
    } else {
        (data, None)
    };
    let (src, ack) = tag::from_cq_data(data);
    let Some(r) = cx.core.requests.get_mut(op.req).and_then(Request::recv_mut) else {
        // The receive is gone (released after an error): let the sender go.
        cx.transport.descriptors.remove(&(src, ack));
        return acknowledge(cx.transport, data);
    };
    // Matched: a cancel now answers "matched", and an ANY_SOURCE receive's other half, in the
    // core's queue, must not take a message any more.
    r.native = NativeHalf::Matched;
    r.source_process = src;
    if let Some(id) = r.posted.take() {
        cx.core.posted.remove(id);
    }
    let Some(r) = cx.core.requests.get_mut(op.req).and_then(Request::recv_mut) else {
        return Err(vanished());
    };
    let net = &mut *cx.transport;
    let h = net.ops.insert(Op {
        req: op.req,
        kind: OpKind::LargeRecv(LargeRecv {
            bits,
            data,
            dst: std::ptr::null_mut(),
            len: 0,
            desc: None,
            next: 0,
            out: 0,
            truncated: false,
            error: None,
            failed_at: None,
        }),
        bounce: None,
        pieces: None,
    });
    r.engine = word_of(h);
    match inline.or_else(|| net.descriptors.remove(&(src, ack))) {
        Some(d) => start_reads(cx, h, d),
        None => fetch_descriptor(net, op.req, Some(h), src, ack),
    }
}

/// The first `n` bytes a completed receive wrote where it landed (its bounce buffer, its
/// scatter list or the user's contiguous buffer); `None` if it has fewer.
fn landed_prefix(op: &Op, r: &mut RecvState, n: usize) -> Option<Vec<u8>> {
    if let Some(b) = &op.bounce {
        return b.get(..n).map(<[u8]>::to_vec);
    }
    if let Some(pieces) = &op.pieces {
        let mut out = Vec::with_capacity(n);
        for p in pieces.iter() {
            let take = p.iov_len.min(n - out.len());
            // SAFETY: each piece is a part of the receive's buffer, which the device keeps
            // until the request completes; the provider wrote it and, its completion read,
            // writes it no more.
            out.extend_from_slice(unsafe {
                std::slice::from_raw_parts(p.iov_base.cast::<u8>().cast_const(), take)
            });
            if out.len() == n {
                return Some(out);
            }
        }
        return None;
    }
    let (ptr, cap) = r.buf.raw_parts()?;
    // SAFETY: `ptr[..cap]` is the receive's contiguous buffer, kept by the device until the
    // request completes; the provider wrote it and, its completion read, writes it no more.
    (cap >= n).then(|| unsafe { std::slice::from_raw_parts(ptr.cast_const(), n) }.to_vec())
}

/// A stub that should carry its descriptor did not (a peer's bug, or memory corruption): the
/// receive fails with a protocol error; its sender cannot be named, so it is not released.
#[cold]
fn malformed_stub<P: Partner>(
    cx: &mut Cx<'_, Net, P>,
    op: Op,
    bits: u64,
    data: u64,
    len: usize,
) -> Result<()> {
    tracing::error!(
        len,
        data,
        "a large message's stub without a valid descriptor"
    );
    if let Some(req) = cx.core.requests.get_mut(op.req) {
        if let RequestKind::Recv(r) = &mut req.kind {
            native::released(r);
            r.source_process = tag::from_cq_data(data).0;
        }
        let (source, tag) = tag::source_and_tag(bits);
        req.status = Status::ok(source, tag, 0);
        req.status.error = Some(ErrorKind::Protocol);
        req.complete = true;
    }
    Ok(())
}

/// Posts the receive of the descriptor of large message `ack` from `src`, for the large
/// receive in slot `parent` (or, with `None`, for a probe).
fn fetch_descriptor(
    net: &mut Net,
    req: ReqHandle,
    parent: Option<OpIndex>,
    src: Gpid,
    ack: u32,
) -> Result<()> {
    let c = net.ops.insert(Op {
        req,
        kind: OpKind::Control { parent },
        bounce: Some(vec![0u8; Descriptor::SIZE]),
        pieces: None,
    });
    let dst = net
        .ops
        .get_mut(c)
        .and_then(|o| o.bounce.as_mut())
        .map_or(std::ptr::null_mut(), |b| b.as_mut_ptr());
    let posted = net.recv_in_order(QueuedRecv {
        op: c,
        dst,
        cap: Descriptor::SIZE,
        bits: tag::control_tag(src, ack),
        ignore: 0,
        src: net.source_address(Some(src)),
        program: false,
    });
    if posted.is_err() {
        net.ops.remove(c);
    }
    posted
}

/// A descriptor arrived (`op`, its slot freed; `bits`, its control tag).
pub(crate) fn descriptor_in<P: Partner>(
    cx: &mut Cx<'_, Net, P>,
    op: Op,
    bits: u64,
    len: usize,
) -> Result<()> {
    let OpKind::Control { parent } = op.kind else {
        return Ok(());
    };
    let desc = op
        .bounce
        .as_deref()
        .and_then(|b| Descriptor::from_bytes(&b[..len.min(b.len())]));
    let Some(desc) = desc else {
        tracing::error!(len, "a malformed large-message descriptor");
        if let Some(h) = parent {
            fail(cx, h, ErrorKind::Transport)?;
        }
        return Ok(());
    };
    match parent {
        Some(h) => start_reads(cx, h, desc),
        None => {
            let sender = ((bits >> 32) & ((1 << tag::RANK_BITS) - 1)) as Gpid;
            cx.transport.descriptors.insert((sender, bits as u32), desc);
            Ok(())
        }
    }
}

/// The large receive in slot `h` knows what to read: choose where it lands, then read.
fn start_reads<P: Partner>(cx: &mut Cx<'_, Net, P>, h: OpIndex, desc: Descriptor) -> Result<()> {
    let net = &mut *cx.transport;
    let Some(req) = net.ops.get(h).map(|o| o.req) else {
        return Ok(());
    };
    let Some(r) = cx.core.requests.get_mut(req).and_then(Request::recv_mut) else {
        return Err(vanished());
    };
    let total = usize::try_from(desc.len).unwrap_or(usize::MAX);
    let cap = r.buf.capacity();
    let len = total.min(cap);
    let (dst, bounce) = match r.buf.raw_parts() {
        Some((p, _)) => (p, None),
        None => {
            let mut b = vec![0u8; len];
            (b.as_mut_ptr(), Some(b))
        }
    };
    if let Some(o) = net.ops.get_mut(h) {
        o.bounce = bounce;
        if let OpKind::LargeRecv(l) = &mut o.kind {
            l.dst = dst;
            l.len = len;
            l.desc = Some(desc);
            l.truncated = total > cap;
        }
    }
    pump(cx, h)
}

/// Posts the large receive in slot `h`'s next reads, up to the window; finishes it when all
/// are in (or one failed and the rest are in).
fn pump<P: Partner>(cx: &mut Cx<'_, Net, P>, h: OpIndex) -> Result<()> {
    let net = &mut *cx.transport;
    let max = net.max_msg;
    loop {
        let Some(Op {
            req,
            kind: OpKind::LargeRecv(l),
            ..
        }) = net.ops.get(h)
        else {
            return Ok(());
        };
        let Some(desc) = l.desc else {
            return Ok(());
        };
        if l.error.is_some() || l.next >= l.len || l.out >= READ_WINDOW {
            if l.out == 0 {
                return if l.error.is_some() {
                    settle_failed(cx, h)
                } else {
                    finish(cx, h)
                };
            }
            if l.error.is_some() || l.next >= l.len {
                net.reading.retain(|&x| x != h);
            }
            return Ok(());
        }
        let (req, next, chunk) = (*req, l.next, (l.len - l.next).min(max));
        // SAFETY: `dst[..len]` is the receive's buffer (or the record's bounce buffer), kept
        // until the record ends, which waits for every read (`out`).
        let (dst, src) = (unsafe { l.dst.add(next) }, tag::from_cq_data(l.data).0);
        let k = net.ops.insert(Op {
            req,
            kind: OpKind::ReadChunk { parent: h },
            bounce: None,
            pieces: None,
        });
        let ctx = net.ops.context_ptr(k).ok_or_else(vanished)?;
        // SAFETY: `dst[..chunk]` lies in the landing place above, which nothing else touches
        // until this read's completion is read (the record waits for it); `ctx` is operation
        // `k`'s fixed slot.
        let posted = net.ep().and_then(|ep| unsafe {
            ep.read(
                dst,
                chunk,
                u64::from(src),
                desc.addr + next as u64,
                desc.key,
                ctx,
            )
        });
        let Some(Op {
            kind: OpKind::LargeRecv(l),
            ..
        }) = net.ops.get_mut(h)
        else {
            return Err(vanished());
        };
        match posted {
            Ok(Posted::Done) => {
                l.next += chunk;
                l.out += 1;
            }
            Ok(Posted::Again | Posted::NoMessage) => {
                net.ops.remove(k);
                if !net.reading.contains(&h) {
                    net.reading.push(h);
                }
                return Ok(());
            }
            Err(e) => {
                tracing::warn!(error = %e, "a large message's read failed to post");
                l.error = Some(e.kind());
                net.ops.remove(k);
            }
        }
    }
}

/// How long a large receive whose read failed waits for the peer watch to say whether its
/// sender died, before it fails with the read's own error. A dead sender's reads fail at
/// once (rxm cancels them with the connection), and the watch learns of the death a little
/// later (from the launcher, after a grace for the dead rank's last messages): waiting lets
/// the receive fail with `PeerFailed`, as it does over the other netmods, not `Transport`.
const WATCH_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// Large receive `h` has all its reads in and one failed: fails it with `PeerFailed` if its
/// sender is gone, with the read's error once [`WATCH_WAIT`] has passed, and otherwise leaves
/// it pending, rechecked from progress ([`recheck_suspects`]) — or ended by the device's own
/// check of its peer (`end_if_idle`).
fn settle_failed<P: Partner>(cx: &mut Cx<'_, Net, P>, h: OpIndex) -> Result<()> {
    let net = &mut *cx.transport;
    let Some(Op {
        kind: OpKind::LargeRecv(l),
        ..
    }) = net.ops.get(h)
    else {
        return Ok(());
    };
    let src = tag::from_cq_data(l.data).0;
    let gone = net.peer_state(src) != PeerState::Alive;
    let Some(Op {
        kind: OpKind::LargeRecv(l),
        ..
    }) = net.ops.get_mut(h)
    else {
        return Ok(());
    };
    if gone {
        l.error = Some(ErrorKind::PeerFailed);
    }
    let since = *l.failed_at.get_or_insert_with(std::time::Instant::now);
    if gone || l.error == Some(ErrorKind::PeerFailed) || since.elapsed() >= WATCH_WAIT {
        return finish(cx, h);
    }
    if !net.suspects.contains(&h) {
        net.suspects.push(h);
    }
    Ok(())
}

/// Rechecks the large receives waiting in [`settle_failed`], from progress.
pub(crate) fn recheck_suspects<P: Partner>(cx: &mut Cx<'_, Net, P>) -> Result<()> {
    for h in std::mem::take(&mut cx.transport.suspects) {
        settle_failed(cx, h)?;
    }
    Ok(())
}

/// Retries the reads the provider refused, from progress.
pub(crate) fn post_refused_reads<P: Partner>(cx: &mut Cx<'_, Net, P>) -> Result<()> {
    let waiting = std::mem::take(&mut cx.transport.reading);
    for h in waiting {
        pump(cx, h)?;
    }
    Ok(())
}

/// One read of large receive `parent` ended (`error`: how it failed).
pub(crate) fn read_done<P: Partner>(
    cx: &mut Cx<'_, Net, P>,
    parent: OpIndex,
    error: Option<ErrorKind>,
) -> Result<()> {
    if let Some(Op {
        kind: OpKind::LargeRecv(l),
        ..
    }) = cx.transport.ops.get_mut(parent)
    {
        l.out = l.out.saturating_sub(1);
        if l.error.is_none() {
            l.error = error;
        }
    }
    pump(cx, parent)
}

/// Large receive `h` cannot go on (its descriptor was malformed or could not be fetched).
pub(crate) fn fail<P: Partner>(cx: &mut Cx<'_, Net, P>, h: OpIndex, kind: ErrorKind) -> Result<()> {
    if let Some(Op {
        kind: OpKind::LargeRecv(l),
        ..
    }) = cx.transport.ops.get_mut(h)
    {
        l.error.get_or_insert(kind);
        l.desc.get_or_insert(Descriptor {
            len: 0,
            addr: 0,
            key: 0,
        });
    }
    pump(cx, h)
}

/// Ends large receive `h` at once when the provider holds nothing of it — its descriptor is in
/// and none of its reads is outstanding (each was refused, or none was posted yet) — for
/// [`P2p::quiesce`](ch4_core::transport::P2p::quiesce), whose caller then fails or drops the
/// request. A live sender is released; a dead one is not written to (rxm would refuse the
/// acknowledgement for ever, and it would hold up every send queued behind it). Returns
/// whether it ended the receive; otherwise the caller waits for its reads as for any operation.
///
/// Without this, a receive whose sender died after its descriptor came waits out the cancel
/// limit and then closes the endpoint: the reads to a dead process are refused for ever
/// (rxm reconnects on every attempt), so the operation never ends by itself.
pub(crate) fn end_if_idle<P: Partner>(cx: &mut Cx<'_, Net, P>, h: OpIndex) -> Result<bool> {
    let net = &mut *cx.transport;
    let idle = matches!(
        net.ops.get(h),
        Some(Op { kind: OpKind::LargeRecv(l), .. }) if l.desc.is_some() && l.out == 0
    );
    if !idle {
        return Ok(false);
    }
    net.reading.retain(|&x| x != h);
    net.suspects.retain(|&x| x != h);
    let Some(Op {
        req,
        kind: OpKind::LargeRecv(l),
        ..
    }) = net.ops.remove(h)
    else {
        return Ok(false);
    };
    let (src, _) = tag::from_cq_data(l.data);
    if net.peer_state(src) == PeerState::Alive {
        acknowledge(net, l.data)?;
    }
    if let Some(r) = cx.core.requests.get_mut(req).and_then(Request::recv_mut) {
        native::released(r);
    }
    Ok(true)
}

/// Every read of large receive `h` is in: acknowledge the sender and complete the receive.
fn finish<P: Partner>(cx: &mut Cx<'_, Net, P>, h: OpIndex) -> Result<()> {
    let net = &mut *cx.transport;
    net.reading.retain(|&x| x != h);
    net.suspects.retain(|&x| x != h);
    let Some(op) = net.ops.remove(h) else {
        return Ok(());
    };
    let OpKind::LargeRecv(l) = op.kind else {
        return Ok(());
    };
    let Some(kind) = l.error else {
        let recv = Op {
            req: op.req,
            kind: OpKind::Recv,
            bounce: op.bounce,
            pieces: None,
        };
        return finish_recv(cx, recv, l.bits, l.data, l.len, l.truncated);
    };
    // The sender is let go even so, unless it is gone.
    if kind != ErrorKind::PeerFailed {
        acknowledge(net, l.data)?;
    }
    if let Some(req) = cx.core.requests.get_mut(op.req) {
        if let RequestKind::Recv(r) = &mut req.kind {
            native::released(r);
        }
        let (source, tag) = tag::source_and_tag(l.bits);
        req.status = Status::ok(source, tag, 0);
        req.status.error = Some(kind);
        req.complete = true;
    }
    Ok(())
}

/// The real length of the large message whose stub a probe found, fetching its descriptor
/// (kept for the message's receive) when it is not here yet.
pub(crate) fn probed_len<P: Partner>(cx: &mut Cx<'_, Net, P>, p: &Peeked) -> Result<usize> {
    if tag::is_inline(p.data) {
        return Ok(tag::inline_len(p.data));
    }
    let key = tag::from_cq_data(p.data);
    if !cx.transport.descriptors.contains_key(&key) {
        fetch_descriptor(cx.transport, ReqHandle::DONE, None, key.0, key.1)?;
        let start = std::time::Instant::now();
        let limit = cx.core.config.cancel_limit;
        while !cx.transport.descriptors.contains_key(&key) {
            if start.elapsed() > limit {
                close_and_fail(cx, "a large message's descriptor did not arrive");
                return Err(Error::new(
                    ErrorKind::Pending,
                    format!("a large message's descriptor did not arrive within {limit:?}"),
                ));
            }
            if progress_own(cx)? == 0 {
                std::thread::yield_now();
            }
        }
    }
    let len = cx.transport.descriptors.get(&key).map_or(0, |d| d.len);
    Ok(usize::try_from(len).unwrap_or(usize::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stub_payload_reads_back_and_a_bad_one_is_refused() {
        let desc = Descriptor {
            len: 1 << 20,
            addr: 0x7f00_1234_5678,
            key: 9,
        };
        let b = inline_stub(42, desc);
        assert_eq!(b.len(), tag::INLINE_STUB_BYTES);
        assert_eq!(parse_inline_stub(&b), Some((42, desc)));
        assert_eq!(parse_inline_stub(&b[..31]), None, "short");
        assert_eq!(parse_inline_stub(&inline_stub(0, desc)), None, "no name");
        assert_eq!(
            parse_inline_stub(&inline_stub(tag::INLINE, desc)),
            None,
            "a flag"
        );
        let mut wide = b.clone();
        wide[4] = 1; // a name beyond 32 bits
        assert_eq!(parse_inline_stub(&wide), None);
        assert_eq!(
            tag::from_cq_data(inline_data(
                tag::cq_data(5, 1 << 20 | tag::LARGE | tag::INLINE),
                42
            )),
            (5, 42)
        );
    }
}

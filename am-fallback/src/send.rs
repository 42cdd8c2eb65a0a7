//! Sending: the eager path (CH3's iStartMsg: a small standard send leaves at once and makes
//! no request), requests to send for rendezvous, sequence numbers for transports that may
//! reorder, and eager credit.

use ch4_core::core::Core;
use ch4_core::request::{
    msg_flags, CancelState, ReqHandle, Request, RequestKind, Route, SendState,
};
use ch4_core::transport::{AmTransport, Cx, Partner, SendOp};
use ch4_core::{Error, ErrorKind, Gpid, Result, SendMode, Status};

use crate::rendezvous::sending_large;
use crate::wire::{handler, EagerHeader, MatchHeader, ReadableRts};

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
pub(crate) fn isend<T: AmTransport, P: Partner>(
    cx: &mut Cx<'_, T, P>,
    op: SendOp,
) -> Result<ReqHandle> {
    let total = op.buf.packed_len();
    // Eager when short enough, with room for a larger one, and within the receiver's credit
    // (spent here, as the message goes: if the transport fails it, its peer is gone and its
    // credit no longer matters): beyond it the message goes by rendezvous, its data staying in
    // the sender's buffer.
    let eager = total <= cx.transport.eager_limit()
        && (total < EAGER_ONLY_WITH_ROOM
            || cx
                .transport
                .can_send_now(op.dest, std::mem::size_of::<MatchHeader>() + total))
        && cx.core.take_credit(cx.route, op.dest, total);
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
    let first = if eager {
        0
    } else {
        first_piece_len(cx, dest, &op.buf, total)
    };
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
            sent: first,
            accepted: 0,
            pending,
            cancel: CancelState::None,
            engine: 0,
            rendezvous: !eager,
        }),
    });
    let Ok(h) = h else {
        let charged = if eager {
            Some(total)
        } else {
            (first > 0).then_some(first)
        };
        return Err(unsent(cx.core, cx.route, dest, charged, h));
    };
    hdr.sreq = h.to_raw();
    hdr.seq = next_seq::<T>(cx.core, cx.route, dest);
    let sent = match cx.core.requests.get(h).map(|r| &r.kind) {
        Some(RequestKind::Send(s)) if eager => send_eager(cx.transport, dest, &hdr, &s.buf),
        Some(RequestKind::Send(s)) => send_rts(cx.transport, dest, &hdr, &s.buf, first),
        Some(_) => Err(Error::new(
            ErrorKind::Internal,
            "send request is not a send",
        )),
        None => Err(Error::new(ErrorKind::Internal, "send request vanished")),
    };
    match sent {
        Ok(()) => {
            if !eager {
                // A large message leaves: the ones this process receives until its data has
                // moved may be read (see `rendezvous::sending_large`).
                let state = &mut cx.core.am[cx.route.index()];
                state.rendezvous_in_flight += 1;
                state.rendezvous_sent = Some(std::time::Instant::now());
            }
            Ok(h)
        }
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
pub(crate) const GATHER_MAX: usize = 64;

#[inline(always)]
fn send_eager<T: AmTransport>(
    transport: &mut T,
    dest: Gpid,
    hdr: &MatchHeader,
    buf: &ch4_core::buffer::SendBuf,
) -> Result<()> {
    match buf.contiguous() {
        Some(data) => match EagerHeader::of(hdr) {
            Some(short) if T::AM_ORDERED => transport.am_send(
                dest,
                handler::EAGER_SHORT,
                bytemuck::bytes_of(&short),
                &[data],
            ),
            _ => transport.am_send(dest, handler::EAGER, bytemuck::bytes_of(hdr), &[data]),
        },
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

/// How many bytes of a rendezvous message of `total` bytes to `dest` go with its request-to-send
/// ([`AmTransport::first_piece`]): none unless the transport wants a first piece, the data is
/// contiguous, no single-copy read is offered, no other rendezvous send of this process is
/// still moving its data on the route, the transport can take the piece at once, and the
/// receiver's eager credit covers it (spent here; the receiver gives it back once the piece is
/// consumed).
///
/// The piece saves a lone message the handshake's round trip. In a window of sends it saves
/// nothing (the handshakes overlap anyway) and costs: every send's piece went into the socket
/// at once, both ways in `osu_bibw`, ahead of the data the clear-to-sends pace. TCP `osu_bibw`
/// read 0.66-0.97x the build without first pieces at 128 KiB-4 MiB with a piece for every
/// send (8 interleaved rounds; 0.73-0.98x with only the check for room), where a window's
/// first send alone takes one.
#[inline(always)]
fn first_piece_len<T: AmTransport, P: Partner>(
    cx: &mut Cx<'_, T, P>,
    dest: Gpid,
    buf: &ch4_core::buffer::SendBuf,
    total: usize,
) -> usize {
    let piece = cx.transport.first_piece().min(total);
    if piece == 0
        || buf.contiguous().is_none()
        || cx.transport.offers_peer_read(dest, total)
        || sending_large(&cx.core.am[cx.route.index()])
        || !cx
            .transport
            .can_send_now(dest, std::mem::size_of::<MatchHeader>() + piece)
        || !cx.core.take_credit(cx.route, dest, piece)
    {
        return 0;
    }
    piece
}

/// Sends a request-to-send: with the message's first `first` bytes (see [`first_piece_len`]),
/// or offering the buffer for a single-copy read when the transport can do one and the data is
/// contiguous, or bare.
#[inline]
fn send_rts<T: AmTransport>(
    transport: &mut T,
    dest: Gpid,
    hdr: &MatchHeader,
    buf: &ch4_core::buffer::SendBuf,
    first: usize,
) -> Result<()> {
    if let Some(data) = buf.contiguous() {
        if let Some(piece) = data.get(..first).filter(|p| !p.is_empty()) {
            return transport.am_send(dest, handler::RTS_DATA, bytemuck::bytes_of(hdr), &[piece]);
        }
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

/// The error of a send whose request could not be made: the eager credit it took (if any, for
/// `eager` bytes: an eager message or a first piece) is given back, since the message never
/// left.
#[cold]
#[inline(never)]
fn unsent(
    core: &mut Core,
    route: ch4_core::request::Route,
    dest: Gpid,
    eager: Option<usize>,
    failed: Result<ReqHandle>,
) -> Error {
    if let Some(total) = eager {
        core.refund_credit(route, dest, total);
    }
    match failed {
        Err(e) => e,
        Ok(_) => Error::new(
            ErrorKind::Internal,
            "a send request that was made, reported as not",
        ),
    }
}

//! Rendezvous (CH3 Nemesis's LMT): answering a request-to-send with a clear-to-send or a
//! single-copy read, streaming the data in pieces after a clear-to-send, and taking the pieces
//! in — straight into the receive buffer where the transport can place them.

use ch4_core::core::{Core, CtrlPacket, PeerReadJob};
use ch4_core::pool::Handle;
use ch4_core::request::{RecvState, ReqHandle, RequestKind, Route};
use ch4_core::transport::{AmTransport, HandlerId, Partner, PeerRead};
use ch4_core::{Error, ErrorKind, Gpid, Result, Status};

use crate::deliver::{ack, completion_error, consumed, Arrival};
use crate::dispatch::Dispatch;
use crate::send::GATHER_MAX;
use crate::wire::{self, handler, AckHeader, CtsHeader, DataHeader};

/// Answers a request-to-send matched by `req`: with a clear-to-send, or, when the sender offered
/// its buffer for a single-copy read, by queueing the read. `first` is the first piece the
/// request-to-send carried (empty when none): it goes into the buffer (what fits), its credit
/// is consumed, and the clear-to-send asks for the rest.
pub(crate) fn accept_rts(core: &mut Core, req: ReqHandle, a: &Arrival, first: &[u8]) -> Result<()> {
    let Some((accept, received)) = take_rts(core, req, a, first)? else {
        return Ok(());
    };
    tracing::debug!(
        src = a.src,
        accept,
        received,
        "rendezvous matched, sending CTS"
    );
    queue_cts(core, a.route, a.src, a.sreq, req, accept)?;
    if received >= accept {
        // Nothing left to stream (an empty or full buffer, or the first piece held it all).
        let mut status = core.requests.get(req).map_or(Status::EMPTY, |r| r.status);
        status.bytes = received;
        core.complete_recv(req, status);
    }
    Ok(())
}

/// Makes `req` the receive of the request-to-send `a`: how much it accepts, its status (with a
/// truncation or ready-mode error), and `first`, the piece the request-to-send carried, copied
/// in with its credit consumed. Returns what the clear-to-send will accept and how much of it
/// the piece already delivered, or `None` when the sender offered its buffer and the receive
/// now waits for a single-copy read instead.
pub(crate) fn take_rts(
    core: &mut Core,
    req: ReqHandle,
    a: &Arrival,
    first: &[u8],
) -> Result<Option<(usize, usize)>> {
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
    let total = a.total;
    let accept = total.min(rs.buf.capacity());
    rs.source_process = a.src;
    rs.expected = accept;
    let received = if first.is_empty() {
        0
    } else {
        rs.buf.write_at(0, &first[..first.len().min(accept)])
    };
    rs.received = received;
    r.status = Status::ok(a.env.source, a.env.tag, 0);
    r.status.error = completion_error(a.flags, total, accept);
    if !first.is_empty() {
        consumed(core, a.route, a.src, first.len())?;
    }
    // An offered buffer: whether to read it or have it streamed is decided at the next poll
    // (`run_peer_reads`). A receive posted ahead of a window of sends (osu_bibw posts its
    // receives first) is matched before those sends start, and only then is it known whether
    // large messages flow both ways.
    if a.remote_addr != 0 && accept > 0 {
        tracing::debug!(
            src = a.src,
            total,
            accept,
            "rendezvous matched, reading the sender's buffer"
        );
        core.am[a.route.index()].reads.push_back(PeerReadJob {
            req,
            src: a.src,
            addr: a.remote_addr,
            sreq: a.sreq,
        });
        return Ok(None);
    }
    Ok(Some((accept, received)))
}

/// How long after this process last started a rendezvous send its unfinished ones still count
/// (one that never finishes, its receiver dead, must not make it read forever).
const SENDING_LARGE_FOR: std::time::Duration = std::time::Duration::from_millis(100);

/// Whether this process is sending large messages on this route: rendezvous sends whose data
/// has not all moved, the last started within [`SENDING_LARGE_FOR`]. Then large messages flow
/// both ways, and reading the incoming ones copies each byte once per direction instead of
/// twice on each side; and a further rendezvous send is part of a window, so it takes no first
/// piece (`send::first_piece_len`). (A ping-pong is neither: its send is done before the reply
/// comes.)
pub(crate) fn sending_large(route: &ch4_core::core::AmRouteState) -> bool {
    route.rendezvous_in_flight > 0
        && route
            .rendezvous_sent
            .is_some_and(|t| t.elapsed() < SENDING_LARGE_FOR)
}

/// One of this process's rendezvous sends has moved all its data (see [`sending_large`]).
pub(crate) fn finished(route: &mut ch4_core::core::AmRouteState) {
    route.rendezvous_in_flight = route.rendezvous_in_flight.saturating_sub(1);
}

/// Queues the clear-to-send that tells the sender of `sreq` to stream `accept` bytes to `req`.
pub(crate) fn queue_cts(
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

/// Carries out the single-copy reads (LMT Get) of matched rendezvous receives: copy, tell the
/// sender, complete. A read the transport declines turns into an ordinary clear-to-send, so the
/// data is streamed instead; a sender that died fails the receive.
///
/// A message is read when the transport says a read pays ([`AmTransport::read_pays`]): for a
/// lone message (one matched, no other receive waiting), or while this process sends large
/// messages itself. Otherwise the traffic is a one-way stream (a bandwidth-bound window of
/// receives), and the streamed mode moves it faster: the sender copies pieces into the ring
/// while we copy earlier ones out, two cores at work instead of one (measured on this
/// project's 2-core host: single copy 0.5-0.8x the streamed bandwidth for a window of 64 at
/// 64 KiB-4 MiB, but 2x better latency for one message of 64-256 KiB).
#[inline(never)]
pub(crate) fn run_peer_reads<T: AmTransport>(
    core: &mut Core,
    transport: &mut T,
    route: Route,
) -> Result<usize> {
    let mut done = 0;
    let lone = core.am[route.index()].reads.len() == 1 && core.posted.is_empty();
    let both_ways = sending_large(&core.am[route.index()]);
    while let Some(job) = core.am[route.index()].reads.pop_front() {
        let Some(r) = core.requests.get_mut(job.req) else {
            continue;
        };
        let RequestKind::Recv(rs) = &mut r.kind else {
            continue;
        };
        let accept = rs.expected;
        let read = (lone && transport.read_pays(accept, false))
            || (both_ways && transport.read_pays(accept, true));
        let outcome = match rs.buf.contiguous_mut() {
            _ if !read => Ok(PeerRead::Unavailable),
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
pub(crate) fn stream_pending<T: AmTransport>(
    core: &mut Core,
    transport: &mut T,
    route: Route,
) -> Result<usize> {
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
        let crowded = !core.am[route.index()].streaming.is_empty();
        let piece = transport.stream_piece(crowded).max(1);
        let end = s.accepted.min(s.sent.saturating_add(piece));
        if !transport.can_stream_now(s.dest, std::mem::size_of::<DataHeader>() + (end - s.sent)) {
            // No room: wait for the receiver rather than have the transport copy the piece
            // aside. Progress brings us back here.
            core.am[route.index()].scratch = scratch;
            core.am[route.index()].streaming.push_front(h);
            break;
        }
        let hdr = DataHeader {
            rreq: s.engine,
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
        if let Err(e) = sent {
            if e.kind() != ErrorKind::PeerFailed {
                return Err(e);
            }
            // The receiver is gone: this send fails, alone. Returned from progress, the error
            // failed whatever wait ran it instead — a receive from a live peer among them.
            tracing::debug!(
                dest = s.dest,
                "rendezvous data for a gone peer: the send fails"
            );
            finished(&mut core.am[route.index()]);
            if let Some(r) = core.requests.get_mut(h) {
                r.status.error = Some(ErrorKind::PeerFailed);
                r.complete = true;
            }
            continue;
        }
        s.sent = end;
        done += 1;
        if s.sent >= s.accepted {
            finished(&mut core.am[route.index()]);
            core.send_event_done(h);
        } else {
            core.am[route.index()].streaming.push_back(h);
        }
    }
    Ok(done)
}

/// The rendezvous handlers of the dispatcher: clear-to-send and read-done at the sender, data
/// pieces at the receiver.
impl<T: AmTransport, P: Partner> Dispatch<'_, T, P> {
    /// The live receive a DATA message with this header and `len` payload bytes belongs to,
    /// and the data's offset in it — if the piece lies within what the receive accepts.
    pub(crate) fn data_receive(
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

    pub(crate) fn on_cts(&mut self, cts: CtsHeader) -> Result<()> {
        let h = self.send_request(cts.sreq)?;
        let Some(RequestKind::Send(s)) = self.core.requests.get_mut(h).map(|r| &mut r.kind) else {
            return Ok(());
        };
        if s.engine != 0 || cts.accept > s.total as u64 {
            return Err(Error::new(
                ErrorKind::Protocol,
                format!(
                    "unexpected or oversized CTS for send request {:#x}",
                    cts.sreq
                ),
            ));
        }
        s.engine = cts.rreq;
        s.accepted = cts.accept as usize;
        // Nothing left when the receiver takes no more than the first piece held.
        if s.sent >= s.accepted {
            finished(&mut self.core.am[self.route.index()]);
            self.core.send_event_done(h);
        } else {
            self.core.am[self.route.index()].streaming.push_back(h);
        }
        Ok(())
    }

    #[inline]
    pub(crate) fn on_data(&mut self, src: Gpid, d: DataHeader, payload: &[u8]) -> Result<()> {
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
    pub(crate) fn data_target(&mut self, src: Gpid, d: DataHeader, len: usize) -> Result<Handle> {
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
    pub(crate) fn account_data(&mut self, h: Handle, n: usize) {
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
    pub(crate) fn on_get_done(&mut self, a: AckHeader) -> Result<()> {
        let h = self.send_request(a.sreq)?;
        let Some(RequestKind::Send(s)) = self.core.requests.get_mut(h).map(|r| &mut r.kind) else {
            return Ok(());
        };
        if s.engine != 0 || s.accepted != 0 || a.value > s.total as u64 {
            return Err(Error::new(
                ErrorKind::Protocol,
                format!("unexpected read-done for send request {:#x}", a.sreq),
            ));
        }
        s.accepted = a.value as usize;
        s.sent = s.accepted;
        finished(&mut self.core.am[self.route.index()]);
        self.core.send_event_done(h);
        Ok(())
    }
}

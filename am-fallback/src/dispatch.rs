//! Progress and the dispatch of arriving active messages to their handlers: matching packets
//! (eager messages, requests to send) in order, acknowledgements, cancels and credit. The
//! rendezvous handlers are in [`crate::rendezvous`].

use ch4_core::core::{Core, FirstPiece, HeldPacket};
use ch4_core::pool::Handle;
use ch4_core::request::{msg_flags, CancelState, ReqHandle, RequestKind, Route, Unexpected};
use ch4_core::transport::{send_ctrl, AmSink, AmTransport, Cx, HandlerId, Partner};
use ch4_core::{Envelope, Error, ErrorKind, Gpid, Result};

use crate::deliver::{
    ack, announced_length, check_carried, consumed, deliver_eager, eager_delivered, envelope,
    Arrival,
};
use crate::rendezvous::{accept_rts, queue_cts, run_peer_reads, stream_pending, take_rts};
use crate::wire::{self, handler, AckHeader, CancelHeader, DataHeader, MatchHeader};

pub(crate) fn progress<T: AmTransport, P: Partner>(cx: &mut Cx<'_, T, P>) -> Result<usize> {
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
pub(crate) fn finish_poll<T: AmTransport>(
    core: &mut Core,
    transport: &mut T,
    route: Route,
) -> Result<usize> {
    let mut events = 0;
    if !core.am[route.index()].reads.is_empty() {
        events += run_peer_reads(core, transport, route)?;
    }
    while let Some(p) = core.am[route.index()].outbox.pop_front() {
        send_ctrl(transport, &p)?;
    }
    if core.am[route.index()].streaming.is_empty() {
        return Ok(events);
    }
    Ok(events + stream_pending(core, transport, route)?)
}

/// Hands each arrived active message to its handler.
pub(crate) struct Dispatch<'a, T, P> {
    pub(crate) core: &'a mut Core,
    pub(crate) partner: &'a mut P,
    pub(crate) route: Route,
    _transport: std::marker::PhantomData<T>,
}

impl<T: AmTransport, P: Partner> AmSink for Dispatch<'_, T, P> {
    #[inline]
    fn deliver(&mut self, src: Gpid, h: HandlerId, header: &[u8], payload: &[u8]) -> Result<()> {
        match h {
            handler::RTS_DATA if self.first_piece_pending(src, header) => {
                self.first_piece_delivered(src, header, payload)
            }
            handler::EAGER
            | handler::EAGER_SHORT
            | handler::RTS
            | handler::RTS_GET
            | handler::RTS_DATA => {
                let (hdr, addr) = wire::parse_match(h, header, payload.len())?;
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
    /// For the first piece of a request-to-send, the buffer of the receive it matches, if that
    /// receive can take the piece whole (see [`Dispatch::first_piece_receive`]).
    fn destination(
        &mut self,
        src: Gpid,
        h: HandlerId,
        header: &[u8],
        len: usize,
    ) -> Option<&mut [u8]> {
        if h == handler::RTS_DATA {
            let req = self.first_piece_receive(src, header, len)?;
            let rs = self.core.requests.get_mut(req)?.recv_mut()?;
            return rs.buf.contiguous_mut()?.get_mut(..len);
        }
        let (rs, offset) = self.data_receive(h, header, len)?;
        rs.buf.contiguous_mut()?.get_mut(offset..offset + len)
    }

    /// Rendezvous data for a matched receive with a noncontiguous layout: the pieces of the
    /// user's buffer it fills. For the first piece of a request-to-send, the blocks of the
    /// receive it matches (see [`Dispatch::first_piece_receive`]).
    fn scattered_destination(
        &mut self,
        src: Gpid,
        h: HandlerId,
        header: &[u8],
        len: usize,
        max_pieces: usize,
    ) -> Option<smallvec::SmallVec<[&mut [u8]; 8]>> {
        if h == handler::RTS_DATA {
            let req = self.first_piece_receive(src, header, len)?;
            let rs = self.core.requests.get_mut(req)?.recv_mut()?;
            return rs.buf.segments_mut(0, len, max_pieces);
        }
        let (rs, offset) = self.data_receive(h, header, len)?;
        rs.buf.segments_mut(offset, len, max_pieces)
    }

    fn placed(&mut self, src: Gpid, h: HandlerId, header: &[u8], len: usize) -> Result<()> {
        if h == handler::RTS_DATA {
            return self.first_piece_placed(src, len);
        }
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

/// A request-to-send's first piece holds at least one byte and at most the whole message.
fn check_first_piece(src: Gpid, total: usize, carried: usize) -> Result<()> {
    if carried > 0 && carried <= total {
        return Ok(());
    }
    Err(Error::new(
        ErrorKind::Protocol,
        format!("process {src}: request-to-send of {total} bytes carries {carried}"),
    ))
}

impl<'a, T: AmTransport, P: Partner> Dispatch<'a, T, P> {
    /// The dispatcher for one poll of `route`.
    #[inline(always)]
    pub(crate) fn new(core: &'a mut Core, partner: &'a mut P, route: Route) -> Self {
        Dispatch {
            core,
            partner,
            route,
            _transport: std::marker::PhantomData,
        }
    }
    /// A send request named by a peer, checked: a forged or stale id is a protocol error.
    pub(crate) fn send_request(&mut self, raw: u64) -> Result<ReqHandle> {
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
    pub(crate) fn in_order(
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
            let (hdr, addr) = wire::parse_match(p.handler, &p.header, p.payload.len())?;
            self.on_match_packet(src, p.handler, &hdr, addr, &p.payload)?;
            next = next.wrapping_add(1);
        }
        self.core.am[self.route.index()].seq_in.insert(src, next);
        Ok(())
    }
    /// An eager message or request-to-send: match it against posted receives, or queue it.
    #[inline(always)]
    pub(crate) fn on_match_packet(
        &mut self,
        src: Gpid,
        h: HandlerId,
        hdr: &MatchHeader,
        remote_addr: u64,
        payload: &[u8],
    ) -> Result<()> {
        let total = announced_length(hdr)?;
        let env = envelope(hdr);
        let eager = wire::is_eager(h);
        // An eager packet carries its whole message; a request-to-send nothing, or its first
        // piece.
        if h == handler::RTS_DATA {
            check_first_piece(src, total, payload.len())?;
        } else {
            check_carried(src, if eager { hdr.total } else { 0 }, payload.len())?;
        }
        while let Some((_, _, req)) = self.core.posted.take_match(&env) {
            let Some(r) = self.core.requests.get_mut(req) else {
                continue;
            };
            let RequestKind::Recv(rs) = &mut r.kind else {
                continue;
            };
            rs.posted = None;
            let partnered = P::NATIVE_HALVES && rs.native.partnered();
            // (Each branch makes its own `Arrival`: one that no out-of-line call sees stays in
            // registers on the hot path.)
            if eager && !partnered {
                // The common case, with one request lookup: copy, finish, complete.
                rs.source_process = src;
                let written = rs.buf.write_at(0, payload);
                let a = Arrival::new(self.route, src, hdr, total, remote_addr);
                r.status = eager_delivered(&mut self.core.am[a.route.index()], &a, written)?;
                r.complete = true;
                return Ok(());
            }
            // An ANY_SOURCE receive also posted in a natively matching netmod: take it only if
            // its netmod half can still be cancelled; otherwise the netmod matched it first.
            if partnered {
                match self.partner.cancel_partner(self.core, req) {
                    Ok(true) => {}
                    Ok(false) => continue,
                    Err(e) => {
                        // No definite answer: the receive is the netmod's for now. Keep the
                        // message for another receive rather than lose it.
                        self.keep_unexpected(src, hdr, total, remote_addr, eager, payload);
                        return Err(e);
                    }
                }
            }
            let a = Arrival::new(self.route, src, hdr, total, remote_addr);
            return if eager {
                deliver_eager(self.core, req, &a, payload)
            } else {
                accept_rts(self.core, req, &a, payload)
            };
        }
        self.keep_unexpected(src, hdr, total, remote_addr, eager, payload);
        Ok(())
    }

    /// Queues a message no posted receive took as unexpected.
    fn keep_unexpected(
        &mut self,
        src: Gpid,
        hdr: &MatchHeader,
        total: usize,
        remote_addr: u64,
        eager: bool,
        payload: &[u8],
    ) {
        let mut a = Arrival::new(self.route, src, hdr, total, remote_addr);
        if a.flags & msg_flags::READY != 0 {
            tracing::warn!(
                src,
                tag = hdr.tag,
                "ready-mode send arrived before its receive"
            );
            a.flags |= msg_flags::READY_UNMATCHED;
        }
        let data = (eager || !payload.is_empty()).then(|| self.core.buffer_from(payload));
        self.core.unexpected.push(a.env, a.waiting(data, !eager));
    }

    /// The receive the first piece of a request-to-send goes to when the transport can read it
    /// straight into place ([`AmSink::destination`] or [`AmSink::scattered_destination`]): the
    /// posted receive the request matches, if its buffer can take the whole piece. Matches it
    /// then, and records it ([`FirstPiece`]) for the transport's further questions about the
    /// piece and for its delivery — in place, or, if the transport then declines the place, whole
    /// through [`AmSink::deliver`]. Anything else (no receive, a partnered ANY_SOURCE one, a
    /// smaller buffer, a malformed header) is left to [`Dispatch::on_match_packet`] once the
    /// piece has come whole: nothing is changed here.
    ///
    /// The clear-to-send waits until the piece is in. Sent at once, it overlapped the handshake
    /// with the piece but let the sender stream the rest while the piece still arrived, and that
    /// lost: over TCP on this project's 2-core host (`osu_latency`, 8 interleaved rounds,
    /// per-round ratios to no first piece, medians) the early answer read 0.90 / 0.94 / 0.98 /
    /// 1.06 at 512 KiB / 1 / 2 / 4 MiB, the answer after the piece 0.89 / 0.93 / 0.96 / 1.00.
    fn first_piece_receive(&mut self, src: Gpid, header: &[u8], len: usize) -> Option<ReqHandle> {
        if !T::AM_ORDERED {
            return None; // matching packets wait for their turn by sequence number
        }
        let (hdr, _) = wire::parse_match(handler::RTS_DATA, header, len).ok()?;
        let total = announced_length(&hdr).ok()?;
        if check_first_piece(src, total, len).is_err() {
            return None;
        }
        // Asked again (as more of the piece arrives, or for another view of the buffer).
        let placing = &self.core.am[self.route.index()].placing;
        if let Some(p) = placing.iter().find(|p| p.src == src && p.sreq == hdr.sreq) {
            return Some(p.req);
        }
        let env = envelope(&hdr);
        let (id, &req) = self.core.posted.find(&env)?;
        let RequestKind::Recv(rs) = &mut self.core.requests.get_mut(req)?.kind else {
            return None;
        };
        if rs.buf.capacity().min(total) < len || (P::NATIVE_HALVES && rs.native.partnered()) {
            return None;
        }
        self.core.posted.remove(id)?;
        rs.posted = None;
        let a = Arrival::new(self.route, src, &hdr, total, 0);
        let accept = match take_rts(self.core, req, &a, &[]) {
            Ok(Some((accept, _))) => accept,
            // No offered buffer (address 0), so no single-copy read: cannot happen.
            Ok(None) => return None,
            Err(e) => {
                tracing::warn!(src, error = %e, "matching a request-to-send failed");
                return None;
            }
        };
        let placing = &mut self.core.am[self.route.index()].placing;
        // An earlier piece from `src` that never came whole went with its connection.
        placing.retain(|p| p.src != src);
        placing.push(FirstPiece {
            src,
            sreq: hdr.sreq,
            req,
            accept,
        });
        Some(req)
    }

    /// Whether the request-to-send with this header already has its receive (the transport
    /// asked where its piece goes, then delivered it whole after all).
    fn first_piece_pending(&self, src: Gpid, header: &[u8]) -> bool {
        let placing = &self.core.am[self.route.index()].placing;
        if placing.is_empty() {
            return false;
        }
        let Ok((hdr, _)) = wire::parse_match(handler::RTS_DATA, header, 0) else {
            return false;
        };
        placing.iter().any(|p| p.src == src && p.sreq == hdr.sreq)
    }

    /// The first piece of a request-to-send whose receive was matched when the transport asked
    /// where it goes, delivered whole after all: copied in, then as if placed.
    fn first_piece_delivered(&mut self, src: Gpid, header: &[u8], payload: &[u8]) -> Result<()> {
        let (hdr, _) = wire::parse_match(handler::RTS_DATA, header, payload.len())?;
        let p = self.take_first_piece(src, |p| p.sreq == hdr.sreq)?;
        if let Some(rs) = self.core.requests.get_mut(p.req).and_then(|r| r.recv_mut()) {
            rs.buf.write_at(0, payload);
        }
        self.first_piece_in(p, payload.len())
    }

    /// The first piece of a request-to-send is in its receive's buffer (see
    /// [`Dispatch::first_piece_receive`]).
    fn first_piece_placed(&mut self, src: Gpid, len: usize) -> Result<()> {
        let p = self.take_first_piece(src, |_| true)?;
        self.first_piece_in(p, len)
    }

    /// Removes the record of the first piece from `src` that `which` picks.
    fn take_first_piece(
        &mut self,
        src: Gpid,
        which: impl Fn(&FirstPiece) -> bool,
    ) -> Result<FirstPiece> {
        let placing = &mut self.core.am[self.route.index()].placing;
        match placing.iter().position(|p| p.src == src && which(p)) {
            Some(i) => Ok(placing.swap_remove(i)),
            None => Err(Error::new(
                ErrorKind::Internal,
                format!("a first piece from process {src} came in, but none was expected"),
            )),
        }
    }

    /// A first piece of `len` bytes is in its receive's buffer: count it and its credit, and
    /// ask for the rest.
    fn first_piece_in(&mut self, p: FirstPiece, len: usize) -> Result<()> {
        consumed(self.core, self.route, p.src, len)?;
        self.account_data(p.req, len);
        queue_cts(self.core, self.route, p.src, p.sreq, p.req, p.accept)
    }

    pub(crate) fn on_cancel_req(&mut self, src: Gpid, c: CancelHeader) -> Result<()> {
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
    pub(crate) fn on_cancel_ack(&mut self, a: AckHeader) -> Result<()> {
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
            let rendezvous = s.rendezvous;
            s.pending = 0;
            r.status.cancelled = true;
            r.complete = true;
            if rendezvous {
                // Its data will never move: no longer a large send in flight.
                crate::rendezvous::finished(&mut self.core.am[self.route.index()]);
            }
        } else {
            self.core.send_event_done(h);
        }
        Ok(())
    }
}

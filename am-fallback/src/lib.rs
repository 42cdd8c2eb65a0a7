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
//! engine. A transport that copies the data through itself anyway (TCP) may have the first
//! piece of a message sent alone ride with the request-to-send (`RTS_DATA`,
//! [`AmTransport::first_piece`]), as Open MPI's ob1 sends its first fragment with the
//! rendezvous header: the receiver matches on the header, reads the piece straight into the
//! buffer, and asks for the rest once it is in, so the handshake no longer stands before the
//! data. The piece is paid for with eager credit, and
//! an unexpected request-to-send keeps it until a receive comes.
#![deny(unsafe_code)]

mod deliver;
mod direct;
mod dispatch;
mod rendezvous;
mod send;
pub mod wire;

use ch4_core::buffer::RecvBuf;
use ch4_core::request::{CancelState, Message, RecvState, ReqHandle, Request, RequestKind};
use ch4_core::transport::{AmTransport, Cx, Direct, P2p, Partner, SendOp};
use ch4_core::{Envelope, Error, ErrorKind, Gpid, Result, Status};
use deliver::match_unexpected;
use wire::{handler, CancelHeader};

/// The active-message point-to-point engine. Name it as a transport's `P2p` type.
pub struct Am;

impl<T: AmTransport> P2p<T> for Am {
    const NATIVE_MATCHING: bool = false;

    #[inline(always)]
    fn isend<P: Partner>(cx: &mut Cx<'_, T, P>, op: SendOp) -> Result<ReqHandle> {
        send::isend(cx, op)
    }

    #[inline(always)]
    fn irecv<P: Partner>(
        cx: &mut Cx<'_, T, P>,
        req: ReqHandle,
        want: &Envelope,
        // The core's queues match by the envelope; the sender's process is in every packet.
        _from: Option<Gpid>,
    ) -> Result<()> {
        let core = &mut *cx.core;
        // The request is checked before a message leaves the unexpected queue, so that a bad
        // one cannot lose it.
        let Some(r) = core.requests.get_mut(req).and_then(Request::recv_mut) else {
            return Err(Error::new(
                ErrorKind::Internal,
                "irecv on a missing or send request",
            ));
        };
        match core.unexpected.take_match(want) {
            Some((_, env, msg)) => match_unexpected(core, req, env, msg),
            None => {
                // The queues and the pool are separate fields: post while holding the request.
                r.posted = Some(core.posted.post(*want, req));
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

    fn iprobe<P: Partner>(
        cx: &mut Cx<'_, T, P>,
        want: &Envelope,
        _from: Option<Gpid>,
    ) -> Result<Option<Status>> {
        Ok(cx
            .core
            .unexpected
            .find(want)
            .map(|(_, env, msg)| Status::ok(env.source, env.tag, msg.total)))
    }

    fn improbe<P: Partner>(
        cx: &mut Cx<'_, T, P>,
        want: &Envelope,
        _from: Option<Gpid>,
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

    /// Receives the message into an empty buffer and drops the result: an eager message is
    /// freed (its credit returned, a synchronous sender acknowledged), a rendezvous sender gets
    /// a clear-to-send for no bytes and completes.
    fn discard<P: Partner>(cx: &mut Cx<'_, T, P>, msg: Message) -> Result<()> {
        let Message::Am { env, msg } = msg else {
            return match msg {
                Message::NoProc => Ok(()),
                _ => Err(Error::new(
                    ErrorKind::Internal,
                    "a native message handed to the active-message engine",
                )),
            };
        };
        let h = cx.core.requests.insert(Request {
            complete: false,
            status: Status::EMPTY,
            kind: RequestKind::Recv(RecvState::new(env, RecvBuf::owned(0))),
        })?;
        let r = match_unexpected(cx.core, h, env, msg);
        cx.core.requests.remove(h);
        r
    }

    /// A blocking eager send waits for the receiver's credit (see `ch4_core::core::AmRouteState`).
    #[inline(always)]
    fn send_ready<P: Partner>(cx: &mut Cx<'_, T, P>, dest: Gpid, total: usize) -> bool {
        total > cx.transport.eager_limit() || cx.core.has_credit(cx.route, dest, total)
    }

    #[inline]
    fn progress<P: Partner>(cx: &mut Cx<'_, T, P>) -> Result<usize> {
        dispatch::progress(cx)
    }

    #[inline]
    fn recv_direct<P: Partner>(
        cx: &mut Cx<'_, T, P>,
        want: &Envelope,
        buf: &mut [u8],
    ) -> Result<Direct> {
        direct::recv_direct(cx, want, buf)
    }
}

//! Delivering arrived messages: what an arriving message carries ([`Arrival`]), the one way an
//! eager message is finished (status, truncation or ready-mode error, synchronous ack, credit),
//! and matching a waiting message to a receive.

use ch4_core::core::{AmRouteState, Core, CtrlPacket};
use ch4_core::request::{msg_flags, ReqHandle, Request, Route, Unexpected};
use ch4_core::transport::HandlerId;
use ch4_core::{Envelope, Error, ErrorKind, Gpid, Result, Status};

use crate::rendezvous::accept_rts;
use crate::wire::{handler, AckHeader, MatchHeader};

/// What an arriving message that takes part in matching carries from its header to its
/// delivery — one value instead of seven positional arguments, so that the sender's request id
/// and the offered buffer address (both `u64`) cannot be swapped unseen.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Arrival {
    /// The route it came on; replies go back the same way.
    pub route: Route,
    /// The sending process.
    pub src: Gpid,
    /// Context, sender's rank in the communicator, tag.
    pub env: Envelope,
    /// The sender's mode (`msg_flags`), with READY_UNMATCHED added when it waited unmatched.
    pub flags: u32,
    /// The sender's request id (0 when it keeps none).
    pub sreq: u64,
    /// The message's length in bytes.
    pub total: usize,
    /// For a rendezvous offered for a single-copy read, the sender's buffer address; else 0.
    pub remote_addr: u64,
}

impl Arrival {
    /// The arrival a matching header announces, of `total` bytes (`hdr.total`, checked).
    #[inline(always)]
    pub fn new(route: Route, src: Gpid, hdr: &MatchHeader, total: usize, remote_addr: u64) -> Self {
        Arrival {
            route,
            src,
            env: envelope(hdr),
            flags: hdr.flags,
            sreq: hdr.sreq,
            total,
            remote_addr,
        }
    }

    /// The arrival a waiting message (unexpected, or taken by a matched probe) was.
    #[inline(always)]
    pub fn of_waiting(env: Envelope, msg: &Unexpected) -> Self {
        Arrival {
            route: msg.route,
            src: msg.src,
            env,
            flags: msg.flags,
            sreq: msg.sreq,
            total: msg.total,
            remote_addr: msg.remote_addr,
        }
    }

    /// The record this arrival leaves in the unexpected queue: an eager message with its data,
    /// or a request-to-send (`rendezvous`) with the first piece it carried, if any.
    pub fn waiting(&self, data: Option<Vec<u8>>, rendezvous: bool) -> Unexpected {
        Unexpected {
            rendezvous,
            route: self.route,
            src: self.src,
            flags: self.flags,
            sreq: self.sreq,
            total: self.total,
            data,
            remote_addr: self.remote_addr,
        }
    }
}

/// The envelope a matching header carries.
#[inline(always)]
pub(crate) fn envelope(hdr: &MatchHeader) -> Envelope {
    Envelope {
        context: hdr.context,
        source: hdr.source,
        tag: hdr.tag,
    }
}

/// The length a matching header announces, as a byte count.
#[inline(always)]
pub(crate) fn announced_length(hdr: &MatchHeader) -> Result<usize> {
    usize::try_from(hdr.total)
        .map_err(|_| Error::new(ErrorKind::Protocol, "message length does not fit"))
}

/// Finishes the delivery of an eager message of which `written` bytes went into the receive
/// buffer: the receive's status (with a truncation or ready-mode error), the synchronous
/// sender's acknowledgement, and the eager credit the message consumed. Every eager delivery —
/// to a posted receive, to one that found it waiting, to a blocking receive's direct path —
/// ends here. It needs only the route's protocol state, so the hot path can call it while it
/// holds the receive's request (one request lookup per message).
#[inline(always)]
pub(crate) fn eager_delivered(
    route: &mut AmRouteState,
    a: &Arrival,
    written: usize,
) -> Result<Status> {
    let mut status = Status::ok(a.env.source, a.env.tag, written);
    status.error = completion_error(a.flags, a.total, written);
    if a.flags & msg_flags::SYNC != 0 {
        let ack = AckHeader {
            sreq: a.sreq,
            value: 0,
        };
        route.outbox.push_back(CtrlPacket::new(
            a.src,
            handler::SYNC_ACK,
            bytemuck::bytes_of(&ack),
        )?);
    }
    if let Some(amount) = route.consume_credit(a.src, a.total) {
        give_back_credit(route, a.src, amount)?;
    }
    Ok(status)
}

/// Copies an eager message into the matched receive `req` and completes it.
#[inline(always)]
pub(crate) fn deliver_eager(
    core: &mut Core,
    req: ReqHandle,
    a: &Arrival,
    data: &[u8],
) -> Result<()> {
    let r = core
        .requests
        .get_mut(req)
        .and_then(Request::recv_mut)
        .ok_or_else(|| Error::new(ErrorKind::Internal, "matched receive vanished"))?;
    r.source_process = a.src;
    let written = r.buf.write_at(0, data);
    let status = eager_delivered(&mut core.am[a.route.index()], a, written)?;
    core.complete_recv(req, status);
    Ok(())
}

/// Delivers a message taken from the unexpected queue (or by a matched probe) to `req`.
pub(crate) fn match_unexpected(
    core: &mut Core,
    req: ReqHandle,
    env: Envelope,
    msg: Unexpected,
) -> Result<()> {
    let a = Arrival::of_waiting(env, &msg);
    match msg.data {
        Some(data) => {
            let r = if msg.rendezvous {
                accept_rts(core, req, &a, &data)
            } else {
                deliver_eager(core, req, &a, &data)
            };
            core.recycle_buffer(data);
            r
        }
        None => accept_rts(core, req, &a, &[]),
    }
}

/// An eager message of `total` bytes from `src` was delivered or dropped: count its credit as
/// consumed, and give the sender back what has added up.
pub(crate) fn consumed(core: &mut Core, route: Route, src: Gpid, total: usize) -> Result<()> {
    let st = &mut core.am[route.index()];
    match st.consume_credit(src, total) {
        None => Ok(()),
        Some(amount) => give_back_credit(st, src, amount),
    }
}

#[cold]
fn give_back_credit(route: &mut AmRouteState, src: Gpid, amount: u64) -> Result<()> {
    let a = AckHeader {
        sreq: 0,
        value: amount,
    };
    let mut p = CtrlPacket::new(src, handler::CREDIT, bytemuck::bytes_of(&a))?;
    // A sender that has left needs no credit.
    p.droppable = true;
    route.outbox.push_back(p);
    Ok(())
}

/// The error a receive completes with: a ready-mode message that found no receive posted, or
/// a message longer than the buffer.
#[inline(always)]
pub(crate) fn completion_error(flags: u32, total: usize, written: usize) -> Option<ErrorKind> {
    if flags & msg_flags::READY_UNMATCHED != 0 {
        Some(ErrorKind::ReadyNotPosted)
    } else if total > written {
        Some(ErrorKind::Truncate)
    } else {
        None
    }
}

/// Queues an acknowledgement (`handler`: SYNC_ACK, CANCEL_ACK, GET_DONE) naming send `sreq`.
pub(crate) fn ack(
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

/// A matching packet must carry exactly the bytes its header announces.
#[inline(always)]
pub(crate) fn check_carried(src: Gpid, announced: u64, carried: usize) -> Result<()> {
    if carried as u64 == announced {
        return Ok(());
    }
    Err(Error::new(
        ErrorKind::Protocol,
        format!("process {src}: packet announces {announced} bytes but carries {carried}"),
    ))
}

//! `UcxEngine`: MPI point-to-point on UCP's tagged messages, matched by UCX — ch4-core's
//! native-engine contract (ARCHITECTURE.md, "Natively matching engines") over UCX.
//!
//! - Sends: `ucp_tag_send_nbx` (standard) and `ucp_tag_send_sync_nbx` (synchronous: UCX
//!   acknowledges the match itself) from the user's buffer; a contiguous standard send that UCX
//!   finishes inside the call (short messages are copied out) needs no request at all. A
//!   layout goes as UCX's iovec datatype, its pieces in place. Long messages go by UCX's own
//!   rendezvous.
//! - Receives: `ucp_tag_recv_nbx` into the user's buffer (a layout: an iovec of its pieces),
//!   any source (the rank is in the tag); the completion brings the tag and the length, and the
//!   sender's process is the communicator's member at the tag's rank.
//! - Probes: `ucp_tag_probe_nb`, which answers at once; a matched probe removes the message
//!   (`remove = 1`), later received with `ucp_tag_msg_recv_nbx` or into a scratch buffer when
//!   dropped.
//! - Cancel: `ucp_request_cancel`, then this worker's progress until UCX reports the receive
//!   cancelled or complete.
//!
//! UCX's callbacks (`crate::worker`) only record completions; this engine applies them after
//! each call into UCX.

use std::ffi::c_void;
use std::ptr::null_mut;

use ch4_core::native::{self, message_credit, word_of, CancelStep, Holding, OpIndex};
use ch4_core::request::{Message, RecvState, ReqHandle, Request, RequestKind, UNKNOWN_PROCESS};
use ch4_core::transport::{Caps, Cx, P2p, Partner, SendOp};
use ch4_core::{Envelope, Error, ErrorKind, Gpid, PeerState, Result, SendMode, Status};
use ucx_sys::*;

use crate::credit;
use crate::netmod::{vanished, Op, OpKind, UcxNetmod};
use crate::tag;
use crate::worker::{
    received, request_op, sent, sent_slotless, set_request_op, ucx_error, Completion, SlotlessDone,
};

/// The engine of [`UcxNetmod`] (all its state lives in the netmod and the core's requests).
pub struct UcxEngine;

type Net = UcxNetmod;

impl P2p<Net> for UcxEngine {
    const NATIVE_MATCHING: bool = true;
    const TAG_UB: i32 = tag::TAG_UB;

    fn caps(_net: &Net) -> Caps {
        Caps {
            tag_ub: tag::TAG_UB,
            max_processes: tag::MAX_PROCESSES,
            detects_unmatched_ready: false,
            fills_truncated: false,
            iov_limit: usize::MAX,
            max_message: usize::MAX,
        }
    }

    #[inline]
    fn isend<P: Partner>(cx: &mut Cx<'_, Net, P>, op: SendOp) -> Result<ReqHandle> {
        let mut sync = op.mode == SendMode::Synchronous;
        let bits = tag::send_tag(&op.env)?;
        let total = op.buf.packed_len();
        let mut kind = OpKind::Send;
        if message_credit::take(cx.core, cx.route, op.dest, credit::MESSAGE_CHARGE) {
            if let Err(e) = credit::ensure_receive(cx.transport, op.dest) {
                // Nothing was sent: the credit goes back.
                let charge = message_credit::charge(cx.core, cx.route, credit::MESSAGE_CHARGE);
                cx.core.refund_credit(cx.route, op.dest, charge);
                return Err(e);
            }
        } else {
            // Without credit a nonblocking send goes as a synchronous one: it completes only
            // once a receive has matched it, so what the receiver holds of such messages is
            // bounded by the senders' outstanding requests (MPI lets a standard send wait for
            // its match). Holding it back instead could hang a correct program; blocking sends
            // wait for credit in `send_ready`.
            went_without_credit(cx.transport);
            kind = OpKind::UncreditedSend(op.dest);
            sync = true;
        }
        if !sync {
            if let Some((ptr, len)) = op.buf.raw_parts() {
                return send_contiguous(cx, op, bits, ptr, len, total);
            }
        }
        let net = &mut *cx.transport;
        let ep = net.worker()?.ep(op.dest)?;
        let (bounce, iov) = match op.buf.raw_parts() {
            Some(_) => (None, None),
            None => match op.buf.segments(0, total, usize::MAX) {
                Some(p) => (
                    None,
                    Some(
                        p.iter()
                            .map(|s| iov_of(s.as_ptr().cast_mut(), s.len()))
                            .collect(),
                    ),
                ),
                None => (Some(op.buf.to_vec()?), None),
            },
        };
        let h = cx
            .core
            .requests
            .insert(Request::handed_to_network(cx.route, op, total, 1))?;
        let net = &mut *cx.transport;
        let i = net.ops.insert(Op {
            req: h,
            kind,
            request: null_mut(),
            bounce,
            iov,
        });
        let (buf, count, datatype) = {
            let o = net.ops.get(i).ok_or_else(vanished)?;
            match (&o.iov, &o.bounce) {
                (Some(v), _) => (v.as_ptr().cast::<c_void>(), v.len(), ucp_dt_make_iov()),
                (None, Some(b)) => (b.as_ptr().cast(), b.len(), ucp_dt_make_contig(1)),
                (None, None) => {
                    let s = cx.core.requests.get(h).and_then(|r| match &r.kind {
                        RequestKind::Send(s) => s.buf.raw_parts(),
                        _ => None,
                    });
                    let (p, n) = s.ok_or_else(vanished)?;
                    (p.cast(), n, ucp_dt_make_contig(1))
                }
            }
        };
        let posted = post_send(net, i, ep, buf, count, datatype, bits, sync);
        match posted {
            Ok(true) => {
                net.ops.remove(i);
                cx.core.send_event_done(h);
            }
            Ok(false) => {
                if let Some(s) = cx.core.requests.get_mut(h).and_then(Request::send_mut) {
                    s.engine = word_of(i);
                }
            }
            Err(e) => {
                net.ops.remove(i);
                cx.core.requests.remove(h);
                return Err(e);
            }
        }
        Ok(h)
    }

    fn irecv<P: Partner>(
        cx: &mut Cx<'_, Net, P>,
        req: ReqHandle,
        want: &Envelope,
        // UCX's tagged receives are per worker, never per endpoint: a receive cannot name the
        // endpoint it accepts (ucp_tag_recv_nbx), so the source is only in the tag.
        _from: Option<Gpid>,
    ) -> Result<()> {
        let Some(r) = cx.core.requests.get_mut(req).and_then(Request::recv_mut) else {
            return Err(Error::new(
                ErrorKind::Internal,
                "UCX irecv on a non-receive",
            ));
        };
        let (bits, mask) = tag::recv_tag(want)?;
        let net = &mut *cx.transport;
        let worker = net.worker()?.raw();
        let (i, buf, count) = recv_slot(net, req, r);
        r.engine = word_of(i);
        let mut info = ucp_tag_recv_info_t::default();
        let param = recv_param(net, i, &mut info)?;
        // SAFETY: `buf`/`count` describe the receive's landing place (its buffer's raw parts,
        // the operation's bounce buffer or iovec array), kept until the completion is applied
        // (`P2p::quiesce`); `param`'s user data is the operation's fixed slot; `info` is
        // written only when the receive completes inside the call.
        let ptr = unsafe { ucp_tag_recv_nbx(worker, buf, count, bits, mask, &param) };
        started(cx, i, ptr, &info)
    }

    fn cancel_recv<P: Partner>(cx: &mut Cx<'_, Net, P>, req: ReqHandle) -> Result<bool> {
        let op = match native::begin_cancel(cx.core, req) {
            CancelStep::Answered(cancelled) => return Ok(cancelled),
            CancelStep::Ask(op) => op,
        };
        let net = &mut *cx.transport;
        let Some(i) = op.filter(|&i| net.ops.get(i).is_some_and(|o| o.req == req)) else {
            // No operation in UCX (the worker was closed, ending them all).
            if let Some(r) = cx.core.requests.get_mut(req).and_then(Request::recv_mut) {
                native::released(r);
            }
            return Ok(true);
        };
        let request = net.ops.get(i).map_or(null_mut(), |o| o.request);
        if !request.is_null() {
            let worker = net.worker()?.raw();
            // SAFETY: `request` is the live UCX request of this worker's receive `i` (freed
            // only when its completion is applied). The callback may run inside the call; it
            // only records.
            unsafe { ucp_request_cancel(worker, request) };
        }
        // The answer is the completion: cancelled, or matched after all.
        drive_until_released(cx, i, req)?;
        Ok(native::cancel_answer(cx.core, req))
    }

    fn cancel_send<P: Partner>(_cx: &mut Cx<'_, Net, P>, _req: ReqHandle) -> Result<()> {
        // A tagged send cannot be taken back once UCX has it: the cancel fails, as MPI allows,
        // and the send completes normally.
        Ok(())
    }

    fn iprobe<P: Partner>(
        cx: &mut Cx<'_, Net, P>,
        want: &Envelope,
        _from: Option<Gpid>,
    ) -> Result<Option<Status>> {
        progress_own(cx)?;
        Ok(probe(cx.transport, want, false)?.map(|(_, info)| probe_status(&info)))
    }

    fn improbe<P: Partner>(
        cx: &mut Cx<'_, Net, P>,
        want: &Envelope,
        _from: Option<Gpid>,
    ) -> Result<Option<(Message, Status)>> {
        progress_own(cx)?;
        let Some((msg, info)) = probe(cx.transport, want, true)? else {
            return Ok(None);
        };
        let (context, source, tag) = tag::fields(info.sender_tag);
        let i = cx.transport.ops.insert(Op {
            req: ReqHandle::DONE,
            kind: OpKind::Claimed {
                msg,
                tag: info.sender_tag,
                len: info.length,
            },
            request: null_mut(),
            bounce: None,
            iov: None,
        });
        let src = cx
            .core
            .process_of(context, source)
            .unwrap_or(UNKNOWN_PROCESS);
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
            probe_status(&info),
        )))
    }

    fn imrecv<P: Partner>(cx: &mut Cx<'_, Net, P>, msg: Message, req: ReqHandle) -> Result<()> {
        let Message::Native { token, .. } = msg else {
            return Err(Error::new(
                ErrorKind::Internal,
                "a message of the core's queues handed to the UCX engine",
            ));
        };
        let i = token as OpIndex;
        let net = &mut *cx.transport;
        let Some(Op {
            kind: OpKind::Claimed { msg, tag, len },
            ..
        }) = net.ops.get(i)
        else {
            return Err(Error::new(
                ErrorKind::Request,
                "matched-probe message already received",
            ));
        };
        let (msg, bits, len) = (*msg, *tag, *len);
        let Some(r) = cx.core.requests.get_mut(req).and_then(Request::recv_mut) else {
            return Err(Error::new(
                ErrorKind::Internal,
                "UCX imrecv on a non-receive",
            ));
        };
        net.ops.remove(i);
        let worker = net.worker()?.raw();
        let (i, buf, count) = recv_slot(net, req, r);
        r.engine = word_of(i);
        // The probe told the tag and length; UCX reports neither for a matched receive that
        // completes inside the call, and its callback may not either.
        let mut info = ucp_tag_recv_info_t {
            sender_tag: bits,
            length: len,
        };
        let param = recv_param(net, i, &mut info)?;
        if let Some(c) = net.ops.context_ptr(i) {
            // SAFETY: operation `i`'s slot, not yet posted.
            let c = unsafe { &*c };
            c.tag.set(bits);
            c.length.set(len);
        }
        // SAFETY: as in `irecv`; `msg` came from a probe that removed it and is received once.
        let ptr = unsafe { ucp_tag_msg_recv_nbx(worker, buf, count, msg, &param) };
        started(cx, i, ptr, &info)
    }

    fn discard<P: Partner>(cx: &mut Cx<'_, Net, P>, msg: Message) -> Result<()> {
        let Message::Native { token, .. } = msg else {
            return Ok(());
        };
        let i = token as OpIndex;
        let net = &mut *cx.transport;
        let Some(Op {
            kind: OpKind::Claimed { msg, tag, len },
            ..
        }) = net.ops.get(i)
        else {
            return Ok(());
        };
        let (msg, bits, len) = (*msg, *tag, *len);
        let worker = net.worker()?.raw();
        let o = net.ops.get_mut(i).ok_or_else(vanished)?;
        o.kind = OpKind::Discarding;
        let bounce = o.bounce.insert(vec![0u8; len]);
        let buf = bounce.as_mut_ptr().cast();
        let mut info = ucp_tag_recv_info_t::default();
        let param = recv_param(net, i, &mut info)?;
        // SAFETY: the bounce buffer lives in the operation until its completion is applied;
        // `msg` came from a probe that removed it and is received once.
        let ptr = unsafe { ucp_tag_msg_recv_nbx(worker, buf, len, msg, &param) };
        if ucs_ptr_is_err(ptr) {
            net.ops.remove(i);
            return Err(ucx_error(
                ErrorKind::Transport,
                "ucp_tag_msg_recv_nbx (discard)",
                ucs_ptr_raw_status(ptr),
            ));
        }
        // The message was consumed here: its sender's credit comes back.
        credit::consumed(cx, bits);
        let net = &mut *cx.transport;
        if ptr.is_null() {
            net.ops.remove(i);
        } else if let Some(o) = net.ops.get_mut(i) {
            o.request = ptr;
        }
        Ok(())
    }

    fn quiesce<P: Partner>(cx: &mut Cx<'_, Net, P>, req: ReqHandle) -> Result<()> {
        let op = match native::holding(cx.core, req) {
            Holding::PostedReceive => return Self::cancel_recv(cx, req).map(drop),
            Holding::Op(op) => op,
        };
        let net = &mut *cx.transport;
        let Some(i) = op.filter(|&i| net.ops.get(i).is_some_and(|o| o.req == req)) else {
            return Ok(());
        };
        drive_until_released(cx, i, req)
    }

    /// A blocking send waits for its receiver's credit (see the crate's `credit` module).
    #[inline(always)]
    fn send_ready<P: Partner>(cx: &mut Cx<'_, Net, P>, dest: Gpid, _total: usize) -> bool {
        message_credit::available(cx.core, cx.route, dest, credit::MESSAGE_CHARGE)
    }

    #[inline]
    fn progress<P: Partner>(cx: &mut Cx<'_, Net, P>) -> Result<usize> {
        progress_own(cx)
    }
}

/// Counts a nonblocking send that went without its receiver's credit (and so as a synchronous
/// send: see `isend`).
#[cold]
fn went_without_credit(net: &mut Net) {
    net.uncredited_sends += 1;
}

/// A contiguous standard send straight from the caller's buffer, posted without an operation
/// slot: one that UCX finishes inside the call (it copied the data out, as it does for short
/// messages) costs nothing more; one that it keeps gets a slot then, whose index goes into
/// the request's reserved space, and a request (the buffer stays lent to it), or, if the pool
/// is full, is driven to its end before the error is returned, so that UCX never reads a
/// buffer handed back.
#[inline(always)]
fn send_contiguous<P: Partner>(
    cx: &mut Cx<'_, Net, P>,
    op: SendOp,
    bits: u64,
    ptr: *const u8,
    len: usize,
    total: usize,
) -> Result<ReqHandle> {
    let net = &mut *cx.transport;
    let w = net.worker()?;
    let ep = w.ep(op.dest)?;
    let param = ucp_request_param_t {
        op_attr_mask: UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        cb: ucp_request_param_t__bindgen_ty_1 {
            send: Some(sent_slotless),
        },
        user_data: w.slotless_sink(),
        ..Default::default()
    };
    // SAFETY: `ep` is a live endpoint of this worker; `ptr`/`len` are the caller's buffer,
    // lent to a request below if UCX keeps it (or waited for); the user data is the worker's
    // list of slotless completions, which the callback only appends to.
    let request = unsafe { ucp_tag_send_nbx(ep, ptr.cast(), len, bits, &param) };
    if request.is_null() {
        return Ok(ReqHandle::DONE);
    }
    if ucs_ptr_is_err(request) {
        return Err(send_error(ucs_ptr_raw_status(request)));
    }
    let i = net.ops.insert(Op {
        req: ReqHandle::DONE,
        kind: OpKind::Send,
        request,
        bounce: None,
        iov: None,
    });
    // SAFETY: `request` was just returned by a send of this worker, and no other UCX call ran
    // since (its callback, if it already ran, only recorded the pointer).
    unsafe { set_request_op(request, i) };
    match cx
        .core
        .requests
        .insert(Request::handed_to_network(cx.route, op, total, 1))
    {
        Ok(h) => {
            if let Some(o) = cx.transport.ops.get_mut(i) {
                o.req = h;
            }
            if let Some(s) = cx.core.requests.get_mut(h).and_then(Request::send_mut) {
                s.engine = word_of(i);
            }
            Ok(h)
        }
        Err(e) => {
            let held = |net: &Net| net.ops.get(i).is_some();
            native::drive_until_released(cx, held, progress_own, |cx| {
                close_and_fail(cx, "an operation would not end")
            })?;
            Err(e)
        }
    }
}

/// Posts a send with operation `i`'s slot as user data. `Ok(true)`: done at once.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn post_send(
    net: &mut Net,
    i: OpIndex,
    ep: ucp_ep_h,
    buf: *const c_void,
    count: usize,
    datatype: ucp_datatype_t,
    bits: u64,
    sync: bool,
) -> Result<bool> {
    let ctx = arm(net, i)?;
    let param = ucp_request_param_t {
        op_attr_mask: UCP_OP_ATTR_FIELD_CALLBACK
            | UCP_OP_ATTR_FIELD_USER_DATA
            | UCP_OP_ATTR_FIELD_DATATYPE,
        cb: ucp_request_param_t__bindgen_ty_1 { send: Some(sent) },
        datatype,
        user_data: ctx.cast(),
        ..Default::default()
    };
    // SAFETY: `ep` is a live endpoint of this worker; `buf`/`count` describe the send's data
    // (the caller's buffer, lent to a request or waited for if UCX keeps it; or the
    // operation's own copy or iovec array), kept until the completion is applied; the user
    // data is the operation's fixed slot. The callback only records.
    let ptr = unsafe {
        if sync {
            ucp_tag_send_sync_nbx(ep, buf, count, bits, &param)
        } else {
            ucp_tag_send_nbx(ep, buf, count, bits, &param)
        }
    };
    if ptr.is_null() {
        return Ok(true);
    }
    if ucs_ptr_is_err(ptr) {
        return Err(send_error(ucs_ptr_raw_status(ptr)));
    }
    if let Some(o) = net.ops.get_mut(i) {
        o.request = ptr;
    }
    Ok(false)
}

/// Readies operation `i`'s slot for its callback; returns the slot (the user data).
#[inline(always)]
fn arm(net: &mut Net, i: OpIndex) -> Result<*mut Completion> {
    let ctx = net.ops.context_ptr(i).ok_or_else(vanished)?;
    let worker = net.worker.as_ref().ok_or_else(vanished)?;
    // SAFETY: `ctx` is the fixed slot of operation `i`, which no UCX callback touches before
    // the operation is posted.
    unsafe { &*ctx }.arm(i, worker);
    Ok(ctx)
}

/// The parameters of a receive with operation `i`'s slot as user data, `info` filled if it
/// completes inside the call.
fn recv_param(
    net: &mut Net,
    i: OpIndex,
    info: &mut ucp_tag_recv_info_t,
) -> Result<ucp_request_param_t> {
    let ctx = arm(net, i)?;
    let iov = net.ops.get(i).and_then(|o| o.iov.as_ref()).is_some();
    Ok(ucp_request_param_t {
        // Never completed inside the call: UCX 1.13 then reports neither the tag nor the
        // length (`recv_info` stays untouched; see ucx-sys's smoke test), so every receive
        // completes through its callback.
        op_attr_mask: UCP_OP_ATTR_FIELD_CALLBACK
            | UCP_OP_ATTR_FIELD_USER_DATA
            | UCP_OP_ATTR_FIELD_RECV_INFO
            | UCP_OP_ATTR_FIELD_DATATYPE
            | UCP_OP_ATTR_FLAG_NO_IMM_CMPL,
        cb: ucp_request_param_t__bindgen_ty_1 {
            recv: Some(received),
        },
        datatype: if iov {
            ucp_dt_make_iov()
        } else {
            ucp_dt_make_contig(1)
        },
        user_data: ctx.cast(),
        recv_info: ucp_request_param_t__bindgen_ty_2 { tag_info: info },
        ..Default::default()
    })
}

/// What a posted receive returned: done at once (applied now), failed, or in progress (UCX's
/// request kept with the operation).
fn started<P: Partner>(
    cx: &mut Cx<'_, Net, P>,
    i: OpIndex,
    ptr: ucs_status_ptr_t,
    info: &ucp_tag_recv_info_t,
) -> Result<()> {
    let net = &mut *cx.transport;
    if ptr.is_null() {
        let Some(op) = net.ops.remove(i) else {
            return Err(vanished());
        };
        return finish_recv(cx, op, UCS_OK, info.sender_tag, info.length);
    }
    if ucs_ptr_is_err(ptr) {
        let op = net.ops.remove(i);
        if let Some(r) = op
            .and_then(|o| cx.core.requests.get_mut(o.req))
            .and_then(Request::recv_mut)
        {
            r.engine = 0;
        }
        return Err(ucx_error(
            ErrorKind::Transport,
            "ucp_tag_recv_nbx",
            ucs_ptr_raw_status(ptr),
        ));
    }
    if let Some(o) = net.ops.get_mut(i) {
        o.request = ptr;
    }
    Ok(())
}

/// One entry of an iovec datatype.
fn iov_of(ptr: *mut u8, len: usize) -> ucp_dt_iov_t {
    ucp_dt_iov_t {
        buffer: ptr.cast(),
        length: len,
    }
}

/// Takes an operation slot for receive `req`: where UCX writes (the buffer's raw parts, its
/// pieces as an iovec — [`recv_param`] then names the iovec datatype — or a bounce buffer of
/// its capacity), as (slot, buffer, count).
fn recv_slot(net: &mut Net, req: ReqHandle, r: &mut RecvState) -> (OpIndex, *mut c_void, usize) {
    let (raw, bounce, iov) = match r.buf.raw_parts() {
        Some(p) => (Some(p), None, None),
        None => {
            let cap = r.buf.capacity();
            match r.buf.segments_mut(0, cap, usize::MAX) {
                Some(pieces) => (
                    None,
                    None,
                    Some(
                        pieces
                            .iter()
                            .map(|s| iov_of(s.as_ptr().cast_mut(), s.len()))
                            .collect::<Box<[_]>>(),
                    ),
                ),
                None => (None, Some(vec![0u8; cap]), None),
            }
        }
    };
    let i = net.ops.insert(Op {
        req,
        kind: OpKind::Recv,
        request: null_mut(),
        bounce,
        iov,
    });
    let o = net.ops.get_mut(i);
    let (buf, count) = match (raw, o) {
        (Some((p, n)), _) => (p.cast(), n),
        (None, Some(o)) => match (&mut o.iov, &mut o.bounce) {
            (Some(v), _) => (v.as_mut_ptr().cast(), v.len()),
            (None, Some(b)) => (b.as_mut_ptr().cast(), b.len()),
            (None, None) => (null_mut(), 0),
        },
        (None, None) => (null_mut(), 0),
    };
    (i, buf, count)
}

/// A probe (`remove`: a matched probe, which takes the message out of matching).
fn probe(
    net: &mut Net,
    want: &Envelope,
    remove: bool,
) -> Result<Option<(ucp_tag_message_h, ucp_tag_recv_info_t)>> {
    let (bits, mask) = tag::recv_tag(want)?;
    let worker = net.worker()?.raw();
    let mut info = ucp_tag_recv_info_t::default();
    // SAFETY: the worker is live; `info` is writable.
    let msg = unsafe { ucp_tag_probe_nb(worker, bits, mask, i32::from(remove), &mut info) };
    Ok((!msg.is_null()).then_some((msg, info)))
}

fn probe_status(info: &ucp_tag_recv_info_t) -> Status {
    let (_, source, tag) = tag::fields(info.sender_tag);
    Status::ok(source, tag, info.length)
}

/// The error of a send UCX refused at once.
#[cold]
fn send_error(status: ucs_status_t) -> Error {
    let kind = if peer_gone(status) {
        ErrorKind::PeerFailed
    } else {
        ErrorKind::Transport
    };
    ucx_error(kind, "ucp_tag_send_nbx", status)
}

/// Whether a status says the peer (or the connection to it) is gone.
fn peer_gone(status: ucs_status_t) -> bool {
    matches!(
        status,
        UCS_ERR_CONNECTION_RESET
            | UCS_ERR_ENDPOINT_TIMEOUT
            | UCS_ERR_UNREACHABLE
            | UCS_ERR_REJECTED
            | UCS_ERR_NOT_CONNECTED
    ) || (UCS_ERR_LAST_ENDPOINT_FAILURE..=UCS_ERR_FIRST_ENDPOINT_FAILURE).contains(&status)
        || (UCS_ERR_LAST_LINK_FAILURE..=UCS_ERR_FIRST_LINK_FAILURE).contains(&status)
}

/// One progress step of this engine alone: UCX's progress (callbacks record completions),
/// then the completions applied in order, failed peers noted, refused credit retried.
pub(crate) fn progress_own<P: Partner>(cx: &mut Cx<'_, Net, P>) -> Result<usize> {
    let Some(w) = &cx.transport.worker else {
        return Ok(0);
    };
    let mut n = w.progress();
    let failures = w.take_failures();
    for (peer, status) in failures {
        // Without UCX's guarantee (`ErrMode::None`) an endpoint also reports a peer that left
        // in order and closed its side; whether it failed is the launcher's word (see
        // `peer_state`), and requests that fail on it are logged by the device.
        tracing::debug!(peer, error = %status_string(status), "a UCX endpoint reported its peer gone");
        if !cx.transport.failed.contains(&peer) {
            cx.transport.failed.push(peer);
        }
        n += 1;
    }
    n += apply_completions(cx)?;
    if !cx.transport.credit_out.is_empty() {
        credit::retry_refused(cx.transport);
    }
    Ok(n)
}

/// Applies the completions the callbacks recorded.
fn apply_completions<P: Partner>(cx: &mut Cx<'_, Net, P>) -> Result<usize> {
    let mut n = 0;
    let mut done = std::mem::take(&mut cx.transport.applying);
    let mut slotless = std::mem::take(&mut cx.transport.applying_slotless);
    let result = loop {
        let Some(w) = &cx.transport.worker else {
            break Ok(());
        };
        w.swap_completed(&mut done);
        w.take_slotless(&mut slotless);
        if done.is_empty() && slotless.is_empty() {
            break Ok(());
        }
        n += done.len() + slotless.len();
        if let Err(e) = done.iter().try_for_each(|&i| completed(cx, i)) {
            break Err(e);
        }
        if let Err(e) = slotless.iter().try_for_each(|&d| completed_slotless(cx, d)) {
            break Err(e);
        }
    };
    done.clear();
    slotless.clear();
    cx.transport.applying = done;
    cx.transport.applying_slotless = slotless;
    result.map(|()| n)
}

/// Operation `i` completed (its callback ran).
fn completed<P: Partner>(cx: &mut Cx<'_, Net, P>, i: OpIndex) -> Result<()> {
    let net = &mut *cx.transport;
    let Some(ctx) = net.ops.context_ptr(i) else {
        return Ok(());
    };
    let (status, bits, len) = {
        // SAFETY: `ctx` is operation `i`'s slot; its callback has run (it queued `i`), so UCX
        // no longer writes it.
        let c = unsafe { &*ctx };
        (c.status.get(), c.tag.get(), c.length.get())
    };
    let Some(op) = net.ops.remove(i) else {
        return Ok(());
    };
    apply(cx, op, status, bits, len)
}

/// A send posted without a slot, which UCX kept, completed: its operation is the one whose
/// index is in the request's reserved space, if that operation still holds this request (a
/// request released at close may report after its operation ended).
fn completed_slotless<P: Partner>(cx: &mut Cx<'_, Net, P>, d: SlotlessDone) -> Result<()> {
    // SAFETY: the request is still UCX's (it is freed only when its operation is applied,
    // below), and the engine wrote the index right after the call that returned it.
    let i = unsafe { request_op(d.request) };
    let net = &mut *cx.transport;
    if !net.ops.get(i).is_some_and(|o| o.request == d.request) {
        return Ok(());
    }
    let Some(op) = net.ops.remove(i) else {
        return Ok(());
    };
    apply(cx, op, d.status, 0, 0)
}

/// Applies a completed operation (removed from the table): frees UCX's request, then
/// completes what the operation served.
fn apply<P: Partner>(
    cx: &mut Cx<'_, Net, P>,
    op: Op,
    status: ucs_status_t,
    bits: u64,
    len: usize,
) -> Result<()> {
    if !op.request.is_null() {
        // SAFETY: the operation's UCX request, completed (its callback ran), freed once.
        unsafe { ucp_request_free(op.request) };
    }
    match op.kind {
        OpKind::Send | OpKind::UncreditedSend(_) => {
            let failed = status != UCS_OK;
            if let (OpKind::UncreditedSend(dest), false) = (&op.kind, failed) {
                credit::owe(cx.transport, *dest);
            }
            if let Some(req) = cx.core.requests.get_mut(op.req) {
                if let RequestKind::Send(s) = &mut req.kind {
                    s.engine = 0;
                }
                if failed {
                    req.status.error = Some(send_error(status).kind());
                    req.complete = true;
                    tracing::warn!(error = %status_string(status), "a UCX send failed");
                } else {
                    cx.core.send_event_done(op.req);
                }
            }
        }
        OpKind::Recv => finish_recv(cx, op, status, bits, len)?,
        OpKind::CreditRecv(giver) => {
            cx.transport.credit_receives -= 1;
            if status == UCS_OK {
                let payload = op.bounce.as_deref().map(|b| &b[..len.min(b.len())]);
                credit::returned(cx, bits, payload)?;
            } else if status != UCS_ERR_CANCELED {
                tracing::warn!(giver, error = %status_string(status), "a receive for credit failed");
                credit::receive_failed(cx.transport, giver)?;
            }
        }
        OpKind::CreditSend => cx.transport.credit_sends -= 1,
        OpKind::Discarding | OpKind::Claimed { .. } => {}
    }
    Ok(())
}

/// A receive's completion: the data is in (unpack a bounce buffer, count the sender's credit,
/// learn the sender's process), or it was cancelled, truncated or failed.
fn finish_recv<P: Partner>(
    cx: &mut Cx<'_, Net, P>,
    op: Op,
    status: ucs_status_t,
    bits: u64,
    len: usize,
) -> Result<()> {
    let matched = status == UCS_OK || status == UCS_ERR_MESSAGE_TRUNCATED;
    let (context, source, tag) = tag::fields(bits);
    let process = if matched {
        cx.core
            .process_of(context, source)
            .unwrap_or(UNKNOWN_PROCESS)
    } else {
        UNKNOWN_PROCESS
    };
    if matched && process != UNKNOWN_PROCESS {
        credit::consumed_from(cx, process);
    }
    let Some(req) = cx.core.requests.get_mut(op.req) else {
        return Ok(()); // the receive is gone (its completion came after a quiesce)
    };
    let RequestKind::Recv(r) = &mut req.kind else {
        return Ok(());
    };
    native::released(r);
    if status == UCS_ERR_CANCELED {
        return Ok(());
    }
    if !matched {
        req.status.error = Some(if peer_gone(status) {
            ErrorKind::PeerFailed
        } else {
            ErrorKind::Transport
        });
        req.complete = true;
        tracing::warn!(error = %status_string(status), "a UCX receive failed");
        return Ok(());
    }
    r.source_process = process;
    // On truncation UCX 1.13 delivers none of the data reliably: nothing counts as written.
    let truncated = status == UCS_ERR_MESSAGE_TRUNCATED;
    let written = match (&op.bounce, truncated) {
        (_, true) => 0,
        (Some(b), false) => r.buf.write_at(0, &b[..len.min(b.len())]),
        (None, false) => len.min(r.buf.capacity()),
    };
    let mut st = Status::ok(source, tag, written);
    if truncated {
        st.error = Some(ErrorKind::Truncate);
    }
    cx.core.complete_recv(op.req, st);
    Ok(())
}

/// Closes the endpoints of the peers known to have failed (UCX's error handler, or the
/// launcher's word), where UCX allows a forced close.
#[cold]
fn close_failed_endpoints(net: &mut Net) {
    let failed = net.peers_where(|st| st == PeerState::Failed);
    if let Some(w) = &mut net.worker {
        let closed = w.close_failed(failed);
        if closed > 0 {
            tracing::debug!(
                closed,
                "closed the endpoints of failed peers before waiting on UCX"
            );
        }
    }
}

/// Destroys the worker (ending every operation on it, so nothing is written into a posted
/// buffer afterwards) and fails every request that had an operation there.
pub(crate) fn close_and_fail<P: Partner>(cx: &mut Cx<'_, Net, P>, why: &'static str) {
    tracing::error!(why, "closing the UCX worker");
    let reqs: Vec<ReqHandle> = cx.transport.ops.iter().map(|(_, o)| o.req).collect();
    cx.transport.release_requests();
    cx.transport.worker = None;
    cx.transport.ops = ch4_core::native::OpContexts::new();
    cx.transport.credit_receives = 0;
    cx.transport.credit_sends = 0;
    native::fail_all(cx.core, reqs, ErrorKind::Transport);
}

/// Drives this worker until operation `i` of request `req` has been applied (its slot freed),
/// within the device's cancel limit; past it the worker is destroyed. The endpoints of failed
/// peers are closed first (see [`crate::worker::Worker::close_failed`]): what UCX holds for a
/// dead peer then ends at once.
fn drive_until_released<P: Partner>(
    cx: &mut Cx<'_, Net, P>,
    i: OpIndex,
    req: ReqHandle,
) -> Result<()> {
    close_failed_endpoints(cx.transport);
    native::drive_until_released(
        cx,
        |net| net.ops.get(i).is_some_and(|o| o.req == req),
        progress_own,
        |cx| close_and_fail(cx, "an operation would not end"),
    )
}

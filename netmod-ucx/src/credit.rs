//! Eager credit over UCX: the flow control that bounds what a receiver's UCX holds of messages
//! no receive has matched yet — the same per-pair scheme as the AM fallback's and the libfabric
//! netmod's (ARCHITECTURE.md, "Flow control of eager messages"), on the core's `AmRouteState`
//! of this route, counted per message.
//!
//! UCX keeps an unexpected eager message in a descriptor of its own until a receive matches it,
//! and bounds none of it. Every message sent through the tagged path spends [`MESSAGE_CHARGE`]
//! of its receiver's credit (less when the credit is small); without credit a blocking send
//! waits (`P2p::send_ready`), while a nonblocking one goes as a synchronous send: UCX has no
//! per-message rendezvous to switch to, and holding the send back could hang a correct
//! program, but a synchronous send completes only once a receive has matched it, so the
//! receiver holds no more such messages than its senders have requests outstanding (such sends
//! are counted: `UcxNetmod::sends_without_credit`).
//!
//! The receiver counts every message it consumes — received, truncated, or dropped after a
//! matched probe — and gives the credit back, a quarter at a time, as a 4-byte message (the
//! number of messages) in the [`tag::CREDIT`] tag space, tagged with the giver alone. It cannot
//! tell a message sent without credit from another (a tag bit that every receive ignored would
//! move every receive out of UCX's hash: see [`tag`]), so it gives back credit for those too;
//! the sender keeps back one message's worth for each of its sends without credit that
//! completed, i.e. was matched (`PeerCredit::debt`). UCX acknowledges a synchronous send
//! when it matches it, before the engine counts it, and on the same endpoint as the credit
//! message that may follow, so the debt is known before the credit arrives.
//!
//! A sender keeps one receive posted for each process it has sent to with credit, with that
//! giver's exact tag: UCX checks every arriving message against each receive whose mask leaves
//! a bit free, so a receive for anyone's credit cost every message of the job that check (4%
//! of an 8-byte round trip over UCX's tcp).

use std::ptr::null_mut;

use ch4_core::native::{message_credit, OpIndex};
use ch4_core::transport::{AmTransport, Cx, Partner};
use ch4_core::{Gpid, PeerState, ReqHandle, Result};
use ucx_sys::*;

use crate::netmod::{Op, OpKind, UcxNetmod};
use crate::tag;
use crate::worker::{received, sent, Completion};

type Net = UcxNetmod;

/// Credit bytes one message costs at most (before the core's per-message overhead): what UCX
/// may hold for an unexpected eager message.
pub use ch4_core::native::message_credit::MESSAGE_CHARGE;

/// A message with tag `bits` was consumed here: counts it against its sender (the member of
/// its communicator at its rank), and gives credit back once a quarter has added up.
pub(crate) fn consumed<P: Partner>(cx: &mut Cx<'_, Net, P>, bits: u64) {
    let (context, source, _) = tag::fields(bits);
    if let Some(src) = cx.core.process_of(context, source) {
        consumed_from(cx, src);
    }
}

/// [`consumed`] of a message whose sender's process is known.
#[inline]
pub(crate) fn consumed_from<P: Partner>(cx: &mut Cx<'_, Net, P>, src: Gpid) {
    if let Some(messages) = message_credit::consumed(cx.core, cx.route, src, MESSAGE_CHARGE) {
        give_back(cx.transport, src, messages);
    }
}

/// Sends a credit message for `messages` to `dest`. One UCX cannot take now waits in
/// [`UcxNetmod::credit_out`]; a send UCX keeps has an operation slot of its own until it
/// completes. Best effort: a sender that has left needs no credit.
fn give_back(net: &mut Net, dest: Gpid, messages: u32) {
    let bits = tag::credit_tag(net.me);
    let Some(worker) = &mut net.worker else {
        return;
    };
    let ep = match worker.ep(dest) {
        Ok(ep) => ep,
        Err(e) => {
            tracing::debug!(error = %e, dest, "eager credit could not be given back");
            return;
        }
    };
    let Some((i, ctx, payload)) =
        credit_op(net, OpKind::CreditSend, messages.to_le_bytes().to_vec())
    else {
        return;
    };
    let Some(worker) = &net.worker else {
        return;
    };
    // SAFETY: `ctx` is the new operation's fixed slot, not yet posted.
    unsafe { &*ctx }.arm(i, worker);
    let param = ucp_request_param_t {
        op_attr_mask: UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        cb: ucp_request_param_t__bindgen_ty_1 { send: Some(sent) },
        user_data: ctx.cast(),
        ..Default::default()
    };
    // SAFETY: `ep` is a live endpoint; `payload` is the operation's 4-byte bounce buffer,
    // kept until its completion is applied (or copied out by UCX if it completes in the call);
    // the user data is the operation's fixed slot. The callback only records.
    let ptr = unsafe { ucp_tag_send_nbx(ep, payload.cast(), 4, bits, &param) };
    if ptr.is_null() {
        net.ops.remove(i);
    } else if ucs_ptr_is_err(ptr) {
        net.ops.remove(i);
        match ucs_ptr_raw_status(ptr) {
            UCS_ERR_NO_RESOURCE => merge(net, dest, messages),
            s => tracing::debug!(dest, error = %status_string(s), "eager credit not given back"),
        }
    } else if let Some(o) = net.ops.get_mut(i) {
        o.request = ptr;
        net.credit_sends += 1;
    }
}

fn merge(net: &mut Net, dest: Gpid, messages: u32) {
    match net.credit_out.iter_mut().find(|(d, _)| *d == dest) {
        Some((_, m)) => *m = m.saturating_add(messages),
        None => net.credit_out.push((dest, messages)),
    }
}

/// Tries the credit messages UCX could not take again, dropping those for ranks that are gone.
pub(crate) fn retry_refused(net: &mut Net) {
    for (dest, messages) in std::mem::take(&mut net.credit_out) {
        if net.peer_state(dest) == PeerState::Alive {
            give_back(net, dest, messages);
        }
    }
}

/// A credit message came in (its tag names the giver, its 4 bytes the number of messages): their
/// credit is added, less what the giver counted of this process's sends without credit, and
/// the receive posted again.
pub(crate) fn returned<P: Partner>(
    cx: &mut Cx<'_, Net, P>,
    bits: u64,
    payload: Option<&[u8]>,
) -> Result<()> {
    let (giver, count) = tag::credit_message(bits, payload);
    match count {
        Some(mut messages) => {
            if let Some(peer) = cx.transport.credit_peers.get_mut(giver) {
                let kept = messages.min(peer.debt);
                peer.debt -= kept;
                messages -= kept;
            }
            message_credit::returned(cx.core, cx.route, giver, messages, MESSAGE_CHARGE);
        }
        None => tracing::warn!(giver, "a credit message of the wrong size, ignored"),
    }
    if let Some(peer) = cx.transport.credit_peers.get_mut(giver) {
        peer.posted = false;
    }
    ensure_receive(cx.transport, giver)
}

/// The receive for `giver`'s credit failed (not cancelled): its giver is gone, or sent
/// something malformed (not 4 bytes). A live giver's is posted again.
pub(crate) fn receive_failed(net: &mut Net, giver: Gpid) -> Result<()> {
    if let Some(peer) = net.credit_peers.get_mut(giver) {
        peer.posted = false;
    }
    if net.peer_state(giver) == PeerState::Alive {
        ensure_receive(net, giver)?;
    }
    Ok(())
}

/// Owes `dest` one message's credit: a send to it without credit completed, i.e. it matched
/// the message, and counted it as one that took credit.
pub(crate) fn owe(net: &mut Net, dest: Gpid) {
    if let Some(peer) = net.credit_peers.get_mut(dest) {
        peer.debt = peer.debt.saturating_add(1);
    }
}

/// A credit message's operation (its 4 bytes in the operation's bounce buffer): its index, its
/// fixed slot and where the bytes are.
fn credit_op(
    net: &mut Net,
    kind: OpKind,
    bytes: Vec<u8>,
) -> Option<(OpIndex, *mut Completion, *mut u8)> {
    let i = net.ops.insert(Op {
        req: ReqHandle::DONE,
        kind,
        request: null_mut(),
        bounce: Some(bytes),
        iov: None,
    });
    let ctx = net.ops.context_ptr(i)?;
    let buf = net.ops.get_mut(i)?.bounce.as_mut()?.as_mut_ptr();
    Some((i, ctx, buf))
}

/// Posts the receive for `giver`'s returned credit unless one is posted: from the first message
/// sent to it with credit, there is credit to come back.
#[inline(always)]
pub(crate) fn ensure_receive(net: &mut Net, giver: Gpid) -> Result<()> {
    if net.credit_peers.get(giver).posted || giver >= net.size {
        return Ok(());
    }
    post_receive(net, giver)
}

/// Posts the receive for `giver`'s returned credit.
#[cold]
fn post_receive(net: &mut Net, giver: Gpid) -> Result<()> {
    let Some(worker) = &net.worker else {
        return Ok(());
    };
    let raw = worker.raw();
    let Some((i, ctx, buf)) = credit_op(net, OpKind::CreditRecv(giver), vec![0; 4]) else {
        return Err(crate::netmod::vanished());
    };
    let Some(worker) = &net.worker else {
        return Ok(());
    };
    // SAFETY: `ctx` is the new operation's fixed slot, not yet posted.
    unsafe { &*ctx }.arm(i, worker);
    let mut info = ucp_tag_recv_info_t::default();
    let param = ucp_request_param_t {
        // Through the callback only (see `engine::recv_param`).
        op_attr_mask: UCP_OP_ATTR_FIELD_CALLBACK
            | UCP_OP_ATTR_FIELD_USER_DATA
            | UCP_OP_ATTR_FIELD_RECV_INFO
            | UCP_OP_ATTR_FLAG_NO_IMM_CMPL,
        cb: ucp_request_param_t__bindgen_ty_1 {
            recv: Some(received),
        },
        user_data: ctx.cast(),
        recv_info: ucp_request_param_t__bindgen_ty_2 {
            tag_info: &mut info,
        },
        ..Default::default()
    };
    // SAFETY: the worker is live; `buf` is the operation's 4-byte bounce buffer, kept until its
    // completion is applied; the user data is the operation's fixed slot; `info` is written
    // only if it completes inside the call. The callback only records.
    let ptr = unsafe {
        ucp_tag_recv_nbx(
            raw,
            buf.cast(),
            4,
            tag::credit_tag(giver),
            tag::EXACT,
            &param,
        )
    };
    if ucs_ptr_is_err(ptr) {
        net.ops.remove(i);
        return Err(crate::worker::ucx_error(
            ch4_core::ErrorKind::Transport,
            "ucp_tag_recv_nbx (credit)",
            ucs_ptr_raw_status(ptr),
        ));
    }
    net.credit_receives += 1;
    if let Some(peer) = net.credit_peers.get_mut(giver) {
        peer.posted = true;
    }
    if ptr.is_null() {
        // A credit message was already there and is in: apply it at the next progress, as
        // if its callback had run.
        // SAFETY: the slot of the operation just posted, which UCX no longer holds.
        let c = unsafe { &*ctx };
        c.tag.set(info.sender_tag);
        c.length.set(info.length);
        if let Some(w) = &net.worker {
            w.requeue(i, UCS_OK, c);
        }
    } else if let Some(o) = net.ops.get_mut(i) {
        o.request = ptr;
    }
    Ok(())
}

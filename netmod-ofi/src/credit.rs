//! Eager credit over libfabric: the flow control that bounds what a receiver's provider holds
//! of messages no receive has matched yet.
//!
//! A tagged message that arrives before its receive stays inside the provider, and libfabric
//! bounds none of it: 1.17's `tcp;ofi_rxm` keeps every unexpected message in one of its receive
//! buffers (`FI_OFI_RXM_BUFFER_SIZE`, 16 KiB by default, whatever the message's length) and
//! posts a fresh one, so four senders' million 1 KiB messages to a busy receiver grew it by
//! 15 GiB. The AM fallback's eager credit (ARCHITECTURE.md, "Flow control of eager
//! messages"; the per-pair state is the core's `AmRouteState` of this route) bounds it here
//! too, counted per message rather than per byte, since the provider's cost of an unexpected
//! message does not depend on its length: messages longer than rxm's buffers go by rxm's own
//! rendezvous, which leaves the data at the sender.
//!
//! - Every message sent through the provider's tagged path (injected or not, synchronous or
//!   not) spends [`MESSAGE_CHARGE`] of its receiver's credit (less when the credit is small). Without credit, a blocking send
//!   waits for it (`P2p::send_ready`). A nonblocking one no longer than what the provider
//!   holds for any unexpected message (the engine's price of a message, rxm's buffer) goes
//!   whole as a synchronous send marked [`tag::UNCREDITED`]: its stub would cost the receiver
//!   as much, and it completes only once matched, so the receiver holds no more such
//!   messages than its senders have requests outstanding, with no read to wait for. A longer
//!   one goes by RMA read (`crate::large`), whose data stays in the user's buffer, or, on a
//!   provider without usable RMA, synchronous as well.
//! - The receiver counts every such message once it is consumed — delivered into a receive
//!   (truncated or not) or discarded after a matched probe — and gives the credit back in an
//!   empty message in the [`tag::CREDIT`] tag space once a quarter of it has added up, the
//!   number of messages in the remote CQ data. Messages sent by RMA read are neither charged nor counted.
//! - Each endpoint keeps [`CREDIT_RECEIVES`] receives posted for credit from any process;
//!   the provider holds the rest of them as unexpected messages until one is reposted.

use ch4_core::native::{message_credit, OpIndex};
use ch4_core::transport::{Cx, Partner};
use ch4_core::{Gpid, Result};

use ch4_core::transport::AmTransport;
use ch4_core::PeerState;

use crate::netmod::{OfiNetmod, Op, OpKind, QueuedRecv};
use crate::provider::{Posted, FI_ADDR_UNSPEC};
use crate::tag;

type Net = OfiNetmod;

/// Credit bytes one message costs at most (before the core's per-message overhead): what a
/// provider may hold for an unexpected message — a receive buffer of `tcp;ofi_rxm`.
pub use ch4_core::native::message_credit::MESSAGE_CHARGE;

/// Receives kept posted for returned credit.
pub const CREDIT_RECEIVES: usize = 4;

/// A message whose remote CQ data is `data` has been consumed here: counts it, and gives its
/// sender back the credit of the messages counted once a quarter of its credit has added up.
/// Best effort, like the AM fallback's: a sender that has left needs no credit, so a failure
/// to send it is only logged.
pub(crate) fn consumed<P: Partner>(cx: &mut Cx<'_, Net, P>, data: u64) {
    if tag::is_uncredited(data) {
        return;
    }
    let (src, _) = tag::from_cq_data(data);
    if let Some(messages) =
        message_credit::consumed(cx.core, cx.route, src, cx.transport.message_price)
    {
        give_back(cx.transport, src, messages);
    }
}

/// Injects a credit message for `messages` to `dest`; one the provider refuses for now waits
/// in [`OfiNetmod::credit_out`] (merged with any other for `dest`), outside the ordered send
/// queue: credit needs no order, and a message to a rank that has left — which rxm refuses
/// for ever — must hold up neither other sends nor this rank's finalize.
fn give_back(net: &mut Net, dest: Gpid, messages: u32) {
    let data = tag::cq_data(net.me, messages);
    match net
        .ep()
        .and_then(|ep| ep.tinjectdata(&[], data, u64::from(dest), tag::CREDIT))
    {
        Ok(Posted::Done) => {}
        Ok(Posted::Again | Posted::NoMessage) => {
            match net.credit_out.iter_mut().find(|(d, _)| *d == dest) {
                Some((_, m)) => *m = m.saturating_add(messages).min(tag::LARGE - 1),
                None => net.credit_out.push((dest, messages)),
            }
        }
        Err(e) => tracing::debug!(error = %e, dest, "eager credit could not be given back"),
    }
}

/// Tries the credit messages the provider refused again, dropping those for ranks that are
/// gone (a sender that has left needs no credit).
pub(crate) fn retry_refused(net: &mut Net) {
    for (dest, messages) in std::mem::take(&mut net.credit_out) {
        if net.peer_state(dest) == PeerState::Alive {
            give_back(net, dest, messages);
        }
    }
}

/// A credit message came in (its CQ data names the giver and the number of messages): their
/// credit is added, and the receive posted again.
pub(crate) fn returned<P: Partner>(cx: &mut Cx<'_, Net, P>, data: u64) -> Result<()> {
    let (giver, messages) = tag::from_cq_data(data);
    message_credit::returned(
        cx.core,
        cx.route,
        giver,
        messages,
        cx.transport.message_price,
    );
    post_receive(cx.transport)
}

/// Posts (or queues) one receive for returned credit.
pub(crate) fn post_receive(net: &mut Net) -> Result<()> {
    let op: OpIndex = net.ops.insert(Op {
        req: ch4_core::ReqHandle::DONE,
        kind: OpKind::CreditRecv,
        bounce: None,
        pieces: None,
    });
    net.credit_receives += 1;
    net.recv_in_order(QueuedRecv {
        op,
        dst: std::ptr::null_mut(),
        cap: 0,
        bits: tag::CREDIT,
        ignore: 0,
        // Credit comes back from every peer this rank sends to.
        src: FI_ADDR_UNSPEC,
        program: false,
    })
    .inspect_err(|_| {
        net.ops.remove(op);
        net.credit_receives -= 1;
    })
}

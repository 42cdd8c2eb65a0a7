//! The direct path of a blocking receive: a small message goes from the transport straight
//! into the caller's buffer, with no request and no posted-queue entry.

use ch4_core::core::Core;
use ch4_core::transport::{AmSink, AmTransport, Cx, Direct, HandlerId, Partner};
use ch4_core::{Envelope, Gpid, Result, Status};

use crate::deliver::{check_carried, eager_delivered, envelope, Arrival};
use crate::dispatch::{finish_poll, Dispatch};
use crate::wire;

/// The direct path of a blocking receive (see `P2p::recv_direct`): no request, no posted entry.
///
/// MPI's order is kept by three rules: a message already waiting in the unexpected queue is
/// served first (and a waiting rendezvous one sends us to the ordinary path); the path is only
/// taken while no other receive is posted, so no earlier receive can be owed the message; and
/// once a matching message has gone the ordinary way during a poll (a request-to-send), later
/// matching messages are not intercepted either.
#[inline]
pub(crate) fn recv_direct<T: AmTransport, P: Partner>(
    cx: &mut Cx<'_, T, P>,
    want: &Envelope,
    buf: &mut [u8],
) -> Result<Direct> {
    if !T::AM_ORDERED {
        return Ok(Direct::Fallback);
    }
    let core = &mut *cx.core;
    if let Some((_, _, waiting)) = core.unexpected.find(want) {
        if waiting.rendezvous || waiting.data.is_none() {
            return Ok(Direct::Fallback);
        }
        let Some((_, env, msg)) = core.unexpected.take_match(want) else {
            return Ok(Direct::Fallback);
        };
        let a = Arrival::of_waiting(env, &msg);
        let data = msg.data.unwrap_or_default();
        let st = copy_direct(core, &a, &data, buf);
        core.recycle_buffer(data);
        return st.map(Direct::Done);
    }
    if !core.posted.is_empty() {
        return Ok(Direct::Fallback);
    }
    let Cx {
        core,
        transport,
        route,
        partner,
    } = cx;
    let route = *route;
    let budget = core.config.poll_budget;
    let mut sink = DirectSink {
        inner: Dispatch::<T, P>::new(core, partner, route),
        want: *want,
        buf,
        done: None,
        blocked: false,
    };
    transport.am_poll(&mut sink, budget)?;
    let (done, blocked) = (sink.done, sink.blocked);
    finish_poll(core, *transport, route)?;
    Ok(match done {
        Some(st) => Direct::Done(st),
        None if blocked => Direct::Fallback,
        None => Direct::Pending,
    })
}

/// Copies an eager message into a direct receive's buffer and finishes its delivery.
#[inline(always)]
fn copy_direct(core: &mut Core, a: &Arrival, data: &[u8], buf: &mut [u8]) -> Result<Status> {
    let n = data.len().min(buf.len());
    buf[..n].copy_from_slice(&data[..n]);
    eager_delivered(&mut core.am[a.route.index()], a, n)
}

/// The sink of a direct receive's poll: takes the first eager message the receive accepts,
/// hands everything else to the ordinary dispatch.
struct DirectSink<'a, 'b, T, P> {
    inner: Dispatch<'a, T, P>,
    want: Envelope,
    buf: &'b mut [u8],
    done: Option<Status>,
    /// A matching message went the ordinary way: nothing after it may be intercepted.
    blocked: bool,
}

impl<T: AmTransport, P: Partner> AmSink for DirectSink<'_, '_, T, P> {
    #[inline(always)]
    fn deliver(&mut self, src: Gpid, h: HandlerId, header: &[u8], payload: &[u8]) -> Result<()> {
        if self.done.is_none() && !self.blocked && wire::is_match(h) {
            let (hdr, _) = wire::parse_match(h, header, payload.len())?;
            if self.want.accepts(&envelope(&hdr)) {
                if wire::is_eager(h) && self.inner.core.posted.is_empty() {
                    check_carried(src, hdr.total, payload.len())?;
                    let a = Arrival::new(self.inner.route, src, &hdr, payload.len(), 0);
                    let st = copy_direct(self.inner.core, &a, payload, self.buf)?;
                    self.done = Some(st);
                    return Ok(());
                }
                self.blocked = true;
            }
        }
        self.inner.deliver(src, h, header, payload)
    }

    #[inline(always)]
    fn wants_more(&self) -> bool {
        self.done.is_none()
    }

    fn destination(
        &mut self,
        src: Gpid,
        h: HandlerId,
        header: &[u8],
        len: usize,
    ) -> Option<&mut [u8]> {
        self.inner.destination(src, h, header, len)
    }

    fn scattered_destination(
        &mut self,
        src: Gpid,
        h: HandlerId,
        header: &[u8],
        len: usize,
        max_pieces: usize,
    ) -> Option<smallvec::SmallVec<[&mut [u8]; 8]>> {
        self.inner
            .scattered_destination(src, h, header, len, max_pieces)
    }

    fn placed(&mut self, src: Gpid, h: HandlerId, header: &[u8], len: usize) -> Result<()> {
        self.inner.placed(src, h, header, len)
    }
}

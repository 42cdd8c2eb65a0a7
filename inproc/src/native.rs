//! A netmod engine that matches "in the network", as libfabric's tagged API or UCX's tag API do.
//!
//! The receiving endpoint keeps its own posted and unexpected queues (the NIC's tables), so the
//! core never sees these messages until a receive completes. A match found during one progress
//! call is completed during the next — like a NIC that has matched a message and is still moving
//! its data — which makes the window where an ANY_SOURCE partner cancel fails reachable in tests.

use ch4_core::matching::{PostedId, PostedQueue, UnexpectedQueue};
use ch4_core::pool::Handle;
use ch4_core::request::{
    msg_flags, CancelState, Message, ReqHandle, Request, RequestKind, SendState,
};
use ch4_core::transport::{AmSink, Cx, HandlerId, P2p, Partner, SendOp};
use ch4_core::{Envelope, Error, ErrorKind, Gpid, Result, SendMode, Status};
use rustc_hash::FxHashMap;

use crate::{InprocNet, Native};

/// Handler id of a tagged message (never used by the active-message protocol).
const TAGGED: HandlerId = 0xF0;
/// Handler id of a synchronous-send acknowledgement.
const TAGGED_ACK: HandlerId = 0xF1;

/// The wire header of a tagged message.
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct TagHeader {
    context: u32,
    source: i32,
    tag: i32,
    flags: u32,
    sreq: u64,
}

/// A tagged message nobody has asked for yet.
struct Arrived {
    src: Gpid,
    flags: u32,
    sreq: u64,
    data: Vec<u8>,
}

/// The "NIC tables" of one endpoint.
#[derive(Default)]
pub struct NativeEngine {
    posted: PostedQueue<ReqHandle>,
    posted_ids: FxHashMap<ReqHandle, PostedId>,
    unexpected: UnexpectedQueue<Arrived>,
    /// Matched, data "in flight": completed at the next progress call.
    in_flight: Vec<(ReqHandle, Envelope, Arrived)>,
    /// Messages taken by a matched probe, by token.
    probed: FxHashMap<u64, Arrived>,
    next_token: u64,
}

type Net = InprocNet<Native>;

impl P2p<Net> for NativeEngine {
    const NATIVE_MATCHING: bool = true;

    fn isend<P: Partner>(cx: &mut Cx<'_, Net, P>, op: SendOp) -> Result<ReqHandle> {
        let sync = op.mode == SendMode::Synchronous;
        let flags = match op.mode {
            SendMode::Standard => 0,
            SendMode::Synchronous => msg_flags::SYNC,
            SendMode::Ready => msg_flags::READY,
        };
        let data = op.buf.to_vec()?;
        let mut hdr = TagHeader {
            context: op.env.context,
            source: op.env.source,
            tag: op.env.tag,
            flags,
            sreq: 0,
        };
        let mut req = None;
        if sync {
            let h = cx.core.requests.insert(Request {
                complete: !sync,
                status: Status::EMPTY,
                kind: RequestKind::Send(SendState {
                    route: cx.route,
                    dest: op.dest,
                    env: op.env,
                    mode: op.mode,
                    buf: ch4_core::buffer::SendBuf::owned(Vec::new()),
                    total: data.len(),
                    sent: data.len(),
                    accepted: data.len(),
                    peer_req: 0,
                    pending: u8::from(sync),
                    cancel: CancelState::None,
                }),
            })?;
            hdr.sreq = h.to_raw();
            req = Some(h);
        }
        let r = cx
            .transport
            .ep
            .send(op.dest, TAGGED, bytemuck::bytes_of(&hdr), &[&data]);
        if let Err(e) = r {
            if let Some(h) = req {
                cx.core.requests.remove(h);
            }
            return Err(e);
        }
        Ok(req.unwrap_or(ReqHandle::DONE))
    }

    fn irecv<P: Partner>(cx: &mut Cx<'_, Net, P>, req: ReqHandle) -> Result<()> {
        let want = match cx.core.requests.get(req).map(|r| &r.kind) {
            Some(RequestKind::Recv(r)) => r.want,
            _ => {
                return Err(Error::new(
                    ErrorKind::Internal,
                    "native irecv on a non-receive",
                ))
            }
        };
        let eng = &mut cx.transport.native;
        match eng.unexpected.take_match(&want) {
            Some((_, env, msg)) => deliver(cx, req, env, msg),
            None => {
                let id = eng.posted.post(want, req);
                eng.posted_ids.insert(req, id);
                Ok(())
            }
        }
    }

    fn cancel_recv<P: Partner>(cx: &mut Cx<'_, Net, P>, req: ReqHandle) -> Result<bool> {
        let eng = &mut cx.transport.native;
        Ok(eng
            .posted_ids
            .remove(&req)
            .is_some_and(|id| eng.posted.remove(id).is_some()))
    }

    fn cancel_send<P: Partner>(_cx: &mut Cx<'_, Net, P>, _req: ReqHandle) -> Result<()> {
        // Like most NICs, this one cannot take back a tagged send: the cancel fails, which MPI
        // allows; the request completes normally.
        Ok(())
    }

    fn iprobe<P: Partner>(cx: &mut Cx<'_, Net, P>, want: &Envelope) -> Result<Option<Status>> {
        Ok(cx
            .transport
            .native
            .unexpected
            .find(want)
            .map(|(_, env, m)| Status::ok(env.source, env.tag, m.data.len())))
    }

    fn improbe<P: Partner>(
        cx: &mut Cx<'_, Net, P>,
        want: &Envelope,
    ) -> Result<Option<(Message, Status)>> {
        let eng = &mut cx.transport.native;
        Ok(eng.unexpected.take_match(want).map(|(_, env, m)| {
            let st = Status::ok(env.source, env.tag, m.data.len());
            eng.next_token += 1;
            let token = eng.next_token;
            eng.probed.insert(token, m);
            (Message::Native { env, token }, st)
        }))
    }

    fn imrecv<P: Partner>(cx: &mut Cx<'_, Net, P>, msg: Message, req: ReqHandle) -> Result<()> {
        let Message::Native { env, token } = msg else {
            return Err(Error::new(
                ErrorKind::Internal,
                "non-native message to native engine",
            ));
        };
        match cx.transport.native.probed.remove(&token) {
            Some(m) => deliver(cx, req, env, m),
            None => Err(Error::new(
                ErrorKind::Request,
                "matched-probe message already received",
            )),
        }
    }

    fn progress<P: Partner>(cx: &mut Cx<'_, Net, P>) -> Result<usize> {
        // Finish the matches of the previous call first (the "DMA" completes).
        let done = std::mem::take(&mut cx.transport.native.in_flight);
        let mut n = done.len();
        for (req, env, m) in done {
            deliver(cx, req, env, m)?;
        }
        let mut sink = TaggedSink {
            eng: &mut cx.transport.native,
            core: cx.core,
        };
        let budget = sink.core.config.poll_budget;
        n += cx.transport.ep.poll(&mut sink, budget)?;
        Ok(n)
    }
}

/// Copies a matched message into its receive and completes it (acknowledging a synchronous
/// send).
fn deliver<P: Partner>(
    cx: &mut Cx<'_, Net, P>,
    req: ReqHandle,
    env: Envelope,
    m: Arrived,
) -> Result<()> {
    let Some(r) = cx.core.requests.get_mut(req).and_then(Request::recv_mut) else {
        return Ok(()); // the receive was abandoned; the data is dropped with it
    };
    r.native = false;
    let written = r.buf.write_at(0, &m.data);
    let mut st = Status::ok(env.source, env.tag, written);
    if m.flags & msg_flags::READY_UNMATCHED != 0 {
        st.error = Some(ErrorKind::ReadyNotPosted);
    } else if m.data.len() > written {
        st.error = Some(ErrorKind::Truncate);
    }
    cx.core.complete_recv(req, st);
    if m.flags & msg_flags::SYNC != 0 {
        cx.transport
            .ep
            .send(m.src, TAGGED_ACK, &m.sreq.to_le_bytes(), &[])?;
    }
    Ok(())
}

struct TaggedSink<'a> {
    eng: &'a mut NativeEngine,
    core: &'a mut ch4_core::core::Core,
}

impl AmSink for TaggedSink<'_> {
    fn deliver(&mut self, src: Gpid, h: HandlerId, header: &[u8], payload: &[u8]) -> Result<()> {
        match h {
            TAGGED => {
                let hdr: TagHeader = bytemuck::try_pod_read_unaligned(header)
                    .map_err(|_| Error::new(ErrorKind::Protocol, "short tagged header"))?;
                let env = Envelope {
                    context: hdr.context,
                    source: hdr.source,
                    tag: hdr.tag,
                };
                let mut m = Arrived {
                    src,
                    flags: hdr.flags,
                    sreq: hdr.sreq,
                    data: payload.to_vec(),
                };
                match self.eng.posted.take_match(&env) {
                    Some((_, _, req)) => {
                        self.eng.posted_ids.remove(&req);
                        self.eng.in_flight.push((req, env, m));
                    }
                    None => {
                        if m.flags & msg_flags::READY != 0 {
                            m.flags |= msg_flags::READY_UNMATCHED;
                        }
                        self.eng.unexpected.push(env, m);
                    }
                }
                Ok(())
            }
            TAGGED_ACK => {
                let raw = u64::from_le_bytes(
                    header
                        .try_into()
                        .map_err(|_| Error::new(ErrorKind::Protocol, "short tagged ack"))?,
                );
                let h = Handle::from_raw(raw);
                if self.core.requests.get(h).is_none() {
                    return Err(Error::new(ErrorKind::Protocol, "ack for an unknown send"));
                }
                self.core.send_event_done(h);
                Ok(())
            }
            other => Err(Error::new(
                ErrorKind::Protocol,
                format!("native netmod got active message {other}; it speaks only tagged"),
            )),
        }
    }
}

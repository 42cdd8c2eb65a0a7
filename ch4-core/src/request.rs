//! Request objects and the records the matching queues keep.
//!
//! Requests live in a [`Pool`](crate::pool::Pool) (CH4's memory objects) and are named by
//! generation-checked [`ReqHandle`]s, which also travel in wire headers as request ids. The
//! state below is everything a point-to-point engine keeps per operation: engines own no hidden
//! state, so the core can complete, cancel and account for any request whoever carries it.

use crate::buffer::{RecvBuf, SendBuf};
use crate::matching::PostedId;
use crate::types::{Envelope, Gpid, SendMode, Status};

/// A handle to a request in the device's pool.
pub type ReqHandle = crate::pool::Handle;

/// Which transport carries traffic to a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Route {
    /// The integrated shared-memory layer (peers on this node, and self).
    Shm = 0,
    /// The network module (everyone else).
    Net = 1,
}

impl Route {
    /// Index for per-route tables.
    #[inline(always)]
    pub const fn index(self) -> usize {
        self as usize
    }
}

/// The progress of a cancel on a send request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelState {
    /// No cancel was asked for.
    None,
    /// A cancel-send request is on its way to the receiver.
    Requested,
    /// The receiver answered; `true` when it removed the message.
    Answered(bool),
}

/// A send in flight.
pub struct SendState {
    /// The transport the send went out on.
    pub route: Route,
    /// The receiving process.
    pub dest: Gpid,
    /// Context, our rank and the tag, as the receiver matches them.
    pub env: Envelope,
    /// Standard, synchronous or ready.
    pub mode: SendMode,
    /// The data; read until the request completes.
    pub buf: SendBuf,
    /// Message length in bytes.
    pub total: usize,
    /// Bytes handed to the transport so far (rendezvous streaming).
    pub sent: usize,
    /// How many bytes the receiver accepted (its buffer may be smaller: truncation).
    pub accepted: usize,
    /// The engine's word about this send (see [`EngineWord`]): the active-message engine keeps
    /// the receiver's request id here, learned from its clear-to-send.
    pub engine: EngineWord,
    /// Events still owed before completion (rendezvous data out, synchronous ack, cancel answer).
    pub pending: u8,
    /// Whether a cancel was asked for and what came of it.
    pub cancel: CancelState,
    /// The message went by rendezvous: the active-message engine counts it as sending large
    /// data (`AmRouteState::rendezvous_in_flight`) until its data has moved or it is cancelled.
    pub rendezvous: bool,
}

/// A receive in flight.
pub struct RecvState {
    /// What the receive accepts (wildcards allowed; `source` is a communicator rank).
    pub want: Envelope,
    /// Where the data goes.
    pub buf: RecvBuf,
    /// Its entry in the core's posted queue while unmatched there.
    pub posted: Option<PostedId>,
    /// Where the receive stands in a natively matching netmod (see [`NativeHalf`]).
    pub native: NativeHalf,
    /// The process the matched message came from, once a transport matched it (the status
    /// names only the communicator rank); [`UNKNOWN_PROCESS`] before. Engines set it when they
    /// match. (Not an `Option`: a request stays well under 128 bytes, past which the pool
    /// would move each one with a `memcpy` call on the hot path.)
    pub source_process: Gpid,
    /// The engine's word about this receive (see [`EngineWord`]).
    pub engine: EngineWord,
    /// Bytes still expected after a match (rendezvous data), 0 when none.
    pub expected: usize,
    /// Bytes written into `buf` so far.
    pub received: usize,
}

impl RecvState {
    /// A receive for `want` into `buf`, not yet posted anywhere.
    #[inline(always)]
    pub fn new(want: Envelope, buf: RecvBuf) -> RecvState {
        RecvState {
            want,
            buf,
            posted: None,
            native: NativeHalf::NotPosted,
            source_process: UNKNOWN_PROCESS,
            engine: 0,
            expected: 0,
            received: 0,
        }
    }
}

/// A word of an engine's own state kept in a request: for a natively matching engine the index
/// of the operation's context in its [`OpContexts`](crate::native::OpContexts) or a provider
/// request pointer (UCX's `ucp_request`); for the active-message engine a send's peer request
/// id. Zero while unused; the core never reads it. One word, not more: a request stays within
/// 128 bytes, which the pool moves without a `memcpy` call.
pub type EngineWord = u64;

/// [`RecvState::source_process`] before a transport matched the receive.
pub const UNKNOWN_PROCESS: Gpid = Gpid::MAX;

/// Where a receive stands in a natively matching netmod: the explicit state machine of CH4's
/// ANY_SOURCE partner, whose bugs in MPICH came from implicit states (a cancel that relied on
/// `fi_cancel`'s return code, partner fields set after the netmod had already completed, one
/// half cancelled and not the other).
///
/// ```text
///            post                 cancel asked             provider: cancelled
///  NotPosted ─────▶ Posted ───────────────────▶ CancelAsked ──────────────────▶ NotPosted
///                     │                              │
///                     │ provider matched             │ provider: matched after all
///                     ▼                              ▼
///                  Matched ◀─────────────────────────┘
/// ```
///
/// `partnered` marks an ANY_SOURCE receive whose other half waits in the core's posted queue
/// (shared memory, or an active-message netmod): whoever matches first must first cancel the
/// other, and while a cancel of this half is asked and unanswered ([`NativeHalf::CancelAsked`])
/// the core's half must not complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NativeHalf {
    /// Not in the network: never posted there, or cancelled there for certain.
    NotPosted,
    /// Posted to the network and not known to have matched.
    Posted {
        /// The core's queue holds the other half of this ANY_SOURCE receive.
        partnered: bool,
    },
    /// A cancel was asked of the network; its answer (cancelled or matched) is not in yet.
    CancelAsked {
        /// As in [`NativeHalf::Posted`].
        partnered: bool,
    },
    /// The network matched the receive: its data comes from the network, the core's half (if
    /// any) is gone, and the buffer belongs to the network until the engine completes it.
    Matched,
}

impl NativeHalf {
    /// Whether the network may still hold (and write) the receive's buffer.
    #[inline(always)]
    pub fn holds_buffer(self) -> bool {
        !matches!(self, NativeHalf::NotPosted)
    }

    /// Whether this is the network half of an ANY_SOURCE receive whose core half is posted.
    #[inline(always)]
    pub fn partnered(self) -> bool {
        matches!(
            self,
            NativeHalf::Posted { partnered: true } | NativeHalf::CancelAsked { partnered: true }
        )
    }
}

/// What a request is doing.
pub enum RequestKind {
    /// A send.
    Send(SendState),
    /// A receive.
    Recv(RecvState),
    /// Nothing left to do; only the status remains (PROC_NULL, finished work).
    Done,
    /// A collective's schedule, which the device's progress runs and which completes this
    /// request when it ends (`crate::schedule`); no transport holds it.
    Schedule,
}

/// One pooled request.
pub struct Request {
    /// Set once, when the operation finished (successfully, with an error status, or cancelled).
    pub complete: bool,
    /// Filled at completion.
    pub status: Status,
    /// The operation's state.
    pub kind: RequestKind,
}

impl Request {
    /// A request that finished before it was created (for example a send to PROC_NULL).
    pub fn completed(status: Status) -> Request {
        Request {
            complete: true,
            status,
            kind: RequestKind::Done,
        }
    }

    /// The request of a send that a natively matching network carries whole from the user's
    /// buffer (`op.buf`, lent to the request until the network lets go): every byte counts as
    /// sent and accepted, and it completes after `pending` events from the engine (the send's
    /// completion, a synchronous send's acknowledgement).
    pub fn handed_to_network(
        route: Route,
        op: crate::transport::SendOp,
        total: usize,
        pending: u8,
    ) -> Request {
        Request {
            complete: false,
            status: Status::EMPTY,
            kind: RequestKind::Send(SendState {
                route,
                dest: op.dest,
                env: op.env,
                mode: op.mode,
                buf: op.buf,
                total,
                sent: total,
                accepted: total,
                pending,
                cancel: CancelState::None,
                engine: 0,
                rendezvous: false,
            }),
        }
    }

    /// The receive state, if this is a receive.
    #[inline(always)]
    pub fn recv_mut(&mut self) -> Option<&mut RecvState> {
        match &mut self.kind {
            RequestKind::Recv(r) => Some(r),
            _ => None,
        }
    }

    /// The send state, if this is a send.
    #[inline(always)]
    pub fn send_mut(&mut self) -> Option<&mut SendState> {
        match &mut self.kind {
            RequestKind::Send(s) => Some(s),
            _ => None,
        }
    }
}

/// Flags a matched message carries from its sender.
pub mod msg_flags {
    /// The sender is in synchronous mode: acknowledge the match.
    pub const SYNC: u32 = 1;
    /// The sender is in ready mode: it asserted a receive was posted.
    pub const READY: u32 = 2;
    /// The message arrived in ready mode with no receive posted: the receive gets an error.
    pub const READY_UNMATCHED: u32 = 4;
}

/// A message that arrived before its receive (the unexpected queue's record) — or one taken by a
/// matched probe and not yet received.
pub struct Unexpected {
    /// The route it came on (replies go back the same way).
    pub route: Route,
    /// The sending process.
    pub src: Gpid,
    /// [`msg_flags`].
    pub flags: u32,
    /// The sender's request id (0 when the sender keeps none).
    pub sreq: u64,
    /// The message's length in bytes.
    pub total: usize,
    /// The data of an eager message, or the first piece a rendezvous request-to-send carried
    /// ([`AmTransport::first_piece`](crate::transport::AmTransport::first_piece)); `None` for
    /// a request-to-send without data.
    pub data: Option<Vec<u8>>,
    /// A rendezvous request-to-send: its sender waits for a clear-to-send (or a single-copy
    /// read) and streams what `data` does not hold. False for an eager message, which `data`
    /// holds whole.
    pub rendezvous: bool,
    /// Where a rendezvous sender offered its data for a single-copy read (LMT Get); 0 when it
    /// did not.
    pub remote_addr: u64,
}

/// A message removed from matching by a matched probe (MPI_Mprobe), to be received with
/// `mrecv`. No other receive can match it any more.
pub enum Message {
    /// A message held by the core's queues (shm or an active-message netmod).
    Am {
        /// Its envelope.
        env: Envelope,
        /// Its record.
        msg: Unexpected,
    },
    /// A message held inside a natively matching netmod, named by the netmod's token. Dropped
    /// without being received, it must be discarded through its engine
    /// ([`P2p::discard`](crate::transport::P2p::discard)): the network still holds it, and a
    /// rendezvous sender waits for it to be taken.
    Native {
        /// Its envelope.
        env: Envelope,
        /// The sending process.
        src: Gpid,
        /// The netmod's name for it.
        token: u64,
    },
    /// The result of probing PROC_NULL: receiving it completes at once with no data.
    NoProc,
}

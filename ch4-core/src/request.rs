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
    /// The receiver's request id, learned from its clear-to-send.
    pub peer_req: u64,
    /// Events still owed before completion (rendezvous data out, synchronous ack, cancel answer).
    pub pending: u8,
    /// Whether a cancel was asked for and what came of it.
    pub cancel: CancelState,
}

/// A receive in flight.
pub struct RecvState {
    /// What the receive accepts (wildcards allowed; `source` is a communicator rank).
    pub want: Envelope,
    /// Where the data goes.
    pub buf: RecvBuf,
    /// Its entry in the core's posted queue while unmatched there.
    pub posted: Option<PostedId>,
    /// An ANY_SOURCE receive also posted to a natively matching netmod (CH4's anysource
    /// partner): whoever matches first must cancel the other side.
    pub partnered: bool,
    /// Posted inside a natively matching netmod (alone, or as the partner above).
    pub native: bool,
    /// Bytes still expected after a match (rendezvous data), 0 when none.
    pub expected: usize,
    /// Bytes written into `buf` so far.
    pub received: usize,
    /// The message's full length once matched (can exceed the buffer: truncation).
    pub msg_bytes: usize,
}

/// What a request is doing.
pub enum RequestKind {
    /// A send.
    Send(SendState),
    /// A receive.
    Recv(RecvState),
    /// Nothing left to do; only the status remains (PROC_NULL, finished work).
    Done,
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
    /// The data of an eager message; `None` for a rendezvous request-to-send.
    pub data: Option<Vec<u8>>,
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
    /// A message held inside a natively matching netmod, named by the netmod's token.
    Native {
        /// Its envelope.
        env: Envelope,
        /// The netmod's name for it.
        token: u64,
    },
    /// The result of probing PROC_NULL: receiving it completes at once with no data.
    NoProc,
}

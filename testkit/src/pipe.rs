//! An in-memory wire whose frames a test can read, rewrite and forge.
//!
//! The real transports hide their bytes (a ring in shared memory, a socket); a protocol test
//! needs to see what went out — a CTS and the length it accepts, how many eager packets left
//! under flow control — and to put in what a broken or hostile peer would send. [`Pipe`] is an
//! ordered [`AmTransport`] whose wire is a [`Wire`]: one queue of [`Frame`]s per rank, shared
//! with the test through an `Rc`, so nothing moves unless the test polls (quinn-proto's `Pair`
//! keeps its in-flight datagrams in plain queues for the same reason).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

use ch4_core::transport::{AmSink, AmTransport, HandlerId, Netmod};
use ch4_core::{Error, ErrorKind, Gpid, Result};

/// One active message on the wire, owned, so a test can keep it, change it or send it again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// The sending rank, as the receiver's sink will be told.
    pub src: Gpid,
    /// The handler it is for.
    pub handler: HandlerId,
    /// The protocol header bytes.
    pub header: Vec<u8>,
    /// The payload, already one piece (a sender's slices are concatenated).
    pub payload: Vec<u8>,
}

impl Frame {
    /// A frame from `src`: the shape a forged packet is written in.
    pub fn new(src: Gpid, handler: HandlerId, header: &[u8], payload: &[u8]) -> Frame {
        Frame {
            src,
            handler,
            header: header.to_vec(),
            payload: payload.to_vec(),
        }
    }
}

/// The wire of a pipe job: rank `r`'s inbox is a queue of frames, in send order.
///
/// A cheap handle (`Rc`): the test keeps one and every [`Pipe`] holds another, so the test can
/// look at the wire between progress calls without reaching into a device.
#[derive(Clone, Debug, Default)]
pub struct Wire {
    inboxes: Rc<RefCell<Vec<VecDeque<Frame>>>>,
    /// Payloads put straight into receive buffers by placing pipes (see [`Pipe::placing`]).
    placed: Rc<std::cell::Cell<u64>>,
}

impl Wire {
    /// A wire for `ranks` ranks, every inbox empty.
    pub fn new(ranks: usize) -> Wire {
        Wire {
            inboxes: Rc::new(RefCell::new(vec![VecDeque::new(); ranks])),
            placed: Rc::default(),
        }
    }

    /// Rank `me`'s end of the wire, with the pipe's small default limits.
    pub fn endpoint(&self, me: Gpid) -> Pipe {
        Pipe {
            me,
            wire: self.clone(),
            eager_limit: Pipe::EAGER_LIMIT,
            max_payload: Pipe::MAX_PAYLOAD,
            first_piece: 0,
            crowded_piece: None,
            placement: Placement::Whole,
        }
    }

    /// Appends `frame` to `dest`'s inbox, as if a peer had sent it: how a test plays a broken
    /// or hostile peer.
    pub fn inject(&self, dest: Gpid, frame: Frame) {
        self.with_inbox(dest, |q| q.push_back(frame));
    }

    /// The frame `dest` will receive next, if any (a copy: the wire keeps it).
    pub fn front(&self, dest: Gpid) -> Option<Frame> {
        self.with_inbox(dest, |q| q.front().cloned())
    }

    /// The handlers of the frames waiting for `dest`, in order: what a protocol test usually
    /// asserts on ("ten EAGER, then forty RTS").
    pub fn handlers(&self, dest: Gpid) -> Vec<HandlerId> {
        self.with_inbox(dest, |q| q.iter().map(|f| f.handler).collect())
    }

    /// How many payloads placing pipes have put straight into receive buffers so far: how a
    /// test knows the engine named a place rather than taking the frame whole.
    pub fn placed(&self) -> u64 {
        self.placed.get()
    }

    /// How many frames wait for `dest`.
    pub fn pending(&self, dest: Gpid) -> usize {
        self.with_inbox(dest, |q| q.len())
    }

    /// Runs `f` on `dest`'s inbox: reorder, drop or rewrite frames by hand. Panics if `dest` is
    /// not a rank of this wire (a test bug).
    pub fn with_inbox<R>(&self, dest: Gpid, f: impl FnOnce(&mut VecDeque<Frame>) -> R) -> R {
        let mut inboxes = self.inboxes.borrow_mut();
        let ranks = inboxes.len();
        let q = inboxes
            .get_mut(dest as usize)
            .unwrap_or_else(|| panic!("rank {dest} is not on a wire of {ranks} ranks"));
        f(q)
    }

    fn ranks(&self) -> usize {
        self.inboxes.borrow().len()
    }
}

/// An ordered in-memory [`AmTransport`] and [`Netmod`] over a [`Wire`], with MPI semantics from
/// the AM fallback.
///
/// Its limits are tiny by default, so a message of a few dozen bytes already goes by rendezvous
/// and its data in several pieces: every path of the protocol runs with short test messages.
#[derive(Debug, Clone)]
pub struct Pipe {
    me: Gpid,
    wire: Wire,
    eager_limit: usize,
    max_payload: usize,
    first_piece: usize,
    crowded_piece: Option<usize>,
    placement: Placement,
}

/// What a [`Pipe`] does with a payload before delivering it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placement {
    /// Delivers it whole ([`AmSink::deliver`]).
    Whole,
    /// Reads it into the place the engine names, contiguous or in pieces.
    InPlace,
    /// Asks where it goes, then delivers it whole after all.
    Declined,
}

impl Pipe {
    /// Default eager limit: messages above 32 bytes go by rendezvous.
    pub const EAGER_LIMIT: usize = 32;
    /// Default largest payload of one frame: rendezvous data moves in pieces of 40 bytes.
    pub const MAX_PAYLOAD: usize = 40;

    /// The same pipe with other limits, for a test that needs larger eager messages or pieces.
    pub fn with_limits(self, eager_limit: usize, max_payload: usize) -> Pipe {
        Pipe {
            eager_limit,
            max_payload,
            ..self
        }
    }

    /// The same pipe sending the first `bytes` of a rendezvous message with its request-to-send
    /// ([`AmTransport::first_piece`]), as the TCP netmod does.
    pub fn with_first_piece(self, bytes: usize) -> Pipe {
        Pipe {
            first_piece: bytes,
            ..self
        }
    }

    /// The same pipe streaming rendezvous data in pieces of `bytes` while several sends stream
    /// at once ([`AmTransport::stream_piece`]), as the TCP netmod does with half its pieces.
    pub fn with_crowded_piece(self, bytes: usize) -> Pipe {
        Pipe {
            crowded_piece: Some(bytes),
            ..self
        }
    }

    /// The same pipe putting payloads straight into the buffers the engine names for them
    /// ([`AmSink::destination`], else [`AmSink::scattered_destination`], then
    /// [`AmSink::placed`]) instead of delivering them, as the TCP netmod does with large ones.
    pub fn placing(self) -> Pipe {
        Pipe {
            placement: Placement::InPlace,
            ..self
        }
    }

    /// The same pipe asking where each payload goes (both ways), then delivering it whole
    /// anyway, as the TCP netmod does when a noncontiguous place's pieces are too small to be
    /// worth reading into.
    pub fn declining_places(self) -> Pipe {
        Pipe {
            placement: Placement::Declined,
            ..self
        }
    }

    /// The rank this end belongs to.
    pub fn me(&self) -> Gpid {
        self.me
    }

    /// The wire this pipe sends on and receives from.
    pub fn wire(&self) -> &Wire {
        &self.wire
    }
}

impl AmTransport for Pipe {
    const AM_ORDERED: bool = true;
    const NAME: &'static str = "pipe";

    fn eager_limit(&self) -> usize {
        self.eager_limit
    }

    fn am_max_payload(&self) -> usize {
        self.max_payload
    }

    fn first_piece(&self) -> usize {
        self.first_piece
    }

    fn stream_piece(&self, crowded: bool) -> usize {
        match self.crowded_piece {
            Some(bytes) if crowded => bytes.min(self.max_payload),
            _ => self.max_payload,
        }
    }

    fn am_send(
        &mut self,
        dest: Gpid,
        handler: HandlerId,
        header: &[u8],
        payload: &[&[u8]],
    ) -> Result<()> {
        if dest as usize >= self.wire.ranks() {
            return Err(Error::new(
                ErrorKind::Arg,
                format!("pipe: no rank {dest} on this wire"),
            ));
        }
        self.wire.inject(
            dest,
            Frame {
                src: self.me,
                handler,
                header: header.to_vec(),
                payload: payload.concat(),
            },
        );
        Ok(())
    }

    fn am_poll<K: AmSink>(&mut self, sink: &mut K, budget: usize) -> Result<usize> {
        let mut n = 0;
        while n < budget {
            // The borrow ends before the sink runs: a handler may send, which pushes to the wire.
            let Some(f) = self.wire.with_inbox(self.me, VecDeque::pop_front) else {
                break;
            };
            n += 1;
            if self.placement == Placement::Declined && !f.payload.is_empty() {
                let len = f.payload.len();
                let _ = sink.destination(f.src, f.handler, &f.header, len).is_some();
                let _ = sink
                    .scattered_destination(f.src, f.handler, &f.header, len, 8)
                    .is_some();
            }
            if self.placement == Placement::InPlace && !f.payload.is_empty() {
                // In two steps, asking again for the rest as a socket's reader does when more
                // of a payload arrives: the engine must name the same place.
                let len = f.payload.len();
                let half = len / 2;
                let first = match sink.destination(f.src, f.handler, &f.header, len) {
                    Some(dst) if dst.len() == len => {
                        dst[..half].copy_from_slice(&f.payload[..half]);
                        true
                    }
                    _ => false,
                };
                if first {
                    let Some(dst) = sink
                        .destination(f.src, f.handler, &f.header, len)
                        .filter(|d| d.len() == len)
                    else {
                        return Err(Error::new(
                            ErrorKind::Internal,
                            "pipe: the place of a payload went away halfway",
                        ));
                    };
                    dst[half..].copy_from_slice(&f.payload[half..]);
                    sink.placed(f.src, f.handler, &f.header, len)?;
                    self.wire.placed.set(self.wire.placed.get() + 1);
                    continue;
                }
                let scattered = match sink
                    .scattered_destination(f.src, f.handler, &f.header, len, 8)
                {
                    Some(mut pieces) if pieces.iter().map(|p| p.len()).sum::<usize>() == len => {
                        let mut rest = &f.payload[..];
                        for p in pieces.iter_mut() {
                            let (now, later) = rest.split_at(p.len());
                            p.copy_from_slice(now);
                            rest = later;
                        }
                        true
                    }
                    _ => false,
                };
                if scattered {
                    sink.placed(f.src, f.handler, &f.header, len)?;
                    self.wire.placed.set(self.wire.placed.get() + 1);
                    continue;
                }
            }
            sink.deliver(f.src, f.handler, &f.header, &f.payload)?;
        }
        Ok(n)
    }
}

impl Netmod for Pipe {
    type P2p = am_fallback::Am;
}

//! `UcxNetmod`: one UCP worker of a rank and the contexts of its outstanding operations, as
//! ch4's netmod ([`Netmod`], [`Bootstrap`]).

use std::ffi::c_void;

use ch4_core::bootstrap::{Bootstrap, PeerWatch};
use ch4_core::native::OpContexts;
use ch4_core::transport::{AmSink, AmTransport, HandlerId, Netmod};
use ch4_core::{Error, ErrorKind, Gpid, PeerState, ReqHandle, Result};
use ucx_sys::{ucp_dt_iov_t, ucp_tag_message_h};

use crate::engine::UcxEngine;
use crate::paged::Paged;
use crate::tag;
use crate::worker::{Completion, ErrMode, Worker};

/// How long finalize waits for endpoint closes (UCX's flush of each endpoint) before it leaves
/// them to UCX: a peer that stopped reading must not keep this rank from exiting.
const CLOSE_LIMIT: std::time::Duration = std::time::Duration::from_secs(2);

/// What the engine keeps with one outstanding operation.
pub(crate) struct Op {
    /// The request it serves ([`ReqHandle::DONE`] for the engine's own operations).
    pub req: ReqHandle,
    pub kind: OpKind,
    /// UCX's request for the operation, null while it has none (not posted yet, or done at
    /// once); freed once the operation is applied.
    pub request: *mut c_void,
    /// A contiguous stand-in for a buffer with a layout: a send's packed copy, or a receive's
    /// landing place, unpacked at completion; a discarded message's landing place.
    pub bounce: Option<Vec<u8>>,
    /// The pieces of a buffer with a layout, as UCX's iovec datatype: the data moves in place.
    /// Kept here until the completion, since UCX reads the array after the call.
    pub iov: Option<Box<[ucp_dt_iov_t]>>,
}

/// What an operation is.
pub(crate) enum OpKind {
    /// A tagged send from the request's buffer (standard or synchronous).
    Send,
    /// A nonblocking send that went without its receiver's (this process's) credit, as a
    /// synchronous send: once matched, its receiver counts it as consumed and gives back
    /// credit it never took, which [`PeerCredit::debt`] keeps back.
    UncreditedSend(Gpid),
    /// A tagged receive into the request's buffer.
    Recv,
    /// A message taken by a matched probe, waiting for its receive or its discard.
    Claimed {
        msg: ucp_tag_message_h,
        tag: u64,
        len: usize,
    },
    /// A claimed message received into nothing (into the operation's bounce buffer).
    Discarding,
    /// A receive for eager credit given back by one process (see [`crate::credit`]), into
    /// the operation's 4-byte bounce buffer.
    CreditRecv(Gpid),
    /// A credit message that did not leave at once.
    CreditSend,
}

/// What a sender keeps per receiver about the credit that receiver gives back
/// ([`crate::credit`]).
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PeerCredit {
    /// Sends without credit that the receiver matched, whose credit it gives back all the same
    /// (it cannot tell them apart), to be kept back from what it returns.
    pub(crate) debt: u32,
    /// Whether a receive for its returned credit is posted (one is, from the first message
    /// sent to it with credit).
    pub(crate) posted: bool,
}

/// The UCX netmod of one rank.
pub struct UcxNetmod {
    /// First, so that it is destroyed (ending every operation) before the contexts its
    /// callbacks write are freed. `None` for a job on one node.
    pub(crate) worker: Option<Worker>,
    pub(crate) ops: OpContexts<Completion, Op>,
    pub(crate) me: Gpid,
    pub(crate) size: u32,
    /// Receives for returned eager credit among `ops`, not counted as outstanding.
    pub(crate) credit_receives: usize,
    /// By process, for the processes this rank sent to: the state of their returned credit
    /// ([`PeerCredit`]), in pages made on first contact.
    pub(crate) credit_peers: Paged<PeerCredit>,
    /// Credit messages UCX still holds (slots among `ops`, not counted as outstanding).
    pub(crate) credit_sends: usize,
    /// Credit to give back that could not be sent yet, by receiver and number of messages.
    pub(crate) credit_out: Vec<(Gpid, u32)>,
    /// Peers whose endpoint reported an error.
    pub(crate) failed: Vec<Gpid>,
    /// Nonblocking sends that went without their receiver's eager credit.
    pub(crate) uncredited_sends: u64,
    /// The engine's list of completions being applied, kept for its capacity (see
    /// `Worker::swap_completed`).
    pub(crate) applying: Vec<ch4_core::native::OpIndex>,
    /// The same for the completions of sends posted without a slot.
    pub(crate) applying_slotless: Vec<crate::worker::SlotlessDone>,
    /// Where this rank learns that a peer failed or left (the launcher, or the thread job).
    watch: Option<PeerWatch>,
}

// SAFETY: the worker is `Send` (see `Worker`); the raw pointers in the operations (UCX
// requests, the iovec arrays' pieces) belong to this netmod's worker or to buffers lent to
// requests of the one device that owns this netmod, used only inside that device's calls,
// which take it by `&mut`.
unsafe impl Send for UcxNetmod {}

impl UcxNetmod {
    /// The worker, or the error of a netmod that has none.
    #[inline(always)]
    pub(crate) fn worker(&mut self) -> Result<&mut Worker> {
        match &mut self.worker {
            Some(w) => Ok(w),
            None => Err(not_opened()),
        }
    }

    /// Makes `watch` this netmod's view of which peers are gone.
    pub fn watch_peers(&mut self, watch: PeerWatch) {
        self.watch = Some(watch);
    }

    /// Operations UCX has not reported complete yet (beyond the receives kept posted for
    /// returned credit).
    pub fn outstanding(&self) -> usize {
        self.ops.len() - self.credit_receives - self.credit_sends
    }

    /// How many nonblocking sends went without their receiver's eager credit. UCX sends what
    /// it is given at once, and an engine that held such sends back would hang correct
    /// programs (ARCHITECTURE.md, "The UCX engine"), so they go as synchronous sends: each
    /// completes only once its receiver has matched it, which bounds what a flood leaves at the
    /// receiver by the senders' outstanding requests, at the cost of an acknowledgement each.
    pub fn sends_without_credit(&self) -> u64 {
        self.uncredited_sends
    }

    /// Whether endpoints report failed peers (every transport in use can tell).
    pub fn detects_failed_peers(&self) -> bool {
        self.worker.as_ref().is_some_and(|w| w.peer_errors)
    }

    /// Opens the netmod of process `rank` of `size`: a UCP worker, only when the job spans
    /// nodes, configured from the environment and then `settings` (UCX's variables without
    /// their `UCX_` prefix, `("TLS", "tcp")`: for a program that wants UCX configured
    /// otherwise than its environment says, as tests that compare transports do).
    pub fn open_with(
        rank: Gpid,
        size: u32,
        spans_nodes: bool,
        settings: &[(&str, &str)],
    ) -> Result<Self> {
        Self::open_in_mode(rank, size, spans_nodes, settings, ErrMode::from_env()?)
    }

    /// [`UcxNetmod::open_with`] with the error handling mode given rather than read from
    /// `CH4_UCX_ERR_MODE` (for tests that run both).
    pub fn open_in_mode(
        rank: Gpid,
        size: u32,
        spans_nodes: bool,
        settings: &[(&str, &str)],
        mode: ErrMode,
    ) -> Result<Self> {
        if u64::from(size) > tag::MAX_PROCESSES {
            return Err(Error::new(
                ErrorKind::Arg,
                format!(
                    "a job of {size} processes: the UCX netmod's tags carry at most {}",
                    tag::MAX_PROCESSES
                ),
            ));
        }
        let worker = if spans_nodes {
            Some(Worker::open(size, settings, mode)?)
        } else {
            None
        };
        Ok(UcxNetmod {
            worker,
            ops: OpContexts::new(),
            me: rank,
            size,
            credit_receives: 0,
            credit_peers: Paged::new(size),
            credit_sends: 0,
            credit_out: Vec::new(),
            uncredited_sends: 0,
            failed: Vec::new(),
            applying: Vec::new(),
            applying_slotless: Vec::new(),
            watch: None,
        })
    }
}

impl Drop for UcxNetmod {
    fn drop(&mut self) {
        self.release_requests();
    }
}

impl UcxNetmod {
    /// A test of peers, owning what it reads (so the worker can be borrowed beside it): true
    /// for a peer whose endpoint UCX reported broken, or whose state the watch says `pick`s.
    pub(crate) fn peers_where(
        &self,
        pick: impl Fn(PeerState) -> bool + 'static,
    ) -> impl Fn(Gpid) -> bool + 'static {
        let failed = self.failed.clone();
        let watch = self.watch.clone();
        move |g| failed.contains(&g) || watch.as_ref().is_some_and(|w| pick(w(g)))
    }

    /// Hands UCX back the requests of the operations still outstanding (the receives kept
    /// posted for credit, anything the device did not wait for): cancelled, their callbacks
    /// given a moment to run, then freed — before the worker is destroyed, which fails on a
    /// request never released. The operations' slots stay until the worker is gone.
    pub(crate) fn release_requests(&mut self) {
        let Some(w) = &self.worker else {
            return;
        };
        let held: Vec<(ch4_core::native::OpIndex, *mut c_void)> = self
            .ops
            .iter()
            .map(|(i, o)| (i, o.request))
            .filter(|(_, r)| !r.is_null())
            .collect();
        let requests: Vec<*mut c_void> = held.iter().map(|&(_, r)| r).collect();
        for &r in &requests {
            // SAFETY: a live request of this worker (freed only below or when applied, and
            // the operation still holds it, so it was not applied).
            unsafe { ucx_sys::ucp_request_cancel(w.raw(), r) };
        }
        for _ in 0..16 {
            if w.progress() == 0 {
                break;
            }
        }
        for r in requests {
            // SAFETY: as above; freed once (UCX releases a request still in progress when it
            // completes, and no callback of this netmod's runs after the worker is gone).
            unsafe { ucx_sys::ucp_request_free(r) };
        }
        w.take_completed();
        w.take_slotless(&mut Vec::new());
        for (i, _) in held {
            if let Some(o) = self.ops.get_mut(i) {
                o.request = std::ptr::null_mut();
            }
        }
    }
}

#[cold]
fn not_opened() -> Error {
    Error::new(
        ErrorKind::Transport,
        "the UCX netmod was not opened: this job was started on one node",
    )
}

#[cold]
pub(crate) fn vanished() -> Error {
    Error::new(ErrorKind::Internal, "a UCX operation's slot vanished")
}

/// The UCX netmod carries no active messages: every MPI operation maps to tagged messages
/// (synchronous sends acknowledged by UCX itself), and cancelling a send is refused as MPI
/// allows. The calls exist because every netmod is an `AmTransport`.
impl AmTransport for UcxNetmod {
    const AM_ORDERED: bool = true;
    const NAME: &'static str = "ucx";

    fn eager_limit(&self) -> usize {
        0
    }

    fn am_max_payload(&self) -> usize {
        0
    }

    fn am_send(&mut self, dest: Gpid, handler: HandlerId, _: &[u8], _: &[&[u8]]) -> Result<()> {
        Err(Error::new(
            ErrorKind::Internal,
            format!(
                "active message {handler} to {dest}: the UCX netmod carries only tagged messages"
            ),
        ))
    }

    fn am_poll<K: AmSink>(&mut self, _sink: &mut K, _budget: usize) -> Result<usize> {
        Ok(0)
    }

    fn settings(&self) -> Vec<(&'static str, String)> {
        let var =
            |name: &str| std::env::var(name).unwrap_or_else(|_| "unset (UCX's default)".into());
        let (mut major, mut minor, mut release) = (0, 0, 0);
        // SAFETY: ucp_get_version only writes the three numbers.
        unsafe { ucx_sys::ucp_get_version(&mut major, &mut minor, &mut release) };
        vec![
            (
                "UCX_TLS",
                format!("{} (UCX {major}.{minor}.{release})", var("UCX_TLS")),
            ),
            ("UCX_NET_DEVICES", var("UCX_NET_DEVICES")),
            (
                crate::ERR_MODE_VAR,
                match &self.worker {
                    Some(w) if w.peer_errors => "peer".to_string(),
                    Some(_) => "none".to_string(),
                    None => "unused (one node)".to_string(),
                },
            ),
        ]
    }

    fn close_connections(&mut self) {
        let gone = self.peers_where(|st| st != PeerState::Alive);
        if let Some(w) = &mut self.worker {
            w.begin_close(gone);
        }
    }

    /// True while endpoint closes begun by `close_connections` are under way, for at most
    /// [`CLOSE_LIMIT`]: the device drives this worker (and finalize every VCI's) meanwhile. A
    /// close still going past it (a peer that stopped reading) is left to UCX, with a warning
    /// when the worker is dropped.
    fn has_queued_output(&self) -> bool {
        self.worker.as_ref().is_some_and(|w| {
            w.closing_since()
                .is_some_and(|since| since.elapsed() < CLOSE_LIMIT)
                && w.closing_in_flight()
        })
    }

    /// What the launcher's (or the thread job's) watch says; a peer whose endpoint UCX
    /// reported broken is gone either way. UCX cannot tell a peer that finalized and closed its
    /// worker from one that died (both reset the connection), so it is `Failed` only when the
    /// watch says so or there is no watch, else `Left`: a peer that left in order must not
    /// fail the ANY_SOURCE receives of its communicators.
    fn peer_state(&self, gpid: Gpid) -> PeerState {
        let watched = self.watch.as_ref().map(|w| w(gpid));
        if !self.failed.contains(&gpid) {
            return watched.unwrap_or(PeerState::Alive);
        }
        match watched {
            Some(PeerState::Failed) | None => PeerState::Failed,
            Some(_) => PeerState::Left,
        }
    }
}

impl Netmod for UcxNetmod {
    type P2p = UcxEngine;
}

impl Bootstrap for UcxNetmod {
    /// Opens a UCP worker configured as UCX programs are (`UCX_TLS`, `UCX_NET_DEVICES`, ...) —
    /// only when the job spans nodes.
    fn open(rank: Gpid, size: u32, _job_key: u64, spans_nodes: bool) -> Result<Self> {
        UcxNetmod::open_with(rank, size, spans_nodes, &[])
    }

    /// The worker's address (a few hundred bytes over TCP: longer than one PMI value, which
    /// the bootstrap segments).
    fn business_card(&self) -> Result<Vec<u8>> {
        match &self.worker {
            Some(w) => w.address(),
            None => Err(not_opened()),
        }
    }

    fn watch_peers(&mut self, watch: PeerWatch) {
        UcxNetmod::watch_peers(self, watch);
    }

    fn learn_cards(&mut self, cards: &[Vec<u8>]) -> Result<()> {
        if cards.len() != self.size as usize {
            return Err(Error::new(
                ErrorKind::Internal,
                format!("{} business cards for a job of {}", cards.len(), self.size),
            ));
        }
        self.worker()?.learn(cards);
        Ok(())
    }

    /// Keeps `source` and asks it for a process's address when the endpoint to that process is
    /// made: a worker address is a few hundred bytes (every transport's), which for every
    /// process of a large job would be most of a rank's memory, and most of them are never
    /// used.
    fn learn_cards_from(
        &mut self,
        size: u32,
        source: ch4_core::bootstrap::CardSource,
    ) -> Result<()> {
        if size != self.size {
            return Err(Error::new(
                ErrorKind::Internal,
                format!("business cards for a job of {size}, not {}", self.size),
            ));
        }
        self.worker()?.learn_from(source);
        Ok(())
    }
}

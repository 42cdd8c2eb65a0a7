//! The TCP netmod: `AmTransport` over one nonblocking TCP connection per peer (a VC).
//!
//! **Connections** open on demand, at the first message for a peer, to the address the peer
//! published (its business card). The connecting side sends a hello — protocol magic, the job's
//! key, its rank — and sends messages only once the other side has answered; until then they
//! wait in the VC's queue. A stranger (wrong magic or key, impossible rank) is refused, logged,
//! and disconnected; the process goes on. When two ranks connect to each other at the same time,
//! the connection opened by the lower rank wins: the higher rank answers the lower rank's hello
//! by dropping its own attempt and adopting the incoming connection, the lower rank refuses the
//! higher rank's hello as a duplicate, and the higher rank then waits for the lower rank's
//! connection to arrive. Since nothing but hellos travel before acceptance, no message is lost or
//! sent twice.
//!
//! **Sending never blocks** (Nemesis netmod rule): a frame goes out with one write (frames up to
//! 256 bytes copied together and sent with `write`, larger ones gathered with `writev`); whatever
//! the socket does not take is copied into the VC's queue and finished from progress. A queue
//! that is not empty keeps later frames behind it, so order holds.
//!
//! **Receiving**: while a rank has few connections (up to eight), progress reads each one
//! directly at every poll and their sockets are not in epoll at all (a watched socket makes
//! every arriving segment run epoll's wake-up callback inside the sender's system call, on the
//! latency path); with more, epoll (edge-triggered) says which to read, and the four peers
//! heard from last are read directly at every poll too, with epoll_wait every 8th poll (a
//! ping-pong through epoll alone took 1.24x the direct reads' latency, with them 1.14x).
//! Bytes go into the VC's [`Decoder`], which reassembles frames and hands them to the AM engine
//! in place; large payloads are read straight into the receive buffer.
//!
//! **Closing** (the Nemesis netmod API's `vc_terminate`) never blocks: [`TcpNetmod::vc_terminate`] queues a
//! goodbye frame behind everything already sent and returns; progress writes it and shuts our
//! sending side. The peer answers with its own goodbye once its queue is out, and the VC goes
//! idle when both ends of the stream have arrived — a later send connects again (a connection
//! the peer opens while the old one still drains waits until it has ended, so order holds).
//! Finalize closes every connection the same way with a *leaving* goodbye, after which the peer
//! fails requests that still wait on this process instead of waiting forever.
//!
//! **Failure**: end of stream without a goodbye, a reset, or an undecodable stream mark the VC
//! failed; the AM fallback then fails the requests that wait on that peer (`peer_failed`), and
//! sends to it return `PeerFailed`.
//!
//! This file holds the netmod's state, its settings and the `AmTransport` entry points (send,
//! poll); `connect.rs` the handshake and accepting, `receive.rs` reading and direct placement,
//! `close.rs` orderly closes and failures.

use std::collections::VecDeque;
use std::io::{self, IoSlice, Write};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::time::Duration;

use ch4_core::transport::{AmSink, AmTransport, Arm, HandlerId, Netmod, PeerState, WaitFd};
use ch4_core::{Error, ErrorKind, Gpid, Result};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use smallvec::SmallVec;

use crate::frame::{self, Decoder, FRAME_HEADER};

use close::Closing;
use connect::Incoming;
use receive::{DirectRecv, SCATTER_MIN_PIECE};

const LISTENER: Token = Token(usize::MAX);
/// Up to this many open connections are read directly at every poll.
const DIRECT_MAX: usize = 8;
/// With every connection open and read directly, epoll_wait runs once per this many polls.
const EPOLL_EVERY: u32 = 64;
/// With more connections, this many of the peers heard from last are read directly...
const HOT_MAX: usize = 4;
/// ...and epoll_wait, which finds the others, runs once per this many polls. Measured with
/// every connection in epoll (`DIRECT_MAX` 0), 8-byte osu_latency over TCP, interleaved, medians
/// of 8: direct reads 5.61 µs, epoll alone 6.97, epoll with the hot peers read directly 6.37.
const EPOLL_EVERY_HOT: u32 = 8;
/// Tokens at and above this name connections that have not said who they are yet.
const INCOMING: usize = 1 << 40;

/// Default eager limit and largest AM payload. CH3 TCP's eager threshold was 128 KiB; ours is
/// 64 KiB.
///
/// Rendezvous pieces are 512 KiB for a message streaming alone and half that while several
/// stream at once ([`AmTransport::stream_piece`]). On an earlier host 1 MiB pieces won (osu_bw
/// at 4 MiB, 4 interleaved rounds: 2.16 GB/s with 256 KiB, 2.84 with 1 MiB). On this project's
/// current AMD EPYC host, before pieces were padded clear of 4 KiB aliasing and before the first
/// piece rode with the request-to-send, 256 KiB pieces won `osu_latency` (5 interleaved rounds,
/// per-round ratios to 1 MiB pieces, medians: 0.76-0.94 at 512 KiB-4 MiB, 512 KiB pieces
/// 0.93-1.11). Since then 512 KiB pieces read 0.89 / 0.88 / 0.90 / 0.92 of 256 KiB ones at
/// 512 KiB / 1 / 2 / 4 MiB (8 rounds; 1 MiB pieces 1.0-1.1x Open MPI at 1-4 MiB, a 1 MiB
/// message then going whole with its request-to-send), but `osu_bw` with them read 0.80-0.88x
/// at 512 KiB-4 MiB in the host's fast mode (8 rounds), 1.05-1.22x in its slower one. With
/// 256 KiB pieces while several sends stream, `osu_bw` read 0.98-1.11x of all-256 KiB pieces at
/// 512 KiB-4 MiB in the fast mode (12 rounds, wide spread), latency as with 512 KiB.
const DEFAULT_EAGER: usize = 64 << 10;
const DEFAULT_PAYLOAD: usize = 512 << 10;

/// Where a VC's connection stands.
#[derive(Debug)]
enum VcState {
    /// No connection and none under way.
    Idle,
    /// Our connect is under way; the hello goes once it completes.
    Connecting,
    /// Our hello is out (`sent` bytes of it); waiting for the answer (`got` bytes so far).
    AwaitAnswer { sent: usize, got: Vec<u8> },
    /// Our attempt lost a simultaneous connect: the peer's connection is on its way.
    AwaitIncoming,
    /// Messages flow.
    Connected,
    /// Gone: the reason, for errors, and whether the peer left the job in order (finalized)
    /// rather than failed.
    Failed(String, bool),
}

impl VcState {
    /// Whether a handshake is under way: it advances only on epoll events.
    fn in_handshake(&self) -> bool {
        matches!(
            self,
            VcState::Connecting | VcState::AwaitAnswer { .. } | VcState::AwaitIncoming
        )
    }
}

/// One peer's connection state (CH3's VC).
struct Vc {
    state: VcState,
    stream: Option<TcpStream>,
    /// Frames (or the unsent rest of one) waiting for the socket, in order.
    sendq: VecDeque<Vec<u8>>,
    /// Bytes of the front frame already written.
    head_sent: usize,
    decoder: Decoder,
    /// A large payload being read straight into its receive's buffer.
    direct: Option<DirectRecv>,
    /// Our orderly close, once asked for.
    close: Option<Closing>,
    /// The peer said goodbye (`true`: it is leaving the job) and sends nothing more on this
    /// connection.
    peer_goodbye: Option<bool>,
    /// The peer's end of stream came after its goodbye (only its frames still held remain).
    eof: bool,
    /// Frames sent after the close began: they go on the next connection.
    reopen: VecDeque<Vec<u8>>,
    /// The peer's next connection, accepted while this one was still closing; read once this
    /// one has ended, so the old connection's frames come first.
    successor: Option<TcpStream>,
    /// Whether `stream` is registered with epoll (see [`TcpNetmod::went_connected`]).
    in_epoll: bool,
    /// Connections with this peer established so far, counted alike at both ends (each counts
    /// a connection when it starts carrying messages). A hello carries the sender's count, so
    /// a connection attempt from an earlier round — one that lost a simultaneous connect and
    /// was accepted from the backlog only after the winner was closed — is told apart from a
    /// real reconnection and dropped.
    generation: u32,
    /// Reading stopped, with more perhaps in the socket, to deliver the frames that came in
    /// first: a large payload behind them may then go straight into a receive buffer instead
    /// of through the decoder. The delivery reads on once they are out.
    paused: bool,
    /// The engine had no place for the large frame at the front: read it through the decoder.
    decoder_only: bool,
    /// The last frame was a large payload placed directly: the next read takes only as much as
    /// a frame's headers can be, so that a next large payload, too, goes to its buffer rather
    /// than a chunk of it through the decoder and a copy.
    after_placed: bool,
}

/// The most iovecs one `writev`/`readv` takes (Linux's `IOV_MAX`).
const IOV_LIMIT: usize = 1024;

/// Frames up to this many bytes go out with one plain write of a copy (see `am_send`).
const SMALL_FRAME: usize = 256;

/// Payloads at least this long are placed clear of 4 KiB aliasing in the kernel's copy
/// ([`frame::alignment_pad`]). Below, the stall costs less than the padding: interleaved
/// `osu_latency` over TCP, 14 rounds, padding from 4 KiB up against none, per-round ratios by
/// median: 4 and 16 KiB 1.01 and 1.00, 64 KiB 0.92 (12 rounds of 14 faster).
///
/// Rendezvous pieces are padded too. The first rides with the request-to-send
/// ([`AmTransport::first_piece`]) and starts a write afresh like an eager message: unpadded,
/// its payload sat 48 bytes past its source's page offset, and in the host's slower mode
/// `osu_latency` read 94-98 µs at 512 KiB against 66-70 padded (4 interleaved rounds). The
/// clear-to-send leaves once that piece is in, so the pieces streamed after it start on a
/// fresh page as well: padding them read 0.97-0.99x at 1-4 MiB (10 rounds), with `osu_bw`
/// unchanged within its spread (128 KiB-4 MiB 0.92-1.04x by per-round median, single rounds
/// 0.77-1.56x, 10 rounds).
/// (Before the first piece, when the pieces followed a bare request-to-send, padding them had
/// read `osu_bw` 0.90-0.93x at 2-4 MiB in 6 rounds of wide spread.)
const ALIGN_MIN: usize = 16 << 10;

/// The most of a rendezvous message the send call itself writes with the request-to-send while
/// a progress thread runs (the rest the thread moves, after the clear-to-send): what the
/// program's thread copies inside the call is the one part of a transfer no thread can overlap
/// with its computation. Measured with `osu_overlap --async --sleep` over TCP, the sending
/// side's overlap at 1 MiB, 3 interleaved rounds each: the whole piece (512 KiB) 35-64%, 256 KiB
/// 74-80%, 128 KiB 78-87%, 64 KiB 85-95%, 4-32 KiB 92-98% (2-4 MiB 88-99%), none at all 76-77%
/// (the clear-to-send's round trip then waits for the thread to see the request).
const BACKGROUND_FIRST_PIECE: usize = 16 << 10;

/// Where padding bytes come from.
static PADDING: [u8; u8::MAX as usize] = [0; u8::MAX as usize];

/// The TCP netmod of one rank.
pub struct TcpNetmod {
    me: Gpid,
    key: u64,
    poll: Poll,
    events: Events,
    listener: TcpListener,
    local_addr: SocketAddr,
    addrs: Vec<Option<SocketAddr>>,
    vcs: Vec<Vc>,
    incoming: Vec<Option<Incoming>>,
    /// Messages to ourselves, delivered at the next poll.
    self_queue: VecDeque<(HandlerId, Vec<u8>, Vec<u8>)>,
    /// VCs whose decoder may hold whole frames not delivered yet (budget ran out).
    backlog: Vec<usize>,
    /// Peers with an open connection, read directly at every poll while they are few.
    connected: Vec<usize>,
    /// With many connections, the few peers heard from last: read directly at every poll,
    /// the others through epoll.
    hot: Vec<usize>,
    /// Polls since the last epoll_wait.
    polls: u32,
    /// VCs in a handshake (see [`VcState::in_handshake`]); kept by [`TcpNetmod::set_state`].
    handshakes: usize,
    /// Payloads read straight into receive buffers so far.
    placed: u64,
    eager_limit: usize,
    max_payload: usize,
    /// Bytes of a rendezvous message sent with its request-to-send (see
    /// [`AmTransport::first_piece`]), in force now: [`TcpNetmod::first_piece_alone`] or, while
    /// a progress thread runs, [`TcpNetmod::first_piece_background`].
    first_piece: usize,
    /// The first piece when the program's own calls are all that moves data.
    first_piece_alone: usize,
    /// The first piece while a progress thread moves data between calls: at most
    /// [`BACKGROUND_FIRST_PIECE`] unless `CH4_TCP_FIRST_PIECE` says otherwise.
    first_piece_background: usize,
    /// Smallest average piece of a noncontiguous receive read straight into place.
    scatter_min: usize,
    /// Who else knows which peers are gone (see [`TcpNetmod::watch_peers`]).
    watch: Option<PeerWatch>,
}

pub use ch4_core::bootstrap::PeerWatch;

fn transport_err(what: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Transport, what.to_string())
}

fn would_block(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock
}

impl TcpNetmod {
    /// The netmod of process `me` in a job of `world` processes whose connections carry `key`,
    /// listening on `bind` (port 0: any free port). Peers are told [`TcpNetmod::local_addr`];
    /// their addresses come in through [`TcpNetmod::set_address`].
    pub fn bind(me: Gpid, world: u32, key: u64, bind: SocketAddr) -> Result<TcpNetmod> {
        if me >= world {
            return Err(Error::new(
                ErrorKind::Arg,
                format!("process {me} outside a job of {world}"),
            ));
        }
        let max_payload = ch4_core::env::bytes("CH4_TCP_PIECE_SIZE")?
            .unwrap_or(DEFAULT_PAYLOAD)
            .max(1);
        let eager_limit = ch4_core::env::bytes("CH4_TCP_EAGER_LIMIT")?
            .unwrap_or(DEFAULT_EAGER)
            .min(max_payload);
        let first_piece_asked = ch4_core::env::bytes("CH4_TCP_FIRST_PIECE")?;
        let first_piece = first_piece_asked.unwrap_or(max_payload).min(max_payload);
        let first_piece_background =
            first_piece_asked.map_or(first_piece.min(BACKGROUND_FIRST_PIECE), |_| first_piece);
        let scatter_min = ch4_core::env::bytes("CH4_TCP_SCATTER_MIN")?.unwrap_or(SCATTER_MIN_PIECE);
        let poll = Poll::new().map_err(|e| transport_err(format!("epoll: {e}")))?;
        let mut listener =
            TcpListener::bind(bind).map_err(|e| transport_err(format!("listen on {bind}: {e}")))?;
        let local_addr = listener
            .local_addr()
            .map_err(|e| transport_err(format!("listener address: {e}")))?;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)
            .map_err(|e| transport_err(format!("epoll register: {e}")))?;
        Ok(TcpNetmod {
            me,
            key,
            poll,
            events: Events::with_capacity(256),
            listener,
            local_addr,
            addrs: vec![None; world as usize],
            vcs: (0..world)
                .map(|_| Vc {
                    state: VcState::Idle,
                    stream: None,
                    sendq: VecDeque::new(),
                    head_sent: 0,
                    decoder: Decoder::new(max_payload + u16::MAX as usize),
                    direct: None,
                    close: None,
                    peer_goodbye: None,
                    eof: false,
                    reopen: VecDeque::new(),
                    successor: None,
                    in_epoll: false,
                    generation: 0,
                    paused: false,
                    decoder_only: false,
                    after_placed: false,
                })
                .collect(),
            incoming: Vec::new(),
            self_queue: VecDeque::new(),
            backlog: Vec::new(),
            connected: Vec::new(),
            hot: Vec::new(),
            polls: 0,
            handshakes: 0,
            placed: 0,
            eager_limit,
            max_payload,
            first_piece,
            first_piece_alone: first_piece,
            first_piece_background,
            scatter_min,
            watch: None,
        })
    }

    /// Flushes and reads, without asking epoll, every open connection (`all`) or the peers
    /// heard from last.
    fn read_directly(&mut self, all: bool) {
        let mut i = 0;
        loop {
            let list = if all { &self.connected } else { &self.hot };
            let Some(&peer) = list.get(i) else {
                break;
            };
            i += 1;
            if !self.vcs[peer].sendq.is_empty() {
                self.flush(peer);
            }
            self.read_all(peer, false);
        }
    }

    /// Whether this poll, having read the connections directly, may skip epoll_wait.
    /// Handshakes and connections that are still saying who they are advance only on epoll
    /// events (a connection silent past `connect::HELLO_PATIENCE` no longer counts: a stray
    /// process must not make every poll pay for an epoll_wait); otherwise epoll is needed just
    /// for new connections (and, with many connections, for the peers not read directly) and
    /// can wait.
    #[inline]
    fn epoll_can_wait(&self, direct: bool) -> bool {
        let settled = self.handshakes == 0 && !self.hellos_awaited();
        let every = if direct { EPOLL_EVERY } else { EPOLL_EVERY_HOT };
        (settled || !direct) && self.polls % every != 0
    }

    /// Moves `peer`'s VC to `state`, counting the VCs in a handshake.
    fn set_state(&mut self, peer: usize, state: VcState) {
        let vc = &mut self.vcs[peer];
        match (vc.state.in_handshake(), state.in_handshake()) {
            (false, true) => self.handshakes += 1,
            (true, false) => self.handshakes -= 1,
            _ => {}
        }
        vc.state = state;
    }

    /// Lowers the eager limit and the largest payload (tests use tiny ones so that small messages
    /// already go by rendezvous in several pieces).
    pub fn limit(&mut self, eager_limit: usize, max_payload: usize) {
        self.max_payload = self.max_payload.min(max_payload.max(1));
        self.eager_limit = self.eager_limit.min(eager_limit).min(self.max_payload);
        self.first_piece = self.first_piece.min(self.max_payload);
        self.first_piece_alone = self.first_piece_alone.min(self.max_payload);
        self.first_piece_background = self.first_piece_background.min(self.max_payload);
    }

    /// Adds a second opinion on which peers are still in the job, for peers this rank may never
    /// have connected to: ranks as threads pass their job's own record, so a receive from a
    /// rank that failed before any connection was made fails too. Consulted only on idle
    /// waits (cold), never on the data path.
    pub fn watch_peers(&mut self, watch: PeerWatch) {
        self.watch = Some(watch);
    }

    /// Reads a payload for a noncontiguous receive straight into its pieces (one `readv`) when
    /// they average at least `bytes`; below, it is copied out of the decoder (`usize::MAX`:
    /// never). Default 4 KiB, or `CH4_TCP_SCATTER_MIN`.
    pub fn set_scatter_min(&mut self, bytes: usize) {
        self.scatter_min = bytes;
    }

    /// How many message payloads went from the socket straight into their receive buffer.
    pub fn payloads_placed(&self) -> u64 {
        self.placed
    }

    /// Whether a connection with process `peer` exists, is being made, or ended: whether
    /// anything of it may be in flight or still unread here (rails ask, to know when a peer that
    /// left has delivered everything on every rail).
    pub fn ever_connected(&self, peer: Gpid) -> bool {
        self.vcs
            .get(peer as usize)
            .is_some_and(|v| !matches!(v.state, VcState::Idle))
    }

    /// The process this netmod belongs to.
    pub fn gpid(&self) -> Gpid {
        self.me
    }

    /// The address peers connect to (this rank's business card).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Records where process `peer` listens.
    pub fn set_address(&mut self, peer: Gpid, addr: SocketAddr) -> Result<()> {
        let slot = self
            .addrs
            .get_mut(peer as usize)
            .ok_or_else(|| Error::new(ErrorKind::Rank, format!("no process {peer} in this job")))?;
        *slot = Some(addr);
        Ok(())
    }

    /// Writes queued frames of `peer` until the queue is empty or the socket is full; when
    /// closing, queues the goodbye last and shuts our side once it is out.
    fn flush(&mut self, peer: usize) {
        let vc = &mut self.vcs[peer];
        if !matches!(vc.state, VcState::Connected) {
            return;
        }
        if let Some(c) = vc.close.as_mut() {
            if !c.goodbye_queued {
                let code = if c.leaving {
                    frame::LEAVING
                } else {
                    frame::GOODBYE
                };
                vc.sendq.push_back(frame::encode_control(code).to_vec());
                c.goodbye_queued = true;
            }
        }
        let Some(stream) = vc.stream.as_mut() else {
            return;
        };
        while let Some(front) = vc.sendq.front() {
            match stream.write(&front[vc.head_sent..]) {
                Ok(n) => {
                    vc.head_sent += n;
                    if vc.head_sent == front.len() {
                        vc.sendq.pop_front();
                        vc.head_sent = 0;
                    }
                }
                Err(e) if would_block(&e) => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.fail(peer, format!("write: {e}"));
                    return;
                }
            }
        }
        if let Some(c) = vc.close.as_mut() {
            if !c.shut {
                let _ = stream.shutdown(std::net::Shutdown::Write);
                c.shut = true;
            }
            self.maybe_closed(peer);
        }
    }
}

impl AmTransport for TcpNetmod {
    const AM_ORDERED: bool = true;
    const NAME: &'static str = "tcp";

    fn eager_limit(&self) -> usize {
        self.eager_limit
    }

    fn am_max_payload(&self) -> usize {
        self.max_payload
    }

    /// The whole piece size (`CH4_TCP_PIECE_SIZE`) for a message streaming alone, half of it
    /// while several stream at once (see `DEFAULT_PAYLOAD` for the measurements).
    fn stream_piece(&self, crowded: bool) -> usize {
        if crowded {
            (self.max_payload / 2).max(1)
        } else {
            self.max_payload
        }
    }

    /// A whole rendezvous piece (`CH4_TCP_FIRST_PIECE`, default the piece size): the receiver
    /// matches on the request-to-send's headers and reads the piece straight into the buffer,
    /// so the data moves during what was the handshake's round trip.
    fn first_piece(&self) -> usize {
        self.first_piece
    }

    fn am_send(
        &mut self,
        dest: Gpid,
        handler: HandlerId,
        header: &[u8],
        payload: &[&[u8]],
    ) -> Result<()> {
        let peer = dest as usize;
        if peer >= self.vcs.len() {
            return Err(Error::new(ErrorKind::Rank, format!("no process {dest}")));
        }
        if payload.len() > IOV_LIMIT - 2 {
            // More pieces than one writev takes (with the two headers): join them.
            let joined = payload.concat();
            return self.am_send(dest, handler, header, &[&joined]);
        }
        let plen: usize = payload.iter().map(|p| p.len()).sum();
        if header.len() > u8::MAX as usize || plen > self.max_payload + u16::MAX as usize {
            return Err(Error::new(
                ErrorKind::Count,
                format!(
                    "active message of {} bytes is too large",
                    header.len() + plen
                ),
            ));
        }
        if dest == self.me {
            self.self_queue
                .push_back((handler, header.to_vec(), payload.concat()));
            return Ok(());
        }
        let headers = FRAME_HEADER + header.len();
        let pad = match payload.first() {
            Some(first) if plen >= ALIGN_MIN && payload.len() < IOV_LIMIT - 2 => {
                frame::alignment_pad(headers, first.as_ptr())
            }
            _ => 0,
        };
        let fh = frame::encode_padded(handler, header.len(), pad, plen);
        let padding = &PADDING[..pad];
        let total = headers + pad + plen;
        let vc = &mut self.vcs[peer];
        match vc.state {
            VcState::Failed(ref why, _) => {
                return Err(Error::new(
                    ErrorKind::PeerFailed,
                    format!("process {dest}: {why}"),
                ))
            }
            VcState::Connected
                if vc.sendq.is_empty() && vc.close.is_none() && vc.peer_goodbye.is_none() =>
            {
                let sent = match vc.stream.as_mut() {
                    // A small frame is copied together and written with write(2): cheaper in
                    // the kernel than gathering three pieces with writev(2).
                    Some(s) if total <= SMALL_FRAME => {
                        let mut frame = [0u8; SMALL_FRAME];
                        frame[..FRAME_HEADER].copy_from_slice(&fh);
                        let mut at = FRAME_HEADER + header.len();
                        frame[FRAME_HEADER..at].copy_from_slice(header);
                        for p in payload {
                            frame[at..at + p.len()].copy_from_slice(p);
                            at += p.len();
                        }
                        Some(s.write(&frame[..total]))
                    }
                    Some(s) => {
                        // On the stack for the usual one or two payload slices: no allocation.
                        let mut slices: SmallVec<[IoSlice<'_>; 4]> = SmallVec::new();
                        slices.push(IoSlice::new(&fh));
                        slices.push(IoSlice::new(header));
                        if pad > 0 {
                            slices.push(IoSlice::new(padding));
                        }
                        slices.extend(payload.iter().map(|p| IoSlice::new(p)));
                        Some(s.write_vectored(&slices))
                    }
                    None => None,
                };
                let written = match sent {
                    Some(Ok(n)) => n,
                    Some(Err(e)) if would_block(&e) => 0,
                    Some(Err(e)) => {
                        self.fail(peer, format!("write: {e}"));
                        return Err(Error::new(
                            ErrorKind::PeerFailed,
                            format!("process {dest}: {e}"),
                        ));
                    }
                    None => 0,
                };
                if written == total {
                    return Ok(());
                }
                // Keep the rest, in order, for progress to finish.
                let mut rest = Vec::with_capacity(total - written);
                let mut skip = written;
                for part in std::iter::once(&fh[..])
                    .chain(std::iter::once(header))
                    .chain(std::iter::once(padding))
                    .chain(payload.iter().copied())
                {
                    if skip >= part.len() {
                        skip -= part.len();
                    } else {
                        rest.extend_from_slice(&part[skip..]);
                        skip = 0;
                    }
                }
                vc.sendq.push_back(rest);
                return Ok(());
            }
            _ => {}
        }
        let mut whole = Vec::with_capacity(total);
        whole.extend_from_slice(&fh);
        whole.extend_from_slice(header);
        whole.extend_from_slice(padding);
        for p in payload {
            whole.extend_from_slice(p);
        }
        if vc.peer_goodbye == Some(true) {
            return Err(Error::new(
                ErrorKind::PeerFailed,
                format!("process {dest} left the job"),
            ));
        }
        if vc.close.is_some() {
            vc.reopen.push_back(whole);
            return Ok(());
        }
        vc.sendq.push_back(whole);
        if matches!(vc.state, VcState::Idle) {
            if let Err(e) = self.start_connect(peer) {
                self.fail(peer, e.to_string());
                return Err(Error::new(ErrorKind::PeerFailed, e.to_string()));
            }
        }
        Ok(())
    }

    fn am_poll<K: AmSink>(&mut self, sink: &mut K, budget: usize) -> Result<usize> {
        let mut delivered = 0;
        while delivered < budget {
            let Some((h, hdr, payload)) = self.self_queue.pop_front() else {
                break;
            };
            delivered += 1;
            sink.deliver(self.me, h, &hdr, &payload)?;
        }
        if delivered < budget && !self.backlog.is_empty() {
            delivered += self.deliver_backlog(sink, budget - delivered)?;
        }
        // With few connections, reading (and flushing) them directly costs one system call each
        // and no epoll_wait: the latency path. epoll still runs every 64th poll for new
        // connections, at every poll while a handshake is under way, and always when there are
        // many peers.
        self.polls = self.polls.wrapping_add(1);
        let direct = self.connected.len() <= DIRECT_MAX;
        if direct || !self.hot.is_empty() {
            self.read_directly(direct);
            if delivered < budget && !self.backlog.is_empty() {
                delivered += self.deliver_backlog(sink, budget - delivered)?;
            }
            if self.epoll_can_wait(direct) {
                return Ok(delivered);
            }
        }
        let mut events = std::mem::replace(&mut self.events, Events::with_capacity(0));
        let polled = self.poll.poll(&mut events, Some(Duration::ZERO));
        if let Err(e) = polled {
            self.events = events;
            if e.kind() == io::ErrorKind::Interrupted {
                return Ok(delivered);
            }
            return Err(transport_err(format!("epoll: {e}")));
        }
        for ev in events.iter() {
            match ev.token() {
                LISTENER => self.accept_all(),
                Token(t) if t >= INCOMING => self.on_incoming(t - INCOMING),
                Token(peer) if peer < self.vcs.len() => {
                    self.on_vc_event(
                        peer,
                        ev.is_writable(),
                        ev.is_readable() || ev.is_read_closed(),
                    );
                }
                _ => {}
            }
        }
        self.events = events;
        if delivered < budget && !self.backlog.is_empty() {
            delivered += self.deliver_backlog(sink, budget - delivered)?;
        }
        Ok(delivered)
    }

    fn peer_state(&self, gpid: Gpid) -> PeerState {
        match self.vcs.get(gpid as usize).map(|v| &v.state) {
            Some(VcState::Failed(_, true)) => PeerState::Left,
            Some(VcState::Failed(_, false)) => PeerState::Failed,
            // Never connected (nothing of it can be in flight): ask the watch. A connection
            // tells itself, through its end of stream, once its frames are delivered.
            Some(VcState::Idle) => self.watch.as_ref().map_or(PeerState::Alive, |w| w(gpid)),
            _ => PeerState::Alive,
        }
    }

    fn settings(&self) -> Vec<(&'static str, String)> {
        vec![
            ("CH4_TCP_EAGER_LIMIT", self.eager_limit.to_string()),
            ("CH4_TCP_PIECE_SIZE", self.max_payload.to_string()),
            ("CH4_TCP_FIRST_PIECE", self.first_piece.to_string()),
            ("CH4_TCP_SCATTER_MIN", self.scatter_min.to_string()),
            ("CH4_TCP_BIND", self.local_addr.to_string()),
        ]
    }

    fn has_queued_output(&self) -> bool {
        self.vcs.iter().any(|v| {
            let unsent =
                !v.sendq.is_empty() || !v.reopen.is_empty() || v.close.is_some_and(|c| !c.shut);
            unsent && !matches!(v.state, VcState::Failed(..)) && v.peer_goodbye != Some(true)
        })
    }

    fn arm_wakeup(&mut self, out: &mut Vec<WaitFd>) -> Arm {
        if !self.self_queue.is_empty()
            || !self.backlog.is_empty()
            || self.vcs.iter().any(|v| v.paused)
        {
            return Arm::Busy;
        }
        // The epoll instance is readable while it holds events: new connections, handshakes
        // and, with many connections, every socket. The sockets read directly are not in it
        // (a watched socket costs the sender a wake-up callback per segment, see the module
        // docs): they are waited on themselves, which costs nothing while nobody sleeps.
        out.push(WaitFd {
            fd: self.poll.as_raw_fd(),
            write: false,
        });
        for &peer in &self.connected {
            let vc = &self.vcs[peer];
            let Some(stream) = vc.stream.as_ref().filter(|_| !vc.in_epoll) else {
                continue;
            };
            let fd = stream.as_raw_fd();
            out.push(WaitFd { fd, write: false });
            if !vc.sendq.is_empty() {
                out.push(WaitFd { fd, write: true });
            }
        }
        Arm::Armed
    }

    fn background_progress(&mut self, on: bool) {
        self.first_piece = if on {
            self.first_piece_background
        } else {
            self.first_piece_alone
        };
    }

    fn close_connections(&mut self) {
        for peer in 0..self.vcs.len() {
            if peer != self.me as usize {
                self.begin_close(peer, true);
            }
        }
    }

    fn can_send_now(&mut self, dest: Gpid, _bytes: usize) -> bool {
        match self.vcs.get(dest as usize) {
            Some(v) => {
                matches!(v.state, VcState::Connected) && v.sendq.is_empty() && v.close.is_none()
            }
            None => true,
        }
    }
}

impl Netmod for TcpNetmod {
    type P2p = am_fallback::Am;
}

mod close;
mod connect;
mod receive;
#[cfg(test)]
mod stranger_tests;
#[cfg(test)]
mod tests;

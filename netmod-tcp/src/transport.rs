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
//! **Sending never blocks** (Nemesis netmod rule): a frame goes out with one vectored write of
//! frame header, AM header and payload; whatever the socket does not take is copied into the VC's
//! queue and finished from progress when the socket is writable again. A queue that is not empty
//! keeps later frames behind it, so order holds.
//!
//! **Receiving**: while a rank has few connections (up to eight), progress reads each one
//! directly at every poll and their sockets are not in epoll at all (a watched socket makes
//! every arriving segment run epoll's wake-up callback inside the sender's system call, on the
//! latency path); with more, epoll (edge-triggered) says which to read, until they would block.
//! Bytes go into the VC's [`Decoder`], which reassembles frames and hands them to the AM engine
//! in place; large payloads are read straight into the receive buffer.
//!
//! **Closing** (seed 000's `vc_terminate`) never blocks: [`TcpNetmod::vc_terminate`] queues a
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

use std::collections::VecDeque;
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::net::SocketAddr;
use std::time::Duration;

use ch4_core::transport::{AmSink, AmTransport, HandlerId, Netmod};
use ch4_core::{Error, ErrorKind, Gpid, Result};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use smallvec::SmallVec;

use crate::frame::{self, Decoder, Popped, FRAME_HEADER};

/// First bytes of a hello.
const HELLO_MAGIC: [u8; 8] = *b"ch4tcp\0\x01";
/// Bytes of a hello: magic, job key (u64 LE), rank (u32 LE), reserved (u32).
const HELLO: usize = 24;
/// First bytes of an answer to a hello.
const ANSWER_MAGIC: [u8; 4] = *b"ch4a";
/// Bytes of an answer: magic, code (u32 LE).
const ANSWER: usize = 8;
const ACCEPTED: u32 = 0;
const DUPLICATE: u32 = 1;
const REFUSED: u32 = 2;

const LISTENER: Token = Token(usize::MAX);
/// Up to this many open connections are read directly at every poll.
const DIRECT_MAX: usize = 8;
/// With every connection open and read directly, epoll_wait runs once per this many polls.
const EPOLL_EVERY: u32 = 64;
/// Tokens at and above this name connections that have not said who they are yet.
const INCOMING: usize = 1 << 40;

/// Default eager limit and largest AM payload. CH3 TCP's eager threshold was 128 KiB; ours is
/// 64 KiB. Rendezvous pieces are 1 MiB: since they are read straight into the receive buffer,
/// fewer and larger ones win (osu_bw at 4 MiB, 4 interleaved rounds: 2.16 GB/s median with
/// 256 KiB pieces, 2.84 with 1 MiB; 256 KiB messages unchanged).
const DEFAULT_EAGER: usize = 64 << 10;
const DEFAULT_PAYLOAD: usize = 1 << 20;

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
    /// Gone: the reason, for errors.
    Failed(String),
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

/// An orderly close under way.
#[derive(Debug, Clone, Copy)]
struct Closing {
    /// We leave the job: the goodbye says so.
    leaving: bool,
    /// The goodbye is in the send queue, behind everything sent before the close.
    goodbye_queued: bool,
    /// Our sending side is shut down: the peer has everything, goodbye included.
    shut: bool,
}

/// A frame whose payload goes straight from the socket into the receive buffer the engine
/// named for it (no copy through the decoder).
struct DirectRecv {
    handler: HandlerId,
    header: Vec<u8>,
    len: usize,
    done: usize,
    /// Into the pieces of a noncontiguous receive buffer (`readv`), not one slice.
    scattered: bool,
}

/// How far a direct read got.
enum Direct {
    /// The whole payload is in place.
    Placed,
    /// The socket has no more for now.
    Pending,
    /// The connection or the receive is gone.
    Failed(String),
}

/// A noncontiguous receive buffer is read into directly when a payload falls into at most this
/// many pieces (one `readv`: the kernel takes at most 1024 iovecs)...
const SCATTER_MAX: usize = 1024;
/// ...of at least this many bytes on average (default of `CH4_TCP_SCATTER_MIN`). Measured with
/// `cargo bench -p netmod-tcp --bench strided` (4 MiB into a vector layout, medians of 5, two
/// runs): `readv` straight into the blocks against copying out of the decoder, 1.30-1.36x at
/// 4 KiB blocks, 1.4-1.7x from 16 KiB; at 1 KiB 0.99x in one run and 1.27x in the other, so
/// the default starts at 4 KiB.
const SCATTER_MIN_PIECE: usize = 4 << 10;

/// Frames up to this many bytes go out with one plain write of a copy (see `am_send`).
const SMALL_FRAME: usize = 256;

/// Payloads at least this long are read straight into the receive buffer when the engine has
/// one for them: below, the copy out of the decoder costs less than the extra reads.
const DIRECT_MIN: usize = 16 << 10;

/// Where our side of a handshake got to.
enum Hello {
    Pending,
    Failed(String),
    Answer(u32),
}

/// A connection that has not finished its hello.
struct Incoming {
    stream: TcpStream,
    hello: Vec<u8>,
}

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
    /// Polls since the last epoll_wait.
    polls: u32,
    /// Payloads read straight into receive buffers so far.
    placed: u64,
    eager_limit: usize,
    max_payload: usize,
    /// Smallest average piece of a noncontiguous receive read straight into place.
    scatter_min: usize,
}

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
        let poll = Poll::new().map_err(|e| transport_err(format!("epoll: {e}")))?;
        let mut listener =
            TcpListener::bind(bind).map_err(|e| transport_err(format!("listen on {bind}: {e}")))?;
        let local_addr = listener
            .local_addr()
            .map_err(|e| transport_err(format!("listener address: {e}")))?;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)
            .map_err(|e| transport_err(format!("epoll register: {e}")))?;
        let max_payload = env_usize("CH4_TCP_PIECE_SIZE")
            .unwrap_or(DEFAULT_PAYLOAD)
            .max(1);
        let eager_limit = env_usize("CH4_TCP_EAGER_LIMIT")
            .unwrap_or(DEFAULT_EAGER)
            .min(max_payload);
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
                    paused: false,
                    decoder_only: false,
                    after_placed: false,
                })
                .collect(),
            incoming: Vec::new(),
            self_queue: VecDeque::new(),
            backlog: Vec::new(),
            connected: Vec::new(),
            polls: 0,
            placed: 0,
            eager_limit,
            max_payload,
            scatter_min: env_usize("CH4_TCP_SCATTER_MIN").unwrap_or(SCATTER_MIN_PIECE),
        })
    }

    /// Lowers the eager limit and the largest payload (tests use tiny ones so that small messages
    /// already go by rendezvous in several pieces).
    pub fn limit(&mut self, eager_limit: usize, max_payload: usize) {
        self.max_payload = self.max_payload.min(max_payload.max(1));
        self.eager_limit = self.eager_limit.min(eager_limit).min(self.max_payload);
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

    /// Closes the connection to `peer` in order without waiting (seed 000's `vc_terminate`):
    /// what was sent to it still goes out, followed by a goodbye; the peer answers with its own
    /// once its queue is out, and then the VC is idle. Sends made meanwhile wait and go on a new
    /// connection. Closing a VC that has no connection does nothing.
    pub fn vc_terminate(&mut self, peer: Gpid) -> Result<()> {
        if peer as usize >= self.vcs.len() {
            return Err(Error::new(ErrorKind::Rank, format!("no process {peer}")));
        }
        if peer != self.me {
            self.begin_close(peer as usize, false);
        }
        Ok(())
    }

    /// Whether a connection to `peer` is open (connected, or still closing).
    pub fn is_connected(&self, peer: Gpid) -> bool {
        self.vcs
            .get(peer as usize)
            .is_some_and(|v| matches!(v.state, VcState::Connected))
    }

    fn begin_close(&mut self, peer: usize, leaving: bool) {
        let vc = &mut self.vcs[peer];
        if matches!(vc.state, VcState::Idle | VcState::Failed(_)) {
            return;
        }
        match vc.close.as_mut() {
            None => {
                vc.close = Some(Closing {
                    leaving,
                    goodbye_queued: false,
                    shut: false,
                })
            }
            Some(c) if !c.goodbye_queued => c.leaving |= leaving,
            Some(_) => {}
        }
        // Queues the goodbye once connected; shuts our side once everything is out.
        self.flush(peer);
    }

    /// The peer's goodbye came out of the stream.
    fn on_goodbye(&mut self, peer: usize, leaving: bool) {
        self.vcs[peer].peer_goodbye = Some(leaving);
        if !leaving {
            // Answer with our own once what we queued for it is out.
            self.begin_close(peer, false);
        }
        self.maybe_closed(peer);
    }

    /// The peer's end of stream: an orderly close if its goodbye came first (already taken from
    /// the stream, or the last frame still held), a failure otherwise.
    fn on_eof(&mut self, peer: usize) {
        let vc = &mut self.vcs[peer];
        let goodbye = vc
            .peer_goodbye
            .or_else(|| vc.decoder.ends_with_control().map(|c| c == frame::LEAVING));
        match goodbye {
            None => self.fail_after_drain(peer, "the peer closed the connection".into()),
            Some(true) => self.fail_after_drain(peer, format!("process {peer} left the job")),
            Some(false) => {
                vc.eof = true;
                self.begin_close(peer, false);
                self.maybe_closed(peer);
            }
        }
    }

    /// Ends an orderly close once both directions are done: our goodbye is out, the peer's end
    /// of stream came after its goodbye, and every frame before it was delivered. The VC is then
    /// idle; frames sent meanwhile go on the peer's next connection, if it opened one, or on a
    /// new one of ours.
    fn maybe_closed(&mut self, peer: usize) {
        let vc = &self.vcs[peer];
        let done = vc.close.is_some_and(|c| c.shut)
            && vc.eof
            && vc.peer_goodbye.is_some()
            && !vc.decoder.has_data()
            && vc.direct.is_none();
        if !done {
            return;
        }
        self.connected.retain(|&p| p != peer);
        let vc = &mut self.vcs[peer];
        if let Some(mut s) = vc.stream.take() {
            let _ = self.poll.registry().deregister(&mut s);
        }
        vc.close = None;
        vc.peer_goodbye = None;
        vc.eof = false;
        vc.head_sent = 0;
        vc.state = VcState::Idle;
        vc.sendq = std::mem::take(&mut vc.reopen);
        tracing::debug!(peer, "tcp: connection closed in order");
        if let Some(next) = vc.successor.take() {
            self.adopt(peer, next);
        } else if !self.vcs[peer].sendq.is_empty() {
            if let Err(e) = self.start_connect(peer) {
                self.fail(peer, e.to_string());
            }
        }
    }

    /// Makes `stream`, a connection from `peer` that passed its hello (and is registered with
    /// nothing), the VC's connection.
    fn adopt(&mut self, peer: usize, stream: TcpStream) {
        let vc = &mut self.vcs[peer];
        vc.stream = Some(stream);
        vc.in_epoll = false;
        vc.state = VcState::Connected;
        self.went_connected(peer);
        self.flush(peer);
    }

    /// A VC's connection is open. While few are (at most [`DIRECT_MAX`]), progress reads and
    /// flushes each directly at every poll, and their sockets leave epoll: a socket that epoll
    /// watches costs every arriving segment a wake-up callback in the sender's system call —
    /// on the latency path. With more, every open connection is watched.
    fn went_connected(&mut self, peer: usize) {
        self.connected.push(peer);
        if self.connected.len() <= DIRECT_MAX {
            self.watch(peer, false);
        } else {
            for i in 0..self.connected.len() {
                self.watch(self.connected[i], true);
            }
        }
    }

    /// Registers the VC's socket with epoll (readable and writable, edge-triggered) or removes
    /// it.
    fn watch(&mut self, peer: usize, on: bool) {
        let vc = &mut self.vcs[peer];
        if vc.in_epoll == on {
            return;
        }
        let Some(stream) = vc.stream.as_mut() else {
            return;
        };
        let registry = self.poll.registry();
        let done = if on {
            registry.register(stream, Token(peer), Interest::READABLE | Interest::WRITABLE)
        } else {
            registry.deregister(stream)
        };
        match done {
            Ok(()) => vc.in_epoll = on,
            Err(e) => self.fail(peer, format!("epoll: {e}")),
        }
    }

    fn fail(&mut self, peer: usize, why: String) {
        tracing::warn!(peer, "tcp: connection failed: {why}");
        self.connected.retain(|&p| p != peer);
        let vc = &mut self.vcs[peer];
        if let Some(mut s) = vc.stream.take() {
            let _ = self.poll.registry().deregister(&mut s);
        }
        vc.sendq.clear();
        vc.head_sent = 0;
        vc.direct = None;
        vc.close = None;
        vc.reopen.clear();
        vc.successor = None;
        vc.state = VcState::Failed(why);
    }

    fn start_connect(&mut self, peer: usize) -> Result<()> {
        let addr = self.addrs[peer].ok_or_else(|| {
            transport_err(format!(
                "no address for process {peer}: its business card is missing"
            ))
        })?;
        let mut stream = TcpStream::connect(addr)
            .map_err(|e| transport_err(format!("connect to process {peer} at {addr}: {e}")))?;
        self.poll
            .registry()
            .register(
                &mut stream,
                Token(peer),
                Interest::READABLE | Interest::WRITABLE,
            )
            .map_err(|e| transport_err(format!("epoll register: {e}")))?;
        self.vcs[peer].stream = Some(stream);
        self.vcs[peer].in_epoll = true;
        self.vcs[peer].state = VcState::Connecting;
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

    /// A writable or readable event on our own connection to `peer`.
    fn on_vc_event(&mut self, peer: usize, writable: bool, readable: bool) {
        if matches!(self.vcs[peer].state, VcState::Connecting) && writable {
            let Some(stream) = self.vcs[peer].stream.as_mut() else {
                return;
            };
            match stream.take_error() {
                Ok(Some(e)) | Err(e) => return self.fail(peer, format!("connect: {e}")),
                Ok(None) => {}
            }
            match stream.peer_addr() {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::NotConnected => return, // still connecting
                Err(e) => return self.fail(peer, format!("connect: {e}")),
            }
            let _ = stream.set_nodelay(true);
            self.vcs[peer].state = VcState::AwaitAnswer {
                sent: 0,
                got: Vec::new(),
            };
        }
        if let VcState::AwaitAnswer { .. } = self.vcs[peer].state {
            self.drive_hello(peer);
        }
        if matches!(self.vcs[peer].state, VcState::Connected) {
            if writable {
                self.flush(peer);
            }
            if readable {
                self.read_all(peer, true);
            }
        }
    }

    /// Sends the rest of our hello and reads the answer.
    fn drive_hello(&mut self, peer: usize) {
        match self.hello_step(peer) {
            Hello::Pending => {}
            Hello::Failed(why) => self.fail(peer, why),
            Hello::Answer(ACCEPTED) => {
                self.vcs[peer].state = VcState::Connected;
                self.went_connected(peer);
                self.flush(peer);
                // Frames may have come right behind the answer.
                self.read_all(peer, true);
            }
            Hello::Answer(DUPLICATE) => {
                // Its own connection to us won; it will arrive as an incoming one.
                if let Some(mut s) = self.vcs[peer].stream.take() {
                    let _ = self.poll.registry().deregister(&mut s);
                }
                self.vcs[peer].state = VcState::AwaitIncoming;
            }
            Hello::Answer(_) => self.fail(
                peer,
                "the peer refused our hello (job key mismatch?)".into(),
            ),
        }
    }

    /// One step of our side of the handshake.
    fn hello_step(&mut self, peer: usize) -> Hello {
        let mut hello = [0u8; HELLO];
        hello[..8].copy_from_slice(&HELLO_MAGIC);
        hello[8..16].copy_from_slice(&self.key.to_le_bytes());
        hello[16..20].copy_from_slice(&self.me.to_le_bytes());
        let vc = &mut self.vcs[peer];
        let (VcState::AwaitAnswer { sent, got }, Some(stream)) =
            (&mut vc.state, vc.stream.as_mut())
        else {
            return Hello::Pending;
        };
        while *sent < HELLO {
            match stream.write(&hello[*sent..]) {
                Ok(n) => *sent += n,
                Err(e) if would_block(&e) => return Hello::Pending,
                Err(e) => return Hello::Failed(format!("hello: {e}")),
            }
        }
        let mut buf = [0u8; ANSWER];
        while got.len() < ANSWER {
            match stream.read(&mut buf[..ANSWER - got.len()]) {
                Ok(0) => return Hello::Failed("closed during the handshake".into()),
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if would_block(&e) => return Hello::Pending,
                Err(e) => return Hello::Failed(format!("handshake: {e}")),
            }
        }
        if got[..4] != ANSWER_MAGIC {
            return Hello::Failed("the peer does not speak this protocol".into());
        }
        Hello::Answer(u32::from_le_bytes([got[4], got[5], got[6], got[7]]))
    }

    /// Reads everything the socket has into the VC's decoder. Readiness from epoll is
    /// edge-triggered, so after an event the socket must be read until it would block; a direct
    /// read at a poll (`until_would_block` false) stops at the first read that leaves space,
    /// saving the system call that would only say "nothing more".
    fn read_all(&mut self, peer: usize, until_would_block: bool) {
        self.vcs[peer].paused = false;
        if self.vcs[peer].direct.is_some() {
            // The payload under way is read by the delivery, straight into its buffer.
            if !self.backlog.contains(&peer) {
                self.backlog.push(peer);
            }
            return;
        }
        let vc = &mut self.vcs[peer];
        if vc.eof {
            return; // the stream has ended; the connection only finishes sending
        }
        let mut limit = if vc.after_placed && !vc.decoder.has_data() {
            frame::HEADERS_MAX
        } else {
            usize::MAX
        };
        vc.after_placed = false;
        let outcome = match vc.stream.as_mut() {
            None => return,
            Some(stream) => loop {
                let read = vc.decoder.read_at_most(stream, limit);
                limit = usize::MAX;
                match read {
                    Ok(0) => break Err(None),
                    // Deliver what is whole before reading more, so that a large payload
                    // behind it stays in the socket and can be read straight into its
                    // receive buffer (the delivery reads on after it, or if it cannot).
                    Ok(_) if !vc.decoder_only && vc.decoder.has_work(DIRECT_MIN) => {
                        vc.paused = until_would_block || !vc.decoder.drained();
                        break Ok(());
                    }
                    Ok(_) if !until_would_block && vc.decoder.drained() => break Ok(()),
                    Ok(_) => {}
                    Err(e) if would_block(&e) => break Ok(()),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => break Err(Some(e)),
                }
            },
        };
        // Frames that arrived before an end of stream are still delivered.
        if self.vcs[peer].decoder.has_data() && !self.backlog.contains(&peer) {
            self.backlog.push(peer);
        }
        match outcome {
            Ok(()) => {}
            Err(None) => self.on_eof(peer),
            // A process that left may reset the connection rather than close it.
            Err(Some(_)) if self.vcs[peer].peer_goodbye == Some(true) => {
                self.fail_after_drain(peer, format!("process {peer} left the job"))
            }
            Err(Some(e)) => self.fail(peer, format!("read: {e}")),
        }
    }

    /// The peer is gone (`why`): no more sends to it, but what it sent is still delivered.
    fn fail_after_drain(&mut self, peer: usize, why: String) {
        self.connected.retain(|&p| p != peer);
        let vc = &mut self.vcs[peer];
        if let Some(mut s) = vc.stream.take() {
            let _ = self.poll.registry().deregister(&mut s);
        }
        vc.sendq.clear();
        vc.close = None;
        vc.reopen.clear();
        vc.successor = None;
        vc.state = VcState::Failed(why);
    }

    fn accept_all(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((mut stream, _)) => {
                    let slot = match self.incoming.iter().position(Option::is_none) {
                        Some(i) => i,
                        None => {
                            self.incoming.push(None);
                            self.incoming.len() - 1
                        }
                    };
                    if self
                        .poll
                        .registry()
                        .register(&mut stream, Token(INCOMING + slot), Interest::READABLE)
                        .is_ok()
                    {
                        self.incoming[slot] = Some(Incoming {
                            stream,
                            hello: Vec::with_capacity(HELLO),
                        });
                    }
                }
                Err(e) if would_block(&e) => return,
                Err(e) => {
                    tracing::warn!("tcp: accept: {e}");
                    return;
                }
            }
        }
    }

    /// Reads an incoming connection's hello and accepts, refuses or drops it.
    fn on_incoming(&mut self, slot: usize) {
        let Some(inc) = self.incoming.get_mut(slot).and_then(Option::as_mut) else {
            return;
        };
        let mut buf = [0u8; HELLO];
        while inc.hello.len() < HELLO {
            match inc.stream.read(&mut buf[..HELLO - inc.hello.len()]) {
                Ok(0) => return self.drop_incoming(slot, None),
                Ok(n) => inc.hello.extend_from_slice(&buf[..n]),
                Err(e) if would_block(&e) => return,
                Err(_) => return self.drop_incoming(slot, None),
            }
        }
        let h = &inc.hello;
        let key = u64::from_le_bytes(h[8..16].try_into().unwrap_or_default());
        let rank = u32::from_le_bytes(h[16..20].try_into().unwrap_or_default()) as usize;
        if h[..8] != HELLO_MAGIC
            || key != self.key
            || rank >= self.vcs.len()
            || rank == self.me as usize
        {
            let from = inc.stream.peer_addr().ok();
            tracing::warn!(?from, "tcp: refused a connection that is not from this job");
            return self.drop_incoming(slot, Some(REFUSED));
        }
        let me = self.me as usize;
        let vc = &self.vcs[rank];
        let adopt = match vc.state {
            VcState::Idle | VcState::AwaitIncoming => true,
            // Simultaneous connects: the lower rank's connection wins.
            VcState::Connecting | VcState::AwaitAnswer { .. } => rank < me,
            // The peer finished closing the old connection before we did: the new one waits.
            VcState::Connected => vc.close.is_some() && vc.successor.is_none(),
            VcState::Failed(_) => false,
        };
        if !adopt {
            return self.drop_incoming(slot, Some(DUPLICATE));
        }
        let Some(Incoming { mut stream, .. }) = self.incoming[slot].take() else {
            return;
        };
        let mut answer = [0u8; ANSWER];
        answer[..4].copy_from_slice(&ANSWER_MAGIC);
        answer[4..].copy_from_slice(&ACCEPTED.to_le_bytes());
        // Eight bytes into a fresh socket's empty buffer: written whole or the peer is gone.
        if stream.write_all(&answer).is_err() {
            let _ = self.poll.registry().deregister(&mut stream);
            return;
        }
        let _ = stream.set_nodelay(true);
        let registry = self.poll.registry();
        let _ = registry.deregister(&mut stream);
        if matches!(self.vcs[rank].state, VcState::Connected) {
            self.vcs[rank].successor = Some(stream);
            return;
        }
        if let Some(mut old) = self.vcs[rank].stream.take() {
            let _ = registry.deregister(&mut old); // our losing attempt
        }
        self.adopt(rank, stream);
    }

    fn drop_incoming(&mut self, slot: usize, answer: Option<u32>) {
        if let Some(Some(mut inc)) = self.incoming.get_mut(slot).map(Option::take) {
            if let Some(code) = answer {
                let mut a = [0u8; ANSWER];
                a[..4].copy_from_slice(&ANSWER_MAGIC);
                a[4..].copy_from_slice(&code.to_le_bytes());
                let _ = inc.stream.write(&a);
            }
            let _ = self.poll.registry().deregister(&mut inc.stream);
        }
    }

    /// When the decoder holds the headers of a large frame whose payload is still coming and
    /// the engine has a place for that payload, moves what has arrived there and switches the
    /// VC to reading the rest straight into it.
    fn start_direct<K: AmSink>(&mut self, peer: usize, sink: &mut K) -> bool {
        let vc = &mut self.vcs[peer];
        let Some((handler, header, len, held)) = vc.decoder.partial_front() else {
            return false;
        };
        if len < DIRECT_MIN {
            return false;
        }
        let src = peer as Gpid;
        let scattered = if let Some(dst) = sink.destination(src, handler, header, len) {
            if dst.len() != len {
                return false;
            }
            dst[..held.len()].copy_from_slice(held);
            false
        } else if let Some(mut pieces) =
            sink.scattered_destination(src, handler, header, len, SCATTER_MAX)
        {
            let total: usize = pieces.iter().map(|p| p.len()).sum();
            if total != len || len / pieces.len().max(1) < self.scatter_min {
                return false;
            }
            let mut rest = held;
            for p in pieces.iter_mut() {
                let n = p.len().min(rest.len());
                p[..n].copy_from_slice(&rest[..n]);
                rest = &rest[n..];
            }
            true
        } else {
            return false;
        };
        vc.direct = Some(DirectRecv {
            handler,
            header: header.to_vec(),
            len,
            done: held.len(),
            scattered,
        });
        vc.decoder.clear();
        true
    }

    /// Reads more of a direct payload into its buffer; reports it placed once complete.
    fn continue_direct<K: AmSink>(&mut self, peer: usize, sink: &mut K) -> Result<Direct> {
        let src = peer as Gpid;
        let vc = &mut self.vcs[peer];
        let (Some(d), Some(stream)) = (vc.direct.as_mut(), vc.stream.as_mut()) else {
            return Ok(Direct::Failed("the connection closed mid-message".into()));
        };
        let gone = || {
            Ok(Direct::Failed(
                "the receive of a message arriving in place went away".into(),
            ))
        };
        if d.scattered {
            let Some(mut pieces) =
                sink.scattered_destination(src, d.handler, &d.header, d.len, SCATTER_MAX)
            else {
                return gone();
            };
            while d.done < d.len {
                let mut skip = d.done;
                let mut iov: SmallVec<[IoSliceMut<'_>; 8]> = SmallVec::new();
                for p in pieces.iter_mut() {
                    if skip >= p.len() {
                        skip -= p.len();
                    } else {
                        iov.push(IoSliceMut::new(&mut p[skip..]));
                        skip = 0;
                    }
                }
                if let Some(end) = read_outcome(stream.read_vectored(&mut iov), &mut d.done) {
                    return Ok(end);
                }
            }
        } else {
            let Some(dst) = sink.destination(src, d.handler, &d.header, d.len) else {
                return gone();
            };
            while d.done < d.len {
                if let Some(end) = read_outcome(stream.read(&mut dst[d.done..]), &mut d.done) {
                    return Ok(end);
                }
            }
        }
        let done = vc.direct.take();
        vc.after_placed = true;
        if let Some(d) = done {
            sink.placed(src, d.handler, &d.header, d.len)?;
        }
        self.placed += 1;
        Ok(Direct::Placed)
    }

    /// Delivers whole frames held by backlogged decoders, up to `budget`.
    fn deliver_backlog<K: AmSink>(&mut self, sink: &mut K, budget: usize) -> Result<usize> {
        let mut delivered = 0;
        let mut i = 0;
        while i < self.backlog.len() && delivered < budget {
            let peer = self.backlog[i];
            let src = peer as Gpid;
            let mut failure = None;
            let mut waiting_direct = false;
            loop {
                if delivered >= budget {
                    break;
                }
                if self.vcs[peer].direct.is_some() {
                    match self.continue_direct(peer, sink)? {
                        Direct::Placed => {
                            delivered += 1;
                            // What follows the payload is read as usual (until the socket
                            // would block: readiness is edge-triggered).
                            self.read_all(peer, true);
                            continue;
                        }
                        Direct::Pending => {
                            waiting_direct = true;
                            break;
                        }
                        Direct::Failed(why) => {
                            self.fail(peer, why);
                            break;
                        }
                    }
                }
                match self.vcs[peer]
                    .decoder
                    .pop_with(|h, hdr, payload| sink.deliver(src, h, hdr, payload))
                {
                    Ok(Some(Popped::Message(r))) => {
                        delivered += 1;
                        self.vcs[peer].decoder_only = false;
                        r?;
                    }
                    Ok(Some(Popped::Control(code))) => {
                        self.on_goodbye(peer, code == frame::LEAVING);
                    }
                    Ok(None) => {
                        if self.start_direct(peer, sink) {
                            continue;
                        }
                        let vc = &mut self.vcs[peer];
                        if vc.paused {
                            // No place for it yet: read on through the decoder (until the
                            // socket would block, as edge-triggered readiness needs).
                            vc.decoder_only = vc.decoder.awaits_payload_of(DIRECT_MIN);
                            self.read_all(peer, true);
                            continue;
                        }
                        break;
                    }
                    Err(e) => {
                        failure = Some(e);
                        break;
                    }
                }
            }
            if waiting_direct {
                i += 1;
                continue;
            }
            if let Some(e) = failure {
                self.fail(peer, format!("undecodable stream: {e}"));
                self.vcs[peer].decoder = Decoder::new(0);
                self.backlog.swap_remove(i);
                continue;
            }
            if delivered < budget {
                // Drained: no whole frame left (a partial one waits for its readable event).
                self.backlog.swap_remove(i);
            } else {
                i += 1;
            }
        }
        Ok(delivered)
    }
}

/// One read of a direct payload: counts what came into `done`; `Some` when reading must stop
/// (nothing more for now, or the connection broke).
fn read_outcome(read: io::Result<usize>, done: &mut usize) -> Option<Direct> {
    match read {
        Ok(0) => Some(Direct::Failed("the peer closed mid-message".into())),
        Ok(n) => {
            *done += n;
            None
        }
        Err(e) if would_block(&e) => Some(Direct::Pending),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => None,
        Err(e) => Some(Direct::Failed(format!("read: {e}"))),
    }
}

fn env_usize(name: &str) -> Option<usize> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
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
        let fh = frame::encode(handler, header.len(), plen);
        let total = FRAME_HEADER + header.len() + plen;
        let vc = &mut self.vcs[peer];
        match vc.state {
            VcState::Failed(ref why) => {
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
        // and no epoll_wait: the latency path. epoll still runs every few polls for new
        // connections, handshakes and failures, and always when there are many peers.
        self.polls = self.polls.wrapping_add(1);
        let direct = self.connected.len() <= DIRECT_MAX;
        if direct {
            for i in 0..self.connected.len() {
                let Some(&peer) = self.connected.get(i) else {
                    break;
                };
                if !self.vcs[peer].sendq.is_empty() {
                    self.flush(peer);
                }
                self.read_all(peer, false);
            }
            if delivered < budget && !self.backlog.is_empty() {
                delivered += self.deliver_backlog(sink, budget - delivered)?;
            }
            let settled = self.connected.len() + 1 == self.vcs.len()
                && self.incoming.iter().all(Option::is_none);
            if settled && self.polls % EPOLL_EVERY != 0 {
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

    fn peer_failed(&self, gpid: Gpid) -> bool {
        matches!(
            self.vcs.get(gpid as usize).map(|v| &v.state),
            Some(VcState::Failed(_))
        )
    }

    fn has_queued_output(&self) -> bool {
        self.vcs.iter().any(|v| {
            let unsent =
                !v.sendq.is_empty() || !v.reopen.is_empty() || v.close.is_some_and(|c| !c.shut);
            unsent && !matches!(v.state, VcState::Failed(_)) && v.peer_goodbye != Some(true)
        })
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Barrier;
    use std::time::Instant;

    /// Collects everything delivered.
    #[derive(Default)]
    struct Collect(Vec<(Gpid, u8, Vec<u8>, Vec<u8>)>);

    impl AmSink for Collect {
        fn deliver(&mut self, src: Gpid, h: HandlerId, hdr: &[u8], payload: &[u8]) -> Result<()> {
            self.0.push((src, h, hdr.to_vec(), payload.to_vec()));
            Ok(())
        }
    }

    /// `n` netmods on loopback that know each other's addresses.
    fn job(n: u32, key: u64) -> Vec<TcpNetmod> {
        let mut ts: Vec<TcpNetmod> = (0..n)
            .map(|r| TcpNetmod::bind(r, n, key, "127.0.0.1:0".parse().unwrap()).unwrap())
            .collect();
        let addrs: Vec<SocketAddr> = ts.iter().map(TcpNetmod::local_addr).collect();
        for t in &mut ts {
            for (r, a) in addrs.iter().enumerate() {
                t.set_address(r as Gpid, *a).unwrap();
            }
        }
        ts
    }

    fn pattern(src: u32, i: usize, len: usize) -> Vec<u8> {
        (0..len)
            .map(|k| (src as usize * 31 + i * 7 + k) as u8)
            .collect()
    }

    /// Every rank sends `count` messages to every rank (itself included), of sizes up to
    /// `max_len`, then polls until it has everything and every rank is done.
    fn exchange(n: u32, count: usize, max_len: usize) {
        let ts = job(n, 42);
        let done = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for mut t in ts {
                let done = &done;
                s.spawn(move || {
                    let me = t.me;
                    for i in 0..count {
                        for dest in 0..n {
                            let len = (i * 7919 + dest as usize * 13) % (max_len + 1);
                            let body = pattern(me, i, len);
                            t.am_send(
                                dest,
                                5,
                                &(i as u32).to_le_bytes(),
                                &[&body[..len / 2], &body[len / 2..]],
                            )
                            .unwrap();
                        }
                    }
                    let mut sink = Collect::default();
                    let start = Instant::now();
                    let mut finished = false;
                    loop {
                        t.am_poll(&mut sink, 64).unwrap();
                        if !finished && sink.0.len() == count * n as usize {
                            finished = true;
                            done.fetch_add(1, Ordering::SeqCst);
                        }
                        if done.load(Ordering::SeqCst) == n as usize && !t.has_queued_output() {
                            break;
                        }
                        assert!(start.elapsed() < Duration::from_secs(30), "rank {me} stuck");
                    }
                    let mut next = vec![0usize; n as usize];
                    for (src, h, hdr, payload) in sink.0 {
                        let i = next[src as usize];
                        assert_eq!((h, hdr), (5, (i as u32).to_le_bytes().to_vec()));
                        let len = (i * 7919 + me as usize * 13) % (max_len + 1);
                        assert_eq!(payload, pattern(src, i, len), "from {src} message {i}");
                        next[src as usize] += 1;
                    }
                    assert!(next.iter().all(|&c| c == count));
                });
            }
        });
    }

    #[test]
    fn all_to_all_messages_arrive_whole_and_in_order() {
        exchange(3, 60, 200_000);
    }

    #[test]
    fn a_connection_storm_of_small_messages() {
        exchange(6, 200, 100);
    }

    #[test]
    fn more_peers_than_are_read_directly_are_watched_by_epoll() {
        // Ten ranks: each opens nine connections, one more than DIRECT_MAX, so every rank
        // moves its sockets into epoll midway, with messages in flight.
        exchange(10, 40, 3000);
    }

    #[test]
    fn simultaneous_connects_lose_and_duplicate_nothing() {
        // Both ranks send before either polls: both connect, one connection must win.
        for _ in 0..20 {
            exchange(2, 30, 1000);
        }
    }

    #[test]
    fn strangers_are_refused_and_the_job_goes_on() {
        let mut ts = job(2, 7);
        let addr = ts[0].local_addr();
        // Garbage, and a well-formed hello with the wrong key.
        let mut junk = std::net::TcpStream::connect(addr).unwrap();
        junk.write_all(&[0xAB; 100]).unwrap();
        let mut wrong = std::net::TcpStream::connect(addr).unwrap();
        let mut hello = [0u8; HELLO];
        hello[..8].copy_from_slice(&HELLO_MAGIC);
        hello[8..16].copy_from_slice(&8u64.to_le_bytes());
        wrong.write_all(&hello).unwrap();
        let mut sink = Collect::default();
        let barrier = Barrier::new(2);
        let mut t1 = ts.pop().unwrap();
        let mut t0 = ts.pop().unwrap();
        std::thread::scope(|s| {
            s.spawn(|| {
                barrier.wait();
                t1.am_send(0, 3, b"hi", &[b"there"]).unwrap();
                let start = Instant::now();
                while t1.has_queued_output() || start.elapsed() < Duration::from_millis(200) {
                    t1.am_poll(&mut Collect::default(), 64).unwrap();
                }
            });
            for _ in 0..1000 {
                t0.am_poll(&mut sink, 64).unwrap();
            }
            barrier.wait();
            let start = Instant::now();
            while sink.0.is_empty() {
                t0.am_poll(&mut sink, 64).unwrap();
                assert!(start.elapsed() < Duration::from_secs(10));
            }
        });
        assert_eq!(sink.0, vec![(1, 3, b"hi".to_vec(), b"there".to_vec())]);
        // The stranger with the wrong key was answered "refused" and disconnected.
        let mut answer = Vec::new();
        wrong
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let _ = wrong.read_to_end(&mut answer);
        assert_eq!(&answer[..4], &ANSWER_MAGIC);
        assert_eq!(
            u32::from_le_bytes(answer[4..8].try_into().unwrap()),
            REFUSED
        );
    }

    /// Polls `a` and `b` in turn, collecting what each receives, until `done` holds.
    fn poll_both(
        a: &mut TcpNetmod,
        got_a: &mut Collect,
        b: &mut TcpNetmod,
        got_b: &mut Collect,
        mut done: impl FnMut(&TcpNetmod, &Collect, &TcpNetmod, &Collect) -> bool,
    ) {
        let start = Instant::now();
        while !done(a, got_a, b, got_b) {
            a.am_poll(got_a, 64).unwrap();
            b.am_poll(got_b, 64).unwrap();
            assert!(start.elapsed() < Duration::from_secs(20), "stuck");
        }
    }

    #[test]
    fn terminate_sends_what_is_queued_then_closes_and_a_later_send_reconnects() {
        let mut ts = job(2, 11);
        let mut t1 = ts.pop().unwrap();
        let mut t0 = ts.pop().unwrap();
        let (mut g0, mut g1) = (Collect::default(), Collect::default());
        let big = pattern(0, 0, 1 << 20);
        t0.am_send(1, 2, b"first", &[]).unwrap();
        poll_both(&mut t0, &mut g0, &mut t1, &mut g1, |a, _, _, g| {
            a.is_connected(1) && g.0.len() == 1
        });
        // More than the socket takes at once, then the close: the call returns at once, with
        // the data still queued.
        for i in 0..6u8 {
            t0.am_send(1, 3, &[i], &[&big]).unwrap();
        }
        t0.vc_terminate(1).unwrap();
        assert!(t0.has_queued_output());
        // Sent after the close began: waits for the next connection.
        t0.am_send(1, 4, b"after", &[]).unwrap();
        poll_both(&mut t0, &mut g0, &mut t1, &mut g1, |_, _, _, g| {
            g.0.len() == 7
        });
        for (i, m) in g1.0[1..7].iter().enumerate() {
            assert_eq!((m.0, m.1, &m.2[..]), (0, 3, &[i as u8][..]));
            assert!(m.3 == big, "message {i} intact");
        }
        assert_eq!((g1.0[0].1, &g1.0[0].2[..]), (2, &b"first"[..]));
        // The last message made a new connection once the old one had closed on both sides.
        poll_both(&mut t0, &mut g0, &mut t1, &mut g1, |a, _, b, g| {
            g.0.len() == 8 && !a.has_queued_output() && a.is_connected(1) && b.is_connected(0)
        });
        assert_eq!((g1.0[7].1, &g1.0[7].2[..]), (4, &b"after"[..]));
        assert!(!t0.peer_failed(1) && !t1.peer_failed(0));
        // Both ways work on the new connection.
        t1.am_send(0, 5, b"back", &[]).unwrap();
        poll_both(&mut t0, &mut g0, &mut t1, &mut g1, |_, g, _, _| {
            g.0.len() == 1
        });
        assert!(g0.0[0].2 == b"back");
    }

    #[test]
    fn both_ends_closing_at_once_end_idle_and_reconnect() {
        for _ in 0..10 {
            let mut ts = job(2, 12);
            let mut t1 = ts.pop().unwrap();
            let mut t0 = ts.pop().unwrap();
            let (mut g0, mut g1) = (Collect::default(), Collect::default());
            t0.am_send(1, 1, b"a", &[]).unwrap();
            t1.am_send(0, 1, b"b", &[]).unwrap();
            poll_both(&mut t0, &mut g0, &mut t1, &mut g1, |_, a, _, b| {
                a.0.len() == 1 && b.0.len() == 1
            });
            t0.vc_terminate(1).unwrap();
            t1.vc_terminate(0).unwrap();
            poll_both(&mut t0, &mut g0, &mut t1, &mut g1, |a, _, b, _| {
                !a.is_connected(1) && !b.is_connected(0)
            });
            assert!(!t0.peer_failed(1) && !t1.peer_failed(0));
            t1.am_send(0, 1, b"c", &[]).unwrap();
            t0.am_send(1, 1, b"d", &[]).unwrap();
            poll_both(&mut t0, &mut g0, &mut t1, &mut g1, |_, a, _, b| {
                a.0.len() == 2 && b.0.len() == 2
            });
            assert!(g0.0[1].2 == b"c" && g1.0[1].2 == b"d");
        }
    }

    /// A raw socket speaking the protocol as rank 1 of `key`'s job, connected to `addr`.
    fn raw_rank_1(addr: SocketAddr, key: u64) -> std::net::TcpStream {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        let mut hello = [0u8; HELLO];
        hello[..8].copy_from_slice(&HELLO_MAGIC);
        hello[8..16].copy_from_slice(&key.to_le_bytes());
        hello[16..20].copy_from_slice(&1u32.to_le_bytes());
        s.write_all(&hello).unwrap();
        s
    }

    fn raw_frame(handler: u8, header: &[u8]) -> Vec<u8> {
        let mut v = frame::encode(handler, header.len(), 0).to_vec();
        v.extend_from_slice(header);
        v
    }

    #[test]
    fn a_new_connection_during_a_close_waits_until_the_old_one_ended() {
        let mut ts = job(2, 13);
        drop(ts.pop()); // rank 1 is played by raw sockets
        let mut t0 = ts.pop().unwrap();
        let mut got = Collect::default();
        let mut old = raw_rank_1(t0.local_addr(), 13);
        old.write_all(&raw_frame(7, b"A1")).unwrap();
        old.write_all(&raw_frame(7, b"A2")).unwrap();
        old.write_all(&frame::encode_control(frame::GOODBYE))
            .unwrap();
        let start = Instant::now();
        while got.0.len() < 2 || t0.vcs[1].close.is_none_or(|c| !c.shut) {
            t0.am_poll(&mut got, 64).unwrap();
            assert!(start.elapsed() < Duration::from_secs(10));
        }
        // Rank 0 answered: its goodbye, then the end of its stream.
        let mut answer = Vec::new();
        old.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        old.read_to_end(&mut answer).unwrap();
        let mut want = ANSWER_MAGIC.to_vec();
        want.extend(ACCEPTED.to_le_bytes());
        want.extend(frame::encode_control(frame::GOODBYE));
        assert_eq!(answer, want);
        // "Rank 1" connects again and sends before its old connection has ended at rank 0.
        let mut new = raw_rank_1(t0.local_addr(), 13);
        new.write_all(&raw_frame(7, b"X")).unwrap();
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(300) {
            t0.am_poll(&mut got, 64).unwrap();
        }
        assert_eq!(
            got.0.len(),
            2,
            "the new connection's frame must wait for the old one"
        );
        assert!(t0.vcs[1].successor.is_some());
        old.shutdown(std::net::Shutdown::Write).unwrap();
        let start = Instant::now();
        while got.0.len() < 3 {
            t0.am_poll(&mut got, 64).unwrap();
            assert!(start.elapsed() < Duration::from_secs(10), "X never came");
        }
        let order: Vec<&[u8]> = got.0.iter().map(|m| &m.2[..]).collect();
        assert_eq!(order, vec![&b"A1"[..], b"A2", b"X"]);
        assert!(t0.is_connected(1) && !t0.peer_failed(1));
    }

    #[test]
    fn a_peer_that_leaves_is_reported_as_gone_after_its_messages() {
        let mut ts = job(2, 14);
        let mut t1 = ts.pop().unwrap();
        let mut t0 = ts.pop().unwrap();
        let (mut g0, mut g1) = (Collect::default(), Collect::default());
        t1.am_send(0, 1, b"hello", &[]).unwrap();
        poll_both(&mut t0, &mut g0, &mut t1, &mut g1, |_, g, _, _| {
            g.0.len() == 1
        });
        // Rank 1 sends a last message and finalizes: its queue goes out, then LEAVING.
        t1.am_send(0, 1, b"last", &[&pattern(1, 0, 300_000)])
            .unwrap();
        t1.close_connections();
        let start = Instant::now();
        while t1.has_queued_output() {
            t1.am_poll(&mut g1, 64).unwrap();
            assert!(start.elapsed() < Duration::from_secs(10));
        }
        drop(t1);
        let start = Instant::now();
        while !t0.peer_failed(1) {
            t0.am_poll(&mut g0, 64).unwrap();
            assert!(start.elapsed() < Duration::from_secs(1), "leaving not seen");
        }
        let start = Instant::now();
        while g0.0.len() < 2 {
            t0.am_poll(&mut g0, 64).unwrap();
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "the last message was lost"
            );
        }
        assert!(g0.0[1].3 == pattern(1, 0, 300_000));
        let err = t0.am_send(1, 1, b"x", &[]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::PeerFailed);
        assert!(err.to_string().contains("left the job"), "{err}");
        assert!(!t0.has_queued_output());
    }

    /// One step of a random schedule for three ranks polled from one thread.
    #[derive(Debug, Clone)]
    enum Step {
        /// Rank `from` sends a message of `len` bytes to rank `to`.
        Send { from: usize, to: usize, len: usize },
        /// Rank `at` closes its connection to `peer`.
        Terminate { at: usize, peer: usize },
        /// Every rank polls `times` times.
        Poll { times: usize },
    }

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        let rank = 0usize..3;
        prop_oneof![
            4 => (rank.clone(), rank.clone(), prop_oneof![0usize..200, 20_000usize..300_000])
                .prop_map(|(from, to, len)| Step::Send { from, to, len }),
            2 => (rank.clone(), rank).prop_map(|(at, peer)| Step::Terminate { at, peer }),
            2 => (0usize..6).prop_map(|times| Step::Poll { times }),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 128, max_shrink_iters: 64, ..Default::default() })]

        /// Closing connections at arbitrary points — while messages are queued, while the
        /// peer closes too, while a reconnect races the old connection's end — loses,
        /// duplicates and reorders nothing, and never reports a live peer failed.
        #[test]
        fn closes_and_reconnects_at_random_points_lose_nothing(
            steps in proptest::collection::vec(step(), 1..40)
        ) {
            let mut ts = job(3, 21);
            let mut got: Vec<Collect> = (0..3).map(|_| Collect::default()).collect();
            let mut sent = [[0u32; 3]; 3];
            let poll_all = |ts: &mut Vec<TcpNetmod>, got: &mut Vec<Collect>| {
                for (t, g) in ts.iter_mut().zip(got.iter_mut()) {
                    t.am_poll(g, 64).unwrap();
                }
            };
            for st in &steps {
                match *st {
                    Step::Send { from, to, len } => {
                        let seq = sent[from][to];
                        sent[from][to] += 1;
                        let body = pattern(from as u32, seq as usize, len);
                        let mut hdr = seq.to_le_bytes().to_vec();
                        hdr.extend((len as u32).to_le_bytes());
                        ts[from].am_send(to as Gpid, 6, &hdr, &[&body]).unwrap();
                    }
                    Step::Terminate { at, peer } => ts[at].vc_terminate(peer as Gpid).unwrap(),
                    Step::Poll { times } => {
                        for _ in 0..times {
                            poll_all(&mut ts, &mut got);
                        }
                    }
                }
            }
            let total: u32 = sent.iter().flatten().sum();
            let start = Instant::now();
            while got.iter().map(|g| g.0.len() as u32).sum::<u32>() < total
                || ts.iter().any(|t| t.has_queued_output())
            {
                poll_all(&mut ts, &mut got);
                proptest::prop_assert!(start.elapsed() < Duration::from_secs(10), "stuck");
            }
            for (me, g) in got.iter().enumerate() {
                let mut next = [0u32; 3];
                for (src, h, hdr, payload) in &g.0 {
                    let src = *src as usize;
                    let seq = u32::from_le_bytes(hdr[..4].try_into().unwrap());
                    proptest::prop_assert_eq!((*h, seq), (6, next[src]), "at {} from {}", me, src);
                    let len = u32::from_le_bytes(hdr[4..8].try_into().unwrap()) as usize;
                    proptest::prop_assert!(*payload == pattern(src as u32, seq as usize, len));
                    next[src] += 1;
                }
                for src in 0..3 {
                    proptest::prop_assert_eq!(next[src], sent[src][me]);
                }
            }
            for (me, t) in ts.iter().enumerate() {
                for peer in 0..3 {
                    proptest::prop_assert!(!t.peer_failed(peer as Gpid), "{} sees {} failed", me, peer);
                }
            }
        }
    }

    #[test]
    fn terminating_a_vc_without_a_connection_or_out_of_range() {
        let mut ts = job(3, 15);
        let t0 = &mut ts[0];
        t0.vc_terminate(2).unwrap();
        t0.vc_terminate(0).unwrap();
        assert!(!t0.has_queued_output() && !t0.is_connected(2));
        assert_eq!(t0.vc_terminate(3).unwrap_err().kind(), ErrorKind::Rank);
    }

    #[test]
    fn a_peer_that_dies_is_reported_within_a_second() {
        let mut ts = job(2, 9);
        let t1 = ts.pop().unwrap();
        let mut t0 = ts.pop().unwrap();
        let mut t1 = t1;
        t0.am_send(1, 1, b"x", &[]).unwrap();
        let mut got = Collect::default();
        let start = Instant::now();
        while got.0.is_empty() {
            t0.am_poll(&mut Collect::default(), 64).unwrap();
            t1.am_poll(&mut got, 64).unwrap();
            assert!(start.elapsed() < Duration::from_secs(10));
        }
        drop(t1); // the process "dies": its sockets close
        let start = Instant::now();
        while !t0.peer_failed(1) {
            t0.am_poll(&mut Collect::default(), 64).unwrap();
            assert!(start.elapsed() < Duration::from_secs(1), "no failure seen");
        }
        let err = t0.am_send(1, 1, b"x", &[]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::PeerFailed);
    }
}

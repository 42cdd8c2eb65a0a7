//! Connections: connecting on demand, the hello handshake, accepting (and refusing) incoming
//! connections, the simultaneous-connect tie-break, and which sockets epoll watches.

use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Interest, Token};

use super::*;

/// First bytes of a hello; the last byte is the protocol version.
pub(super) const HELLO_MAGIC: [u8; 8] = *b"ch4tcp\0\x02";

/// Bytes of a hello: see [`HelloMsg`].
pub(super) const HELLO: usize = 28;

/// First bytes of an answer to a hello.
pub(super) const ANSWER_MAGIC: [u8; 4] = *b"ch4a";

/// Bytes of an answer: magic, code (u32 LE).
pub(super) const ANSWER: usize = 8;

pub(super) const ACCEPTED: u32 = 0;

pub(super) const DUPLICATE: u32 = 1;

pub(super) const REFUSED: u32 = 2;

/// The peer's byte order differs from ours: the active-message headers inside the frames are
/// in the sender's native order (plain `#[repr(C)]` integers, read without conversion on the
/// hot path), so ranks of one job must share a byte order, and this is where it is checked.
pub(super) const WRONG_BYTE_ORDER: u32 = 3;

/// Written in the sender's native byte order: a receiver that reads it back differently has
/// the other order.
const BYTE_ORDER_MARK: u32 = 0x0102_0304;

/// A hello, the first bytes of every connection: `magic`, then the job key (u64 LE), the
/// sender's rank (u32 LE), its connection generation with the receiver (u32 LE: how many
/// connections the pair has had so far; see `Vc::generation`), and [`BYTE_ORDER_MARK`] in the
/// sender's native order.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct HelloMsg {
    pub(super) key: u64,
    pub(super) rank: u32,
    pub(super) generation: u32,
    /// Whether the sender's byte order is ours (always true for a hello we make).
    pub(super) same_byte_order: bool,
}

/// Without the key: a hello printed in a log or an error must not hand the job's key to whoever
/// reads it.
impl std::fmt::Debug for HelloMsg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HelloMsg")
            .field("key", &"(not shown)")
            .field("rank", &self.rank)
            .field("generation", &self.generation)
            .field("same_byte_order", &self.same_byte_order)
            .finish()
    }
}

impl HelloMsg {
    /// The hello's bytes.
    pub(super) fn encode(&self) -> [u8; HELLO] {
        let mut h = [0u8; HELLO];
        h[..8].copy_from_slice(&HELLO_MAGIC);
        h[8..16].copy_from_slice(&self.key.to_le_bytes());
        h[16..20].copy_from_slice(&self.rank.to_le_bytes());
        h[20..24].copy_from_slice(&self.generation.to_le_bytes());
        h[24..28].copy_from_slice(&BYTE_ORDER_MARK.to_ne_bytes());
        h
    }

    /// The hello in `bytes`, or `None` when they are not a hello of this protocol.
    pub(super) fn decode(bytes: &[u8]) -> Option<HelloMsg> {
        let b: &[u8; HELLO] = bytes.try_into().ok()?;
        if b[..8] != HELLO_MAGIC {
            return None;
        }
        let word = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        Some(HelloMsg {
            key: u64::from_le_bytes(b[8..16].try_into().ok()?),
            rank: word(16),
            generation: word(20),
            same_byte_order: b[24..28] == BYTE_ORDER_MARK.to_ne_bytes(),
        })
    }
}

/// Where our side of a handshake got to.
pub(super) enum Hello {
    Pending,
    Failed(String),
    Answer(u32),
}

/// A connection that has not finished its hello.
pub(super) struct Incoming {
    pub(super) stream: TcpStream,
    pub(super) hello: Vec<u8>,
    /// When it was accepted: one still silent after [`HELLO_PATIENCE`] no longer makes
    /// progress look for its hello at every poll.
    pub(super) since: Instant,
}

/// How long progress looks for an accepted connection's hello at every poll. A rank sends its
/// hello as soon as its connect completes, so this is only ever reached by a rank that stopped
/// calling progress right after connecting (its hello is then read at a later epoll pass, as
/// new connections are: nothing is lost) or by a stray process that connected and says nothing
/// — which must not make every poll of the job pay for an epoll_wait.
pub(super) const HELLO_PATIENCE: Duration = Duration::from_secs(1);

/// Connections that may be waiting for their hello at once, beyond two for each rank of the
/// job (every peer connecting at once, each with a stale attempt besides). Past that the oldest
/// is dropped: a rank's hello comes right behind its connect, so only strays wait that long,
/// and a flood of them must not take every descriptor of the process.
pub(super) const SPARE_INCOMING: usize = 64;

/// Whether two keys are equal, in the same time whatever their bits: a stranger timing the
/// refusals learns nothing of the key.
pub(super) fn same_key(a: u64, b: u64) -> bool {
    let diff = a ^ b;
    // 0 only when every bit agrees; `black_box` keeps the compiler from branching early.
    std::hint::black_box(diff | diff.wrapping_neg()) >> 63 == 0
}

impl TcpNetmod {
    /// Makes `stream`, a connection from `peer` that passed its hello (and is registered with
    /// nothing), the VC's connection.
    pub(super) fn adopt(&mut self, peer: usize, stream: TcpStream) {
        let vc = &mut self.vcs[peer];
        vc.stream = Some(stream);
        vc.in_epoll = false;
        self.set_state(peer, VcState::Connected);
        self.went_connected(peer);
        self.flush(peer);
    }

    /// A VC's connection is open. While few are (at most [`DIRECT_MAX`]), progress reads and
    /// flushes each directly at every poll, and their sockets leave epoll: a socket that epoll
    /// watches costs every arriving segment a wake-up callback in the sender's system call —
    /// on the latency path. With more, every open connection is watched.
    pub(super) fn went_connected(&mut self, peer: usize) {
        self.vcs[peer].generation = self.vcs[peer].generation.wrapping_add(1);
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
    pub(super) fn watch(&mut self, peer: usize, on: bool) {
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

    pub(super) fn start_connect(&mut self, peer: usize) -> Result<()> {
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
        self.set_state(peer, VcState::Connecting);
        Ok(())
    }

    /// A writable or readable event on our own connection to `peer`.
    pub(super) fn on_vc_event(&mut self, peer: usize, writable: bool, readable: bool) {
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
            self.set_state(
                peer,
                VcState::AwaitAnswer {
                    sent: 0,
                    got: Vec::new(),
                },
            );
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
    pub(super) fn drive_hello(&mut self, peer: usize) {
        match self.hello_step(peer) {
            Hello::Pending => {}
            Hello::Failed(why) => self.fail(peer, why),
            Hello::Answer(ACCEPTED) => {
                self.set_state(peer, VcState::Connected);
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
                self.set_state(peer, VcState::AwaitIncoming);
            }
            Hello::Answer(WRONG_BYTE_ORDER) => self.fail(
                peer,
                "the peer's byte order differs from ours: ranks of one job must share it".into(),
            ),
            Hello::Answer(_) => self.fail(
                peer,
                "the peer refused our hello (job key mismatch?)".into(),
            ),
        }
    }

    /// One step of our side of the handshake.
    pub(super) fn hello_step(&mut self, peer: usize) -> Hello {
        let hello = HelloMsg {
            key: self.key,
            rank: self.me,
            generation: self.vcs[peer].generation,
            same_byte_order: true,
        }
        .encode();
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

    pub(super) fn accept_all(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((mut stream, _)) => {
                    self.make_room_for_a_hello();
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
                            since: Instant::now(),
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

    /// Most connections that may wait for their hello at once (see [`SPARE_INCOMING`]).
    pub(super) fn max_incoming(&self) -> usize {
        2 * self.vcs.len() + SPARE_INCOMING
    }

    /// Drops the oldest connection still waiting for its hello when [`Self::max_incoming`]
    /// are.
    fn make_room_for_a_hello(&mut self) {
        let waiting = self.incoming.iter().flatten().count();
        if waiting < self.max_incoming() {
            return;
        }
        let oldest = self
            .incoming
            .iter()
            .enumerate()
            .filter_map(|(i, inc)| inc.as_ref().map(|inc| (inc.since, i)))
            .min();
        if let Some((_, slot)) = oldest {
            tracing::warn!(
                waiting,
                "tcp: too many connections that say nothing: dropped the oldest"
            );
            self.drop_incoming(slot, None);
        }
    }

    /// Whether a connection accepted less than [`HELLO_PATIENCE`] ago still owes its hello:
    /// progress then looks for it at every poll.
    pub(super) fn hellos_awaited(&self) -> bool {
        if self.incoming.iter().all(Option::is_none) {
            return false;
        }
        let now = Instant::now();
        self.incoming
            .iter()
            .flatten()
            .any(|inc| now.duration_since(inc.since) < HELLO_PATIENCE)
    }

    /// Reads an incoming connection's hello and accepts, refuses or drops it.
    pub(super) fn on_incoming(&mut self, slot: usize) {
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
        let from_job = HelloMsg::decode(&inc.hello).filter(|h| {
            same_key(h.key, self.key) && (h.rank as usize) < self.vcs.len() && h.rank != self.me
        });
        let Some(hello) = from_job else {
            let from = inc.stream.peer_addr().ok();
            tracing::warn!(?from, "tcp: refused a connection that is not from this job");
            return self.drop_incoming(slot, Some(REFUSED));
        };
        let (rank, generation) = (hello.rank as usize, hello.generation);
        if !hello.same_byte_order {
            tracing::warn!(
                rank,
                "tcp: refused a rank whose byte order differs from ours"
            );
            return self.drop_incoming(slot, Some(WRONG_BYTE_ORDER));
        }
        if generation != self.vcs[rank].generation {
            // An attempt that lost a simultaneous connect, read only after the connection that
            // won has come and gone: its sender dropped it long ago.
            tracing::debug!(rank, generation, "tcp: dropped a stale connection attempt");
            return self.drop_incoming(slot, Some(DUPLICATE));
        }
        let me = self.me as usize;
        let vc = &self.vcs[rank];
        let adopt = match vc.state {
            VcState::Idle | VcState::AwaitIncoming => true,
            // Simultaneous connects: the lower rank's connection wins.
            VcState::Connecting | VcState::AwaitAnswer { .. } => rank < me,
            // The peer finished closing the old connection before we did: the new one waits.
            VcState::Connected => vc.close.is_some() && vc.successor.is_none(),
            VcState::Failed(..) => false,
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

    pub(super) fn drop_incoming(&mut self, slot: usize, answer: Option<u32>) {
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
}

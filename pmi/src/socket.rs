//! A blocking-socket transport for the [`Server`] core: what ch4run runs.
//!
//! One reader thread per connection decodes lines and sends them over a channel; the thread
//! that owns the [`SocketServer`] feeds them to the sans-IO core in arrival order and writes the
//! replies. The core therefore stays single-threaded and deterministic, and a slow or silent
//! client blocks only its own reader thread. Thread-per-client is fine at one host's scale
//! (tens to hundreds of ranks); multi-host jobs use Hydra instead.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::server::{ClientId, JobConfig, Output, Server};
use crate::wire::{Command, Decoder, WireError};

/// How long a reply write may block before the client is considered stuck. Replies are a few
/// hundred bytes, so only a client that stopped reading altogether can hit this.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a `PMI_PORT` connection may take to send its first line (the `initack` that says
/// which rank it is). A rank sends it as soon as it has connected; a stray process that
/// connects and says nothing is cut off after this, so it holds no reader thread for long.
pub const IDENTIFY_TIMEOUT: Duration = Duration::from_secs(10);

/// Something the launcher must act on, reported by [`SocketServer::poll`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobEvent {
    /// A rank called PMI abort.
    Abort {
        /// Its rank, if known.
        rank: Option<u32>,
        /// The exit code it asked for.
        code: i32,
        /// Its message, if it sent one.
        message: Option<String>,
    },
    /// A rank finalized.
    Finalized {
        /// Its rank, if known.
        rank: Option<u32>,
    },
    /// A connection reached end of stream.
    Disconnected {
        /// Its rank, if known.
        rank: Option<u32>,
    },
    /// The job can no longer make progress; see [`Output::Failed`].
    Failed {
        /// Why.
        message: String,
    },
    /// A connection was refused and closed: it did not say which rank it is, or named a rank
    /// it may not be ([`Output::Refused`]). The job goes on; a launcher may log it.
    Refused {
        /// Why (never an id or key of the job).
        reason: String,
    },
}

/// The server's handle on one connection: replies go out through it, and dropping the server
/// shuts it down so that the client (and our reader thread) see end of stream.
enum Conn {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Conn {
    fn send(&mut self, data: &[u8]) -> io::Result<()> {
        match self {
            Conn::Unix(s) => s.write_all(data).and_then(|()| s.flush()),
            Conn::Tcp(s) => s.write_all(data).and_then(|()| s.flush()),
        }
    }

    fn shutdown(&self) {
        let _ = match self {
            Conn::Unix(s) => s.shutdown(Shutdown::Both),
            Conn::Tcp(s) => s.shutdown(Shutdown::Both),
        };
    }
}

enum Event {
    Message(ClientId, Result<Command, WireError>),
    Closed(ClientId),
    Accepted(TcpStream),
}

/// The [`Server`] core over Unix and TCP sockets. See the [module docs](self).
pub struct SocketServer {
    core: Server,
    tx: Sender<Event>,
    rx: Receiver<Event>,
    conns: HashMap<ClientId, Conn>,
    next_id: u64,
    /// The `PMI_PORT` listener being served, if any: closed once every rank holds a
    /// connection, since no one else may join.
    listening: Option<Listening>,
}

/// The accept thread's listener: its address (to wake the thread) and the flag that stops it.
struct Listening {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl SocketServer {
    /// A server for the job described by `config`, with no connections yet.
    pub fn new(config: JobConfig) -> Result<Self> {
        let (tx, rx) = mpsc::channel();
        Ok(SocketServer {
            core: Server::new(config)?,
            tx,
            rx,
            conns: HashMap::new(),
            next_id: 0,
            listening: None,
        })
    }

    /// The protocol state, for inspection.
    pub fn server(&self) -> &Server {
        &self.core
    }

    /// Serves a connected Unix socket (the launcher's end of a `PMI_FD` socketpair). `rank` is
    /// the rank the other end was started as, or `None` if it will say so in `initack`.
    pub fn add_unix(&mut self, stream: UnixStream, rank: Option<u32>) -> Result<ClientId> {
        stream
            .set_write_timeout(Some(WRITE_TIMEOUT))
            .map_err(|e| Error::io("setting a write timeout on a PMI socket", e))?;
        let reader = stream
            .try_clone()
            .map_err(|e| Error::io("duplicating a PMI socket", e))?;
        self.add(Box::new(reader), Conn::Unix(stream), rank)
    }

    /// Serves a connected TCP socket (a `PMI_PORT` client); its rank comes from `initack`,
    /// which must be its first line, sent within [`IDENTIFY_TIMEOUT`]: until then it may do
    /// nothing else (see [`Server::handle_command`]).
    pub fn add_tcp(&mut self, stream: TcpStream) -> Result<ClientId> {
        // Replies are small and latency-bound: do not let Nagle hold them back.
        stream
            .set_nodelay(true)
            .map_err(|e| Error::io("setting TCP_NODELAY on a PMI socket", e))?;
        stream
            .set_write_timeout(Some(WRITE_TIMEOUT))
            .map_err(|e| Error::io("setting a write timeout on a PMI socket", e))?;
        stream
            .set_read_timeout(Some(IDENTIFY_TIMEOUT))
            .map_err(|e| Error::io("setting a read timeout on a PMI socket", e))?;
        let reader = stream
            .try_clone()
            .map_err(|e| Error::io("duplicating a PMI socket", e))?;
        self.add(
            Box::new(FirstLineTimeout {
                stream: reader,
                waiting: true,
            }),
            Conn::Tcp(stream),
            None,
        )
    }

    /// Accepts `PMI_PORT` connections on `listener` from a background thread; each is served as
    /// by [`add_tcp`](SocketServer::add_tcp) during a later [`poll`](SocketServer::poll). The
    /// listener is closed once every rank of the job holds a connection: a launcher on one host
    /// has no later joiners, and a port on 127.0.0.1 is open to every user of the host.
    pub fn listen(&mut self, listener: TcpListener) -> Result<()> {
        let tx = self.tx.clone();
        let addr = listener
            .local_addr()
            .map_err(|e| Error::io("reading the PMI listener's address", e))?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        thread::Builder::new()
            .name("pmi-accept".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    if stopped.load(Ordering::Acquire) {
                        // Dropping the listener closes the port.
                        return;
                    }
                    match conn {
                        Ok(stream) => {
                            if tx.send(Event::Accepted(stream)).is_err() {
                                return;
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        // Out of fds or similar: back off rather than spin.
                        Err(_) => thread::sleep(Duration::from_millis(50)),
                    }
                }
            })
            .map_err(|e| Error::io("starting the PMI accept thread", e))?;
        self.listening = Some(Listening { addr, stop });
        Ok(())
    }

    /// Whether a `PMI_PORT` listener is still open.
    pub fn is_listening(&self) -> bool {
        self.listening.is_some()
    }

    /// Closes the `PMI_PORT` listener: the accept thread is told to stop and woken by a
    /// connection of our own, which it drops.
    fn stop_listening(&mut self) {
        if let Some(l) = self.listening.take() {
            l.stop.store(true, Ordering::Release);
            let _ = TcpStream::connect_timeout(&l.addr, Duration::from_secs(1));
        }
    }

    fn add(
        &mut self,
        reader: Box<dyn Read + Send>,
        conn: Conn,
        rank: Option<u32>,
    ) -> Result<ClientId> {
        let id = ClientId(self.next_id);
        self.core.add_client(id, rank)?;
        self.next_id += 1;
        let tx = self.tx.clone();
        let spawned = thread::Builder::new()
            .name(format!("pmi-client-{}", id.0))
            .spawn(move || read_loop(id, reader, tx));
        if let Err(e) = spawned {
            // Keep the core consistent with the threads that actually run.
            let _ = self.core.handle_disconnect(id);
            while self.core.poll_output().is_some() {}
            return Err(Error::io("starting a PMI reader thread", e));
        }
        self.conns.insert(id, conn);
        Ok(id)
    }

    /// Waits up to `timeout` for traffic, then serves everything that has arrived: replies are
    /// written before this returns. Returns the job-level events, in order.
    pub fn poll(&mut self, timeout: Duration) -> Vec<JobEvent> {
        let mut events = Vec::new();
        let first = match self.rx.recv_timeout(timeout) {
            Ok(ev) => ev,
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return events,
        };
        self.dispatch(first, &mut events);
        while let Ok(ev) = self.rx.try_recv() {
            self.dispatch(ev, &mut events);
        }
        events
    }

    fn dispatch(&mut self, event: Event, events: &mut Vec<JobEvent>) {
        match event {
            Event::Message(id, Ok(cmd)) => {
                let _ = self.core.handle_command(id, &cmd);
            }
            Event::Message(id, Err(err)) => {
                let _ = self.core.handle_malformed(id, &err);
            }
            Event::Closed(id) => {
                let rank = self.core.rank_of(id);
                if self.core.handle_disconnect(id).is_ok() {
                    events.push(JobEvent::Disconnected { rank });
                }
                self.conns.remove(&id);
            }
            Event::Accepted(stream) => {
                // A connection we cannot serve is dropped; its client sees EOF and reports it.
                // Once every rank is here, no one else may join (this is our own wake-up, or
                // a stranger).
                if self.listening.is_some() {
                    let _ = self.add_tcp(stream);
                }
            }
        }
        while let Some(out) = self.core.poll_output() {
            match out {
                Output::Send { to, data } => {
                    if let Some(conn) = self.conns.get_mut(&to) {
                        // A failed write means the client is gone (or stuck): cut it off, and
                        // its reader reports the end of stream.
                        if conn.send(data.as_bytes()).is_err() {
                            conn.shutdown();
                        }
                    }
                }
                Output::Abort {
                    rank,
                    code,
                    message,
                    ..
                } => events.push(JobEvent::Abort {
                    rank,
                    code,
                    message,
                }),
                Output::Finalized { rank, .. } => events.push(JobEvent::Finalized { rank }),
                Output::Failed { message } => events.push(JobEvent::Failed { message }),
                Output::Refused { client, reason } => {
                    // Its error reply went out just before: now it goes.
                    if let Some(conn) = self.conns.get(&client) {
                        conn.shutdown();
                    }
                    events.push(JobEvent::Refused { reason });
                }
            }
        }
        if self.listening.is_some() && self.core.all_ranks_held() {
            self.stop_listening();
        }
    }
}

impl Drop for SocketServer {
    /// Shuts every connection down, so clients blocked on a reply get end of stream (an
    /// [`ErrorKind::Closed`](crate::ErrorKind::Closed) error) instead of waiting forever, and
    /// the reader threads exit.
    fn drop(&mut self) {
        for conn in self.conns.values() {
            conn.shutdown();
        }
    }
}

/// A `PMI_PORT` connection's reading half, whose read timeout ([`IDENTIFY_TIMEOUT`]) holds
/// until its first line has arrived whole: a stray process that sends nothing, or a few bytes
/// and no newline, is cut off, while a rank's later silences (a long computation between two
/// PMI calls) must not end its connection.
struct FirstLineTimeout {
    stream: TcpStream,
    waiting: bool,
}

impl Read for FirstLineTimeout {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.stream.read(buf)?;
        if self.waiting && buf[..n].contains(&b'\n') {
            // SO_RCVTIMEO belongs to the socket, shared with the writing half.
            self.stream.set_read_timeout(None)?;
            self.waiting = false;
        }
        Ok(n)
    }
}

fn read_loop(id: ClientId, mut reader: Box<dyn Read + Send>, tx: Sender<Event>) {
    let mut decoder = Decoder::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        decoder.push(&buf[..n]);
        while let Some(msg) = decoder.next_message() {
            if tx.send(Event::Message(id, msg)).is_err() {
                return;
            }
        }
    }
    let _ = tx.send(Event::Closed(id));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};
    use std::time::Instant;

    /// Serves `server` until `done` holds, failing after ten seconds.
    fn serve_until(
        server: &mut SocketServer,
        events: &mut Vec<JobEvent>,
        mut done: impl FnMut(&SocketServer, &[JobEvent]) -> bool,
    ) {
        let start = Instant::now();
        while !done(server, events) {
            events.extend(server.poll(Duration::from_millis(10)));
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "stuck: {events:?}"
            );
        }
    }

    /// Sends `line` on a fresh connection to `addr` and returns every line until the server
    /// closes it.
    fn stray(addr: SocketAddr, line: &[u8]) -> thread::JoinHandle<Vec<String>> {
        let line = line.to_vec();
        thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            s.write_all(&line).unwrap();
            BufReader::new(s).lines().map_while(|l| l.ok()).collect()
        })
    }

    /// A port on 127.0.0.1 is reachable by every user of the host: a process that was not
    /// given a rank's id is answered with an error and disconnected, whatever it sends, while
    /// the ranks join; once all have, the port is closed.
    #[test]
    fn strangers_on_the_port_are_refused_and_the_port_closes_once_every_rank_is_in() {
        let ids = vec![1_111_111_111, 222_222_222];
        let mut config = JobConfig::single_node(2);
        config.port_ids = Some(ids.clone());
        let mut server = SocketServer::new(config).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        server.listen(listener).unwrap();
        let mut events = Vec::new();
        let strays = [
            &b"cmd=get kvsname=kvs_x key=ch4-job-key\n"[..],
            b"cmd=abort exitcode=3\n",
            b"cmd=initack pmiid=0\n",
            b"cmd=initack pmiid=1\n",
            b"\xff\xfe garbage\n",
        ]
        .map(|line| stray(addr, line));
        // One that connects and says nothing: it blocks no one.
        let _silent = TcpStream::connect(addr).unwrap();
        serve_until(&mut server, &mut events, |_, _| {
            strays.iter().all(thread::JoinHandle::is_finished)
        });
        for s in strays {
            let lines = s.join().unwrap();
            assert_eq!(lines.len(), 1, "one error reply, then closed: {lines:?}");
            assert!(lines[0].contains("rc=-1"), "{lines:?}");
            for id in &ids {
                assert!(!lines[0].contains(&id.to_string()), "{lines:?}");
            }
        }
        // The ranks, with their ids, join.
        let ranks: Vec<_> = ids
            .iter()
            .map(|&id| {
                let port = addr.to_string();
                thread::spawn(move || {
                    let c = crate::Client::connect_port(&port, Some(id)).unwrap();
                    (c.rank(), c.size())
                })
            })
            .collect();
        serve_until(&mut server, &mut events, |s, _| !s.is_listening());
        let mut got: Vec<_> = ranks.into_iter().map(|r| r.join().unwrap()).collect();
        got.sort();
        assert_eq!(got, vec![(0, 2), (1, 2)]);
        let refused = events
            .iter()
            .filter(|e| matches!(e, JobEvent::Refused { .. }))
            .count();
        assert_eq!(refused, 5, "{events:?}");
        assert!(!events
            .iter()
            .any(|e| matches!(e, JobEvent::Abort { .. } | JobEvent::Failed { .. })));
        // The port is closed: a late stranger cannot even connect.
        let start = Instant::now();
        while TcpStream::connect(addr).is_ok() {
            events.extend(server.poll(Duration::from_millis(10)));
            assert!(start.elapsed() < Duration::from_secs(5), "still listening");
        }
    }
}

//! A blocking-socket transport for the [`Server`] core: what ch4run runs.
//!
//! One reader thread per connection decodes lines and sends them over a channel; the thread
//! that owns the [`SocketServer`] feeds them to the sans-IO core in arrival order and writes the
//! replies. The core therefore stays single-threaded and deterministic, and a slow or silent
//! client blocks only its own reader thread. Thread-per-client is fine at one host's scale
//! (tens to hundreds of ranks); multi-host jobs use Hydra instead.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::server::{ClientId, JobConfig, Output, Server};
use crate::wire::{Command, Decoder, WireError};

/// How long a reply write may block before the client is considered stuck. Replies are a few
/// hundred bytes, so only a client that stopped reading altogether can hit this.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

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

    /// Serves a connected TCP socket (a `PMI_PORT` client); its rank comes from `initack`.
    pub fn add_tcp(&mut self, stream: TcpStream) -> Result<ClientId> {
        // Replies are small and latency-bound: do not let Nagle hold them back.
        stream
            .set_nodelay(true)
            .map_err(|e| Error::io("setting TCP_NODELAY on a PMI socket", e))?;
        stream
            .set_write_timeout(Some(WRITE_TIMEOUT))
            .map_err(|e| Error::io("setting a write timeout on a PMI socket", e))?;
        let reader = stream
            .try_clone()
            .map_err(|e| Error::io("duplicating a PMI socket", e))?;
        self.add(Box::new(reader), Conn::Tcp(stream), None)
    }

    /// Accepts `PMI_PORT` connections on `listener` from a background thread; each is served as
    /// by [`add_tcp`](SocketServer::add_tcp) during a later [`poll`](SocketServer::poll).
    pub fn listen(&mut self, listener: TcpListener) -> Result<()> {
        let tx = self.tx.clone();
        thread::Builder::new()
            .name("pmi-accept".into())
            .spawn(move || {
                for conn in listener.incoming() {
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
        Ok(())
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
                let _ = self.add_tcp(stream);
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
            }
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

//! A TCP proxy that breaks the connections it carries on cue: the faults a real network has,
//! for tests of real sockets (`netmod-tcp/tests/faults.rs`, `netmod-rails/tests/faults.rs`).
//!
//! A rank is told the proxy's address instead of its peer's; the proxy forwards both ways and,
//! after a given number of bytes (a seeded cut point, or `u64::MAX` for never), resets every
//! connection it carries (RST, as a crashed host's kernel or a firewall does) or drops it
//! (FIN without the netmod's goodbye, as a middlebox that gives up does), and refuses new ones.
//! Unlike `ss -K`, which needs iproute2 and root, it cuts at a chosen byte, mid-transfer.
//!
//! [`Proxy::start_with`] takes a [`Plan`] for two more behaviours: after the cut, accept new
//! connections again and forward them without limit (a transient failure, for transports that
//! reconnect by themselves, such as libfabric's `ofi_rxm`), and a slow, fragmented wire that
//! forwards in seeded random small pieces with seeded random short pauses (no cut).
#![allow(unsafe_code)] // setsockopt(SO_LINGER): one FFI call, with its SAFETY comment.

use std::io::{ErrorKind as IoKind, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::SplitMix64;

/// How the proxy breaks its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// `SO_LINGER` 0 and close: the kernel sends RST, the peer reads `ECONNRESET`.
    Reset,
    /// `shutdown(2)` both ways and close: the peer reads end of stream with no goodbye.
    Drop,
}

/// What a proxy does besides forwarding: see [`Proxy::start_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// Bytes forwarded (both ways, all connections together) before the cut; `u64::MAX`:
    /// never cut.
    pub budget: u64,
    /// How the cut breaks the connections.
    pub cut: Cut,
    /// After the cut, accept new connections and forward them without limit, instead of
    /// refusing them (the peer is then reachable again: a transient failure).
    pub reopen: bool,
    /// Forward in pieces of 1 to `max_piece` bytes, each piece written alone, with a pause of
    /// up to `max_pause` after a quarter of them, drawn from this seed.
    pub fragment: Option<Fragment>,
}

/// A slow, fragmented wire: see [`Plan::fragment`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fragment {
    /// The seed of the pieces' sizes and the pauses.
    pub seed: u64,
    /// The largest piece, in bytes (at least 1).
    pub max_piece: usize,
    /// The longest pause between two pieces.
    pub max_pause: Duration,
}

impl Plan {
    /// Cut after `budget` bytes as `cut` says, and refuse new connections afterwards.
    pub fn cut(budget: u64, cut: Cut) -> Plan {
        Plan {
            budget,
            cut,
            reopen: false,
            fragment: None,
        }
    }
}

/// What the proxy thread and the test share.
struct Shared {
    /// Bytes forwarded so far, both ways, over all connections.
    forwarded: AtomicU64,
    /// Connections accepted so far (and forwarded to the target).
    accepted: AtomicU64,
    /// Pieces written and pauses taken by a fragmenting proxy.
    pieces: AtomicU64,
    pauses: AtomicU64,
    /// When the cut happened (set once), in ms since `epoch`, plus one (0: not yet).
    cut_at: AtomicU64,
    epoch: Instant,
    stop: AtomicBool,
}

/// A TCP proxy in front of one rank's listener that forwards `budget` bytes and then cuts
/// every connection it carries, and refuses new ones.
pub struct Proxy {
    /// Where ranks connect instead of the target.
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// One direction of a proxied connection: bytes read from `from` not yet written to `to`.
#[derive(Default)]
struct Pending(Vec<u8>);

impl Proxy {
    /// A proxy to `target` that forwards `budget` bytes (both ways together) and then cuts as
    /// `cut` says. Panics if it cannot listen on loopback (a test's setup).
    pub fn start(target: SocketAddr, budget: u64, cut: Cut) -> Proxy {
        Proxy::start_with(target, Plan::cut(budget, cut))
    }

    /// A proxy to `target` that behaves as `plan` says. Panics if it cannot listen on
    /// loopback (a test's setup).
    pub fn start_with(target: SocketAddr, plan: Plan) -> Proxy {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("proxy listens");
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            forwarded: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
            pieces: AtomicU64::new(0),
            pauses: AtomicU64::new(0),
            cut_at: AtomicU64::new(0),
            epoch: Instant::now(),
            stop: AtomicBool::new(false),
        });
        let s = shared.clone();
        let thread = std::thread::spawn(move || run_proxy(listener, target, plan, &s));
        Proxy {
            addr,
            shared,
            thread: Some(thread),
        }
    }

    /// When the proxy cut its connections, if it has.
    pub fn cut_at(&self) -> Option<Instant> {
        match self.shared.cut_at.load(Ordering::Acquire) {
            0 => None,
            ms => Some(self.shared.epoch + Duration::from_millis(ms - 1)),
        }
    }

    /// Bytes forwarded so far, both ways.
    pub fn forwarded(&self) -> u64 {
        self.shared.forwarded.load(Ordering::Relaxed)
    }

    /// Connections accepted so far (a transport that reconnects after a cut opens more).
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::Relaxed)
    }

    /// Pieces written and pauses taken by a fragmenting proxy ([`Plan::fragment`]).
    pub fn pieces_and_pauses(&self) -> (u64, u64) {
        (
            self.shared.pieces.load(Ordering::Relaxed),
            self.shared.pauses.load(Ordering::Relaxed),
        )
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Sets `SO_LINGER` to zero seconds, so that closing the socket resets the connection.
fn linger_zero(s: &TcpStream) {
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt on a descriptor `s` owns, with a pointer to a live `linger` and its
    // exact size; the kernel only reads it.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&l as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(
        rc,
        0,
        "setsockopt(SO_LINGER): {}",
        std::io::Error::last_os_error()
    );
}

/// Moves bytes from `from` to `to` through `pending`, at most `allowance` new ones; returns how
/// many were read and whether `from` ended. With `fragment`, reads at most one piece of a
/// size drawn from it and writes it alone (see [`Plan::fragment`]).
fn pump(
    from: &mut TcpStream,
    to: &mut TcpStream,
    pending: &mut Pending,
    allowance: u64,
    fragment: Option<(&mut SplitMix64, &Fragment, &Shared)>,
) -> (u64, bool) {
    let mut read = 0u64;
    let mut ended = false;
    if pending.0.is_empty() && allowance > 0 {
        let mut want = allowance.min(64 * 1024);
        if let Some((rng, f, s)) = fragment {
            want = want.min(1 + rng.below(f.max_piece.max(1) as u64));
            s.pieces.fetch_add(1, Ordering::Relaxed);
            if rng.below(4) == 0 && !f.max_pause.is_zero() {
                let pause = rng.below(f.max_pause.as_micros() as u64 + 1);
                s.pauses.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_micros(pause));
            }
        }
        let mut buf = vec![0u8; want as usize];
        match from.read(&mut buf) {
            Ok(0) => ended = true,
            Ok(n) => {
                pending.0.extend_from_slice(&buf[..n]);
                read = n as u64;
            }
            Err(e) if e.kind() == IoKind::WouldBlock || e.kind() == IoKind::Interrupted => {}
            Err(_) => ended = true,
        }
    }
    while !pending.0.is_empty() {
        match to.write(&pending.0) {
            Ok(n) => {
                pending.0.drain(..n);
            }
            Err(e) if e.kind() == IoKind::WouldBlock || e.kind() == IoKind::Interrupted => break,
            Err(_) => {
                pending.0.clear();
                ended = true;
            }
        }
    }
    (read, ended)
}

fn run_proxy(listener: TcpListener, target: SocketAddr, plan: Plan, s: &Shared) {
    let Plan {
        mut budget,
        cut,
        reopen,
        fragment,
    } = plan;
    let mut rng = SplitMix64::new(fragment.map_or(0, |f| f.seed));
    let mut listener = Some(listener);
    // (client side, upstream side, pending client→upstream, pending upstream→client, open)
    let mut conns: Vec<(TcpStream, TcpStream, Pending, Pending, bool)> = Vec::new();
    while !s.stop.load(Ordering::Acquire) {
        let mut idle = true;
        if let Some(l) = &listener {
            if let Ok((client, _)) = l.accept() {
                if let Ok(up) = TcpStream::connect(target) {
                    for t in [&client, &up] {
                        t.set_nonblocking(true).unwrap();
                        t.set_nodelay(true).unwrap();
                    }
                    conns.push((client, up, Pending::default(), Pending::default(), true));
                    s.accepted.fetch_add(1, Ordering::Relaxed);
                }
                idle = false;
            }
        }
        let mut forwarded = s.forwarded.load(Ordering::Relaxed);
        for (client, up, to_up, to_client, open) in conns.iter_mut().filter(|c| c.4) {
            let f = fragment.as_ref();
            let (a, end_a) = pump(
                client,
                up,
                to_up,
                budget - forwarded,
                f.map(|f| (&mut rng, f, s)),
            );
            forwarded += a;
            let (b, end_b) = pump(
                up,
                client,
                to_client,
                budget - forwarded,
                f.map(|f| (&mut rng, f, s)),
            );
            forwarded += b;
            idle &= a + b == 0;
            // An orderly end of one side is passed on as such.
            if end_a {
                let _ = up.shutdown(Shutdown::Write);
            }
            if end_b {
                let _ = client.shutdown(Shutdown::Write);
            }
            if end_a && end_b {
                *open = false;
            }
        }
        s.forwarded.store(forwarded, Ordering::Relaxed);
        if forwarded >= budget && s.cut_at.load(Ordering::Relaxed) == 0 {
            // Recorded before the cut, so that a test that sees its effect sees it recorded.
            let ms = s.epoch.elapsed().as_millis() as u64 + 1;
            s.cut_at.store(ms, Ordering::Release);
            for (client, up, ..) in conns.drain(..) {
                for t in [&client, &up] {
                    match cut {
                        Cut::Reset => linger_zero(t),
                        Cut::Drop => {
                            let _ = t.shutdown(Shutdown::Both);
                        }
                    }
                }
            }
            if reopen {
                // From now on new connections are forwarded without limit.
                budget = u64::MAX;
            } else {
                listener = None;
            }
        }
        if idle {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

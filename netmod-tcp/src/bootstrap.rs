//! Joining a job: the TCP netmod's [`Bootstrap`]. Its business card is the address its listener
//! is reached on; the job key rank 0 draws makes every connection prove it belongs to the job.

use std::net::{SocketAddr, ToSocketAddrs};

use ch4_core::bootstrap::Bootstrap;
use ch4_core::{Error, ErrorKind, Gpid, Result};

use crate::TcpNetmod;

impl Bootstrap for TcpNetmod {
    /// Listens on `CH4_TCP_BIND` (default: every interface, a free port). A job on one node
    /// listens on loopback only: nothing of the job will connect, and no other host should.
    fn open(rank: Gpid, size: u32, job_key: u64, spans_nodes: bool) -> Result<Self> {
        if !spans_nodes {
            return TcpNetmod::bind(rank, size, job_key, ([127, 0, 0, 1], 0).into());
        }
        TcpNetmod::bind(rank, size, job_key, bind_address()?)
    }

    fn business_card(&self) -> Result<Vec<u8>> {
        Ok(reachable(self.local_addr()).to_string().into_bytes())
    }

    /// Asked only about peers never connected to (a connection's end of stream tells the rest).
    fn watch_peers(&mut self, watch: ch4_core::bootstrap::PeerWatch) {
        TcpNetmod::watch_peers(self, watch);
    }

    fn learn_cards(&mut self, cards: &[Vec<u8>]) -> Result<()> {
        let me = self.gpid();
        for (r, card) in cards.iter().enumerate() {
            let r = r as Gpid;
            if r == me {
                continue;
            }
            let addr = std::str::from_utf8(card)
                .ok()
                .and_then(|s| s.parse::<SocketAddr>().ok())
                .ok_or_else(|| {
                    Error::new(
                        ErrorKind::Transport,
                        format!("rank {r} published no TCP address (its card: {card:?})"),
                    )
                })?;
            self.set_address(r, addr)?;
        }
        Ok(())
    }
}

/// `CH4_TCP_BIND`, strictly: a mistyped address must not quietly open the port on every
/// interface instead.
fn bind_address() -> Result<SocketAddr> {
    match ch4_core::env::raw("CH4_TCP_BIND")? {
        Some(v) => v.trim().parse().map_err(|_| {
            ch4_core::env::bad(
                "CH4_TCP_BIND",
                &v,
                "an address and port, like 10.0.0.5:0 or [::1]:0",
            )
        }),
        None => Ok(([0, 0, 0, 0], 0).into()),
    }
}

/// The address other hosts reach a listener on: the listener's own, or for one bound to every
/// interface, this host's name resolved (its first non-loopback address), else loopback.
fn reachable(listening: SocketAddr) -> SocketAddr {
    if !listening.ip().is_unspecified() {
        return listening;
    }
    let port = listening.port();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".to_string());
    let resolved = (host.as_str(), port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.find(|a| a.is_ipv4() && !a.ip().is_loopback()));
    resolved.unwrap_or_else(|| ([127, 0, 0, 1], port).into())
}

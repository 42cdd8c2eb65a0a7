//! Connections that break under live traffic, for real: a proxy stands between two ranks and,
//! after a seeded number of bytes, resets the connection (RST, as a crashed host's kernel or a
//! firewall does) or drops it (FIN without the netmod's goodbye, as a dying process or a
//! middlebox that gives up does). Whatever was in flight, every request at both ends either
//! completes correctly or fails with `PeerFailed`, within a bound; nothing arrives twice or
//! out of order; and operations on the peer afterwards fail at once rather than wait. (The
//! netmod does not re-establish a broken connection: which bytes of it arrived is unknowable,
//! so MPI's ordering could not be kept across a new one.)
//!
//! The cut points come from seeds: `0..FAULT_SEEDS` (default 2), or the one `FAULT_SEED`
//! names; a failure prints its seed.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use ch4_core::buffer::{RecvBuf, SendBuf};
use ch4_core::core::DeviceConfig;
use ch4_core::{ErrorKind, NoShm, ReqHandle, SendMode, Status};
use netmod_tcp::TcpNetmod;
use testkit::{Cut, Harness, Limit, Proxy, SplitMix64, TcpHarness};

/// Two ranks over TCP on loopback, each reaching the other through a proxy that cuts after
/// `budget` bytes (each proxy its own count) in the way `cut` says. Waits are bounded by 10 s.
fn job_through_proxies(budget: u64, cut: Cut) -> (TcpHarness, [Proxy; 2]) {
    let loopback = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
    let mut nets: Vec<TcpNetmod> = (0..2)
        .map(|me| TcpNetmod::bind(me, 2, 0xfa17, loopback).unwrap())
        .collect();
    let proxies = [0, 1].map(|to: usize| Proxy::start(nets[to].local_addr(), budget, cut));
    for (me, net) in nets.iter_mut().enumerate() {
        let peer = 1 - me;
        net.set_address(peer as u32, proxies[peer].addr).unwrap();
    }
    let mut nets = nets.into_iter();
    let h = Harness::build(2, DeviceConfig::default(), |_| {
        Ok((nets.next().expect("two netmods"), NoShm))
    })
    .unwrap();
    (h.with_limit(Limit::time(Duration::from_secs(10))), proxies)
}

/// The seeds: `FAULT_SEED` alone, else `0..FAULT_SEEDS` (default 2).
fn seeds() -> Vec<u64> {
    testkit::fault_seeds(2)
}

/// A pattern message `i` of `len` bytes: its number in the first four.
fn message(i: u32, len: usize) -> Vec<u8> {
    let mut m: Vec<u8> = (0..len)
        .map(|k| (k as u32 ^ i.wrapping_mul(131)) as u8)
        .collect();
    m[..4].copy_from_slice(&i.to_le_bytes());
    m
}

/// How long after the cut the last request ended, at most.
/// Milliseconds when unloaded; the margin is for a host shared with other builds (at a load
/// average of 65 a check took 2.05 s).
const DETECTED_WITHIN: Duration = Duration::from_secs(5);

/// The traffic one case sends from rank 0 to rank 1: `count` messages of `len` bytes each, all
/// posted at once at both ends (nonblocking), so that the cut meets some complete, some under
/// way and some not started.
struct Traffic {
    count: u32,
    len: usize,
}

impl Traffic {
    fn total(&self) -> u64 {
        u64::from(self.count) * self.len as u64
    }
}

/// Runs `traffic` through proxies that cut with `cut` after a number of bytes `seed` draws
/// (anywhere from the handshake to the last bytes); see [`cut_after`].
fn cut_under_traffic(seed: u64, cut: Cut, traffic: &Traffic) -> u32 {
    let budget = SplitMix64::new(seed).below(traffic.total() + 200);
    let what = format!(
        "{cut:?} after {budget} B of {}x{} B, seed {seed} (replay: FAULT_SEED={seed})",
        traffic.count, traffic.len
    );
    cut_after(budget, cut, traffic, &what)
}

/// Runs `traffic` through proxies that cut with `cut` after `budget` bytes; checks that every
/// request completed correctly or failed with `PeerFailed`, that the received messages are a
/// prefix of those sent, intact and in order, that everything ended within
/// [`DETECTED_WITHIN`] of the cut, and that the peers are failed to each other afterwards.
/// Returns how many messages arrived whole. `what` names the case in failures.
fn cut_after(budget: u64, cut: Cut, traffic: &Traffic, what: &str) -> u32 {
    let (mut h, proxies) = job_through_proxies(budget, cut);
    let sent: Vec<Vec<u8>> = (0..traffic.count)
        .map(|i| message(i, traffic.len))
        .collect();
    let mut got: Vec<Vec<u8>> = vec![vec![0xEE; traffic.len]; traffic.count as usize];
    let (w0, w1) = (h[0].world(), h[1].world());
    let mut reqs: Vec<(usize, ReqHandle)> = Vec::new();
    for (m, buf) in sent.iter().zip(got.iter_mut()) {
        let s = h[0]
            .isend(w0, 1, 5, SendBuf::owned(m.clone()), SendMode::Standard)
            .unwrap_or_else(|e| panic!("{what}: isend: {e}"));
        // SAFETY: every receive is completed (or failed and freed) below, before `got` is read
        // or dropped.
        let r = h[1]
            .irecv(w1, 0, 5, unsafe { RecvBuf::borrowed(buf) })
            .unwrap_or_else(|e| panic!("{what}: irecv: {e}"));
        reqs.extend([(0, s), (1, r)]);
    }
    if let Err(e) = h.drive_until_done(&reqs) {
        panic!("{what}: progress failed: {e}");
    }
    let ended = Instant::now();
    let statuses: Vec<(usize, Status)> = reqs
        .iter()
        .map(|&(d, r)| (d, h[d].wait_status(r).unwrap()))
        .collect();
    let mut whole = 0u32;
    let mut failed_yet = false;
    for (i, pair) in statuses.chunks(2).enumerate() {
        let (send, recv) = (pair[0].1, pair[1].1);
        for st in [send, recv] {
            assert!(
                matches!(st.error, None | Some(ErrorKind::PeerFailed)),
                "{what}: message {i}: {st:?}"
            );
        }
        match recv.error {
            None => {
                assert!(
                    !failed_yet,
                    "{what}: message {i} arrived after an earlier one failed"
                );
                assert_eq!(recv.bytes, traffic.len, "{what}: message {i}");
                assert!(
                    got[i] == sent[i],
                    "{what}: message {i} arrived damaged or misplaced"
                );
                whole += 1;
            }
            Some(_) => failed_yet = true,
        }
    }
    let cut_at = proxies.iter().filter_map(Proxy::cut_at).min();
    if whole < traffic.count {
        let cut_at =
            cut_at.unwrap_or_else(|| panic!("{what}: requests failed but nothing was cut"));
        let took = ended.saturating_duration_since(cut_at);
        assert!(
            took < DETECTED_WITHIN,
            "{what}: the failure took {took:?} to show"
        );
        // Afterwards the peers are failed to each other: at once, not after a wait.
        let start = Instant::now();
        let e = h[0]
            .send(w0, 1, 6, b"after", SendMode::Standard)
            .expect_err("a send to a peer whose connection broke");
        assert_eq!(e.kind(), ErrorKind::PeerFailed, "{what}: {e}");
        let mut b = [0u8; 8];
        let e = h[1].recv(w1, 0, 6, &mut b).expect_err("a receive from it");
        assert_eq!(e.kind(), ErrorKind::PeerFailed, "{what}: {e}");
        assert!(
            start.elapsed() < DETECTED_WITHIN,
            "{what}: {:?}",
            start.elapsed()
        );
    }
    // Nothing left over to arrive twice.
    assert!(
        h[1].iprobe(w1, 0, ch4_core::ANY_TAG)
            .map_or(true, |p| p.is_none()),
        "{what}: a message was left over"
    );
    eprintln!(
        "{what}: cut after {budget} B ({} forwarded), {whole}/{} arrived whole",
        proxies.iter().map(Proxy::forwarded).sum::<u64>(),
        traffic.count
    );
    whole
}

/// Eager messages (1 KiB, under TCP's 64 KiB eager limit) and rendezvous ones (1 MiB: a first
/// piece with the request-to-send, the rest after the clear-to-send).
const EAGER: Traffic = Traffic {
    count: 200,
    len: 1024,
};
const RENDEZVOUS: Traffic = Traffic {
    count: 4,
    len: 1 << 20,
};

#[test]
fn a_reset_connection_fails_the_requests_on_it_and_loses_nothing_silently() {
    for seed in seeds() {
        cut_under_traffic(seed, Cut::Reset, &EAGER);
        cut_under_traffic(seed, Cut::Reset, &RENDEZVOUS);
    }
}

#[test]
fn a_dropped_connection_fails_the_requests_on_it_and_loses_nothing_silently() {
    for seed in seeds() {
        cut_under_traffic(seed, Cut::Drop, &EAGER);
        cut_under_traffic(seed, Cut::Drop, &RENDEZVOUS);
    }
}

/// The check is not vacuous: with a budget beyond the traffic nothing is cut and everything
/// arrives; with a cut halfway through, some messages fail.
#[test]
fn the_proxy_cuts_where_it_is_told() {
    let all = cut_after(u64::MAX, Cut::Reset, &RENDEZVOUS, "no cut");
    assert_eq!(all, RENDEZVOUS.count);
    let half = RENDEZVOUS.total() / 2;
    let some = cut_after(half, Cut::Reset, &RENDEZVOUS, "a cut halfway");
    assert!(some < RENDEZVOUS.count, "{some}");
}

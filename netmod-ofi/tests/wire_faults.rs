//! Faults on the wire under the OFI netmod, over a real libfabric transport (`tcp;ofi_rxm`):
//! each rank reaches the other through a `testkit::Proxy`, which forwards bytes and, after a
//! seeded number of them, resets (RST) or drops (FIN) the connections it carries — or, in the
//! slow mode, forwards them in seeded small pieces with short pauses.
//!
//! A `tcp;ofi_rxm` endpoint's name (its business card) is a `sockaddr_in`: family 2, port
//! big-endian, the IPv4 address, eight zeros. The test rewrites the card of each rank that its
//! peer learns to the address of a proxy in front of that rank. Both ways: rxm names a peer
//! that connects to it by the connection's source address and the port the peer announces in
//! its handshake, so a rank whose own card was rewritten is not recognised by that name and
//! each rank's sends open a connection of their own (rank 0's through the proxy in front of
//! rank 1, rank 1's through the one in front of rank 0); with only one card rewritten, the
//! second rank's connection to the proxy opened and carried nothing (see
//! docs/hardening/faults.md).
//!
//! The bar, as for ch4's TCP netmod (`netmod-tcp/tests/faults.rs`): every request at both ends
//! completes correctly (content checked) or fails with a clear error (`PeerFailed` or
//! `Transport`), every wait bounded (10 s), nothing delivered twice or out of order. Over rxm
//! only part of it holds, and the default run checks that part: uncut and fragmented wires
//! deliver everything, and after a cut whatever ended is right. That everything ends does not
//! hold, nor that nothing is skipped once rxm reconnects (docs/hardening/faults.md, findings 3
//! to 5): the ignored tests are their reproducers; `survey` prints the figures.
//!
//! Seeds: `0..FAULT_SEEDS` (default 2), or the one `FAULT_SEED` names; a failure prints its
//! seed.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use ch4_core::bootstrap::Bootstrap;
use ch4_core::buffer::{RecvBuf, SendBuf};
use ch4_core::core::DeviceConfig;
use ch4_core::{Device, ErrorKind, NoShm, ReqHandle, SendMode, Status, ANY_TAG};
use netmod_ofi::provider::{Hints, FI_DIRECTED_RECV};
use netmod_ofi::OfiNetmod;
use testkit::{Cut, Fragment, Harness, Limit, Plan, Proxy, SplitMix64};

type Job = Harness<OfiNetmod, NoShm>;

/// Every wait of a case is bounded by this: 10 s, or `FAULT_BOUND_SECS` (for surveys of
/// many seeds whose cases are known to wait).
fn bound() -> Duration {
    Duration::from_secs(
        std::env::var("FAULT_BOUND_SECS")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(10),
    )
}

/// The IPv4 address in a `tcp;ofi_rxm` name (`sockaddr_in`: family 2 little-endian, port
/// big-endian, address, zeros).
fn address_of(card: &[u8]) -> SocketAddr {
    assert_eq!(card.len(), 16, "a sockaddr_in: {card:02x?}");
    assert_eq!(
        u16::from_le_bytes([card[0], card[1]]),
        2,
        "AF_INET: {card:02x?}"
    );
    let port = u16::from_be_bytes([card[2], card[3]]);
    SocketAddr::from((Ipv4Addr::new(card[4], card[5], card[6], card[7]), port))
}

/// `card` with its address replaced by `to`.
fn rewritten(card: &[u8], to: SocketAddrV4) -> Vec<u8> {
    let mut c = card.to_vec();
    c[2..4].copy_from_slice(&to.port().to_be_bytes());
    c[4..8].copy_from_slice(&to.ip().octets());
    c
}

/// Two ranks over `tcp;ofi_rxm`, each reaching the other through a proxy that behaves as
/// `plans[rank]` (the proxy in front of that rank); `None` when the provider is missing here.
fn job_through_proxies(plans: [Plan; 2]) -> Option<(Job, [Proxy; 2])> {
    // The proxies make rxm see each rank under an address its peer's address vector does not
    // hold (the proxy's source address, the rank's own port), so a receive posted for the
    // peer's address would never match: receives accept any address here, as
    // CH4_OFI_DIRECTED_RECV=off makes them. What this file tests is the wire.
    let mut hints = Hints::for_provider("tcp");
    hints.optional_caps &= !FI_DIRECTED_RECV;
    let nets: Vec<OfiNetmod> = match (0..2)
        .map(|r| OfiNetmod::open_with(&hints, r, 2, true))
        .collect::<ch4_core::Result<Vec<_>>>()
    {
        Ok(n) => n,
        Err(e) => {
            eprintln!("note: tcp;ofi_rxm unavailable here, test skipped: {e}");
            return None;
        }
    };
    let cards: Vec<Vec<u8>> = nets.iter().map(|n| n.business_card().unwrap()).collect();
    let proxies = [0, 1].map(|r| Proxy::start_with(address_of(&cards[r]), plans[r]));
    let devs = nets
        .into_iter()
        .enumerate()
        .map(|(me, mut net)| {
            let peer = 1 - me;
            let SocketAddr::V4(via) = proxies[peer].addr else {
                unreachable!("the proxy listens on IPv4 loopback")
            };
            let mut seen = cards.clone();
            seen[peer] = rewritten(&cards[peer], via);
            net.learn_cards(&seen).unwrap();
            Device::new(net, NoShm, me as u32, 2, DeviceConfig::default()).unwrap()
        })
        .collect();
    Some((Harness::new(devs).with_limit(Limit::time(bound())), proxies))
}

fn seeds() -> Vec<u64> {
    testkit::fault_seeds(2)
}

/// Message `i` from rank `from`, of `len` bytes: its number and sender in the first five.
fn message(from: usize, i: u32, len: usize) -> Vec<u8> {
    let mut m: Vec<u8> = (0..len)
        .map(|k| (k as u32 ^ i.wrapping_mul(131) ^ (from as u32 * 77)) as u8)
        .collect();
    m[..4].copy_from_slice(&i.to_le_bytes());
    m[4] = from as u8;
    m
}

/// The traffic of one case: `count` messages of `len` bytes from each rank to the other, all
/// posted at once (nonblocking) at both ends; every third one synchronous.
#[derive(Clone, Copy)]
struct Traffic {
    count: u32,
    len: usize,
}

impl Traffic {
    /// Bytes sent, both ways.
    fn total(&self) -> u64 {
        2 * u64::from(self.count) * self.len as u64
    }

    fn mode(i: u32) -> SendMode {
        if i % 3 == 2 {
            SendMode::Synchronous
        } else {
            SendMode::Standard
        }
    }
}

/// Eager messages (1 KiB: under rxm's 16 KiB eager limit, injected or sent whole) and large
/// ones (3 MiB: the netmod's RMA-read protocol; the receiver reads them over its own
/// connection, so each proxy carries one direction's messages and the other's reads).
const EAGER: Traffic = Traffic {
    count: 100,
    len: 1024,
};
const LARGE: Traffic = Traffic {
    count: 3,
    len: 3 << 20,
};

/// What one case saw.
#[derive(Debug, Default)]
struct Outcome {
    /// Messages received whole, per direction (0→1, 1→0).
    whole: [u32; 2],
    /// Requests that failed, by kind.
    peer_failed: u32,
    transport: u32,
    /// Receives that completed after an earlier one of the same direction had failed.
    after_a_gap: u32,
    /// Requests still waiting at the end (sends and receives).
    waiting: u32,
    /// Messages whose send completed without error and whose receive still waits, per
    /// direction: given up by the transport while the sender was told all was well.
    sent_not_received: [u32; 2],
    /// Messages whose send completed without error and whose receive failed, per direction
    /// (a large receive whose read failed other than by `PeerFailed` still acknowledges).
    sent_but_receive_failed: [u32; 2],
    /// With [`Wait::ObserveThenSend`]: whether a fresh message sent each way after the
    /// window arrived within [`AFTER`].
    fresh_arrived: Option<[bool; 2]>,
    /// With [`Wait::ObserveThenFollow`]: per direction, the message whose (waiting) receive
    /// the following message completed.
    taken_by_the_next: [Option<u32>; 2],
    /// Connections the proxies accepted.
    accepted: u64,
    /// Whether a proxy cut.
    cut: bool,
}

/// How long a case waits for its requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// Until every request ended; one still waiting after [`bound`] fails the case.
    AllEnd,
    /// At most this long; requests still waiting then are counted, not failed.
    Observe(Duration),
    /// As `Observe`, then a fresh message each way (tag 9): does the connection carry
    /// traffic again?
    ObserveThenSend(Duration),
    /// As `Observe`, then one more message each way on the traffic's own tag (message number
    /// `count`): a receive still waiting for a lost message takes it, if the connection
    /// carries traffic again — the loss then shows as a receive holding a later message.
    ObserveThenFollow(Duration),
}

/// How long a fresh message after a cut may take.
const AFTER: Duration = Duration::from_secs(2);

/// Runs `traffic` through proxies that behave as `plans`; checks every request that ended
/// (completed with its own message, in order, or failed with `PeerFailed` or `Transport`) and
/// that nothing arrived twice, and returns what happened. `what` names the case (with its
/// seed) in failures.
fn run(plans: [Plan; 2], traffic: Traffic, wait: Wait, what: &str) -> Option<Outcome> {
    // Declared before the job, so that they outlive every receive posted into them: the
    // devices (and their endpoints, which end every operation) are dropped first.
    let mut got: [Vec<Vec<u8>>; 2] =
        [0, 1].map(|_| vec![vec![0xEE; traffic.len]; traffic.count as usize]);
    let (mut h, proxies) = job_through_proxies(plans)?;
    let sent: [Vec<Vec<u8>>; 2] = [0, 1].map(|from| {
        (0..traffic.count)
            .map(|i| message(from, i, traffic.len))
            .collect()
    });
    // (device, request, direction, message, is a receive)
    let mut reqs: Vec<(usize, ReqHandle, usize, u32, bool)> = Vec::new();
    for i in 0..traffic.count {
        for from in [0usize, 1] {
            let to = 1 - from;
            let tag = 5 + from as i32;
            let w = h[from].world();
            let s = h[from]
                .isend(
                    w,
                    to as i32,
                    tag,
                    SendBuf::owned(sent[from][i as usize].clone()),
                    Traffic::mode(i),
                )
                .unwrap_or_else(|e| panic!("{what}: isend: {e}"));
            let w = h[to].world();
            let buf: *mut [u8] = got[from][i as usize].as_mut_slice();
            // SAFETY: `got` outlives the devices (declared first), and is read only after
            // every request completed.
            let r = h[to]
                .irecv(w, from as i32, tag, unsafe { RecvBuf::borrowed(&mut *buf) })
                .unwrap_or_else(|e| panic!("{what}: irecv: {e}"));
            reqs.push((from, s, from, i, false));
            reqs.push((to, r, from, i, true));
        }
    }
    let started = Instant::now();
    let window = match wait {
        Wait::AllEnd => bound(),
        Wait::Observe(d) | Wait::ObserveThenSend(d) | Wait::ObserveThenFollow(d) => d,
    };
    let mut done = vec![false; reqs.len()];
    while !done.iter().all(|&d| d) && started.elapsed() < window {
        let mut idle = [false; 2];
        for (d, idle) in idle.iter_mut().enumerate() {
            *idle = h[d]
                .progress()
                .unwrap_or_else(|e| panic!("{what}: progress failed: {e}"))
                == 0;
        }
        for (k, &(dev, r, ..)) in reqs.iter().enumerate() {
            // As `Harness::drive_until_done`: a request whose peer is gone fails once its
            // device found nothing to do.
            done[k] =
                done[k] || h[dev].is_done(r).unwrap() || (idle[dev] && h[dev].fail_if_peer_gone(r));
        }
    }
    let took = started.elapsed();
    // The requests that ended, taken; `None`: still waiting (left to the device's drop).
    let ended: Vec<Option<Status>> = reqs
        .iter()
        .zip(&done)
        .map(|(&(dev, r, ..), &d)| d.then(|| h[dev].test_status(r).unwrap().unwrap()))
        .collect();
    let summary = pending_summary(&reqs, &ended);
    let mut out = Outcome::default();
    let mut failed_yet = [false; 2];
    let mut waiting_yet = [None; 2];
    for (&(_, _, dir, i, is_recv), st) in reqs.iter().zip(&ended) {
        let Some(st) = st else {
            out.waiting += 1;
            if is_recv {
                waiting_yet[dir].get_or_insert(i);
            }
            continue;
        };
        match st.error {
            None => {}
            Some(ErrorKind::PeerFailed) => out.peer_failed += 1,
            Some(ErrorKind::Transport) => out.transport += 1,
            Some(other) => panic!("{what}: message {i} {dir}→{}: {other:?} ({st:?})", 1 - dir),
        }
        if !is_recv {
            continue;
        }
        match st.error {
            None => {
                assert_eq!(
                    st.bytes,
                    traffic.len,
                    "{what}: message {i} {dir}→{}",
                    1 - dir
                );
                check_arrival(what, &got[dir][i as usize], &sent[dir][i as usize], traffic);
                // An eager message is complete once matched, and matched in order: one that
                // arrived while an earlier one of its direction still waits overtook it, or
                // that one was lost.
                if let (Some(w), true) = (waiting_yet[dir], traffic.len <= 4096) {
                    panic!(
                        "{what}: message {i} {dir}→{} arrived while message {w} still waits: \
                         lost or out of order ({summary})",
                        1 - dir
                    );
                }
                if failed_yet[dir] {
                    out.after_a_gap += 1;
                }
                out.whole[dir] += 1;
            }
            Some(_) => failed_yet[dir] = true,
        }
    }
    for (k, &(_, _, dir, i, is_recv)) in reqs.iter().enumerate() {
        let ok = |st: &Option<Status>| st.is_some_and(|st| st.error.is_none());
        // A message's send comes just before its receive in `reqs`.
        if !is_recv && ok(&ended[k]) {
            debug_assert_eq!(reqs[k + 1].3, i);
            match ended[k + 1] {
                None => out.sent_not_received[dir] += 1,
                Some(Status { error: Some(_), .. }) => out.sent_but_receive_failed[dir] += 1,
                Some(_) => {}
            }
        }
    }
    if wait == Wait::ObserveThenSend(window) {
        let mut fresh = Vec::new();
        for from in [0usize, 1] {
            let to = 1 - from;
            let w = h[from].world();
            let s = h[from]
                .isend(
                    w,
                    to as i32,
                    9,
                    SendBuf::owned(vec![from as u8; 8]),
                    SendMode::Standard,
                )
                .map_err(|e| eprintln!("{what}: fresh isend {from}→{to}: {e}"))
                .ok();
            let w = h[to].world();
            let r = h[to]
                .irecv(w, from as i32, 9, RecvBuf::owned(8))
                .map_err(|e| eprintln!("{what}: fresh irecv {from}→{to}: {e}"))
                .ok();
            fresh.push((from, s, to, r));
        }
        let until = Instant::now() + AFTER;
        let mut arrived = [false; 2];
        while Instant::now() < until && !arrived.iter().all(|&a| a) {
            let _ = h.step();
            for &(from, _, to, r) in &fresh {
                if let Some(r) = r {
                    arrived[from] = arrived[from] || h[to].is_done(r).unwrap_or(false);
                }
            }
        }
        for &(from, _, to, r) in &fresh {
            if let (true, Some(r)) = (arrived[from], r) {
                let st = h[to].test_status(r).unwrap().unwrap();
                arrived[from] = st.error.is_none();
            }
        }
        out.fresh_arrived = Some(arrived);
    }
    if wait == Wait::ObserveThenFollow(window) {
        let mut watch = Vec::new();
        for from in [0usize, 1] {
            let to = 1 - from;
            let w = h[from].world();
            let tag = 5 + from as i32;
            // The first receive of this direction still waiting, if one is: it will take
            // the next message if the earlier ones are gone.
            let Some(k) = reqs
                .iter()
                .zip(&ended)
                .position(|(r, st)| r.2 == from && r.4 && st.is_none())
            else {
                continue;
            };
            watch.push(k);
            let next = message(from, traffic.count, traffic.len);
            if let Err(e) =
                h[from].isend(w, to as i32, tag, SendBuf::owned(next), SendMode::Standard)
            {
                eprintln!("{what}: the next message {from}→{to}: {e}");
            }
        }
        let until = Instant::now() + AFTER;
        while Instant::now() < until && !watch.is_empty() {
            let _ = h.step();
            watch.retain(|&k| {
                let (dev, r, dir, i, _) = reqs[k];
                if !h[dev].is_done(r).unwrap_or(false) {
                    return true;
                }
                let st = h[dev].test_status(r).unwrap().unwrap();
                let m = &got[dir][i as usize];
                if st.error.is_none() && m[..5] == message(dir, traffic.count, 8)[..5] {
                    out.taken_by_the_next[dir] = Some(i);
                }
                false
            });
        }
    }
    // Nothing left over to arrive twice (give stragglers a moment): every message has a
    // receive posted for it, so an unexpected one is a repeat.
    let settle = Instant::now() + Duration::from_millis(100);
    while Instant::now() < settle {
        let _ = h.step();
    }
    for d in [0, 1] {
        let w = h[d].world();
        let left = h[d].iprobe(w, (1 - d) as i32, ANY_TAG);
        assert!(
            left.as_ref().map_or(true, Option::is_none),
            "{what}: a message was left over at rank {d}: {left:?}"
        );
    }
    out.accepted = proxies.iter().map(Proxy::accepted).sum();
    out.cut = proxies.iter().any(|p| p.cut_at().is_some());
    let forwarded = proxies.each_ref().map(Proxy::forwarded);
    if wait == Wait::AllEnd && out.waiting > 0 {
        panic!(
            "{what}: requests still waiting after {took:?}: {summary}; forwarded \
             {forwarded:?} B, {} connections accepted",
            out.accepted
        );
    }
    eprintln!("{what}: after {took:?}: {summary}; forwarded {forwarded:?} B, {out:?}");
    Some(out)
}

/// Checks that a completed receive holds the message sent for it.
fn check_arrival(what: &str, got: &[u8], sent: &[u8], traffic: Traffic) {
    if got != sent {
        let n = u32::from_le_bytes([got[0], got[1], got[2], got[3]]);
        let (i, from) = (
            u32::from_le_bytes([sent[0], sent[1], sent[2], sent[3]]),
            sent[4],
        );
        panic!(
            "{what}: the receive for message {i} from {from} holds {}: lost, repeated or out \
             of order",
            if n < traffic.count && got[4] < 2 {
                format!("message {n} from {}", got[4])
            } else {
                "no message (damaged data)".to_string()
            }
        );
    }
}

/// Which requests of a case completed, failed or still wait (`ended[k]` is `None`), by
/// direction and kind, with the first error of each.
fn pending_summary(
    reqs: &[(usize, ReqHandle, usize, u32, bool)],
    ended: &[Option<Status>],
) -> String {
    let mut parts = Vec::new();
    for dir in [0usize, 1] {
        for is_recv in [false, true] {
            let (mut ok, mut failed, mut waiting) = (0, Vec::new(), Vec::new());
            for (&(_, _, d, i, recv), st) in reqs.iter().zip(ended) {
                if d != dir || recv != is_recv {
                    continue;
                }
                match st {
                    None => waiting.push(i),
                    Some(Status { error: None, .. }) => ok += 1,
                    Some(Status { error: Some(e), .. }) => failed.push(*e),
                }
            }
            let first = waiting
                .first()
                .map_or(String::new(), |f| format!(" (from {f})"));
            parts.push(format!(
                "{} {}→{}: {ok} ok, {} failed{}, {} waiting{first}",
                if is_recv { "receives" } else { "sends" },
                dir,
                1 - dir,
                failed.len(),
                failed
                    .first()
                    .map_or(String::new(), |e| format!(" ({e:?})")),
                waiting.len()
            ));
        }
    }
    parts.join("; ")
}

/// Runs `case`, turning a panic (a failed check, or the harness giving up after [`bound`])
/// into one that names the case and its seed.
fn named(what: &str, case: impl FnOnce() -> Option<Outcome>) -> Option<Outcome> {
    eprintln!("{what}: starting");
    match catch_unwind(AssertUnwindSafe(case)) {
        Ok(o) => o,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            if msg.contains(what) {
                std::panic::resume_unwind(p)
            }
            panic!("{what}: {msg}")
        }
    }
}

/// The two proxies' budgets for `seed`: each carries about half of the traffic (one
/// direction's messages, the other's reads), so each cuts somewhere in its half.
fn budgets(seed: u64, traffic: Traffic) -> [u64; 2] {
    let mut rng = SplitMix64::new(seed);
    [0, 1].map(|_| rng.below(traffic.total() / 2 + 400))
}

fn cut_case(seed: u64, cut: Cut, reopen: bool, traffic: Traffic, wait: Wait) -> Option<Outcome> {
    let b = budgets(seed, traffic);
    let what = format!(
        "{cut:?}{} after {b:?} B of 2x{}x{} B, seed {seed} (replay: FAULT_SEED={seed})",
        if reopen { " then reconnectable" } else { "" },
        traffic.count,
        traffic.len
    );
    let plans = b.map(|budget| Plan {
        reopen,
        ..Plan::cut(budget, cut)
    });
    named(&what, || run(plans, traffic, wait, &what))
}

/// Every cut of a case: reset or dropped, the peer then unreachable or reachable again.
const CUTS: [(Cut, bool); 4] = [
    (Cut::Reset, false),
    (Cut::Drop, false),
    (Cut::Reset, true),
    (Cut::Drop, true),
];

/// The check is not vacuous: uncut, the proxies carry everything, whole and in order.
#[test]
fn the_proxies_carry_the_traffic_uncut() {
    for traffic in [EAGER, LARGE] {
        let plans = [Plan::cut(u64::MAX, Cut::Reset); 2];
        let Some(o) = named("no cut", || run(plans, traffic, Wait::AllEnd, "no cut")) else {
            return;
        };
        assert_eq!(o.whole, [traffic.count; 2], "{o:?}");
        assert!(o.accepted >= 2, "both ranks' connections: {o:?}");
    }
}

/// What the netmod does deliver when a connection breaks is right — every receive that
/// completed holds its own message, eager ones in order, nothing arrives twice, every error
/// is `PeerFailed` or `Transport` — though not everything ends (see the ignored tests below):
/// each case watches for 1 s. Seeds: `FAULT_SEEDS` (default 1), each with every cut of
/// [`CUTS`], eager and large.
#[test]
fn a_cut_connection_delivers_nothing_wrong() {
    for seed in testkit::fault_seeds(1) {
        for (cut, reopen) in CUTS {
            for traffic in [EAGER, LARGE] {
                let wait = Wait::Observe(Duration::from_secs(1));
                if cut_case(seed, cut, reopen, traffic, wait).is_none() {
                    return;
                }
            }
        }
    }
}

/// The bar of `netmod-tcp/tests/faults.rs`: every request ends (completes or fails) within
/// the bound. Over `tcp;ofi_rxm` it does not: a receive whose message was lost with the
/// connection waits for ever (rxm reports no error for it, and the launcher's peer events,
/// the netmod's only failure detector, report dead processes, not broken connections); a
/// large send waits for ever for its receiver's acknowledgement; a synchronous send for its
/// match. With the peer reachable again (rxm reconnects) the messages lost with the old
/// connection stay lost, their standard sends completed without error. Ignored, and failing
/// when run (`-- --ignored`): the reproducers for whoever closes it (docs/hardening/faults.md).
#[test]
#[ignore = "open: over tcp;ofi_rxm a broken connection leaves requests waiting for ever"]
fn a_reset_connection_ends_every_request_within_a_bound() {
    for seed in seeds() {
        cut_case(seed, Cut::Reset, false, EAGER, Wait::AllEnd);
        cut_case(seed, Cut::Reset, false, LARGE, Wait::AllEnd);
    }
}

#[test]
#[ignore = "open: over tcp;ofi_rxm a broken connection leaves requests waiting for ever"]
fn a_dropped_connection_ends_every_request_within_a_bound() {
    for seed in seeds() {
        cut_case(seed, Cut::Drop, false, EAGER, Wait::AllEnd);
        cut_case(seed, Cut::Drop, false, LARGE, Wait::AllEnd);
    }
}

#[test]
#[ignore = "open: over tcp;ofi_rxm messages lost with a connection stay lost after rxm reconnects"]
fn a_connection_cut_once_ends_every_request_within_a_bound() {
    for seed in seeds() {
        for cut in [Cut::Reset, Cut::Drop] {
            cut_case(seed, cut, true, EAGER, Wait::AllEnd);
            cut_case(seed, cut, true, LARGE, Wait::AllEnd);
        }
    }
}

/// A slow, fragmented wire: each proxy forwards in seeded pieces (up to 700 B for the eager
/// traffic, 8 KiB for the large) with pauses of up to 300 µs after a quarter of them; no cut.
/// Everything arrives, whole and in order.
#[test]
fn a_slow_fragmented_wire_delivers_everything_in_order() {
    for seed in seeds() {
        for traffic in [EAGER, LARGE] {
            let plans = [0, 1].map(|r| Plan {
                fragment: Some(Fragment {
                    seed: seed * 2 + r,
                    max_piece: if traffic.len > 4096 { 8192 } else { 700 },
                    max_pause: Duration::from_micros(300),
                }),
                ..Plan::cut(u64::MAX, Cut::Reset)
            });
            let what = format!(
                "fragmented 2x{}x{} B, seed {seed} (replay: FAULT_SEED={seed})",
                traffic.count, traffic.len
            );
            let Some(o) = named(&what, || run(plans, traffic, Wait::AllEnd, &what)) else {
                return;
            };
            assert_eq!(o.whole, [traffic.count; 2], "{what}: {o:?}");
        }
    }
}

/// Every cut of every seed watched for `FAULT_BOUND_SECS` (default 10), one line each
/// (`--ignored --nocapture`, with `FAULT_SEEDS`): the figures of docs/hardening/faults.md.
#[test]
#[ignore = "a survey: prints one line a case"]
fn survey() {
    let mut lines = Vec::new();
    for seed in seeds() {
        for (cut, reopen) in CUTS {
            for traffic in [EAGER, LARGE] {
                let r = catch_unwind(AssertUnwindSafe(|| {
                    cut_case(seed, cut, reopen, traffic, Wait::ObserveThenSend(bound()))
                }));
                let line = match r {
                    Ok(o) => format!("ran {o:?}"),
                    Err(p) => format!(
                        "FAILED {}",
                        p.downcast_ref::<String>().cloned().unwrap_or_default()
                    ),
                };
                lines.push(format!(
                    "seed {seed} {cut:?} reopen={reopen} {}x{}: {line}",
                    traffic.count, traffic.len
                ));
            }
        }
    }
    for l in lines {
        eprintln!("SURVEY {l}");
    }
}

/// The loss in plain sight: after a cut the peer is reachable again and rxm reconnects, and
/// one more message on the traffic's tag completes the receive that waited for an earlier
/// message — one whose standard send had completed without error. MPI's order (and the
/// message) are lost without an error anywhere. Fails when run (`-- --ignored`).
#[test]
#[ignore = "open: over tcp;ofi_rxm a reconnected pair skips the messages lost with the old connection"]
fn after_a_reconnection_no_later_message_takes_a_lost_ones_receive() {
    for seed in seeds() {
        for cut in [Cut::Reset, Cut::Drop] {
            let wait = Wait::ObserveThenFollow(Duration::from_secs(1));
            if let Some(o) = cut_case(seed, cut, true, EAGER, wait) {
                assert_eq!(
                    o.taken_by_the_next, [None; 2],
                    "{cut:?}, seed {seed} (replay: FAULT_SEED={seed}): the receive of this \
                     message (per direction) took the next message instead: {o:?}"
                );
            }
        }
    }
}

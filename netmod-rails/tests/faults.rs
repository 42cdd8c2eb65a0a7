//! A rail lost mid-transfer: two ranks joined by two TCP rails on loopback, the second through a
//! proxy (`testkit::Proxy`) that resets or drops its connection after a seeded number of bytes
//! while a large message is striped over both. Rails do not move a lost rail's pieces to the
//! other (which bytes of a broken TCP connection arrived is unknowable), so the transfer either
//! completes whole (the cut came after its last piece) or fails with `PeerFailed` at both ends,
//! within a bound — never a hang, never a message that completes damaged — and the peer stays
//! failed to later operations.
//!
//! The cut points come from seeds: `0..FAULT_SEEDS` (default 2), or the one `FAULT_SEED`
//! names; a failure prints its seed.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use ch4_core::bootstrap::Bootstrap;
use ch4_core::buffer::{RecvBuf, SendBuf};
use ch4_core::core::DeviceConfig;
use ch4_core::{AmTransport, ErrorKind, NoShm, PeerState, SendMode};
use netmod_rails::{Rails, TcpRails};
use netmod_tcp::TcpNetmod;
use testkit::{Cut, Harness, Limit, Proxy, SplitMix64};

/// The message striped over both rails: 8 MiB, sixteen 512 KiB pieces.
const LEN: usize = 8 << 20;

/// How long after the cut both ends must have ended.
/// Milliseconds when unloaded; the margin is for a host shared with other builds (at a load
/// average of 65 a check took 2.05 s).
const DETECTED_WITHIN: Duration = Duration::from_secs(5);

/// Two ranks over two rails; each rank reaches the other's second rail through a proxy that
/// cuts after `budget` bytes as `cut` says.
fn rails_job(budget: u64, cut: Cut) -> (Harness<TcpRails, NoShm>, [Proxy; 2]) {
    let loopback = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
    let mut rails: Vec<TcpRails> = (0..2)
        .map(|me| {
            let rail = |name: &str| {
                let net = TcpNetmod::bind(me, 2, 0x7a11, loopback).unwrap();
                (net, name.to_string(), 1)
            };
            Rails::new(vec![rail("first"), rail("second")]).unwrap()
        })
        .collect();
    let cards: Vec<Vec<u8>> = rails.iter().map(|r| r.business_card().unwrap()).collect();
    for r in &mut rails {
        r.learn_cards(&cards).unwrap();
    }
    let second = |r: &mut TcpRails| -> SocketAddr {
        r.each_mut().nth(1).expect("a second rail").local_addr()
    };
    let targets = [second(&mut rails[0]), second(&mut rails[1])];
    let proxies = targets.map(|to| Proxy::start(to, budget, cut));
    for (me, r) in rails.iter_mut().enumerate() {
        let peer = 1 - me;
        let rail = r.each_mut().nth(1).expect("a second rail");
        rail.set_address(peer as u32, proxies[peer].addr).unwrap();
    }
    let mut rails = rails.into_iter();
    let h = Harness::build(2, DeviceConfig::default(), |_| {
        Ok((rails.next().expect("two ranks"), NoShm))
    })
    .unwrap();
    (h.with_limit(Limit::time(Duration::from_secs(10))), proxies)
}

/// The seeds: `FAULT_SEED` alone, else `0..FAULT_SEEDS` (default 2).
fn seeds() -> Vec<u64> {
    testkit::fault_seeds(2)
}

/// Sends one striped message with the second rail cut after `budget` bytes; checks the
/// outcome (see the module documentation); returns whether the message arrived whole and the
/// bytes each rail carried at the sender.
fn lose_a_rail(budget: u64, cut: Cut, what: &str) -> (bool, Vec<u64>) {
    let (mut h, proxies) = rails_job(budget, cut);
    // Open the primary first, so that the cut lands in the striped data.
    h.pass(0, 1, 1, b"hello").unwrap();
    let data: Vec<u8> = (0..LEN).map(|i| (i % 251) as u8).collect();
    let mut got = vec![0u8; LEN];
    let (w0, w1) = (h[0].world(), h[1].world());
    let s = h[0]
        .isend(w0, 1, 2, SendBuf::owned(data.clone()), SendMode::Standard)
        .unwrap();
    // SAFETY: the receive is completed below, before `got` is read or dropped.
    let r = h[1]
        .irecv(w1, 0, 2, unsafe { RecvBuf::borrowed(&mut got) })
        .unwrap();
    if let Err(e) = h.drive_until_done(&[(0, s), (1, r)]) {
        panic!("{what}: progress failed: {e}");
    }
    let ended = Instant::now();
    let send = h[0].wait_status(s).unwrap();
    let recv = h[1].wait_status(r).unwrap();
    let carried = h[0].netmod().carried().to_vec();
    for st in [send, recv] {
        assert!(
            matches!(st.error, None | Some(ErrorKind::PeerFailed)),
            "{what}: {st:?}"
        );
    }
    let whole = recv.error.is_none();
    if whole {
        assert_eq!(recv.bytes, LEN, "{what}");
        assert!(got == data, "{what}: the message completed damaged");
    } else {
        let cut_at = proxies
            .iter()
            .filter_map(Proxy::cut_at)
            .min()
            .unwrap_or_else(|| panic!("{what}: the transfer failed but nothing was cut"));
        let took = ended.saturating_duration_since(cut_at);
        assert!(
            took < DETECTED_WITHIN,
            "{what}: the failure took {took:?} to show"
        );
        // Rank 1 saw the cut first (its receive failed); rank 0's own leg of the cut rail
        // reports the reset when its kernel has it and rank 0 polls: wait for that (a send
        // before it goes out over the healthy primary, as it may while no one knows).
        let deadline = Instant::now() + DETECTED_WITHIN;
        while h[0].netmod().peer_state(1) == PeerState::Alive {
            assert!(
                Instant::now() < deadline,
                "{what}: rank 0 never saw its rail cut"
            );
            h.step().unwrap();
        }
        // The peer stays failed: later operations fail at once, also over the primary.
        let e = h[0]
            .send(w0, 1, 3, b"after", SendMode::Standard)
            .expect_err("a send to a peer that lost a rail");
        assert_eq!(e.kind(), ErrorKind::PeerFailed, "{what}: {e}");
        let mut b = [0u8; 8];
        let e = h[1].recv(w1, 0, 3, &mut b).expect_err("a receive from it");
        assert_eq!(e.kind(), ErrorKind::PeerFailed, "{what}: {e}");
    }
    eprintln!(
        "{what}: {} after the second rail cut ({} B forwarded); carried {carried:?}",
        if whole { "whole" } else { "failed" },
        proxies.iter().map(Proxy::forwarded).sum::<u64>()
    );
    (whole, carried)
}

#[test]
fn a_rail_reset_mid_transfer_fails_the_transfer_at_both_ends() {
    for seed in seeds() {
        // Somewhere in the second rail's half of the data.
        let budget = SplitMix64::new(seed).below(LEN as u64 / 2);
        let what = format!("rail reset after {budget} B, seed {seed} (replay: FAULT_SEED={seed})");
        lose_a_rail(budget, Cut::Reset, &what);
    }
}

#[test]
fn a_rail_dropped_mid_transfer_fails_the_transfer_at_both_ends() {
    for seed in seeds() {
        let budget = SplitMix64::new(seed).below(LEN as u64 / 2);
        let what =
            format!("rail dropped after {budget} B, seed {seed} (replay: FAULT_SEED={seed})");
        lose_a_rail(budget, Cut::Drop, &what);
    }
}

/// Not vacuous: uncut, the message is striped over both rails and arrives whole; cut in the
/// middle of the second rail's share, it fails.
#[test]
fn the_message_is_striped_and_a_cut_in_its_middle_fails_it() {
    let (whole, carried) = lose_a_rail(u64::MAX, Cut::Reset, "no cut");
    assert!(whole);
    assert!(carried.iter().all(|&c| c > 0), "not striped: {carried:?}");
    let (whole, _) = lose_a_rail(LEN as u64 / 4, Cut::Reset, "a cut halfway");
    assert!(!whole);
}

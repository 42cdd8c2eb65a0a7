//! Rails: TCP over several addresses at once (`CH4_RAILS`, or `Threads::rails`). On one machine
//! two loopback addresses make two real rails: rendezvous data is striped over both in the
//! weights' proportion and lands whole, envelopes keep their order on the first, and a peer that
//! publishes one rail is reached by that one alone. (The pt2pt semantics suite runs over two
//! rails too: its `tcp_rails` variants. Two hosts in network namespaces joined by two rate-limited
//! links measure the bandwidth: `scripts/rails-bandwidth.sh`.)
#![cfg(all(feature = "tcp", not(any(feature = "ofi", feature = "ucx"))))]

mod common;

use ch4::threads::Threads;
use ch4::{Context, Result};
use common::jobs::{as_rank, finished, succeeded, test_as_ranks};
use netmod_rails::TcpRails;

/// Bytes of a large message (rendezvous, many pieces) and of the pieces.
const LARGE: usize = 8 << 20;
const PIECE: usize = 256 << 10;

fn pattern(seed: usize, n: usize) -> Vec<u8> {
    (0..n).map(|i| (i.wrapping_mul(31) ^ seed) as u8).collect()
}

/// Rank 0 sends `LARGE` bytes then a small message with the same tag; rank 1 posts both
/// receives at once: the first gets the large one whole (the small one's envelope, on the
/// primary, cannot overtake the large one's), the second the small one. Returns what each
/// rail carried at rank 0.
fn large_then_small(ctx: Context<TcpRails, ch4::SelectedShm>) -> Result<Vec<u64>> {
    let w = ctx.world();
    if w.rank() == 0 {
        let large = pattern(7, LARGE);
        let small = pattern(9, 100);
        ctx.scope(|s| {
            let a = w.isend(s, &large, 1, 3)?;
            let b = w.isend(s, &small, 1, 3)?;
            s.wait_all(vec![a, b]).map(drop)
        })?;
    } else {
        let mut first = vec![0u8; LARGE];
        let mut second = vec![0u8; LARGE];
        let st = ctx.scope(|s| {
            let a = w.irecv(s, &mut first, 0, 3)?;
            let b = w.irecv(s, &mut second, 0, 3)?;
            s.wait_all(vec![a, b])
        })?;
        assert_eq!((st[0].bytes, st[1].bytes), (LARGE, 100));
        assert!(
            first == pattern(7, LARGE),
            "the large message arrived whole"
        );
        assert_eq!(&second[..100], &pattern(9, 100)[..]);
    }
    w.barrier()?;
    let carried = ctx.device()?.netmod().carried().to_vec();
    Ok(carried)
}

fn two_rails(rails: &str) -> Vec<Vec<u64>> {
    Threads::new(2)
        .ranks_per_node(1)
        .max_payload(PIECE)
        .rails(rails)
        .run_with::<TcpRails, _, _>(large_then_small)
        .unwrap()
}

#[test]
fn large_messages_are_striped_over_both_rails_and_land_whole() {
    let carried = &two_rails("127.0.0.1,127.0.0.2")[0];
    assert_eq!(carried.len(), 2);
    assert!(
        carried[0] > 0 && carried[1] > 0,
        "both rails carried data: {carried:?}"
    );
    assert_eq!(carried.iter().sum::<u64>(), LARGE as u64, "{carried:?}");
}

#[test]
fn the_weights_set_each_rails_share() {
    let carried = &two_rails("127.0.0.1@3,127.0.0.2@1")[0];
    // Each piece goes where the least was carried for the weight: within a piece of 3:1.
    let want = (LARGE / 4) as u64;
    assert!(
        carried[1].abs_diff(want) <= PIECE as u64,
        "rail 2 carried a quarter: {carried:?}"
    );
}

#[test]
fn a_peer_with_one_rail_is_reached_by_that_one_alone() {
    // Rank 1 lists one rail: rank 0's second rail has no partner there.
    let rails: Vec<Vec<u64>> = Threads::new(2)
        .ranks_per_node(1)
        .max_payload(PIECE)
        .rails("127.0.0.1,127.0.0.2")
        .run_with::<TcpRails, _, _>(|ctx| {
            let w = ctx.world();
            let reach = ctx.device()?.netmod().reaching(1 - w.rank() as u32);
            let count = ctx.device()?.netmod().count();
            Ok(vec![reach as u64, count as u64])
        })
        .unwrap();
    assert_eq!(rails, [vec![2, 2], vec![2, 2]]);
    let one = ch4::threads::Threads::new(2)
        .ranks_per_node(1)
        .rails("127.0.0.1")
        .run_with::<TcpRails, _, _>(|ctx| {
            let w = ctx.world();
            Ok(ctx.device()?.netmod().reaching(1 - w.rank() as u32))
        })
        .unwrap();
    assert_eq!(one, [1, 1]);
}

#[test]
fn a_rail_that_is_not_here_stops_the_start_naming_it() {
    let e = Threads::new(2)
        .ranks_per_node(1)
        .rails("127.0.0.1,no-such-if0")
        .run_with::<TcpRails, _, _>(|_ctx| Ok(()))
        .unwrap_err();
    assert!(e.to_string().contains("no-such-if0"), "{e}");
    let e = Threads::new(2)
        .ranks_per_node(1)
        .rails("127.0.0.1,,")
        .run_with::<TcpRails, _, _>(|_ctx| Ok(()))
        .unwrap_err();
    assert!(e.to_string().contains("CH4_RAILS"), "{e}");
}

/// Processes under `ch4run`, each its own node, with `CH4_RAILS` in the environment: the rails
/// stripe between processes as between threads.
#[test]
fn processes_stripe_over_the_rails_ch4_rails_names() {
    let child = test_as_ranks(
        "rank",
        2,
        &[
            ("CH4_NODE_SIZE", "1"),
            ("CH4_RAILS", "127.0.0.1,127.0.0.2"),
            ("CH4_TCP_PIECE_SIZE", "256K"),
        ],
    );
    succeeded(finished(child, "two processes over two rails"));
}

#[test]
#[ignore = "one rank of processes_stripe_over_the_rails_ch4_rails_names"]
fn rank() {
    as_rank(|ctx| {
        let carried = large_then_small(ctx)?;
        assert_eq!(carried.len(), 2);
        if carried.iter().sum::<u64>() > 0 {
            assert!(
                carried.iter().all(|&c| c > 0),
                "both rails carried data: {carried:?}"
            );
        }
        Ok(())
    });
}

/// Bandwidth of the OSU program between two hosts (network namespaces) joined by two links of
/// the same rate, over the first link alone and over both: 4 MiB messages read at least 1.7x
/// with two rails. Best of two interleaved rounds each (the links set the rate, not the CPU).
#[test]
fn two_rails_carry_at_least_1_7x_one_between_two_hosts() {
    let test = "rails: two_rails_carry_at_least_1_7x_one_between_two_hosts";
    let Some(hosts) = common::hosts::TwoHosts::up(test) else {
        return;
    };
    let bw = common::jobs::built().join("examples/osu_bw");
    let run = |rails: usize| -> f64 {
        let mut cmd = hosts.hydra(1, 1);
        cmd.arg(&bw)
            .args(["-m", "4194304:4194304", "-i", "2", "-x", "1", "-W", "8"])
            .env("CH4_RAILS", hosts.rails(rails));
        let child = cmd.spawn().expect("start mpiexec.hydra");
        succeeded(finished(child, &format!("osu_bw over {rails} rail(s)")));
        let out = hosts.outputs(2).concat();
        out.lines()
            .find_map(|l| {
                let mut f = l.split_whitespace();
                (f.next() == Some("4194304")).then(|| f.next()?.parse().ok())?
            })
            .unwrap_or_else(|| panic!("no 4 MiB row in osu_bw's output:\n{out}"))
    };
    let (mut one, mut two) = (0f64, 0f64);
    for _ in 0..2 {
        one = one.max(run(1));
        two = two.max(run(2));
    }
    eprintln!(
        "osu_bw 4 MiB: one rail {one:.2} MB/s, two rails {two:.2} MB/s ({:.2}x)",
        two / one
    );
    assert!(
        two >= 1.7 * one,
        "two rails {two:.2} MB/s against one {one:.2}"
    );
}

/// A rail that breaks between two peers fails them to each other: the next large message, whose
/// pieces would cross it, ends with `PeerFailed` at both ends instead of waiting for pieces
/// that cannot come. (The rail's connections are reset with `ss -K`, as a dying link or switch
/// port would; the second rail is 127.0.0.3, which no other test uses.)
#[test]
fn a_broken_rail_fails_its_peer_instead_of_hanging() {
    if !testkit::skip::on_path(
        "ss",
        "rails: a_broken_rail_fails_its_peer",
        "install iproute2",
    ) {
        return;
    }
    let outcome = Threads::new(2)
        .ranks_per_node(1)
        .max_payload(PIECE)
        .rails("127.0.0.1,127.0.0.3")
        .run_with::<TcpRails, _, _>(|ctx| {
            let w = ctx.world();
            let peer = 1 - w.rank();
            let data = pattern(1, LARGE);
            let mut buf = vec![0u8; LARGE];
            // A first exchange connects both rails.
            if w.rank() == 0 {
                w.send(&data, peer, 0)?;
            } else {
                w.recv(&mut buf, peer, 0)?;
            }
            w.barrier()?;
            if w.rank() == 0 {
                let killed = std::process::Command::new("ss")
                    .args(["-K", "state", "established", "dst", "127.0.0.3"])
                    .output()
                    .map_err(|e| ch4::Error::new(ch4::ErrorKind::Transport, e.to_string()))?;
                assert!(killed.status.success(), "ss -K: {killed:?}");
            }
            let second = if w.rank() == 0 {
                w.send(&data, peer, 1).map(drop)
            } else {
                w.recv(&mut buf, peer, 1).map(drop)
            };
            Ok(second.map_err(|e| (e.kind(), e.to_string())))
        })
        .unwrap();
    for (rank, o) in outcome.iter().enumerate() {
        let (kind, why) = o.clone().expect_err("the second message fails");
        eprintln!("rank {rank}: {why}");
        assert_eq!(kind, ch4::ErrorKind::PeerFailed, "rank {rank}: {why}");
    }
}

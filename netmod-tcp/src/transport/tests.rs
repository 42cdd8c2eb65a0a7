//! The TCP netmod over loopback, ranks as netmods stepped by threads or by one thread.

use super::connect::{
    HelloMsg, ACCEPTED, ANSWER, ANSWER_MAGIC, DUPLICATE, REFUSED, WRONG_BYTE_ORDER,
};
use super::*;
use std::io::{Read, Write};
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
    let hello = HelloMsg {
        key: 8,
        rank: 0,
        generation: 0,
        same_byte_order: true,
    };
    wrong.write_all(&hello.encode()).unwrap();
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
fn payloads_from_every_offset_in_a_page_arrive_whole() {
    // Padded frames (placed clear of 4 KiB aliasing) and unpadded ones, sent while the
    // connection is being made (queued copies) and once it is up (written in place).
    let mut ts = job(2, 12);
    let mut t1 = ts.pop().unwrap();
    let mut t0 = ts.pop().unwrap();
    let page = 4096;
    let storage = pattern(0, 1, 3 * page + 300_000);
    let base = storage.as_ptr().align_offset(page);
    let offsets: Vec<usize> = (0..160)
        .step_by(8)
        .chain((page - 128..page).step_by(8))
        .chain([1, 777, 2048])
        .collect();
    let sizes = [4 << 10, 70_000, 300_000];
    let mut sent = Vec::new();
    for round in 0..2 {
        for &off in &offsets {
            for &len in &sizes {
                let body = &storage[base + off..base + off + len];
                t0.am_send(1, 6, &[round, 0, 0], &[body]).unwrap();
                sent.push(body.to_vec());
            }
        }
        // The first round went out queued, before the connection was up.
        let (mut got0, mut got1) = (Collect::default(), Collect::default());
        poll_both(&mut t0, &mut got0, &mut t1, &mut got1, |a, _, _, got| {
            got.0.len() == offsets.len() * sizes.len() && !a.has_queued_output()
        });
        for (i, (src, h, hdr, payload)) in got1.0.into_iter().enumerate() {
            assert_eq!((src, h, hdr), (0, 6, vec![round, 0, 0]));
            assert!(payload == sent[i], "round {round}, message {i} differs");
        }
        sent.clear();
    }
}

#[test]
fn terminate_sends_what_is_queued_then_closes_and_a_later_send_reconnects() {
    let mut ts = job(2, 11);
    let mut t1 = ts.pop().unwrap();
    let mut t0 = ts.pop().unwrap();
    let (mut g0, mut g1) = (Collect::default(), Collect::default());
    // The largest payload one message may carry (the header is one byte).
    let big = pattern(0, 0, t0.am_max_payload() - 1);
    // 6 MiB in all, more than a loopback socket takes at once.
    let count = (6usize << 20).div_ceil(big.len()) as u8;
    t0.am_send(1, 2, b"first", &[]).unwrap();
    poll_both(&mut t0, &mut g0, &mut t1, &mut g1, |a, _, _, g| {
        a.is_connected(1) && g.0.len() == 1
    });
    // More than the socket takes at once, then the close: the call returns at once, with
    // the data still queued.
    for i in 0..count {
        t0.am_send(1, 3, &[i], &[&big]).unwrap();
    }
    t0.vc_terminate(1).unwrap();
    assert!(t0.has_queued_output());
    // Sent after the close began: waits for the next connection.
    t0.am_send(1, 4, b"after", &[]).unwrap();
    let all = usize::from(count) + 1;
    poll_both(&mut t0, &mut g0, &mut t1, &mut g1, |_, _, _, g| {
        g.0.len() == all
    });
    for (i, m) in g1.0[1..all].iter().enumerate() {
        assert_eq!((m.0, m.1, &m.2[..]), (0, 3, &[i as u8][..]));
        assert!(m.3 == big, "message {i} intact");
    }
    assert_eq!((g1.0[0].1, &g1.0[0].2[..]), (2, &b"first"[..]));
    // The last message made a new connection once the old one had closed on both sides.
    poll_both(&mut t0, &mut g0, &mut t1, &mut g1, |a, _, b, g| {
        g.0.len() == all + 1 && !a.has_queued_output() && a.is_connected(1) && b.is_connected(0)
    });
    assert_eq!((g1.0[all].1, &g1.0[all].2[..]), (4, &b"after"[..]));
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

/// A raw socket speaking the protocol as rank 1 of `key`'s job, connected to `addr`, its hello
/// saying it has had `generation` connections with rank 0 before.
fn raw_rank_1(addr: SocketAddr, key: u64, generation: u32) -> std::net::TcpStream {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    let hello = HelloMsg {
        key,
        rank: 1,
        generation,
        same_byte_order: true,
    };
    s.write_all(&hello.encode()).unwrap();
    s
}

/// A rank whose byte order differs (its byte-order mark reads backwards) is refused with its
/// own code, so the job fails with a clear reason rather than misreading every header.
#[test]
fn a_rank_of_the_other_byte_order_is_refused() {
    let mut ts = job(2, 21);
    let addr = ts[0].local_addr();
    let mut hello = HelloMsg {
        key: 21,
        rank: 1,
        generation: 0,
        same_byte_order: true,
    }
    .encode();
    hello[24..28].reverse();
    assert!(!HelloMsg::decode(&hello).unwrap().same_byte_order);
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(&hello).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
    let mut answer = Vec::new();
    let start = Instant::now();
    while answer.len() < ANSWER {
        ts[0].am_poll(&mut Collect::default(), 64).unwrap();
        let mut buf = [0u8; ANSWER];
        if let Ok(n) = s.read(&mut buf) {
            if n == 0 {
                break;
            }
            answer.extend_from_slice(&buf[..n]);
        }
        assert!(start.elapsed() < Duration::from_secs(10), "no answer");
    }
    assert_eq!(&answer[..4], &ANSWER_MAGIC);
    assert_eq!(
        u32::from_le_bytes(answer[4..8].try_into().unwrap()),
        WRONG_BYTE_ORDER
    );
}

fn raw_frame(handler: u8, header: &[u8]) -> Vec<u8> {
    let mut v = frame::encode(handler, header.len(), 0).to_vec();
    v.extend_from_slice(header);
    v
}

#[test]
fn a_stale_attempt_read_after_its_winner_closed_is_dropped_not_adopted() {
    let mut ts = job(2, 16);
    drop(ts.pop()); // rank 1 is played by raw sockets
    let mut t0 = ts.pop().unwrap();
    let mut got = Collect::default();
    let poll_until =
        |t0: &mut TcpNetmod, got: &mut Collect, done: &dyn Fn(&TcpNetmod, &Collect) -> bool| {
            let start = Instant::now();
            while !done(t0, got) {
                t0.am_poll(got, 64).unwrap();
                assert!(start.elapsed() < Duration::from_secs(10), "stuck");
            }
        };
    // A first connection carries a message and is closed in order.
    let mut first = raw_rank_1(t0.local_addr(), 16, 0);
    first.write_all(&raw_frame(7, b"one")).unwrap();
    first
        .write_all(&frame::encode_control(frame::GOODBYE))
        .unwrap();
    poll_until(&mut t0, &mut got, &|t, g| {
        g.0.len() == 1 && t.vcs[1].close.is_some_and(|c| c.shut)
    });
    first.shutdown(std::net::Shutdown::Write).unwrap();
    poll_until(&mut t0, &mut got, &|t, _| {
        matches!(t.vcs[1].state, VcState::Idle)
    });
    // An attempt from before that connection (generation 0) turns up now: dropped, and the
    // VC neither fails nor carries its message.
    let mut stale = raw_rank_1(t0.local_addr(), 16, 0);
    stale.write_all(&raw_frame(7, b"stale")).unwrap();
    stale
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut answer = [0u8; ANSWER];
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(300) {
        t0.am_poll(&mut got, 64).unwrap();
    }
    stale.read_exact(&mut answer).unwrap();
    assert_eq!(
        u32::from_le_bytes(answer[4..8].try_into().unwrap()),
        DUPLICATE
    );
    assert_eq!(got.0.len(), 1);
    assert!(!t0.peer_failed(1) && !t0.is_connected(1));
    // A real reconnection (generation 1) is accepted.
    let mut fresh = raw_rank_1(t0.local_addr(), 16, 1);
    fresh.write_all(&raw_frame(7, b"two")).unwrap();
    poll_until(&mut t0, &mut got, &|_, g| g.0.len() == 2);
    assert!(got.0[1].2 == b"two" && t0.is_connected(1) && !t0.peer_failed(1));
}

#[test]
fn a_new_connection_during_a_close_waits_until_the_old_one_ended() {
    let mut ts = job(2, 13);
    drop(ts.pop()); // rank 1 is played by raw sockets
    let mut t0 = ts.pop().unwrap();
    let mut got = Collect::default();
    let mut old = raw_rank_1(t0.local_addr(), 13, 0);
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
    let mut new = raw_rank_1(t0.local_addr(), 13, 1);
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

/// How many of `fds` are ready within `timeout` (asked through a fresh epoll instance, which
/// reports on registration what is ready already).
fn ready_within(fds: &[WaitFd], timeout: Duration) -> usize {
    let mut poll = Poll::new().unwrap();
    for (i, w) in fds.iter().enumerate() {
        let interest = if w.write {
            Interest::WRITABLE
        } else {
            Interest::READABLE
        };
        poll.registry()
            .register(&mut mio::unix::SourceFd(&w.fd), Token(i), interest)
            .unwrap();
    }
    let mut events = Events::with_capacity(fds.len().max(1));
    poll.poll(&mut events, Some(timeout)).unwrap();
    events.iter().count()
}

/// The contract a sleeping progress thread relies on: once the netmod is idle and armed, its
/// descriptors stay quiet until a peer sends, and then one of them is ready. With a few peers
/// their sockets are named themselves (they are read directly, outside epoll); with more than
/// `DIRECT_MAX` they sit in epoll and its instance is what becomes ready.
#[test]
fn an_armed_netmod_is_woken_by_a_message_from_any_peer() {
    for n in [2u32, DIRECT_MAX as u32 + 2] {
        let mut ts = job(n, 77);
        let mut r0 = ts.remove(0);
        let mut got = Collect::default();
        let mut sinks: Vec<Collect> = (1..n).map(|_| Collect::default()).collect();
        // Every other rank connects to rank 0 with a first message.
        for t in ts.iter_mut() {
            t.am_send(0, 5, &[1], &[b"hello"]).unwrap();
        }
        let start = Instant::now();
        while got.0.len() < (n - 1) as usize {
            r0.am_poll(&mut got, 64).unwrap();
            for (t, s) in ts.iter_mut().zip(sinks.iter_mut()) {
                t.am_poll(s, 64).unwrap();
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "stuck connecting"
            );
        }
        // Idle long enough that epoll has been asked and holds nothing.
        for _ in 0..4 * EPOLL_EVERY {
            assert_eq!(r0.am_poll(&mut got, 64).unwrap(), 0);
            for (t, s) in ts.iter_mut().zip(sinks.iter_mut()) {
                t.am_poll(s, 64).unwrap();
            }
        }
        let mut fds = Vec::new();
        assert_eq!(r0.arm_wakeup(&mut fds), Arm::Armed, "{n} ranks");
        assert!(!fds.is_empty());
        assert_eq!(
            ready_within(&fds, Duration::ZERO),
            0,
            "{n} ranks: woken for nothing"
        );
        // The last rank sends: rank 0's sleep must end.
        let last = ts.last_mut().unwrap();
        last.am_send(0, 5, &[2], &[b"wake up"]).unwrap();
        last.am_poll(sinks.last_mut().unwrap(), 64).unwrap();
        assert!(
            ready_within(&fds, Duration::from_secs(5)) > 0,
            "{n} ranks: a message arrived and no descriptor said so"
        );
        let before = got.0.len();
        let start = Instant::now();
        while got.0.len() == before {
            r0.am_poll(&mut got, 64).unwrap();
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "the message never came"
            );
        }
        assert_eq!(got.0.last().unwrap().3, b"wake up");
    }
}

/// While a progress thread runs, a send call writes at most `BACKGROUND_FIRST_PIECE` of a
/// rendezvous message itself; without one, the whole first piece, as configured.
#[test]
fn a_progress_thread_leaves_the_first_piece_small() {
    let mut t = job(1, 3).remove(0);
    let alone = t.first_piece();
    assert!(alone > BACKGROUND_FIRST_PIECE, "{alone}");
    t.background_progress(true);
    assert_eq!(t.first_piece(), BACKGROUND_FIRST_PIECE);
    t.limit(DEFAULT_EAGER, 8 << 10);
    assert_eq!(t.first_piece(), 8 << 10, "the piece size still bounds it");
    t.background_progress(false);
    assert_eq!(t.first_piece(), 8 << 10);
}

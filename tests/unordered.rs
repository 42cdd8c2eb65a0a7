//! MPI over a transport that reorders active messages.
//!
//! Every rank sits on its own node, so all traffic goes through the netmod, and the netmod is
//! the in-process active-message one wrapped in `inproc::Shuffled`, which delivers arrivals in a
//! pseudo-random order. The AM fallback must then number its matching packets and hold early
//! ones back; these tests check that MPI's guarantees (non-overtaking order, exactly-once
//! delivery, synchronous completion, cancel) survive, and that reordering really happened.

mod common;

use ch4::threads::Threads;
use ch4::{Context, Result, SendMode, Status, ANY_SOURCE, ANY_TAG};
use ch4_core::transport::{AmSink, AmTransport, HandlerId};
use common::{pattern, EAGER};
use inproc::{AmOnly, Fabric, FabricConfig, InprocNet, Shuffled};

type Net = Shuffled<InprocNet<AmOnly>>;
type Ctx = Context<Net, shm::ShmTransport>;

/// A job of `ranks` ranks, one per node, over the shuffled netmod, with tiny thresholds so
/// small messages already cross the eager/rendezvous boundary.
fn run<R: Send>(ranks: u32, f: impl Fn(Ctx) -> Result<R> + Sync) -> Vec<R> {
    Threads::new(ranks)
        .eager_limit(EAGER)
        .max_payload(100)
        .ranks_per_node(1)
        .run_with::<Net, _, _>(f)
        .unwrap()
}

/// How often this rank's netmod delivered a message ahead of an earlier arrival.
fn overtaken(ctx: &Ctx) -> Result<u64> {
    Ok(ctx.device()?.netmod().overtaken())
}

/// Sizes on both sides of the eager limit (64) and of the AM payload (100): zero, eager,
/// exactly at the limit, rendezvous in one piece, in several pieces.
fn size_of(i: usize) -> usize {
    const S: [usize; 13] = [0, 1, 63, 64, 65, 99, 100, 101, 199, 200, 201, 333, 5];
    S[i % S.len()] + (i / S.len()) % 3
}

const BUF: usize = 400;

/// Checks that receive `i` of a phase got message `i` of that phase, intact.
fn check(phase: usize, i: usize, st: &Status, buf: &[u8], tag: i32) {
    let n = size_of(i);
    assert_eq!(
        (st.source, st.tag, st.bytes),
        (0, tag, n),
        "phase {phase} message {i}"
    );
    assert_eq!(
        &buf[..n],
        &pattern(phase * 1000 + i, n)[..],
        "phase {phase} message {i}"
    );
    assert!(
        buf[n..].iter().all(|&b| b == 0xEE),
        "phase {phase} message {i}: wrote past the message"
    );
}

/// The wrapper itself, without MPI on top: over the real in-process mailboxes it delivers every
/// message exactly once and out of order.
#[test]
fn shuffled_transport_reorders_inproc_mailboxes() {
    const { assert!(!Net::AM_ORDERED) };
    let fabric = Fabric::new(FabricConfig {
        ranks: 2,
        ranks_per_node: 1,
        eager_limit: 64,
        max_payload: 100,
    })
    .unwrap();
    let mut a = Shuffled::new(InprocNet::<AmOnly>::new(fabric.clone(), 0).unwrap(), 7);
    let mut b = Shuffled::new(InprocNet::<AmOnly>::new(fabric, 1).unwrap(), 8);
    assert_eq!((a.eager_limit(), a.am_max_payload()), (64, 100));

    struct Record(Vec<u32>);
    impl AmSink for Record {
        fn deliver(&mut self, src: u32, h: HandlerId, hdr: &[u8], p: &[u8]) -> Result<()> {
            assert_eq!((src, h), (0, 9));
            let v = u32::from_le_bytes(hdr.try_into().unwrap());
            assert_eq!(p, &pattern(v as usize, v as usize % 50)[..]);
            self.0.push(v);
            Ok(())
        }
    }
    let mut rec = Record(Vec::new());
    for i in 0..300u32 {
        let data = pattern(i as usize, i as usize % 50);
        a.am_send(1, 9, &i.to_le_bytes(), &[&data]).unwrap();
        if i % 40 == 39 {
            b.am_poll(&mut rec, 64).unwrap();
        }
    }
    let mut polls = 0;
    while rec.0.len() < 300 {
        b.am_poll(&mut rec, 64).unwrap();
        polls += 1;
        assert!(polls < 10_000, "messages never delivered");
    }
    assert_eq!(b.held(), 0);
    assert_eq!(
        b.am_poll(&mut rec, 64).unwrap(),
        0,
        "a message was duplicated"
    );
    let mut sorted = rec.0.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..300).collect::<Vec<_>>());
    assert_ne!(rec.0, sorted, "nothing was reordered");
    assert!(b.overtaken() > 0);
}

/// (a) Many messages of mixed sizes from one sender on one tag arrive in send order: blocking
/// on both sides, a burst of nonblocking sends received after they have all arrived (the
/// unexpected path), and receives posted before anything was sent (the expected path, half of
/// them ANY_TAG).
fn one_sender_in_order(ctx: Ctx) -> Result<u64> {
    const N: usize = 150;
    const TAG: i32 = 3;
    let w = ctx.world();
    // Phase 0: blocking send, blocking receive.
    if w.rank() == 0 {
        for i in 0..N {
            w.send(&pattern(i, size_of(i)), 1, TAG)?;
        }
    } else {
        for i in 0..N {
            let mut buf = vec![0xEEu8; BUF];
            let st = w.recv(&mut buf, 0, TAG)?;
            check(0, i, &st, &buf, TAG);
        }
    }
    // Phase 1: every send started before the receiver looks.
    if w.rank() == 0 {
        let data: Vec<Vec<u8>> = (0..N).map(|i| pattern(1000 + i, size_of(i))).collect();
        ctx.scope(|s| {
            let reqs = data
                .iter()
                .map(|d| w.isend(s, d, 1, TAG))
                .collect::<Result<Vec<_>>>()?;
            w.barrier()?;
            s.wait_all(reqs).map(drop)
        })?;
    } else {
        w.barrier()?;
        for i in 0..N {
            let mut buf = vec![0xEEu8; BUF];
            let st = w.recv(&mut buf, 0, TAG)?;
            check(1, i, &st, &buf, TAG);
        }
    }
    // Phase 2: every receive posted before the first send.
    if w.rank() == 0 {
        w.barrier()?;
        let data: Vec<Vec<u8>> = (0..N).map(|i| pattern(2000 + i, size_of(i))).collect();
        ctx.scope(|s| {
            let reqs = data
                .iter()
                .map(|d| w.isend(s, d, 1, TAG))
                .collect::<Result<Vec<_>>>()?;
            s.wait_all(reqs).map(drop)
        })?;
    } else {
        let mut bufs = vec![vec![0xEEu8; BUF]; N];
        let statuses = ctx.scope(|s| {
            let reqs = bufs
                .iter_mut()
                .enumerate()
                .map(|(i, b)| w.irecv(s, b, 0, if i % 2 == 0 { TAG } else { ANY_TAG }))
                .collect::<Result<Vec<_>>>()?;
            w.barrier()?;
            s.wait_all(reqs)
        })?;
        for (i, st) in statuses.iter().enumerate() {
            check(2, i, st, &bufs[i], TAG);
        }
    }
    w.barrier()?;
    overtaken(&ctx)
}

#[test]
fn mixed_sizes_from_one_sender_stay_in_order() {
    let overtakes: u64 = run(2, one_sender_in_order).iter().sum();
    assert!(overtakes > 0, "the transport never reordered anything");
}

/// A message of fan-in: `[sender, seq, filler...]`, long enough every third time to go by
/// rendezvous in several pieces.
fn fan_in_msg(sender: usize, seq: usize) -> Vec<u64> {
    let len = if seq % 3 == 0 { 30 } else { 2 + seq % 5 };
    let mut m: Vec<u64> = (0..len as u64).map(|k| k * 1_000 + seq as u64).collect();
    m[0] = sender as u64;
    m[1] = seq as u64;
    m
}

/// Checks one fan-in arrival against the per-sender expectations and advances them.
fn fan_in_check(next: &mut [usize], st: &Status, buf: &[u64]) {
    let src = st.source as usize;
    let seq = next[src];
    let want = fan_in_msg(src, seq);
    assert_eq!(st.bytes, want.len() * 8, "from {src}, message {seq}");
    assert_eq!(
        &buf[..want.len()],
        &want[..],
        "from {src}: expected message {seq}"
    );
    assert_eq!(st.tag as usize, seq % 4);
    next[src] += 1;
}

/// (b) ANY_SOURCE fan-in from four senders: every message is received exactly once and each
/// sender's messages in its send order — with blocking receives, and with receives all posted
/// before the senders start.
fn any_source_fan_in(ctx: Ctx) -> Result<u64> {
    const PER: usize = 40;
    let w = ctx.world();
    let me = w.rank() as usize;
    let size = w.size() as usize;
    for phase in 0..2 {
        if me == 0 {
            let mut next = vec![0usize; size];
            if phase == 0 {
                for _ in 0..(size - 1) * PER {
                    let mut buf = [0u64; 40];
                    let st = w.recv(&mut buf, ANY_SOURCE, ANY_TAG)?;
                    fan_in_check(&mut next, &st, &buf);
                }
            } else {
                let mut bufs = vec![[0u64; 40]; (size - 1) * PER];
                let statuses = ctx.scope(|s| {
                    let reqs = bufs
                        .iter_mut()
                        .map(|b| w.irecv(s, b, ANY_SOURCE, ANY_TAG))
                        .collect::<Result<Vec<_>>>()?;
                    w.barrier()?;
                    s.wait_all(reqs)
                })?;
                // Posted receives are matched in posting order, so per sender the statuses
                // must come in that sender's send order.
                for (st, b) in statuses.iter().zip(&bufs) {
                    fan_in_check(&mut next, st, b);
                }
            }
            assert!(next[1..].iter().all(|&n| n == PER), "{next:?}");
            assert!(
                w.iprobe(ANY_SOURCE, ANY_TAG)?.is_none(),
                "a message was duplicated"
            );
        } else {
            if phase == 1 {
                w.barrier()?;
            }
            let msgs: Vec<Vec<u64>> = (0..PER).map(|seq| fan_in_msg(me, seq)).collect();
            ctx.scope(|s| {
                let reqs = msgs
                    .iter()
                    .enumerate()
                    .map(|(seq, m)| w.isend(s, m, 0, (seq % 4) as i32))
                    .collect::<Result<Vec<_>>>()?;
                s.wait_all(reqs).map(drop)
            })?;
        }
        w.barrier()?;
    }
    overtaken(&ctx)
}

#[test]
fn any_source_fan_in_keeps_per_sender_order() {
    let overtakes: u64 = run(5, any_source_fan_in).iter().sum();
    assert!(overtakes > 0, "the transport never reordered anything");
}

/// (c1) A synchronous send does not complete before the receiver has matched it, and a burst
/// of synchronous sends (eager and rendezvous) is received in order.
fn synchronous_sends(ctx: Ctx) -> Result<u64> {
    let w = ctx.world();
    for len in [4usize, 400] {
        if w.rank() == 0 {
            let data = pattern(1, len);
            ctx.scope(|s| {
                let mut req = w.issend(s, &data, 1, 1)?;
                for _ in 0..200 {
                    assert!(req.test()?.is_none(), "ssend completed before the match");
                }
                w.send(&[0u8], 1, 2)?; // tell rank 1 to post its receive now
                req.wait().map(drop)
            })?;
        } else {
            let mut go = [0u8];
            w.recv(&mut go, 0, 2)?;
            let mut buf = vec![0u8; len];
            w.recv(&mut buf, 0, 1)?;
            assert_eq!(buf, pattern(1, len));
        }
    }
    const N: usize = 60;
    if w.rank() == 0 {
        // Blocking ssends interleaved with a burst of issends.
        for i in 0..N / 2 {
            w.ssend(&pattern(3000 + i, size_of(i)), 1, 7)?;
        }
        let data: Vec<Vec<u8>> = (N / 2..N).map(|i| pattern(3000 + i, size_of(i))).collect();
        ctx.scope(|s| {
            let reqs = data
                .iter()
                .map(|d| w.issend(s, d, 1, 7))
                .collect::<Result<Vec<_>>>()?;
            s.wait_all(reqs).map(drop)
        })?;
    } else {
        for i in 0..N {
            let mut buf = vec![0xEEu8; BUF];
            let st = w.recv(&mut buf, 0, 7)?;
            check(3, i, &st, &buf, 7);
        }
    }
    w.barrier()?;
    overtaken(&ctx)
}

#[test]
fn synchronous_sends_wait_for_the_match_and_keep_order() {
    run(2, synchronous_sends);
}

/// A message of the cancel burst: its index in the first byte, never empty.
fn cancel_msg(i: usize) -> Vec<u8> {
    let mut m = pattern(4000 + i, size_of(i).max(1));
    m[0] = i as u8;
    m
}

/// Receives messages on `tag` from rank 0 until the verdict (a message on `tag + 1`) arrives,
/// then the ones still owed: `flags[i] == 0` means message `i` was not cancelled and must be
/// received. Rendezvous and synchronous sends whose cancel failed complete only once received,
/// so the receiver has to keep receiving while the sender waits for them. Returns the indices
/// received, in order.
fn receive_until_verdict(ctx: &Ctx, tag: i32, n: usize) -> Result<(Vec<usize>, Vec<u8>)> {
    let w = ctx.world();
    let mut got = Vec::new();
    let take = |got: &mut Vec<usize>| -> Result<()> {
        let mut b = vec![0xEEu8; BUF];
        let st = w.recv(&mut b, 0, tag)?;
        let i = b[0] as usize;
        let want = cancel_msg(i);
        assert_eq!(st.bytes, want.len(), "message {i}");
        assert_eq!(&b[..want.len()], &want[..], "message {i}");
        assert!(
            got.last().map_or(true, |&l| l < i),
            "message {i} after {got:?}"
        );
        got.push(i);
        Ok(())
    };
    let mut flags = vec![0u8; n];
    loop {
        if w.iprobe(0, tag)?.is_some() {
            take(&mut got)?;
        }
        if w.iprobe(0, tag + 1)?.is_some() {
            w.recv(&mut flags, 0, tag + 1)?;
            break;
        }
    }
    // Everything sent before the verdict has been matched or queued by now (the verdict is
    // delivered in order after it), so a probe tells exactly what is still owed.
    while w.iprobe(0, tag)?.is_some() {
        take(&mut got)?;
    }
    Ok((got, flags))
}

/// (c2) Cancel: an unmatched receive is cancelled; in a burst of standard and synchronous
/// sends, eager and rendezvous, with every other one cancelled, each message is either gone at
/// the receiver or received exactly once, in send order.
fn cancels(ctx: Ctx) -> Result<()> {
    let w = ctx.world();
    let mut buf = [0u8; 4];
    let st = ctx.scope(|s| {
        let req = w.irecv(s, &mut buf, ANY_SOURCE, 99)?;
        req.cancel()?;
        req.wait()
    })?;
    assert!(st.cancelled);

    const N: usize = 40;
    for round in 0..3 {
        let tag = 50 + 2 * round as i32;
        if w.rank() == 0 {
            let data: Vec<Vec<u8>> = (0..N).map(cancel_msg).collect();
            let statuses = ctx.scope(|s| {
                let reqs = data
                    .iter()
                    .enumerate()
                    .map(|(i, d)| {
                        let mode = if (i + round) % 3 == 0 {
                            SendMode::Synchronous
                        } else {
                            SendMode::Standard
                        };
                        w.isend_mode(s, d, 1, tag, mode)
                    })
                    .collect::<Result<Vec<_>>>()?;
                for r in reqs.iter().skip(round % 2).step_by(2) {
                    r.cancel()?;
                }
                s.wait_all(reqs)
            })?;
            let flags: Vec<u8> = statuses.iter().map(|st| u8::from(st.cancelled)).collect();
            assert!(
                flags.iter().skip(1 - round % 2).step_by(2).all(|&c| c == 0),
                "a send that was not cancelled reports cancelled"
            );
            w.send(&flags, 1, tag + 1)?;
        } else {
            let (got, flags) = receive_until_verdict(&ctx, tag, N)?;
            let owed: Vec<usize> = (0..N).filter(|&i| flags[i] == 0).collect();
            assert_eq!(got, owed, "received vs. not cancelled (flags {flags:?})");
        }
        w.barrier()?;
    }
    Ok(())
}

#[test]
fn cancels_still_work() {
    run(2, cancels);
}

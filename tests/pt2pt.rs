//! Point-to-point semantics over every route (see `common`): ranks as threads, and over TCP also
//! ranks as processes under `ch4run`.

mod common;

use ch4::{
    Context, ErrorKind, Netmod, Result, Shm, Status, ANY_SOURCE, ANY_TAG, PROC_NULL, TAG_UB,
};
use common::{pattern, EAGER};

/// Messages of sizes on both sides of the eager limit arrive intact and in order.
fn ordered_mixed_sizes<N: Netmod, S: Shm>(ctx: Context<N, S>) -> Result<()> {
    let w = ctx.world();
    let sizes = [0, 1, EAGER - 1, EAGER, EAGER + 1, 1000, 3, 4096, 0, 250];
    match w.rank() {
        0 => {
            for (i, &n) in sizes.iter().enumerate() {
                w.send(&pattern(i, n), 1, 5)?;
            }
        }
        1 => {
            for (i, &n) in sizes.iter().enumerate() {
                let mut buf = vec![0u8; 5000];
                let st = w.recv(&mut buf, 0, 5)?;
                assert_eq!(st.bytes, n, "message {i}");
                assert_eq!(&buf[..n], &pattern(i, n)[..], "message {i}");
                assert_eq!((st.source, st.tag), (0, 5));
            }
        }
        _ => {}
    }
    Ok(())
}
on_all_routes!(order_mixed, 2, ordered_mixed_sizes);

/// Nonblocking receives posted in advance (expected path) and after arrival (unexpected path)
/// both see messages in send order, including with ANY_TAG.
fn nonblocking_order<N: Netmod, S: Shm>(ctx: Context<N, S>) -> Result<()> {
    let w = ctx.world();
    let sizes: Vec<usize> = (0..24).map(|i| (i * 37) % 300).collect();
    if w.rank() == 0 {
        let bufs: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| pattern(i, n))
            .collect();
        ctx.scope(|s| {
            let reqs = bufs
                .iter()
                .enumerate()
                .map(|(i, b)| w.isend(s, b, 1, (i % 3) as i32))
                .collect::<Result<Vec<_>>>()?;
            s.wait_all(reqs).map(drop)
        })?;
    } else if w.rank() == 1 {
        let mut bufs = vec![vec![0u8; 300]; sizes.len()];
        let statuses = ctx.scope(|s| {
            let mut reqs = Vec::new();
            // Post the first half before the messages can arrive, the rest after a barrier
            // on the other side has certainly sent them.
            for b in bufs.iter_mut() {
                reqs.push(w.irecv(s, b, 0, ANY_TAG)?);
            }
            s.wait_all(reqs)
        })?;
        for (i, st) in statuses.iter().enumerate() {
            assert_eq!(st.bytes, sizes[i]);
            assert_eq!(st.tag, (i % 3) as i32);
            assert_eq!(&bufs[i][..sizes[i]], &pattern(i, sizes[i])[..]);
        }
    }
    Ok(())
}
on_all_routes!(nonblocking_in_order, 2, nonblocking_order);

/// ANY_SOURCE receives get every message exactly once, and per sender in order.
fn any_source_fan_in<N: Netmod, S: Shm>(ctx: Context<N, S>) -> Result<()> {
    let w = ctx.world();
    let per_sender = 20usize;
    if w.rank() == 0 {
        let senders = (w.size() - 1) as usize;
        let mut next = vec![0usize; w.size() as usize];
        for _ in 0..senders * per_sender {
            let mut buf = [0u64; 40];
            let st = w.recv(&mut buf, ANY_SOURCE, ANY_TAG)?;
            let src = st.source as usize;
            let seq = buf[0] as usize;
            assert_eq!(seq, next[src], "from {src}");
            assert_eq!(st.tag as usize, seq % 4);
            next[src] += 1;
        }
        assert!(next[1..].iter().all(|&n| n == per_sender));
        assert!(
            w.iprobe(ANY_SOURCE, ANY_TAG)?.is_none(),
            "a message was duplicated"
        );
    } else {
        for seq in 0..per_sender {
            // Every third message is long enough to go by rendezvous.
            let len = if seq % 3 == 0 { 40 } else { 2 };
            let mut msg = vec![seq as u64; len];
            msg[0] = seq as u64;
            w.send(&msg, 0, (seq % 4) as i32)?;
        }
    }
    w.barrier()
}
on_all_routes!(any_source, 5, any_source_fan_in, processes = 8);

/// A message longer than the buffer: truncation error, the buffer is filled (where the route
/// fills it: `Caps::fills_truncated`), nothing past it is written — eager and rendezvous.
fn truncation<N: Netmod, S: Shm>(ctx: Context<N, S>) -> Result<()> {
    let w = ctx.world();
    let fills = ctx.device()?.caps().fills_truncated;
    for (round, len) in [(0, 20usize), (1, 500), (2, 100_000), (3, 1 << 20)] {
        if w.rank() == 0 {
            w.send(&pattern(round, len), 1, round as i32)?;
        } else if w.rank() == 1 {
            let mut mem = [0xEEu8; 30];
            let err = w.recv(&mut mem[..10], 0, round as i32).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Truncate);
            if fills {
                assert_eq!(&mem[..10], &pattern(round, len)[..10]);
            }
            assert!(
                mem[10..].iter().all(|&b| b == 0xEE),
                "wrote past the buffer"
            );
        }
    }
    w.barrier()
}
on_all_routes!(truncate, 2, truncation);

/// probe reports the size; mprobe takes the message so a wildcard receive cannot steal it.
fn probes<N: Netmod, S: Shm>(ctx: Context<N, S>) -> Result<()> {
    let w = ctx.world();
    if w.rank() == 0 {
        w.send(&[1u32; 3], 1, 7)?;
        w.send(&[2u32; 50], 1, 8)?;
        w.send(&[3u32; 1], 1, 9)?;
    } else if w.rank() == 1 {
        assert!(w.iprobe(0, 100)?.is_none());
        let st = w.probe(0, 7)?;
        assert_eq!((st.source, st.tag, st.bytes), (0, 7, 12));
        let (msg, st) = w.mprobe(0, 8)?;
        assert_eq!(st.bytes, 200);
        // The probed message is out of matching: ANY_TAG now sees tag 7 first, then tag 9.
        let mut a = [0u32; 3];
        assert_eq!(w.recv(&mut a, 0, ANY_TAG)?.tag, 7);
        let mut b = [0u32; 50];
        msg.recv(&mut b)?;
        assert_eq!(b, [2u32; 50]);
        let (v, st) = w.recv_vec::<u32>(0, ANY_TAG)?;
        assert_eq!((v, st.tag), (vec![3], 9));
        assert!(w.improbe(ANY_SOURCE, ANY_TAG)?.is_none());
    }
    w.barrier()
}
on_all_routes!(probe, 2, probes);

/// A synchronous send does not complete before the receiver has matched it.
fn ssend_waits_for_match<N: Netmod, S: Shm>(ctx: Context<N, S>) -> Result<()> {
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
        } else if w.rank() == 1 {
            let mut go = [0u8];
            w.recv(&mut go, 0, 2)?;
            let mut buf = vec![0u8; len];
            w.recv(&mut buf, 0, 1)?;
            assert_eq!(buf, pattern(1, len));
        }
    }
    w.barrier()
}
on_all_routes!(ssend, 2, ssend_waits_for_match);

/// A ready send that arrives before its receive is reported at the receive, where the route
/// can tell (a NIC that matches in hardware cannot: its capabilities say so); a correct one
/// works.
fn ready_send<N: Netmod, S: Shm>(ctx: Context<N, S>) -> Result<()> {
    let w = ctx.world();
    let detects = ctx.device()?.caps().detects_unmatched_ready;
    if w.rank() == 0 {
        if detects {
            w.rsend(&[9u8; 8], 1, 3)?; // nobody is waiting for it
        }
        w.barrier()?;
        w.barrier()?; // rank 1 has posted tag 4 by now
        w.rsend(&[5u8; 8], 1, 4)?;
    } else if w.rank() == 1 {
        if detects {
            while w.iprobe(0, 3)?.is_none() {}
            let mut buf = [0u8; 8];
            let err = w.recv(&mut buf, 0, 3).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::ReadyNotPosted);
        }
        w.barrier()?;
        let mut good = [0u8; 8];
        ctx.scope(|s| {
            let req = w.irecv(s, &mut good, 0, 4)?;
            w.barrier()?;
            req.wait().map(drop)
        })?;
        assert_eq!(good, [5u8; 8]);
    } else {
        w.barrier()?;
        w.barrier()?;
    }
    Ok(())
}
on_all_routes!(rsend, 2, ready_send);

/// Cancel: an unmatched receive is cancelled; an unmatched send is cancelled at the receiver
/// (where the network allows it) and never delivered; a matched receive is not.
///
/// A send whose cancel fails may complete only once it is received (MPI lets any standard send
/// wait for its receive, and a network's rendezvous does), so the receiver posts its receives
/// before the sender waits: after the cancels have been asked (the barrier), never before.
fn cancels<N: Netmod, S: Shm>(ctx: Context<N, S>) -> Result<()> {
    let w = ctx.world();
    let mut buf = [0u8; 4];
    let st = ctx.scope(|s| {
        let req = w.irecv(s, &mut buf, ANY_SOURCE, 99)?;
        req.cancel()?;
        req.wait()
    })?;
    assert!(st.cancelled);
    let data = [1u8; 16];
    let big = [2u8; 500];
    if w.rank() == 0 {
        let (small, large) = ctx.scope(|s| {
            let a = w.isend(s, &data, 1, 50)?;
            let b = w.isend(s, &big, 1, 51)?;
            a.cancel()?;
            b.cancel()?;
            w.barrier()?;
            Ok::<_, ch4::Error>((a.wait()?, b.wait()?))
        })?;
        w.send(
            &[u8::from(small.cancelled), u8::from(large.cancelled)],
            1,
            52,
        )?;
    } else if w.rank() == 1 {
        w.barrier()?;
        let (mut small, mut large) = ([0u8; 16], [0u8; 500]);
        ctx.scope(|s| {
            let receives = [
                (w.irecv(s, &mut small, 0, 50)?, &data[..]),
                (w.irecv(s, &mut large, 0, 51)?, &big[..]),
            ];
            let mut flags = [0u8; 2];
            w.recv(&mut flags, 0, 52)?;
            // Whatever was not cancelled arrives whole; whatever was never arrives.
            for ((req, sent), &cancelled) in receives.into_iter().zip(&flags) {
                if cancelled == 1 {
                    req.cancel()?;
                    let st = req.wait()?;
                    assert!(st.cancelled, "a cancelled send was delivered");
                } else {
                    let st = req.wait()?;
                    assert!(!st.cancelled);
                    assert_eq!(st.bytes, sent.len());
                }
            }
            Ok::<_, ch4::Error>(flags)
        })
        .map(|flags| {
            assert!(flags[0] == 1 || small == data);
            assert!(flags[1] == 1 || large == big);
        })?;
    } else {
        w.barrier()?;
    }
    w.barrier()
}
on_all_routes!(cancel, 2, cancels);

/// Nonblocking sends far beyond the receiver's eager credit (the routes' credit covers about a
/// dozen), all with one tag, then a barrier before the receiver takes any. Each route sends the
/// excess its own way (a request-to-send over TCP, a synchronous send over libfabric and
/// UCX), and nothing may wait for credit: the barrier, and any later message the receiver
/// needs first, would wait behind it for ever (an engine that held such sends back until
/// credit came hung here). The messages arrive in order; one of them, cancelled before any was received, is
/// either never delivered or arrives whole, as for `cancels`.
fn beyond_credit<N: Netmod, S: Shm>(ctx: Context<N, S>) -> Result<()> {
    const COUNT: usize = 48;
    const CANCELLED: usize = 40;
    const TAG: i32 = 7;
    let w = ctx.world();
    let msgs: Vec<[u8; 16]> = (0..COUNT).map(|i| [i as u8; 16]).collect();
    if w.rank() == 0 {
        let flags = ctx.scope(|s| {
            let reqs = msgs
                .iter()
                .map(|m| w.isend(s, m, 1, TAG))
                .collect::<Result<Vec<_>>>()?;
            reqs[CANCELLED].cancel()?;
            w.barrier()?;
            reqs.into_iter()
                .map(|r| r.wait().map(|st| u8::from(st.cancelled)))
                .collect::<Result<Vec<u8>>>()
        })?;
        assert!(
            flags
                .iter()
                .enumerate()
                .all(|(i, &f)| f == 0 || i == CANCELLED),
            "only the send asked to cancel may be cancelled"
        );
        w.send(&flags, 1, TAG + 1)?;
    } else if w.rank() == 1 {
        w.barrier()?;
        let mut bufs = vec![[0u8; 16]; COUNT];
        let mut flags = [0u8; COUNT];
        // The messages that were not cancelled, in the order they were sent.
        let mut delivered = Vec::new();
        ctx.scope(|s| {
            let receives = bufs
                .iter_mut()
                .map(|b| w.irecv(s, b, 0, TAG))
                .collect::<Result<Vec<_>>>()?;
            w.recv(&mut flags, 0, TAG + 1)?;
            delivered = (0..COUNT).filter(|&i| flags[i] == 0).collect();
            for (k, req) in receives.into_iter().enumerate() {
                if k < delivered.len() {
                    assert_eq!(req.wait()?.bytes, 16);
                } else {
                    // One receive too many for a cancelled send: nothing may arrive for it.
                    req.cancel()?;
                    assert!(req.wait()?.cancelled, "a cancelled send was delivered");
                }
            }
            Ok::<_, ch4::Error>(())
        })?;
        for (k, &i) in delivered.iter().enumerate() {
            assert_eq!(bufs[k], msgs[i], "receive {k} got message {}", bufs[k][0]);
        }
    } else {
        w.barrier()?;
    }
    w.barrier()
}
on_all_routes!(sends_beyond_credit, 2, beyond_credit);

/// Self-sends, zero-byte messages and PROC_NULL.
fn self_and_empty<N: Netmod, S: Shm>(ctx: Context<N, S>) -> Result<()> {
    let w = ctx.world();
    let me = w.rank();
    w.send(&[42u16], me, 0)?;
    let mut x = [0u16];
    assert_eq!(w.recv(&mut x, me, 0)?.bytes, 2);
    assert_eq!(x, [42]);
    let big = pattern(3, 700);
    let mut back = vec![0u8; 700];
    ctx.scope(|s| {
        let r = w.isend(s, &big, me, 1)?;
        w.recv(&mut back, me, 1)?;
        r.wait().map(drop)
    })?;
    assert_eq!(back, big);
    let sc = ctx.self_comm();
    assert_eq!((sc.rank(), sc.size()), (0, 1));
    sc.send::<u8>(&[], 0, 3)?;
    assert_eq!(sc.recv::<u8>(&mut [], 0, 3)?.bytes, 0);
    let peer = (me + 1) % w.size();
    let from = (me + w.size() - 1) % w.size();
    w.sendrecv::<u8, u8>(&[], peer, 4, &mut [], from, 4)?;
    w.send(&[1u8], PROC_NULL, 0)?;
    let st: Status = w.recv(&mut [0u8; 4], PROC_NULL, 0)?;
    assert_eq!((st.source, st.bytes), (PROC_NULL, 0));
    w.barrier()
}
on_all_routes!(self_zero_procnull, 3, self_and_empty, processes = 8);

/// Every misuse is an error of the right kind, never a panic.
fn misuse<N: Netmod, S: Shm>(ctx: Context<N, S>) -> Result<()> {
    let w = ctx.world();
    let n = w.size();
    assert_eq!(w.send(&[0u8], n, 0).unwrap_err().kind(), ErrorKind::Rank);
    assert_eq!(w.send(&[0u8], -7, 0).unwrap_err().kind(), ErrorKind::Rank);
    assert_eq!(w.send(&[0u8], 0, -3).unwrap_err().kind(), ErrorKind::Tag);
    assert_eq!(
        w.send(&[0u8], 0, TAG_UB + 1).unwrap_err().kind(),
        ErrorKind::Tag
    );
    assert_eq!(
        w.send(&[0u8], 0, ANY_TAG).unwrap_err().kind(),
        ErrorKind::Tag
    );
    assert_eq!(
        w.recv(&mut [0u8], n + 3, 0).unwrap_err().kind(),
        ErrorKind::Rank
    );
    assert_eq!(
        w.recv(&mut [0u8], 0, -9).unwrap_err().kind(),
        ErrorKind::Tag
    );
    assert_eq!(w.bcast(n, &mut [0u8]).unwrap_err().kind(), ErrorKind::Root);
    let d = w.dup()?;
    let stale = d.clone();
    d.free()?;
    assert_eq!(
        stale.send(&[0u8], 0, 0).unwrap_err().kind(),
        ErrorKind::Comm
    );
    assert_eq!(
        stale.recv(&mut [0u8], 0, 0).unwrap_err().kind(),
        ErrorKind::Comm
    );
    assert_eq!(stale.clone().free().unwrap_err().kind(), ErrorKind::Comm);
    assert_eq!(w.clone().free().unwrap_err().kind(), ErrorKind::Comm);
    // A spent request.
    let me = w.rank();
    ctx.scope(|s| {
        let mut r = w.isend(s, &[1u8], me, 0)?;
        while r.test()?.is_none() {}
        assert_eq!(r.test().unwrap_err().kind(), ErrorKind::Request);
        Ok::<_, ch4::Error>(())
    })?;
    w.recv(&mut [0u8], me, 0)?;
    // A stale device-level handle. (A send that finished at once has the request-less handle
    // `ReqHandle::DONE`, which any number of waits complete; a receive always has a request.)
    {
        let mut dev = ctx.device()?;
        let h = dev.irecv(w.id(), me, 0, ch4_core::buffer::RecvBuf::owned(2))?;
        dev.send(w.id(), me, 0, &[1, 2], ch4::SendMode::Standard)?;
        assert_eq!(dev.wait(h)?.bytes, 2);
        assert_eq!(dev.wait(h).unwrap_err().kind(), ErrorKind::Request);
        assert_eq!(dev.cancel(h).unwrap_err().kind(), ErrorKind::Request);
    }
    w.barrier()
}
on_all_routes!(errors, 3, misuse);

/// More outstanding requests than the pool's minimum: it grows in chunks and all complete.
fn many_outstanding<N: Netmod, S: Shm>(ctx: Context<N, S>) -> Result<()> {
    let w = ctx.world();
    const COUNT: usize = 10_000;
    if w.rank() == 0 {
        let mut bufs = vec![[0u32; 1]; COUNT];
        ctx.scope(|s| {
            let reqs = bufs
                .iter_mut()
                .enumerate()
                .map(|(i, b)| w.irecv(s, b, 1, (i % 1000) as i32))
                .collect::<Result<Vec<_>>>()?;
            w.barrier()?;
            s.wait_all(reqs).map(drop)
        })?;
        for (i, b) in bufs.iter().enumerate() {
            assert_eq!(b[0] as usize, i);
        }
        assert!(ctx.device()?.live_requests() == 0, "requests leaked");
    } else if w.rank() == 1 {
        w.barrier()?;
        for i in 0..COUNT {
            w.send(&[i as u32], 0, (i % 1000) as i32)?;
        }
    } else {
        w.barrier()?;
    }
    Ok(())
}
on_all_routes!(ten_thousand_requests, 2, many_outstanding);

/// Thousands of receives posted, then what the receiver's peer waits for before it sends
/// them: collectives of several steps and a synchronous send (whose acknowledgement the
/// sender must receive). A network that holds a bounded number of posted receives (libfabric's
/// rxm: 2,048) must keep room for these rather than queue them behind the program's.
fn outstanding_then_collectives<N: Netmod, S: Shm>(ctx: Context<N, S>) -> Result<()> {
    let w = ctx.world();
    const COUNT: usize = 5_000;
    let collectives = |w: &ch4::Communicator<N, S>| -> Result<()> {
        w.barrier()?;
        w.barrier()?;
        let mut sum = [0i32];
        w.allreduce(&[w.rank() + 1], &mut sum, ch4::op::sum)?;
        assert_eq!(sum[0], w.size() * (w.size() + 1) / 2);
        Ok(())
    };
    if w.rank() == 0 {
        let mut bufs = vec![[0u32; 1]; COUNT];
        ctx.scope(|s| {
            let reqs = bufs
                .iter_mut()
                .enumerate()
                .map(|(i, b)| w.irecv(s, b, 1, (i % 100) as i32))
                .collect::<Result<Vec<_>>>()?;
            collectives(&w)?;
            w.ssend(&[7u8], 1, 200)?;
            s.wait_all(reqs).map(drop)
        })?;
        for (i, b) in bufs.iter().enumerate() {
            assert_eq!(b[0] as usize, i);
        }
    } else if w.rank() == 1 {
        collectives(&w)?;
        let mut got = [0u8];
        w.recv(&mut got, 0, 200)?;
        assert_eq!(got, [7]);
        for i in 0..COUNT {
            w.send(&[i as u32], 0, (i % 100) as i32)?;
        }
    } else {
        collectives(&w)?;
    }
    Ok(())
}
on_all_routes!(posted_receives_leave_room, 2, outstanding_then_collectives);

/// The same tag on a communicator and its dup never crosses; split groups are isolated.
fn comm_isolation<N: Netmod, S: Shm>(ctx: Context<N, S>) -> Result<()> {
    let w = ctx.world();
    let d = w.dup()?;
    assert_eq!((d.rank(), d.size()), (w.rank(), w.size()));
    if w.rank() == 0 {
        d.send(&[1u8], 1, 0)?;
        w.send(&[2u8], 1, 0)?;
    } else if w.rank() == 1 {
        let mut b = [0u8];
        w.recv(&mut b, ANY_SOURCE, ANY_TAG)?;
        assert_eq!(b, [2], "a dup's message crossed into world");
        d.recv(&mut b, 0, 0)?;
        assert_eq!(b, [1]);
    }
    // Split into evens and odds, reversed order by key.
    let half = w
        .split(w.rank() % 2, -w.rank())?
        .expect("every rank has a color");
    let expected_size = (w.size() + 1 - w.rank() % 2) / 2;
    assert_eq!(half.size(), expected_size);
    let mut sum = [0i32];
    half.allreduce(&[w.rank()], &mut sum, ch4::op::sum)?;
    let want: i32 = (0..w.size()).filter(|r| r % 2 == w.rank() % 2).sum();
    assert_eq!(sum[0], want);
    // Highest world rank first.
    let mut first = [0i32];
    if half.rank() == 0 {
        first[0] = w.rank();
    }
    half.bcast(0, &mut first)?;
    let top = (0..w.size())
        .filter(|r| r % 2 == w.rank() % 2)
        .max()
        .unwrap_or(0);
    assert_eq!(first[0], top);
    // UNDEFINED opts out; create() from a group.
    let none = w.split(if w.rank() == 0 { ch4::UNDEFINED } else { 1 }, 0)?;
    assert_eq!(none.is_none(), w.rank() == 0);
    let g = w.group()?.incl(&[0, 2])?;
    let sub = w.create(&g)?;
    assert_eq!(sub.is_some(), w.rank() == 0 || w.rank() == 2);
    if let Some(sub) = sub {
        let mut v = [sub.rank()];
        sub.bcast(1, &mut v)?;
        assert_eq!(v, [1]);
        sub.free()?;
    }
    half.free()?;
    d.free()?;
    w.barrier()
}
on_all_routes!(comms, 4, comm_isolation, processes = 8);

/// The collectives agree with a serial computation.
fn collectives<N: Netmod, S: Shm>(ctx: Context<N, S>) -> Result<()> {
    let w = ctx.world();
    let (r, n) = (w.rank(), w.size());
    w.barrier()?;
    let mut v = vec![0f64; 100];
    if r == 2 {
        v.iter_mut().enumerate().for_each(|(i, x)| *x = i as f64);
    }
    w.bcast(2, &mut v)?;
    assert!(v.iter().enumerate().all(|(i, &x)| x == i as f64));
    let mine = [r as i64, -(r as i64), 1];
    let mut out = [0i64; 3];
    w.reduce(1, &mine, &mut out, ch4::op::sum)?;
    if r == 1 {
        let s: i64 = (0..n as i64).sum();
        assert_eq!(out, [s, -s, n as i64]);
    }
    let mut mx = [0i64; 3];
    w.allreduce(&mine, &mut mx, ch4::op::max)?;
    assert_eq!(mx, [n as i64 - 1, 0, 1]);
    let mut mn = [0u8; 1];
    w.allreduce(&[r as u8 + 3], &mut mn, ch4::op::min)?;
    assert_eq!(mn, [3]);
    let mut custom = [0u32];
    w.allreduce(&[1u32 << r], &mut custom, |a, b| *a |= *b)?;
    assert_eq!(custom[0], (1u32 << n) - 1);
    // Prefix reductions with an operation that does not commute: (m, c) stands for
    // x -> m x + c, and folding a higher rank's map applies it after the lower ones'.
    let compose = |acc: &mut [u64; 2], later: &[u64; 2]| {
        *acc = [
            acc[0].wrapping_mul(later[0]),
            acc[1].wrapping_mul(later[0]).wrapping_add(later[1]),
        ]
    };
    let map_of = |q: i32| [q as u64 + 2, q as u64 + 1];
    let serial = |upto: i32| {
        (1..upto).fold(map_of(0), |mut acc, q| {
            compose(&mut acc, &map_of(q));
            acc
        })
    };
    let mut inclusive = [[0u64; 2]];
    w.scan(&[map_of(r)], &mut inclusive, compose)?;
    assert_eq!(inclusive[0], serial(r + 1), "scan at rank {r}");
    let mut exclusive = [[7u64; 2]];
    w.exscan(&[map_of(r)], &mut exclusive, compose)?;
    let want = if r == 0 { [7, 7] } else { serial(r) };
    assert_eq!(exclusive[0], want, "exscan at rank {r}");
    let mut everywhere = [[0u64; 2]];
    w.allreduce(&[map_of(r)], &mut everywhere, compose)?;
    assert_eq!(everywhere[0], serial(n), "allreduce at rank {r}");
    // A reduction of it at a root other than 0 keeps rank order too.
    let mut folded = [0u8; 16];
    ctx.device()?.reduce_in_order(
        w.id(),
        n - 1,
        bytemuck::bytes_of(&map_of(r)),
        if r == n - 1 { &mut folded[..] } else { &mut [] },
        |acc: &mut [u8], later: &[u8]| {
            let mut a: [u64; 2] = bytemuck::pod_read_unaligned(acc);
            compose(&mut a, &bytemuck::pod_read_unaligned(later));
            acc.copy_from_slice(bytemuck::bytes_of(&a));
        },
    )?;
    if r == n - 1 {
        let got: [u64; 2] = bytemuck::pod_read_unaligned(&folded);
        assert_eq!(got, serial(n));
    }
    let mut all = vec![0u16; 2 * n as usize];
    w.allgather(&[r as u16, 100 + r as u16], &mut all)?;
    for q in 0..n as usize {
        assert_eq!(&all[2 * q..2 * q + 2], &[q as u16, 100 + q as u16]);
    }
    let mut at_root = vec![0u8; n as usize];
    w.gather(0, &[r as u8], &mut at_root)?;
    if r == 0 {
        assert_eq!(at_root, (0..n as u8).collect::<Vec<_>>());
    }
    // The variable-size ones, at the device (bytes; member q's block is q + 1 long, and the
    // blocks have one-byte gaps between them).
    let (id, nn, me) = (w.id(), n as usize, r as usize);
    let counts: Vec<usize> = (0..nn).map(|q| q + 1).collect();
    let displs: Vec<usize> = (0..nn).map(|q| q * (q + 1) / 2 + q).collect();
    let span = displs[nn - 1] + counts[nn - 1];
    let mut all = vec![0xffu8; span];
    ctx.device()?
        .allgatherv(id, &vec![me as u8; me + 1], &mut all, &counts, &displs)?;
    for q in 0..nn {
        assert!(
            all[displs[q]..][..counts[q]].iter().all(|&b| b == q as u8),
            "{all:?}"
        );
    }
    let packed: Vec<u8> = (0..nn).flat_map(|q| vec![10 + q as u8; q + 1]).collect();
    let mut mine = vec![0u8; me + 1];
    let root_displs: Vec<usize> = (0..nn).map(|q| q * (q + 1) / 2).collect();
    ctx.device()?
        .scatterv(id, 1, &packed, &counts, &root_displs, &mut mine)?;
    assert!(mine.iter().all(|&b| b == 10 + me as u8), "{mine:?}");
    let mut gathered = vec![0u8; packed.len()];
    ctx.device()?
        .gatherv(id, 2, &mine, &mut gathered, &counts, &root_displs)?;
    if r == 2 {
        assert_eq!(gathered, packed);
    }
    // alltoallv: member me sends q + 1 bytes of (me, q) to q, so receives me + 1 from each.
    let out: Vec<u8> = (0..nn)
        .flat_map(|q| vec![(me * 16 + q) as u8; q + 1])
        .collect();
    let rcounts = vec![me + 1; nn];
    let rdispls: Vec<usize> = (0..nn).map(|q| q * (me + 1)).collect();
    let mut back = vec![0u8; nn * (me + 1)];
    ctx.device()?.alltoallv(
        id,
        &out,
        &counts,
        &root_displs,
        &mut back,
        &rcounts,
        &rdispls,
    )?;
    for q in 0..nn {
        assert!(back[rdispls[q]..][..me + 1]
            .iter()
            .all(|&b| b == (q * 16 + me) as u8));
    }
    Ok(())
}
on_all_routes!(coll, 5, collectives, processes = 8);

/// The collectives through the node's shared segment, where they reuse their outboxes every
/// other operation: long runs of broadcasts from changing roots (which may run one operation
/// ahead of the slowest member), reductions to changing roots, allreduces and barriers mixed;
/// disjoint halves of a split sharing a slot number; more communicators than the segment has
/// slots (the later ones go over messages); data larger than an outbox; and members that
/// disagree on a length, which fails at every member instead of reading past the data.
fn node_lanes<N: Netmod, S: Shm>(ctx: Context<N, S>) -> Result<()> {
    let w = ctx.world();
    let (r, n) = (w.rank(), w.size());
    w.barrier()?;
    for i in 0..300i64 {
        let root = (i % n as i64) as i32;
        let mut v = [0i64; 3];
        if r == root {
            v = [i, root as i64, -i];
        }
        w.bcast(root, &mut v)?;
        assert_eq!(v, [i, root as i64, -i], "bcast {i} at rank {r}");
        let mut sum = [0i64; 2];
        let to = ((i + 1) % n as i64) as i32;
        w.reduce(to, &[i + r as i64, 1], &mut sum, ch4::op::sum)?;
        if r == to {
            let want = n as i64 * i + (0..n as i64).sum::<i64>();
            assert_eq!(sum, [want, n as i64], "reduce {i} at rank {r}");
        }
        if i % 3 == 0 {
            let mut mx = [0i64];
            w.allreduce(&[i * 10 + r as i64], &mut mx, ch4::op::max)?;
            assert_eq!(mx, [i * 10 + n as i64 - 1]);
        }
        if i % 7 == 0 {
            w.barrier()?;
        }
    }
    // Larger than an outbox: over messages, between operations through the lanes.
    let mut big = vec![0u32; 4096];
    if r == 0 {
        big.iter_mut().enumerate().for_each(|(k, x)| *x = k as u32);
    }
    w.bcast(0, &mut big)?;
    assert!(big.iter().enumerate().all(|(k, &x)| x == k as u32));
    let mut big_sum = vec![0u32; 4096];
    w.allreduce(&big, &mut big_sum, ch4::op::sum)?;
    assert!(big_sum
        .iter()
        .enumerate()
        .all(|(k, &x)| x == k as u32 * n as u32));
    // Two halves, each its own communicator, agreeing on slots at the same time.
    let half = w.split(r % 2, 0)?.expect("every rank has a color");
    for i in 0..50u64 {
        let mut total = [0u64];
        half.allreduce(&[i + r as u64], &mut total, ch4::op::sum)?;
        let members: Vec<u64> = (0..n as u64).filter(|q| q % 2 == r as u64 % 2).collect();
        let want: u64 = members.iter().map(|q| i + q).sum();
        assert_eq!(total, [want], "half of rank {r}, round {i}");
    }
    // More communicators than slots: every one still reduces correctly.
    let dups = (0..40).map(|_| w.dup()).collect::<Result<Vec<_>>>()?;
    for (k, d) in dups.iter().enumerate() {
        let mut total = [0u64];
        d.allreduce(&[k as u64 + r as u64], &mut total, ch4::op::sum)?;
        let want = n as u64 * k as u64 + (0..n as u64).sum::<u64>();
        assert_eq!(total, [want], "dup {k}");
        d.barrier()?;
    }
    // Through the lanes, rank 0 giving 8 bytes and the others 16 is an error at every member,
    // and the communicator goes on (over messages, MPI leaves the outcome undefined: a
    // member may see a truncation, another nothing).
    if ctx.device()?.collectives_on_node(w.id())? != Some(true) {
        return w.barrier();
    }
    let len = if r == 0 { 1 } else { 2 };
    let mut out = vec![0u64; len];
    let err = w
        .allreduce(&vec![1u64; len], &mut out, ch4::op::sum)
        .expect_err("lengths that differ must fail");
    assert_eq!(err.kind(), ErrorKind::Count, "{err}");
    let mut total = [0u64];
    w.allreduce(&[1u64], &mut total, ch4::op::sum)?;
    assert_eq!(total, [n as u64]);
    w.barrier()
}
on_all_routes!(lanes, 4, node_lanes, processes = 8);

/// Ranks that share a node take the segment's lanes, and a communicator with a member on
/// another node does not.
#[test]
fn lanes_only_within_a_node() {
    common::small(4)
        .ranks_per_node(4)
        .run(|ctx| {
            let w = ctx.world();
            assert_eq!(ctx.device()?.collectives_on_node(w.id())?, None);
            w.barrier()?;
            assert_eq!(ctx.device()?.collectives_on_node(w.id())?, Some(true));
            Ok::<_, ch4::Error>(())
        })
        .unwrap();
    common::small(4)
        .ranks_per_node(2)
        .run(|ctx| {
            let w = ctx.world();
            w.barrier()?;
            assert_eq!(ctx.device()?.collectives_on_node(w.id())?, Some(false));
            // A half whose members share a node takes the lanes.
            let node = w.split(w.rank() / 2, 0)?.expect("every rank has a color");
            node.barrier()?;
            assert_eq!(ctx.device()?.collectives_on_node(node.id())?, Some(true));
            Ok::<_, ch4::Error>(())
        })
        .unwrap();
}

/// Noncontiguous layouts: a strided column is sent and lands in a strided column.
fn layouts<N: Netmod, S: Shm>(ctx: Context<N, S>) -> Result<()> {
    let w = ctx.world();
    // An 8x8 matrix of u32, row-major; send column 3 (8 elements, stride 8).
    let col = ch4::Layout::vector::<u32>(8, 1, 8)?;
    if w.rank() == 0 {
        let m: Vec<u32> = (0..64).collect();
        w.send_layout(&m[3..], &ch4::Layout::vector::<u32>(8, 1, 8)?, 1, 0)?;
        // Also a long strided message through rendezvous (more than EAGER bytes).
        let big: Vec<u32> = (0..1000).collect();
        w.send_layout(&big, &ch4::Layout::vector::<u32>(100, 3, 10)?, 1, 1)?;
    } else if w.rank() == 1 {
        let mut m = vec![0u32; 64];
        let st = w.recv_layout(&mut m[5..], &col, 0, 0)?;
        assert_eq!(st.bytes, 32);
        for row in 0..8 {
            for c in 0..8 {
                let want = if c == 5 { (row * 8 + 3) as u32 } else { 0 };
                assert_eq!(m[row * 8 + c], want, "row {row} col {c}");
            }
        }
        let mut big = vec![u32::MAX; 1000];
        let lay = ch4::Layout::vector::<u32>(100, 3, 10)?;
        w.recv_layout(&mut big, &lay, 0, 1)?;
        for (i, &x) in big.iter().enumerate() {
            let want = if i % 10 < 3 { i as u32 } else { u32::MAX };
            assert_eq!(x, want);
        }
    }
    // Nonblocking, both ways at once: blocks of 40 elements 50 apart (eager and rendezvous
    // pieces of several blocks each), into an indexed layout listing its blocks backwards.
    let send_lay = ch4::Layout::vector::<u32>(6, 40, 50)?;
    let recv_lay = ch4::Layout::indexed::<u32>(&[(500, 120), (0, 120)])?;
    let src: Vec<u32> = (0..300).map(|i| i + 1000 * w.rank() as u32).collect();
    let mut dst = vec![0u32; 620];
    if w.rank() < 2 {
        let peer = 1 - w.rank();
        ctx.scope(|s| {
            let r = w.irecv_layout(s, &mut dst, &recv_lay, peer, 7)?;
            let q = w.isend_layout(s, &src, &send_lay, peer, 7)?;
            s.wait_all(vec![q, r]).map(drop)
        })?;
        let sent: Vec<u32> = (0..6)
            .flat_map(|b| (b * 50..b * 50 + 40).map(|i| i + 1000 * peer as u32))
            .collect();
        assert_eq!(&dst[500..620], &sent[..120]);
        assert_eq!(&dst[0..120], &sent[120..]);
        assert!(dst[120..500].iter().all(|&x| x == 0), "outside the layout");
    }
    // Few pieces (within a NIC's gather and scatter lists: sent and received where they
    // lie), small and large enough for rendezvous.
    for (round, (count, len, stride)) in [(3usize, 4usize, 6usize), (3, 5000, 6000)]
        .into_iter()
        .enumerate()
    {
        let lay = ch4::Layout::vector::<u32>(count, len, stride)?;
        let extent = (count - 1) * stride + len;
        let tag = 20 + round as i32;
        if w.rank() == 0 {
            let src: Vec<u32> = (0..extent as u32).collect();
            w.send_layout(&src, &lay, 1, tag)?;
        } else if w.rank() == 1 {
            let mut dst = vec![u32::MAX; extent];
            let st = w.recv_layout(&mut dst, &lay, 0, tag)?;
            assert_eq!(st.bytes, count * len * 4);
            for (i, &x) in dst.iter().enumerate() {
                let want = if i % stride < len { i as u32 } else { u32::MAX };
                assert_eq!(x, want, "round {round} element {i}");
            }
        }
    }
    w.barrier()
}
on_all_routes!(noncontiguous, 2, layouts);

/// wait_any and test_some hand back every completion exactly once, at the index it was
/// given, and leave its slot empty.
fn completion_sets<N: Netmod, S: Shm>(ctx: Context<N, S>) -> Result<()> {
    let w = ctx.world();
    if w.rank() == 0 {
        // Small sends finish as they start (their handles name no request), the large one goes
        // by rendezvous: wait_any and test_some must take both kinds.
        let small: Vec<[u8; 1]> = (0..8u8).map(|i| [i]).collect();
        let large = vec![9u8; 5000];
        let done = ctx.scope(|s| {
            let mut reqs = Vec::new();
            for (i, b) in small.iter().enumerate() {
                reqs.push(Some(w.isend(s, b, 1, i as i32)?));
            }
            reqs.push(Some(w.isend(s, &large, 1, 50)?));
            let mut done = vec![false; reqs.len()];
            let (i, first) = s.wait_any(&mut reqs)?.expect("active requests");
            assert_eq!(first?.error, None);
            assert!(reqs[i].is_none(), "a completed request leaves its slot");
            done[i] = true;
            while reqs.iter().any(Option::is_some) {
                for (i, st) in s.test_some(&mut reqs)? {
                    st?;
                    assert!(!done[i], "request {i} completed twice");
                    done[i] = true;
                }
            }
            assert_eq!(
                s.wait_any(&mut reqs)?.map(|(i, _)| i),
                None,
                "no active request"
            );
            Ok::<_, ch4::Error>(done)
        })?;
        assert!(done.iter().all(|&d| d));
    } else if w.rank() == 1 {
        let mut large = vec![0u8; 5000];
        let mut bufs = [[0u8; 1]; 8];
        let seen = ctx.scope(|s| {
            let mut reqs = Vec::new();
            // Slot j receives tag 7 - j.
            for (i, b) in bufs.iter_mut().enumerate().rev() {
                reqs.push(Some(w.irecv(s, b, 0, i as i32)?));
            }
            let mut seen = 0;
            let (j, first) = s.wait_any(&mut reqs)?.expect("active requests");
            assert_eq!(first?.tag, 7 - j as i32, "the index is the request's slot");
            seen += 1;
            while reqs.iter().any(Option::is_some) {
                for (j, st) in s.wait_some(&mut reqs)? {
                    assert_eq!(st?.tag, 7 - j as i32);
                    seen += 1;
                }
            }
            Ok::<_, ch4::Error>(seen)
        })?;
        assert_eq!(seen, 8);
        for (i, b) in bufs.iter().enumerate() {
            assert_eq!(b[0] as usize, i);
        }
        w.recv(&mut large, 0, 50)?;
        assert!(large.iter().all(|&b| b == 9));
    }
    w.barrier()
}
on_all_routes!(wait_any_test_some, 2, completion_sets);

/// A request that completes with an error leaves its set like one that completes well: its
/// index and its error (with the status as data) come back, its slot is emptied, and the other
/// requests of the set are still collected — with every member of the wait and test families.
fn errors_in_sets<N: Netmod, S: Shm>(ctx: Context<N, S>) -> Result<()> {
    let w = ctx.world();
    // Rounds: 1 = wait_any alone, 2 = wait_any with a good receive beside, 3 = test_any,
    // 4 = test_some, 5 = wait_some, 6 = wait_all, 7 = test_all, 8 = a rendezvous message
    // truncated. Each round rank 0 sends one byte with tag 0 (for the too-short receive) and
    // one with tag 1 (for the good one).
    const ROUNDS: i32 = 8;
    if w.rank() == 0 {
        for round in 1..=ROUNDS {
            let long = vec![round as u8; if round == 8 { 3 * EAGER } else { 1 }];
            w.send(&long, 1, 0)?;
            w.send(&[round as u8], 1, 1)?;
        }
        return w.barrier();
    }
    if w.rank() != 1 {
        return w.barrier();
    }
    let truncated = |e: &ch4::Error| {
        assert_eq!(e.kind(), ErrorKind::Truncate, "{e}");
        let st = e.status().expect("a truncation keeps its status");
        assert_eq!((st.source, st.tag, st.bytes), (0, 0, 0), "{e}");
        assert_eq!(st.error, Some(ErrorKind::Truncate));
        assert!(e.to_string().contains("truncated"), "{e}");
    };
    for round in 1..=ROUNDS {
        let mut short: [u8; 0] = [];
        let mut good = [0u8; 1];
        ctx.scope(|s| -> Result<()> {
            match round {
                1 => {
                    let mut set = [Some(w.irecv(s, &mut short, 0, 0)?)];
                    let (i, outcome) = s.wait_any(&mut set)?.expect("one active request");
                    assert_eq!(i, 0);
                    truncated(&outcome.unwrap_err());
                    assert!(set[0].is_none());
                    assert!(s.wait_any(&mut set)?.is_none(), "the set is spent");
                    w.recv(&mut good, 0, 1)?;
                }
                2 => {
                    let mut set = [
                        Some(w.irecv(s, &mut short, 0, 0)?),
                        Some(w.irecv(s, &mut good, 0, 1)?),
                    ];
                    let mut seen = [false; 2];
                    while let Some((i, outcome)) = s.wait_any(&mut set)? {
                        seen[i] = true;
                        match i {
                            0 => truncated(&outcome.unwrap_err()),
                            _ => assert_eq!(outcome?.bytes, 1),
                        }
                    }
                    assert_eq!(seen, [true, true]);
                }
                3 => {
                    let mut set = [None, Some(w.irecv(s, &mut short, 0, 0)?)];
                    let (i, outcome) = loop {
                        if let Some(done) = s.test_any(&mut set)? {
                            break done;
                        }
                    };
                    assert_eq!(i, 1, "indices count inactive slots too");
                    truncated(&outcome.unwrap_err());
                    assert!(s.test_any(&mut set)?.is_none());
                    w.recv(&mut good, 0, 1)?;
                }
                4 | 5 => {
                    let mut set = [
                        Some(w.irecv(s, &mut good, 0, 1)?),
                        Some(w.irecv(s, &mut short, 0, 0)?),
                    ];
                    let mut seen = Vec::new();
                    while set.iter().any(Option::is_some) {
                        let done = if round == 4 {
                            s.test_some(&mut set)?
                        } else {
                            s.wait_some(&mut set)?
                        };
                        for (i, outcome) in done {
                            seen.push(i);
                            match i {
                                1 => truncated(&outcome.unwrap_err()),
                                _ => assert_eq!(outcome?.bytes, 1),
                            }
                        }
                    }
                    seen.sort_unstable();
                    assert_eq!(seen, [0, 1]);
                }
                6 => {
                    let set = vec![w.irecv(s, &mut short, 0, 0)?, w.irecv(s, &mut good, 0, 1)?];
                    let e = s.wait_all(set).unwrap_err();
                    assert_eq!(e.kind(), ErrorKind::InStatus, "{e}");
                    let st = e.statuses().expect("every status");
                    assert_eq!(st.len(), 2);
                    assert_eq!(st[0].error, Some(ErrorKind::Truncate));
                    assert_eq!((st[1].error, st[1].bytes, st[1].tag), (None, 1, 1));
                }
                7 => {
                    let mut set = [
                        Some(w.irecv(s, &mut short, 0, 0)?),
                        None,
                        Some(w.irecv(s, &mut good, 0, 1)?),
                    ];
                    let e = loop {
                        match s.test_all(&mut set) {
                            Ok(None) => assert!(set[0].is_some() && set[2].is_some()),
                            Ok(Some(_)) => panic!("test_all hid the truncation"),
                            Err(e) => break e,
                        }
                    };
                    assert_eq!(e.kind(), ErrorKind::InStatus, "{e}");
                    let st = e.statuses().expect("every status");
                    assert_eq!(st[0].error, Some(ErrorKind::Truncate));
                    assert_eq!(st[1], Status::EMPTY, "an inactive slot");
                    assert_eq!((st[2].error, st[2].bytes), (None, 1));
                    assert!(set.iter().all(Option::is_none));
                }
                _ => {
                    let mut set = [Some(w.irecv(s, &mut short, 0, 0)?)];
                    let (_, outcome) = s.wait_any(&mut set)?.expect("one active request");
                    let e = outcome.unwrap_err();
                    assert_eq!(e.kind(), ErrorKind::Truncate, "{e}");
                    assert_eq!(e.status().map(|st| (st.source, st.tag)), Some((0, 0)));
                    w.recv(&mut good, 0, 1)?;
                }
            }
            Ok(())
        })?;
        assert_eq!(good[0], round as u8, "round {round}: the good receive");
    }
    w.barrier()
}
on_all_routes!(set_errors, 2, errors_in_sets);

/// A request forgotten with mem::forget is still completed by its scope before the buffer's
/// borrow ends.
fn forgotten_request<N: Netmod, S: Shm>(ctx: Context<N, S>) -> Result<()> {
    let w = ctx.world();
    if w.rank() == 0 {
        let mut buf = [0u64; 16];
        ctx.scope(|s| {
            let r = w.irecv(s, &mut buf, 1, 0)?;
            // The point of the test: forgetting must not let the buffer go while the device
            // still holds it (Request has no Drop precisely so that nothing depends on it).
            #[allow(clippy::forget_non_drop)]
            std::mem::forget(r);
            w.send(&[1u8], 1, 1) // let rank 1 send now
        })?;
        assert_eq!(
            buf, [7u64; 16],
            "the scope returned before the receive completed"
        );
    } else if w.rank() == 1 {
        w.recv(&mut [0u8], 0, 1)?;
        w.send(&[7u64; 16], 0, 0)?;
    }
    w.barrier()
}
on_all_routes!(forget_is_sound, 2, forgotten_request);

/// A peer that dies makes a receive from it fail instead of hanging.
#[test]
fn dead_peer_fails_the_request() {
    let results = ch4::threads::Threads::new(2)
        .ranks_per_node(1)
        .run_with::<inproc::InprocNet<inproc::AmOnly>, _, _>(|ctx| {
            let w = ctx.world();
            if w.rank() == 1 {
                return Ok(None); // exits without sending: its endpoints close
            }
            let mut b = [0u8; 4];
            Ok(Some(w.recv(&mut b, 1, 0).unwrap_err().kind()))
        })
        .unwrap();
    assert_eq!(results[0], Some(ErrorKind::PeerFailed));
}

/// A peer's last messages are still delivered after it died: a receive for one of them must
/// not fail with PeerFailed just because the death was noticed first (regression: `test` used
/// to check for peer failure while progress was still delivering).
#[test]
fn messages_of_a_dead_peer_are_still_delivered() {
    let results = ch4::threads::Threads::new(2)
        .ranks_per_node(1)
        .run_with::<inproc::InprocNet<inproc::AmOnly>, _, _>(|ctx| {
            let w = ctx.world();
            if w.rank() == 1 {
                for tag in 0..100 {
                    w.send(&[tag as u8], 0, tag)?;
                }
                return Ok(true);
            }
            use ch4_core::AmTransport;
            while !ctx.device()?.netmod().peer_failed(1) {
                std::thread::yield_now();
            }
            let mut b = [0u8];
            let got = ctx.scope(|s| {
                let mut r = w.irecv(s, &mut b, 1, 99)?;
                loop {
                    if let Some(st) = r.test()? {
                        return Ok::<_, ch4::Error>(st);
                    }
                }
            })?;
            assert_eq!((got.tag, b[0]), (99, 99));
            let mut c = [0u8];
            w.recv(&mut c, 1, 98)?;
            Ok(c[0] == 98)
        })
        .unwrap();
    assert!(results.iter().all(|&ok| ok));
}

/// A rank that returns right after its last send still delivers everything: messages that found
/// the ring full wait in the transport, and the rank's end flushes them (regression: they were
/// lost with the rank, and the receiver failed with PeerFailed).
#[test]
fn a_rank_that_ends_still_delivers_what_its_transport_queued() {
    const COUNT: usize = 100;
    const SIZE: usize = 16 << 10; // eager, 1.6 MB in all: more than one ring holds
    ch4::threads::Threads::new(2)
        .run(|ctx| {
            let w = ctx.world();
            if w.rank() == 0 {
                for i in 0..COUNT {
                    w.send(&vec![i as u8; SIZE], 1, 0)?;
                }
                return Ok(());
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
            let mut buf = vec![0u8; SIZE];
            for i in 0..COUNT {
                let st = w.recv(&mut buf, 0, 0)?;
                assert_eq!(st.bytes, SIZE);
                assert!(buf.iter().all(|&b| b == i as u8), "message {i}");
            }
            Ok(())
        })
        .unwrap();
}

/// Strangers at every rank's port — garbage bytes, and a well-formed hello with the wrong job
/// key — while the job runs: each is refused (the one with the hello hears so) and dropped, and
/// the rank's own traffic is untouched. Processes over TCP only: the port is the real one.
#[cfg(all(feature = "tcp", not(any(feature = "ofi", feature = "ucx"))))]
fn strangers_at_the_port(ctx: ch4::process::ProcessContext) -> Result<()> {
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::time::{Duration, Instant};

    let w = ctx.world();
    let addr = ctx.device()?.netmod().local_addr();
    let io = |e: std::io::Error| ch4::Error::new(ErrorKind::Transport, e.to_string());
    let mut junk = TcpStream::connect(addr).map_err(io)?;
    junk.write_all(&[0xAB; 100]).map_err(io)?;
    let mut wrong = TcpStream::connect(addr).map_err(io)?;
    let mut hello = b"ch4tcp\0\x02".to_vec();
    hello.extend(0xDEAD_BEEFu64.to_le_bytes()); // not this job's key
    hello.extend([0u8; 8]); // rank 0, generation 0
    hello.extend(0x0102_0304u32.to_ne_bytes()); // byte-order mark
    wrong.write_all(&hello).map_err(io)?;
    // Ring traffic across the eager limit while the strangers wait.
    let (right, left) = (
        (w.rank() + 1) % w.size(),
        (w.rank() + w.size() - 1) % w.size(),
    );
    for i in 0..40 {
        let n = (i * 37) % 300;
        let mut buf = vec![0u8; 300];
        let st = w.sendrecv(&pattern(i, n), right, 3, &mut buf, left, 3)?;
        assert_eq!(&buf[..st.bytes], &pattern(i, n)[..], "message {i}");
    }
    // The rank answered the hello with a refusal and hung up on both.
    for s in [&junk, &wrong] {
        s.set_nonblocking(true).map_err(io)?;
    }
    let (mut answer, mut junk_closed) = (Vec::new(), false);
    let start = Instant::now();
    while answer.len() < 8 || !junk_closed {
        ctx.progress()?;
        let mut b = [0u8; 64];
        match wrong.read(&mut b) {
            Ok(n) => answer.extend_from_slice(&b[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(io(e)),
        }
        match junk.read(&mut b) {
            Ok(0) => junk_closed = true,
            Ok(_) => {} // its refusal
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => junk_closed = true, // a reset also means it was dropped
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "strangers not dealt with"
        );
    }
    assert_eq!(&answer[..4], b"ch4a");
    assert_eq!(
        u32::from_le_bytes(answer[4..8].try_into().unwrap()),
        2,
        "REFUSED"
    );
    w.barrier()
}

#[cfg(all(feature = "tcp", not(any(feature = "ofi", feature = "ucx"))))]
mod strangers {
    use super::*;

    #[test]
    fn tcp_processes() {
        common::jobs::processes_over_tcp(module_path!(), 3);
    }

    #[test]
    #[ignore = "one rank of a process job: tcp_processes starts it"]
    fn rank() {
        common::jobs::as_rank(strangers_at_the_port);
    }
}

/// A connection storm: at start every rank sends to every other at once (all connect to all
/// simultaneously, so many pairs connect from both ends), messages on both sides of the eager
/// limit, then receives from everyone with ANY_SOURCE; every message arrives once, whole, and in
/// order per sender.
fn all_to_all_at_start<N: Netmod, S: Shm>(ctx: Context<N, S>) -> Result<()> {
    let w = ctx.world();
    let (me, n) = (w.rank(), w.size());
    let per_peer = 6usize;
    let size_of = |from: i32, i: usize| (from as usize * 13 + i * 41) % (3 * EAGER);
    let outgoing: Vec<(i32, usize, Vec<u8>)> = (0..per_peer)
        .flat_map(|i| (0..n).filter(move |&d| d != me).map(move |d| (d, i)))
        .map(|(d, i)| (d, i, pattern(me as usize * 100 + i, size_of(me, i))))
        .collect();
    let mut next = vec![0usize; n as usize];
    ctx.scope(|s| {
        let reqs = outgoing
            .iter()
            .map(|(d, i, b)| w.isend(s, b, *d, *i as i32))
            .collect::<Result<Vec<_>>>()?;
        for _ in 0..per_peer * (n as usize - 1) {
            let mut buf = vec![0u8; 3 * EAGER];
            let st = w.recv(&mut buf, ANY_SOURCE, ANY_TAG)?;
            let i = next[st.source as usize];
            assert_eq!(st.tag, i as i32, "from {} in order", st.source);
            let want = pattern(st.source as usize * 100 + i, size_of(st.source, i));
            assert_eq!(
                &buf[..st.bytes],
                &want[..],
                "message {i} from {}",
                st.source
            );
            next[st.source as usize] += 1;
        }
        s.wait_all(reqs).map(drop)
    })?;
    assert!(next
        .iter()
        .enumerate()
        .all(|(r, &c)| c == if r as i32 == me { 0 } else { per_peer }));
    Ok(())
}
on_all_routes!(storm, 4, all_to_all_at_start, processes = 8);

/// Operations that own their buffer: sent and received without a scope, handed back with the
/// outcome (also a truncated one), dropped while pending (a receive is cancelled, a send still
/// delivered), forgotten (the buffer leaks, nothing breaks), and matched-probe receives.
fn owned_buffers<N: Netmod, S: Shm>(ctx: Context<N, S>) -> Result<()> {
    let w = ctx.world();
    let long = 3 * EAGER; // by rendezvous on the route tests' tiny limits
    if w.rank() == 0 {
        for (tag, len) in [(0, 10), (1, long)] {
            let (back, st) = w.isend_owned(pattern(tag, len), 1, tag as i32)?.wait();
            st?;
            assert_eq!(
                back,
                pattern(tag, len),
                "the send's buffer comes back intact"
            );
        }
        // A send dropped while pending (rendezvous: rank 1 receives it only later) still
        // arrives.
        drop(w.isend_owned(pattern(2, long), 1, 2)?);
        w.send(&pattern(3, 20), 1, 3)?; // truncated at rank 1
        w.send(&pattern(4, 8), 1, 4)?; // for the receive after the cancelled one
        w.send(&pattern(5, long), 1, 5)?; // matched probe, then irecv_owned
        w.send(&pattern(6, 30), 1, 6)?; // matched probe, then irecv in a scope
        w.send(&[7u8; 4], 1, 7)?; // into a forgotten receive's buffer
    } else if w.rank() == 1 {
        for (tag, len) in [(0usize, 10usize), (1, long)] {
            let r = w.irecv_owned(vec![0u8; len + 5], 0, tag as i32)?;
            assert!(r.is_receive());
            let (got, st) = r.wait();
            assert_eq!(st?.bytes, len);
            assert_eq!(&got[..len], &pattern(tag, len)[..]);
        }
        let (got, st) = w.irecv_owned(vec![0u8; long], 0, 2)?.wait();
        assert_eq!((st?.bytes, got), (long, pattern(2, long)));
        // Truncated: the buffer comes back (filled where the route fills a truncated
        // receive), the error keeps the status.
        let fills = ctx.device()?.caps().fills_truncated;
        let (got, st) = w.irecv_owned(vec![0u8; 10], 0, 3)?.wait();
        let e = st.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Truncate);
        assert_eq!(e.status().map(|s| (s.source, s.tag)), Some((0, 3)));
        assert_eq!(got.len(), 10);
        if fills {
            assert_eq!(got, pattern(3, 20)[..10]);
        }
        // Dropped before a message came: cancelled, so tag 4 goes to the next receive.
        drop(w.irecv_owned(vec![0u8; 8], 0, 99)?);
        let mut b = [0u8; 8];
        w.recv(&mut b, 0, 4)?;
        assert_eq!(b[..], pattern(4, 8)[..]);
        // Matched probe, then an owned receive, and one in a scope.
        let (msg, st) = w.mprobe(0, 5)?;
        assert_eq!(st.bytes, long);
        let mut req = msg.irecv_owned(vec![0u8; long])?;
        while !req.test()? {}
        let (got, st) = req.wait();
        assert_eq!((st?.bytes, got), (long, pattern(5, long)));
        let (msg, _) = w.mprobe(0, 6)?;
        let mut into = [0u8; 30];
        ctx.scope(|s| msg.irecv(s, &mut into)?.wait().map(drop))?;
        assert_eq!(into[..], pattern(6, 30)[..]);
        // Forgotten: the buffer leaks, the receive still completes into it, nothing breaks.
        std::mem::forget(w.irecv_owned(vec![0u8; 4], 0, 7)?);
    }
    w.barrier()
}
on_all_routes!(owned, 2, owned_buffers);

/// Rank translation between communicators (MPI_Group_translate_ranks).
fn translation<N: Netmod, S: Shm>(ctx: Context<N, S>) -> Result<()> {
    let w = ctx.world();
    let (rank, size) = (w.rank(), w.size());
    // The odd ranks, in reverse order.
    let odd = w.split(rank % 2, -rank)?.expect("every rank has a color");
    let all: Vec<i32> = (0..size).collect();
    let to_odd = w.translate_ranks(&all, &odd)?;
    for (r, t) in all.iter().zip(&to_odd) {
        let want = (r % 2 == rank % 2).then(|| {
            let members: Vec<i32> = (0..size).filter(|m| m % 2 == rank % 2).rev().collect();
            members.iter().position(|m| m == r).unwrap() as i32
        });
        assert_eq!(*t, want, "world rank {r}");
    }
    assert_eq!(odd.translate_rank(odd.rank(), &w)?, Some(rank));
    assert_eq!(
        w.translate_rank(ch4::PROC_NULL, &odd)?,
        Some(ch4::PROC_NULL)
    );
    let e = w.translate_rank(size, &odd).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Rank);
    w.barrier()
}
on_all_routes!(translate_ranks, 4, translation);

/// A rank finalizes explicitly: refused while a request is pending, then done; later calls
/// fail with a clear error; finalizing again (as the runner and `as_rank` do) is a no-op.
fn explicit_finalize<N: Netmod, S: Shm>(ctx: Context<N, S>) -> Result<()> {
    let w = ctx.world();
    let pending = w.irecv_owned(vec![0u8; 4], ch4::ANY_SOURCE, 77)?;
    let e = ctx.finalize().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Pending, "{e}");
    assert!(!ctx.is_finalized());
    pending.cancel()?;
    let (_, st) = pending.wait();
    assert!(st?.cancelled);
    w.barrier()?;
    ctx.finalize()?;
    assert!(ctx.is_finalized());
    let e = w.send(&[1u8], 0, 0).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Comm);
    assert!(e.to_string().contains("finalized"), "{e}");
    assert_eq!(
        ctx.world().size(),
        0,
        "a finalized rank's communicators have no members"
    );
    ctx.finalize()
}
on_all_routes!(finalize, 2, explicit_finalize);

/// A message taken by a matched probe and dropped unreceived is discarded, not leaked: its
/// sender completes — a rendezvous sender waits for the receiver to take the data, a
/// synchronous one for the match — and the next message still arrives.
fn dropped_probed_messages<N: Netmod, S: Shm>(ctx: Context<N, S>) -> Result<()> {
    let w = ctx.world();
    let long = 3 * EAGER; // by rendezvous on the route tests' tiny limits
    if w.rank() == 0 {
        let big = pattern(1, long);
        ctx.scope(|s| {
            let a = w.isend(s, &big, 1, 1)?;
            let b = w.issend(s, &[2u8; 16], 1, 2)?;
            a.wait()?;
            b.wait().map(drop)
        })?;
        w.send(&[3u8; 4], 1, 3)?;
    } else if w.rank() == 1 {
        for tag in [1, 2] {
            let (msg, st) = w.mprobe(0, tag)?;
            assert_eq!(st.tag, tag);
            drop(msg);
        }
        let mut b = [0u8; 4];
        let st = w.recv(&mut b, 0, ANY_TAG)?;
        assert_eq!((st.tag, b), (3, [3u8; 4]), "a dropped message came back");
    }
    w.barrier()
}
on_all_routes!(dropped_probe, 2, dropped_probed_messages);

/// ANY_SOURCE under pressure, where it is hardest (MPICH's largest recurring bug class): rank 0
/// keeps a window of ANY_SOURCE, ANY_TAG receives posted and cancels some of them right after
/// posting, while every other rank sends it messages of every protocol (empty, eager,
/// rendezvous, synchronous) — on mixed routes some senders share its node and some do not, so
/// each receive is partnered across shm and the netmod. Every message must arrive exactly once,
/// whole, and per sender in posting order; a cancel either takes effect (no data) or loses the
/// race to a message, which then counts like any other; nothing is left over.
fn any_source_storm<N: Netmod, S: Shm>(ctx: Context<N, S>) -> Result<()> {
    const PER_SENDER: usize = 30;
    const WINDOW: usize = 8;
    const SIZES: [usize; 6] = [0, 8, 300, 5_000, 20_000, 65_536];
    let w = ctx.world();
    let senders = (w.size() - 1) as usize;
    let message = |src: usize, seq: usize| {
        let len = SIZES[(seq + src) % SIZES.len()];
        let mut m = pattern(src * 1000 + seq, len);
        if len >= 2 {
            m[..2].copy_from_slice(&[src as u8, seq as u8]);
        }
        m
    };
    if w.rank() != 0 {
        let src = w.rank() as usize;
        for seq in 0..PER_SENDER {
            let m = message(src, seq);
            if seq % 4 == 1 {
                w.ssend(&m, 0, (seq % 5) as i32)?;
            } else {
                w.send(&m, 0, (seq % 5) as i32)?;
            }
        }
        return w.barrier();
    }
    let total = senders * PER_SENDER;
    // Every receive gets its own buffer: at most all messages plus the cancelled ones.
    let mut bufs: Vec<Vec<u8>> = (0..2 * total + WINDOW).map(|_| vec![0u8; 65_536]).collect();
    let mut got: Vec<(usize, Status)> = Vec::new(); // (receive number, status)
    let mut cancelled = 0usize;
    ctx.scope(|s| -> Result<()> {
        let mut free = bufs.iter_mut();
        let mut slots: Vec<Option<_>> = (0..WINDOW).map(|_| None).collect();
        let mut number = [0usize; WINDOW]; // which receive sits in each slot
        let mut posted = 0usize;
        macro_rules! post {
            ($i:expr) => {{
                let buf = free.next().expect("buffers for every receive");
                let r = w.irecv(s, buf, ANY_SOURCE, ANY_TAG)?;
                if posted % 5 == 3 {
                    r.cancel()?;
                }
                slots[$i] = Some(r);
                number[$i] = posted;
                posted += 1;
            }};
        }
        for i in 0..WINDOW {
            post!(i);
        }
        while got.len() < total {
            let (i, outcome) = s.wait_any(&mut slots)?.expect("the window is never empty");
            let st = outcome?;
            if st.cancelled {
                cancelled += 1;
            } else {
                got.push((number[i], st));
            }
            post!(i);
        }
        // Whatever is still posted must find nothing: cancel it all.
        for r in slots.iter().flatten() {
            r.cancel()?;
        }
        while let Some((_, outcome)) = s.wait_any(&mut slots)? {
            let st = outcome?;
            assert!(st.cancelled, "a receive found a message too many: {st:?}");
        }
        Ok(())
    })?;
    assert!(cancelled > 0 || total < 5, "no cancel took effect");
    got.sort_by_key(|&(n, _)| n);
    let mut next = vec![0usize; w.size() as usize];
    for (n, st) in &got {
        let src = st.source as usize;
        let seq = next[src];
        let want = message(src, seq);
        assert_eq!(st.bytes, want.len(), "size of message {seq} from {src}");
        assert_eq!(st.tag, (seq % 5) as i32, "tag of message {seq} from {src}");
        assert_eq!(
            &bufs[*n][..want.len()],
            &want[..],
            "message {seq} from {src}"
        );
        next[src] += 1;
    }
    assert!(next[1..].iter().all(|&k| k == PER_SENDER), "{next:?}");
    assert!(
        w.iprobe(ANY_SOURCE, ANY_TAG)?.is_none(),
        "a message left over"
    );
    w.barrier()
}
on_all_routes!(any_source_storm_test, 4, any_source_storm);

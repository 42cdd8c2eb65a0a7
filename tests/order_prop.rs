//! Property test of MPI's non-overtaking rule over every route.
//!
//! A random list of messages (size, tag, standard or synchronous) goes from rank 0 to rank 1.
//! Rank 1 receives them with a random mix of specific-tag and ANY_TAG receives, some posted
//! nonblocking before anything is sent (matched on arrival: the posted-queue path), the others
//! blocking afterwards (matched from the unexpected queue). A simple model says which message
//! each receive must get: going through the receives in the order they were posted, each takes
//! the earliest-sent message not yet taken that matches its tag. The run must agree with the
//! model receive for receive, byte for byte, on shared memory, on the active-message netmod, on
//! the natively matching netmod, and on the active-message netmod with shuffled delivery.

mod common;

use ch4::{Context, Netmod, Result, SendMode, Shm, Status, Tag, ANY_TAG};
use common::pattern;
use proptest::prelude::*;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

/// Receive buffers are this big: larger than any message, so nothing truncates and bytes past
/// the message can be checked untouched.
const CAP: usize = 400;
/// What receive buffers are filled with before the receive.
const FILL: u8 = 0xEE;

/// One message of the sender's list.
#[derive(Debug, Clone, Copy)]
struct Msg {
    size: usize,
    tag: Tag,
    sync: bool,
}

/// How the receiver does one receive.
#[derive(Debug, Clone, Copy)]
struct RecvChoice {
    /// ANY_TAG instead of a specific tag.
    any_tag: bool,
    /// Posted nonblocking before the first send, instead of a blocking receive afterwards.
    nonblocking: bool,
    /// For a specific tag: which message still unreceived lends its tag (modulo their count),
    /// so that every receive has a message and the job cannot deadlock.
    pick: usize,
}

/// A generated case: the messages, and one receive choice per message.
#[derive(Debug, Clone)]
struct Case {
    msgs: Vec<Msg>,
    recvs: Vec<RecvChoice>,
}

fn case() -> impl Strategy<Value = Case> {
    prop::collection::vec((0usize..400, 0 as Tag..3, any::<bool>()), 1..32).prop_flat_map(|m| {
        let n = m.len();
        let msgs: Vec<Msg> = m
            .into_iter()
            .map(|(size, tag, sync)| Msg { size, tag, sync })
            .collect();
        prop::collection::vec((any::<bool>(), any::<bool>(), any::<usize>()), n).prop_map(
            move |r| Case {
                msgs: msgs.clone(),
                recvs: r
                    .into_iter()
                    .map(|(any_tag, nonblocking, pick)| RecvChoice {
                        any_tag,
                        nonblocking,
                        pick,
                    })
                    .collect(),
            },
        )
    })
}

/// The order the receiver posts its receives in: the nonblocking ones first (before the
/// sender starts), then the blocking ones, each in list order.
fn post_order(recvs: &[RecvChoice]) -> Vec<usize> {
    let nb = (0..recvs.len()).filter(|&j| recvs[j].nonblocking);
    let bl = (0..recvs.len()).filter(|&j| !recvs[j].nonblocking);
    nb.chain(bl).collect()
}

/// The tag each receive asks for. A specific tag is borrowed from a message no earlier-posted
/// receive takes, so every receive has a message (the job terminates) while specific tags
/// still reach past earlier messages of other tags.
fn receive_tags(case: &Case) -> Vec<Tag> {
    let n = case.msgs.len();
    let mut taken = vec![false; n];
    let mut tags = vec![ANY_TAG; n];
    for j in post_order(&case.recvs) {
        let r = case.recvs[j];
        if !r.any_tag {
            let open: Vec<usize> = (0..n).filter(|&i| !taken[i]).collect();
            tags[j] = case.msgs[open[r.pick % open.len()]].tag;
        }
        if let Some(m) = (0..n).find(|&i| !taken[i] && matches(tags[j], case.msgs[i].tag)) {
            taken[m] = true;
        }
    }
    tags
}

fn matches(want: Tag, tag: Tag) -> bool {
    want == ANY_TAG || want == tag
}

/// The model: in posting order, each receive takes the earliest-sent message not yet taken
/// that matches its tag (all messages come from the one sender). `None`: nothing for it.
fn expected(msgs: &[Msg], tags: &[Tag], post: &[usize]) -> Vec<Option<usize>> {
    let mut taken = vec![false; msgs.len()];
    let mut out = vec![None; tags.len()];
    for &j in post {
        let m = (0..msgs.len()).find(|&i| !taken[i] && matches(tags[j], msgs[i].tag));
        if let Some(m) = m {
            taken[m] = true;
        }
        out[j] = m;
    }
    out
}

/// The content of message `i`.
fn content(i: usize, size: usize) -> Vec<u8> {
    pattern(i, size)
}

/// One job: rank 0 sends every message nonblocking (synchronous ones with issend) and waits for
/// all at the end; rank 1 posts its nonblocking receives, lets rank 0 start (a barrier), does
/// its blocking receives in order, then waits for the rest. Rank 1 returns, per receive, the
/// status and the whole buffer; rank 0 an empty list.
fn exchange<N: Netmod, S: Shm>(
    ctx: Context<N, S>,
    case: &Case,
    tags: &[Tag],
) -> Result<Vec<(Status, Vec<u8>)>> {
    let w = ctx.world();
    let n = case.msgs.len();
    if w.rank() == 0 {
        let data: Vec<Vec<u8>> = case
            .msgs
            .iter()
            .enumerate()
            .map(|(i, m)| content(i, m.size))
            .collect();
        w.barrier()?;
        ctx.scope(|s| {
            let reqs = case
                .msgs
                .iter()
                .zip(&data)
                .map(|(m, d)| {
                    let mode = if m.sync {
                        SendMode::Synchronous
                    } else {
                        SendMode::Standard
                    };
                    w.isend_mode(s, d, 1, m.tag, mode)
                })
                .collect::<Result<Vec<_>>>()?;
            s.wait_all(reqs).map(drop)
        })?;
        w.barrier()?;
        return Ok(Vec::new());
    }
    let nb: Vec<usize> = (0..n).filter(|&j| case.recvs[j].nonblocking).collect();
    let bl: Vec<usize> = (0..n).filter(|&j| !case.recvs[j].nonblocking).collect();
    let mut nb_bufs = vec![vec![FILL; CAP]; nb.len()];
    let mut out: Vec<Option<(Status, Vec<u8>)>> = vec![None; n];
    let nb_status = ctx.scope(|s| {
        let reqs = nb
            .iter()
            .zip(nb_bufs.iter_mut())
            .map(|(&j, b)| w.irecv(s, b, 0, tags[j]))
            .collect::<Result<Vec<_>>>()?;
        w.barrier()?;
        for &j in &bl {
            let mut b = vec![FILL; CAP];
            let st = w.recv(&mut b, 0, tags[j])?;
            out[j] = Some((st, b));
        }
        s.wait_all(reqs)
    })?;
    for ((&j, st), b) in nb.iter().zip(nb_status).zip(nb_bufs) {
        out[j] = Some((st, b));
    }
    w.barrier()?;
    Ok(out.into_iter().flatten().collect())
}

/// One route configuration: runs a case's job and returns every rank's result.
type Job = fn(&Case, &[Tag]) -> Result<Vec<Vec<(Status, Vec<u8>)>>>;

/// How long a job of at most 31 small messages may take before it counts as hung. A wrong
/// match usually shows as a hang (a later receive is left with nothing to match), so this
/// turns it into a failing, shrinkable case instead of a stuck test.
const HANG: Duration = Duration::from_secs(20);

/// Runs `case` on one route configuration and compares every receive with the model.
fn check(case: &Case, job: Job) -> std::result::Result<(), TestCaseError> {
    let tags = receive_tags(case);
    let want = expected(&case.msgs, &tags, &post_order(&case.recvs));
    prop_assert!(
        want.iter().all(Option::is_some),
        "generator bug: a receive with no message"
    );
    let (tx, rx) = mpsc::channel();
    let (c, t) = (case.clone(), tags.clone());
    // The job runs on its own thread so that a hang can be reported; a hung job's threads are
    // left behind (they end with the test process).
    std::thread::spawn(move || {
        let _ = tx.send(job(&c, &t));
    });
    let ranks = match rx.recv_timeout(HANG) {
        Ok(r) => r.map_err(|e| TestCaseError::fail(format!("job failed: {e}")))?,
        Err(RecvTimeoutError::Timeout) => {
            return Err(TestCaseError::fail(format!(
                "job hung for {HANG:?} (tags {tags:?}): a receive never matched"
            )))
        }
        Err(RecvTimeoutError::Disconnected) => {
            return Err(TestCaseError::fail("job panicked"));
        }
    };
    let got = &ranks[1];
    prop_assert_eq!(got.len(), case.msgs.len());
    for (j, ((st, buf), m)) in got.iter().zip(want).enumerate() {
        let m = m.unwrap_or_default();
        let msg = case.msgs[m];
        prop_assert_eq!(
            (st.source, st.tag, st.bytes, st.error, st.cancelled),
            (0, msg.tag, msg.size, None, false),
            "receive {} (tag {}) should have got message {}",
            j,
            tags[j],
            m
        );
        prop_assert!(
            buf[..msg.size] == content(m, msg.size)[..],
            "receive {} got the wrong bytes (expected message {})",
            j,
            m
        );
        prop_assert!(
            buf[msg.size..].iter().all(|&b| b == FILL),
            "receive {} wrote past the message",
            j
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 24,
        // No regression files: this test may only write its own source.
        failure_persistence: None,
        // A hang costs HANG per shrinking step; stop shrinking early.
        max_shrink_iters: 64,
        ..ProptestConfig::default()
    })]

    /// Both ranks on one node: everything through the shared-memory layer.
    #[test]
    fn non_overtaking_over_shm(case in case()) {
        check(&case, |c, t| {
            common::small(2)
                .ranks_per_node(2)
                .shm_single_copy(true)
                .run(|ctx| exchange(ctx, c, t))
        })?;
    }

    /// The same with single-copy reads off: rendezvous data streams through the rings.
    #[test]
    fn non_overtaking_over_shm_streamed(case in case()) {
        check(&case, |c, t| {
            common::small(2)
                .ranks_per_node(2)
                .shm_single_copy(false)
                .run(|ctx| exchange(ctx, c, t))
        })?;
    }

    /// Both ranks on one node set up like a crowded node, scaled down: 4 KiB rings that take only
    /// records of up to 48 bytes, two 512-byte cells per rank for the rest, so a pair's messages
    /// take ring and cell paths in turn.
    #[test]
    fn non_overtaking_over_shm_rings_and_cells(case in case()) {
        check(&case, |c, t| {
            common::small(2)
                .ranks_per_node(2)
                .shm_geometry(shm::Geometry {
                    ring_capacity: 4096,
                    cell_size: 512,
                    cells_per_rank: 2,
                })
                .shm_ring_record_max(48)
                .run(|ctx| exchange(ctx, c, t))
        })?;
    }

    /// One rank per node over real TCP sockets on loopback (the TCP netmod).
    #[cfg(feature = "tcp")]
    #[test]
    fn non_overtaking_over_tcp(case in case()) {
        check(&case, |c, t| {
            common::small(2)
                .ranks_per_node(1)
                .run_with::<netmod_tcp::TcpNetmod, _, _>(|ctx| exchange(ctx, c, t))
        })?;
    }

    /// One rank per node: everything through the active-message netmod.
    #[test]
    fn non_overtaking_over_am_netmod(case in case()) {
        check(&case, |c, t| {
            common::small(2)
                .ranks_per_node(1)
                .run_with::<inproc::InprocNet<inproc::AmOnly>, _, _>(|ctx| exchange(ctx, c, t))
        })?;
    }

    /// One rank per node with the natively matching netmod.
    #[test]
    fn non_overtaking_over_native_netmod(case in case()) {
        check(&case, |c, t| {
            common::small(2)
                .ranks_per_node(1)
                .run_with::<inproc::InprocNet<inproc::Native>, _, _>(|ctx| exchange(ctx, c, t))
        })?;
    }

    /// One rank per node, the active-message netmod delivering out of order: the AM
    /// fallback's sequence numbers must restore the order.
    #[test]
    fn non_overtaking_over_shuffled_netmod(case in case()) {
        check(&case, |c, t| {
            common::small(2)
                .ranks_per_node(1)
                .run_with::<inproc::Shuffled<inproc::InprocNet<inproc::AmOnly>>, _, _>(|ctx| {
                    exchange(ctx, c, t)
                })
        })?;
    }
}

/// The model on a hand-worked case, so a wrong model cannot pass silently.
#[test]
fn model_examples() {
    let m = |tag| Msg {
        size: 1,
        tag,
        sync: false,
    };
    let msgs = [m(1), m(0), m(1), m(2)];
    // Receives posted in order 0..4: tag 0 reaches past message 0; ANY_TAG then takes the
    // earliest left (message 0); tag 1 the next tag-1 one (message 2); ANY_TAG message 3.
    let tags = [0, ANY_TAG, 1, ANY_TAG];
    assert_eq!(
        expected(&msgs, &tags, &[0, 1, 2, 3]),
        vec![Some(1), Some(0), Some(2), Some(3)]
    );
    // Posted in another order, the same receives get other messages.
    assert_eq!(
        expected(&msgs, &tags, &[3, 2, 0, 1]),
        vec![Some(1), Some(3), Some(2), Some(0)]
    );
    // A specific receive with nothing left for it.
    assert_eq!(expected(&msgs, &[2, 2], &[0, 1]), vec![Some(3), None]);
}

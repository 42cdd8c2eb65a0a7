//! Ranks as threads that fail: a rank that returns an error or panics fails like a killed
//! process — its peers' pending and later operations on it end with `PeerFailed` instead of
//! waiting — and `Threads::run` returns the first failure, the cause rather than its effects.
//! Each case runs with TCP between nodes, on one shared-memory node, with the in-process
//! active-message and natively matching netmods, and with `--features ofi` / `ucx` over
//! libfabric and UCX.

#![cfg(feature = "tcp")]

use std::time::{Duration, Instant};

use ch4::threads::Threads;
use ch4::{Context, Error, ErrorKind, Netmod, Result, Shm, ANY_SOURCE, ANY_TAG};

/// Rank 1 fails with an error of its own; rank 0 waits for a message from it.
fn error_then_receive<N: Netmod, S: Shm>(ctx: Context<N, S>) -> Result<()> {
    let w = ctx.world();
    if w.rank() == 1 {
        return Err(Error::new(ErrorKind::Arg, "rank 1 gives up"));
    }
    let mut b = [0u8; 4];
    let e = w.recv(&mut b, 1, 0).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::PeerFailed, "{e}");
    assert_eq!(e.status().map(|st| st.source), Some(1), "{e}");
    Err(e)
}

/// Rank 1 panics; rank 0 waits in an ANY_SOURCE receive, rank 2 (if any) in a barrier.
fn panic_then_any_source<N: Netmod, S: Shm>(ctx: Context<N, S>) -> Result<()> {
    let w = ctx.world();
    match w.rank() {
        1 => panic!("rank 1 panics"),
        0 => {
            let mut b = [0u8; 4];
            let e = w.recv(&mut b, ANY_SOURCE, ANY_TAG).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::PeerFailed, "{e}");
            Err(e)
        }
        _ => w.barrier(),
    }
}

/// Rank 1 fails while rank 0 has nonblocking operations on it pending; they fail in the set,
/// and later operations on rank 1 fail at once.
fn pending_and_later<N: Netmod, S: Shm>(ctx: Context<N, S>) -> Result<()> {
    let w = ctx.world();
    if w.rank() == 1 {
        // Wait until rank 0 has posted, so the failure meets pending requests.
        w.recv(&mut [0u8], 0, 9)?;
        return Err(Error::new(ErrorKind::Arg, "rank 1 gives up"));
    }
    let mut a = [0u8; 8];
    let mut b = [0u8; 8];
    let big = vec![1u8; 1 << 20]; // rendezvous: waits for rank 1's clear-to-send
    ctx.scope(|s| {
        let mut set = [
            Some(w.irecv(s, &mut a, 1, 0)?),
            Some(w.irecv(s, &mut b, ANY_SOURCE, 1)?),
            Some(w.isend(s, &big, 1, 2)?),
        ];
        w.send(&[1u8], 1, 9)?;
        let mut failed = 0;
        while let Some((i, outcome)) = s.wait_any(&mut set)? {
            let e = outcome.expect_err("every request depends on rank 1");
            assert_eq!(e.kind(), ErrorKind::PeerFailed, "request {i}: {e}");
            failed += 1;
        }
        assert_eq!(failed, 3);
        Ok::<_, Error>(())
    })?;
    let e = w.recv(&mut a, 1, 3).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::PeerFailed, "{e}");
    let e = w.ssend(&[1u8], 1, 4).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::PeerFailed, "{e}");
    Err(e)
}

/// A rank that finishes in order is no failure: receives from ANY_SOURCE that other ranks
/// satisfy still complete after it left, and the job succeeds.
fn leaving_is_no_failure<N: Netmod, S: Shm>(ctx: Context<N, S>) -> Result<()> {
    let w = ctx.world();
    match w.rank() {
        0 => {
            let mut b = [0u8];
            let first = w.recv(&mut b, ANY_SOURCE, 0)?;
            assert_eq!(first.source, 1);
            let second = w.recv(&mut b, ANY_SOURCE, 0)?;
            assert_eq!(second.source, 2);
        }
        1 => w.send(&[1u8], 0, 0)?,
        _ => {
            // Until rank 1 has certainly finished and left.
            std::thread::sleep(Duration::from_millis(300));
            w.send(&[2u8], 0, 0)?;
        }
    }
    Ok(())
}

/// Runs `f` as threads four ways (TCP, shm, the in-process AM and natively matching netmods),
/// and over libfabric and UCX in the builds with `ofi` and `ucx`, and hands each outcome,
/// labelled, to `check`; the runs must end within 60 s together.
macro_rules! three_ways {
    ($ranks:expr, $f:ident, $check:expr) => {{
        let check = $check;
        let started = Instant::now();
        check(
            "tcp",
            Threads::new($ranks)
                .ranks_per_node(1)
                .run_with::<netmod_tcp::TcpNetmod, _, _>(|ctx| $f(ctx)),
        );
        check("shm", Threads::new($ranks).run(|ctx| $f(ctx)));
        check(
            "inproc",
            Threads::new($ranks)
                .ranks_per_node(1)
                .run_with::<inproc::InprocNet<inproc::AmOnly>, _, _>(|ctx| $f(ctx)),
        );
        check(
            "native",
            Threads::new($ranks)
                .ranks_per_node(1)
                .run_with::<inproc::InprocNet<inproc::Native>, _, _>(|ctx| $f(ctx)),
        );
        // The natively matching netmods for real, in the builds that have them: they learn of
        // the failure from the job's record (as process mode's from the launcher).
        #[cfg(feature = "ofi")]
        check(
            "ofi",
            Threads::new($ranks)
                .ranks_per_node(1)
                .run_with::<netmod_ofi::OfiNetmod, _, _>(|ctx| $f(ctx)),
        );
        #[cfg(feature = "ucx")]
        check(
            "ucx",
            Threads::new($ranks)
                .ranks_per_node(1)
                .run_with::<netmod_ucx::UcxNetmod, _, _>(|ctx| $f(ctx)),
        );
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "too slow to fail"
        );
    }};
}

#[test]
fn an_error_fails_the_peers_that_wait_and_run_returns_it() {
    three_ways!(2, error_then_receive, |how: &str, r: Result<Vec<()>>| {
        let e = r.expect_err(how);
        assert_eq!(
            e.kind(),
            ErrorKind::Arg,
            "{how}: the cause, not an effect: {e}"
        );
        assert!(
            e.to_string().contains("rank 1: rank 1 gives up"),
            "{how}: {e}"
        );
    });
}

#[test]
fn a_panic_fails_any_source_receives_and_barriers() {
    three_ways!(3, panic_then_any_source, |how: &str, r: Result<Vec<()>>| {
        let e = r.expect_err(how);
        assert!(
            e.to_string().contains("rank 1: panicked: rank 1 panics"),
            "{how}: {e}"
        );
    });
}

#[test]
fn pending_requests_and_later_operations_on_a_failed_rank_fail() {
    three_ways!(2, pending_and_later, |how: &str, r: Result<Vec<()>>| {
        let e = r.expect_err(how);
        assert!(
            e.to_string().contains("rank 1: rank 1 gives up"),
            "{how}: {e}"
        );
    });
}

#[test]
fn a_rank_that_leaves_in_order_fails_nothing() {
    three_ways!(3, leaving_is_no_failure, |how: &str, r: Result<Vec<()>>| {
        r.unwrap_or_else(|e| panic!("{how}: {e}"));
    });
}

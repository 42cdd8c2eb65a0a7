//! Matching-queue micro-benchmark in the style of the OSU benchmarks.
//!
//! For each queue and depth, `depth - 1` entries that never match are queued first, then one
//! matching entry is inserted and taken again, many times. The time per insert+take shows
//! whether matching cost grows with queue depth: it should not for the exact cases, and grows
//! linearly for wildcard receives scanning unexpected messages (documented trade-off).
//!
//! Pass `--quick` for a fast smoke run with fewer iterations.

use std::hint::black_box;
use std::time::Instant;

use ch4_core::matching::{PostedQueue, UnexpectedQueue};
use ch4_core::types::{Envelope, ANY_SOURCE, ANY_TAG};

const DEPTHS: [usize; 3] = [1, 100, 10_000];

fn env(source: i32, tag: i32) -> Envelope {
    Envelope {
        context: 0,
        source,
        tag,
    }
}

/// Filler that never matches the probe messages (which use tag 7 and source 3): distinct
/// high tags, spread over sources, and every fourth receive an ANY_SOURCE one so that the
/// wildcard bins are populated and the posted queue does all four lookups.
fn filler(i: usize, wildcards: bool) -> Envelope {
    let tag = 1000 + i as i32;
    let source = if wildcards && i % 4 == 0 {
        ANY_SOURCE
    } else {
        (i % 64) as i32
    };
    env(source, tag)
}

/// Runs `op` `iters` times after a warm-up and returns the mean nanoseconds per call.
fn time(iters: u64, mut op: impl FnMut()) -> f64 {
    for _ in 0..iters / 10 + 1 {
        op();
    }
    let start = Instant::now();
    for _ in 0..iters {
        op();
    }
    start.elapsed().as_nanos() as f64 / iters as f64
}

fn posted(depth: usize, want: Envelope, iters: u64) -> f64 {
    let mut q = PostedQueue::new();
    for i in 0..depth - 1 {
        q.post(filler(i, true), i);
    }
    let msg = env(3, 7);
    time(iters, || {
        q.post(black_box(want), 0usize);
        let got = q.take_match(black_box(&msg));
        assert!(got.is_some());
        black_box(got);
    })
}

fn unexpected(depth: usize, want: Envelope, iters: u64) -> f64 {
    let mut q = UnexpectedQueue::new();
    for i in 0..depth - 1 {
        q.push(filler(i, false), i);
    }
    let msg = env(3, 7);
    time(iters, || {
        q.push(black_box(msg), 0usize);
        let got = q.take_match(black_box(&want));
        assert!(got.is_some());
        black_box(got);
    })
}

fn main() {
    // `cargo bench` passes `--bench`; under `cargo test` (no `--bench`) only a smoke run is wanted.
    let quick =
        std::env::args().any(|a| a == "--quick") || !std::env::args().any(|a| a == "--bench");
    // O(1) cases get a fixed count; the linear wildcard scan gets a fixed budget of steps.
    let (fixed, budget): (u64, u64) = if quick {
        (20_000, 2_000_000)
    } else {
        (1_000_000, 100_000_000)
    };
    let scaled = |depth: usize| (budget / depth as u64).clamp(200, fixed);

    // Bring the CPU clock and caches up before the first measured row.
    black_box(posted(100, env(3, 7), fixed));

    println!("# ch4 matching micro-benchmark");
    println!("# {:<22}{:>10}{:>14}", "Queue", "Depth", "ns/match");
    let row = |name: &str, depth: usize, ns: f64| {
        println!("{name:<24}{depth:>10}{ns:>14.1}");
    };
    for depth in DEPTHS {
        row("posted-exact", depth, posted(depth, env(3, 7), fixed));
    }
    for depth in DEPTHS {
        row(
            "posted-wildcard",
            depth,
            posted(depth, env(ANY_SOURCE, 7), fixed),
        );
    }
    for depth in DEPTHS {
        row(
            "unexpected-exact",
            depth,
            unexpected(depth, env(3, 7), fixed),
        );
    }
    for depth in DEPTHS {
        row(
            "unexpected-wildcard",
            depth,
            unexpected(depth, env(ANY_SOURCE, 7), scaled(depth)),
        );
    }
    for depth in DEPTHS {
        row(
            "unexpected-wildcard-tag",
            depth,
            unexpected(depth, env(3, ANY_TAG), scaled(depth)),
        );
    }
}

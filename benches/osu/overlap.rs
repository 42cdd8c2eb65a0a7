//! osu_overlap: how much of a transfer hides behind computation, in the way OSU's nonblocking
//! collective benchmarks define it, for point-to-point: for each size, the time of a bare
//! transfer (post, wait; `t_pure`), then of a transfer posted before a computation of `t_pure`
//! and waited for after it (`t_total`); overlap = 100 × (1 − (t_total − t_compute) / t_pure)
//! with `t_compute` as measured, clipped to 0-100. Three cases: the sender computes (the receiver only waits), the receiver
//! computes, both do. The computation is a spin on the clock: no ch4 call is made during it, so
//! only an asynchronous progress thread can move the data meanwhile.
//!
//! `--sleep` computes by sleeping instead, leaving the core free (as a rank waiting on I/O or
//! an accelerator does): on a host with no spare core for the progress thread (this project's
//! two), a spinning computation and the thread share one core, and the figure measures the
//! scheduler's split; the sleeping one measures what the thread can do.
//!
//! `cargo run --release --example osu_overlap -- [--async] [--sleep] [-m [min:]max] [-i iterations]`:
//! two processes through the embedded launcher, at the multiple thread level (which the
//! progress thread needs); `--async` starts it (as `CH4_ASYNC_PROGRESS=1` does);
//! `CH4_NODE_SIZE=1` puts the ranks on different nodes (the build's netmod), else they share
//! memory (`CH4_SHM_CMA=0` makes shared memory stream large messages through its rings, which
//! needs the sender's progress; its single-copy reads need only the receiver's).

use std::time::{Duration, Instant};

use ch4::{Multiple, Result};

/// The options: sizes, iterations, whether to start the progress thread.
struct Options {
    min: usize,
    max: usize,
    iterations: usize,
    start_thread: bool,
    sleep: bool,
}

fn options() -> std::result::Result<Options, String> {
    let mut o = Options {
        min: 64 << 10,
        max: 16 << 20,
        iterations: 20,
        start_thread: false,
        sleep: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--async" => o.start_thread = true,
            "--sleep" => o.sleep = true,
            "-m" => {
                let v = args.next().ok_or("-m needs [min:]max")?;
                let (lo, hi) = match v.split_once(':') {
                    Some((lo, hi)) => (lo.parse().ok(), hi.parse().ok()),
                    None => (Some(o.min), v.parse().ok()),
                };
                o.min = lo.ok_or("-m: not a size")?;
                o.max = hi.ok_or("-m: not a size")?;
            }
            "-i" => {
                o.iterations = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|&n| n > 0)
                    .ok_or("-i needs a positive count")?;
            }
            other => return Err(format!("unknown option {other}")),
        }
    }
    if o.min == 0 || o.min > o.max {
        return Err("sizes: 0 < min <= max".into());
    }
    Ok(o)
}

/// Computes for `d` without calling ch4: a spin on the clock, or (`sleep`) a sleep; returns
/// how long it took (a sleep overshoots by tens of microseconds, which is not the transfer's).
fn compute(d: Duration, sleep: bool) -> Duration {
    let start = Instant::now();
    if sleep {
        std::thread::sleep(d);
    } else {
        while start.elapsed() < d {
            std::hint::spin_loop();
        }
    }
    start.elapsed()
}

/// Who computes while the transfer is in flight.
#[derive(Clone, Copy, PartialEq)]
enum Computes {
    Nobody,
    Sender,
    Receiver,
    Both,
}

fn main() -> std::process::ExitCode {
    let o = match options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("osu_overlap: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    match run(&o) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("osu_overlap: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(o: &Options) -> Result<()> {
    let universe = ch4::process::init_or_launch_at(2, Multiple)?;
    let ctx = universe.context();
    if o.start_thread {
        ctx.start_async_progress()?;
    }
    let world = universe.world();
    let me = world.rank();
    if world.size() != 2 {
        return Err(ch4::Error::new(
            ch4::ErrorKind::Arg,
            "osu_overlap runs on exactly two ranks",
        ));
    }
    // One transfer of all of `buf` from rank 0 to rank 1, posted, then `work` computed by the
    // ranks `who` says, then waited for: the time from the post to the end of the wait and the
    // time the computation took, each the longer of the two ranks'. The buffer is made and
    // touched before, and lent to the request and given back by it, as OSU's programs reuse
    // theirs: making a fresh one inside the timed part would time its page faults, which no
    // progress thread can hide.
    let transfer =
        |buf: &mut Vec<u8>, work: Duration, who: Computes| -> Result<(Duration, Duration)> {
            world.barrier()?;
            let start = Instant::now();
            let mut computed = Duration::ZERO;
            let lent = std::mem::take(buf);
            let req = if me == 0 {
                world.isend_owned(lent, 1, 0)?
            } else {
                world.irecv_owned(lent, 0, 0)?
            };
            let computes = match who {
                Computes::Sender => me == 0,
                Computes::Receiver => me == 1,
                Computes::Both => true,
                Computes::Nobody => false,
            };
            if computes {
                computed = compute(work, o.sleep);
            }
            let (back, status) = req.wait();
            *buf = back;
            status?;
            let mine = [start.elapsed().as_secs_f64(), computed.as_secs_f64()];
            let mut slowest = [0.0f64; 2];
            world.allreduce(&mine, &mut slowest, ch4::op::max)?;
            Ok((
                Duration::from_secs_f64(slowest[0]),
                Duration::from_secs_f64(slowest[1]),
            ))
        };
    if me == 0 {
        println!(
            "# osu_overlap (ch4), 2 ranks at MPI_THREAD_MULTIPLE, progress thread {}, computing by {}",
            if ctx.async_progress() { "on" } else { "off" },
            if o.sleep { "sleeping" } else { "spinning" }
        );
        println!(
            "{:<12}{:>14}{:>18}{:>18}{:>18}",
            "# Size", "Pure (us)", "Sender (%)", "Receiver (%)", "Both (%)"
        );
    }
    let mut size = o.min;
    while size <= o.max {
        let mut buf = vec![1u8; size];
        // Warm-up, then the bare transfer's time.
        transfer(&mut buf, Duration::ZERO, Computes::Nobody)?;
        let mut pure = Duration::ZERO;
        for _ in 0..o.iterations {
            pure += transfer(&mut buf, Duration::ZERO, Computes::Nobody)?.0;
        }
        let pure = pure / o.iterations as u32;
        let mut row = Vec::new();
        for who in [Computes::Sender, Computes::Receiver, Computes::Both] {
            let (mut total, mut computed) = (Duration::ZERO, Duration::ZERO);
            for _ in 0..o.iterations {
                let (t, c) = transfer(&mut buf, pure, who)?;
                total += t;
                computed += c;
            }
            let exposed = total.saturating_sub(computed) / o.iterations as u32;
            let hidden = 1.0 - exposed.as_secs_f64() / pure.as_secs_f64();
            row.push((100.0 * hidden).clamp(0.0, 100.0));
        }
        if me == 0 {
            println!(
                "{:<12}{:>14.2}{:>18.2}{:>18.2}{:>18.2}",
                size,
                pure.as_secs_f64() * 1e6,
                row[0],
                row[1],
                row[2]
            );
        }
        size *= 2;
    }
    universe.finalize()
}

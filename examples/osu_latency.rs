//! OSU-style ping-pong latency between two ranks.
//!
//! `cargo run --release --example osu_latency -- [-m [min:]max] [-i iterations] [-x warmup]`
//! starts two processes (through the embedded launcher; `ch4run -n 2` or Hydra's `mpiexec -n 2`
//! work as well) that talk through the shared-memory rings. `--threads` runs the two ranks as
//! threads of one process instead.
//!
//! The loop is OSU's: for each size a barrier, `warmup + iterations` round trips (rank 0 sends
//! then receives, rank 1 receives then sends), one-way latency = elapsed / (2 * iterations);
//! sizes above 8 KiB use a tenth of the iterations.

use std::time::Instant;

use ch4::{Communicator, Netmod, Result, Shm};

struct Options {
    min: usize,
    max: usize,
    iterations: usize,
    warmup: usize,
    threads: bool,
}

fn parse_args() -> std::result::Result<Options, String> {
    let mut o = Options {
        min: 0,
        max: 1 << 22,
        iterations: 10_000,
        warmup: 1_000,
        threads: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "-m" => {
                let v = value()?;
                let (lo, hi) = v.split_once(':').unwrap_or(("0", &v));
                o.min = lo.parse().map_err(|_| format!("bad -m {v}"))?;
                o.max = hi.parse().map_err(|_| format!("bad -m {v}"))?;
            }
            "-i" => o.iterations = value()?.parse().map_err(|_| "bad -i".to_string())?,
            "-x" => o.warmup = value()?.parse().map_err(|_| "bad -x".to_string())?,
            "--threads" => o.threads = true,
            "-h" | "--help" => {
                return Err(
                    "usage: osu_latency [-m [min:]max] [-i iterations] [-x warmup] [--threads]"
                        .into(),
                )
            }
            other => return Err(format!("unknown option {other}")),
        }
    }
    if o.min > o.max {
        return Err(format!("-m: min {} above max {}", o.min, o.max));
    }
    Ok(o)
}

fn sizes(min: usize, max: usize) -> Vec<usize> {
    let mut v = Vec::new();
    if min == 0 {
        v.push(0);
    }
    let mut s = min.max(1);
    while s <= max {
        v.push(s);
        s *= 2;
    }
    v
}

/// The measurement, the same for processes and threads: rows of (size, one-way µs) at rank 0.
fn pingpong<N: Netmod, S: Shm>(w: &Communicator<N, S>, o: &Options) -> Result<Vec<(usize, f64)>> {
    let me = w.rank();
    if w.size() != 2 {
        return Err(ch4::Error::new(
            ch4::ErrorKind::Arg,
            "osu_latency needs exactly two ranks",
        ));
    }
    let mut rows = Vec::new();
    let mut sbuf = vec![b'a'; o.max];
    let mut rbuf = vec![b'b'; o.max];
    for size in sizes(o.min, o.max) {
        let (iters, warm) = if size > 8192 {
            (o.iterations / 10 + 1, o.warmup / 10 + 1)
        } else {
            (o.iterations, o.warmup)
        };
        w.barrier()?;
        let mut start = Instant::now();
        for i in 0..iters + warm {
            if i == warm {
                start = Instant::now();
            }
            if me == 0 {
                w.send(&sbuf[..size], 1, 1)?;
                w.recv(&mut rbuf[..size], 1, 1)?;
            } else {
                w.recv(&mut rbuf[..size], 0, 1)?;
                w.send(&sbuf[..size], 0, 1)?;
            }
        }
        rows.push((
            size,
            start.elapsed().as_secs_f64() * 1e6 / (2.0 * iters as f64),
        ));
        sbuf.swap_with_slice(&mut rbuf);
    }
    Ok(rows)
}

fn print(rows: &[(usize, f64)], how: &str) {
    println!("# OSU MPI Latency Test (ch4, {how})");
    println!("# Size          Latency (us)");
    for (size, us) in rows {
        println!("{size:<20}{us:>12.2}");
    }
}

fn main() -> Result<()> {
    let o = match parse_args() {
        Ok(o) => o,
        Err(msg) => {
            eprintln!("{msg}");
            std::process::exit(2);
        }
    };
    if o.threads {
        let rows = ch4::threads::Threads::new(2).run(|ctx| pingpong(&ctx.world(), &o))?;
        print(&rows[0], "2 ranks as threads, shm rings");
        return Ok(());
    }
    let universe = ch4::process::init_or_launch(2)?;
    let rows = pingpong(&universe.world(), &o)?;
    if universe.world().rank() == 0 {
        print(&rows, "2 processes, shm rings");
    }
    universe.finalize()
}

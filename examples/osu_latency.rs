//! OSU-style ping-pong latency between two ranks.
//!
//! `cargo run --release --example osu_latency -- [-m [min:]max] [-i iterations] [-x warmup]`
//!
//! Follows the OSU micro-benchmark loop: for each size, a barrier, `warmup + iterations`
//! round trips (rank 0 sends then receives, rank 1 receives then sends), and one-way latency =
//! elapsed / (2 * iterations). Until the process launcher lands, the two ranks run as two
//! threads of this process, talking through the in-process shared-memory transport.

use std::time::Instant;

use ch4::threads::Threads;
use ch4::Result;

struct Options {
    min: usize,
    max: usize,
    iterations: usize,
    warmup: usize,
}

fn parse_args() -> std::result::Result<Options, String> {
    let mut o = Options {
        min: 0,
        max: 1 << 22,
        iterations: 10_000,
        warmup: 1_000,
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
            "-h" | "--help" => {
                return Err("usage: osu_latency [-m [min:]max] [-i iterations] [-x warmup]".into())
            }
            other => return Err(format!("unknown option {other}")),
        }
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

fn main() -> Result<()> {
    let o = match parse_args() {
        Ok(o) => o,
        Err(msg) => {
            eprintln!("{msg}");
            std::process::exit(2);
        }
    };
    let rows = Threads::new(2).run(|ctx| {
        let w = ctx.world();
        let me = w.rank();
        let mut rows = Vec::new();
        let mut sbuf = vec![b'a'; o.max];
        let mut rbuf = vec![b'b'; o.max];
        for size in sizes(o.min, o.max) {
            // OSU shortens the loop for large messages.
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
            let us = start.elapsed().as_secs_f64() * 1e6 / (2.0 * iters as f64);
            rows.push((size, us));
            sbuf.swap_with_slice(&mut rbuf);
        }
        Ok(rows)
    })?;
    println!("# OSU MPI Latency Test (ch4, 2 ranks as threads, inproc shm)");
    println!("# Size          Latency (us)");
    for (size, us) in &rows[0] {
        println!("{size:<20}{us:>12.2}");
    }
    Ok(())
}

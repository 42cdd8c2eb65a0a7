//! OSU-style unidirectional bandwidth and message rate between two ranks.
//!
//! `cargo run --release --example osu_bw -- [-m [min:]max] [-i iterations] [-x warmup] [-W window]`
//!
//! OSU's loop: for each size, rank 0 posts a window of nonblocking sends, waits for all, and
//! waits for a 4-byte ack; rank 1 posts the window of receives, waits, acks. Bandwidth is
//! bytes moved / time (MB/s, 10^6 bytes as OSU prints it); the message rate column is messages
//! per second. Ranks are two processes (self-launched, or under `ch4run -n 2` / Hydra).

use std::time::Instant;

use ch4::Result;

fn main() -> Result<()> {
    let mut min = 1usize;
    let mut max = 1usize << 22;
    let mut iters = 100usize;
    let mut warm = 10usize;
    let mut window = 64usize;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let v = args.next();
        let num = |v: &Option<String>| v.as_deref().and_then(|s| s.parse::<usize>().ok());
        match a.as_str() {
            "-m" => {
                let s = v.unwrap_or_default();
                let (lo, hi) = s.split_once(':').unwrap_or(("1", &s));
                min = lo.parse().unwrap_or(min);
                max = hi.parse().unwrap_or(max);
            }
            "-i" => iters = num(&v).unwrap_or(iters),
            "-x" => warm = num(&v).unwrap_or(warm),
            "-W" => window = num(&v).unwrap_or(window).max(1),
            _ => {
                eprintln!("usage: osu_bw [-m [min:]max] [-i iterations] [-x warmup] [-W window]");
                std::process::exit(2);
            }
        }
    }
    let universe = ch4::process::init_or_launch(2)?;
    let w = universe.world();
    let ctx = universe.context();
    let me = w.rank();
    let sbuf = vec![b'a'; max];
    let mut rbufs: Vec<Vec<u8>> = (0..window).map(|_| vec![0u8; max]).collect();
    if me == 0 {
        println!("# OSU MPI Bandwidth Test (ch4, 2 processes, shm rings, window {window})");
        println!("# Size      Bandwidth (MB/s)    Messages/s");
    }
    let mut size = min.max(1);
    while size <= max {
        let (n, x) = if size > 8192 {
            (iters / 2 + 1, warm / 2 + 1)
        } else {
            (iters, warm)
        };
        w.barrier()?;
        let mut start = Instant::now();
        for i in 0..n + x {
            if i == x {
                start = Instant::now();
            }
            if me == 0 {
                ctx.scope(|s| {
                    let mut reqs = Vec::with_capacity(window);
                    for _ in 0..window {
                        reqs.push(w.isend(s, &sbuf[..size], 1, 100)?);
                    }
                    s.wait_all(reqs).map(drop)
                })?;
                w.recv(&mut [0u8; 4], 1, 101)?;
            } else {
                ctx.scope(|s| {
                    let mut reqs = Vec::with_capacity(window);
                    for b in rbufs.iter_mut() {
                        reqs.push(w.irecv(s, &mut b[..size], 0, 100)?);
                    }
                    s.wait_all(reqs).map(drop)
                })?;
                w.send(&[0u8; 4], 0, 101)?;
            }
        }
        let secs = start.elapsed().as_secs_f64();
        if me == 0 {
            let msgs = (n * window) as f64;
            println!(
                "{size:<12}{:>16.2}{:>16.0}",
                msgs * size as f64 / secs / 1e6,
                msgs / secs
            );
        }
        size *= 2;
    }
    universe.finalize()
}

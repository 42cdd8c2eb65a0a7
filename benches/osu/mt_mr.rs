//! osu_mt_mr: the message rate of thread pairs, after OSU's osu_mbw_mr run by threads instead of
//! processes (the pattern of MPICH's VCI benchmarks). Two ranks at MPI_THREAD_MULTIPLE; for
//! each count of pairs P, each rank runs P threads, thread t of rank 0 streaming windows of
//! nonblocking sends to thread t of rank 1 on a communicator of their own (so pairs land on
//! different VCIs), acknowledged per window. One line per count: the aggregate rate (all
//! messages over the slowest pair's time) and the slowest and fastest pair's rate.
//!
//! `cargo run --release --example osu_mt_mr -- [-p 1,2,4,8] [-s size] [-i windows] [-x warmup]
//! [-W window] [--threads]` starts 2 processes through the embedded launcher (or joins
//! `ch4run -n 2`); `--threads` runs the ranks as threads of one process. `CH4_NUM_VCIS` sets
//! the VCIs of each rank.

use std::process::ExitCode;
use std::time::Instant;

use ch4::{Communicator, Context, Multiple, Netmod, Result, Shm};

/// What a run measures.
struct Options {
    pairs: Vec<usize>,
    size: usize,
    windows: usize,
    warmup: usize,
    window: usize,
    threads: bool,
}

fn usage() -> String {
    "usage: osu_mt_mr [-p 1,2,4,8] [-s size] [-i windows] [-x warmup] [-W window] [--threads]"
        .to_string()
}

fn parse() -> std::result::Result<Options, String> {
    let mut o = Options {
        pairs: vec![1, 2, 4, 8],
        size: 8,
        windows: 2000,
        warmup: 200,
        window: 64,
        threads: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || {
            args.next()
                .ok_or_else(|| format!("{a} needs a value\n{}", usage()))
        };
        let number = |v: &str| {
            v.parse::<usize>()
                .map_err(|_| format!("not a number: {v}\n{}", usage()))
        };
        match a.as_str() {
            "-p" => {
                o.pairs = value()?
                    .split(',')
                    .map(number)
                    .collect::<std::result::Result<_, _>>()?;
                if o.pairs.contains(&0) {
                    return Err(format!("-p: a count of pairs is at least 1\n{}", usage()));
                }
            }
            "-s" => o.size = number(&value()?)?,
            "-i" => o.windows = number(&value()?)?.max(1),
            "-x" => o.warmup = number(&value()?)?,
            "-W" => o.window = number(&value()?)?.max(1),
            "--threads" => o.threads = true,
            "-h" | "--help" => return Err(usage()),
            other => return Err(format!("unknown option {other}\n{}", usage())),
        }
    }
    Ok(o)
}

/// One pair's thread: `windows` windows after `warmup` untimed ones; returns the seconds the
/// timed ones took.
fn pair<N: Netmod + Send, S: Shm + Send>(
    ctx: &Context<N, S, Multiple>,
    comm: &Communicator<N, S, Multiple>,
    o: &Options,
) -> Result<f64> {
    let peer = 1 - comm.rank();
    let send = vec![7u8; o.size];
    let mut recv = vec![vec![0u8; o.size]; o.window];
    let mut ack = [0u8];
    let mut start = Instant::now();
    for w in 0..o.warmup + o.windows {
        if w == o.warmup {
            start = Instant::now();
        }
        if comm.rank() == 0 {
            ctx.scope(|s| {
                let reqs = (0..o.window)
                    .map(|_| comm.isend(s, &send, peer, 1))
                    .collect::<Result<Vec<_>>>()?;
                s.wait_all(reqs).map(drop)
            })?;
            comm.recv(&mut ack, peer, 2)?;
        } else {
            ctx.scope(|s| {
                let reqs = recv
                    .iter_mut()
                    .map(|b| comm.irecv(s, b, peer, 1))
                    .collect::<Result<Vec<_>>>()?;
                s.wait_all(reqs).map(drop)
            })?;
            comm.send(&ack, peer, 2)?;
        }
    }
    Ok(start.elapsed().as_secs_f64())
}

fn body<N: Netmod + Send, S: Shm + Send>(ctx: Context<N, S, Multiple>, o: &Options) -> Result<()> {
    let world = ctx.world();
    if world.size() != 2 {
        return Err(ch4::Error::new(
            ch4::ErrorKind::Arg,
            "osu_mt_mr runs on exactly 2 ranks",
        ));
    }
    if world.rank() == 0 {
        let mode = if o.threads {
            "ranks as threads"
        } else {
            "processes"
        };
        println!(
            "# OSU-style multithreaded message rate (ch4, {mode}, {} VCIs)",
            ctx.vcis()
        );
        println!(
            "# {} B messages, window {}, {} windows per pair",
            o.size, o.window, o.windows
        );
        println!("# Pairs  Aggregate (msg/s)  Slowest pair (msg/s)  Fastest pair (msg/s)");
    }
    for &pairs in &o.pairs {
        let comms = (0..pairs)
            .map(|_| world.dup())
            .collect::<Result<Vec<_>>>()?;
        world.barrier()?;
        let times = std::thread::scope(|s| {
            let threads: Vec<_> = comms.iter().map(|c| s.spawn(|| pair(&ctx, c, o))).collect();
            threads
                .into_iter()
                .map(|t| t.join().expect("a pair's thread panicked"))
                .collect::<Result<Vec<f64>>>()
        })?;
        let messages = (o.windows * o.window) as f64;
        let slowest = times.iter().copied().fold(0.0, f64::max);
        let fastest = times.iter().copied().fold(f64::INFINITY, f64::min);
        if world.rank() == 0 {
            println!(
                "{pairs:<7}  {:>17.0}  {:>20.0}  {:>20.0}",
                messages * pairs as f64 / slowest,
                messages / slowest,
                messages / fastest
            );
        }
        for c in comms {
            c.free()?;
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let o = match parse() {
        Ok(o) => o,
        Err(msg) => {
            eprintln!("{msg}");
            return ExitCode::from(2);
        }
    };
    let run = || -> Result<()> {
        if o.threads {
            ch4::threads::Threads::new(2)
                .thread_level(Multiple)
                .run(|ctx| body(ctx, &o))?;
            return Ok(());
        }
        let universe = ch4::process::init_or_launch_at(2, Multiple)?;
        body(universe.context().clone(), &o)?;
        universe.finalize()
    };
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("osu_mt_mr: {e}");
            ExitCode::FAILURE
        }
    }
}

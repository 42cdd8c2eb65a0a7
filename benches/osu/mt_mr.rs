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
//!
//! Built with `--features peer-mpi` the same loop runs over the system's MPI through rsmpi,
//! under that MPI's launcher (`mpiexec -n 2`), for `scripts/osu-vs-peers.sh mt_mr`.

use std::process::ExitCode;

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

/// Prints the run's header (rank 0).
fn header(library: &str, vcis: &str, o: &Options) {
    println!("# OSU-style multithreaded message rate ({library}{vcis})");
    println!(
        "# {} B messages, window {}, {} windows per pair",
        o.size, o.window, o.windows
    );
    println!("# Pairs  Aggregate (msg/s)  Slowest pair (msg/s)  Fastest pair (msg/s)");
}

/// Prints the line of `pairs` pairs whose timed windows took `times` seconds (rank 0).
fn line(pairs: usize, times: &[f64], o: &Options) {
    let messages = (o.windows * o.window) as f64;
    let slowest = times.iter().copied().fold(0.0, f64::max);
    let fastest = times.iter().copied().fold(f64::INFINITY, f64::min);
    println!(
        "{pairs:<7}  {:>17.0}  {:>20.0}  {:>20.0}",
        messages * pairs as f64 / slowest,
        messages / slowest,
        messages / fastest
    );
}

/// The loop over ch4.
#[cfg(not(feature = "peer-mpi"))]
mod on_ch4 {
    use std::time::Instant;

    use ch4::{Communicator, Context, Multiple, Netmod, Result, Shm};

    use super::{header, line, Options};

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

    fn body<N: Netmod + Send, S: Shm + Send>(
        ctx: Context<N, S, Multiple>,
        o: &Options,
    ) -> Result<()> {
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
            header("ch4", &format!(", {mode}, {} VCIs", ctx.vcis()), o);
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
            if world.rank() == 0 {
                line(pairs, &times, o);
            }
            for c in comms {
                c.free()?;
            }
        }
        Ok(())
    }

    /// Runs the program: ranks as threads, or processes (launching itself when started alone).
    pub fn run(o: &Options) -> Result<()> {
        if o.threads {
            ch4::threads::Threads::new(2)
                .thread_level(Multiple)
                .run(|ctx| body(ctx, o))?;
            return Ok(());
        }
        let universe = ch4::process::init_or_launch_at(2, Multiple)?;
        body(universe.context().clone(), o)?;
        universe.finalize()
    }
}

/// The same loop over the system's MPI (rsmpi).
#[cfg(feature = "peer-mpi")]
mod on_mpi {
    use std::time::Instant;

    use mpi::request::multiple_scope;
    use mpi::topology::SimpleCommunicator;
    use mpi::traits::*;
    use mpi::Threading;

    use super::{header, line, Options};

    /// A pair's communicator, moved into the pair's thread.
    struct PairComm(SimpleCommunicator);

    // SAFETY: `run` checks that the MPI library provides MPI_THREAD_MULTIPLE before it makes
    // one, and at that level MPI lets any thread use any communicator. rsmpi's handle is not
    // `Send` only because Open MPI's `MPI_Comm` is a pointer. Each one is moved to one thread,
    // which alone uses it (and frees it when done).
    unsafe impl Send for PairComm {}

    /// One pair's thread, as the ch4 loop's.
    fn pair(comm: &SimpleCommunicator, o: &Options) -> f64 {
        let me = comm.rank();
        let peer = comm.process_at_rank(1 - me);
        let send = vec![7u8; o.size];
        let mut recv = vec![vec![0u8; o.size]; o.window];
        let mut ack = [0u8];
        let mut start = Instant::now();
        for w in 0..o.warmup + o.windows {
            if w == o.warmup {
                start = Instant::now();
            }
            if me == 0 {
                multiple_scope(o.window, |scope, coll| {
                    for _ in 0..o.window {
                        coll.add(peer.immediate_send_with_tag(scope, &send[..], 1));
                    }
                    let mut statuses = Vec::with_capacity(o.window);
                    coll.wait_all(&mut statuses);
                });
                peer.receive_into_with_tag(&mut ack[..], 2);
            } else {
                multiple_scope(o.window, |scope, coll| {
                    for b in recv.iter_mut() {
                        coll.add(peer.immediate_receive_into_with_tag(scope, &mut b[..], 1));
                    }
                    let mut statuses = Vec::with_capacity(o.window);
                    coll.wait_all(&mut statuses);
                });
                peer.send_with_tag(&ack[..], 2);
            }
        }
        start.elapsed().as_secs_f64()
    }

    /// Runs the program under the MPI's launcher.
    pub fn run(o: &Options) -> Result<(), String> {
        let (universe, level) = mpi::initialize_with_threading(Threading::Multiple)
            .ok_or("MPI was initialized already")?;
        if level != Threading::Multiple {
            return Err(format!(
                "the MPI library provides {level:?}, not MPI_THREAD_MULTIPLE"
            ));
        }
        let world = universe.world();
        if world.size() != 2 {
            return Err("osu_mt_mr runs on exactly 2 ranks".into());
        }
        if world.rank() == 0 {
            let version = mpi::environment::library_version().unwrap_or_default();
            let name = version.lines().next().unwrap_or("MPI").trim().to_string();
            header(&name, ", processes", o);
        }
        for &pairs in &o.pairs {
            let comms: Vec<PairComm> = (0..pairs).map(|_| PairComm(world.duplicate())).collect();
            world.barrier();
            let times: Vec<f64> = std::thread::scope(|s| {
                let threads: Vec<_> = comms
                    .into_iter()
                    .map(|c| {
                        s.spawn(move || {
                            // The whole wrapper moves in (a closure would take only the field).
                            let c = c;
                            pair(&c.0, o)
                        })
                    })
                    .collect();
                threads
                    .into_iter()
                    .map(|t| t.join().expect("a pair's thread panicked"))
                    .collect()
            });
            if world.rank() == 0 {
                line(pairs, &times, o);
            }
        }
        Ok(())
    }
}

fn main() -> ExitCode {
    let o = match parse() {
        Ok(o) => o,
        Err(msg) => {
            eprintln!("{msg}");
            return ExitCode::from(2);
        }
    };
    #[cfg(not(feature = "peer-mpi"))]
    let result = on_ch4::run(&o).map_err(|e| e.to_string());
    #[cfg(feature = "peer-mpi")]
    let result = on_mpi::run(&o);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("osu_mt_mr: {e}");
            ExitCode::FAILURE
        }
    }
}

//! Ranks whose tokio tasks exchange messages with `.await`: the embedding a framework built on
//! an async runtime starts from. Each rank runs at `MPI_THREAD_MULTIPLE` with its progress
//! thread on (`ch4::progress`), so an awaited request wakes its task when it completes and no
//! task polls; a multi-threaded tokio runtime per rank runs `TASKS` tasks, each sending a
//! buffer (long enough to go by rendezvous) to the right neighbour and receiving the left's,
//! on its own tag, then checking every element.
//!
//! `cargo run --release --example async_tokio` (4 processes through the embedded launcher;
//! under `ch4run -n N` or `mpiexec -n N` it joins their job); `-- --threads` runs the ranks as
//! threads of one process.

use ch4::threads::Threads;
use ch4::{Context, Multiple, Result};

/// Tasks a rank runs at once.
const TASKS: u32 = 8;
/// Elements a task sends: 512 KiB, past every route's eager limit.
const ELEMENTS: usize = 64 << 10;

fn main() -> std::process::ExitCode {
    let outcome = if std::env::args().any(|a| a == "--threads") {
        Threads::new(4)
            .thread_level(Multiple)
            .run(rank)
            .map(|sums| sums.into_iter().sum::<u64>())
    } else {
        ch4::process::init_or_launch_at(4, Multiple).and_then(|universe| {
            let total = rank(universe.context().clone())?;
            universe.finalize()?;
            Ok(total)
        })
    };
    match outcome {
        Ok(_) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("async_tokio: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// One rank: a tokio runtime of two workers whose tasks talk to the neighbours.
fn rank<N, S>(ctx: Context<N, S, Multiple>) -> Result<u64>
where
    N: ch4::Netmod + Send + 'static,
    S: ch4::Shm + Send + 'static,
{
    ctx.start_async_progress()?;
    let world = ctx.world();
    let (me, n) = (world.rank(), world.size());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .map_err(|e| ch4::Error::new(ch4::ErrorKind::Internal, format!("tokio: {e}")))?;
    let checked: Result<u64> = runtime.block_on(async {
        let mut tasks = Vec::new();
        for t in 0..TASKS as i32 {
            let world = world.clone();
            tasks.push(tokio::spawn(async move {
                let (right, left) = ((me + 1) % n, (me + n - 1) % n);
                let incoming = world.irecv_owned(vec![0u64; ELEMENTS], left, t)?;
                let outgoing = world.isend_owned(vec![value(me, t); ELEMENTS], right, t)?;
                let (got, status) = incoming.await;
                status?;
                outgoing.await.1?;
                let want = value(left, t);
                match got.iter().position(|&v| v != want) {
                    None => Ok(want),
                    Some(i) => Err(ch4::Error::new(
                        ch4::ErrorKind::Internal,
                        format!("task {t}: element {i} is {}, not {want}", got[i]),
                    )),
                }
            }));
        }
        let mut sum = 0;
        for task in tasks {
            sum += task
                .await
                .map_err(|e| ch4::Error::new(ch4::ErrorKind::Internal, format!("task: {e}")))??;
        }
        Ok(sum)
    });
    let sum = checked?;
    println!("async_tokio: rank {me} of {n}: {TASKS} tasks checked");
    world.barrier()?;
    Ok(sum)
}

/// What task `t` of rank `r` sends.
fn value(r: i32, t: i32) -> u64 {
    (r as u64) << 32 | t as u64
}

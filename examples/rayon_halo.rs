//! A rayon program whose workers each exchange halos on a communicator of their own: the
//! embedding a data-parallel framework starts from. Each rank owns a stretch of a 1-D periodic
//! rod, cut into one chunk per worker; worker `w` of every rank works on chunk `w` and trades
//! its end values with worker `w` of the neighbouring ranks, on communicator `w` (a `dup` of
//! the world, so each worker's traffic goes to one of the rank's VCIs and no worker waits for
//! another's lock). After `STEPS` smoothing steps the rod's total, which smoothing keeps, is
//! checked against the start.
//!
//! `cargo run --release --example rayon_halo` (4 processes through the embedded launcher;
//! under `ch4run -n N` or `mpiexec -n N` it joins their job); `-- --threads` runs the ranks as
//! threads of one process.

use ch4::threads::Threads;
use ch4::{Context, Multiple, Result};
use rayon::prelude::*;

/// Rayon workers per rank, each with its communicator and its chunk.
const WORKERS: usize = 4;
/// Cells of a chunk.
const CELLS: usize = 1000;
const STEPS: usize = 50;

fn main() -> std::process::ExitCode {
    let outcome = if std::env::args().any(|a| a == "--threads") {
        Threads::new(4).thread_level(Multiple).run(rank).map(drop)
    } else {
        ch4::process::init_or_launch_at(4, Multiple).and_then(|universe| {
            rank(universe.context().clone())?;
            universe.finalize()
        })
    };
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rayon_halo: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn rank<N, S>(ctx: Context<N, S, Multiple>) -> Result<()>
where
    N: ch4::Netmod + Send + 'static,
    S: ch4::Shm + Send + 'static,
{
    let world = ctx.world();
    let (me, n) = (world.rank(), world.size());
    let (left, right) = ((me + n - 1) % n, (me + 1) % n);
    let comms = (0..WORKERS)
        .map(|_| world.dup())
        .collect::<Result<Vec<_>>>()?;
    // Chunk w of rank r starts as r * WORKERS + w + 1 in every cell.
    let mut chunks: Vec<Vec<f64>> = (0..WORKERS)
        .map(|w| vec![(me as usize * WORKERS + w + 1) as f64; CELLS])
        .collect();
    let start: f64 = chunks.iter().flatten().sum();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(WORKERS)
        .build()
        .map_err(|e| ch4::Error::new(ch4::ErrorKind::Internal, format!("rayon: {e}")))?;
    pool.install(|| {
        chunks
            .par_iter_mut()
            .zip(comms.par_iter())
            .try_for_each(|(chunk, comm)| -> Result<()> {
                for _ in 0..STEPS {
                    // The halo: this chunk's ends to the same worker of the neighbouring
                    // ranks, theirs back (a periodic rod: rank 0's left is the last rank).
                    let mut from_left = [0.0f64];
                    let mut from_right = [0.0f64];
                    comm.sendrecv(&[chunk[CELLS - 1]], right, 0, &mut from_left, left, 0)?;
                    comm.sendrecv(&[chunk[0]], left, 1, &mut from_right, right, 1)?;
                    smooth(chunk, from_left[0], from_right[0]);
                }
                Ok(())
            })
    })?;
    let end: f64 = chunks.iter().flatten().sum();
    let (mut total_start, mut total_end) = ([0.0], [0.0]);
    world.allreduce(&[start], &mut total_start, ch4::op::sum)?;
    world.allreduce(&[end], &mut total_end, ch4::op::sum)?;
    if (total_end[0] - total_start[0]).abs() > 1e-6 * total_start[0] {
        return Err(ch4::Error::new(
            ch4::ErrorKind::Internal,
            format!(
                "the rod's total went from {} to {}",
                total_start[0], total_end[0]
            ),
        ));
    }
    if me == 0 {
        println!(
            "rayon_halo: {n} ranks x {WORKERS} workers, {STEPS} steps, total {:.3} kept",
            total_end[0]
        );
    }
    Ok(())
}

/// One step of smoothing with the halo values: every cell moves towards its neighbours'
/// mean, which keeps the total of a closed rod (each ring of chunks is one rod).
fn smooth(chunk: &mut [f64], left: f64, right: f64) {
    let old = chunk.to_vec();
    for i in 0..chunk.len() {
        let l = if i == 0 { left } else { old[i - 1] };
        let r = if i + 1 == old.len() {
            right
        } else {
            old[i + 1]
        };
        chunk[i] = old[i] + 0.25 * (l - 2.0 * old[i] + r);
    }
}

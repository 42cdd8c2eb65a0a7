//! Instruction cost of the safe facade on the message-rate pattern: windows of 64 nonblocking
//! 8-byte sends into 64 posted receives, through `Communicator::isend`/`irecv` and
//! `Scope::wait_all`, with both ranks' contexts stepped by one thread (no waiting, so the
//! counts under `valgrind --tool=callgrind` are exact). Compare with
//! `cargo bench -p shm --bench roundtrip -- N window`, the same pattern on the bare device: the
//! difference is what the facade costs.
//!
//! `cargo bench --bench facade_window [-- windows] [--multiple]`: with `--multiple` both ranks
//! run at MPI_THREAD_MULTIPLE (one thread still communicates), so the difference between the
//! two counts is what the multiple level's locks and bookkeeping cost one thread. With
//! `--blocking` the pattern is a ping-pong of blocking 8-byte sends and receives instead (each
//! receive finds its message already there), the path of `osu_latency`.

use std::time::{Duration, Instant};

use ch4::ThreadLevel;

#[path = "support/shm_pair.rs"]
mod shm_pair;

const WINDOW: usize = 64;

fn main() -> ch4::Result<()> {
    // ch4's warnings (and, with CH4_LOG=debug, more) on standard error.
    ch4::log::init();
    let windows: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(if std::env::args().any(|a| a == "--bench") {
            30_000
        } else {
            200
        });
    let multiple = std::env::args().any(|a| a == "--multiple");
    let blocking = std::env::args().any(|a| a == "--blocking");
    let elapsed = if multiple {
        windows_at::<ch4::Multiple>(windows, blocking)?
    } else {
        windows_at::<ch4::Single>(windows, blocking)?
    };
    let ns = elapsed.as_nanos() as f64 / (windows * WINDOW) as f64;
    let level = if multiple {
        ", MPI_THREAD_MULTIPLE"
    } else {
        ""
    };
    if blocking {
        println!("# ch4 facade, blocking send and recv of 8 bytes both ways, one thread{level}");
    } else {
        println!("# ch4 facade, windows of {WINDOW} isend/irecv of 8 bytes, one thread{level}");
    }
    println!("ns/message {ns:.1}");
    Ok(())
}

/// Steps `windows` windows (or, `blocking`, as many round trips of `WINDOW` messages) between
/// two ranks at level `L`, both on this thread; returns the time they took.
fn windows_at<L: ThreadLevel>(windows: usize, blocking: bool) -> ch4::Result<Duration> {
    let (a, b) = shm_pair::shm_pair::<L>()?;
    let (wa, wb) = (a.world(), b.world());
    let msg = [7u8; 8];
    let mut bufs = vec![[0u8; 8]; WINDOW];
    let start = Instant::now();
    if blocking {
        let mut buf = [0u8; 8];
        for _ in 0..windows * WINDOW / 2 {
            wa.send(&msg, 1, 2)?;
            wb.recv(&mut buf, 0, 2)?;
            wb.send(&msg, 0, 2)?;
            wa.recv(&mut buf, 1, 2)?;
        }
        return Ok(start.elapsed());
    }
    for _ in 0..windows {
        b.scope(|rs| {
            // Sized up front: `collect` into a Vec of Results cannot know the length and grows.
            let mut recvs = Vec::with_capacity(WINDOW);
            for buf in bufs.iter_mut() {
                recvs.push(wb.irecv(rs, buf, 0, 2)?);
            }
            a.scope(|ss| {
                let mut sends = Vec::with_capacity(WINDOW);
                for _ in 0..WINDOW {
                    sends.push(wa.isend(ss, &msg, 1, 2)?);
                }
                ss.wait_all(sends).map(drop)
            })?;
            rs.wait_all(recvs).map(drop)
        })?;
        // Rank 0's sends all finished as they started, so none of its waits polled: it takes
        // in the eager credit rank 1 gave back here, as a rank on a thread of its own would at
        // its next wait (without it, rank 0 runs out of credit, its sends go by rendezvous and
        // wait for a rank 1 that this one thread does not step meanwhile).
        a.progress()?;
    }
    Ok(start.elapsed())
}

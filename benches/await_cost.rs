//! What awaiting a request costs against waiting for it: two ranks on one thread (as in
//! `facade_window`), rank 0 sends 8 bytes eagerly, rank 1 has them already when it takes them
//! with an owned receive, either by `OwnedRequest::wait` or by `.await` under `futures`'
//! `block_on` (the executor's own cost included: a waker, a poll). Counted with callgrind,
//! exact on a noisy host: run at two counts and divide the difference.
//!
//! `cargo bench --bench await_cost [-- rounds] [--await] [--multiple]`

use ch4::ThreadLevel;

#[path = "support/shm_pair.rs"]
mod shm_pair;

fn main() -> ch4::Result<()> {
    let rounds: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(if std::env::args().any(|a| a == "--bench") {
            100_000
        } else {
            200
        });
    let awaited = std::env::args().any(|a| a == "--await");
    if std::env::args().any(|a| a == "--multiple") {
        rounds_at::<ch4::Multiple>(rounds, awaited)
    } else {
        rounds_at::<ch4::Single>(rounds, awaited)
    }
}

fn rounds_at<L: ThreadLevel>(rounds: usize, awaited: bool) -> ch4::Result<()> {
    let (a, b) = shm_pair::shm_pair::<L>()?;
    let (wa, wb) = (a.world(), b.world());
    let mut buf = vec![0u8; 8];
    for _ in 0..rounds {
        wa.send(&[7u8; 8], 1, 2)?;
        // The message is in rank 1's ring: the receive matches it when posted or at the first
        // progress, so neither way waits.
        let req = wb.irecv_owned(buf, 0, 2)?;
        let (back, st) = if awaited {
            futures::executor::block_on(req)
        } else {
            req.wait()
        };
        st?;
        buf = back;
        // Rank 0 takes in the credit rank 1 gives back, as a rank of its own would.
        a.progress()?;
    }
    Ok(())
}

//! N rounds of irecv + isend to itself + two waits, 8 bytes, on the self communicator,
//! through the device as a Rust program calls it: the Rust side of
//! `scripts/c-abi-overhead.sh`, whose C side (`tests/c/isend_loop.c`) makes the same calls
//! through the MPI ABI.

use ch4_core::buffer::{RecvBuf, SendBuf};
use ch4_core::SendMode;

fn main() -> ch4::Result<()> {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000);
    let universe = ch4::process::init()?;
    let ctx = universe.context();
    let me = ctx.self_comm().id();
    let sbuf = [0u8; 8];
    let mut rbuf = [0u8; 8];
    for _ in 0..n {
        let mut dev = ctx.device()?;
        // SAFETY: both buffers outlive the requests, which are waited for below.
        let (r, s) = unsafe {
            (
                dev.irecv(me, 0, 1, RecvBuf::borrowed(&mut rbuf))?,
                dev.isend(me, 0, 1, SendBuf::borrowed(&sbuf), SendMode::Standard)?,
            )
        };
        dev.wait(s)?;
        dev.wait(r)?;
    }
    universe.finalize()
}

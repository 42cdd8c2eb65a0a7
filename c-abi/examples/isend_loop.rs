//! N rounds on the self communicator, 8 bytes, through the device as a Rust program calls it:
//! the Rust side of `scripts/c-abi-overhead.sh`, whose C side (`tests/c/isend_loop.c`) makes
//! the same calls through the MPI ABI. A round is irecv + isend to itself + two waits, or with
//! `blocking` among the arguments a send to itself + a receive (osu_latency's calls).
//!
//! With `opaque` among the arguments the communicator, the ranks, the tag and the buffers pass
//! through `black_box` on every call, as in a program whose values are only known at run time
//! (the C functions see theirs that way across the ABI); without it the compiler may fold them
//! into the inlined device code.

use std::hint::black_box;

use ch4::Context;
use ch4_core::buffer::{RecvBuf, SendBuf};
use ch4_core::{CommId, SendMode};

/// `v`, hidden from the optimizer when `OPAQUE`.
#[inline(always)]
fn arg<const OPAQUE: bool, T>(v: T) -> T {
    if OPAQUE {
        black_box(v)
    } else {
        v
    }
}

/// `n` rounds of irecv + isend + two waits.
fn nonblocking<const OPAQUE: bool>(ctx: &Context, me: CommId, n: usize) -> ch4::Result<()> {
    let sbuf = [0u8; 8];
    let mut rbuf = [0u8; 8];
    for _ in 0..n {
        let mut dev = ctx.device()?;
        // SAFETY: both buffers outlive the requests, which are waited for below.
        let (r, s) = unsafe {
            (
                dev.irecv(
                    arg::<OPAQUE, _>(me),
                    arg::<OPAQUE, _>(0),
                    arg::<OPAQUE, _>(1),
                    RecvBuf::borrowed(arg::<OPAQUE, _>(&mut rbuf[..])),
                )?,
                dev.isend(
                    arg::<OPAQUE, _>(me),
                    arg::<OPAQUE, _>(0),
                    arg::<OPAQUE, _>(1),
                    SendBuf::borrowed(arg::<OPAQUE, _>(&sbuf[..])),
                    SendMode::Standard,
                )?,
            )
        };
        dev.wait(s)?;
        dev.wait(r)?;
    }
    Ok(())
}

/// `n` rounds of a send to itself and a receive.
fn blocking<const OPAQUE: bool>(ctx: &Context, me: CommId, n: usize) -> ch4::Result<()> {
    let sbuf = [0u8; 8];
    let mut rbuf = [0u8; 8];
    for _ in 0..n {
        let mut dev = ctx.device()?;
        dev.send(
            arg::<OPAQUE, _>(me),
            arg::<OPAQUE, _>(0),
            arg::<OPAQUE, _>(1),
            arg::<OPAQUE, _>(&sbuf[..]),
            SendMode::Standard,
        )?;
        dev.recv(
            arg::<OPAQUE, _>(me),
            arg::<OPAQUE, _>(0),
            arg::<OPAQUE, _>(1),
            arg::<OPAQUE, _>(&mut rbuf[..]),
        )?;
    }
    Ok(())
}

fn main() -> ch4::Result<()> {
    let argv: Vec<String> = std::env::args().collect();
    let n: usize = argv.get(1).and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let has = |flag: &str| argv.iter().any(|a| a == flag);
    let universe = ch4::process::init()?;
    let ctx = universe.context();
    let me = ctx.self_comm().id();
    match (has("blocking"), has("opaque")) {
        (false, false) => nonblocking::<false>(ctx, me, n)?,
        (false, true) => nonblocking::<true>(ctx, me, n)?,
        (true, false) => blocking::<false>(ctx, me, n)?,
        (true, true) => blocking::<true>(ctx, me, n)?,
    }
    universe.finalize()
}

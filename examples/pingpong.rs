//! The smallest complete ch4 program: two ranks bounce one message back and forth and rank 0
//! prints the one-way latency (round trip / 2). Blocking `send` / `recv` only.
//!
//! `cargo run --release --example pingpong -- [bytes] [round-trips]` (defaults: 8 bytes, 10,000
//! round trips) starts its two processes itself through the embedded launcher;
//! `ch4run -n 2 target/release/examples/pingpong 64` or Hydra's `mpiexec -n 2 …` launch it from
//! outside. Any other number of ranks is an error, reported rather than a panic.

use std::time::Instant;

use ch4::{Error, ErrorKind, Result};

fn main() -> Result<()> {
    // ch4's warnings (and, with CH4_LOG=debug, more) on standard error.
    ch4::log::init();
    // Parse before launching, so a bad command line is reported once, not once per rank.
    let (bytes, round_trips) = parse_args()?;
    let universe = ch4::process::init_or_launch(2)?;
    let world = universe.world();
    if world.size() != 2 {
        return Err(Error::new(
            ErrorKind::Arg,
            format!("pingpong needs exactly 2 ranks, not {}", world.size()),
        ));
    }
    let (rank, peer) = (world.rank(), 1 - world.rank());

    // Rank 0 sends a recognisable pattern; rank 1 starts with zeros and echoes what it gets.
    let pattern: Vec<u8> = (0..bytes).map(|i| (i % 251) as u8).collect();
    let mut buf = if rank == 0 {
        pattern.clone()
    } else {
        vec![0; bytes]
    };

    world.barrier()?; // start the clock when both ranks are here
    let start = Instant::now();
    for _ in 0..round_trips {
        if rank == 0 {
            world.send(&buf, peer, 0)?;
            world.recv(&mut buf, peer, 0)?;
        } else {
            world.recv(&mut buf, peer, 0)?;
            world.send(&buf, peer, 0)?;
        }
    }
    let one_way_us = start.elapsed().as_secs_f64() * 1e6 / (2.0 * round_trips as f64);

    if rank == 0 {
        // The message went through the peer 2 × round_trips times: it must be unchanged.
        if buf != pattern {
            return Err(Error::new(
                ErrorKind::Internal,
                "the echoed message changed",
            ));
        }
        println!("pingpong: {bytes} bytes, {round_trips} round trips, {one_way_us:.3} us one way");
    }
    universe.finalize()
}

/// `[bytes] [round-trips]`, both optional; round trips must be at least one.
fn parse_args() -> Result<(usize, u64)> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() > 2 || args.iter().any(|a| a.starts_with('-')) {
        return Err(Error::new(
            ErrorKind::Arg,
            "usage: pingpong [bytes (default 8)] [round-trips (default 10000)]",
        ));
    }
    let number = |i: usize, default: u64| -> Result<u64> {
        args.get(i).map_or(Ok(default), |a| {
            a.parse()
                .map_err(|_| Error::new(ErrorKind::Arg, format!("not a count: {a:?}")))
        })
    };
    let bytes = usize::try_from(number(0, 8)?)
        .map_err(|_| Error::new(ErrorKind::Count, "message size too large"))?;
    if bytes > 1 << 30 {
        return Err(Error::new(ErrorKind::Count, "messages of at most 1 GiB"));
    }
    let round_trips = number(1, 10_000)?;
    if round_trips == 0 {
        return Err(Error::new(ErrorKind::Arg, "round trips must be at least 1"));
    }
    Ok((bytes, round_trips))
}

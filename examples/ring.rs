//! A token around a ring of ranks, a halo swap, a reduction and a split — the API in one page.
//!
//! Ranks are processes. `cargo run --release --example ring` starts four of them itself
//! (`CH4_NP=8` for eight); `ch4run -n 4 target/release/examples/ring` and MPICH's Hydra
//! `mpiexec -n 4 target/release/examples/ring` launch it from outside.

use ch4::{op, Result};

fn main() -> Result<()> {
    // ch4's warnings (and, with CH4_LOG=debug, more) on standard error.
    ch4::log::init();
    let universe = ch4::process::init_or_launch(4)?;
    let world = universe.world();
    let ctx = universe.context();
    let (rank, size) = (world.rank(), world.size());

    // Blocking ring: rank 0 starts the token, everyone adds its rank.
    let mut token = [0u64];
    if size == 1 {
        world.send(&[0u64], 0, 0)?;
        world.recv(&mut token, 0, 0)?;
    } else if rank == 0 {
        world.send(&[0u64], 1, 0)?;
        world.recv(&mut token, size - 1, 0)?;
    } else {
        world.recv(&mut token, rank - 1, 0)?;
        token[0] += rank as u64;
        world.send(&token, (rank + 1) % size, 0)?;
    }

    // Nonblocking halo swap with both neighbours inside a scope: the buffers are borrowed
    // until every request of the scope has completed.
    let left = (rank + size - 1) % size;
    let right = (rank + 1) % size;
    let mine = [rank; 4];
    let (mut from_left, mut from_right) = ([0i32; 4], [0i32; 4]);
    ctx.scope(|s| {
        let reqs = vec![
            world.irecv(s, &mut from_left, left, 1)?,
            world.irecv(s, &mut from_right, right, 2)?,
            world.isend(s, &mine, right, 1)?,
            world.isend(s, &mine, left, 2)?,
        ];
        s.wait_all(reqs).map(drop)
    })?;

    // Collectives and communicator management.
    let mut total = [0i64];
    world.allreduce(&[rank as i64], &mut total, op::sum)?;
    let half = world
        .split(rank % 2, rank)?
        .expect("every rank has a color");
    println!(
        "rank {rank}/{size}: token {} | left {} right {} | sum of ranks {} | rank {} of {} in the {} half",
        token[0],
        from_left[0],
        from_right[0],
        total[0],
        half.rank(),
        half.size(),
        if rank % 2 == 0 { "even" } else { "odd" },
    );
    half.free()?;
    world.barrier()?;
    universe.finalize()
}

//! A 2-D Jacobi heat-diffusion stencil with halo exchange — the standard shape of a
//! domain-decomposed MPI code.
//!
//! The global grid (512x512 cells by default) is cut into blocks over a 2-D process grid chosen
//! like `MPI_Dims_create` (as square as possible: 4 ranks are 2x2, 6 are 3x2). Each rank holds
//! its block plus a one-cell halo. The grid's fixed boundary is hot on the north edge (1.0),
//! warm on the west edge (0.5) and cold elsewhere; the inside starts at 0. Every iteration:
//!
//! 1. the four edges are exchanged with the neighbours by nonblocking `irecv` / `isend` in one
//!    scope. At the physical boundary the neighbour is [`ch4::PROC_NULL`]: those operations
//!    complete at once and move nothing, so the halo keeps the boundary values it was given,
//!    and the exchange code has no special cases;
//! 2. the 5-point update `new = (north + south + west + east) / 4`;
//! 3. every K iterations an `allreduce` of the residual (the L2 norm of the last update).
//!
//! Rows are contiguous and go straight from and into the grid. Columns are not: each is
//! described by a [`ch4::Layout`] vector (MPI_Type_vector: `rows` blocks of one `f64`, a row
//! apart), which gathers it into a staging buffer before the send and scatters the received
//! column into the halo after the receive. The facade's nonblocking layout calls
//! (`isend_layout` / `irecv_layout`) borrow the whole buffer they select from, and here the
//! edges and halos of one grid would all be borrowed at once, some mutably — so the layout packs
//! and unpacks around plain `isend` / `irecv` instead. That is also what the device does with
//! columns this narrow (blocks of one `f64` are packed; only messages of at most 64 blocks go to
//! the transport as they lie).
//!
//! At the end rank 0 prints the residual, a checksum (the global sum of the grid, by
//! `allreduce`) and the time per iteration. With `--check`, the blocks are gathered on rank 0
//! and compared cell by cell with the same stencil run serially there; it prints `check: ok` or
//! fails.
//!
//! `cargo run --release --example halo2d -- [--size 512x512] [--iters 1000] [--every 100]
//! [--check]` starts four processes itself (`CH4_NP=6` for six);
//! `ch4run -n 4 target/release/examples/halo2d --check --size 64x48` launches it from outside.

use std::time::Instant;

use ch4::{op, Communicator, Error, ErrorKind, Layout, Netmod, Result, Shm, PROC_NULL};

/// What to run, from the command line.
struct Options {
    /// Global grid rows.
    rows: usize,
    /// Global grid columns.
    cols: usize,
    /// Jacobi iterations.
    iters: usize,
    /// Residual every this many iterations (and always after the last).
    every: usize,
    /// Compare with a serial run on rank 0.
    check: bool,
}

/// The largest grid accepted: 2^30 cells, two copies of 8 GiB each.
const MAX_CELLS: usize = 1 << 30;

const USAGE: &str = "usage: halo2d [--size ROWSxCOLS | --size N] [--iters N] [--every K] [--check]";

/// A command-line error, with the usage attached.
fn arg_error(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::Arg, format!("{}\n{USAGE}", msg.into()))
}

/// Reads the options; anything malformed is an `Arg` error, never a panic.
fn parse_args() -> Result<Options> {
    let mut o = Options {
        rows: 512,
        cols: 512,
        iters: 1000,
        every: 100,
        check: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || {
            args.next()
                .ok_or_else(|| arg_error(format!("{a} needs a value")))
        };
        let count = |v: &str| -> Result<usize> {
            v.parse()
                .map_err(|_| arg_error(format!("{a}: not a count: {v:?}")))
        };
        match a.as_str() {
            "--size" | "-s" => {
                let v = value()?;
                let (r, c) = v.split_once('x').unwrap_or((&v, &v));
                (o.rows, o.cols) = (count(r)?, count(c)?);
            }
            "--iters" | "-i" => o.iters = count(&value()?)?,
            "--every" | "-k" => o.every = count(&value()?)?,
            "--check" => o.check = true,
            other => return Err(arg_error(format!("unknown option {other:?}"))),
        }
    }
    if o.rows == 0 || o.cols == 0 || o.iters == 0 || o.every == 0 {
        return Err(arg_error("sizes and counts must be at least 1"));
    }
    // Two grids of 8-byte cells must fit in memory (and their sizes in a usize).
    if o.rows.saturating_mul(o.cols) > MAX_CELLS {
        return Err(arg_error(format!(
            "a {}x{} grid is too large (at most {MAX_CELLS} cells)",
            o.rows, o.cols
        )));
    }
    Ok(o)
}

fn main() -> Result<()> {
    // ch4's warnings (and, with CH4_LOG=debug, more) on standard error.
    ch4::log::init();
    let opts = parse_args()?; // once, before the ranks exist
    let universe = ch4::process::init_or_launch(4)?;
    let world = universe.world();
    let result = solve(&world, &opts)?;
    if world.rank() == 0 {
        println!(
            "halo2d: {}x{} grid on {} ranks as a {}x{} process grid, {} iterations",
            opts.rows, opts.cols, result.ranks, result.dims.0, result.dims.1, opts.iters
        );
        println!("residual {:.6e}", result.residual);
        println!("checksum {:.10e}", result.checksum);
        println!(
            "time per iteration {:.2} us",
            result.seconds * 1e6 / opts.iters as f64
        );
        if let Some(diff) = result.check_max_diff {
            println!("check: ok (serial run agrees, largest difference {diff:.1e})");
        }
    }
    universe.finalize()
}

/// The boundary value just outside the grid, at global row `i`, column `j` (one of them is -1
/// or one past the end): hot north edge, warm west edge, cold elsewhere. Asymmetric on purpose,
/// so a block put in the wrong place or transposed makes `--check` fail.
fn boundary(i: isize, j: isize) -> f64 {
    if i < 0 {
        1.0
    } else if j < 0 {
        0.5
    } else {
        0.0
    }
}

/// A grid of `rows x cols` cells with a one-cell frame (halo or boundary) around it, row-major:
/// cell (i, j) of the inside is `data[(i + 1) * width + j + 1]`.
#[derive(Clone)]
struct Grid {
    rows: usize,
    cols: usize,
    data: Vec<f64>,
}

impl Grid {
    /// A block whose inside starts at global cell (`row0`, `col0`) of a `grows x gcols` grid:
    /// zeros inside, and the boundary values wherever the frame lies outside the global grid.
    fn new(rows: usize, cols: usize, row0: usize, col0: usize, grows: usize, gcols: usize) -> Grid {
        let width = cols + 2;
        let mut data = vec![0.0; (rows + 2) * width];
        for fi in 0..rows + 2 {
            for fj in 0..cols + 2 {
                let gi = (row0 + fi) as isize - 1;
                let gj = (col0 + fj) as isize - 1;
                if gi < 0 || gj < 0 || gi >= grows as isize || gj >= gcols as isize {
                    data[fi * width + fj] = boundary(gi, gj);
                }
            }
        }
        Grid { rows, cols, data }
    }

    /// Cells per stored row: the inside's columns and the two frame columns.
    fn width(&self) -> usize {
        self.cols + 2
    }

    /// The inside cell (i, j), 0-based.
    fn at(&self, i: usize, j: usize) -> f64 {
        self.data[(i + 1) * self.width() + j + 1]
    }

    /// The inside, row by row, without the frame.
    fn inside(&self) -> impl Iterator<Item = f64> + '_ {
        (0..self.rows).flat_map(move |i| (0..self.cols).map(move |j| self.at(i, j)))
    }
}

/// One Jacobi sweep from `cur` into `next` (same shape; their frames are not written).
fn sweep(cur: &Grid, next: &mut Grid) {
    let (w, cols) = (cur.width(), cur.cols);
    for i in 1..=cur.rows {
        let up = &cur.data[(i - 1) * w + 1..(i - 1) * w + 1 + cols];
        let down = &cur.data[(i + 1) * w + 1..(i + 1) * w + 1 + cols];
        let row = &cur.data[i * w..(i + 1) * w]; // with its two frame cells: windows of three
        let out = &mut next.data[i * w + 1..i * w + 1 + cols];
        for (((o, u), d), r) in out.iter_mut().zip(up).zip(down).zip(row.windows(3)) {
            *o = 0.25 * (u + d + r[0] + r[2]);
        }
    }
}

/// The sum of the squared changes from `old` to `new` over the inside: the local part of the
/// residual. A separate pass, run only when a residual is wanted, keeps its serial chain of
/// additions out of the sweep.
fn change(old: &Grid, new: &Grid) -> f64 {
    old.inside()
        .zip(new.inside())
        .map(|(a, b)| (b - a) * (b - a))
        .sum()
}

/// `MPI_Dims_create` for two dimensions: the factor pair of `n` closest to square, larger first.
fn dims_create(n: usize) -> (usize, usize) {
    let mut small = (n as f64).sqrt() as usize;
    while small > 1 && n % small != 0 {
        small -= 1;
    }
    let small = small.max(1);
    (n / small, small)
}

/// Part `i` of `n` cells split into `parts` nearly equal runs: (first cell, length).
fn split(n: usize, parts: usize, i: usize) -> (usize, usize) {
    let (base, extra) = (n / parts, n % parts);
    (i * base + i.min(extra), base + usize::from(i < extra))
}

/// The four neighbours of a rank of the process grid; [`PROC_NULL`] where there is none.
struct Neighbours {
    /// The rank holding the block above (smaller global row numbers).
    north: i32,
    /// The rank below.
    south: i32,
    /// The rank to the left (smaller global column numbers).
    west: i32,
    /// The rank to the right.
    east: i32,
}

/// Tags name the direction a message travels, so a receive can never take the wrong edge.
const SOUTHWARD: i32 = 0;
const NORTHWARD: i32 = 1;
const EASTWARD: i32 = 2;
const WESTWARD: i32 = 3;

/// What rank 0 reports.
struct Outcome {
    /// Ranks in the job.
    ranks: i32,
    /// The process grid: (rows of ranks, columns of ranks).
    dims: (usize, usize),
    /// The L2 norm of the last iteration's update.
    residual: f64,
    /// The global sum of the grid.
    checksum: f64,
    /// Wall time of the iterations (between two barriers).
    seconds: f64,
    /// With `--check`: the largest difference from the serial run.
    check_max_diff: Option<f64>,
}

/// The whole computation on one rank. Generic over the device types, so the same code would
/// run with ranks as threads (`ch4::threads::Threads`).
fn solve<N: Netmod, S: Shm>(world: &Communicator<N, S>, o: &Options) -> Result<Outcome> {
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    let dims = dims_create(size);
    if o.rows < dims.0 || o.cols < dims.1 {
        return Err(Error::new(
            ErrorKind::Arg,
            format!(
                "a {}x{} grid is too small for a {}x{} process grid: every rank needs a cell",
                o.rows, o.cols, dims.0, dims.1
            ),
        ));
    }
    // Row-major placement of ranks on the process grid, as MPI_Cart_create does.
    let (pi, pj) = (rank / dims.1, rank % dims.1);
    let (row0, rows) = split(o.rows, dims.0, pi);
    let (col0, cols) = split(o.cols, dims.1, pj);
    let neighbour = |di: isize, dj: isize| -> i32 {
        let (i, j) = (pi as isize + di, pj as isize + dj);
        if i < 0 || j < 0 || i >= dims.0 as isize || j >= dims.1 as isize {
            PROC_NULL
        } else {
            (i as usize * dims.1 + j as usize) as i32
        }
    };
    let nb = Neighbours {
        north: neighbour(-1, 0),
        south: neighbour(1, 0),
        west: neighbour(0, -1),
        east: neighbour(0, 1),
    };

    let mut cur = Grid::new(rows, cols, row0, col0, o.rows, o.cols);
    let mut next = cur.clone(); // the frame's boundary values must be in both
    let column = Layout::vector::<f64>(rows, 1, cols + 2)?;
    let mut staging = Staging {
        send_west: vec![0.0; rows],
        send_east: vec![0.0; rows],
        recv_west: vec![0.0; rows],
        recv_east: vec![0.0; rows],
    };

    let mut residual = 0.0;
    world.barrier()?;
    let start = Instant::now();
    for it in 1..=o.iters {
        exchange(world, &mut cur, &column, &mut staging, &nb)?;
        sweep(&cur, &mut next);
        if it % o.every == 0 || it == o.iters {
            let mut total = [0.0f64];
            world.allreduce(&[change(&cur, &next)], &mut total, op::sum)?;
            residual = total[0].sqrt();
        }
        std::mem::swap(&mut cur, &mut next);
    }
    world.barrier()?;
    let seconds = start.elapsed().as_secs_f64();

    let mut checksum = [0.0f64];
    world.allreduce(&[cur.inside().sum::<f64>()], &mut checksum, op::sum)?;

    let check_max_diff = if o.check {
        check(world, &cur, o, dims, residual)?
    } else {
        None
    };
    Ok(Outcome {
        ranks: world.size(),
        dims,
        residual,
        checksum: checksum[0],
        seconds,
        check_max_diff,
    })
}

/// The contiguous copies of the west and east columns, reused every iteration.
struct Staging {
    send_west: Vec<f64>,
    send_east: Vec<f64>,
    recv_west: Vec<f64>,
    recv_east: Vec<f64>,
}

/// Fills the halo of `g` with the neighbours' edges: all eight transfers are in flight at once.
fn exchange<N: Netmod, S: Shm>(
    world: &Communicator<N, S>,
    g: &mut Grid,
    column: &Layout,
    st: &mut Staging,
    nb: &Neighbours,
) -> Result<()> {
    let (w, rows, cols) = (g.width(), g.rows, g.cols);
    // Gather the inside's first and last columns (they start at cells (1, 1) and (1, cols)).
    column.pack_range(bytes(&g.data[w + 1..]), 0, bytes_mut(&mut st.send_west))?;
    column.pack_range(bytes(&g.data[w + cols..]), 0, bytes_mut(&mut st.send_east))?;

    // Split the grid into the north halo row, the inside rows and the south halo row, so the
    // edge rows can be lent to sends while the halo rows are lent to receives.
    let (north_halo, rest) = g.data.split_at_mut(w);
    let (inside, south_halo) = rest.split_at_mut(rows * w);
    let inside: &[f64] = inside;
    let first_row = &inside[1..=cols];
    let last_row = &inside[(rows - 1) * w + 1..=(rows - 1) * w + cols];
    let (recv_west, recv_east) = (&mut st.recv_west, &mut st.recv_east);
    let (send_west, send_east) = (&st.send_west, &st.send_east);

    let statuses = world.context().scope(|s| {
        let reqs = vec![
            world.irecv(s, &mut north_halo[1..=cols], nb.north, SOUTHWARD)?,
            world.irecv(s, &mut south_halo[1..=cols], nb.south, NORTHWARD)?,
            world.irecv(s, recv_west.as_mut_slice(), nb.west, EASTWARD)?,
            world.irecv(s, recv_east.as_mut_slice(), nb.east, WESTWARD)?,
            world.isend(s, first_row, nb.north, NORTHWARD)?,
            world.isend(s, last_row, nb.south, SOUTHWARD)?,
            world.isend(s, send_west.as_slice(), nb.west, WESTWARD)?,
            world.isend(s, send_east.as_slice(), nb.east, EASTWARD)?,
        ];
        s.wait_all(reqs)
    })?;

    // Scatter the received columns into the halo columns (cells (1, 0) and (1, cols + 1)).
    // A receive from PROC_NULL reports 0 bytes, so the boundary values there stay untouched.
    let (west_bytes, east_bytes) = (statuses[2].bytes, statuses[3].bytes);
    column.unpack_range(
        bytes_mut(&mut g.data[w..]),
        0,
        &bytes(&st.recv_west)[..west_bytes],
    )?;
    column.unpack_range(
        bytes_mut(&mut g.data[w + cols + 1..]),
        0,
        &bytes(&st.recv_east)[..east_bytes],
    )?;
    Ok(())
}

/// The bytes of a slice of `f64`s, as the layout engine works on bytes.
fn bytes(v: &[f64]) -> &[u8] {
    bytemuck::cast_slice(v)
}

/// The bytes of a mutable slice of `f64`s.
fn bytes_mut(v: &mut [f64]) -> &mut [u8] {
    bytemuck::cast_slice_mut(v)
}

/// Gathers every block on rank 0 and compares it with the serial stencil of the same grid.
/// Returns the largest difference at rank 0 (`None` elsewhere), or an error on a mismatch.
fn check<N: Netmod, S: Shm>(
    world: &Communicator<N, S>,
    g: &Grid,
    o: &Options,
    dims: (usize, usize),
    residual: f64,
) -> Result<Option<f64>> {
    // Blocks differ in size by at most one row and column; `gather` wants equal pieces, so
    // every block is padded to the largest.
    let piece = o.rows.div_ceil(dims.0) * o.cols.div_ceil(dims.1);
    let mut mine: Vec<f64> = g.inside().collect();
    mine.resize(piece, 0.0);
    let size = world.size() as usize;
    let mut all = if world.rank() == 0 {
        vec![0.0; piece * size]
    } else {
        Vec::new()
    };
    world.gather(0, &mine, &mut all)?;
    if world.rank() != 0 {
        return Ok(None);
    }

    // The same iterations serially: one block that is the whole grid, all frame boundary.
    let mut cur = Grid::new(o.rows, o.cols, 0, 0, o.rows, o.cols);
    let mut next = cur.clone();
    for _ in 1..o.iters {
        sweep(&cur, &mut next);
        std::mem::swap(&mut cur, &mut next);
    }
    sweep(&cur, &mut next);
    let serial_residual = change(&cur, &next).sqrt();
    let cur = next;

    let mut max_diff = 0.0f64;
    for r in 0..size {
        let (row0, rows) = split(o.rows, dims.0, r / dims.1);
        let (col0, cols) = split(o.cols, dims.1, r % dims.1);
        let block = &all[r * piece..r * piece + rows * cols];
        for i in 0..rows {
            for j in 0..cols {
                let diff = (block[i * cols + j] - cur.at(row0 + i, col0 + j)).abs();
                max_diff = max_diff.max(diff);
            }
        }
    }
    // Each cell is computed from the same four values in the same order, so the grids agree
    // exactly; only the residual's sum is taken in another order.
    let residual_ok =
        (residual - serial_residual).abs() <= 1e-9 * serial_residual.abs().max(f64::MIN_POSITIVE);
    if max_diff > 1e-12 || !residual_ok {
        return Err(Error::new(
            ErrorKind::Internal,
            format!(
                "check failed: largest difference from the serial run {max_diff:e}, residual \
                 {residual:e} against {serial_residual:e}"
            ),
        ));
    }
    Ok(Some(max_diff))
}

//! How a Rust HPC framework embeds ch4: written once against the generic device types, it is
//! compiled separately (monomorphized) for every device it is used with — no `dyn`, no function
//! pointers between the framework's calls and the transport.
//!
//! The pattern, in the module [`framework`] below:
//!
//! - the framework's types carry the device's type parameters, `Framework<N: Netmod, S: Shm>`,
//!   and hold a [`ch4::Communicator<N, S>`]; everything else (`Context`, `Scope`, `Request`)
//!   is reached from it;
//! - it duplicates the communicator it is given, so its messages can never match the
//!   application's (what every MPI library does with `MPI_Comm_dup`);
//! - it builds its higher-level operations on ch4's point-to-point and collectives: a scatter
//!   of a vector over the ranks, a halo exchange with stencil update, and a map-reduce.
//!
//! The application ([`app`]) is a generic function too, and `main` instantiates it three times:
//!
//! 1. ranks as processes (`ch4::process`): `N = ch4::process::ProcessNetmod` (the TCP netmod
//!    in the default build), `S = ShmTransport`, every message within a node through its
//!    shared-memory rings;
//! 2. ranks as threads of one process (`ch4::threads::Threads::run`), two per simulated node:
//!    the same types as the processes (the build's netmod, TCP over loopback, between nodes;
//!    `S = ShmTransport`, rings in anonymous memory, within one);
//! 3. the same with both parameters swapped for other types: the natively matching
//!    `InprocNet<Native>` and the locked mailboxes of `InprocShm`.
//!
//! Rank 0 runs 2 and 3 after the process job has finished, checks that all three give the
//! serial answer, and prints the type names each run was compiled for.
//!
//! `cargo run --release --example embedding` starts three processes itself (`CH4_NP=5` for
//! five); `ch4run -n 3 target/release/examples/embedding` launches it from outside.

use ch4::threads::Threads;
use ch4::{op, Communicator, Error, ErrorKind, Netmod, Result, Shm};
use inproc::{InprocNet, InprocShm, Native};

use framework::Framework;

/// A tiny distributed-vector framework, generic over the device it runs on.
mod framework {
    use ch4::{Communicator, Error, ErrorKind, Netmod, Pod, Result, Shm, PROC_NULL};

    /// One rank's handle on the framework: a private communicator over the application's ranks.
    ///
    /// Every method is statically dispatched on `N` and `S`; nothing here knows, or needs to
    /// know, whether the ranks are processes or threads, or which transports carry the bytes.
    pub struct Framework<N: Netmod, S: Shm> {
        comm: Communicator<N, S>,
    }

    /// A vector cut into contiguous blocks, block `r` held by rank `r` (sizes differ by at
    /// most one element), the way distributed-array libraries lay out 1-D data.
    pub struct DistVec<T> {
        /// The elements this rank holds.
        pub local: Vec<T>,
    }

    impl<N: Netmod, S: Shm> Framework<N, S> {
        /// Joins the framework over the ranks of `app`: collective over `app`.
        pub fn new(app: &Communicator<N, S>) -> Result<Self> {
            Ok(Framework { comm: app.dup()? })
        }

        /// This rank's number.
        pub fn rank(&self) -> i32 {
            self.comm.rank()
        }

        /// The device types this instance was compiled for, to make monomorphization visible.
        pub fn device_types(&self) -> String {
            format!(
                "N = {}, S = {}",
                std::any::type_name::<N>(),
                std::any::type_name::<S>()
            )
        }

        /// Block `r` of a vector of `len` elements: (global offset, length).
        fn block(&self, len: usize, r: usize) -> (usize, usize) {
            let parts = self.comm.size() as usize;
            let (base, extra) = (len / parts, len % parts);
            (r * base + r.min(extra), base + usize::from(r < extra))
        }

        /// Distributes `root`'s `data` (ignored elsewhere) in blocks: the root sends every
        /// block at once with nonblocking sends in one scope, the others receive theirs.
        pub fn scatter<T: Pod>(&self, root: i32, data: &[T]) -> Result<DistVec<T>> {
            let mut len = [data.len() as u64];
            self.comm.bcast(root, &mut len)?;
            let len = usize::try_from(len[0])
                .map_err(|_| Error::new(ErrorKind::Count, "vector too long"))?;
            if len < self.comm.size() as usize {
                return Err(Error::new(
                    ErrorKind::Arg,
                    format!(
                        "{len} elements cannot give each of {} ranks one",
                        self.comm.size()
                    ),
                ));
            }
            let me = self.rank() as usize;
            let (offset, n) = self.block(len, me);
            let mut local = vec![T::zeroed(); n];
            if self.rank() == root {
                local.copy_from_slice(&data[offset..offset + n]);
                self.comm.context().scope(|s| {
                    let mut sends = Vec::new();
                    for r in (0..self.comm.size()).filter(|&r| r != root) {
                        let (o, n) = self.block(len, r as usize);
                        sends.push(self.comm.isend(s, &data[o..o + n], r, 0)?);
                    }
                    s.wait_all(sends).map(drop)
                })?;
            } else {
                self.comm.recv(&mut local, root, 0)?;
            }
            Ok(DistVec { local })
        }

        /// One step of a 3-point stencil, `x[i] = f(x[i - 1], x[i], x[i + 1])`: a halo exchange
        /// with both neighbours, then the update. At either end of the vector the neighbour is
        /// `PROC_NULL`, whose receive leaves the halo untouched — it keeps the end element
        /// itself, a reflecting boundary, with no special case in the exchange.
        pub fn stencil<T: Pod>(&self, v: &mut DistVec<T>, f: impl Fn(T, T, T) -> T) -> Result<()> {
            let (rank, size) = (self.rank(), self.comm.size());
            let west = if rank > 0 { rank - 1 } else { PROC_NULL };
            let east = if rank + 1 < size { rank + 1 } else { PROC_NULL };
            let (first, last) = match (v.local.first(), v.local.last()) {
                (Some(&a), Some(&b)) => (a, b),
                _ => return Err(Error::new(ErrorKind::Internal, "an empty block")),
            };
            let (mut halo_west, mut halo_east) = ([first], [last]);
            let (edge_west, edge_east) = ([first], [last]);
            self.comm.context().scope(|s| {
                let reqs = vec![
                    self.comm.irecv(s, &mut halo_west, west, 0)?,
                    self.comm.irecv(s, &mut halo_east, east, 1)?,
                    self.comm.isend(s, &edge_west, west, 1)?,
                    self.comm.isend(s, &edge_east, east, 0)?,
                ];
                s.wait_all(reqs).map(drop)
            })?;
            let old = v.local.clone();
            for (i, x) in v.local.iter_mut().enumerate() {
                let left = if i == 0 { halo_west[0] } else { old[i - 1] };
                let right = old.get(i + 1).copied().unwrap_or(halo_east[0]);
                *x = f(left, old[i], right);
            }
            Ok(())
        }

        /// Maps every element and folds the results with `reduce` (associative and
        /// commutative) across all ranks; every rank gets the result.
        pub fn map_reduce<T: Pod, R: Pod>(
            &self,
            v: &DistVec<T>,
            identity: R,
            map: impl Fn(&T) -> R,
            reduce: impl Fn(&mut R, &R),
        ) -> Result<R> {
            let mut local = identity;
            for x in &v.local {
                reduce(&mut local, &map(x));
            }
            let mut global = [identity];
            self.comm.allreduce(&[local], &mut global, &reduce)?;
            Ok(global[0])
        }

        /// Leaves the framework, freeing its communicator: collective.
        pub fn free(self) -> Result<()> {
            self.comm.free()
        }
    }
}

/// Length of the application's vector.
const LEN: usize = 1000;
/// Number of smoothing steps (halo exchanges) the application runs.
const STEPS: usize = 25;

/// The vector's starting values: scattered, so that smoothing has work to do.
fn initial(i: usize) -> u64 {
    (i as u64 * 7919) % 1000
}

/// The integer smoothing kernel (exact arithmetic, so every run must agree to the last bit).
fn smooth(left: u64, x: u64, right: u64) -> u64 {
    (left + 2 * x + right) / 4
}

/// What one run computes; every rank gets the same.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Summary {
    /// Sum of the smoothed vector.
    sum: u64,
    /// Its largest element.
    max: u64,
}

/// The application, written once against the framework for any device `Communicator<N, S>`.
/// Returns the summary and the device types it was compiled for.
fn app<N: Netmod, S: Shm>(world: &Communicator<N, S>) -> Result<(Summary, String)> {
    let fw = Framework::new(world)?;
    let data: Vec<u64> = if fw.rank() == 0 {
        (0..LEN).map(initial).collect()
    } else {
        Vec::new()
    };
    let mut v = fw.scatter(0, &data)?;
    for _ in 0..STEPS {
        fw.stencil(&mut v, smooth)?;
    }
    let summary = Summary {
        sum: fw.map_reduce(&v, 0u64, |&x| x, op::sum)?,
        max: fw.map_reduce(&v, 0u64, |&x| x, op::max)?,
    };
    let types = fw.device_types();
    fw.free()?;
    Ok((summary, types))
}

/// The same computation on one vector, as the reference.
fn serial() -> Summary {
    let mut v: Vec<u64> = (0..LEN).map(initial).collect();
    for _ in 0..STEPS {
        let old = v.clone();
        for (i, x) in v.iter_mut().enumerate() {
            let left = old[i.saturating_sub(1)];
            let right = old.get(i + 1).copied().unwrap_or(old[i]);
            *x = smooth(left, old[i], right);
        }
    }
    Summary {
        sum: v.iter().sum(),
        max: v.iter().copied().max().unwrap_or(0),
    }
}

/// Checks that every rank of a run got the serial answer and prints the run's line.
fn report(
    how: &str,
    ranks: usize,
    results: &[(Summary, String)],
    expected: &Summary,
) -> Result<()> {
    let Some((first, types)) = results.first() else {
        return Err(Error::new(ErrorKind::Internal, format!("{how}: no ranks")));
    };
    if let Some((wrong, _)) = results.iter().find(|(s, _)| s != expected) {
        return Err(Error::new(
            ErrorKind::Internal,
            format!("{how}: {wrong:?}, but the serial run gives {expected:?}"),
        ));
    }
    println!(
        "{how}: sum {} max {} on {ranks} ranks [{types}]",
        first.sum, first.max
    );
    Ok(())
}

fn main() -> Result<()> {
    // ch4's warnings (and, with CH4_LOG=debug, more) on standard error.
    ch4::log::init();
    let expected = serial();

    // 1. Ranks as processes: every process of the job runs the application and checks its
    //    result; rank 0 then goes on alone.
    let universe = ch4::process::init_or_launch(3)?;
    let world = universe.world();
    let (ranks, rank) = (world.size(), world.rank());
    let by_processes = app(&world)?;
    drop(world);
    universe.finalize()?;
    if rank != 0 {
        return report_quietly(&by_processes, &expected);
    }
    report("processes", ranks as usize, &[by_processes], &expected)?;

    // 2. The same application, ranks as threads of this process, two per simulated node.
    let by_threads = Threads::new(ranks as u32)
        .ranks_per_node(2)
        .run(|ctx| app(&ctx.world()))?;
    report("threads", by_threads.len(), &by_threads, &expected)?;

    // 3. And with other netmod and shm types: a natively matching netmod, locked mailboxes.
    let by_other_types = Threads::new(ranks as u32)
        .ranks_per_node(2)
        .run_with_shm::<InprocNet<Native>, InprocShm, _, _>(|ctx| app(&ctx.world()))?;
    report(
        "threads, other types",
        by_other_types.len(),
        &by_other_types,
        &expected,
    )?;

    println!(
        "embedding: all runs agree with the serial result (sum {} max {})",
        expected.sum, expected.max
    );
    Ok(())
}

/// A process rank other than 0 only checks its result: a wrong one fails the job.
fn report_quietly(result: &(Summary, String), expected: &Summary) -> Result<()> {
    if result.0 == *expected {
        Ok(())
    } else {
        Err(Error::new(
            ErrorKind::Internal,
            format!(
                "processes: {:?}, but the serial run gives {expected:?}",
                result.0
            ),
        ))
    }
}

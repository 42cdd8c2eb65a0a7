//! The OSU loops over the system's MPI through the `mpi` crate (rsmpi), for measuring ch4
//! against MPICH and Open MPI with the very same code. Built with `--features peer-mpi`; which
//! MPI is linked follows `MPICC` (e.g. `mpicc.mpich`, `mpicc.openmpi`) at build time, and the
//! programs run under that MPI's launcher.

use mpi::collective::SystemOperation;
use mpi::request::{multiple_scope, WaitGuard};
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;

use super::{BenchResult, Options, Pt2Pt, Spec};

/// A rank's world communicator.
struct Mpi {
    world: SimpleCommunicator,
}

impl Pt2Pt for Mpi {
    fn rank(&self) -> usize {
        self.world.rank() as usize
    }

    fn size(&self) -> usize {
        self.world.size() as usize
    }

    fn barrier(&self) -> BenchResult<()> {
        self.world.barrier();
        Ok(())
    }

    #[inline]
    fn send(&self, buf: &[u8], dest: usize, tag: i32) -> BenchResult<()> {
        self.world
            .process_at_rank(dest as i32)
            .send_with_tag(buf, tag);
        Ok(())
    }

    #[inline]
    fn recv(&self, buf: &mut [u8], src: usize, tag: i32) -> BenchResult<()> {
        self.world
            .process_at_rank(src as i32)
            .receive_into_with_tag(buf, tag);
        Ok(())
    }

    fn recv_any(&self, buf: &mut [u8]) -> BenchResult<(usize, i32)> {
        let st = self.world.any_process().receive_into(buf);
        Ok((st.source_rank() as usize, st.tag()))
    }

    fn send_window(&self, buf: &[u8], count: usize, dest: usize, tag: i32) -> BenchResult<()> {
        let peer = self.world.process_at_rank(dest as i32);
        multiple_scope(count, |scope, coll| {
            for _ in 0..count {
                coll.add(peer.immediate_send_with_tag(scope, buf, tag));
            }
            let mut statuses = Vec::with_capacity(count);
            coll.wait_all(&mut statuses);
        });
        Ok(())
    }

    fn send_each(&self, msgs: &[Vec<u8>], dest: usize, tags: &[i32]) -> BenchResult<()> {
        let peer = self.world.process_at_rank(dest as i32);
        multiple_scope(msgs.len(), |scope, coll| {
            for (m, &tag) in msgs.iter().zip(tags) {
                coll.add(peer.immediate_send_with_tag(scope, &m[..], tag));
            }
            let mut statuses = Vec::with_capacity(msgs.len());
            coll.wait_all(&mut statuses);
        });
        Ok(())
    }

    fn recv_window(
        &self,
        bufs: &mut [super::PageBuf],
        len: usize,
        src: usize,
        tag: i32,
    ) -> BenchResult<()> {
        let peer = self.world.process_at_rank(src as i32);
        multiple_scope(bufs.len(), |scope, coll| {
            for b in bufs.iter_mut() {
                coll.add(peer.immediate_receive_into_with_tag(scope, &mut b[..len], tag));
            }
            let mut statuses = Vec::with_capacity(coll.incomplete());
            coll.wait_all(&mut statuses);
        });
        Ok(())
    }

    fn exchange_window(
        &self,
        sbuf: &[u8],
        rbufs: &mut [super::PageBuf],
        len: usize,
        peer: usize,
        tag: i32,
    ) -> BenchResult<()> {
        let other = self.world.process_at_rank(peer as i32);
        let count = rbufs.len();
        mpi::request::scope(|scope| {
            let mut guards = Vec::with_capacity(2 * count);
            for b in rbufs.iter_mut() {
                let r = other.immediate_receive_into_with_tag(scope, &mut b[..len], tag);
                guards.push(WaitGuard::from(r));
            }
            for _ in 0..count {
                guards.push(WaitGuard::from(
                    other.immediate_send_with_tag(scope, sbuf, tag),
                ));
            }
            drop(guards); // each guard waits for its request
        });
        Ok(())
    }

    fn sum(&self, x: f64) -> BenchResult<f64> {
        let mut out = 0.0f64;
        self.world
            .all_reduce_into(&x, &mut out, SystemOperation::sum());
        Ok(out)
    }
}

/// Initializes MPI (the program must have been started by that MPI's launcher), runs the
/// program's test, prints OSU's output at rank 0.
pub fn launch(spec: &Spec, o: &Options) -> BenchResult<()> {
    if o.threads || o.multiple {
        return Err(
            "--threads and --multiple are ch4's; this build measures the system MPI".into(),
        );
    }
    let universe = mpi::initialize().ok_or("MPI was initialized already")?;
    let c = Mpi {
        world: universe.world(),
    };
    let first = c.rank() == 0;
    if first {
        let version = mpi::environment::library_version().unwrap_or_default();
        let name = version
            .lines()
            .next()
            .unwrap_or("MPI")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        let how = format!("{name} via rsmpi, {} processes", c.size());
        super::print_header(spec, o, &how, c.size());
    }
    super::measure(spec.kind, &c, o, &mut |size, values| {
        if first {
            super::print_row(size, values);
        }
    })?;
    Ok(())
}

/// Initializes MPI and runs `job` on this rank.
pub fn run_job<J: super::Job>(_ranks: u32, threads: bool, job: &J) -> BenchResult<()> {
    if threads {
        return Err("--threads is ch4's; this build measures the system MPI".into());
    }
    let universe = mpi::initialize().ok_or("MPI was initialized already")?;
    let c = Mpi {
        world: universe.world(),
    };
    job.run(&c)
}

//! The OSU loops over ch4's safe facade: ranks as processes (self-launched, or under `ch4run`
//! or Hydra) or, with `--threads`, as threads of one process.

use ch4::{Communicator, Context, Netmod, Shm};

use super::{BenchResult, Options, Pt2Pt, Spec};

/// A rank's world communicator and the context that opens its request scopes.
struct Ch4<N: Netmod, S: Shm, L: ch4::ThreadLevel = ch4::Single> {
    world: Communicator<N, S, L>,
    ctx: Context<N, S, L>,
}

impl<N: Netmod, S: Shm, L: ch4::ThreadLevel> Pt2Pt for Ch4<N, S, L> {
    fn rank(&self) -> usize {
        self.world.rank() as usize
    }

    fn size(&self) -> usize {
        self.world.size() as usize
    }

    fn barrier(&self) -> BenchResult<()> {
        Ok(self.world.barrier()?)
    }

    #[inline]
    fn send(&self, buf: &[u8], dest: usize, tag: i32) -> BenchResult<()> {
        Ok(self.world.send(buf, dest as i32, tag)?)
    }

    #[inline]
    fn recv(&self, buf: &mut [u8], src: usize, tag: i32) -> BenchResult<()> {
        self.world.recv(buf, src as i32, tag)?;
        Ok(())
    }

    fn recv_any(&self, buf: &mut [u8]) -> BenchResult<(usize, i32)> {
        let st = self.world.recv(buf, ch4::ANY_SOURCE, ch4::ANY_TAG)?;
        Ok((st.source as usize, st.tag))
    }

    fn send_window(&self, buf: &[u8], count: usize, dest: usize, tag: i32) -> BenchResult<()> {
        self.ctx.scope(|s| {
            let mut reqs = Vec::with_capacity(count);
            for _ in 0..count {
                reqs.push(self.world.isend(s, buf, dest as i32, tag)?);
            }
            s.wait_all(reqs).map(drop)
        })?;
        Ok(())
    }

    fn send_each(&self, msgs: &[Vec<u8>], dest: usize, tags: &[i32]) -> BenchResult<()> {
        self.ctx.scope(|s| {
            let mut reqs = Vec::with_capacity(msgs.len());
            for (m, &tag) in msgs.iter().zip(tags) {
                reqs.push(self.world.isend(s, m, dest as i32, tag)?);
            }
            s.wait_all(reqs).map(drop)
        })?;
        Ok(())
    }

    fn recv_window(
        &self,
        bufs: &mut [super::PageBuf],
        len: usize,
        src: usize,
        tag: i32,
    ) -> BenchResult<()> {
        self.ctx.scope(|s| {
            let mut reqs = Vec::with_capacity(bufs.len());
            for b in bufs.iter_mut() {
                reqs.push(self.world.irecv(s, &mut b[..len], src as i32, tag)?);
            }
            s.wait_all(reqs).map(drop)
        })?;
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
        self.ctx.scope(|s| {
            let mut reqs = Vec::with_capacity(2 * rbufs.len());
            let count = rbufs.len();
            for b in rbufs.iter_mut() {
                reqs.push(self.world.irecv(s, &mut b[..len], peer as i32, tag)?);
            }
            for _ in 0..count {
                reqs.push(self.world.isend(s, sbuf, peer as i32, tag)?);
            }
            s.wait_all(reqs).map(drop)
        })?;
        Ok(())
    }

    fn sum(&self, x: f64) -> BenchResult<f64> {
        let mut out = [0.0f64];
        self.world.allreduce(&[x], &mut out, ch4::op::sum)?;
        Ok(out[0])
    }
}

/// Runs the program's test on its ranks — processes (self-launched unless a launcher started
/// this one; `CH4_NP` overrides the count) or, with `--threads`, threads — and prints OSU's
/// output at rank 0. With `--multiple` the ranks start at MPI_THREAD_MULTIPLE.
pub fn launch(spec: &Spec, o: &Options) -> BenchResult<()> {
    if o.multiple {
        launch_at(spec, o, ch4::Multiple)
    } else {
        launch_at(spec, o, ch4::Single)
    }
}

fn launch_at<L: ch4::ThreadLevel>(spec: &Spec, o: &Options, level: L) -> BenchResult<()>
where
    Context<ch4::SelectedNetmod, ch4::SelectedShm, L>: Clone,
{
    let level_name = if o.multiple {
        ", MPI_THREAD_MULTIPLE"
    } else {
        ""
    };
    if o.threads {
        let how = format!("ch4, {} ranks as threads{level_name}", spec.ranks);
        super::print_header(spec, o, &how, spec.ranks as usize);
        ch4::threads::Threads::new(spec.ranks)
            .thread_level(level)
            .run(|ctx| {
                let c = Ch4 {
                    world: ctx.world(),
                    ctx: ctx.clone(),
                };
                let first = c.rank() == 0;
                super::measure(spec.kind, &c, o, &mut |size, values| {
                    if first {
                        super::print_row(size, values);
                    }
                })
                .map_err(|e| ch4::Error::new(ch4::ErrorKind::Internal, e.to_string()))
            })?;
        return Ok(());
    }
    let universe = ch4::process::init_or_launch_at(spec.ranks, level)?;
    let c = Ch4 {
        world: universe.world(),
        ctx: universe.context().clone(),
    };
    let first = c.rank() == 0;
    if first {
        let how = format!(
            "ch4 {}, {} processes{level_name}",
            env!("CARGO_PKG_VERSION"),
            c.size()
        );
        super::print_header(spec, o, &how, c.size());
    }
    super::measure(spec.kind, &c, o, &mut |size, values| {
        if first {
            super::print_row(size, values);
        }
    })?;
    drop(c);
    Ok(universe.finalize()?)
}

/// Runs `job` on `ranks` ranks (processes, self-launched unless a launcher started this one,
/// `CH4_NP` overriding the count; or threads).
pub fn run_job<J: super::Job>(ranks: u32, threads: bool, job: &J) -> BenchResult<()> {
    if threads {
        ch4::threads::Threads::new(ranks).run(|ctx| {
            let c = Ch4 {
                world: ctx.world(),
                ctx: ctx.clone(),
            };
            job.run(&c)
                .map_err(|e| ch4::Error::new(ch4::ErrorKind::Internal, e.to_string()))
        })?;
        return Ok(());
    }
    let universe = ch4::process::init_or_launch(ranks)?;
    let c = Ch4 {
        world: universe.world(),
        ctx: universe.context().clone(),
    };
    job.run(&c)?;
    drop(c);
    Ok(universe.finalize()?)
}

//! Ranks as threads: run an SPMD closure on N threads of this process, each with its own device
//! (MPC's thread-based mode). No launcher, no network: ranks of one (simulated) node talk through
//! the shared-memory layer's lock-free rings, placed in anonymous memory, and ranks of different
//! nodes through an in-process netmod from the `inproc` crate. Grouping ranks into nodes lets
//! one process exercise both routes.

use std::sync::{Arc, Mutex};

use ch4_core::core::DeviceConfig;
use ch4_core::transport::{Netmod, Shm};
use ch4_core::{Device, Error, ErrorKind, Gpid, Result};
use inproc::{AmOnly, Fabric, FabricConfig, InprocNet, InprocShm};
use shm::{Geometry, Segment, ShmConfig, ShmTransport};

use crate::Context;

/// A thread job under construction.
#[derive(Debug, Clone)]
pub struct Threads {
    fabric: FabricConfig,
    device: DeviceConfig,
    single_copy: Option<bool>,
    shm_geometry: Option<Geometry>,
    ring_record_max: Option<usize>,
}

/// The context type of a rank run by [`Threads::run`].
pub type ThreadContext<M = AmOnly> = Context<InprocNet<M>, ShmTransport>;

impl Threads {
    /// A job of `ranks` ranks on one simulated node.
    pub fn new(ranks: u32) -> Threads {
        Threads {
            fabric: FabricConfig::new(ranks),
            device: DeviceConfig::default(),
            single_copy: None,
            shm_geometry: None,
            ring_record_max: None,
        }
    }

    /// Groups the ranks into nodes of `n`: ranks on one node use shared memory, the others the
    /// netmod.
    pub fn ranks_per_node(mut self, n: u32) -> Threads {
        self.fabric.ranks_per_node = n;
        self
    }

    /// Messages up to `bytes` go eagerly; longer ones by rendezvous.
    pub fn eager_limit(mut self, bytes: usize) -> Threads {
        self.fabric.eager_limit = bytes;
        self
    }

    /// The largest single active-message payload (rendezvous data moves in pieces this big).
    pub fn max_payload(mut self, bytes: usize) -> Threads {
        self.fabric.max_payload = bytes;
        self
    }

    /// Whether the shared-memory layer moves large messages with one copy (CMA reads of the
    /// sender's buffer) or streams them through the rings; the default follows `CH4_SHM_CMA`.
    pub fn shm_single_copy(mut self, enabled: bool) -> Threads {
        self.single_copy = Some(enabled);
        self
    }

    /// The shared-memory segment's rings and cells, instead of the sizes chosen for the number
    /// of ranks on a node (tests use tiny ones to make every message path take part).
    pub fn shm_geometry(mut self, geometry: Geometry) -> Threads {
        self.shm_geometry = Some(geometry);
        self
    }

    /// Only records of up to `bytes` take the shared-memory rings, the rest go through cells
    /// (see `ShmTransport::set_ring_record_max`).
    pub fn shm_ring_record_max(mut self, bytes: usize) -> Threads {
        self.ring_record_max = Some(bytes);
        self
    }

    /// Device settings (request pool sizes, progress budgets).
    pub fn device_config(mut self, config: DeviceConfig) -> Threads {
        self.device = config;
        self
    }

    /// Runs `f` on every rank with the active-message netmod; returns the ranks' results in rank
    /// order, or the first failure (an error a rank returned, or a rank that panicked).
    pub fn run<R, F>(self, f: F) -> Result<Vec<R>>
    where
        R: Send,
        F: Fn(ThreadContext<AmOnly>) -> Result<R> + Sync,
    {
        self.run_with::<InprocNet<AmOnly>, R, F>(f)
    }

    /// Like [`Threads::run`], with the in-process netmod flavour `Net`
    /// (`InprocNet<AmOnly>`, the natively matching `InprocNet<Native>`, or the reordering
    /// `Shuffled<InprocNet<AmOnly>>`).
    pub fn run_with<Net, R, F>(self, f: F) -> Result<Vec<R>>
    where
        Net: Netmod + FromFabric + Send,
        R: Send,
        F: Fn(Context<Net, ShmTransport>) -> Result<R> + Sync,
    {
        self.run_with_shm::<Net, ShmTransport, R, F>(f)
    }

    /// Like [`Threads::run_with`], also choosing the shared-memory layer `Sh` (the real rings,
    /// [`ShmTransport`], or the simple locked mailboxes of [`InprocShm`]).
    pub fn run_with_shm<Net, Sh, R, F>(self, f: F) -> Result<Vec<R>>
    where
        Net: Netmod + FromFabric + Send,
        Sh: Shm + ThreadShm + Send,
        R: Send,
        F: Fn(Context<Net, Sh>) -> Result<R> + Sync,
    {
        let fabric = Fabric::new(self.fabric)?;
        let n = self.fabric.ranks;
        let device = self.device;
        let nodes = n.div_ceil(self.fabric.ranks_per_node.max(1));
        let job = ThreadJob {
            fabric: fabric.clone(),
            segments: (0..nodes).map(|_| Mutex::new(None)).collect(),
            single_copy: self.single_copy,
            shm_geometry: self.shm_geometry,
            ring_record_max: self.ring_record_max,
        };
        let job = &job;
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..n)
                .map(|rank| {
                    let fabric = Arc::clone(&fabric);
                    let f = &f;
                    std::thread::Builder::new()
                        .name(format!("ch4-rank-{rank}"))
                        .spawn_scoped(s, move || -> Result<R> {
                            let net = Net::from_fabric(fabric, rank)?;
                            let shm = Sh::for_thread(job, rank)?;
                            let dev = Device::new(net, shm, rank, n, device)?;
                            let ctx = Context::new(dev);
                            let r = f(ctx.clone())?;
                            // Output still queued for live ranks must leave before this rank
                            // ends, like a process's finalize.
                            ctx.device()?.finalize(std::time::Duration::from_secs(60))?;
                            Ok(r)
                        })
                        .map_err(|e| Error::new(ErrorKind::Internal, format!("spawn: {e}")))
                })
                .collect();
            let mut out = Vec::with_capacity(n as usize);
            let mut first_err = None;
            for (rank, h) in handles.into_iter().enumerate() {
                let r = match h {
                    Ok(h) => h.join().unwrap_or_else(|p| {
                        let msg = p
                            .downcast_ref::<&str>()
                            .map(|s| s.to_string())
                            .or_else(|| p.downcast_ref::<String>().cloned())
                            .unwrap_or_default();
                        Err(Error::new(
                            ErrorKind::PeerFailed,
                            format!("rank {rank} panicked: {msg}"),
                        ))
                    }),
                    Err(e) => Err(e),
                };
                match r {
                    Ok(v) => out.push(v),
                    Err(e) => {
                        first_err.get_or_insert_with(|| {
                            Error::new(e.kind(), format!("rank {rank}: {}", e.detail()))
                        });
                    }
                }
            }
            match first_err {
                None => Ok(out),
                Some(e) => Err(e),
            }
        })
    }
}

/// The TCP netmod for ranks as threads: every rank listens on loopback, and the ranks of one
/// job (one fabric) swap addresses through a table in this process before any message moves.
#[cfg(feature = "tcp")]
impl FromFabric for netmod_tcp::TcpNetmod {
    fn from_fabric(fabric: Arc<Fabric>, me: u32) -> Result<Self> {
        use std::collections::HashMap;
        use std::net::SocketAddr;
        use std::sync::{Condvar, OnceLock};
        /// Per job: every rank's address, how many ranks have read the table, the job key.
        type Book = HashMap<usize, (Vec<Option<SocketAddr>>, u32, u64)>;
        static BOOKS: OnceLock<(Mutex<Book>, Condvar)> = OnceLock::new();
        let (lock, cv) = BOOKS.get_or_init(|| (Mutex::new(HashMap::new()), Condvar::new()));
        let cfg = *fabric.config();
        let job = Arc::as_ptr(&fabric) as usize;
        fn poisoned<T>(_: T) -> Error {
            Error::new(ErrorKind::PeerFailed, "a rank panicked during setup")
        }
        let mut books = lock.lock().map_err(poisoned)?;
        // The first rank of the job draws its key; a predictable one would let any local
        // process pass for a rank.
        let entry = books.entry(job).or_insert_with(|| {
            (
                vec![None; cfg.ranks as usize],
                0,
                crate::process::random_key(),
            )
        });
        let mut net =
            netmod_tcp::TcpNetmod::bind(me, cfg.ranks, entry.2, ([127, 0, 0, 1], 0).into())?;
        net.limit(cfg.eager_limit, cfg.max_payload);
        entry.0[me as usize] = Some(net.local_addr());
        cv.notify_all();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let book = books.get(&job).map(|b| b.0.clone()).unwrap_or_default();
            if book.iter().all(Option::is_some) {
                for (r, a) in book.into_iter().enumerate() {
                    if let Some(a) = a {
                        net.set_address(r as Gpid, a)?;
                    }
                }
                // The last rank to read the table removes it.
                if let Some(b) = books.get_mut(&job) {
                    b.1 += 1;
                    if b.1 == cfg.ranks {
                        books.remove(&job);
                    }
                }
                return Ok(net);
            }
            let now = std::time::Instant::now();
            if now >= deadline {
                return Err(Error::new(
                    ErrorKind::Transport,
                    "the other ranks never published their TCP addresses",
                ));
            }
            books = cv.wait_timeout(books, deadline - now).map_err(poisoned)?.0;
        }
    }
}

/// In-process netmods that can be made from a fabric (both flavours of [`InprocNet`]).
pub trait FromFabric: Sized {
    /// The endpoint of rank `me`.
    fn from_fabric(fabric: Arc<Fabric>, me: u32) -> Result<Self>;
}

impl<M> FromFabric for InprocNet<M> {
    fn from_fabric(fabric: Arc<Fabric>, me: u32) -> Result<Self> {
        InprocNet::new(fabric, me)
    }
}

/// The active-message netmod behind the reordering wrapper, seeded with the rank number (every
/// rank shuffles differently, and a failing run can be replayed): lets whole MPI programs run
/// over an unordered transport, which drives the AM fallback's sequence-number path.
impl FromFabric for inproc::Shuffled<InprocNet<AmOnly>> {
    fn from_fabric(fabric: Arc<Fabric>, me: u32) -> Result<Self> {
        Ok(inproc::Shuffled::new(
            InprocNet::new(fabric, me)?,
            u64::from(me),
        ))
    }
}

/// What a thread job shares between its ranks: the in-process fabric and one shared-memory
/// segment per simulated node (made by the first rank of the node to need it).
pub struct ThreadJob {
    fabric: Arc<Fabric>,
    segments: Vec<Mutex<Option<Arc<Segment>>>>,
    single_copy: Option<bool>,
    shm_geometry: Option<Geometry>,
    ring_record_max: Option<usize>,
}

impl ThreadJob {
    /// The process ids on `rank`'s node, in local-rank order.
    fn node_ranks(&self, rank: Gpid) -> Vec<Gpid> {
        let node = self.fabric.node_of(rank);
        (0..self.fabric.config().ranks)
            .filter(|&g| self.fabric.node_of(g) == node)
            .collect()
    }
}

/// Shared-memory layers that ranks-as-threads can use.
pub trait ThreadShm: Sized {
    /// The layer of `rank` in `job`.
    fn for_thread(job: &ThreadJob, rank: Gpid) -> Result<Self>;
}

impl ThreadShm for InprocShm {
    fn for_thread(job: &ThreadJob, rank: Gpid) -> Result<Self> {
        InprocShm::new(job.fabric.clone(), rank)
    }
}

impl ThreadShm for ShmTransport {
    fn for_thread(job: &ThreadJob, rank: Gpid) -> Result<Self> {
        let local = job.node_ranks(rank);
        let me = local
            .iter()
            .position(|&g| g == rank)
            .ok_or_else(|| Error::new(ErrorKind::Internal, "rank missing from its node"))?;
        let node = job.fabric.node_of(rank) as usize;
        let cfg = ShmConfig::for_ranks(local.len());
        let seg = {
            let slot = job
                .segments
                .get(node)
                .ok_or_else(|| Error::new(ErrorKind::Internal, "node without a segment slot"))?;
            let mut slot = slot
                .lock()
                .map_err(|_| Error::new(ErrorKind::PeerFailed, "a rank panicked during setup"))?;
            match &*slot {
                Some(seg) => seg.clone(),
                None => {
                    let seg = Arc::new(Segment::anonymous(
                        local.len(),
                        job.shm_geometry.unwrap_or_else(|| cfg.geometry()),
                    )?);
                    *slot = Some(seg.clone());
                    seg
                }
            }
        };
        let fc = job.fabric.config();
        let mut t = ShmTransport::new(seg, me, &local, fc.ranks, fc.eager_limit, 0)?;
        t.limit_payload(fc.max_payload);
        if let Some(on) = job.single_copy {
            t.set_cma(on);
        }
        if let Some(bytes) = job.ring_record_max {
            t.set_ring_record_max(bytes);
        }
        Ok(t)
    }
}

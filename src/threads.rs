//! Ranks as threads: run an SPMD closure on N threads of this process, each with its own device
//! (MPC's thread-based mode). No launcher: ranks of one (simulated) node talk through the
//! shared-memory layer's lock-free rings, placed in anonymous memory, and ranks of different
//! nodes through a netmod — by default this build's own ([`SelectedNetmod`], TCP over loopback),
//! so a rank function that takes a plain [`Context`] runs unchanged as threads and as processes.
//! Grouping ranks into nodes lets one process exercise both routes.
//!
//! Settings come from the same `CH4_*` variables as in process mode (the builder's methods
//! override them), and a bad value is an error before any rank starts.
//!
//! A rank that returns an error or panics fails, as a killed process would: the others'
//! pending and later operations that depend on it fail with [`ErrorKind::PeerFailed`] instead
//! of waiting, and [`Threads::run`] returns the first failure.

use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

use ch4_core::bootstrap::Bootstrap;
use ch4_core::core::DeviceConfig;
use ch4_core::transport::{Netmod, Shm};
use ch4_core::{Device, Error, ErrorKind, Gpid, Result};
use inproc::{AmOnly, Fabric, FabricConfig, InprocNet, InprocShm};
use shm::{Geometry, Segment, ShmConfig, ShmTransport};

use crate::{Context, SelectedNetmod, Single, ThreadLevel};

/// A thread job under construction.
///
/// The ranks start at the thread level `L` ([`Single`] unless [`Threads::thread_level`] says
/// otherwise), the level of the [`Context`] each gets.
#[derive(Debug, Clone)]
pub struct Threads<L: ThreadLevel = Single> {
    ranks: u32,
    /// Set by the builder; else `CH4_NODE_SIZE`, else every rank on one node.
    ranks_per_node: Option<u32>,
    eager_limit: Option<usize>,
    max_payload: Option<usize>,
    single_copy: Option<bool>,
    shm_geometry: Option<Geometry>,
    ring_record_max: Option<usize>,
    /// Set by the builder; else `CH4_RAILS`.
    rails: Option<String>,
    /// Set by the builder; else the defaults with the environment's settings.
    device_config: Option<DeviceConfig>,
    /// Set by the builder; else `CH4_NUM_VCIS` at the multiple level, else one.
    vcis: Option<usize>,
    level: PhantomData<L>,
}

/// The context type of a rank run by [`Threads::run`]: the same as process mode's.
pub type ThreadContext = Context;

impl Threads {
    /// A job of `ranks` ranks on one simulated node.
    pub fn new(ranks: u32) -> Threads {
        Threads {
            ranks,
            ranks_per_node: None,
            eager_limit: None,
            max_payload: None,
            rails: None,
            device_config: None,
            single_copy: None,
            shm_geometry: None,
            ring_record_max: None,
            vcis: None,
            level: PhantomData,
        }
    }
}

impl<L: ThreadLevel> Threads<L> {
    /// Starts the ranks at thread level `M` (MPI_Init_thread): at [`crate::Multiple`], the
    /// rank function may hand its context and communicators to threads of its own, which call
    /// at once.
    ///
    /// ```
    /// use ch4::threads::Threads;
    /// use ch4::Multiple;
    ///
    /// let totals = Threads::new(2).thread_level(Multiple).run(|ctx| {
    ///     assert_eq!(ctx.thread_level(), ch4::Level::Multiple);
    ///     let world = ctx.world();
    ///     let peer = 1 - world.rank();
    ///     // Two threads of each rank, each on a communicator of its own.
    ///     let comms = [world.dup()?, world.dup()?];
    ///     std::thread::scope(|s| {
    ///         let workers: Vec<_> = comms
    ///             .iter()
    ///             .map(|comm| {
    ///                 s.spawn(move || -> ch4::Result<u32> {
    ///                     let mut got = [0u32];
    ///                     comm.sendrecv(&[1u32], peer, 0, &mut got, peer, 0)?;
    ///                     Ok(got[0])
    ///                 })
    ///             })
    ///             .collect();
    ///         workers.into_iter().map(|w| w.join().unwrap()).sum::<ch4::Result<u32>>()
    ///     })
    /// })?;
    /// assert_eq!(totals, [2, 2]);
    /// # Ok::<(), ch4::Error>(())
    /// ```
    pub fn thread_level<M: ThreadLevel>(self, _level: M) -> Threads<M> {
        Threads {
            ranks: self.ranks,
            ranks_per_node: self.ranks_per_node,
            eager_limit: self.eager_limit,
            max_payload: self.max_payload,
            rails: self.rails,
            single_copy: self.single_copy,
            shm_geometry: self.shm_geometry,
            ring_record_max: self.ring_record_max,
            device_config: self.device_config,
            vcis: self.vcis,
            level: PhantomData,
        }
    }

    /// Groups the ranks into nodes of `n`: ranks on one node use shared memory, the others the
    /// netmod. Overrides `CH4_NODE_SIZE`; without either, all ranks are on one node.
    pub fn ranks_per_node(mut self, n: u32) -> Threads<L> {
        self.ranks_per_node = Some(n);
        self
    }

    /// Messages up to `bytes` (at most) go eagerly, on every route; longer ones by rendezvous.
    /// Overrides `CH4_SHM_EAGER_LIMIT` and the netmod's eager limit.
    pub fn eager_limit(mut self, bytes: usize) -> Threads<L> {
        self.eager_limit = Some(bytes);
        self
    }

    /// The rails TCP reaches other nodes over, as `CH4_RAILS` lists them (which this overrides):
    /// on one machine, loopback addresses (`"127.0.0.1,127.0.0.2"`) make rails that stripe
    /// rendezvous data for real. Used only between nodes (see [`Threads::ranks_per_node`]).
    pub fn rails(mut self, rails: &str) -> Threads<L> {
        self.rails = Some(rails.to_string());
        self
    }

    /// The largest single active-message payload on every route (rendezvous data moves in
    /// pieces this big). Overrides `CH4_SHM_PIECE_SIZE` and the netmod's piece size.
    pub fn max_payload(mut self, bytes: usize) -> Threads<L> {
        self.max_payload = Some(bytes);
        self
    }

    /// Whether the shared-memory layer moves large messages with one copy (CMA reads of the
    /// sender's buffer, by the size rules however many ranks share the CPUs) or streams them
    /// through the rings; overrides `CH4_SHM_CMA`.
    pub fn shm_single_copy(mut self, enabled: bool) -> Threads<L> {
        self.single_copy = Some(enabled);
        self
    }

    /// The shared-memory segment's rings and cells, instead of the sizes chosen for the number
    /// of ranks on a node (tests use tiny ones to make every message path take part).
    pub fn shm_geometry(mut self, geometry: Geometry) -> Threads<L> {
        self.shm_geometry = Some(geometry);
        self
    }

    /// Only records of up to `bytes` take the shared-memory rings, the rest go through cells
    /// (see `ShmTransport::set_ring_record_max`); overrides `CH4_SHM_RING_RECORD_MAX`.
    pub fn shm_ring_record_max(mut self, bytes: usize) -> Threads<L> {
        self.ring_record_max = Some(bytes);
        self
    }

    /// Gives every rank `n` VCIs (at most 64), overriding `CH4_NUM_VCIS`; more than one
    /// needs the multiple thread level ([`Threads::thread_level`]).
    pub fn vcis(mut self, n: usize) -> Threads<L> {
        self.vcis = Some(n);
        self
    }

    /// Device settings (request pool sizes, progress budgets, eager credit), instead of the
    /// defaults with the environment's `CH4_EAGER_CREDIT*`.
    pub fn device_config(mut self, config: DeviceConfig) -> Threads<L> {
        self.device_config = Some(config);
        self
    }

    /// Runs `f` on every rank with this build's transports — the same [`Context`] type as
    /// process mode's, so one rank function serves both — and returns the ranks' results in
    /// rank order, or the first failure (the first error a rank returned or panic it raised,
    /// with the rank's number; the other ranks' operations that depended on it fail too).
    pub fn run<R, F>(self, f: F) -> Result<Vec<R>>
    where
        R: Send,
        F: Fn(Context<SelectedNetmod, ShmTransport, L>) -> Result<R> + Sync,
    {
        self.run_with::<SelectedNetmod, R, F>(f)
    }

    /// Like [`Threads::run`], with the netmod `Net` between nodes: the in-process
    /// active-message `InprocNet<AmOnly>`, the natively matching `InprocNet<Native>`, the
    /// reordering `Shuffled<InprocNet<AmOnly>>`, or the TCP netmod.
    pub fn run_with<Net, R, F>(self, f: F) -> Result<Vec<R>>
    where
        Net: Netmod + FromFabric + Send + 'static,
        R: Send,
        F: Fn(Context<Net, ShmTransport, L>) -> Result<R> + Sync,
    {
        self.run_with_shm::<Net, ShmTransport, R, F>(f)
    }

    /// Like [`Threads::run_with`], also choosing the shared-memory layer `Sh` (the real rings,
    /// [`ShmTransport`], or the simple locked mailboxes of [`InprocShm`]).
    pub fn run_with_shm<Net, Sh, R, F>(self, f: F) -> Result<Vec<R>>
    where
        Net: Netmod + FromFabric + Send + 'static,
        Sh: Shm + ThreadShm + Send + 'static,
        R: Send,
        F: Fn(Context<Net, Sh, L>) -> Result<R> + Sync,
    {
        self.run_wrapped::<Net, Sh, Net, Sh, _, R, F>(|_, _, net, shm| (net, shm), f)
    }

    /// Like [`Threads::run_with_shm`], with every rank's transports handed to `wrap` before
    /// its device is built: `wrap(rank, vci, netmod, shm)` returns the pair the device runs
    /// over. For wrappers that stand between the device and a real transport — the test kit's
    /// seeded fault injector (`testkit::Faulty`) runs the semantics suite over TCP and shared
    /// memory this way — which [`FromFabric`] could only name if the facade depended on them.
    pub fn run_wrapped<InNet, InShm, Net, Sh, W, R, F>(self, wrap: W, f: F) -> Result<Vec<R>>
    where
        InNet: FromFabric,
        InShm: ThreadShm,
        Net: Netmod + Send + 'static,
        Sh: Shm + Send + 'static,
        W: Fn(Gpid, usize, InNet, InShm) -> (Net, Sh) + Sync,
        R: Send,
        F: Fn(Context<Net, Sh, L>) -> Result<R> + Sync,
    {
        crate::settings::check_environment()?;
        crate::log::init_if_asked();
        let defaults = FabricConfig::new(self.ranks);
        let ranks_per_node = match self.ranks_per_node {
            Some(n) => n,
            None => ch4_core::env::count("CH4_NODE_SIZE")?.unwrap_or(defaults.ranks_per_node),
        };
        let vcis = match self.vcis {
            Some(n) if n > 1 && L::LEVEL < crate::Level::Multiple => {
                return Err(Error::new(
                    ErrorKind::Arg,
                    format!(
                        "{n} VCIs need the multiple thread level; the job is at {}",
                        L::LEVEL
                    ),
                ))
            }
            Some(n) => n.clamp(1, crate::settings::MAX_VCIS),
            None => crate::settings::num_vcis(L::LEVEL)?,
        };
        // Each VCI is a network of its own: a fabric (and below, a segment per node) that
        // connects it to the same VCI of every other rank.
        let fabrics = (0..vcis)
            .map(|_| {
                Fabric::new(FabricConfig {
                    ranks: self.ranks,
                    ranks_per_node,
                    eager_limit: self.eager_limit.unwrap_or(defaults.eager_limit),
                    max_payload: self.max_payload.unwrap_or(defaults.max_payload),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let n = self.ranks;
        // The ranks are this process's threads: they all share its CPUs. At the multiple
        // level a rank also yields soon while more of its threads wait than the CPUs allow
        // (`RankState::crowded`); the shared-memory layer counts each VCI as a thread.
        crate::settings::apply_idle_policy(n as usize)?;
        let host_crowded = crate::settings::outnumber_cpus(n as usize * vcis);
        let long_waits_uncrowded = crate::settings::long_waits_uncrowded(n as usize)?;
        let device = match self.device_config {
            Some(c) => c,
            None => DeviceConfig::from_env()?,
        };
        let nodes = n.div_ceil(ranks_per_node.max(1));
        let job = ThreadJob {
            segments: (0..vcis)
                .map(|_| (0..nodes).map(|_| Mutex::new(None)).collect())
                .collect(),
            fabrics,
            eager_limit: self.eager_limit,
            max_payload: self.max_payload,
            rails: self.rails.clone(),
            single_copy: self.single_copy,
            shm_geometry: self.shm_geometry,
            ring_record_max: self.ring_record_max,
            host_crowded,
            long_waits_uncrowded,
            first_failure: Mutex::new(None),
        };
        let job = &job;
        let make = |fabric: &Arc<Fabric>, rank: Gpid, vci: usize| -> Result<(Net, Sh)> {
            let net = InNet::from_fabric(fabric.clone(), rank, job)?;
            let shm = InShm::for_thread(job, rank, vci)?;
            Ok(wrap(rank, vci, net, shm))
        };
        let results: Vec<Option<R>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..n)
                .map(|rank| {
                    let (f, make) = (&f, &make);
                    std::thread::Builder::new()
                        .name(format!("ch4-rank-{rank}"))
                        .spawn_scoped(s, move || {
                            job.run_rank::<Net, Sh, L, R, F>(rank, device, make, f)
                        })
                })
                .collect();
            handles
                .into_iter()
                .enumerate()
                .map(|(rank, h)| match h {
                    Ok(h) => h.join().unwrap_or_else(|_| {
                        // `run_rank` catches the rank's panics; this is a panic of its own.
                        job.record_failure(
                            rank as Gpid,
                            Error::new(ErrorKind::Internal, "the rank's thread panicked"),
                        );
                        None
                    }),
                    Err(e) => {
                        job.record_failure(
                            rank as Gpid,
                            Error::new(ErrorKind::Internal, format!("spawn: {e}")),
                        );
                        None
                    }
                })
                .collect()
        });
        let failure = job
            .first_failure
            .lock()
            .map_err(|_| Error::new(ErrorKind::Internal, "a rank panicked while failing"))?
            .take();
        match failure {
            Some(e) => Err(e),
            None => results
                .into_iter()
                .map(|r| r.ok_or_else(|| Error::new(ErrorKind::Internal, "a rank gave no result")))
                .collect(),
        }
    }
}

/// What opens a rank's transports of one VCI: `make(fabric, rank, vci)`.
type MakeTransports<'a, Net, Sh> = dyn Fn(&Arc<Fabric>, Gpid, usize) -> Result<(Net, Sh)> + 'a;

impl ThreadJob {
    /// One rank's thread: builds its device, runs `f`, finalizes. A failure (an error `f`
    /// returned, a panic, a failed finalize) is recorded as the job's first failure if no other
    /// came before, and only then is the rank's device dropped — which is what tells its peers
    /// that it failed — so the first failure recorded is the cause, not one of its effects.
    /// `make(fabric, rank, vci)` opens the rank's transports of one VCI.
    fn run_rank<Net, Sh, L, R, F>(
        &self,
        rank: Gpid,
        device: DeviceConfig,
        make: &MakeTransports<'_, Net, Sh>,
        f: &F,
    ) -> Option<R>
    where
        Net: Netmod + Send + 'static,
        Sh: Shm + Send + 'static,
        L: ThreadLevel,
        F: Fn(Context<Net, Sh, L>) -> Result<R>,
    {
        let n = self.fabric().config().ranks;
        let started = (|| -> Result<Context<Net, Sh, L>> {
            let mut devices = Vec::with_capacity(self.fabrics.len());
            for (vci, fabric) in self.fabrics.iter().enumerate() {
                let (net, shm) = make(fabric, rank, vci)?;
                devices.push(Device::new(net, shm, rank, n, device)?);
            }
            let mut devices = devices.into_iter();
            let first = devices
                .next()
                .ok_or_else(|| Error::new(ErrorKind::Internal, "a rank without a VCI"))?;
            let ctx = Context::with_vcis(first, devices.collect())?;
            ctx.set_long_waits_uncrowded(self.long_waits_uncrowded);
            crate::progress::start_if_asked(&ctx)?;
            Ok(ctx)
        })();
        let ctx = match started {
            Ok(ctx) => ctx,
            Err(e) => {
                self.record_failure(rank, e);
                self.kill(rank);
                return None;
            }
        };
        if rank == 0 {
            crate::settings::print_summary_if_asked(&ctx);
        }
        let outcome = match catch_unwind(AssertUnwindSafe(|| f(ctx.clone()))) {
            // Output still queued for live ranks must leave before this rank ends, like a
            // process's finalize (a no-op if the rank finalized itself).
            Ok(Ok(v)) => ctx.finalize().map(|()| v),
            Ok(Err(e)) => Err(e),
            Err(panic) => {
                let msg = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                Err(Error::new(ErrorKind::Internal, format!("panicked: {msg}")))
            }
        };
        match outcome {
            Ok(v) => {
                for fabric in &self.fabrics {
                    fabric.leave(rank);
                }
                Some(v)
            }
            Err(e) => {
                self.record_failure(rank, e);
                self.kill(rank);
                drop(ctx);
                None
            }
        }
    }

    /// The first VCI's fabric, which every VCI's mirrors in shape and in failures.
    fn fabric(&self) -> &Arc<Fabric> {
        &self.fabrics[0]
    }

    /// Records on every VCI's fabric that `rank` failed.
    fn kill(&self, rank: Gpid) {
        for fabric in &self.fabrics {
            fabric.kill(rank);
        }
    }

    /// Keeps `e` as the job's failure unless an earlier one is kept already.
    fn record_failure(&self, rank: Gpid, e: Error) {
        if let Ok(mut first) = self.first_failure.lock() {
            first.get_or_insert_with(|| e.context(format!("rank {rank}")));
        }
    }
}

/// The TCP netmod for ranks as threads: every rank listens on loopback, and the ranks of one
/// job swap business cards in memory (`exchange_cards_in_memory`) — unless the job is one
/// node, where the netmod carries nothing and the exchange is skipped (as process mode does).
/// The job's own record of failed and finished ranks backs the connections' view, so a rank
/// that fails before it ever connected is seen to fail.
#[cfg(feature = "tcp")]
impl FromFabric for netmod_tcp::TcpNetmod {
    fn from_fabric(fabric: Arc<Fabric>, me: u32, job: &ThreadJob) -> Result<Self> {
        let ranks = fabric.config().ranks;
        let loopback: std::net::SocketAddr = ([127, 0, 0, 1], 0).into();
        let open = |key| {
            let mut net = netmod_tcp::TcpNetmod::bind(me, ranks, key, loopback)?;
            job.limit_net(&mut net);
            let watched = fabric.clone();
            net.watch_peers(Arc::new(move |g| watched.peer_state(g)));
            Ok(net)
        };
        let cfg = fabric.config();
        if cfg.ranks_per_node >= cfg.ranks {
            // One node: no rank is reached through the netmod.
            return open(crate::process::random_key()?);
        }
        exchange_cards_in_memory(&fabric, me, open)
    }
}

/// TCP over the rails `CH4_RAILS` names, for ranks as threads: each rail listens on its own
/// address (on one machine, loopback addresses such as 127.0.0.2 make rails that stripe for
/// real); without rails, or in a job on one node, the plain loopback netmod above.
#[cfg(feature = "tcp")]
impl FromFabric for netmod_rails::TcpRails {
    fn from_fabric(fabric: Arc<Fabric>, me: u32, job: &ThreadJob) -> Result<Self> {
        let cfg = *fabric.config();
        let asked = match &job.rails {
            Some(rails) => Some(netmod_rails::spec::parse(rails)?),
            None => netmod_rails::TcpRails::requested()?,
        };
        let specs = match asked {
            Some(specs) if cfg.ranks_per_node < cfg.ranks => specs,
            _ => {
                return netmod_tcp::TcpNetmod::from_fabric(fabric, me, job)
                    .map(netmod_rails::Rails::single)
            }
        };
        let open = |key| {
            let mut rails = netmod_rails::TcpRails::open_rails(&specs, |addr| {
                let mut net = netmod_tcp::TcpNetmod::bind(me, cfg.ranks, key, (addr, 0).into())?;
                job.limit_net(&mut net);
                Ok(net)
            })?;
            let watched = fabric.clone();
            rails.watch_peers(Arc::new(move |g| watched.peer_state(g)));
            Ok(rails)
        };
        exchange_cards_in_memory(&fabric, me, open)
    }
}

/// The business-card exchange of process mode, for ranks that are threads of one process: rank
/// `me` opens its netmod with `open(job_key)` (the key drawn by the first rank of the job to
/// get here), publishes its card in a table in this process, waits for every rank's, and
/// learns them. Fails after 30 s, or as soon as a rank of the job has failed, rather than wait
/// for a card that will never come.
#[cfg_attr(
    not(any(feature = "tcp", feature = "ofi", feature = "ucx")),
    allow(dead_code)
)] // network netmods use it
pub(crate) fn exchange_cards_in_memory<N: Bootstrap>(
    fabric: &Arc<Fabric>,
    me: u32,
    open: impl FnOnce(u64) -> Result<N>,
) -> Result<N> {
    use std::collections::HashMap;
    use std::sync::{Condvar, OnceLock};
    /// Per job (by its fabric's address): every rank's card, how many ranks have read the
    /// table, the job key.
    type Book = HashMap<usize, (Vec<Option<Vec<u8>>>, u32, u64)>;
    static BOOKS: OnceLock<(Mutex<Book>, Condvar)> = OnceLock::new();
    fn poisoned<T>(_: T) -> Error {
        Error::new(ErrorKind::PeerFailed, "a rank panicked during setup")
    }
    let ranks = fabric.config().ranks;
    let (lock, cv) = BOOKS.get_or_init(|| (Mutex::new(HashMap::new()), Condvar::new()));
    let job = Arc::as_ptr(fabric) as usize;
    let mut books = lock.lock().map_err(poisoned)?;
    // The first rank of the job draws its key; a predictable one would let any local process
    // pass for a rank.
    let key = match books.get(&job) {
        Some(book) => book.2,
        None => {
            let key = crate::process::random_key()?;
            books.insert(job, (vec![None; ranks as usize], 0, key));
            key
        }
    };
    let mut net = open(key)?;
    let card = net.business_card()?;
    if let Some(book) = books.get_mut(&job) {
        book.0[me as usize] = Some(card);
    }
    cv.notify_all();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let cards: Option<Vec<Vec<u8>>> =
            books.get(&job).and_then(|b| b.0.iter().cloned().collect());
        if let Some(cards) = cards {
            // The last rank to read the table removes it.
            if let Some(b) = books.get_mut(&job) {
                b.1 += 1;
                if b.1 == ranks {
                    books.remove(&job);
                }
            }
            drop(books);
            net.learn_cards(&cards)?;
            return Ok(net);
        }
        let now = std::time::Instant::now();
        if now >= deadline || (0..ranks).any(|g| fabric.peer_state(g) != ch4_core::PeerState::Alive)
        {
            return Err(Error::new(
                ErrorKind::Transport,
                "the other ranks never published their business cards",
            ));
        }
        let wait = (deadline - now).min(std::time::Duration::from_millis(50));
        books = cv.wait_timeout(books, wait).map_err(poisoned)?.0;
    }
}

/// The job's record of failed and finished ranks as a network netmod's [`PeerWatch`], each
/// change held back [`WATCH_GRACE`] after this rank first sees it: a rank that finished may
/// have left its last messages in the network (in UCX's shared-memory FIFOs, a provider's
/// queues), to be received before waits on it fail — the grace process mode's launcher watch
/// gives too.
#[cfg(any(feature = "ofi", feature = "ucx"))]
fn graceful_watch(fabric: Arc<Fabric>) -> ch4_core::bootstrap::PeerWatch {
    let seen: Mutex<Vec<Option<std::time::Instant>>> =
        Mutex::new(vec![None; fabric.config().ranks as usize]);
    Arc::new(move |g| {
        let state = fabric.peer_state(g);
        if state == ch4_core::PeerState::Alive {
            return state;
        }
        let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
        let Some(first) = seen.get_mut(g as usize) else {
            return state;
        };
        let since = *first.get_or_insert_with(std::time::Instant::now);
        if since.elapsed() < WATCH_GRACE {
            ch4_core::PeerState::Alive
        } else {
            state
        }
    })
}

/// How long [`graceful_watch`] keeps a finished or failed rank alive to this rank.
#[cfg(any(feature = "ofi", feature = "ucx"))]
const WATCH_GRACE: std::time::Duration = std::time::Duration::from_millis(100);

/// The libfabric netmod for ranks as threads: every rank opens its own endpoint (the provider
/// that `FI_PROVIDER` names, else the best one), and the ranks swap their addresses in memory
/// (`exchange_cards_in_memory`) — unless the job is one node, where nothing is opened. The
/// job's record of failed and finished ranks is the netmod's view of its peers.
#[cfg(feature = "ofi")]
impl FromFabric for netmod_ofi::OfiNetmod {
    fn from_fabric(fabric: Arc<Fabric>, me: u32, _job: &ThreadJob) -> Result<Self> {
        let cfg = *fabric.config();
        let watch = graceful_watch(fabric.clone());
        let open = |key, spans| {
            let mut net = netmod_ofi::OfiNetmod::open(me, cfg.ranks, key, spans)?;
            net.watch_peers(watch);
            Ok(net)
        };
        if cfg.ranks_per_node >= cfg.ranks {
            return open(0, false);
        }
        exchange_cards_in_memory(&fabric, me, |key| open(key, true))
    }
}

/// The UCX netmod for ranks as threads: every rank opens its own worker (configured by the
/// `UCX_*` environment, as UCX programs are), and the ranks swap their worker addresses in
/// memory (`exchange_cards_in_memory`) — unless the job is one node, where nothing is opened.
/// The job's record of failed and finished ranks adds to what UCX's endpoints report.
#[cfg(feature = "ucx")]
impl FromFabric for netmod_ucx::UcxNetmod {
    fn from_fabric(fabric: Arc<Fabric>, me: u32, _job: &ThreadJob) -> Result<Self> {
        use ch4_core::bootstrap::Bootstrap;
        let cfg = *fabric.config();
        let watch = graceful_watch(fabric.clone());
        let open = |key, spans| {
            let mut net = netmod_ucx::UcxNetmod::open(me, cfg.ranks, key, spans)?;
            net.watch_peers(watch);
            Ok(net)
        };
        if cfg.ranks_per_node >= cfg.ranks {
            return open(0, false);
        }
        exchange_cards_in_memory(&fabric, me, |key| open(key, true))
    }
}

/// The netmod `CH4_NETMOD` chooses, in a build with several: each rank opens it as it opens
/// that netmod alone (with `auto`, the first of the build's that opens).
#[cfg(any(feature = "tcp", feature = "ofi", feature = "ucx"))]
impl FromFabric for netmod_any::AnyNetmod {
    fn from_fabric(fabric: Arc<Fabric>, me: u32, job: &ThreadJob) -> Result<Self> {
        use netmod_any::{AnyNetmod, Kind};
        AnyNetmod::choose(|kind| match kind {
            #[cfg(feature = "tcp")]
            Kind::Tcp => {
                netmod_rails::TcpRails::from_fabric(fabric.clone(), me, job).map(Into::into)
            }
            #[cfg(feature = "ofi")]
            Kind::Ofi => {
                netmod_ofi::OfiNetmod::from_fabric(fabric.clone(), me, job).map(Into::into)
            }
            #[cfg(feature = "ucx")]
            Kind::Ucx => {
                netmod_ucx::UcxNetmod::from_fabric(fabric.clone(), me, job).map(Into::into)
            }
            #[allow(unreachable_patterns)] // with every netmod built in
            other => Err(Error::new(
                ErrorKind::Arg,
                format!("the {} netmod is not built in", other.name()),
            )),
        })
    }
}

/// No netmod (a build without a network feature): a thread job must fit on one node.
impl FromFabric for ch4_core::transport::NoNetmod {
    fn from_fabric(fabric: Arc<Fabric>, _me: u32, _job: &ThreadJob) -> Result<Self> {
        let cfg = fabric.config();
        if cfg.ranks_per_node < cfg.ranks {
            return Err(Error::new(
                ErrorKind::Arg,
                "this build has no network netmod: run every rank on one node, or use \
                 Threads::run_with with an in-process netmod",
            ));
        }
        Ok(ch4_core::transport::NoNetmod)
    }
}

/// Netmods that ranks as threads can use: made for rank `me` of the job's fabric.
pub trait FromFabric: Sized {
    /// The endpoint of rank `me`.
    fn from_fabric(fabric: Arc<Fabric>, me: u32, job: &ThreadJob) -> Result<Self>;
}

impl<M> FromFabric for InprocNet<M> {
    fn from_fabric(fabric: Arc<Fabric>, me: u32, _job: &ThreadJob) -> Result<Self> {
        InprocNet::new(fabric, me)
    }
}

/// The active-message netmod behind the reordering wrapper, seeded with the rank number (every
/// rank shuffles differently, and a failing run can be replayed): lets whole MPI programs run
/// over an unordered transport, which drives the AM fallback's sequence-number path.
impl FromFabric for inproc::Shuffled<InprocNet<AmOnly>> {
    fn from_fabric(fabric: Arc<Fabric>, me: u32, _job: &ThreadJob) -> Result<Self> {
        Ok(inproc::Shuffled::new(
            InprocNet::new(fabric, me)?,
            u64::from(me),
        ))
    }
}

/// What a thread job shares between its ranks: the in-process fabric (which also records which
/// ranks failed or finished), one shared-memory segment per simulated node (made by the first
/// rank of the node to need it), the builder's overrides, and the first failure.
pub struct ThreadJob {
    /// Per VCI (never empty).
    fabrics: Vec<Arc<Fabric>>,
    /// Per VCI, per node.
    segments: Vec<Vec<Mutex<Option<Arc<Segment>>>>>,
    eager_limit: Option<usize>,
    max_payload: Option<usize>,
    /// TCP's rails, set by [`Threads::rails`] (read by TCP's netmod only).
    #[cfg_attr(not(feature = "tcp"), allow(dead_code))]
    rails: Option<String>,
    single_copy: Option<bool>,
    shm_geometry: Option<Geometry>,
    ring_record_max: Option<usize>,
    /// More ranks (this process's threads) times VCIs than CPUs.
    host_crowded: bool,
    /// See `RankState::crowded`.
    long_waits_uncrowded: u32,
    first_failure: Mutex<Option<Error>>,
}

impl ThreadJob {
    /// The process ids on `rank`'s node, in local-rank order.
    fn node_ranks(&self, rank: Gpid) -> Vec<Gpid> {
        let node = self.fabric().node_of(rank);
        (0..self.fabric().config().ranks)
            .filter(|&g| self.fabric().node_of(g) == node)
            .collect()
    }

    /// Applies the builder's thresholds to a TCP netmod.
    #[cfg(feature = "tcp")]
    fn limit_net(&self, net: &mut netmod_tcp::TcpNetmod) {
        if self.eager_limit.is_some() || self.max_payload.is_some() {
            net.limit(
                self.eager_limit.unwrap_or(usize::MAX),
                self.max_payload.unwrap_or(usize::MAX),
            );
        }
    }
}

/// Shared-memory layers that ranks-as-threads can use.
pub trait ThreadShm: Sized {
    /// The layer of `rank`'s VCI `vci` in `job`.
    fn for_thread(job: &ThreadJob, rank: Gpid, vci: usize) -> Result<Self>;
}

impl ThreadShm for InprocShm {
    fn for_thread(job: &ThreadJob, rank: Gpid, vci: usize) -> Result<Self> {
        let fabric = job
            .fabrics
            .get(vci)
            .ok_or_else(|| Error::new(ErrorKind::Internal, "no such VCI"))?;
        InprocShm::new(fabric.clone(), rank)
    }
}

impl ThreadShm for ShmTransport {
    fn for_thread(job: &ThreadJob, rank: Gpid, vci: usize) -> Result<Self> {
        let local = job.node_ranks(rank);
        let me = local
            .iter()
            .position(|&g| g == rank)
            .ok_or_else(|| Error::new(ErrorKind::Internal, "rank missing from its node"))?;
        let node = job.fabric().node_of(rank) as usize;
        let cfg = ShmConfig::for_node(local.len(), job.fabrics.len())?;
        let seg = {
            let slot = job
                .segments
                .get(vci)
                .and_then(|v| v.get(node))
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
        let ranks = job.fabric().config().ranks;
        let eager = job.eager_limit.unwrap_or(cfg.eager_limit);
        let mut t = ShmTransport::new(seg, me, &local, ranks, eager, 0)?;
        t.set_host_crowded(job.host_crowded);
        if let Some(bytes) = job.max_payload {
            t.limit_payload(bytes);
        }
        if let Some(on) = job.single_copy {
            t.set_cma(on);
        }
        if let Some(bytes) = job.ring_record_max {
            t.set_ring_record_max(bytes);
        }
        Ok(t)
    }
}

//! Process mode: ranks are processes started by a PMI-1 launcher — `ch4run`, MPICH's Hydra
//! `mpiexec` (and through it ssh, Slurm, PBS) — or a program started alone, which is a singleton
//! (rank 0 of 1).
//!
//! Bootstrap, in order: PMI init gives rank, size and the job's key-value space; node locality
//! comes from `PMI_process_mapping` (or, if the launcher publishes none, from hostnames exchanged
//! through the key-value space); the first rank of each node creates the node's shared segment
//! (a /dev/shm file named after the job and 64 random bits, made exclusively, mode 0600) and
//! publishes its name, the others attach after a fence (refusing a file that is not their
//! user's alone), and the last to attach unlinks the name (the first rank, after a second
//! fence, should one fail) — so nothing is left behind even if a rank is later killed, and no
//! other user can have made the file for the job to map.
//! When the job spans nodes, every rank also opens the build's netmod and publishes its business
//! card through the key-value space (the TCP netmod's: its listening address), cut into as many
//! values as the process manager's value size needs, together with a random job key that rank 0
//! draws, so ranks on other nodes can reach it and strangers cannot. The exchange is the same
//! for every netmod ([`ch4_core::bootstrap::Bootstrap`]).
//! `CH4_NODE_SIZE=k` makes the job treat every `k` consecutive ranks as one node, so that the
//! network path can be exercised on a single host.
//!
//! Under ch4run, a job that spans nodes also asks the launcher to tell it when a rank leaves or
//! fails ([`pmi::Client::watch_peers`]), and hands that to the netmod as its
//! [`PeerWatch`](ch4_core::bootstrap::PeerWatch):
//! libfabric cannot tell a dead peer from a slow one, so without it a receive from a killed
//! process would wait for ever. (Hydra has no such notice; it ends the whole job when a rank
//! dies, which is also not a hang.)

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use ch4_core::bootstrap::{card_segments, join_card_segments, Bootstrap};
use ch4_core::core::DeviceConfig;
use ch4_core::{Device, Error, ErrorKind, Gpid, PeerState, Result};
use shm::{Segment, ShmConfig, ShmTransport};

use crate::process_manager::ProcessManager;
use crate::{Communicator, Context, Single, ThreadLevel};

/// The netmod process mode uses in this build (the build's [`crate::SelectedNetmod`]): TCP
/// with the `tcp` feature (the default); without it, none, and a job must fit on one node.
pub type ProcessNetmod = crate::SelectedNetmod;

/// The context of a rank in process mode: the same type as a rank's as a thread
/// ([`crate::threads::Threads::run`]), so rank code can take a plain [`Context`].
pub type ProcessContext = Context;

/// A running rank: its device and its connection to the process manager.
///
/// Call [`Universe::finalize`] when the rank is done: it flushes what the transports still hold
/// for live peers, tells them this rank left in order, leaves the job (PMI finalize) and
/// returns the error if any of that failed. Dropping the universe does the same, ignoring
/// errors. A program that ends with [`std::process::exit`] (or `abort`, or a signal) without
/// either skips all of it: messages it sent that still wait in a transport queue are lost, and
/// its peers see it fail rather than leave — requests that wait on it end with
/// [`ErrorKind::PeerFailed`], receives from `ANY_SOURCE` on its communicators too — and the
/// launcher sees it go without PMI finalize (a job whose other ranks then wait for it in a PMI
/// barrier is ended with an error).
///
/// The rank runs at the thread level `L`: [`Single`] from [`init`], the level asked for from
/// [`init_thread`].
pub struct Universe<L: ThreadLevel = Single> {
    ctx: Context<ProcessNetmod, ShmTransport, L>,
    /// Shared with the netmod's [`LauncherWatch`], which reads peer events from it.
    pmi: Arc<Mutex<Option<ProcessManager>>>,
    /// Whether finalize holds a barrier of the job between flushing the transports and closing
    /// them: when ranks on other nodes are reached
    /// through a netmod and the launcher tells no one who left (Hydra). A libfabric or UCX peer
    /// that closes its endpoints then looks the same as one that died, and one that closed
    /// while a peer still waited on it failed that peer's receive (seen over UCX between two
    /// hosts); after the barrier every rank is done with its messages. MPICH's finalize has the
    /// same barrier.
    barrier_at_finalize: bool,
}

impl<L: ThreadLevel> Universe<L> {
    /// All processes of the job.
    pub fn world(&self) -> Communicator<ProcessNetmod, ShmTransport, L> {
        self.ctx.world()
    }

    /// The rank's context (scopes, the self communicator, the device).
    pub fn context(&self) -> &Context<ProcessNetmod, ShmTransport, L> {
        &self.ctx
    }

    /// Leaves the job in order: finalizes the rank ([`Context::finalize`]), then leaves the
    /// process manager. Returns the first error: a flush that could not finish (a peer stopped
    /// receiving), requests still pending ([`ErrorKind::Pending`]: they are abandoned, and the
    /// job is left all the same), or the process manager's.
    pub fn finalize(self) -> Result<()> {
        self.finish(true)
    }

    /// [`Universe::finalize`] through a shared reference, for a universe that other threads
    /// may still reach (the C library's at `MPI_THREAD_MULTIPLE`, which lives until the
    /// process ends): their later calls fail with an error instead of using a finalized rank.
    /// Dropping the universe afterwards does nothing more.
    pub fn finalize_shared(&self) -> Result<()> {
        self.finish(true)
    }

    /// Finalizes the rank and leaves the job; `in_order`: called by the program (a universe
    /// dropped without finalize leaves at once: its peers see it fail).
    fn finish(&self, in_order: bool) -> Result<()> {
        if self.client().is_none() {
            return Ok(());
        }
        // The process manager stays reachable while the rank finalizes: a netmod that reads
        // peers' cards on first contact may meet a new peer in the last flush.
        let finalized = if in_order && self.barrier_at_finalize {
            self.ctx
                .rank
                .finalize_then(&mut || match self.client().as_mut() {
                    Some(c) => c.barrier(),
                    None => Ok(()),
                })
        } else {
            self.ctx.finalize()
        };
        let finalized = match finalized {
            Err(e) if e.kind() == ErrorKind::Pending && !self.ctx.is_finalized() => {
                let _ = self.ctx.rank.finalize_anyway();
                Err(e)
            }
            other => other,
        };
        let Some(c) = self.client().take() else {
            return finalized;
        };
        let left = c.finalize();
        finalized.and(left)
    }

    /// Ends the whole job with `code` (PMI abort): the launcher stops every rank.
    pub fn abort(&self, code: i32, message: &str) -> ! {
        if let Some(c) = self.client().as_mut() {
            c.abort(code, message);
        }
        eprintln!("ch4: abort({code}): {message}");
        std::process::exit(code)
    }
}

impl<L: ThreadLevel> Universe<L> {
    /// The connection to the process manager (taken at finalize).
    fn client(&self) -> MutexGuard<'_, Option<ProcessManager>> {
        lock(&self.pmi)
    }
}

impl<L: ThreadLevel> Drop for Universe<L> {
    fn drop(&mut self) {
        let _ = self.finish(false);
    }
}

/// The shared process manager, locked.
fn lock(pm: &Mutex<Option<ProcessManager>>) -> MutexGuard<'_, Option<ProcessManager>> {
    // A panic while the lock was held leaves the client as it was: still usable.
    pm.lock().unwrap_or_else(|p| p.into_inner())
}

fn pmi_err(e: pmi::Error) -> Error {
    Error::new(ErrorKind::Transport, format!("process manager: {e}"))
}

/// Whether this process was started by a launcher (as opposed to alone): a PMI one (ch4run,
/// Hydra, `srun --mpi=pmi2`) or a PMIx one (Open MPI's `mpirun`, `srun --mpi=pmix`).
pub fn under_launcher() -> bool {
    crate::process_manager::under_pmi() || crate::process_manager::under_pmix()
}

/// Joins the job, first starting it if needed: a program started without a launcher re-runs
/// itself as `ranks` processes under the embedded launcher (the same one as `ch4run`; `CH4_NP`
/// overrides the count) and exits with the job's exit code. Under a launcher it just joins. This
/// is what makes `cargo run --example ring` a four-process job with nothing installed.
pub fn init_or_launch(ranks: u32) -> Result<Universe> {
    init_or_launch_at(ranks, Single)
}

/// [`init_or_launch`] at thread level `level` ([`init_thread`]).
pub fn init_or_launch_at<L: ThreadLevel>(ranks: u32, level: L) -> Result<Universe<L>> {
    crate::settings::check_environment()?;
    let ranks = ch4_core::env::count("CH4_NP")?.unwrap_or(ranks);
    pmi::launch::self_launch(ranks).map_err(pmi_err)?;
    init_thread(level)
}

/// Joins the job this process belongs to (or becomes a singleton) with the default settings and
/// those of the environment.
pub fn init() -> Result<Universe> {
    crate::settings::check_environment()?;
    init_with(DeviceConfig::from_env()?)
}

/// Joins the job with the given device settings (the environment's `CH4_EAGER_CREDIT*` are not
/// applied: start from `DeviceConfig::from_env()` to keep them).
pub fn init_with(config: DeviceConfig) -> Result<Universe> {
    init_with_level(config, Single)
}

/// Joins the job at thread level `level` (MPI_Init_thread), with the default settings and
/// those of the environment. The level is provided as asked: it is the type of the rank's
/// handles ([`crate::level`]).
pub fn init_thread<L: ThreadLevel>(level: L) -> Result<Universe<L>> {
    crate::settings::check_environment()?;
    init_with_level(DeviceConfig::from_env()?, level)
}

/// [`init_with`] at thread level `level`.
pub fn init_with_level<L: ThreadLevel>(config: DeviceConfig, _level: L) -> Result<Universe<L>> {
    crate::settings::check_environment()?;
    crate::log::init_if_asked();
    let mut client = ProcessManager::join()?;
    let rank = client.rank();
    let size = client.size();
    let nodes = node_ids(&mut client, rank, size)?;
    let Some(&my_node) = nodes.get(rank as usize) else {
        return Err(Error::new(
            ErrorKind::Transport,
            format!("process manager gave rank {rank} in a job of {size}"),
        ));
    };
    let local: Vec<Gpid> = (0..size)
        .filter(|&g| nodes[g as usize] == my_node)
        .collect();
    if !<ProcessNetmod as Bootstrap>::NETWORK && local.len() != size as usize {
        let distinct = {
            let mut v = nodes.clone();
            v.sort_unstable();
            v.dedup();
            v.len()
        };
        return Err(Error::new(
            ErrorKind::Transport,
            format!(
                "the job spans {distinct} nodes, but this build has no network netmod: run all \
                 ranks on one node"
            ),
        ));
    }
    let me = local
        .iter()
        .position(|&g| g == rank)
        .ok_or_else(|| Error::new(ErrorKind::Internal, "rank missing from its node"))?;
    // The idle policy counts ranks; at the multiple level a rank also yields soon while more
    // of its threads wait than the host has CPUs for (`RankState::crowded`). The
    // shared-memory layer's choice between streaming and reading large messages counts each
    // VCI as a thread that may communicate, as it did before.
    let vcis = crate::settings::num_vcis(L::LEVEL)?;
    let on_host = ranks_on_host(&mut client, rank, size, &nodes)?;
    crate::settings::apply_idle_policy(on_host)?;
    let crowded = crate::settings::outnumber_cpus(on_host * vcis);
    // Each VCI is a network of its own: a node segment and a netmod endpoint that connect it
    // to the same VCI of every other rank.
    let cfg = ShmConfig::for_node(local.len(), vcis)?;
    let kvs = client.job_name()?;
    let spans_nodes = local.len() != size as usize;
    // Two barriers of the whole job make the node's segments and introduce the netmods (each
    // barrier through a launcher across hosts costs milliseconds: Slurm's, tens).
    // Before the first: the node's first rank creates the segments, rank 0 publishes the job
    // key. Between them: the others attach, every rank opens its netmods (with the key) and
    // publishes their cards. After the second: the segments' names go, the cards are there.
    // Every rank takes part in both even when its own step failed, so that a failure is
    // reported by every rank instead of leaving the others waiting.
    let segments = NodeSegments {
        kvs: &kvs,
        node: my_node,
        me,
        ranks: local.len(),
        first: local[0],
        cfg,
    };
    let created: Vec<Option<Result<Segment>>> =
        (0..vcis).map(|v| segments.create(&mut client, v)).collect();
    let published = if spans_nodes && rank == 0 {
        random_key().and_then(|key| client.put("ch4-job-key", &format!("{key:016x}")))
    } else {
        Ok(())
    };
    client.barrier()?;
    published?;
    let attached: Vec<Result<Segment>> = created
        .into_iter()
        .enumerate()
        .map(|(v, c)| c.unwrap_or_else(|| segments.attach(&mut client, v)))
        .collect();
    let opened = open_netmods::<ProcessNetmod>(&mut client, rank, size, spans_nodes, vcis);
    client.barrier()?;
    let mut shms = Vec::with_capacity(vcis);
    for seg in attached {
        let seg = seg?;
        if me == 0 && local.len() > 1 {
            seg.unlink()?;
        }
        let mut shm = ShmTransport::new(
            Arc::new(seg),
            me,
            &local,
            size,
            cfg.eager_limit,
            std::process::id(),
        )?;
        shm.set_host_crowded(crowded);
        shms.push(shm);
    }
    let mut nets = opened?;
    let pmi = Arc::new(Mutex::new(Some(client)));
    if spans_nodes {
        learn_cards(&pmi, &mut nets, size)?;
    }
    let (watched, told_who_left) = match lock(&pmi).as_mut() {
        Some(c) if spans_nodes => {
            let watched = c.watch_peers()?;
            (watched, watched && c.tells_who_left())
        }
        _ => (false, false),
    };
    if watched {
        let watch = Arc::new(LauncherWatch::new(pmi.clone(), size));
        for net in &mut nets {
            let watch = watch.clone();
            net.watch_peers(Arc::new(move |g| watch.peer_state(g)));
        }
    }
    let mut devices = Vec::with_capacity(vcis);
    for (net, shm) in nets.into_iter().zip(shms) {
        devices.push(Device::new(net, shm, rank, size, config)?);
    }
    let mut devices = devices.into_iter();
    let first = devices
        .next()
        .ok_or_else(|| Error::new(ErrorKind::Internal, "a rank without a VCI"))?;
    let ctx = Context::with_vcis(first, devices.collect())?;
    ctx.set_long_waits_uncrowded(crate::settings::long_waits_uncrowded(on_host)?);
    crate::progress::start_if_asked(&ctx)?;
    if rank == 0 {
        crate::settings::print_summary_if_asked(&ctx);
    }
    Ok(Universe {
        ctx,
        pmi,
        barrier_at_finalize: spans_nodes && !told_who_left,
    })
}

/// The launcher's word on which ranks left or failed, as a netmod's
/// [`PeerWatch`](ch4_core::bootstrap::PeerWatch): peer events
/// are read from the PMI connection without blocking, at most every [`Self::POLL_EVERY`].
struct LauncherWatch {
    pmi: Arc<Mutex<Option<ProcessManager>>>,
    seen: Mutex<Seen>,
}

/// What the launcher has said so far.
struct Seen {
    /// The state of each rank the launcher said ended, and when this rank learned it (the
    /// others are alive: a job of a million ranks keeps nothing for them).
    states: std::collections::HashMap<Gpid, (PeerState, Instant)>,
    /// The job's size: events about other ranks are ignored.
    size: u32,
    last_poll: Option<Instant>,
}

impl LauncherWatch {
    /// How often the PMI connection is looked at (one `poll` system call): a wait asks for
    /// peers' states only after progress found nothing to do, but then often.
    const POLL_EVERY: Duration = Duration::from_millis(5);

    /// How long a failure is kept from the device after the launcher reported it: the dead
    /// rank's last messages may still be in the network (sent before it died, not yet read by
    /// the provider), and must be received before waits on it fail.
    const GRACE: Duration = Duration::from_millis(100);

    fn new(pmi: Arc<Mutex<Option<ProcessManager>>>, size: u32) -> Self {
        LauncherWatch {
            pmi,
            seen: Mutex::new(Seen {
                states: Default::default(),
                size,
                last_poll: None,
            }),
        }
    }

    fn peer_state(&self, gpid: Gpid) -> PeerState {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if seen
            .last_poll
            .map_or(true, |t| now.duration_since(t) >= Self::POLL_EVERY)
        {
            seen.last_poll = Some(now);
            // Busy (the rank is in a PMI call on another thread): ask again next time.
            if let Ok(mut pmi) = self.pmi.try_lock() {
                if let Some(c) = pmi.as_mut() {
                    match c.poll_peer_events() {
                        Ok(events) => {
                            for ev in events {
                                let (r, st) = match ev {
                                    pmi::PeerEvent::Left(r) => (r, PeerState::Left),
                                    pmi::PeerEvent::Failed(r) => (r, PeerState::Failed),
                                };
                                if r < seen.size {
                                    seen.states.insert(r, (st, now));
                                }
                            }
                        }
                        // The launcher is gone: it is ending the job; nothing more to learn.
                        Err(e) => tracing::debug!(error = %e, "peer events unavailable"),
                    }
                }
            }
        }
        match seen.states.get(&gpid) {
            Some(&(PeerState::Alive, _)) | None => PeerState::Alive,
            Some(&(st, since)) if now.duration_since(since) >= Self::GRACE => st,
            Some(_) => PeerState::Alive,
        }
    }
}

/// This rank's netmods (one a VCI), opened and, when the job spans nodes, their business cards
/// published (cut into as many values as the process manager needs, see
/// [`ch4_core::bootstrap::card_segments`]), with the job key that rank 0 published before the
/// last barrier. A single-node job never uses the network, so it publishes nothing. The same
/// code for every netmod ([`Bootstrap`]).
fn open_netmods<N: Bootstrap>(
    client: &mut ProcessManager,
    rank: u32,
    size: u32,
    spans_nodes: bool,
    vcis: usize,
) -> Result<Vec<N>> {
    if !spans_nodes {
        // The key is still random, so that no other local process can pass for a rank.
        return (0..vcis)
            .map(|_| N::open(rank, size, random_key()?, false))
            .collect();
    }
    let key = client
        .get(0, "ch4-job-key")?
        .and_then(|k| u64::from_str_radix(&k, 16).ok())
        .ok_or_else(|| Error::new(ErrorKind::Transport, "rank 0 published no job key"))?;
    let max_value = client.max_value_len()?;
    let mut nets = Vec::with_capacity(vcis);
    for vci in 0..vcis {
        let net = N::open(rank, size, key, true)?;
        let segments = card_segments(&net.business_card()?, max_value)?;
        let name = card_key(rank, vci);
        client.put(&name, &segments.len().to_string())?;
        for (i, s) in segments.iter().enumerate() {
            client.put(&format!("{name}-{i}"), s)?;
        }
        nets.push(net);
    }
    Ok(nets)
}

/// Introduces each netmod to its peers once every card is published: the netmod reads the
/// others' cards from the process manager, now or on first contact
/// ([`Bootstrap::learn_cards_from`]).
fn learn_cards<N: Bootstrap>(
    pm: &Arc<Mutex<Option<ProcessManager>>>,
    nets: &mut [N],
    size: u32,
) -> Result<()> {
    for (vci, net) in nets.iter_mut().enumerate() {
        let pm = pm.clone();
        net.learn_cards_from(
            size,
            Box::new(move |r| match lock(&pm).as_mut() {
                Some(client) => read_card(client, r, vci),
                None => Err(Error::new(
                    ErrorKind::Transport,
                    format!(
                        "rank {r}'s business card is needed after this rank left its job: \
                         the process manager is gone"
                    ),
                )),
            }),
        )?;
    }
    Ok(())
}

/// The name of rank `r`'s card for VCI `vci`: every VCI's card is published before the one
/// barrier, VCI 0's under the names a single-VCI job has always used, VCI v's with `-v{v}` after
/// the rank.
fn card_key(r: u32, vci: usize) -> String {
    if vci == 0 {
        format!("ch4-card-{r}")
    } else {
        format!("ch4-card-{r}-v{vci}")
    }
}

/// Rank `r`'s business card for VCI `vci`, read from the process manager.
fn read_card(client: &mut ProcessManager, r: u32, vci: usize) -> Result<Vec<u8>> {
    let missing = || {
        Error::new(
            ErrorKind::Transport,
            format!("rank {r} published no business card for VCI {vci}"),
        )
    };
    let name = card_key(r, vci);
    let count: usize = client
        .get(r, &name)?
        .and_then(|n| n.parse().ok())
        .ok_or_else(missing)?;
    let mut segs = Vec::with_capacity(count);
    for i in 0..count {
        segs.push(client.get(r, &format!("{name}-{i}"))?.ok_or_else(missing)?);
    }
    join_card_segments(r, &segs)
}

/// A job key nobody outside the job can guess: 8 bytes from the kernel's generator
/// (`getrandom(2)`, which needs no /dev; else /dev/urandom). When neither answers, start-up
/// fails: a key made of the time and the process id could be guessed by any local process.
pub(crate) fn random_key() -> Result<u64> {
    let mut b = [0u8; 8];
    // SAFETY: getrandom writes at most `b.len()` bytes into `b`, a valid, writable array of
    // this frame; flags 0 (the urandom pool, blocking only before it is first seeded).
    let got = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if got == b.len() as isize {
        return Ok(u64::from_le_bytes(b));
    }
    use std::io::Read;
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(|e| {
            Error::new(
                ErrorKind::Transport,
                format!("no random numbers for the job's key (getrandom and /dev/urandom: {e})"),
            )
        })?;
    Ok(u64::from_le_bytes(b))
}

/// Node id of every rank: `CH4_NODE_SIZE` if set, else the host it runs on ([`host_ids`]).
fn node_ids(client: &mut ProcessManager, rank: u32, size: u32) -> Result<Vec<u32>> {
    if let Some(k) = ch4_core::env::count("CH4_NODE_SIZE")? {
        return Ok((0..size).map(|r| r / k).collect());
    }
    host_ids(client, rank, size)
}

/// How many ranks of the job run on this process's host, node split or not: the ranks that
/// share its CPUs. With `CH4_NODE_SIZE` the job's nodes are smaller than its hosts (every rank
/// its own node, say, to exercise the network on one host), and counting a node's ranks would
/// hide that five ranks share two cores: their waiting loops would then spin half a millisecond
/// before yielding (see `settings::apply_idle_policy`).
fn ranks_on_host(
    client: &mut ProcessManager,
    rank: u32,
    size: u32,
    nodes: &[u32],
) -> Result<usize> {
    let hosts = if ch4_core::env::count("CH4_NODE_SIZE")?.is_some() {
        host_ids(client, rank, size)?
    } else {
        nodes.to_vec()
    };
    let mine = hosts.get(rank as usize).copied();
    Ok(hosts.iter().filter(|&&h| Some(h) == mine).count())
}

/// Host id of every rank: the launcher's process mapping, else by comparing hostnames.
fn host_ids(client: &mut ProcessManager, rank: u32, size: u32) -> Result<Vec<u32>> {
    if let Some(ids) = client.node_ids()? {
        if ids.len() == size as usize {
            return Ok(ids);
        }
    }
    if size == 1 {
        return Ok(vec![0]);
    }
    let host = hostname();
    client.put(&format!("ch4-host-{rank}"), &host)?;
    client.barrier()?;
    let mut hosts: Vec<String> = Vec::with_capacity(size as usize);
    for r in 0..size {
        let h = client.get(r, &format!("ch4-host-{r}"))?.ok_or_else(|| {
            Error::new(
                ErrorKind::Transport,
                format!("rank {r} published no hostname"),
            )
        })?;
        hosts.push(h);
    }
    let mut names: Vec<&String> = Vec::new();
    Ok(hosts
        .iter()
        .map(|h| match names.iter().position(|n| *n == h) {
            Some(i) => i as u32,
            None => {
                names.push(h);
                (names.len() - 1) as u32
            }
        })
        .collect())
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".to_string())
}

/// The start of the names of a job's node segment of VCI `vci` (see
/// [`Segment::create_unique`], which adds 64 random bits): the job's key-value-space name, so
/// that a stray file in /dev/shm says whose it was, cut to keep the name within a file name's
/// 255 bytes.
fn segment_prefix(kvs: &str, node: u32, vci: usize) -> PathBuf {
    let clean: String = kvs
        .chars()
        .take(64)
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    PathBuf::from(format!("/dev/shm/ch4-{clean}-n{node}-v{vci}"))
}

/// The key under which the node's first rank publishes the random part of VCI `vci`'s segment
/// name.
fn segment_key(node: u32, vci: usize) -> String {
    format!("ch4-shm-n{node}-v{vci}")
}

/// The node's segments, one a VCI; see the module docs for the protocol.
struct NodeSegments<'a> {
    /// The job's name, the start of the segments' names.
    kvs: &'a str,
    node: u32,
    /// This rank's index on the node.
    me: usize,
    /// Ranks on the node.
    ranks: usize,
    /// The node's first rank, which makes the segments and publishes their names.
    first: Gpid,
    cfg: ShmConfig,
}

impl NodeSegments<'_> {
    /// Before the first barrier: VCI `vci`'s segment, made by the node's first rank (in private
    /// memory when the rank is alone on its node: no file is needed at all) under a name no one
    /// can guess and made exclusively, so no other user can have made the file first; its
    /// name is published for the others. `None` for the ranks that attach after it.
    fn create(&self, client: &mut ProcessManager, vci: usize) -> Option<Result<Segment>> {
        if self.ranks == 1 {
            return Some(Segment::anonymous(1, self.cfg.geometry()));
        }
        if self.me != 0 {
            return None;
        }
        let prefix = segment_prefix(self.kvs, self.node, vci);
        Some(
            Segment::create_unique(&prefix, self.ranks, self.cfg.geometry(), random_key).and_then(
                |(seg, n)| {
                    client.put(&segment_key(self.node, vci), &format!("{n:016x}"))?;
                    Ok(seg)
                },
            ),
        )
    }

    /// Between the barriers: VCI `vci`'s segment, under the name the node's first rank
    /// published.
    fn attach(&self, client: &mut ProcessManager, vci: usize) -> Result<Segment> {
        let n = client
            .get(self.first, &segment_key(self.node, vci))?
            .filter(|v| v.len() == 16)
            .and_then(|v| u64::from_str_radix(&v, 16).ok())
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::Transport,
                    format!(
                        "rank {} published no shared segment for VCI {vci}: it could not make \
                         it (see its error)",
                        self.first
                    ),
                )
            })?;
        let prefix = segment_prefix(self.kvs, self.node, vci);
        Segment::attach(&Segment::unique_path(&prefix, n), self.ranks)
    }
}

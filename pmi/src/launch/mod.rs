//! The embedded one-host launcher: what the `ch4run` binary runs, as a library so that any
//! program can start a job itself.
//!
//! [`run`] starts N processes as ranks 0..N-1 of one job, serves each the PMI-1 protocol over a
//! socketpair (`PMI_FD`, with `PMI_RANK` / `PMI_SIZE`, as Hydra does) or over TCP (`PMI_PORT`),
//! publishes `PMI_process_mapping` = `(vector,(0,1,N))`, forwards their output, and owns their
//! lifetime: the first rank to fail (non-zero exit, death by signal, PMI abort) ends the job,
//! within a second, with a message naming the rank and how it failed. [`self_launch`] is the
//! one-line form for a program that wants to be its own launcher: call it first thing in
//! `main`, and `./prog` behaves as `ch4run -n N ./prog` would.
//!
//! No process outlives the job: every rank runs in its own process group (so the launcher can
//! signal it and whatever it started), gets SIGKILL from the kernel if the launcher itself dies
//! (`PR_SET_PDEATHSIG`), and the launcher is a child subreaper so orphaned grandchildren are
//! reaped here rather than left as zombies.
//!
//! # Process-wide effects
//!
//! A launcher owns its process's children and its terminal signals, so [`run`] changes
//! process-wide state *for its duration*, and puts it back before returning:
//!
//! * SIGINT, SIGTERM and SIGHUP are caught (the previous dispositions are restored on return),
//!   and forwarded to every rank; `run` then returns `128 + signal` rather than the process
//!   dying, so the caller decides what a Ctrl-C means afterwards.
//! * The process is a child subreaper (`PR_SET_CHILD_SUBREAPER`; restored on return).
//! * Children are reaped with `waitpid(-1)`: *any* child of the process that exits during the
//!   job is reaped by `run`. Do not run a job while other code of the process waits for children
//!   of its own; `run` is meant for a process that is a launcher for the time being.
//! * Only one job runs at a time per process: a concurrent call fails with
//!   [`ErrorKind::State`].
//! * Rank 0's stdin is the process's stdin (unless the process is in the background of its
//!   terminal); it is read only while the job runs.

#[allow(unsafe_code)] // The OS calls std lacks; each `unsafe` carries its SAFETY comment.
mod sys;

use std::ffi::OsString;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::process::{ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use crate::error::{Error, ErrorKind, Result};
use crate::server::JobConfig;
use crate::socket::{JobEvent, SocketServer};

/// Most ranks one job may have: each costs three threads and three descriptors in the
/// launcher, and one host gains nothing from more processes than this.
pub const MAX_RANKS: u32 = 4096;

/// How long ranks get between SIGTERM and SIGKILL when the job is torn down, by default.
pub const DEFAULT_GRACE: Duration = Duration::from_millis(500);

/// Set (to `1`) in the environment of every rank [`self_launch`] starts: the recursion guard
/// that keeps a rank whose PMI variables were lost from launching a job of its own.
pub const SELF_LAUNCHED_VAR: &str = "CH4_SELF_LAUNCHED";

/// Chooses [`LaunchOptions::bind`] for [`self_launch`]: `core` or `none`; unset, ranks are bound
/// when there are enough CPUs ([`Bind::Auto`]).
pub const BIND_VAR: &str = "CH4_BIND";

/// How often the main loop checks for exited ranks and signals; bounds failure detection.
const TICK: Duration = Duration::from_millis(10);

/// How long a PMI-level failure waits for the exit status that explains it.
const PMI_FAILURE_HOLD: Duration = Duration::from_millis(200);

/// Longest output line forwarded in one piece; longer lines are split, never buffered whole.
const MAX_OUTPUT_LINE: usize = 64 * 1024;

/// How long the stdin forwarder waits for input before checking whether the job is over; bounds
/// how long it outlives the job.
const STDIN_POLL: Duration = Duration::from_millis(50);

/// Environment a rank must not inherit from the launcher's own environment: a launcher started
/// under another launcher would otherwise hand its ranks the outer job's PMI connection.
const INHERITED_PMI_VARS: &[&str] = &[
    "PMI_FD",
    "PMI_PORT",
    "PMI_ID",
    "PMI_RANK",
    "PMI_SIZE",
    "PMI_DEBUG",
    "PMI_SPAWNED",
    "HYDI_CONTROL_FD",
    "MPI_LOCALNRANKS",
    "MPI_LOCALRANKID",
    crate::PEER_EVENTS_VAR,
    SELF_LAUNCHED_VAR,
];

/// Set while a job runs: the pending-signal slot and `waitpid(-1)` are per process, so two jobs
/// at once would steal each other's signals and exit statuses.
static JOB_RUNNING: AtomicBool = AtomicBool::new(false);

/// Writes a line to stderr. Unlike `eprintln!`, never panics: a launcher whose stderr is a
/// closed pipe must still tear its job down.
macro_rules! say {
    ($($arg:tt)*) => {{
        let _ = writeln!(io::stderr(), $($arg)*);
    }};
}

/// What job to run and how: the library form of `ch4run`'s command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchOptions {
    /// Number of ranks, 1..=[`MAX_RANKS`].
    pub ranks: u32,
    /// Extra environment for every rank, applied in order after the launcher's own variables
    /// are removed, so it can override anything but the PMI variables the launcher sets.
    pub env: Vec<(OsString, OsString)>,
    /// Prefix every output line with `[rank] `, to tell interleaved ranks apart.
    pub prefix_output: bool,
    /// Serve PMI on a TCP port (`PMI_PORT` + `PMI_ID`) instead of inherited sockets, for rank
    /// programs whose PMI client only speaks that. The port (127.0.0.1) is reachable by every
    /// user of the host, so each rank's `PMI_ID` is drawn at random and the port is closed
    /// once every rank has joined ([`JobConfig::port_ids`]).
    pub pmi_port: bool,
    /// How long ranks get between SIGTERM and SIGKILL when the job is torn down, to flush and
    /// clean up.
    pub grace: Duration,
    /// The program every rank runs (looked up in `PATH` when it has no `/`).
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Whether each rank is pinned to a CPU of its own.
    pub bind: Bind,
}

/// Rank placement on CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bind {
    /// Leave placement to the kernel (Hydra's default).
    None,
    /// Rank `i` on the `i`-th CPU the launcher may use (Open MPI's default for small jobs), when
    /// there are at least as many CPUs as ranks; otherwise, unbound. Keeps a rank from moving
    /// between cores and two ranks from sharing one while the scheduler settles — what makes
    /// the first sizes of a latency benchmark slower than the rest.
    Core,
    /// As `Core`, but without a word when there are too few CPUs: [`self_launch`]'s default.
    Auto,
}

impl std::str::FromStr for Bind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Bind, String> {
        match s.trim() {
            "none" => Ok(Bind::None),
            "core" => Ok(Bind::Core),
            other => Err(format!("unknown binding {other:?} (core or none)")),
        }
    }
}

impl LaunchOptions {
    /// `ranks` copies of `program args...` with the defaults `ch4run` uses: no extra
    /// environment, unprefixed output, PMI over inherited sockets, [`DEFAULT_GRACE`].
    pub fn new(ranks: u32, program: impl Into<OsString>, args: Vec<OsString>) -> Self {
        LaunchOptions {
            ranks,
            env: Vec::new(),
            prefix_output: false,
            pmi_port: false,
            grace: DEFAULT_GRACE,
            program: program.into(),
            args,
            bind: Bind::None,
        }
    }
}

/// Runs the job to completion: spawns the ranks, serves them PMI, forwards their output and
/// the signals this process receives, and returns the exit code `ch4run` would exit with.
///
/// The code is 0 when every rank exited 0; otherwise it describes the first failure: the
/// failing rank's exit code, `128 + signal` for a rank killed by a signal or for a job ended
/// by SIGINT / SIGTERM / SIGHUP sent to this process, the code passed to PMI abort (low 8
/// bits), 1 for a job stuck in PMI (a rank left while others waited for it), and 127 when a
/// rank cannot be started (a missing program). Failures are reported on stderr, prefixed
/// `ch4run:`, naming the rank.
///
/// While it runs, `run` installs process-wide handlers for SIGINT, SIGTERM and SIGHUP, makes the
/// process a child subreaper and reaps every child of the process; it restores the handlers and
/// the subreaper setting before returning (see [the module documentation](self)). Any thread
/// may call it: the ranks' parent-death signal is tied to the calling thread, which `run` blocks
/// until every rank is gone.
///
/// # Errors
///
/// Launcher failures, before any rank has started: [`ErrorKind::InvalidArgument`] for a rank
/// count outside 1..=[`MAX_RANKS`], [`ErrorKind::State`] when another job is already running in
/// this process, [`ErrorKind::Io`] when signal handlers, the PMI server or its TCP port cannot
/// be set up. A rank that fails is not an error: it is the job's exit code.
pub fn run(opts: &LaunchOptions) -> Result<i32> {
    if !(1..=MAX_RANKS).contains(&opts.ranks) {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            format!("{} is not a rank count in 1..={MAX_RANKS}", opts.ranks),
        ));
    }
    let _running = RunningJob::claim()?;
    // Dropped, and so restored, after the job has been torn down and reaped (locals drop in
    // reverse order of declaration, and `job.finish()` consumes the job before that).
    let _subreaper = match sys::Subreaper::become_one() {
        Ok(guard) => Some(guard),
        Err(e) => {
            say!("ch4run: warning: cannot become child subreaper ({e}); orphaned grandchildren will be reaped by init");
            None
        }
    };
    let _signals = sys::SignalHandlers::install()
        .map_err(|e| Error::io("cannot install signal handlers", e))?;
    let mut config = JobConfig::single_node(opts.ranks);
    if opts.pmi_port {
        // The port is open to every user of the host: only a process given one of these ids
        // (in its environment, which only its user can read) may join.
        config.port_ids = Some(random_port_ids(opts.ranks)?);
    }
    let port_ids = config.port_ids.clone();
    let server =
        SocketServer::new(config).map_err(|e| context("cannot start the PMI server", &e))?;
    let mut job = Job {
        opts,
        server,
        ranks: Vec::new(),
        failure: None,
        kill_at: None,
        tearing_down: false,
        pmi_failure: None,
        forwarders: Vec::new(),
        stdin: None,
        port_ids,
        cpus: match opts.bind {
            Bind::Core | Bind::Auto => {
                let cpus = sys::allowed_cpus();
                if cpus.len() >= opts.ranks as usize {
                    cpus
                } else if opts.bind == Bind::Auto {
                    Vec::new()
                } else {
                    say!(
                        "ch4run: {} ranks on {} CPUs: not binding ranks to cores",
                        opts.ranks,
                        cpus.len()
                    );
                    Vec::new()
                }
            }
            Bind::None => Vec::new(),
        },
    };
    let port = if opts.pmi_port {
        let listener = TcpListener::bind("127.0.0.1:0")
            .map_err(|e| Error::io("cannot listen for PMI_PORT connections", e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::io("cannot read the PMI_PORT address", e))?;
        job.server
            .listen(listener)
            .map_err(|e| context("cannot serve PMI_PORT", &e))?;
        Some(addr.to_string())
    } else {
        None
    };
    for rank in 0..opts.ranks {
        if let Err(msg) = job.spawn(rank, port.as_deref()) {
            say!("ch4run: {msg}");
            job.fail(Failure::Spawn, None);
            break;
        }
    }
    job.supervise();
    Ok(job.finish())
}

/// Re-runs the current executable as `ranks` ranks under the embedded launcher when this
/// process was not started by a PMI launcher, and exits with the job's code; so `./prog` alone
/// behaves as `ch4run -n ranks ./prog` would, and a program needs no launcher to run in
/// parallel.
///
/// Call it first thing in `main`, before starting threads or reading stdin, then initialize as
/// a rank (for instance with [`Client::from_env`](crate::Client::from_env)). In the ranks, and
/// whenever the process already runs under a launcher (`PMI_FD` or `PMI_PORT` is set, as by
/// `ch4run` or Hydra's `mpiexec`; or `PMIX_NAMESPACE` and `PMIX_RANK`, as by a PMIx launcher),
/// it returns `Ok(())` at once and does nothing. It also returns
/// at once when [`SELF_LAUNCHED_VAR`] is set without PMI variables (a rank that lost its PMI
/// environment): that guard keeps a program from launching itself recursively, and such a
/// process then runs as a PMI singleton.
///
/// The ranks run [`std::env::current_exe`] with this process's arguments
/// ([`std::env::args_os`] without the program name) and environment, plus the launcher's
/// variables and `CH4_SELF_LAUNCHED=1`. This process serves them as [`run`] does (with its
/// process-wide effects) and then calls [`std::process::exit`] with the job's code.
///
/// # Errors
///
/// Only when no job could be started: the current executable cannot be found, or [`run`]
/// failed (its errors). On success this function does not return in the launching process.
pub fn self_launch(ranks: u32) -> Result<()> {
    if under_a_launcher() || std::env::var_os(SELF_LAUNCHED_VAR).is_some() {
        return Ok(());
    }
    let program = std::env::current_exe().map_err(|e| {
        Error::io(
            "cannot find the current executable to run it as the ranks",
            e,
        )
    })?;
    let mut opts = LaunchOptions::new(ranks, program, std::env::args_os().skip(1).collect());
    opts.env.push((SELF_LAUNCHED_VAR.into(), "1".into()));
    opts.bind = match std::env::var(BIND_VAR) {
        Ok(v) => v
            .parse()
            .map_err(|e: String| Error::new(ErrorKind::Environment, format!("{BIND_VAR}: {e}")))?,
        Err(_) => Bind::Auto,
    };
    let code = run(&opts)?;
    let _ = io::stdout().flush();
    std::process::exit(code)
}

/// Whether this process was given a PMI connection, judged as
/// [`Client::from_env`](crate::Client::from_env) judges it, so that `self_launch` launches
/// exactly when the client would otherwise become a singleton.
fn under_a_launcher() -> bool {
    ["PMI_FD", "PMI_PORT"]
        .iter()
        .any(|var| std::env::var(var).is_ok())
        || under_pmix()
}

/// Whether a PMIx launcher (Open MPI's `mpirun`, PRRTE, `srun --mpi=pmix`) started this
/// process: it is then a rank already, which joins through a PMIx client (ch4's `pmix`
/// feature), never a program to launch again.
fn under_pmix() -> bool {
    std::env::var_os("PMIX_NAMESPACE").is_some() && std::env::var_os("PMIX_RANK").is_some()
}

/// One `PMI_ID` a rank, distinct, 1 ..= 2^31 - 1 (what MPICH's clients read with `atoi`), from
/// the kernel's generator. No generator is an error, not a guessable id.
fn random_port_ids(ranks: u32) -> Result<Vec<u32>> {
    let mut urandom = std::fs::File::open("/dev/urandom")
        .map_err(|e| Error::io("cannot read /dev/urandom to draw the PMI port ids", e))?;
    let mut ids: Vec<u32> = Vec::with_capacity(ranks as usize);
    while ids.len() < ranks as usize {
        let mut b = [0u8; 4];
        urandom
            .read_exact(&mut b)
            .map_err(|e| Error::io("cannot read /dev/urandom to draw the PMI port ids", e))?;
        let id = u32::from_le_bytes(b) & 0x7fff_ffff;
        if id != 0 && !ids.contains(&id) {
            ids.push(id);
        }
    }
    Ok(ids)
}

/// `err` with `what` in front, keeping its kind.
fn context(what: &str, err: &Error) -> Error {
    Error::new(err.kind(), format!("{what}: {err}"))
}

/// The claim on [`JOB_RUNNING`], released when dropped.
struct RunningJob;

impl RunningJob {
    fn claim() -> Result<RunningJob> {
        if JOB_RUNNING.swap(true, Ordering::SeqCst) {
            return Err(Error::new(
                ErrorKind::State,
                "another job is already running in this process",
            ));
        }
        Ok(RunningJob)
    }
}

impl Drop for RunningJob {
    fn drop(&mut self) {
        JOB_RUNNING.store(false, Ordering::SeqCst);
    }
}

/// One rank of the job.
struct Rank {
    pid: i32,
    status: Option<ExitStatus>,
}

/// Why the job is being torn down.
enum Failure {
    /// A rank exited non-zero or was killed.
    Exit { rank: u32, status: ExitStatus },
    /// A rank called PMI abort.
    Abort { rank: Option<u32>, code: i32 },
    /// The PMI server found the job stuck.
    Pmi,
    /// The launcher was told to stop.
    Signal(i32),
    /// Starting the ranks failed.
    Spawn,
}

impl Failure {
    fn exit_code(&self) -> i32 {
        match self {
            Failure::Exit { status, .. } => status_code(*status),
            Failure::Abort { code, .. } => *code & 0xff,
            Failure::Pmi => 1,
            Failure::Signal(sig) => 128 + sig,
            Failure::Spawn => 127,
        }
    }
}

/// The exit code a shell would report for `status`.
fn status_code(status: ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(sig)) => 128 + sig,
        (None, None) => 1,
    }
}

fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(sig)) => format!(
            "was killed by signal {sig} ({}){}",
            sys::signal_name(sig),
            if status.core_dumped() {
                ", core dumped"
            } else {
                ""
            }
        ),
        (None, None) => format!("ended with wait status {}", status.into_raw()),
    }
}

/// The thread copying our stdin to rank 0, and how to tell it the job is over.
struct StdinPump {
    stop: Arc<AtomicBool>,
    handle: thread::JoinHandle<()>,
}

struct Job<'a> {
    opts: &'a LaunchOptions,
    server: SocketServer,
    ranks: Vec<Rank>,
    failure: Option<Failure>,
    /// When the SIGKILL follows, once teardown has begun; `None` once it has been sent.
    kill_at: Option<Instant>,
    tearing_down: bool,
    /// A stuck-job report from the PMI server, held back briefly: the connection usually
    /// closed because the rank died, and its exit status says more than the socket did.
    pmi_failure: Option<(String, Instant)>,
    forwarders: Vec<thread::JoinHandle<()>>,
    stdin: Option<StdinPump>,
    /// The CPU of each rank when binding (empty: unbound).
    cpus: Vec<usize>,
    /// Each rank's `PMI_ID` when PMI is served on a port (see [`JobConfig::port_ids`]).
    port_ids: Option<Vec<u32>>,
}

impl Job<'_> {
    fn cpu_of(&self, rank: u32) -> Option<usize> {
        self.cpus.get(rank as usize).copied()
    }

    /// Starts one rank with its PMI connection and output forwarding.
    fn spawn(&mut self, rank: u32, port: Option<&str>) -> std::result::Result<(), String> {
        let opts = self.opts;
        let mut cmd = Command::new(&opts.program);
        cmd.args(&opts.args);
        for var in INHERITED_PMI_VARS {
            cmd.env_remove(var);
        }
        // Nor a PMIx server's (ch4run under Open MPI's mpirun or srun --mpi=pmix): the ranks
        // would join the outer job instead of this one.
        for (var, _) in std::env::vars_os() {
            if var.to_str().is_some_and(|v| v.starts_with("PMIX_")) {
                cmd.env_remove(var);
            }
        }
        for (k, v) in &opts.env {
            cmd.env(k, v);
        }
        cmd.env("MPI_LOCALNRANKS", opts.ranks.to_string())
            .env("MPI_LOCALRANKID", rank.to_string())
            .env(crate::PEER_EVENTS_VAR, "1");
        // Kept alive until the child has been started: its descriptor is what the child inherits.
        let mut child_end = None;
        match port {
            Some(addr) => {
                let id = self
                    .port_ids
                    .as_ref()
                    .and_then(|ids| ids.get(rank as usize))
                    .map_or(rank, |&id| id);
                cmd.env("PMI_PORT", addr).env("PMI_ID", id.to_string());
                sys::prepare_rank(&mut cmd, None, self.cpu_of(rank));
            }
            None => {
                let (ours, theirs) = UnixStream::pair()
                    .map_err(|e| format!("cannot create the PMI socket for rank {rank}: {e}"))?;
                self.server
                    .add_unix(ours, Some(rank))
                    .map_err(|e| format!("cannot serve PMI to rank {rank}: {e}"))?;
                // Descriptors 0-2 are about to be replaced by the rank's stdio; if the launcher
                // was started with one of them closed, the socket may sit there. Move it up.
                let theirs = if theirs.as_raw_fd() < 3 {
                    theirs
                        .try_clone()
                        .map_err(|e| format!("cannot duplicate the PMI socket: {e}"))?
                } else {
                    theirs
                };
                cmd.env("PMI_FD", theirs.as_raw_fd().to_string())
                    .env("PMI_RANK", rank.to_string())
                    .env("PMI_SIZE", opts.ranks.to_string());
                sys::prepare_rank(&mut cmd, Some(theirs.as_raw_fd()), self.cpu_of(rank));
                child_end = Some(theirs);
            }
        }
        let forward_stdin = rank == 0 && !sys::stdin_is_background_tty();
        cmd.stdin(if forward_stdin {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|e| {
            format!(
                "cannot start {:?} as rank {rank}: {e}",
                opts.program.to_string_lossy()
            )
        })?;
        drop(child_end);
        let pid = i32::try_from(child.id()).map_err(|_| "pid out of range".to_owned())?;
        self.ranks.push(Rank { pid, status: None });
        let prefix = opts.prefix_output.then(|| format!("[{rank}] "));
        if let Some(out) = child.stdout.take() {
            self.forwarders
                .extend(forward(out, prefix.clone(), Sink::Stdout, rank));
        }
        if let Some(err) = child.stderr.take() {
            self.forwarders
                .extend(forward(err, prefix, Sink::Stderr, rank));
        }
        if let Some(input) = child.stdin.take() {
            self.stdin = pump_stdin(input);
        }
        // `child` is dropped without waiting: ranks are reaped by `sys::reap_any`, which also
        // reaps the orphans we adopt as subreaper.
        Ok(())
    }

    fn live_ranks(&self) -> usize {
        self.ranks.iter().filter(|r| r.status.is_none()).count()
    }

    fn rank_of_pid(&self, pid: i32) -> Option<usize> {
        self.ranks.iter().position(|r| r.pid == pid)
    }

    /// Records the first failure, says so, and asks every live rank to terminate.
    fn fail(&mut self, failure: Failure, detail: Option<String>) {
        if self.failure.is_some() {
            return;
        }
        let others = self.live_ranks();
        let what = match &failure {
            Failure::Exit { rank, status } => format!(
                "rank {rank} (pid {}) {}",
                self.ranks[*rank as usize].pid,
                describe(*status)
            ),
            Failure::Abort { rank, code } => {
                let who = rank.map_or("a rank".to_owned(), |r| format!("rank {r}"));
                let why = detail.map_or(String::new(), |m| format!(": {m}"));
                format!("{who} called PMI abort with exit code {code}{why}")
            }
            Failure::Pmi => format!("PMI: {}", detail.unwrap_or_default()),
            Failure::Signal(sig) => format!(
                "received {}; forwarding it to {others} rank(s)",
                sys::signal_name(*sig)
            ),
            Failure::Spawn => "could not start every rank".to_owned(),
        };
        if matches!(failure, Failure::Signal(_)) || others == 0 {
            say!("ch4run: {what}");
        } else {
            say!("ch4run: {what}; terminating the other {others} rank(s)");
        }
        let sig = match failure {
            Failure::Signal(sig) => sig,
            _ => libc::SIGTERM,
        };
        self.failure = Some(failure);
        self.signal_all(sig);
        self.tearing_down = true;
        self.kill_at = Some(Instant::now() + self.opts.grace);
    }

    fn signal_all(&self, sig: i32) {
        for r in self.ranks.iter().filter(|r| r.status.is_none()) {
            let _ = sys::kill_group(r.pid, sig);
        }
    }

    /// Runs the job to its end: serves PMI, reaps ranks, forwards signals, enforces teardown.
    fn supervise(&mut self) {
        while self.live_ranks() > 0 {
            for event in self.server.poll(TICK) {
                self.on_pmi_event(event);
            }
            while let sys::Reaped::Exited(pid, status) = sys::reap_any() {
                self.on_exit(pid, status);
            }
            if let Some(sig) = sys::take_signal() {
                if self.tearing_down {
                    // A second Ctrl-C: stop waiting for a graceful end.
                    self.kill_at = Some(Instant::now());
                } else {
                    self.fail(Failure::Signal(sig), None);
                }
            }
            if let Some((_, at)) = &self.pmi_failure {
                if Instant::now() >= *at {
                    if let Some((message, _)) = self.pmi_failure.take() {
                        self.fail(Failure::Pmi, Some(message));
                    }
                }
            }
            if let Some(at) = self.kill_at {
                if Instant::now() >= at {
                    self.signal_all(libc::SIGKILL);
                    self.kill_at = None;
                }
            }
        }
    }

    fn on_pmi_event(&mut self, event: JobEvent) {
        match event {
            JobEvent::Abort {
                rank,
                code,
                message,
            } => self.fail(Failure::Abort { rank, code }, message),
            JobEvent::Failed { message } => {
                self.pmi_failure = Some((message, Instant::now() + PMI_FAILURE_HOLD));
            }
            JobEvent::Refused { reason } => {
                say!("ch4run: refused a PMI connection: {reason}");
            }
            JobEvent::Finalized { .. } | JobEvent::Disconnected { .. } => {}
        }
    }

    fn on_exit(&mut self, pid: i32, status: ExitStatus) {
        let Some(i) = self.rank_of_pid(pid) else {
            // An adopted orphan: reaped so it does not linger as a zombie.
            return;
        };
        self.ranks[i].status = Some(status);
        if status.success() || self.tearing_down {
            return;
        }
        // A rank that called abort exits right after sending it; give the abort, which says
        // why, a moment to arrive before reporting a bare exit status. Ranks that end in that
        // moment are reaped too: when one was killed by a signal, it is the cause (the others
        // failed because it vanished: a peer's receive from it errs and that rank exits) and it
        // is the one reported, whichever the kernel let us reap first.
        let deadline = Instant::now() + Duration::from_millis(50);
        let mut culprit = (i, status);
        while self.failure.is_none() && Instant::now() < deadline {
            for event in self.server.poll(TICK) {
                self.on_pmi_event(event);
            }
            while let sys::Reaped::Exited(pid, other) = sys::reap_any() {
                let Some(j) = self.rank_of_pid(pid) else {
                    continue;
                };
                self.ranks[j].status = Some(other);
                if killed(other) && !killed(culprit.1) {
                    culprit = (j, other);
                }
            }
        }
        let (i, status) = culprit;
        let rank = u32::try_from(i).unwrap_or(u32::MAX);
        self.fail(Failure::Exit { rank, status }, None);
    }

    /// Kills whatever the ranks left behind, drains their output, and picks the exit code.
    fn finish(mut self) -> i32 {
        // Anything still in a rank's process group (a background child) goes with the job.
        for r in &self.ranks {
            let _ = sys::kill_group(r.pid, libc::SIGKILL);
        }
        // Reap them (and any orphans adopted as subreaper) so nothing lingers as a zombie;
        // SIGKILL takes effect promptly, so a short bound suffices.
        let settle = Instant::now() + Duration::from_millis(500);
        while Instant::now() < settle {
            match sys::reap_any() {
                sys::Reaped::Exited(..) => {}
                sys::Reaped::Running => thread::sleep(Duration::from_millis(2)),
                sys::Reaped::NoChildren => break,
            }
        }
        // Stop reading our stdin: a program that embeds the launcher may want it back.
        let mut threads = std::mem::take(&mut self.forwarders);
        if let Some(pump) = self.stdin.take() {
            pump.stop.store(true, Ordering::SeqCst);
            threads.push(pump.handle);
        }
        // Output pipes close when the last writer dies; do not wait forever on a writer that
        // escaped into another process group.
        join_with_timeout(threads, Duration::from_secs(2));
        let _ = io::stdout().flush();
        match &self.failure {
            Some(f) => f.exit_code(),
            None => 0,
        }
    }
}

/// Copies our stdin to rank 0 until end of input, the rank stops reading, or the job ends.
///
/// Reads only after `poll` says a read will not block, so the thread notices the end of the job
/// within [`STDIN_POLL`] instead of sitting in a read of the terminal (and holding std's stdin
/// lock) for as long as the process lives.
fn pump_stdin(mut input: ChildStdin) -> Option<StdinPump> {
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = Arc::clone(&stop);
    let body = move || {
        let mut buf = vec![0u8; 64 * 1024];
        while !stopped.load(Ordering::SeqCst) {
            match sys::wait_readable(0, STDIN_POLL) {
                Ok(true) => {}
                Ok(false) => continue,
                Err(_) => return,
            }
            let n = match io::stdin().lock().read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if input.write_all(&buf[..n]).is_err() {
                return;
            }
        }
        // Dropping `input` closes the pipe: rank 0 sees end of file.
    };
    match thread::Builder::new().name("stdin".into()).spawn(body) {
        Ok(handle) => Some(StdinPump { stop, handle }),
        // Out of threads: rank 0's stdin is closed (the pipe went with the closure).
        Err(e) => {
            say!("ch4run: cannot forward stdin to rank 0: {e}");
            None
        }
    }
}

/// Where a rank's stream goes.
#[derive(Clone, Copy)]
enum Sink {
    Stdout,
    Stderr,
}

/// Copies a rank's output to ours line by line, so lines of different ranks never interleave
/// mid-line, optionally prefixed with the rank.
fn forward(
    src: impl Read + Send + 'static,
    prefix: Option<String>,
    sink: Sink,
    rank: u32,
) -> Option<thread::JoinHandle<()>> {
    let body = move || {
        let mut src = BufReader::new(src);
        let mut line = Vec::with_capacity(256);
        let mut dead_sink = false;
        loop {
            line.clear();
            let n = match (&mut src)
                .take(MAX_OUTPUT_LINE as u64)
                .read_until(b'\n', &mut line)
            {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if dead_sink {
                // Keep draining so the rank never blocks on a full pipe.
                continue;
            }
            let mut out = Vec::with_capacity(n + 16);
            if let Some(p) = &prefix {
                out.extend_from_slice(p.as_bytes());
            }
            out.extend_from_slice(&line);
            let written = match sink {
                Sink::Stdout => {
                    let mut o = io::stdout().lock();
                    o.write_all(&out).and_then(|()| o.flush())
                }
                Sink::Stderr => io::stderr().lock().write_all(&out),
            };
            dead_sink = written.is_err();
        }
    };
    let name = format!(
        "rank{rank}-{}",
        if matches!(sink, Sink::Stdout) {
            "out"
        } else {
            "err"
        }
    );
    match thread::Builder::new().name(name).spawn(body) {
        Ok(handle) => Some(handle),
        // Out of threads: the rank's output is dropped, never blocked (the pipe closes with the
        // closure, so the rank gets EPIPE).
        Err(e) => {
            say!("ch4run: cannot forward output of rank {rank}: {e}");
            None
        }
    }
}

fn join_with_timeout(handles: Vec<thread::JoinHandle<()>>, timeout: Duration) {
    let (tx, rx) = mpsc::channel();
    let _ = thread::Builder::new().spawn(move || {
        for h in handles {
            let _ = h.join();
        }
        let _ = tx.send(());
    });
    let _ = rx.recv_timeout(timeout);
}

/// Whether a rank's process was ended by a signal (killed, crashed) rather than exiting.
fn killed(status: ExitStatus) -> bool {
    use std::os::unix::process::ExitStatusExt;
    status.signal().is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_uses_ch4runs_defaults() {
        let o = LaunchOptions::new(3, "prog", vec!["a".into()]);
        assert_eq!(o.ranks, 3);
        assert_eq!(o.program, "prog");
        assert_eq!(o.args, ["a"]);
        assert!(o.env.is_empty() && !o.prefix_output && !o.pmi_port);
        assert_eq!(o.grace, DEFAULT_GRACE);
    }

    #[test]
    fn bad_rank_counts_are_refused_before_anything_starts() {
        for n in [0, MAX_RANKS + 1] {
            let e = run(&LaunchOptions::new(n, "/nonexistent", Vec::new())).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        }
    }

    #[test]
    fn exit_codes_follow_the_shell() {
        assert_eq!(status_code(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(status_code(ExitStatus::from_raw(libc::SIGKILL)), 137);
        assert_eq!(
            Failure::Abort {
                rank: None,
                code: 263
            }
            .exit_code(),
            7
        );
        assert_eq!(Failure::Signal(libc::SIGINT).exit_code(), 130);
        assert_eq!(Failure::Spawn.exit_code(), 127);
    }
}

//! ch4run: the embedded one-host launcher of ch4.
//!
//! `ch4run -n N prog args` starts N processes as ranks 0..N-1 of one job, serves each the
//! PMI-1 protocol over a socketpair (`PMI_FD`, with `PMI_RANK` / `PMI_SIZE`, as Hydra does),
//! publishes `PMI_process_mapping` = `(vector,(0,1,N))`, forwards their output, and owns their
//! lifetime: the first rank to fail (non-zero exit, death by signal, PMI abort) ends the job,
//! within a second, with a message naming the rank and how it failed. Users who outgrow one
//! host run the same binaries under MPICH's `mpiexec.hydra`.
//!
//! No process outlives the job: every rank runs in its own process group (so ch4run can signal
//! it and whatever it started), gets SIGKILL from the kernel if ch4run itself dies
//! (`PR_SET_PDEATHSIG`), and ch4run is a child subreaper so orphaned grandchildren are reaped
//! here rather than left as zombies.

mod args;
mod sys;

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use args::{Options, Parsed};
use pmi::{JobConfig, JobEvent, SocketServer};

/// How often the main loop checks for exited ranks and signals; bounds failure detection.
const TICK: Duration = Duration::from_millis(10);

/// How long a PMI-level failure waits for the exit status that explains it.
const PMI_FAILURE_HOLD: Duration = Duration::from_millis(200);

/// Longest output line forwarded in one piece; longer lines are split, never buffered whole.
const MAX_OUTPUT_LINE: usize = 64 * 1024;

/// Environment a rank must not inherit from ch4run's own environment: a ch4run started under
/// another launcher would otherwise hand its ranks the outer job's PMI connection.
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
];

/// Writes a line to stderr. Unlike `eprintln!`, never panics: a launcher whose stderr is a
/// closed pipe must still tear its job down.
macro_rules! say {
    ($($arg:tt)*) => {{
        let _ = writeln!(io::stderr(), $($arg)*);
    }};
}

fn main() {
    let code = match args::parse(std::env::args_os().skip(1)) {
        Ok(Parsed::Help) => {
            let _ = writeln!(io::stdout(), "{}", args::USAGE);
            0
        }
        Ok(Parsed::Run(opts)) => match run(&opts) {
            Ok(code) => code,
            Err(msg) => {
                say!("ch4run: {msg}");
                1
            }
        },
        Err(msg) => {
            say!("ch4run: {msg}\n\n{}", args::USAGE);
            2
        }
    };
    std::process::exit(code);
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
    /// ch4run was told to stop.
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

struct Job<'a> {
    opts: &'a Options,
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
}

fn run(opts: &Options) -> Result<i32, String> {
    if let Err(e) = sys::become_subreaper() {
        say!("ch4run: warning: cannot become child subreaper ({e}); orphaned grandchildren will be reaped by init");
    }
    sys::install_signal_handlers().map_err(|e| format!("cannot install signal handlers: {e}"))?;
    let server = SocketServer::new(JobConfig::single_node(opts.ranks))
        .map_err(|e| format!("cannot start the PMI server: {e}"))?;
    let mut job = Job {
        opts,
        server,
        ranks: Vec::new(),
        failure: None,
        kill_at: None,
        tearing_down: false,
        pmi_failure: None,
        forwarders: Vec::new(),
    };
    let port = if opts.pmi_port {
        let listener = TcpListener::bind("127.0.0.1:0")
            .map_err(|e| format!("cannot listen for PMI_PORT connections: {e}"))?;
        let addr = listener
            .local_addr()
            .map_err(|e| format!("cannot read the PMI_PORT address: {e}"))?;
        job.server
            .listen(listener)
            .map_err(|e| format!("cannot serve PMI_PORT: {e}"))?;
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

impl Job<'_> {
    /// Starts one rank with its PMI connection and output forwarding.
    fn spawn(&mut self, rank: u32, port: Option<&str>) -> Result<(), String> {
        let opts = self.opts;
        let mut cmd = Command::new(&opts.program);
        cmd.args(&opts.args);
        for var in INHERITED_PMI_VARS {
            cmd.env_remove(var);
        }
        for (k, v) in &opts.env {
            cmd.env(k, v);
        }
        cmd.env("MPI_LOCALNRANKS", opts.ranks.to_string())
            .env("MPI_LOCALRANKID", rank.to_string());
        // Kept alive until the child has been started: its descriptor is what the child inherits.
        let mut child_end = None;
        match port {
            Some(addr) => {
                cmd.env("PMI_PORT", addr).env("PMI_ID", rank.to_string());
                sys::prepare_rank(&mut cmd, None);
            }
            None => {
                let (ours, theirs) = UnixStream::pair()
                    .map_err(|e| format!("cannot create the PMI socket for rank {rank}: {e}"))?;
                self.server
                    .add_unix(ours, Some(rank))
                    .map_err(|e| format!("cannot serve PMI to rank {rank}: {e}"))?;
                // Descriptors 0-2 are about to be replaced by the rank's stdio; if ch4run was
                // started with one of them closed, the socket may sit there. Move it up.
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
                sys::prepare_rank(&mut cmd, Some(theirs.as_raw_fd()));
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
        if let Some(mut input) = child.stdin.take() {
            // Detached: it may block on our stdin for as long as ch4run lives.
            let _ = thread::Builder::new().name("stdin".into()).spawn(move || {
                let _ = io::copy(&mut io::stdin().lock(), &mut input);
            });
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
        // why, a moment to arrive before reporting a bare exit status.
        let deadline = Instant::now() + Duration::from_millis(50);
        while self.failure.is_none() && Instant::now() < deadline {
            for event in self.server.poll(TICK) {
                self.on_pmi_event(event);
            }
        }
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
        // Output pipes close when the last writer dies; do not wait forever on a writer that
        // escaped into another process group.
        join_with_timeout(std::mem::take(&mut self.forwarders), Duration::from_secs(2));
        let _ = io::stdout().flush();
        match &self.failure {
            Some(f) => f.exit_code(),
            None => 0,
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

//! Helpers shared by the end-to-end tests: run a launcher with a deadline, find binaries, and
//! check that a job left no process behind.

#![allow(dead_code)]

use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// What a finished run produced.
pub struct Run {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Run {
    /// The `pid RANK PID` lines printed by `pmi_hello --print-pid`.
    pub fn pids(&self) -> Vec<u32> {
        pids_in(&self.stdout)
    }
}

pub fn pids_in(out: &str) -> Vec<u32> {
    out.lines()
        .filter_map(|l| l.strip_prefix("pid "))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse().ok())
        .collect()
}

/// Runs `cmd` to completion, killing it (and failing the test) after `limit`.
pub fn run(mut cmd: Command, limit: Duration) -> Run {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let start = Instant::now();
    let mut child = cmd.spawn().expect("spawn");
    let out = drain(child.stdout.take().unwrap());
    let err = drain(child.stderr.take().unwrap());
    let status = wait_for(&mut child, limit);
    let elapsed = start.elapsed();
    Run {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
        elapsed,
    }
}

pub fn drain(mut r: impl Read + Send + 'static) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let mut s = Vec::new();
        let _ = r.read_to_end(&mut s);
        String::from_utf8_lossy(&s).into_owned()
    })
}

/// Waits for `child`, killing it and panicking if it outlives `limit`.
pub fn wait_for(child: &mut Child, limit: Duration) -> ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("process did not finish within {limit:?}");
        }
        thread::sleep(Duration::from_millis(5));
    }
}

/// Whether `pid` is still a live process (not gone, not a zombie) running `comm`.
pub fn alive(pid: u32, comm: &str) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // Format: pid (comm) state ...; comm may contain spaces, so split at the last ')'.
    let Some((head, tail)) = stat.rsplit_once(')') else {
        return false;
    };
    let name = head.split_once('(').map_or("", |(_, n)| n);
    let state = tail.split_whitespace().next().unwrap_or("");
    // A reused pid running something else is not ours.
    name.starts_with(&comm[..comm.len().min(15)]) && state != "Z" && state != "X"
}

/// Polls until none of `pids` is alive, for up to `limit`; returns the ones still alive.
pub fn survivors(pids: &[u32], comm: &str, limit: Duration) -> Vec<u32> {
    let deadline = Instant::now() + limit;
    loop {
        let left: Vec<u32> = pids.iter().copied().filter(|&p| alive(p, comm)).collect();
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// `name` found in PATH.
pub fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    })
}

pub const CH4RUN: &str = env!("CARGO_BIN_EXE_ch4run");
pub const HELLO: &str = env!("CARGO_BIN_EXE_pmi_hello");

/// `ch4run ARGS... -- pmi_hello HELLO_ARGS...`
pub fn ch4run(args: &[&str], hello_args: &[&str]) -> Command {
    let mut cmd = Command::new(CH4RUN);
    cmd.args(args).arg("--").arg(HELLO).args(hello_args);
    // A test run under a launcher must not leak that launcher's PMI into ours.
    for v in ["PMI_FD", "PMI_PORT", "PMI_ID", "PMI_RANK", "PMI_SIZE"] {
        cmd.env_remove(v);
    }
    cmd
}

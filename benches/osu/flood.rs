//! A flood: every rank but 0 sends `-n` blocking messages of `-s` bytes to rank 0 (with
//! `--window W` nonblocking ones, `W` at a time, each from its own buffer, waited for
//! together), which is busy for `--sleep` milliseconds before it receives them — in arrival
//! order (ANY_SOURCE,
//! ANY_TAG), or with `--reverse W` sender by sender, each run of `W` tags backwards. Every rank
//! prints its resident memory when idle (after start-up and a barrier) and at its peak
//! (`VmHWM`), and how long its part took; rank 0 checks that every message arrived once and,
//! per sender and tag, in order.
//!
//! The same loop runs over MPICH and Open MPI with `--features peer-mpi` (see
//! `scripts/flood-vs-peers.sh`), so the figures compare like with like.
//!
//! `cargo run --release --example flood -- [-n messages] [-s bytes] [--sleep ms]
//! [--reverse W] [--window W] [--threads]` (self-launched with 5 ranks; `CH4_NP` for more).

mod common;

use std::time::{Duration, Instant};

use common::{BenchResult, Job, Pt2Pt};

/// The flood's settings.
struct Flood {
    messages: u64,
    size: usize,
    sleep: Duration,
    reverse: Option<u64>,
    /// Nonblocking sends this many at a time; `None`: blocking sends.
    window: Option<u64>,
}

/// This process's resident memory now (`VmRSS`) and at its peak (`VmHWM`), in KiB.
fn memory_kib() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

impl Job for Flood {
    fn run<C: Pt2Pt>(&self, c: &C) -> BenchResult<()> {
        let size = self.size.max(8);
        let mut buf = vec![0u8; size];
        // Idle: after start-up, before anything of the flood can have arrived.
        c.barrier()?;
        let (idle, _) = memory_kib();
        c.barrier()?;
        let start = Instant::now();
        if c.rank() == 0 {
            std::thread::sleep(self.sleep);
            self.receive(c, &mut buf)?;
        } else if let Some(w) = self.window {
            let mut first = 0;
            while first < self.messages {
                let last = (first + w).min(self.messages);
                let msgs: Vec<Vec<u8>> = (first..last)
                    .map(|i| {
                        let mut m = vec![0u8; size];
                        m[..8].copy_from_slice(&i.to_le_bytes());
                        m
                    })
                    .collect();
                let tags: Vec<i32> = (first..last).map(|i| self.tag_of(i)).collect();
                c.send_each(&msgs, 0, &tags)?;
                first = last;
            }
        } else {
            for i in 0..self.messages {
                buf[..8].copy_from_slice(&i.to_le_bytes());
                c.send(&buf, 0, self.tag_of(i))?;
            }
        }
        let took = start.elapsed();
        let (_, peak) = memory_kib();
        println!(
            "flood: rank {} idle {:.1} MiB peak {:.1} MiB (+{:.1}) in {:.2} s",
            c.rank(),
            idle as f64 / 1024.0,
            peak as f64 / 1024.0,
            peak.saturating_sub(idle) as f64 / 1024.0,
            took.as_secs_f64()
        );
        c.barrier()
    }
}

impl Flood {
    fn tag_of(&self, i: u64) -> i32 {
        (i % self.reverse.unwrap_or(1)) as i32
    }

    /// Rank 0's part: every message of every sender, checked.
    fn receive<C: Pt2Pt>(&self, c: &C, buf: &mut [u8]) -> BenchResult<()> {
        let senders = c.size() - 1;
        let seq = |buf: &[u8]| u64::from_le_bytes(buf[..8].try_into().unwrap_or_default());
        match self.reverse {
            None => {
                let mut next = vec![0u64; c.size()];
                for _ in 0..self.messages * senders as u64 {
                    let (src, _) = c.recv_any(buf)?;
                    if seq(buf) != next[src] {
                        return Err(format!(
                            "from rank {src}: message {} where {} was due",
                            seq(buf),
                            next[src]
                        )
                        .into());
                    }
                    next[src] += 1;
                }
            }
            Some(w) => {
                for src in 1..=senders {
                    let mut first = 0;
                    while first < self.messages {
                        let last = (first + w).min(self.messages);
                        for i in (first..last).rev() {
                            c.recv(buf, src, self.tag_of(i))?;
                            if seq(buf) != i {
                                return Err(format!(
                                    "from rank {src}: message {} where {i} was due",
                                    seq(buf)
                                )
                                .into());
                            }
                        }
                        first = last;
                    }
                }
            }
        }
        println!(
            "flood: rank 0 received {} messages of {} bytes from {senders} senders, all in order",
            self.messages * senders as u64,
            self.size
        );
        Ok(())
    }
}

fn parse() -> Result<(Flood, bool), String> {
    let usage =
        "usage: flood [-n messages] [-s bytes] [--sleep ms] [--reverse W] [--window W] [--threads]";
    let mut f = Flood {
        messages: 1_000_000,
        size: 1024,
        sleep: Duration::from_secs(3),
        reverse: None,
        window: None,
    };
    let mut threads = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut number = || -> Result<u64, String> {
            let v = args.next().ok_or(format!("{a} needs a value\n{usage}"))?;
            v.parse()
                .map_err(|_| format!("{a}: not a number: {v}\n{usage}"))
        };
        match a.as_str() {
            "-n" => f.messages = number()?,
            "-s" => f.size = number()? as usize,
            "--sleep" => f.sleep = Duration::from_millis(number()?),
            "--reverse" => f.reverse = Some(number()?.max(1)),
            "--window" => f.window = Some(number()?.max(1)),
            "--threads" => threads = true,
            "-h" | "--help" => return Err(usage.into()),
            other => return Err(format!("unknown option {other}\n{usage}")),
        }
    }
    Ok((f, threads))
}

fn main() -> std::process::ExitCode {
    ch4::log::init();
    let (flood, threads) = match parse() {
        Ok(v) => v,
        Err(msg) => {
            eprintln!("{msg}");
            return std::process::ExitCode::from(2);
        }
    };
    match common::run_job(5, threads, &flood) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("flood: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

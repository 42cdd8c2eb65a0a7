//! progress_idle: what the progress thread costs while a request waits for a message that is
//! far off, the case where it must sleep rather than spin. Rank 1 posts a receive with the
//! thread on and sleeps for `--wait` ms (default 1,000) while rank 0 sends only afterwards;
//! rank 1 reports the thread's CPU time and its wake-ups (context switches, from
//! `/proc/self/task/*/status`) over that time, and how long after the send the awaited
//! request completed with nobody but the thread polling.
//!
//! `cargo run --release --example progress_idle -- [--wait ms]`: two processes through the
//! embedded launcher at the multiple thread level; `CH4_NODE_SIZE=1` puts the ranks on
//! different nodes (TCP, whose sockets the sleeping thread waits on), else they share memory
//! (whose rings it cannot wait on: it naps).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Poll, Wake, Waker};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ch4::{Multiple, Result};

/// The progress thread's CPU time (user + system, in clock ticks) and context switches
/// (voluntary + involuntary), read from /proc.
fn progress_thread_usage() -> Option<(u64, u64)> {
    let tasks = std::fs::read_dir("/proc/self/task").ok()?;
    tasks.flatten().find_map(|task| {
        let dir = task.path();
        let comm = std::fs::read_to_string(dir.join("comm")).ok()?;
        if comm.trim() != "ch4-progress" {
            return None;
        }
        let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
        // The fields after the command's closing parenthesis; utime and stime are the 14th
        // and 15th of the whole line.
        let rest = stat.get(stat.rfind(')')? + 2..)?;
        let f: Vec<&str> = rest.split_whitespace().collect();
        let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
        let status = std::fs::read_to_string(dir.join("status")).ok()?;
        let switches = status
            .lines()
            .filter(|l| l.contains("ctxt_switches"))
            .filter_map(|l| l.split_whitespace().last()?.parse::<u64>().ok())
            .sum();
        Some((ticks, switches))
    })
}

/// A waker that notes when it was woken.
struct Stamp(AtomicU64);

impl Wake for Stamp {
    fn wake(self: Arc<Self>) {
        self.0.store(now_ns(), Ordering::Release);
    }
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn main() -> std::process::ExitCode {
    let mut wait_ms = 1000u64;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match (a.as_str(), args.next().and_then(|v| v.parse().ok())) {
            ("--wait", Some(ms)) => wait_ms = ms,
            _ => {
                eprintln!("progress_idle: usage: progress_idle [--wait ms]");
                return std::process::ExitCode::from(2);
            }
        }
    }
    match run(wait_ms) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("progress_idle: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(wait_ms: u64) -> Result<()> {
    let universe = ch4::process::init_or_launch_at(2, Multiple)?;
    let ctx = universe.context();
    ctx.start_async_progress()?;
    let world = universe.world();
    // A first message each way, so that connections are up before the quiet part.
    let mut warm = [0u8; 1];
    if world.rank() == 0 {
        world.send(&warm, 1, 1)?;
    } else {
        world.recv(&mut warm, 0, 1)?;
    }
    world.barrier()?;
    if world.rank() == 0 {
        std::thread::sleep(Duration::from_millis(wait_ms));
        world.send(&now_ns().to_le_bytes(), 1, 0)?;
    } else {
        let mut req = world.irecv_owned(vec![0u8; 8], 0, 0)?;
        // Awaited as a future whose waker notes the time: the thread wakes it when it has
        // completed the receive, with nobody else polling.
        let stamp = Arc::new(Stamp(AtomicU64::new(0)));
        let waker = Waker::from(stamp.clone());
        let mut cx = std::task::Context::from_waker(&waker);
        if Pin::new(&mut req).poll(&mut cx).is_ready() {
            return Err(ch4::Error::new(
                ch4::ErrorKind::Internal,
                "the message came before it was sent",
            ));
        }
        // The thread names itself once it runs; wait for that (at most a second).
        let mut before = progress_thread_usage();
        for _ in 0..1000 {
            if before.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
            before = progress_thread_usage();
        }
        let start = Instant::now();
        std::thread::sleep(Duration::from_millis(wait_ms * 9 / 10));
        let after = progress_thread_usage();
        let quiet = start.elapsed();
        while stamp.0.load(Ordering::Acquire) == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        let done_ns = stamp.0.load(Ordering::Acquire);
        let (buf, status) = loop {
            if let Poll::Ready(out) = Pin::new(&mut req).poll(&mut cx) {
                break out;
            }
        };
        status?;
        let sent_ns = u64::from_le_bytes(buf[..8].try_into().unwrap_or([0; 8]));
        let ticks_per_s = 100.0; // USER_HZ on Linux
        match (before, after) {
            (Some((t0, s0)), Some((t1, s1))) => println!(
                "progress thread over {:.0} ms with a receive outstanding: {:.1} ms CPU, {} wake-ups ({:.0}/s); the message completed {:.1} us after it was sent",
                quiet.as_secs_f64() * 1e3,
                (t1 - t0) as f64 / ticks_per_s * 1e3,
                s1 - s0,
                (s1 - s0) as f64 / quiet.as_secs_f64(),
                done_ns.saturating_sub(sent_ns) as f64 / 1e3
            ),
            _ => println!("no progress thread found in /proc/self/task"),
        }
    }
    universe.finalize()
}

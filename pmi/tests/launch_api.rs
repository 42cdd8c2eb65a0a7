//! `pmi::launch::run` called in-process, as an embedding program calls it: it returns the job's
//! exit code instead of exiting, catches and forwards SIGTERM while the job runs, refuses a
//! second job at the same time, and leaves the process's signal dispositions as it found them.
//!
//! One test function on purpose: `run` reaps every child of the process and catches its
//! signals, so nothing else in this test binary may run alongside it.

mod common;

use std::thread;
use std::time::{Duration, Instant};

use pmi::launch::{run, LaunchOptions};
use pmi::ErrorKind;

fn hello(ranks: u32, args: &[&str]) -> LaunchOptions {
    LaunchOptions::new(ranks, common::HELLO, args.iter().map(Into::into).collect())
}

/// The current handler of SIGTERM.
#[allow(unsafe_code)]
fn sigterm_handler() -> libc::sighandler_t {
    // SAFETY: all-zero is a valid sigaction; the kernel overwrites it.
    let mut cur: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: a query only (no new action); `cur` is writable and outlives the call.
    let rc = unsafe { libc::sigaction(libc::SIGTERM, std::ptr::null(), &mut cur) };
    assert_eq!(rc, 0);
    cur.sa_sigaction
}

#[allow(unsafe_code)]
fn sigterm_myself() {
    // SAFETY: kill with our own pid and a signal number; integer arguments only. `run` has
    // installed its handler (checked by the caller), so the signal does not end the process.
    let rc = unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
    assert_eq!(rc, 0);
}

#[test]
fn run_returns_the_jobs_code_and_gives_the_process_back() {
    let default = sigterm_handler();
    assert_eq!(
        default,
        libc::SIG_DFL,
        "the test starts with SIGTERM's default"
    );

    assert_eq!(run(&hello(2, &["--expect-size", "2"])).unwrap(), 0);
    assert_eq!(run(&hello(3, &["--exit", "1", "3"])).unwrap(), 3);
    assert_eq!(run(&hello(2, &["--abort", "0", "9"])).unwrap(), 9);
    assert_eq!(
        run(&LaunchOptions::new(2, "/nonexistent/program", Vec::new())).unwrap(),
        127
    );
    let err = run(&hello(0, &[])).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert_eq!(
        sigterm_handler(),
        default,
        "handlers restored after each job"
    );

    // A hanging job, ended by SIGTERM sent to this process once `run` has caught it.
    let helper = thread::spawn(|| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while sigterm_handler() == libc::SIG_DFL {
            assert!(Instant::now() < deadline, "run never installed its handler");
            thread::sleep(Duration::from_millis(5));
        }
        // Let the ranks get going, then check that a second job is refused meanwhile.
        thread::sleep(Duration::from_millis(300));
        let second = run(&hello(1, &[])).unwrap_err();
        assert_eq!(second.kind(), ErrorKind::State);
        sigterm_myself();
    });
    let start = Instant::now();
    let code = run(&hello(2, &["--hang"])).unwrap();
    helper.join().unwrap();
    assert_eq!(code, 128 + libc::SIGTERM);
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(sigterm_handler(), default, "SIGTERM's default is back");

    // And the process can run another job afterwards.
    assert_eq!(run(&hello(1, &[])).unwrap(), 0);
}

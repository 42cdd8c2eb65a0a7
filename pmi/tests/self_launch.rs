//! `pmi::launch::self_launch` end to end: the `self_launching_hello` example started with no
//! launcher runs itself as 3 ranks, propagates a failing rank's exit code, and does nothing
//! extra under a real launcher or when its recursion guard is set.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::run;

const LIMIT: Duration = Duration::from_secs(30);

/// The example binary, which `cargo test` builds next to the test binaries.
fn example() -> PathBuf {
    // target/<profile>/deps/self_launch-HASH -> target/<profile>/examples/self_launching_hello
    let exe = std::env::current_exe().expect("current_exe");
    let profile_dir = exe.parent().and_then(Path::parent).expect("target dir");
    let path = profile_dir.join("examples").join("self_launching_hello");
    assert!(
        path.is_file(),
        "{} is not built: run `cargo test -p pmi` (which builds the examples) or \
         `cargo build -p pmi --example self_launching_hello` first",
        path.display()
    );
    path
}

/// The example, started as a user would: no PMI environment at all.
fn without_a_launcher(args: &[&str]) -> Command {
    let mut cmd = Command::new(example());
    cmd.args(args);
    for v in ["PMI_FD", "PMI_PORT", "PMI_ID", "PMI_RANK", "PMI_SIZE"] {
        cmd.env_remove(v);
    }
    cmd.env_remove(pmi::launch::SELF_LAUNCHED_VAR);
    cmd
}

#[test]
fn started_alone_it_runs_as_three_ranks() {
    let r = run(without_a_launcher(&[]), LIMIT);
    assert!(r.status.success(), "{}\n{}", r.stdout, r.stderr);
    for rank in 0..3 {
        let right = (rank + 1) % 3;
        let line =
            format!("rank {rank} of 3: rank {right} says hello-from-{right} (launched by: self)");
        assert!(r.stdout.contains(&line), "{}", r.stdout);
    }
    assert_eq!(r.stdout.lines().count(), 3, "{}", r.stdout);
    assert!(r.stderr.is_empty(), "{}", r.stderr);
}

#[test]
fn a_failing_ranks_exit_code_is_the_jobs() {
    let r = run(without_a_launcher(&["--fail", "1", "5"]), LIMIT);
    assert_eq!(r.status.code(), Some(5), "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains("rank 1 (pid") && r.stderr.contains("exited with status 5"),
        "{}",
        r.stderr
    );
    // The other ranks were waiting in the barrier: ended by the launcher, not finished.
    assert!(!r.stdout.contains("says"), "{}", r.stdout);
}

#[test]
fn under_a_launcher_it_is_just_a_rank() {
    for mode in [&[][..], &["--pmi-port"][..]] {
        let mut cmd = Command::new(common::CH4RUN);
        cmd.args(["-n", "2"]).args(mode).arg("--").arg(example());
        for v in ["PMI_FD", "PMI_PORT", "PMI_ID", "PMI_RANK", "PMI_SIZE"] {
            cmd.env_remove(v);
        }
        let r = run(cmd, LIMIT);
        assert!(r.status.success(), "{mode:?}\n{}\n{}", r.stdout, r.stderr);
        assert_eq!(
            r.stdout.matches(" of 2: ").count(),
            2,
            "{mode:?}\n{}",
            r.stdout
        );
        assert_eq!(
            r.stdout.matches("(launched by: a launcher)").count(),
            2,
            "{}",
            r.stdout
        );
    }
}

#[test]
fn the_recursion_guard_stops_a_second_launch() {
    let mut cmd = without_a_launcher(&[]);
    cmd.env(pmi::launch::SELF_LAUNCHED_VAR, "1");
    let r = run(cmd, LIMIT);
    assert!(r.status.success(), "{}", r.stderr);
    assert_eq!(
        r.stdout.trim(),
        "rank 0 of 1: rank 0 says hello-from-0 (launched by: nobody (singleton))"
    );
}

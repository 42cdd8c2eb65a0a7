//! The teaching examples `pingpong`, `halo2d`, `embedding`, `async_tokio` and `rayon_halo`, and
//! a short `soak`, run as real processes under the `ch4run` launcher, and what they print is
//! checked: an example that compiles but computes nonsense, hangs or panics on bad input fails
//! here.

mod common;

use common::jobs::{built, succeeded};
use std::process::{Command, Output};

/// Runs `example args…` as `ranks` processes under `ch4run`.
fn ch4run(ranks: u32, example: &str, args: &[&str]) -> Output {
    let dir = built();
    Command::new(dir.join("ch4run"))
        .args(["-n", &ranks.to_string()])
        .arg(dir.join("examples").join(example))
        .args(args)
        .output()
        .expect("ch4run starts")
}

/// The number right after `key` on the line starting with `key`.
fn number_after(stdout: &str, key: &str) -> f64 {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no number after {key:?} in:\n{stdout}"))
}

// ------------------------------------------------------------------------------- pingpong

/// Parses `pingpong: B bytes, N round trips, L us one way`.
fn pingpong_line(stdout: &str) -> (usize, u64, f64) {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("pingpong: "))
        .unwrap_or_else(|| panic!("no result line in:\n{stdout}"));
    let f: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(f.len(), 10, "{line}");
    (
        f[1].parse().expect("bytes"),
        f[3].parse().expect("round trips"),
        f[6].parse().expect("latency"),
    )
}

#[test]
fn pingpong_reports_a_latency_for_each_size() {
    // Eager, and above the 32 KiB eager limit (rendezvous); the echoed bytes are checked by
    // the example itself, which fails if they changed.
    for (bytes, trips) in [("8", "2000"), ("100000", "50")] {
        let stdout = succeeded(ch4run(2, "pingpong", &[bytes, trips]));
        assert_eq!(stdout.lines().count(), 1, "only rank 0 reports: {stdout}");
        let (b, n, us) = pingpong_line(&stdout);
        assert_eq!(b.to_string(), bytes);
        assert_eq!(n.to_string(), trips);
        assert!(us.is_finite() && us > 0.0 && us < 1e6, "{stdout}");
    }
}

#[test]
fn pingpong_started_alone_launches_its_two_ranks() {
    let out = Command::new(built().join("examples/pingpong"))
        .args(["16", "100"])
        .env_remove("PMI_FD")
        .env_remove("PMI_PORT")
        .env_remove("CH4_NP")
        .output()
        .unwrap();
    let (bytes, trips, us) = pingpong_line(&succeeded(out));
    assert_eq!((bytes, trips), (16, 100));
    assert!(us > 0.0);
}

#[test]
fn pingpong_refuses_other_rank_counts_and_bad_arguments_without_panicking() {
    for (ranks, args, says) in [
        (3, &[][..], "exactly 2 ranks"),
        (2, &["eight"][..], "not a count"),
        (2, &["8", "0"][..], "at least 1"),
    ] {
        let out = ch4run(ranks, "pingpong", args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} on {ranks}: {stderr}");
        assert!(stderr.contains(says), "{args:?} on {ranks}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

// --------------------------------------------------------------------------------- halo2d

/// Runs the checked stencil on a small uneven grid and returns (checksum, residual).
fn halo2d_checked(ranks: u32, grid: &str) -> (f64, f64) {
    let stdout = succeeded(ch4run(
        ranks,
        "halo2d",
        &["--size", grid, "--iters", "120", "--every", "7", "--check"],
    ));
    assert!(stdout.contains("check: ok"), "{stdout}");
    assert!(
        stdout.contains(&format!("{grid} grid on {ranks} ranks")),
        "{stdout}"
    );
    let per_iteration = number_after(&stdout, "time per iteration ");
    assert!(per_iteration > 0.0, "{stdout}");
    (
        number_after(&stdout, "checksum "),
        number_after(&stdout, "residual "),
    )
}

#[test]
fn halo2d_matches_the_serial_stencil_on_several_process_grids() {
    // 37x53 splits unevenly over every process grid below: 1x1, 2x1, 2x2, 3x2.
    let runs: Vec<(u32, (f64, f64))> = [1, 2, 4, 6]
        .into_iter()
        .map(|n| (n, halo2d_checked(n, "37x53")))
        .collect();
    let (_, (checksum, residual)) = runs[0];
    // Heat flows in from the north and west boundaries: both are well away from zero.
    assert!(checksum > 1.0 && residual > 0.0, "{runs:?}");
    for (n, (c, r)) in &runs {
        assert!(
            (c - checksum).abs() <= 1e-9 * checksum,
            "{n} ranks: {runs:?}"
        );
        assert!(
            (r - residual).abs() <= 1e-9 * residual,
            "{n} ranks: {runs:?}"
        );
    }
}

#[test]
fn halo2d_rejects_a_grid_smaller_than_the_process_grid() {
    let out = ch4run(4, "halo2d", &["--size", "1x8"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("too small"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

// ------------------------------------------------------------------------------ embedding

#[test]
fn embedding_gives_the_serial_answer_as_processes_and_as_threads() {
    let stdout = succeeded(ch4run(3, "embedding", &[]));
    assert!(
        stdout.contains("embedding: all runs agree with the serial result"),
        "{stdout}"
    );
    let runs: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains(" on 3 ranks ["))
        .collect();
    assert_eq!(runs.len(), 3, "{stdout}");
    // Each run was compiled for its own device types.
    assert!(
        runs[0].contains(std::any::type_name::<ch4::process::ProcessNetmod>())
            && runs[0].contains("ShmTransport"),
        "{stdout}"
    );
    // Ranks as threads run on the same types as processes by default.
    assert!(
        runs[1].contains(std::any::type_name::<ch4::process::ProcessNetmod>())
            && runs[1].contains("ShmTransport"),
        "{stdout}"
    );
    assert!(
        runs[2].contains("Native") && runs[2].contains("InprocShm"),
        "{stdout}"
    );
    let sums: Vec<&str> = runs
        .iter()
        .map(|l| l.split(" on ").next().unwrap_or(""))
        .map(|l| l.split_once(": ").map_or("", |(_, s)| s))
        .collect();
    assert!(
        sums.iter().all(|s| *s == sums[0] && s.starts_with("sum ")),
        "{stdout}"
    );
}

// ---------------------------------------------------------------------------- async_tokio

/// Every rank's tokio tasks exchanged and checked their buffers (the example fails otherwise).
fn assert_all_tasks_checked(stdout: &str, ranks: u32) {
    for r in 0..ranks {
        assert!(
            stdout.contains(&format!(
                "async_tokio: rank {r} of {ranks}: 8 tasks checked"
            )),
            "rank {r}:\n{stdout}"
        );
    }
}

#[test]
fn async_tokio_tasks_await_their_messages_as_processes_and_as_threads() {
    assert_all_tasks_checked(&succeeded(ch4run(4, "async_tokio", &[])), 4);
    let out = Command::new(built().join("examples/async_tokio"))
        .arg("--threads")
        .output()
        .unwrap();
    assert_all_tasks_checked(&succeeded(out), 4);
}

#[test]
fn async_tokio_over_the_network_between_every_rank() {
    let dir = built();
    let out = Command::new(dir.join("ch4run"))
        .args(["-n", "3", "-e", "CH4_NODE_SIZE=1"])
        .arg(dir.join("examples/async_tokio"))
        .output()
        .expect("ch4run starts");
    assert_all_tasks_checked(&succeeded(out), 3);
}

// ----------------------------------------------------------------------------- rayon_halo

/// The rod's total is kept only if every worker traded halos with the same worker of its
/// neighbours (the example fails otherwise).
#[test]
fn rayon_workers_trade_halos_on_their_own_communicators_as_processes_and_as_threads() {
    let want = "rayon_halo: 4 ranks x 4 workers, 50 steps, total 136000.000 kept";
    let stdout = succeeded(ch4run(4, "rayon_halo", &[]));
    assert!(stdout.contains(want), "{stdout}");
    let out = Command::new(built().join("examples/rayon_halo"))
        .arg("--threads")
        .output()
        .unwrap();
    assert!(succeeded(out).contains(want));
}

// ----------------------------------------------------------------------------------- soak

/// Runs a short soak (4 ranks, 3 threads each, at the multiple level with fewer VCIs than
/// threads; sizes up to 100 kB, past the shm and TCP eager limits) of `messages` with `env` and
/// `args`; returns (exit status, stdout, stderr).
fn soak(
    messages: &str,
    env: &[(&str, &str)],
    args: &[&str],
) -> (std::process::ExitStatus, String, String) {
    let dir = built();
    let out = Command::new(dir.join("ch4run"))
        .args(["-n", "4"])
        .arg(dir.join("examples/soak"))
        .args(["-m", messages, "-t", "3", "--max-size", "100000"])
        .args(["--rss-every-ms", "50", "--stall-secs", "20"])
        .args(args)
        .env("CH4_NUM_VCIS", "2")
        .envs(env.iter().copied())
        .output()
        .expect("ch4run starts");
    (
        out.status,
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The `key=value` field of the soak's result line.
fn soak_field<'a>(stdout: &'a str, key: &str) -> &'a str {
    stdout
        .lines()
        .find(|l| l.starts_with("soak: result: "))
        .and_then(|l| {
            l.split_whitespace()
                .find_map(|f| f.strip_prefix(key)?.strip_prefix('='))
        })
        .unwrap_or_else(|| panic!("no {key}= in the result line of:\n{stdout}"))
}

#[test]
fn soak_receives_every_message_in_order_over_shared_memory_and_the_network() {
    // A second is too short for memory to mean anything: only the counts are checked here
    // (scripts/soak.sh runs the long ones).
    for env in [&[][..], &[("CH4_NODE_SIZE", "1")][..]] {
        let (status, stdout, stderr) = soak("4000", env, &["--rss-slack-pct", "10000"]);
        assert!(status.success(), "{env:?}:\n{stdout}\n{stderr}");
        for key in ["lost", "misordered", "corrupt", "extra"] {
            assert_eq!(soak_field(&stdout, key), "0", "{env:?}:\n{stdout}");
        }
        let messages: u64 = soak_field(&stdout, "messages").parse().unwrap();
        assert!(messages >= 4000, "{stdout}");
        assert_eq!(soak_field(&stdout, "verdict"), "ok", "{stdout}");
        assert_eq!(soak_field(&stdout, "vcis"), "2", "{stdout}");
    }
}

/// The soak's checks catch what they are for: a flipped byte, two messages sent in each other's
/// place, a message never sent (each made on purpose by `--break`).
#[test]
fn soak_fails_and_says_why_when_a_message_is_corrupted_reordered_or_lost() {
    let (status, stdout, stderr) = soak("2000", &[], &["--break", "corrupt"]);
    assert!(!status.success(), "{stdout}");
    assert_eq!(soak_field(&stdout, "corrupt"), "1", "{stdout}\n{stderr}");
    assert!(stderr.contains("are wrong"), "{stderr}");

    let (status, stdout, stderr) = soak("2000", &[], &["--break", "reorder"]);
    assert!(!status.success(), "{stdout}");
    assert_ne!(soak_field(&stdout, "misordered"), "0", "{stdout}\n{stderr}");
    assert!(stderr.contains("overtook"), "{stderr}");

    let (status, stdout, stderr) = soak("2000", &[], &["--break", "drop", "--stall-secs", "2"]);
    assert!(!status.success(), "{stdout}");
    assert!(stderr.contains("stalled"), "{stdout}\n{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

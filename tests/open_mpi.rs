//! ch4 under Open MPI's `mpirun`, which hosts a PMIx server: in a build with the `pmix` feature
//! the ranks join through ch4's PMIx client — the ring on one node (shared memory) and with
//! every rank its own node (TCP), ch4's `osu_latency`, and the real OSU program built on ch4's
//! C library; in a build without it, a rank says what to build instead of running as a
//! singleton. Skipped, with a note, where Open MPI is not installed.
#![cfg(all(feature = "tcp", not(any(feature = "ofi", feature = "ucx"))))]

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::jobs::{built, finished};

/// `mpirun -n <ranks>` of `program` with `env` passed to the ranks (`-x`), bounded by
/// [`finished`]'s limit; `None` (and `test` skipped) without Open MPI.
fn mpirun(
    test: &str,
    ranks: u32,
    program: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> Option<Output> {
    if !testkit::skip::on_path("mpirun.openmpi", test, "apt-get install openmpi-bin") {
        return None;
    }
    let mut cmd = Command::new("mpirun.openmpi");
    cmd.args([
        "--allow-run-as-root",
        "--oversubscribe",
        "--bind-to",
        "none",
    ])
    .args(["-n", &ranks.to_string()]);
    for (k, v) in env {
        cmd.env(k, v).args(["-x", k]);
    }
    cmd.arg(program)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = cmd.spawn().expect("start mpirun");
    Some(finished(child, &format!("mpirun {}", program.display())))
}

#[cfg(feature = "pmix")]
fn succeeded(out: Output, what: &str) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what}:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[cfg(feature = "pmix")]
#[test]
fn mpirun_runs_the_ring_osu_latency_and_a_c_program_over_pmix() {
    let test = "open_mpi: mpirun_runs_the_ring_osu_latency_and_a_c_program_over_pmix";
    let dir = built();
    for node_size in ["4", "1"] {
        let Some(out) = mpirun(
            test,
            4,
            &dir.join("examples/ring"),
            &[],
            &[("CH4_NODE_SIZE", node_size)],
        ) else {
            return;
        };
        let text = succeeded(out, "the ring");
        assert_eq!(
            text.matches("sum of ranks 6").count(),
            4,
            "every rank ends the ring (node size {node_size}):\n{text}"
        );
    }
    let out = mpirun(
        test,
        2,
        &dir.join("examples/osu_latency"),
        &["-m", "8:8", "-i", "1000"],
        &[],
    )
    .expect("mpirun was found above");
    let text = succeeded(out, "ch4's osu_latency");
    assert!(text.lines().any(|l| l.starts_with("8 ")), "{text}");
    let Some(bin) = common::c_programs::osu_latency(test, "ch4-mpirun-osu") else {
        return;
    };
    for node_size in ["2", "1"] {
        let out = mpirun(
            test,
            2,
            &bin,
            &["-m", "8:8", "-i", "1000"],
            &[("CH4_NODE_SIZE", node_size)],
        )
        .expect("mpirun was found above");
        let text = succeeded(out, "OSU's osu_latency on ch4's C library");
        assert!(text.lines().any(|l| l.starts_with("8 ")), "{text}");
    }
    let _ = std::fs::remove_file(&bin);
}

/// A build without the `pmix` feature cannot join a PMIx job; running on as a PMI singleton
/// would make every rank rank 0 of 1 and the job's results wrong without a word.
#[cfg(not(feature = "pmix"))]
#[test]
fn without_pmix_a_rank_under_mpirun_fails_saying_what_to_build() {
    let test = "open_mpi: without_pmix_a_rank_under_mpirun_fails_saying_what_to_build";
    let dir = built();
    let Some(out) = mpirun(test, 2, &dir.join("examples/ring"), &[], &[]) else {
        return;
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("has no PMIx client") && stderr.contains("`pmix` feature"),
        "{stderr}"
    );
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("sum of ranks"),
        "no rank ran the ring as a singleton"
    );
}

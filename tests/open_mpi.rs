//! ch4 under Open MPI's `mpirun`, which hosts a PMIx server: in a build with the `pmix` feature
//! the ranks join through ch4's PMIx client — the ring on one node (shared memory) and with
//! every rank its own node (TCP), ch4's `osu_latency`, a C program at four ranks and the real
//! OSU program built on ch4's C library; in a build without it, a rank says what to build
//! instead of running as a singleton. Skipped, with a note, where Open MPI is not installed.
#![cfg(all(feature = "tcp", not(any(feature = "ofi", feature = "ucx"))))]

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};

#[cfg(feature = "pmix")]
use common::jobs::succeeded;
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
        let text = succeeded(out);
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
    let text = succeeded(out);
    assert!(text.lines().any(|l| l.starts_with("8 ")), "{text}");
    // A C program at four ranks, on one node and each its own.
    let hello = common::c_programs::hello("ch4-mpirun-hello");
    for node_size in ["4", "1"] {
        let out = mpirun(test, 4, &hello, &[], &[("CH4_NODE_SIZE", node_size)])
            .expect("mpirun was found above");
        let text = succeeded(out);
        assert!(
            text.contains("hello from rank 0 of 4: token 6"),
            "node size {node_size}:\n{text}"
        );
    }
    let _ = std::fs::remove_file(&hello);
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
        let text = succeeded(out);
        assert!(text.lines().any(|l| l.starts_with("8 ")), "{text}");
    }
    let _ = std::fs::remove_file(&bin);
}

/// `MPI_Abort` from one rank goes to the PMIx server (`PMIx_Abort`), which ends the whole
/// job — the other rank waits in a receive that nothing would ever match — with the code.
#[cfg(feature = "pmix")]
#[test]
fn mpi_abort_under_mpirun_ends_the_job_with_its_code() {
    let test = "open_mpi: mpi_abort_under_mpirun_ends_the_job_with_its_code";
    let dir = std::env::temp_dir().join(format!("ch4-mpirun-abort-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("abort.c");
    std::fs::write(
        &src,
        r#"#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
    int rank, x;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 1) {
        MPI_Abort(MPI_COMM_WORLD, 7);
    }
    MPI_Recv(&x, 1, MPI_INT, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    printf("received what nobody sent\n");
    MPI_Finalize();
    return 0;
}
"#,
    )
    .unwrap();
    let bin = dir.join("abort");
    let cc = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("c-abi/bin/mpicc"))
        .env("CH4_ABI_LIBDIR", common::c_programs::c_library())
        .arg("-o")
        .arg(&bin)
        .arg(&src)
        .status()
        .expect("run c-abi/bin/mpicc");
    assert!(cc.success(), "building the abort program failed");
    let Some(out) = mpirun(test, 2, &bin, &[], &[]) else {
        return;
    };
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(7),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!stdout.contains("received what nobody sent"), "{stdout}");
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

//! Hydra compatibility: `pmi_hello` (our PMI-1 client) launched by MPICH's `mpiexec.hydra`,
//! over an inherited socket (`PMI_FD`, Hydra's default) and over TCP (`-pmi-port`). Skipped,
//! with a message, where Hydra is not installed (Debian: `apt-get install mpich`).

mod common;

use std::process::Command;
use std::time::Duration;

use common::{run, which, HELLO};

const LIMIT: Duration = Duration::from_secs(60);

fn hydra() -> Option<std::path::PathBuf> {
    which("mpiexec.hydra").or_else(|| which("mpiexec.mpich"))
}

fn mpiexec(hydra: &std::path::Path, extra: &[&str], hello_args: &[&str]) -> Command {
    let mut cmd = Command::new(hydra);
    cmd.args(extra)
        .args(["-n", "4"])
        .arg(HELLO)
        .args(hello_args);
    // An outer launcher's PMI variables would confuse Hydra's own.
    for v in ["PMI_FD", "PMI_PORT", "PMI_ID", "PMI_RANK", "PMI_SIZE"] {
        cmd.env_remove(v);
    }
    cmd
}

#[test]
fn pmi_hello_under_hydra_over_pmi_fd_and_pmi_port() {
    let Some(hydra) = hydra() else {
        testkit::skip::skipped(
            "pmi hydra: pmi_hello_under_hydra",
            "no mpiexec.hydra (install Debian's mpich)",
        );
        return;
    };
    for extra in [&[][..], &["-pmi-port"][..]] {
        let r = run(mpiexec(&hydra, extra, &["--expect-size", "4"]), LIMIT);
        assert!(
            r.status.success(),
            "mpiexec {extra:?} failed:\n{}\n{}",
            r.stdout,
            r.stderr
        );
        for rank in 0..4 {
            assert!(
                r.stdout.contains(&format!("rank {rank} of 4: ok")),
                "mpiexec {extra:?}:\n{}",
                r.stdout
            );
        }
    }
}

#[test]
fn pmi_abort_under_hydra_ends_the_job_with_its_code() {
    let Some(hydra) = hydra() else {
        testkit::skip::skipped(
            "pmi hydra: pmi_abort_under_hydra",
            "no mpiexec.hydra (install Debian's mpich)",
        );
        return;
    };
    let r = run(mpiexec(&hydra, &[], &["--abort", "1", "7"]), LIMIT);
    assert_eq!(r.status.code(), Some(7), "{}\n{}", r.stdout, r.stderr);
}

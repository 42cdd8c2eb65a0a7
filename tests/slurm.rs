//! ch4 under Slurm: a one-machine cluster (`scripts/lib/slurm-cluster.sh`: slurmctld, slurmd
//! and a private munged, all under one directory) runs ch4's programs with `srun --mpi=pmi2`,
//! whose PMI-2 server the `pmi` crate's PMI-2 client speaks to (Slurm sets `PMI_JOBID`), and,
//! in a build with the `pmix` feature, with `srun --mpi=pmix` (Slurm's PMIx server, ch4's
//! `pmix` client): the ring on one node (shared memory) and with every rank its own node (TCP), ch4's
//! `osu_latency`, and the real OSU program built on ch4's C library. Skipped where Slurm cannot
//! run (not root, no packages).
#![cfg(all(feature = "tcp", not(any(feature = "ofi", feature = "ucx"))))]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::jobs::built;

/// A cluster, stopped and removed when dropped.
struct Cluster {
    dir: PathBuf,
    conf: String,
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/lib/slurm-cluster.sh")
}

impl Cluster {
    /// Starts a cluster, or notes `test` as skipped where Slurm cannot run here.
    fn up(test: &str) -> Option<Cluster> {
        // Under the temporary directory, made searchable by all: munged refuses a socket
        // below a directory others cannot search.
        let dir = std::env::temp_dir().join(format!("ch4-slurm-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("the cluster's directory");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let out = Command::new(script())
            .arg("up")
            .arg(&dir)
            .output()
            .expect("run slurm-cluster.sh");
        match out.status.code() {
            Some(0) => {}
            Some(77) => {
                let _ = std::fs::remove_dir_all(&dir);
                testkit::skip::skipped(test, String::from_utf8_lossy(&out.stderr).trim());
                return None;
            }
            _ => panic!(
                "slurm-cluster.sh up failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ),
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        let conf = stdout
            .lines()
            .find_map(|l| l.strip_prefix("export SLURM_CONF="))
            .expect("up prints SLURM_CONF")
            .trim_matches(|c| c == '\'' || c == '"')
            .to_owned();
        Some(Cluster { dir, conf })
    }

    /// `srun --mpi=<mpi> -n <ranks>` of `program`, waited for at most two minutes (a busy host
    /// once took a minute to launch under Slurm).
    fn srun(
        &self,
        mpi: &str,
        ranks: u32,
        program: &std::path::Path,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Output {
        let mut cmd = Command::new("srun");
        cmd.args([&format!("--mpi={mpi}"), "-n", &ranks.to_string()])
            .arg(program)
            .args(args)
            .env("SLURM_CONF", &self.conf)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("start srun");
        let start = Instant::now();
        while child.try_wait().expect("wait for srun").is_none() {
            if start.elapsed() > Duration::from_secs(120) {
                let _ = child.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = child.wait_with_output().expect("srun's output");
        assert!(
            out.status.success(),
            "srun -n {ranks} {}: {}\n{}",
            program.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(script()).arg("down").arg(&self.dir).status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn srun_with_pmi2_runs_the_ring_osu_latency_and_a_c_program() {
    ring_osu_latency_and_a_c_program(
        "pmi2",
        "slurm: srun_with_pmi2_runs_the_ring_osu_latency_and_a_c_program",
    );
}

/// Slurm's PMIx plugin (`mpi/pmix_v4`, over Debian's OpenPMIx) and ch4's PMIx client (the
/// `pmix` feature).
#[cfg(feature = "pmix")]
#[test]
fn srun_with_pmix_runs_the_ring_osu_latency_and_a_c_program() {
    ring_osu_latency_and_a_c_program(
        "pmix",
        "slurm: srun_with_pmix_runs_the_ring_osu_latency_and_a_c_program",
    );
}

/// With `srun --mpi=<mpi>`: the ring on one node (shared memory) and with every rank its own
/// node (TCP), ch4's `osu_latency`, and the real OSU program built on ch4's C library.
fn ring_osu_latency_and_a_c_program(mpi: &str, test: &str) {
    let Some(cluster) = Cluster::up(test) else {
        return;
    };
    let dir = built();
    // The ring on one node, then with every rank its own node (TCP between them).
    for node_size in ["4", "1"] {
        let out = cluster.srun(
            mpi,
            4,
            &dir.join("examples/ring"),
            &[],
            &[("CH4_NODE_SIZE", node_size)],
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            text.matches("sum of ranks 6").count(),
            4,
            "every rank ends the ring (node size {node_size}):\n{text}"
        );
    }
    let out = cluster.srun(
        mpi,
        2,
        &dir.join("examples/osu_latency"),
        &["-m", "8:8", "-i", "1000"],
        &[],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().any(|l| l.starts_with("8 ")), "{text}");
    // The real OSU program on ch4's C library, when its sources are here.
    let Some(bin) = common::c_programs::osu_latency(test, "ch4-slurm-osu") else {
        return;
    };
    let out = cluster.srun(mpi, 2, &bin, &["-m", "8:8", "-i", "1000"], &[]);
    let _ = std::fs::remove_file(&bin);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().any(|l| l.starts_with("8 ")), "{text}");
}

//! ch4 under Slurm: a one-machine cluster (`scripts/lib/slurm-cluster.sh`: slurmctld, slurmd
//! and a private munged, all under one directory) runs ch4's programs with `srun --mpi=pmi2`,
//! whose PMI-2 server the `pmi` crate's PMI-2 client speaks to (Slurm sets `PMI_JOBID`), and,
//! in a build with the `pmix` feature, with `srun --mpi=pmix` (Slurm's PMIx server, ch4's
//! `pmix` client): the ring on one node (shared memory) and with every rank its own node (TCP), ch4's
//! `osu_latency`, and the real OSU program built on ch4's C library. Then a cluster of two nodes,
//! the two hosts of `scripts/lib/netns-hosts.sh` (network namespaces, a slurmd in each): four
//! ranks of the ring, two a host, TCP between the hosts, and how long such a job takes from
//! srun's start to its end (printed, to set beside Hydra's in `two_hosts.rs`). Skipped where
//! Slurm cannot run (not root, no packages) or the machine gives no namespaces.
#![cfg(all(feature = "tcp", not(any(feature = "ofi", feature = "ucx"))))]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::hosts::TwoHosts;
use common::jobs::built;

/// A cluster, stopped and removed when dropped (before the hosts it runs on, which it
/// borrows).
struct Cluster<'h> {
    dir: PathBuf,
    conf: String,
    /// The two hosts its nodes are; `None`: this machine is its one node.
    hosts: Option<&'h TwoHosts>,
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/lib/slurm-cluster.sh")
}

impl Cluster<'static> {
    /// Starts a one-node cluster, or notes `test` as skipped where Slurm cannot run here.
    fn up(test: &str) -> Option<Cluster<'static>> {
        Cluster::start(test, None)
    }
}

impl<'h> Cluster<'h> {
    /// Starts a cluster whose two nodes are `hosts`, with slurmctld on host a (where `srun`
    /// then runs too), or notes `test` as skipped where Slurm cannot run here.
    fn on_hosts(test: &str, hosts: &'h TwoHosts) -> Option<Cluster<'h>> {
        Cluster::start(test, Some(hosts))
    }

    fn start(test: &str, hosts: Option<&'h TwoHosts>) -> Option<Cluster<'h>> {
        // Tests run in parallel: a directory for each cluster, and clusters started one after
        // the other (a one-node up picks a port that no daemon listens on yet).
        static NEXT: AtomicU32 = AtomicU32::new(0);
        static UP: Mutex<()> = Mutex::new(());
        // Under the temporary directory, made searchable by all: munged refuses a socket
        // below a directory others cannot search.
        let dir = std::env::temp_dir().join(format!(
            "ch4-slurm-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("the cluster's directory");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut cmd = Command::new(script());
        cmd.arg("up").arg(&dir);
        if let Some(hosts) = hosts {
            cmd.args(["--netns", hosts.prefix()]);
        }
        let out = {
            let _one_at_a_time = UP.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            cmd.output().expect("run slurm-cluster.sh")
        };
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
        Some(Cluster { dir, conf, hosts })
    }

    /// `srun --mpi=<mpi> <layout>` of `program` (on host a for a cluster of two hosts), waited
    /// for at most two minutes (a busy host once took a minute to launch under Slurm).
    fn srun(
        &self,
        mpi: &str,
        layout: &[&str],
        program: &Path,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Output {
        let mut cmd = match self.hosts {
            Some(hosts) => hosts.on_a("srun"),
            None => Command::new("srun"),
        };
        cmd.arg(format!("--mpi={mpi}"))
            .args(layout)
            .arg(program)
            .args(args)
            .env("SLURM_CONF", &self.conf)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let what = format!(
            "srun --mpi={mpi} {} {}",
            layout.join(" "),
            program.display()
        );
        let mut child = cmd.spawn().expect("start srun");
        let start = Instant::now();
        let mut hung = false;
        while child.try_wait().expect("wait for srun").is_none() {
            if start.elapsed() > Duration::from_secs(120) {
                let _ = child.kill();
                hung = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = child.wait_with_output().expect("srun's output");
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(
            !hung,
            "{what} had not ended after 120 s: killed\n{stdout}\n{stderr}"
        );
        assert!(
            out.status.success(),
            "{what}: {}\n{stdout}\n{stderr}",
            out.status
        );
        out
    }
}

impl Drop for Cluster<'_> {
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
            &["-n", "4"],
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
        &["-n", "2"],
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
    let out = cluster.srun(mpi, &["-n", "2"], &bin, &["-m", "8:8", "-i", "1000"], &[]);
    let _ = std::fs::remove_file(&bin);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().any(|l| l.starts_with("8 ")), "{text}");
}

#[test]
fn srun_with_pmi2_starts_four_ranks_on_two_hosts() {
    four_ranks_on_two_hosts(
        "pmi2",
        "slurm: srun_with_pmi2_starts_four_ranks_on_two_hosts",
    );
}

#[cfg(feature = "pmix")]
#[test]
fn srun_with_pmix_starts_four_ranks_on_two_hosts() {
    four_ranks_on_two_hosts(
        "pmix",
        "slurm: srun_with_pmix_starts_four_ranks_on_two_hosts",
    );
}

/// `srun --mpi=<mpi> -N 2 -n 4` of the ring on the two hosts, two ranks a host, TCP over the
/// first link between them, three times: each job's wall time from srun's start to its end,
/// printed (the note of a run reads it with `--nocapture`).
fn four_ranks_on_two_hosts(mpi: &str, test: &str) {
    // Built before the hosts and daemons exist: a slow build holds nothing up.
    let ring = built().join("examples/ring");
    let Some(hosts) = TwoHosts::without_hydra(test) else {
        return;
    };
    let Some(cluster) = Cluster::on_hosts(test, &hosts) else {
        return;
    };
    // Block distribution alone would put three ranks on the first host.
    let layout = ["-N", "2", "-n", "4", "--ntasks-per-node=2"];
    let out = cluster.srun("none", &layout, Path::new("hostname"), &[], &[]);
    let mut placed: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    placed.sort();
    let (a, b) = (
        format!("{}-a", hosts.prefix()),
        format!("{}-b", hosts.prefix()),
    );
    assert_eq!(
        placed,
        [a.as_str(), &a, &b, &b],
        "the job's tasks are two on each host"
    );
    let rails = hosts.rails(1);
    let mut times = Vec::new();
    for _ in 0..3 {
        let start = Instant::now();
        let out = cluster.srun(mpi, &layout, &ring, &[], &[("CH4_RAILS", &rails)]);
        times.push(start.elapsed());
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            text.matches("sum of ranks 6").count(),
            4,
            "every rank ends the ring:\n{text}"
        );
    }
    times.sort();
    eprintln!(
        "slurm: 4 ranks of the ring on two hosts under srun --mpi={mpi}, launch to exit: {:?} \
         (median {:?})",
        times, times[1]
    );
}

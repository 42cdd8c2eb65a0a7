//! Two hosts on this machine for tests that cross a real network: network namespaces joined by
//! two rate-limited veth links (`scripts/lib/netns-hosts.sh`), with MPICH's Hydra launching
//! ranks on them the way a cluster launches (its ssh launcher replaced by one that enters a
//! namespace), or Slurm with a slurmd on each (`tests/slurm.rs`).

use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// Each rail's rate, each way: low enough that the links, not this machine's two cores, set
/// the bandwidth.
pub const RATE: &str = "200mbit";

/// What the ranks on two hosts talk over between them.
#[derive(Clone, Copy, Debug)]
pub enum Network {
    /// TCP over both links (`CH4_RAILS`).
    TcpRails,
    /// libfabric's `tcp;ofi_rxm` on the first link.
    Ofi,
    /// UCX's tcp transport on the first link.
    Ucx,
}

/// A pair of hosts, removed when dropped.
pub struct TwoHosts {
    prefix: String,
    /// Where each rank's standard output goes (one file a rank: Hydra's merged output cuts
    /// lines that ranks write in pieces into each other).
    outputs: PathBuf,
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/lib/netns-hosts.sh")
}

impl TwoHosts {
    /// Makes the hosts, or notes `test` as skipped (and returns `None`) where this machine
    /// cannot: no Hydra, not root, no namespaces.
    pub fn up(test: &str) -> Option<TwoHosts> {
        if !testkit::skip::on_path("mpiexec.hydra", test, "install Debian's mpich") {
            return None;
        }
        TwoHosts::without_hydra(test)
    }

    /// Makes the hosts for another launcher (Slurm's), or notes `test` as skipped where this
    /// machine cannot.
    pub fn without_hydra(test: &str) -> Option<TwoHosts> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        // Short (interface names take the prefix and one digit, 15 characters at most) and
        // unique per test process and test.
        let prefix = format!(
            "c4{}x{}",
            std::process::id() % 100_000,
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let out = Command::new(script())
            .args(["up", &prefix, RATE])
            .output()
            .expect("run netns-hosts.sh");
        match out.status.code() {
            Some(0) => {
                let outputs = std::env::temp_dir().join(format!("ch4-two-hosts-{prefix}"));
                let _ = std::fs::remove_dir_all(&outputs);
                std::fs::create_dir_all(&outputs).expect("a directory for the ranks' output");
                Some(TwoHosts { prefix, outputs })
            }
            Some(77) => {
                let why = String::from_utf8_lossy(&out.stderr);
                testkit::skip::skipped(test, why.trim());
                None
            }
            _ => panic!(
                "netns-hosts.sh up failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ),
        }
    }

    /// What names the hosts (`<prefix>-a`, `<prefix>-b`) and their links (`<prefix>1`, ...).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// `program` run on host a (`netns-hosts.sh run`); append its arguments.
    pub fn on_a(&self, program: impl AsRef<OsStr>) -> Command {
        let mut cmd = Command::new(script());
        cmd.arg("run")
            .arg(format!("{}-a", self.prefix))
            .arg(program);
        cmd
    }

    /// `CH4_RAILS` for the first `n` rails (1 or 2): the interfaces by name, the same on both.
    pub fn rails(&self, n: usize) -> String {
        (1..=n)
            .map(|i| format!("{}{i}", self.prefix))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The environment that has the ranks talk over `net` between the hosts.
    pub fn network_env(&self, net: Network) -> Vec<(&'static str, String)> {
        let first = format!("{}1", self.prefix);
        match net {
            Network::TcpRails => vec![("CH4_RAILS", self.rails(2))],
            Network::Ofi => vec![
                ("CH4_NETMOD", "ofi".into()),
                ("FI_PROVIDER", "tcp;ofi_rxm".into()),
                ("FI_TCP_IFACE", first),
            ],
            Network::Ucx => vec![
                ("CH4_NETMOD", "ucx".into()),
                ("UCX_TLS", "tcp".into()),
                ("UCX_NET_DEVICES", first),
            ],
        }
    }

    /// `mpiexec.hydra`, started on host a, that places `on_a` ranks there and `on_b` on host
    /// b, each rank's standard output in a file of its own ([`TwoHosts::outputs`]); append the
    /// program.
    pub fn hydra(&self, on_a: u32, on_b: u32) -> Command {
        let (a, b) = (format!("{}-a", self.prefix), format!("{}-b", self.prefix));
        let mut cmd = Command::new(script());
        cmd.args([
            "run",
            &a,
            "mpiexec.hydra",
            "-launcher",
            "ssh",
            "-launcher-exec",
        ])
        .arg(script())
        .args(["-iface", &format!("{}1", self.prefix)])
        .args(["-hosts", &format!("{a}:{on_a},{b}:{on_b}")])
        .args(["-n", &(on_a + on_b).to_string()])
        .arg("-outfile-pattern")
        .arg(self.outputs.join("rank-%r"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        cmd
    }
}

impl TwoHosts {
    /// What each rank of the last job printed, in rank order (and empties the directory for
    /// the next).
    pub fn outputs(&self, ranks: u32) -> Vec<String> {
        let texts = self.peek_outputs(ranks);
        for r in 0..ranks {
            let _ = std::fs::remove_file(self.outputs.join(format!("rank-{r}")));
        }
        texts
    }

    /// What each rank of the running job has printed so far, in rank order.
    pub fn peek_outputs(&self, ranks: u32) -> Vec<String> {
        (0..ranks)
            .map(|r| {
                std::fs::read_to_string(self.outputs.join(format!("rank-{r}"))).unwrap_or_default()
            })
            .collect()
    }
}

impl Drop for TwoHosts {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.outputs);
        let _ = Command::new(script()).args(["down", &self.prefix]).status();
    }
}

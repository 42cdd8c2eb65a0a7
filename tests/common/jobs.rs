//! Helpers for tests that run the examples as real processes.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Once;

/// Directory of this profile's binaries (`target/debug`), found from the test executable.
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>")
        .to_path_buf()
}

/// Builds the launcher and the examples once (cargo does not build another package's binaries
/// for this package's tests, nor examples for an integration test), with the netmod features
/// this test was built with, so that `--features ofi` runs the examples over OFI too; returns
/// [`bin_dir`].
pub fn built() -> PathBuf {
    static BUILD: Once = Once::new();
    BUILD.call_once(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args([
            "build",
            "-q",
            "-p",
            "pmi",
            "--bin",
            "ch4run",
            "-p",
            "ch4",
            "--examples",
        ]);
        if !cfg!(debug_assertions) {
            cmd.arg("--release");
        }
        let netmods: Vec<&str> = [
            ("tcp", cfg!(feature = "tcp")),
            ("ofi", cfg!(feature = "ofi")),
            ("ucx", cfg!(feature = "ucx")),
            ("pmix", cfg!(feature = "pmix")),
        ]
        .into_iter()
        .filter_map(|(name, on)| on.then_some(name))
        .collect();
        cmd.args(["--no-default-features", "--features", &netmods.join(",")]);
        let st = cmd.status().expect("run cargo build");
        assert!(st.success(), "building ch4run and the examples failed");
    });
    bin_dir()
}

/// The standard output of a job that must have succeeded (its output in the failure message).
pub fn succeeded(out: Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Runs the ignored `rank` test of `module` (a `module_path!()` inside the test crate) as
/// `ranks` processes under `ch4run`, every rank its own node — so every message crosses the TCP
/// netmod over loopback — with the route tests' tiny eager limit and piece size. Fails if the
/// job fails, takes more than a minute, or any rank did not run and pass its test.
pub fn processes_over_tcp(module: &str, ranks: u32) {
    processes_on_nodes_of(module, ranks, 1);
}

/// Like [`processes_over_tcp`], with every `node_size` consecutive ranks one node: those talk
/// through shared memory (with the shm layer's tiny eager limit too), the others over TCP, so
/// ANY_SOURCE receives draw from both in real processes.
pub fn processes_on_nodes_of(module: &str, ranks: u32, node_size: u32) {
    let test = module
        .split_once("::")
        .map(|(_crate, rest)| format!("{rest}::rank"))
        .expect("a module path inside the test crate");
    let eager = super::EAGER.to_string();
    let node_size = node_size.to_string();
    let credit = super::CREDIT.to_string();
    let child = test_as_ranks(
        &test,
        ranks,
        &[
            ("CH4_NODE_SIZE", &node_size),
            ("CH4_SHM_EAGER_LIMIT", &eager),
            ("CH4_TCP_EAGER_LIMIT", &eager),
            ("CH4_TCP_PIECE_SIZE", "100"),
            ("CH4_EAGER_CREDIT", &credit),
        ],
    );
    let stdout = succeeded(finished(child, &format!("{test} on {ranks} processes")));
    let passed = stdout
        .lines()
        .filter(|l| l.starts_with("test result: ok. 1 passed"))
        .count();
    assert_eq!(passed, ranks as usize, "every rank runs {test}:\n{stdout}");
}

/// Runs the ignored `rank` test of `module` as `ranks` processes on two hosts
/// ([`super::hosts::TwoHosts`]: network namespaces joined by two links), half on each, launched
/// by Hydra, talking over `net` between the hosts (TCP over both links: rendezvous data in
/// pieces striped over the rails) with the route tests' tiny thresholds. Skipped where the
/// machine gives no namespaces or no Hydra.
pub fn on_two_hosts(module: &str, ranks: u32, net: super::hosts::Network) {
    let test = module
        .split_once("::")
        .map(|(_crate, rest)| format!("{rest}::rank"))
        .expect("a module path inside the test crate");
    let Some(hosts) = super::hosts::TwoHosts::up(&format!("{test} on two hosts over {net:?}"))
    else {
        return;
    };
    let eager = super::EAGER.to_string();
    let credit = super::CREDIT.to_string();
    let on_a = ranks.div_ceil(2);
    let mut cmd = hosts.hydra(on_a, ranks - on_a);
    cmd.arg(std::env::current_exe().expect("test executable path"))
        .args([
            "--ignored",
            "--exact",
            &test,
            "--nocapture",
            "--test-threads=1",
        ])
        .envs(hosts.network_env(net))
        .env("CH4_SHM_EAGER_LIMIT", &eager)
        .env("CH4_TCP_EAGER_LIMIT", &eager)
        .env("CH4_TCP_PIECE_SIZE", "100")
        .env("CH4_EAGER_CREDIT", &credit);
    let child = cmd.spawn().expect("start mpiexec.hydra");
    succeeded(finished(
        child,
        &format!("{test} on two hosts over {net:?}"),
    ));
    for (rank, out) in hosts.outputs(ranks).iter().enumerate() {
        assert!(
            out.contains("test result: ok. 1 passed"),
            "rank {rank} runs {test}:\n{out}"
        );
    }
}

/// Waits at most a minute for a launched job (`what` names it) and returns its output;
/// panics with what it printed if it hangs.
pub fn finished(mut child: std::process::Child, what: &str) -> Output {
    let start = std::time::Instant::now();
    while child.try_wait().expect("wait for ch4run").is_none() {
        if start.elapsed() > std::time::Duration::from_secs(60) {
            let _ = child.kill();
            let out = child.wait_with_output().expect("collect output");
            panic!(
                "{what} hung:\n{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().expect("collect output")
}

/// Starts `ch4run -n ranks` over this test executable running only the ignored test `test`
/// (its full name), with `env` set, output piped.
pub fn test_as_ranks(test: &str, ranks: u32, env: &[(&str, &str)]) -> std::process::Child {
    let exe = std::env::current_exe().expect("test executable path");
    let mut cmd = Command::new(built().join("ch4run"));
    cmd.args(["-n", &ranks.to_string()])
        .arg(exe)
        .args([
            "--ignored",
            "--exact",
            test,
            "--nocapture",
            "--test-threads=1",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().expect("start ch4run")
}

/// The body of a `rank` test: joins the process job `processes_over_tcp` started, runs `body`
/// and finalizes. Run alone (not under a launcher) it fails and says what it is for.
pub fn as_rank(body: impl FnOnce(ch4::process::ProcessContext) -> ch4::Result<()>) {
    as_rank_at(ch4::Single, body)
}

/// [`as_rank`] at thread level `level`.
pub fn as_rank_at<L: ch4::ThreadLevel>(
    level: L,
    body: impl FnOnce(ch4::Context<ch4::process::ProcessNetmod, ch4::SelectedShm, L>) -> ch4::Result<()>,
) {
    assert!(
        ch4::process::under_launcher(),
        "this test is one rank of a process job: the `tcp_processes` test beside it starts it"
    );
    let universe = ch4::process::init_thread(level).expect("join the job");
    body(universe.context().clone()).expect("the test body");
    universe.finalize().expect("finalize");
}

//! Jobs on two hosts — network namespaces of this machine joined by two rate-limited links
//! (`scripts/lib/netns-hosts.sh`) — launched by MPICH's Hydra as on a cluster, two ranks a host:
//! how long a job takes to start and end, and a rank killed mid-traffic, over the build's
//! network (TCP over both links; libfabric with `--features ofi`; UCX with `--features ucx`).
//! The semantics bodies run there too: the `two_hosts*` variants of the pt2pt and multithreaded
//! suites. Skipped where the machine gives no namespaces or no Hydra.

mod common;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::hosts::{Network, TwoHosts};
use common::jobs::{built, finished, succeeded};

/// The network this build's processes use between hosts.
fn network() -> Network {
    if cfg!(feature = "ofi") {
        Network::Ofi
    } else if cfg!(feature = "ucx") {
        Network::Ucx
    } else {
        Network::TcpRails
    }
}

/// Four ranks of the ring on two hosts, three times: each job's wall time from the launcher's
/// start to its end, printed (the note of a run reads it with `--nocapture`).
#[test]
fn four_ranks_start_and_end_on_two_hosts() {
    let net = network();
    let Some(hosts) = TwoHosts::up(&format!("two_hosts: start-up over {net:?}")) else {
        return;
    };
    let ring = built().join("examples/ring");
    let mut times = Vec::new();
    for _ in 0..3 {
        let mut cmd = hosts.hydra(2, 2);
        cmd.arg(&ring).envs(hosts.network_env(net));
        let start = Instant::now();
        let child = cmd.spawn().expect("start mpiexec.hydra");
        succeeded(finished(child, "the ring on two hosts"));
        times.push(start.elapsed());
        let out = hosts.outputs(4).concat();
        assert_eq!(
            out.matches("sum of ranks 6").count(),
            4,
            "every rank ends the ring:\n{out}"
        );
    }
    times.sort();
    eprintln!(
        "two_hosts: 4 ranks of the ring over {net:?}, launch to exit: {:?} (median {:?})",
        times, times[1]
    );
}

/// A rank on the second host killed while every rank exchanges messages ends the job: Hydra
/// sees it die and stops the others, which neither hang nor crash on the way.
#[test]
fn a_killed_rank_ends_the_job_on_two_hosts() {
    let net = network();
    let Some(hosts) = TwoHosts::up(&format!("two_hosts: killed rank over {net:?}")) else {
        return;
    };
    let mut cmd = hosts.hydra(2, 2);
    cmd.arg(built().join("examples/shm_stress"))
        .args(["--hold", "--max-size", "100000"])
        .envs(hosts.network_env(net))
        .stdout(Stdio::null());
    let mut child = cmd.spawn().expect("start mpiexec.hydra");
    let mut stderr = child.stderr.take().expect("piped");
    let (errors_tx, errors) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        let _ = errors_tx.send(text);
    });
    // Every rank announces `ready <rank> <pid>` in its own output file.
    let start = Instant::now();
    let pids: Vec<u32> = loop {
        let found: Vec<u32> = hosts
            .peek_outputs(4)
            .iter()
            .filter_map(|o| {
                o.lines()
                    .find_map(|l| l.strip_prefix("ready "))
                    .and_then(|r| r.split_whitespace().nth(1)?.parse().ok())
            })
            .collect();
        if found.len() == 4 {
            break found;
        }
        if start.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("the ranks did not all start: {found:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    std::thread::sleep(Duration::from_millis(300)); // traffic flows across the links
    let killed = Instant::now();
    assert!(Command::new("kill")
        .args(["-9", &pids[2].to_string()])
        .status()
        .expect("kill")
        .success());
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait for mpiexec") {
            break st;
        }
        if killed.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("the job did not end after rank 2 was killed");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        !status.success(),
        "a job with a killed rank reported success"
    );
    let errors = errors
        .recv_timeout(Duration::from_secs(10))
        .expect("the ranks' stderr still open 10 s after the job ended: a rank outlived it");
    for crash in ["signal 11", "SIGSEGV", "signal 6", "SIGABRT", "panicked"] {
        assert!(!errors.contains(crash), "a survivor crashed:\n{errors}");
    }
    // The launcher's proxies stop their ranks as the job ends; give them a moment.
    let alive = |pid: &u32| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        !stat.is_empty() && !stat.contains(") Z")
    };
    while pids.iter().any(alive) && killed.elapsed() < Duration::from_secs(40) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let survivors: Vec<&u32> = pids.iter().filter(|p| alive(p)).collect();
    assert!(
        survivors.is_empty(),
        "rank processes {survivors:?} outlived the job"
    );
    eprintln!(
        "two_hosts: rank 2 killed over {net:?}, job ended {:?} later",
        killed.elapsed()
    );
}

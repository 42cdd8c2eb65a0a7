//! ch4run end to end: real processes (the `pmi_hello` helper, and a real MPICH program when
//! `mpicc` is installed) launched through the built `ch4run` binary.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{ch4run, run, survivors, wait_for, HELLO};

const LIMIT: Duration = Duration::from_secs(30);

#[test]
fn four_ranks_all_succeed() {
    let r = run(ch4run(&["-n", "4"], &["--expect-size", "4"]), LIMIT);
    assert!(r.status.success(), "{}\n{}", r.stdout, r.stderr);
    for rank in 0..4 {
        assert!(
            r.stdout.contains(&format!("rank {rank} of 4: ok")),
            "{}",
            r.stdout
        );
    }
    assert!(r.stdout.contains("4 rank(s) on this node"), "{}", r.stdout);
    assert!(r.stderr.is_empty(), "{}", r.stderr);
}

#[test]
fn singleton_without_a_launcher() {
    let mut cmd = Command::new(HELLO);
    for v in ["PMI_FD", "PMI_PORT", "PMI_ID", "PMI_RANK", "PMI_SIZE"] {
        cmd.env_remove(v);
    }
    let r = run(cmd, LIMIT);
    assert!(r.status.success(), "{}", r.stderr);
    assert!(r.stdout.contains("rank 0 of 1: ok"), "{}", r.stdout);
}

#[test]
fn output_can_be_prefixed_with_the_rank() {
    let r = run(ch4run(&["-n", "3", "--prefix-output"], &[]), LIMIT);
    assert!(r.status.success(), "{}", r.stderr);
    for rank in 0..3 {
        assert!(
            r.stdout
                .lines()
                .any(|l| l.starts_with(&format!("[{rank}] rank {rank} of 3: ok"))),
            "{}",
            r.stdout
        );
    }
}

#[test]
fn pmi_port_mode_works_too() {
    let r = run(
        ch4run(&["-n", "3", "--pmi-port"], &["--expect-size", "3"]),
        LIMIT,
    );
    assert!(r.status.success(), "{}\n{}", r.stdout, r.stderr);
    assert_eq!(r.stdout.matches(": ok").count(), 3, "{}", r.stdout);
}

#[test]
fn environment_reaches_every_rank() {
    let mut cmd = Command::new(common::CH4RUN);
    cmd.args(["-n", "2", "-l", "-e", "GREETING=a=b", "--", "sh", "-c"])
        .arg("echo \"$GREETING $PMI_RANK/$PMI_SIZE fd=$PMI_FD local=$MPI_LOCALRANKID\"");
    let r = run(cmd, LIMIT);
    assert!(r.status.success(), "{}", r.stderr);
    assert!(r.stdout.contains("[0] a=b 0/2 fd="), "{}", r.stdout);
    assert!(r.stdout.contains("[1] a=b 1/2 fd="), "{}", r.stdout);
    assert!(r.stdout.contains("local=1"), "{}", r.stdout);
}

/// The CPUs a rank may run on, as `/proc/self/status` lists them, one line per rank.
fn affinity_of_ranks(ranks: &str, bind: &str) -> (common::Run, Vec<String>) {
    let mut cmd = Command::new(common::CH4RUN);
    cmd.args(["-n", ranks, "-l", "--bind-to", bind, "--", "sh", "-c"])
        .arg("grep Cpus_allowed_list /proc/self/status");
    let r = run(cmd, LIMIT);
    let mut lists: Vec<String> = r
        .stdout
        .lines()
        .filter_map(|l| l.split_whitespace().last().map(str::to_string))
        .collect();
    lists.sort();
    (r, lists)
}

#[test]
fn bind_to_core_gives_each_rank_its_own_cpu_when_there_are_enough() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (r, lists) = affinity_of_ranks("2", "core");
    assert!(r.status.success(), "{}", r.stderr);
    assert_eq!(lists.len(), 2, "{}", r.stdout);
    if cpus >= 2 {
        assert!(
            lists.iter().all(|l| l.parse::<usize>().is_ok()) && lists[0] != lists[1],
            "each rank on one CPU of its own: {lists:?}"
        );
    }
    // More ranks than CPUs: nobody is bound, and the launcher says so.
    let many = (cpus + 1).to_string();
    let (r, lists) = affinity_of_ranks(&many, "core");
    assert!(r.status.success(), "{}", r.stderr);
    assert!(r.stderr.contains("not binding"), "{}", r.stderr);
    assert!(
        lists
            .iter()
            .all(|l| l.parse::<usize>().is_err() || cpus == 1),
        "{lists:?}"
    );
    // And `none` leaves placement alone.
    let (_, lists) = affinity_of_ranks("2", "none");
    assert!(
        lists
            .iter()
            .all(|l| l.parse::<usize>().is_err() || cpus == 1),
        "{lists:?}"
    );
}

#[test]
fn a_rank_exiting_non_zero_fails_the_job_and_is_named() {
    let r = run(
        ch4run(&["-n", "4"], &["--print-pid", "--exit", "2", "3"]),
        LIMIT,
    );
    assert_eq!(r.status.code(), Some(3), "{}", r.stderr);
    assert!(
        r.stderr.contains("rank 2 (pid") && r.stderr.contains("exited with status 3"),
        "{}",
        r.stderr
    );
    assert!(survivors(&r.pids(), "pmi_hello", Duration::ZERO).is_empty());
}

#[test]
fn kill_9_of_one_rank_ends_the_job_within_a_second_and_leaves_nothing() {
    let mut cmd = ch4run(&["-n", "4"], &["--print-pid", "--kill", "1"]);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let stderr = common::drain(child.stderr.take().unwrap());
    // Time from the moment rank 1 is known to be running (its pid line) to ch4run's exit.
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut pids = Vec::new();
    let mut line = String::new();
    let mut killed_at = None;
    while out.read_line(&mut line).unwrap() > 0 {
        pids.extend(common::pids_in(&line));
        if line.starts_with("pid 1 ") {
            killed_at = Some(Instant::now());
        }
        line.clear();
    }
    let status = wait_for(&mut child, LIMIT);
    let took = killed_at.expect("rank 1 printed its pid").elapsed();
    let stderr = stderr.join().unwrap();
    assert!(!status.success());
    assert_eq!(status.code(), Some(128 + 9), "{stderr}");
    assert!(
        stderr.contains("rank 1 (pid") && stderr.contains("signal 9 (SIGKILL)"),
        "{stderr}"
    );
    assert!(
        took < Duration::from_secs(1),
        "ch4run took {took:?} after the kill"
    );
    assert_eq!(pids.len(), 4, "every rank reported its pid");
    let left = survivors(&pids, "pmi_hello", Duration::ZERO);
    assert!(left.is_empty(), "ranks left behind: {left:?}");
}

#[test]
fn pmi_abort_ends_the_job_with_its_code() {
    let r = run(
        ch4run(&["-n", "3"], &["--print-pid", "--abort", "1", "7"]),
        LIMIT,
    );
    assert_eq!(r.status.code(), Some(7), "{}", r.stderr);
    assert!(
        r.stderr
            .contains("rank 1 called PMI abort with exit code 7"),
        "{}",
        r.stderr
    );
    assert!(survivors(&r.pids(), "pmi_hello", Duration::ZERO).is_empty());
}

#[test]
fn leaving_without_finalize_while_others_wait_fails_instead_of_hanging() {
    let r = run(ch4run(&["-n", "3"], &["--leave", "2"]), LIMIT);
    assert_eq!(r.status.code(), Some(1), "{}", r.stderr);
    assert!(
        r.stderr
            .contains("rank 2 closed its PMI connection without finalize"),
        "{}",
        r.stderr
    );
}

/// Starts a hanging job and returns it with the pids of its ranks.
fn hanging_job(ranks: usize) -> (std::process::Child, Vec<u32>) {
    let n = ranks.to_string();
    let mut cmd = ch4run(&["-n", &n, "--grace-ms", "200"], &["--print-pid", "--hang"]);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut pids = Vec::new();
    let mut line = String::new();
    while pids.len() < ranks && out.read_line(&mut line).unwrap() > 0 {
        pids.extend(common::pids_in(&line));
        line.clear();
    }
    // Keep draining so ch4run never blocks on its own output.
    common::drain(out);
    common::drain(child.stderr.take().unwrap());
    assert_eq!(pids.len(), ranks);
    (child, pids)
}

#[allow(unsafe_code)]
fn signal(pid: u32, sig: i32) {
    let pid = i32::try_from(pid).unwrap();
    // SAFETY: kill takes integer arguments only; pid is a child this test started.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
}

#[test]
fn sigterm_and_sigint_are_forwarded_to_every_rank() {
    for (sig, code) in [(libc::SIGTERM, 143), (libc::SIGINT, 130)] {
        let (mut child, pids) = hanging_job(3);
        let start = Instant::now();
        signal(child.id(), sig);
        let status = wait_for(&mut child, LIMIT);
        assert_eq!(status.code(), Some(code));
        assert!(start.elapsed() < Duration::from_secs(2));
        let left = survivors(&pids, "pmi_hello", Duration::ZERO);
        assert!(
            left.is_empty(),
            "ranks left behind after signal {sig}: {left:?}"
        );
    }
}

#[test]
fn ranks_die_when_ch4run_is_killed_with_sigkill() {
    let (mut child, pids) = hanging_job(3);
    signal(child.id(), libc::SIGKILL);
    let _ = wait_for(&mut child, LIMIT);
    // PR_SET_PDEATHSIG delivers SIGKILL to every rank as soon as ch4run is gone.
    let left = survivors(&pids, "pmi_hello", Duration::from_secs(2));
    assert!(left.is_empty(), "orphans left behind: {left:?}");
}

#[test]
fn a_missing_program_is_a_clear_error() {
    let mut cmd = Command::new(common::CH4RUN);
    cmd.args(["-n", "2", "/nonexistent/program"]);
    let r = run(cmd, LIMIT);
    assert_eq!(r.status.code(), Some(127));
    assert!(
        r.stderr
            .contains("cannot start \"/nonexistent/program\" as rank 0"),
        "{}",
        r.stderr
    );
}

#[test]
fn usage_errors_exit_2() {
    let mut cmd = Command::new(common::CH4RUN);
    cmd.args(["--bogus"]);
    let r = run(cmd, LIMIT);
    assert_eq!(r.status.code(), Some(2));
    assert!(r.stderr.contains("unknown option --bogus"), "{}", r.stderr);
}

/// MPICH's own C PMI client (inside libmpich) against ch4run's server: the strongest check
/// that ch4run speaks the protocol as Hydra does.
#[test]
fn a_real_mpich_program_runs_under_ch4run() {
    // MPICH's own compiler wrapper: plain `mpicc` may be Open MPI's when both are installed
    // (Debian's alternatives), and an Open MPI program does not speak PMI-1.
    let Some(mpicc) = common::which("mpicc.mpich").or_else(|| common::which("mpicc")) else {
        testkit::skip::skipped(
            "pmi ch4run: a_real_mpich_program_runs_under_ch4run",
            "no mpicc (install the Debian package mpich to run this test)",
        );
        return;
    };
    let dir = std::env::temp_dir().join(format!("ch4run-mpich-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("allreduce.c");
    std::fs::write(
        &src,
        r#"#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
    int rank, size, sum = 0, one = 1;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    printf("mpich rank %d of %d sum %d\n", rank, size, sum);
    MPI_Finalize();
    return sum == size ? 0 : 1;
}
"#,
    )
    .unwrap();
    let exe = dir.join("allreduce");
    let cc = Command::new(mpicc).arg("-o").arg(&exe).arg(&src).status();
    if !cc.is_ok_and(|s| s.success()) {
        testkit::skip::skipped(
            "pmi ch4run: a_real_mpich_program_runs_under_ch4run",
            "mpicc could not build the test program",
        );
        return;
    }
    for mode in [&[][..], &["--pmi-port"][..]] {
        let mut cmd = Command::new(common::CH4RUN);
        cmd.args(["-n", "4"]).args(mode).arg(&exe);
        let r = run(cmd, Duration::from_secs(60));
        assert!(r.status.success(), "{mode:?}\n{}\n{}", r.stdout, r.stderr);
        assert_eq!(r.stdout.matches("of 4 sum 4").count(), 4, "{}", r.stdout);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

//! MPICH's own point-to-point test programs (`mpich-test-pt2pt` of the third-party folder,
//! `$THIRD_PARTY_DIR`, by default `../shared/third_party`; unmodified), built with
//! `c-abi/bin/mpicc` and our MTest harness (`c-abi/mtest`), each run under `ch4run` with the
//! process count and arguments of its `testlist` line. A program passes when it prints
//! ` No Errors` and exits 0. Every case must pass except those MPICH itself marks `xfail`,
//! which are run and reported. Without the programs the test is skipped, and says so.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// One `testlist` line: program, processes, arguments, whether MPICH expects it to fail.
struct Case {
    program: String,
    ranks: u32,
    args: Vec<String>,
    xfail: bool,
}

fn cases(sources: &Path) -> Vec<Case> {
    let list = std::fs::read_to_string(sources.join("testlist")).expect("the testlist");
    list.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let mut f = l.split_whitespace();
            let program = f.next().unwrap().to_string();
            let ranks = f.next().and_then(|n| n.parse().ok()).unwrap_or(1);
            let (mut args, mut xfail) = (Vec::new(), false);
            for w in f {
                if let Some(a) = w.strip_prefix("arg=") {
                    args.push(a.to_string());
                } else if w.starts_with("xfail=") {
                    xfail = true;
                }
            }
            Case {
                program,
                ranks,
                args,
                xfail,
            }
        })
        .collect()
}

/// Builds the harness and every program of the testlist into `target/<profile>/mpi-abi-test/mpich`.
fn build(sources: &Path) -> PathBuf {
    let lib = common::built();
    let dir = common::bin_dir().join("mpi-abi-test/mpich");
    std::fs::create_dir_all(&dir).unwrap();
    let mtest = common::root().join("c-abi/mtest");
    let harness = dir.join("mtest.o");
    common::run_ok(
        common::mpicc(&lib)
            .arg(format!("-I{}", mtest.display()))
            .arg("-c")
            .arg(mtest.join("mtest.c"))
            .arg("-o")
            .arg(&harness),
    );
    let mut built = std::collections::BTreeSet::new();
    for c in cases(sources) {
        if !built.insert(c.program.clone()) {
            continue;
        }
        common::run_ok(
            common::mpicc(&lib)
                .arg("-O1")
                .arg(format!("-I{}", mtest.display()))
                .arg("-o")
                .arg(dir.join(&c.program))
                .arg(sources.join(format!("{}.c", c.program)))
                .arg(&harness),
        );
    }
    dir
}

/// Runs one case; whether it printed " No Errors" and exited 0, and its output.
fn run(dir: &Path, c: &Case) -> (bool, String) {
    let mut child = Command::new(common::ch4run())
        .args(["-n", &c.ranks.to_string()])
        .arg(dir.join(&c.program))
        .args(&c.args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if start.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let passed = out.status.success() && text.lines().any(|l| l == " No Errors");
    (passed, text)
}

#[test]
fn every_mpich_pt2pt_test_prints_no_errors() {
    let test = "mpich: every_mpich_pt2pt_test_prints_no_errors";
    let Some(sources) = common::third_party("mpich-test-pt2pt", test) else {
        return;
    };
    let dir = build(&sources);
    let mut failed = Vec::new();
    let mut report = Vec::new();
    for c in cases(&sources) {
        let (passed, out) = run(&dir, &c);
        let name = format!("{} -n {} {}", c.program, c.ranks, c.args.join(" "));
        report.push(format!(
            "{} {name}{}",
            if passed { "pass" } else { "FAIL" },
            if c.xfail { " (MPICH: xfail)" } else { "" }
        ));
        if !passed && !c.xfail {
            failed.push(format!("{name}:\n{out}"));
        }
    }
    eprintln!("{}", report.join("\n"));
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}

//! MPICH's own point-to-point test programs (`mpich-test-pt2pt` of the third-party folder,
//! `$THIRD_PARTY_DIR`, by default `../shared/third_party`; unmodified) and its multithreaded
//! ones (`mpich-test-threads`, at `MPI_THREAD_MULTIPLE`), built with `c-abi/bin/mpicc` and
//! our MTest harness (`c-abi/mtest`, with its thread helpers for the second set), each run
//! under `ch4run` with the process count and arguments of its `testlist` line; a program
//! whose `Makefile.am` names its sources and preprocessor flags (`mt_sendrecv_SOURCES`,
//! `_CPPFLAGS`) is built from those. A program passes when it prints ` No Errors` and exits 0.
//! Every case must pass except those MPICH itself marks `xfail`, which are run and reported.
//! Without the programs the test is skipped, and says so.
//!
//! `CH4_NODE_SIZE=1` in the environment runs every case over the network (each rank its own
//! node); `ABI_TEST_NETMOD=ofi` or `ucx` builds the library over that netmod (`common::built`).

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
    /// The run's limit (`timeLimit=`, in seconds; 120 unless the line says).
    limit: u64,
    /// Environment the line sets (`env=NAME=VALUE`).
    env: Vec<(String, String)>,
}

fn cases(sources: &Path) -> Vec<Case> {
    let list = std::fs::read_to_string(sources.join("testlist")).expect("the testlist");
    list.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let mut f = l.split_whitespace();
            let program = f.next().unwrap().to_string();
            let ranks = f.next().and_then(|n| n.parse().ok()).unwrap_or(1);
            let (mut args, mut xfail, mut limit) = (Vec::new(), false, 120);
            let mut env = Vec::new();
            for w in f {
                if let Some((name, value)) = w.strip_prefix("env=").and_then(|e| e.split_once('='))
                {
                    env.push((name.to_string(), value.to_string()));
                } else if let Some(a) = w.strip_prefix("arg=") {
                    args.push(a.to_string());
                } else if w.starts_with("xfail=") {
                    xfail = true;
                } else if let Some(t) = w.strip_prefix("timeLimit=") {
                    limit = t.parse().unwrap_or(limit);
                }
            }
            Case {
                program,
                ranks,
                args,
                xfail,
                limit,
                env,
            }
        })
        .filter(|c| chosen(&c.program) && skip_reason(sources, &c.program).is_none())
        .collect()
}

/// Programs of a folder that cannot run on the library yet, by folder, with the reason: they
/// are neither built (they would not link) nor run, and each suite's output names them.
const SKIPPED: &[(&str, &str, &str)] = &[
    (
        "attr",
        "keyval_double_free_win",
        "windows' attributes (MPI_Win_create_keyval ...): one-sided communication is not \
         implemented",
    ),
    (
        "attr",
        "attric",
        "intercommunicators (MPI_Intercomm_create, which MTestGetIntercomm needs) are not \
         implemented",
    ),
    (
        "attr",
        "attrt",
        "MPI_Group_range_incl (groups' range constructors) is not in the library yet",
    ),
    (
        "errhan",
        "sessioncall",
        "sessions (MPI_Session_init, MPI_Session_create_errhandler ...) are not implemented",
    ),
];

/// Why `program` of the folder `sources` is skipped, if it is ([`SKIPPED`]).
fn skip_reason(sources: &Path, program: &str) -> Option<&'static str> {
    let folder = sources.file_name()?.to_str()?;
    SKIPPED
        .iter()
        .find(|(f, p, _)| *f == folder && *p == program)
        .map(|(_, _, why)| *why)
}

/// Whether `program` is among those `CH4_MPICH_ONLY` names (a comma-separated list; every
/// program when it is unset), so that a developer can run the cases of one program.
fn chosen(program: &str) -> bool {
    match std::env::var("CH4_MPICH_ONLY") {
        Ok(list) if !list.is_empty() => list.split(',').any(|p| p.trim() == program),
        _ => true,
    }
}

/// The sources and preprocessor flags of `program`: its `Makefile.am` lines
/// (`<program>_SOURCES`, `<program>_CPPFLAGS`) if it has them, else `<program>.c`.
fn recipe(sources: &Path, program: &str) -> (Vec<PathBuf>, Vec<String>) {
    let makefile = std::fs::read_to_string(sources.join("Makefile.am")).unwrap_or_default();
    let value = |var: &str| {
        makefile.lines().find_map(|l| {
            let (name, v) = l.split_once('=')?;
            (name.trim() == var).then(|| {
                v.split_whitespace()
                    .filter(|w| !w.starts_with("$("))
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
        })
    };
    let files = value(&format!("{program}_SOURCES"))
        .unwrap_or_else(|| vec![format!("{program}.c")])
        .iter()
        .map(|f| sources.join(f))
        .collect();
    let flags = value(&format!("{program}_CPPFLAGS")).unwrap_or_default();
    (files, flags)
}

/// Builds the harness (`harness`, the C files of `c-abi/mtest` it needs) and every program of
/// the testlist into `target/<profile>/mpi-abi-test/<suite>`.
fn build(sources: &Path, suite: &str, harness: &[&str]) -> PathBuf {
    let lib = common::built();
    let dir = common::bin_dir().join("mpi-abi-test").join(suite);
    std::fs::create_dir_all(&dir).unwrap();
    let mtest = common::root().join("c-abi/mtest");
    let mut objects = Vec::new();
    for c in harness {
        let object = dir.join(c.replace(".c", ".o"));
        common::run_ok(
            common::mpicc(&lib)
                .arg(format!("-I{}", mtest.display()))
                .arg("-c")
                .arg(mtest.join(c))
                .arg("-o")
                .arg(&object),
        );
        objects.push(object);
    }
    let mut built = std::collections::BTreeSet::new();
    for c in cases(sources) {
        if !built.insert(c.program.clone()) {
            continue;
        }
        let (files, flags) = recipe(sources, &c.program);
        common::run_ok(
            common::mpicc(&lib)
                .arg("-O1")
                .arg(format!("-I{}", mtest.display()))
                .arg(format!("-I{}", sources.display()))
                .args(&flags)
                .arg("-o")
                .arg(dir.join(&c.program))
                .args(&files)
                .args(&objects)
                .arg("-lpthread"),
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
        .envs(c.env.iter().map(|(k, v)| (k, v)))
        // The runner's own setting, which the library would refuse as an unknown CH4_ name.
        .env_remove("CH4_MPICH_ONLY")
        .current_dir(dir)
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
        if start.elapsed() > Duration::from_secs(c.limit) {
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
    run_suite(&sources, "mpich", &["mtest.c"]);
}

#[test]
fn every_mpich_thread_test_prints_no_errors() {
    let test = "mpich: every_mpich_thread_test_prints_no_errors";
    let Some(sources) = common::third_party("mpich-test-threads", test) else {
        return;
    };
    run_suite(&sources, "mpich-threads", &["mtest.c", "mtest_thread.c"]);
}

/// Builds and runs one folder of `mpich-test-more` (`coll`, `comm`, `datatype`, …) with
/// MTest, skipping the test when the folder is missing.
#[allow(dead_code)] // each folder gets its test as the library grows what it calls
fn run_more(folder: &str, test: &str) {
    let Some(more) = common::third_party("mpich-test-more", test) else {
        return;
    };
    run_suite(&more.join(folder), &format!("mpich-{folder}"), &["mtest.c"]);
}

/// [`run_more`] with the MTest files `harness` (`mtest.c` and the ones a folder's programs
/// need besides).
fn run_more_with(folder: &str, test: &str, harness: &[&str]) {
    let Some(more) = common::third_party("mpich-test-more", test) else {
        return;
    };
    run_suite(&more.join(folder), &format!("mpich-{folder}"), harness);
}

/// MPICH's caching tests: attribute keys, copy and delete functions (on duplication, deletion,
/// freeing and at `MPI_Finalize`), their error returns, the predefined attributes.
#[test]
fn every_mpich_attr_test_prints_no_errors() {
    let test = "mpich: every_mpich_attr_test_prints_no_errors";
    run_more_with("attr", test, &["mtest.c", "mtest_attr.c"]);
}

/// MPICH's error-handling tests: the program's error classes, codes and strings, and its
/// error handlers on the predefined communicators.
#[test]
fn every_mpich_errhan_test_prints_no_errors() {
    let test = "mpich: every_mpich_errhan_test_prints_no_errors";
    run_more_with("errhan", test, &["mtest.c", "mtest_attr.c"]);
}

/// Builds and runs every case of the suite in `sources`, failing with the output of each that
/// failed (and MPICH does not expect to fail).
fn run_suite(sources: &Path, suite: &str, harness: &[&str]) {
    let dir = build(sources, suite, harness);
    let mut failed = Vec::new();
    let mut report = Vec::new();
    let folder = sources.file_name().and_then(|f| f.to_str()).unwrap_or("");
    for (_, program, why) in SKIPPED.iter().filter(|(f, p, _)| *f == folder && chosen(p)) {
        report.push(format!("skip {program}: {why}"));
    }
    for c in cases(sources) {
        let started = std::time::Instant::now();
        let (passed, out) = run(&dir, &c);
        let name = format!("{} -n {} {}", c.program, c.ranks, c.args.join(" "));
        report.push(format!(
            "{} {name}{} ({:.1} s)",
            if passed { "pass" } else { "FAIL" },
            if c.xfail { " (MPICH: xfail)" } else { "" },
            started.elapsed().as_secs_f64()
        ));
        if !passed && !c.xfail {
            failed.push(format!("{name}:\n{out}"));
        }
    }
    eprintln!("{}", report.join("\n"));
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}

//! MPICH's own test programs (`mpich-test-pt2pt` of the third-party folder,
//! `$THIRD_PARTY_DIR`, by default `../shared/third_party`; unmodified), its multithreaded
//! ones (`mpich-test-threads`, at `MPI_THREAD_MULTIPLE`) and the folders of
//! `mpich-test-more` (collectives, groups, topologies, datatypes, caching, error handling),
//! built with `c-abi/bin/mpicc` and our MTest harness (`c-abi/mtest`), each run
//! under `ch4run` with the process count and arguments of its `testlist` line; a program
//! whose `Makefile.am` names its sources and preprocessor flags (`mt_sendrecv_SOURCES`,
//! `_CPPFLAGS`) is built from those. A program passes when it prints ` No Errors` and exits 0.
//! Every case must pass except those MPICH itself marks `xfail`, which are run and reported.
//! Without the programs the test is skipped, and says so.
//!
//! The library is the optimized one (`common::built_optimized`) in either profile: the folders
//! hold hundreds of cases, some of them stress tests, which the unoptimized library runs
//! several times slower.
//!
//! `CH4_NODE_SIZE=1` in the environment runs every case over the network (each rank its own
//! node); `ABI_TEST_NETMOD=ofi` or `ucx` builds the library over that netmod (`common::built`).
//! `CH4_MPICH_ONLY` runs the cases of the programs it names, `ABI_TEST_MPICH_SKIP` leaves out the
//! cases it names.

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
        .filter(|c| chosen(&c.program))
        .collect()
}

/// The cases that are not run, by folder, with why: a case-name prefix as [`case_name`]
/// writes it ("program" for every case of one, "program -n 2 33" for one). Each calls a function
/// outside the MPI this library implements (`mpi-functions.txt`: one-sided communication,
/// sessions, Fortran interop, the MPI-1 functions and handles MPI 3.0 removed, which the
/// standard ABI does not have), or needs more
/// memory than the test machine can spare (24 GiB, shared). They are neither built (some
/// would not link) nor run, and each suite's report names them.
const SKIPPED: &[(&str, &str, &str)] = &[
    (
        "comm",
        "inactive_reqs",
        "calls MPI_Comm_disconnect (dynamic processes)",
    ),
    (
        "attr",
        "keyval_double_free_win",
        "windows' attributes (MPI_Win_create_keyval ...): one-sided communication",
    ),
    (
        "errhan",
        "sessioncall",
        "sessions (MPI_Session_init, MPI_Session_create_errhandler ...)",
    ),
    (
        "datatype",
        "createf90types",
        "calls MPI_Type_create_f90_integer/_real/_complex (Fortran interop)",
    ),
    (
        "datatype",
        "typename ",
        "calls MPI_Errhandler_set (removed in MPI 3.0)",
    ),
    (
        "datatype",
        "typename_oldapi",
        "names MPI_LB and MPI_UB (removed in MPI 3.0, not in the standard ABI)",
    ),
    (
        "datatype",
        "indexed_misc_oldapi",
        "calls MPI_Type_hindexed, MPI_Type_lb, MPI_Type_ub (removed in MPI 3.0)",
    ),
    (
        "datatype",
        "simple_size_extent_oldapi",
        "calls MPI_Type_ub (removed in MPI 3.0)",
    ),
    (
        "datatype",
        "transpose_pack_oldapi",
        "calls MPI_Type_extent and MPI_Type_hvector (removed in MPI 3.0)",
    ),
    (
        "datatype",
        "large_type_sendrec -n 2 33",
        "moves a 17.2 GB message (testlist mem=17.2): most of the shared 24 GiB test machine \
         (arguments 31 and 32, 4.3 and 8.6 GB, run)",
    ),
];

/// The name of case `c` in the report: program, processes, arguments.
fn case_name(c: &Case) -> String {
    format!("{} -n {} {}", c.program, c.ranks, c.args.join(" "))
}

/// Why case `c` of folder `folder` is not run, if [`SKIPPED`] names it.
fn skip_reason(folder: &str, c: &Case) -> Option<&'static str> {
    let name = case_name(c);
    SKIPPED
        .iter()
        .find(|(f, prefix, _)| *f == folder && name.starts_with(prefix))
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

/// Whether case `c` is among those `ABI_TEST_MPICH_SKIP` names: a comma-separated list of case-name
/// prefixes as [`case_name`] writes them ("gather_big", "nonblocking3 -n 10"). The suite uses
/// it to leave the long stress cases out of its runs over the network: they have run over
/// shared memory already, and over TCP two of them took a minute of the suite's time.
fn set_aside(c: &Case) -> bool {
    let name = case_name(c);
    std::env::var("ABI_TEST_MPICH_SKIP").is_ok_and(|list| {
        list.split(',')
            .map(str::trim)
            .any(|p| !p.is_empty() && name.starts_with(p))
    })
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
/// the testlist into `target/<profile>/mpi-abi-test/<suite><library's flavour>`.
fn build(sources: &Path, suite: &str, harness: &[&str]) -> PathBuf {
    let folder = sources.file_name().and_then(|f| f.to_str()).unwrap_or("");
    let lib = common::built_optimized();
    // A directory per library: the programs link it by its path (`-rpath`), so the programs
    // built for one netmod's library must not be taken as up to date for another's.
    let flavour = lib
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("lib"))
        .unwrap_or_default();
    let dir = common::bin_dir()
        .join("mpi-abi-test")
        .join(format!("{suite}{flavour}"));
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
    // The main function of the programs that define `run` instead (MPICH's single tests).
    let single = dir.join("mtest_single.o");
    common::run_ok(
        common::mpicc(&lib)
            .arg(format!("-I{}", mtest.display()))
            .arg("-c")
            .arg(mtest.join("mtest_single.c"))
            .arg("-o")
            .arg(&single),
    );
    let mut built = std::collections::BTreeSet::new();
    for c in cases(sources)
        .into_iter()
        .filter(|c| skip_reason(folder, c).is_none())
    {
        if !built.insert(c.program.clone()) {
            continue;
        }
        let (files, flags) = recipe(sources, &c.program);
        if up_to_date(&dir.join(&c.program), &files, &mtest) {
            continue;
        }
        let has_main = files
            .iter()
            .any(|f| std::fs::read_to_string(f).is_ok_and(|text| text.contains("main(")));
        common::run_ok(
            common::mpicc(&lib)
                .arg("-O1")
                .arg(format!("-I{}", mtest.display()))
                .arg(format!("-I{}", sources.display()))
                // The neighbourhood tests compile their calls only under MPICH's own macro
                // (they predate the calls' standardization); they are MPI 3.0's, so on.
                .arg("-DTEST_NEIGHB_COLL=1")
                .args(&flags)
                .arg("-o")
                .arg(dir.join(&c.program))
                .args(&files)
                .args(&objects)
                .args((!has_main).then_some(&single))
                .arg("-lpthread")
                .arg("-lm"),
        );
    }
    dir
}

/// Whether `program` was built after its `sources`, our `mpi.h` and the MTest harness's
/// sources last changed: it links the library dynamically, so nothing else can make it stale,
/// and the suite's second run (over the network) then compiles nothing.
fn up_to_date(program: &Path, sources: &[PathBuf], mtest: &Path) -> bool {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let Some(built) = modified(program) else {
        return false;
    };
    let header = common::root().join("c-abi/include/mpi.h");
    let harness = std::fs::read_dir(mtest)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path());
    sources
        .iter()
        .cloned()
        .chain(std::iter::once(header))
        .chain(harness)
        .all(|p| modified(&p).is_some_and(|m| m <= built))
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
    // MPICH's runtests takes either capitalization (`No [Ee]rrors`): `longdouble` prints
    // its own " No errors".
    let passed =
        out.status.success() && text.lines().any(|l| l == " No Errors" || l == " No errors");
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

/// Builds and runs one folder of `mpich-test-more` with MTest's `harness` files, skipping
/// the test when the folder is missing.
fn run_more(folder: &str, harness: &[&str]) {
    let test = format!("mpich: every_mpich_{folder}_test_prints_no_errors");
    let Some(more) = common::third_party("mpich-test-more", &test) else {
        return;
    };
    run_suite(&more.join(folder), &format!("mpich-{folder}"), harness);
}

/// MPICH's collective tests: blocking, nonblocking, persistent and neighbourhood collectives,
/// the reduction operations.
#[test]
fn every_mpich_coll_test_prints_no_errors() {
    run_more("coll", &["mtest.c"]);
}

/// MPICH's group tests.
#[test]
fn every_mpich_group_test_prints_no_errors() {
    run_more("group", &["mtest.c"]);
}

/// MPICH's topology tests: Cartesian, graph and distributed-graph topologies.
#[test]
fn every_mpich_topo_test_prints_no_errors() {
    run_more("topo", &["mtest.c"]);
}

/// MPICH's datatype tests: constructors, packing, decoding, big counts.
#[test]
fn every_mpich_datatype_test_prints_no_errors() {
    run_more("datatype", &["mtest.c", "mtest_datatype.c"]);
}

/// MPICH's caching tests: attribute keys, copy and delete functions (on duplication, deletion,
/// freeing and at `MPI_Finalize`), their error returns, the predefined attributes.
#[test]
fn every_mpich_attr_test_prints_no_errors() {
    run_more("attr", &["mtest.c"]);
}

/// MPICH's error-handling tests: the program's error classes, codes and strings, and its
/// error handlers on the predefined communicators.
#[test]
fn every_mpich_errhan_test_prints_no_errors() {
    run_more("errhan", &["mtest.c"]);
}

/// MPICH's communicator tests: dup, split and create (also of intercommunicators), the
/// intercommunicators themselves (`MPI_Intercomm_create`, `_merge`, the remote group),
/// `MPI_Comm_idup`, names, info hints.
#[test]
fn every_mpich_comm_test_prints_no_errors() {
    run_more("comm", &["mtest.c"]);
}

/// Builds and runs every case of the suite in `sources`, failing with the output of each that
/// failed (and MPICH does not expect to fail). The cases [`SKIPPED`] names are neither built
/// nor run; the report lists each with its reason.
fn run_suite(sources: &Path, suite: &str, harness: &[&str]) {
    // One suite at a time: the test harness runs this file's tests on threads at once, and two
    // folders' biggest cases together (gather_big, large_vec: 8-9 GB each) had the kernel's
    // OOM killer end a rank, which the job then reported as a failed peer.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let folder = sources.file_name().and_then(|f| f.to_str()).unwrap_or("");
    let dir = build(sources, suite, harness);
    let mut failed = Vec::new();
    let mut report = Vec::new();
    for c in cases(sources) {
        let name = case_name(&c);
        if let Some(why) = skip_reason(folder, &c) {
            report.push(format!("skip {name}: {why}"));
            continue;
        }
        if set_aside(&c) {
            report.push(format!("skip {name}: named by ABI_TEST_MPICH_SKIP"));
            continue;
        }
        let started = std::time::Instant::now();
        let (passed, out) = run(&dir, &c);
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

//! The real OSU 7.2 programs (`osu-micro-benchmarks-7.2` of the third-party folder, unmodified:
//! `$THIRD_PARTY_DIR`, by default `../shared/third_party`) built with `c-abi/bin/mpicc` and run
//! under `ch4run` with OSU's own data validation (`-c`): point-to-point, persistent, the
//! blocking collectives, start-up. Then the ABI both ways, when MPICH 5 is installed: the OSU
//! binary built by MPICH's `mpicc_abi` runs on ch4's library, and ours on MPICH's (under
//! MPICH's Hydra). Without the OSU sources every case is skipped, and says so.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// OSU's C sources, or `None` (the skip noted under `test`'s name) when they are absent.
fn osu_dir(test: &str) -> Option<PathBuf> {
    common::third_party("osu-micro-benchmarks-7.2", test).map(|d| d.join("c"))
}

const UTIL: [&str; 5] = [
    "osu_util.c",
    "osu_util_mpi.c",
    "osu_util_graph.c",
    "osu_util_validation.c",
    "osu_util_papi.c",
];

/// The compiler flags OSU's build uses (the third-party folder's README).
fn flags(osu: &Path) -> Vec<String> {
    vec![
        "-O2".into(),
        "-DFIELD_WIDTH=18".into(),
        "-DFLOAT_PRECISION=2".into(),
        format!("-I{}", osu.join("util").display()),
    ]
}

/// OSU's util compiled once with `cc` (our header) into `dir`; the object files.
fn util_objects(osu: &Path, cc: &mut dyn FnMut() -> Command, dir: &Path) -> Vec<PathBuf> {
    UTIL.iter()
        .map(|u| {
            let obj = dir.join(u.replace(".c", ".o"));
            common::run_ok(
                cc().args(flags(osu))
                    .arg("-c")
                    .arg(osu.join("util").join(u))
                    .arg("-o")
                    .arg(&obj),
            );
            obj
        })
        .collect()
}

/// The OSU programs built with our wrapper, in `target/<profile>/mpi-abi-test/osu`.
fn ours(osu: &Path) -> &'static (PathBuf, PathBuf) {
    static BUILT: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    BUILT.get_or_init(|| {
        let lib = common::built();
        let dir = common::bin_dir().join("mpi-abi-test/osu");
        std::fs::create_dir_all(&dir).unwrap();
        let objs = util_objects(osu, &mut || common::mpicc(&lib), &dir);
        for (sub, name) in PROGRAMS {
            common::run_ok(
                common::mpicc(&lib)
                    .args(flags(osu))
                    .arg("-o")
                    .arg(dir.join(name))
                    .arg(osu.join("mpi").join(sub).join(format!("{name}.c")))
                    .args(&objs)
                    .args(["-lm", "-lpthread"]),
            );
        }
        (dir, lib)
    })
}

const PROGRAMS: [(&str, &str); 13] = [
    ("pt2pt/standard", "osu_latency"),
    ("pt2pt/standard", "osu_bw"),
    ("pt2pt/standard", "osu_bibw"),
    ("pt2pt/standard", "osu_mbw_mr"),
    ("pt2pt/persistent", "osu_latency_persistent"),
    ("pt2pt/persistent", "osu_bw_persistent"),
    ("collective/blocking", "osu_allreduce"),
    ("collective/blocking", "osu_bcast"),
    ("collective/blocking", "osu_gatherv"),
    ("collective/blocking", "osu_scatterv"),
    ("collective/blocking", "osu_alltoallv"),
    ("collective/blocking", "osu_reduce_scatter"),
    ("startup", "osu_hello"),
];

/// Runs `program` as `ranks` processes under ch4run with OSU's validation on small sizes;
/// every size must pass and none fail.
fn validated(osu: &Path, program: &str, ranks: u32) {
    let (dir, _) = ours(osu);
    let out = common::run_ok(
        Command::new(common::ch4run())
            .args(["-n", &ranks.to_string()])
            .arg(dir.join(program))
            .args(["-c", "-m", "1:16384", "-i", "20", "-x", "2"]),
    );
    let passed = out.lines().filter(|l| l.contains("Pass")).count();
    assert!(passed >= 10, "{program}: {passed} sizes passed\n{out}");
    assert!(!out.contains("Fail"), "{program}:\n{out}");
}

#[test]
fn point_to_point_programs_pass_their_validation() {
    let Some(osu) = osu_dir("osu: point_to_point_programs_pass_their_validation") else {
        return;
    };
    for p in ["osu_latency", "osu_bw", "osu_bibw", "osu_mbw_mr"] {
        validated(&osu, p, 2);
    }
}

#[test]
fn persistent_programs_pass_their_validation() {
    let Some(osu) = osu_dir("osu: persistent_programs_pass_their_validation") else {
        return;
    };
    for p in ["osu_latency_persistent", "osu_bw_persistent"] {
        validated(&osu, p, 2);
    }
}

#[test]
fn collective_programs_pass_their_validation() {
    let Some(osu) = osu_dir("osu: collective_programs_pass_their_validation") else {
        return;
    };
    for p in [
        "osu_allreduce",
        "osu_bcast",
        "osu_gatherv",
        "osu_scatterv",
        "osu_alltoallv",
        "osu_reduce_scatter",
    ] {
        validated(&osu, p, 3);
    }
}

#[test]
fn hello_runs_and_prints_the_job_size() {
    let Some(osu) = osu_dir("osu: hello_runs_and_prints_the_job_size") else {
        return;
    };
    let (dir, _) = ours(&osu);
    let out = common::run_ok(
        Command::new(common::ch4run())
            .args(["-n", "3"])
            .arg(dir.join("osu_hello")),
    );
    assert!(out.contains("This is a test with 3 processes"), "{out}");
}

/// The ABI both ways: the very same OSU binary on the other library.
#[test]
fn one_binary_runs_on_both_libraries() {
    let test = "osu: one_binary_runs_on_both_libraries";
    let Some(osu) = osu_dir(test) else {
        return;
    };
    let Some(mpich) = common::mpich5(test) else {
        return;
    };
    let (dir, lib) = ours(&osu);
    // MPICH's build of osu_latency, run on ch4's library.
    let theirs = dir.join("mpich-built");
    std::fs::create_dir_all(&theirs).unwrap();
    let objs = util_objects(
        &osu,
        &mut || Command::new(mpich.join("bin/mpicc_abi")),
        &theirs,
    );
    let exe = theirs.join("osu_latency");
    common::run_ok(
        Command::new(mpich.join("bin/mpicc_abi"))
            .args(flags(&osu))
            .arg("-o")
            .arg(&exe)
            .arg(osu.join("mpi/pt2pt/standard/osu_latency.c"))
            .args(&objs)
            .arg("-lm"),
    );
    let on_ch4 = common::run_ok(
        Command::new(common::ch4run())
            .args(["-n", "2"])
            .arg(&exe)
            .args(["-c", "-m", "1:4096", "-i", "20", "-x", "2"])
            .env("LD_LIBRARY_PATH", lib),
    );
    assert!(
        on_ch4.contains("Pass") && !on_ch4.contains("Fail"),
        "{on_ch4}"
    );
    // Our build, run on MPICH's library under its own launcher.
    let on_mpich = common::run_ok(
        Command::new(mpich.join("bin/mpiexec"))
            .args(["-n", "2"])
            .arg(dir.join("osu_latency"))
            .args(["-c", "-m", "1:4096", "-i", "20", "-x", "2"])
            .env("LD_LIBRARY_PATH", mpich.join("lib")),
    );
    assert!(
        on_mpich.contains("Pass") && !on_mpich.contains("Fail"),
        "{on_mpich}"
    );
}

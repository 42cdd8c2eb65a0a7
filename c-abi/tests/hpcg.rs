//! A real application on the library: HPCG 3.1 (the High Performance Conjugate Gradients
//! benchmark, `hpcg-3.1` of the third-party folder, unmodified), built with `c-abi/bin/mpicc`
//! and a C++ compiler, run as 2 processes under `ch4run` on a small grid. HPCG checks itself —
//! the symmetry of its operators, the convergence of its solver against the reference one, the
//! same residual on every repetition — and writes its verdict in its report:
//! `Final Summary::HPCG result is VALID`. A change that breaks a collective, a datatype or a
//! message's order anywhere on its path makes that line say INVALID, or the run fail.
//! Without the HPCG sources, or without a C++ compiler, the test is skipped and says so.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

const TEST: &str = "hpcg: a verified run at 2 ranks";

/// The C++ compiler: `CXX`, else `g++`; `None` when it does not run.
fn cxx() -> Option<String> {
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "g++".into());
    let runs = Command::new(&cxx)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    runs.then_some(cxx)
}

/// `xhpcg` built from `src` with our wrapper into `dir`, as the third-party folder's README
/// says (one compiler line, OpenMP off).
fn build(src: &Path, cxx: &str, dir: &Path) -> PathBuf {
    let lib = common::built();
    std::fs::create_dir_all(dir).unwrap();
    let exe = dir.join("xhpcg");
    let sources: Vec<PathBuf> = std::fs::read_dir(src)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "cpp"))
        .collect();
    assert!(!sources.is_empty(), "no .cpp files in {}", src.display());
    common::run_ok(
        common::mpicc(&lib)
            .env("CC", cxx)
            .args(["-O2", "-DHPCG_NO_OPENMP"])
            .arg(format!("-I{}", src.display()))
            .arg("-o")
            .arg(&exe)
            .args(&sources),
    );
    exe
}

#[test]
fn hpcg_gives_a_valid_result_at_two_ranks() {
    let Some(hpcg) = common::third_party("hpcg-3.1", TEST) else {
        return;
    };
    let Some(cxx) = cxx() else {
        common::skipped(TEST, "no C++ compiler runs (set CXX, or install g++)");
        return;
    };
    let dir = common::bin_dir().join("mpi-abi-test/hpcg");
    let exe = build(&hpcg.join("src"), &cxx, &dir);
    // HPCG writes its reports into the working directory: a fresh one per run.
    let run = dir.join(format!("run-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&run);
    std::fs::create_dir_all(&run).unwrap();
    common::run_ok(
        Command::new(common::ch4run())
            .args(["-n", "2"])
            .arg(&exe)
            // 16^3 points a rank: the whole run, its checks included, takes about a second.
            .args(["--nx=16", "--ny=16", "--nz=16", "--rt=1"])
            .current_dir(&run)
            .stdin(std::process::Stdio::null()),
    );
    let report = std::fs::read_dir(&run)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("HPCG-Benchmark"))
        })
        .unwrap_or_else(|| panic!("HPCG wrote no report in {}", run.display()));
    let text = std::fs::read_to_string(&report).unwrap();
    let verdict = text
        .lines()
        .find(|l| l.starts_with("Final Summary::HPCG result is"))
        .unwrap_or_else(|| panic!("no verdict in {}:\n{text}", report.display()));
    assert!(
        verdict.contains("result is VALID"),
        "{verdict}\n(report: {})",
        report.display()
    );
    for check in [
        "Spectral Convergence Tests::Result=PASSED",
        "Departure from Symmetry |x'Ay-y'Ax|/(2*||x||*||A||*||y||)/epsilon::Result=PASSED",
        "Iteration Count Information::Result=PASSED",
        "Reproducibility Information::Result=PASSED",
    ] {
        assert!(
            text.contains(check),
            "{check} missing from {}",
            report.display()
        );
    }
    let _ = std::fs::remove_dir_all(&run);
}

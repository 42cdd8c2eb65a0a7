//! What the C tests share: building the library and the launcher, compiling C programs with
//! the wrapper, finding the third-party programs and MPICH 5's ABI build when they are there.

// Each test crate uses part of this module.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Once;

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("c-abi sits in the workspace")
        .to_path_buf()
}

/// Directory of this profile's binaries (`target/<profile>`), found from the test executable.
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>")
        .to_path_buf()
}

/// The netmod the library is built over for this run: `ABI_TEST_NETMOD` (`tcp`, the default
/// build's, or `ofi` or `ucx`, or several separated by commas: the network is then chosen when
/// the job starts, by `CH4_NETMOD`).
pub fn abi_netmod() -> String {
    std::env::var("ABI_TEST_NETMOD").unwrap_or_else(|_| "tcp".into())
}

/// Builds `ch4run` and `libmpi_abi.so` once (in this test's profile), and returns the directory
/// that holds `libmpi_abi.so.1` for programs to load. With `ABI_TEST_NETMOD=ofi` or `ucx` the
/// library is built over that netmod, in a target directory of its own
/// (`target/abi-<netmod>`), so the default build's library is left alone.
pub fn built() -> PathBuf {
    static BUILD: Once = Once::new();
    build_library(&BUILD, !cfg!(debug_assertions))
}

/// [`built`] with the library optimized whatever this test's profile (`cargo build
/// --release`): for the suites of many programs (MPICH's folders), which the unoptimized
/// library runs several times slower. The launcher stays this profile's.
/// Over another netmod (`ABI_TEST_NETMOD`) the library stays in this test's profile: an
/// optimized build of its own target directory would cost the suite minutes of compiling.
#[allow(dead_code)] // each test crate uses part of it
pub fn built_optimized() -> PathBuf {
    if abi_netmod() != "tcp" {
        return built();
    }
    static BUILD: Once = Once::new();
    build_library(&BUILD, true)
}

fn build_library(once: &Once, optimized: bool) -> PathBuf {
    let netmod = abi_netmod();
    let default = netmod == "tcp";
    let flavour = match (default, optimized != cfg!(debug_assertions)) {
        (true, true) => String::new(),
        (true, false) => "-release".to_string(),
        (false, true) => format!("-{}", netmod.replace(',', "-")),
        (false, false) => format!("-{}-release", netmod.replace(',', "-")),
    };
    let lib_dir = bin_dir().join(format!("mpi-abi-test/lib{flavour}"));
    once.call_once(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let profile = if optimized { "release" } else { "debug" };
        // No comma in the paths: they go into the linker's `-Wl,` options.
        let target_dir = root().join(format!("target/abi-{}", netmod.replace(',', "-")));
        let features = ["--no-default-features", "--features", netmod.as_str()];
        // Two builds: `--bin` would narrow the other package's targets too.
        for (target, own, release) in [
            (
                &["-p", "pmi", "--bin", "ch4run"][..],
                false,
                !cfg!(debug_assertions),
            ),
            (&["-p", "ch4-mpi-abi", "--lib"], !default, optimized),
        ] {
            let mut cmd = Command::new(&cargo);
            cmd.args(["build", "-q"]).args(target);
            if own {
                cmd.args(features).arg("--target-dir").arg(&target_dir);
            }
            if release {
                cmd.arg("--release");
            }
            let st = cmd.status().expect("run cargo build");
            assert!(st.success(), "building {target:?} failed");
        }
        let lib = if default {
            bin_dir()
                .parent()
                .expect("target/<profile>")
                .join(profile)
                .join("libmpi_abi.so")
        } else {
            target_dir.join(profile).join("libmpi_abi.so")
        };
        std::fs::create_dir_all(&lib_dir).unwrap();
        for name in ["libmpi_abi.so.1", "libmpi_abi.so"] {
            let link = lib_dir.join(name);
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(&lib, &link).unwrap();
        }
    });
    lib_dir
}

/// The launcher.
pub fn ch4run() -> PathBuf {
    bin_dir().join("ch4run")
}

/// Runs `cmd`, failing the test with its output if it fails; returns its standard output.
pub fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Builds `c-abi/tests/c/<name>.c` with our mpicc (warnings are errors, pthreads linked) and
/// runs it under ch4run as `ranks` processes with `args`; fails the test unless the program
/// printed ` No Errors` (the C checks' convention, as MPICH's tests).
pub fn run_c_checks(name: &str, ranks: u32, args: &[&str]) {
    run_c_checks_with(name, ranks, args, &[]);
}

/// [`run_c_checks`] with `env` set for the ranks.
pub fn run_c_checks_with(name: &str, ranks: u32, args: &[&str], env: &[(&str, &str)]) {
    let lib = built();
    let dir = bin_dir().join("mpi-abi-test");
    std::fs::create_dir_all(&dir).unwrap();
    // A name of its own per call: tests of one file run side by side, and one must not run
    // the program while another writes it.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let exe = dir.join(if call == 0 {
        name.to_string()
    } else {
        format!("{name}.{call}")
    });
    run_ok(
        mpicc(&lib)
            .args(["-Wall", "-Werror", "-O1", "-o"])
            .arg(&exe)
            .arg(root().join(format!("c-abi/tests/c/{name}.c")))
            .arg("-lpthread"),
    );
    let out = run_ok(
        Command::new(ch4run())
            .args(["-n", &ranks.to_string()])
            .arg(&exe)
            .args(args)
            .envs(env.iter().copied())
            .stdin(std::process::Stdio::null()),
    );
    assert!(out.lines().any(|l| l == " No Errors"), "{out}");
}

/// `c-abi/bin/mpicc`, linking the library in `lib_dir`.
pub fn mpicc(lib_dir: &Path) -> Command {
    let mut cmd = Command::new(root().join("c-abi/bin/mpicc"));
    cmd.env("CH4_ABI_LIBDIR", lib_dir);
    cmd
}

#[allow(unused_imports)] // each test crate uses part of it
pub use testkit::skip::{skipped, third_party, THIRD_PARTY_VAR};

/// MPICH 5's ABI build (`bin/mpicc_abi`, `lib/libmpi_abi.so.1`, `include/mpi_abi.h`, Hydra's
/// `bin/mpiexec`), where `scripts/test.sh` installs it; `None` (with a note) when it is not
/// there.
pub fn mpich5(test: &str) -> Option<PathBuf> {
    let venv = root().join("target/mpich5-venv");
    if venv.join("bin/mpicc_abi").exists() && venv.join("include/mpi_abi.h").exists() {
        Some(venv)
    } else {
        skipped(
            test,
            "MPICH 5 is not installed in target/mpich5-venv (scripts/test.sh installs it: \
             pip install mpich==5.0.2)",
        );
        None
    }
}

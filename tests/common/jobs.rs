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
/// for this package's tests, nor examples for an integration test); returns [`bin_dir`].
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

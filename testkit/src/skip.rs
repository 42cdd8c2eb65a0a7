//! Tests that need something outside the repository — the third-party programs (the real OSU
//! benchmarks, MPICH's test programs, HPCG), a system launcher, MPICH 5's ABI build — skip
//! when it is absent, and say so: on standard error, and in `target/skipped-tests.txt`, which
//! `scripts/test.sh` prints once at its end. A missing piece is never a silent pass.
//!
//! The third-party programs are not part of the repository (their licences are their own):
//! they are looked for in `$THIRD_PARTY_DIR`, by default `../shared/third_party` beside the
//! workspace, where CI puts them. A clone of the project alone has none.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The variable that names the folder of third-party programs.
pub const THIRD_PARTY_VAR: &str = "THIRD_PARTY_DIR";

/// The workspace's root (this crate sits in it).
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("testkit sits in the workspace")
        .to_path_buf()
}

/// Where the third-party programs are looked for: `$THIRD_PARTY_DIR`, else
/// `../shared/third_party` beside the workspace.
pub fn third_party_dir() -> PathBuf {
    match std::env::var_os(THIRD_PARTY_VAR) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => workspace_root().join("../shared/third_party"),
    }
}

/// The third-party program folder `name` (e.g. `osu-micro-benchmarks-7.2`), or `None` when it
/// is absent: then `test` is [`skipped`] with a note that names the folder, where it was looked
/// for and the variable that moves the search.
pub fn third_party(name: &str, test: &str) -> Option<PathBuf> {
    let dir = third_party_dir().join(name);
    if dir.is_dir() {
        return Some(dir);
    }
    skipped(
        test,
        &format!(
            "{} not found (set {THIRD_PARTY_VAR} to the folder that holds {name}; \
             default ../shared/third_party beside the project)",
            dir.display()
        ),
    );
    None
}

/// The file skips are noted in: `target/skipped-tests.txt`, found from the running test
/// executable (`target/<profile>/deps/<test>`).
pub fn skip_record() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    // deps/ → <profile>/ → target/
    Some(exe.parent()?.parent()?.parent()?.join("skipped-tests.txt"))
}

/// Notes that `test` was skipped and why, on standard error and in [`skip_record`].
pub fn skipped(test: &str, why: &str) {
    let line = format!("skipped: {test}: {why}");
    eprintln!("{line}");
    if let Some(record) = skip_record() {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(record)
        {
            // One write of the whole line: tests running in parallel append to the same file,
            // and O_APPEND keeps a single write whole, where `writeln!` may make several.
            let _ = f.write_all(format!("{line}\n").as_bytes());
        }
    }
}

/// Whether `program` is on the `PATH`; when it is not, `test` is [`skipped`] with `why`
/// (what to install).
pub fn on_path(program: &str, test: &str, why: &str) -> bool {
    let found = std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()));
    if !found {
        skipped(test, &format!("{program} is not on the PATH ({why})"));
    }
    found
}

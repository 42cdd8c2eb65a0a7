//! A clone of the project alone has no third-party programs (they live beside it, in
//! `../shared/third_party`, or wherever `$THIRD_PARTY_DIR` says): the tests that build them
//! must then skip, and say which folder they looked for and where, rather than fail or pass
//! in silence. This runs the lookup the OSU, MPICH and HPCG tests use in a child process whose
//! `THIRD_PARTY_DIR` names a folder that does not exist.

mod common;

use std::process::Command;

/// The folders the C tests build programs from.
const FOLDERS: [&str; 3] = ["osu-micro-benchmarks-7.2", "mpich-test-pt2pt", "hpcg-3.1"];

/// What the child runs: every folder looked up as the suites do. Ignored in a normal run (the
/// test below runs it with a folder that is not there); with the folders present it checks
/// that they are found.
#[test]
#[ignore = "run by a_missing_folder_is_skipped_and_named, in a child process"]
fn looks_up_the_third_party_folders() {
    for name in FOLDERS {
        if let Some(dir) = common::third_party(name, &format!("third_party: {name}")) {
            assert!(dir.is_dir(), "{}", dir.display());
        }
    }
}

#[test]
fn a_missing_folder_is_skipped_and_named() {
    let missing = std::env::temp_dir().join(format!("ch4-no-third-party-{}", std::process::id()));
    assert!(!missing.exists());
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "looks_up_the_third_party_folders"])
        .arg("--nocapture")
        .env(common::THIRD_PARTY_VAR, &missing)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the skip failed the test:\n{stderr}");

    // The record test.sh prints at its end: take out this test's lines (they are not a skip of
    // the suite's), after checking them.
    let record = testkit::skip::skip_record().expect("the record's place");
    let text = std::fs::read_to_string(&record).unwrap_or_default();
    let (ours, others): (Vec<&str>, Vec<&str>) = text
        .lines()
        .partition(|l| l.contains(&*missing.to_string_lossy()));
    let mut rest = others.join("\n");
    if !rest.is_empty() {
        rest.push('\n');
    }
    std::fs::write(&record, rest).unwrap();

    for name in FOLDERS {
        let said = stderr
            .lines()
            .find(|l| l.starts_with("skipped: ") && l.contains(name))
            .unwrap_or_else(|| panic!("no skip note for {name}:\n{stderr}"));
        assert!(
            said.contains(&*missing.join(name).to_string_lossy())
                && said.contains(common::THIRD_PARTY_VAR),
            "the note names the folder, where it was looked for and the variable: {said}"
        );
        assert!(
            ours.iter().any(|l| l.contains(name)),
            "{name} is not in {}: {ours:?}",
            record.display()
        );
    }
}

//! Every command of the README is run, so that what a newcomer copies works:
//!
//! - the building, launching and C-library commands by this test, for real, in the README's
//!   order, each checked for what it must print;
//! - each netmod's suite by `scripts/test.sh`, which holds the same command;
//! - `./scripts/test.sh` itself by CI (`.ci/run`);
//! - the comparison scripts, which take minutes to hours and install the peers, by a dry run
//!   (`--dry-run`) that checks every argument the README gives them.
//!
//! A command added to the README that none of these covers fails here, and so does one listed
//! below that the README no longer has. (The README's Rust code runs as doctests of the facade.)

use std::path::PathBuf;
use std::process::Command;

/// The commands this test runs, in the README's order, with a line each must print (`""`:
/// only success), and the program that must be on the `PATH` for it (else it is skipped).
const RUN_HERE: [(&str, &str, Option<&str>); 9] = [
    (
        "cargo run --release --example osu_latency",
        "# OSU MPI Latency Test",
        None,
    ),
    (
        "cargo build --release --examples -p ch4 && cargo build --release -p pmi",
        "",
        None,
    ),
    (
        "target/release/ch4run -n 4 target/release/examples/ring",
        "rank 0/4: token 6 ",
        None,
    ),
    (
        "mpiexec.hydra -n 4 target/release/examples/ring",
        "rank 0/4: token 6 ",
        Some("mpiexec.hydra"),
    ),
    (
        "CH4_NP=6 cargo run --release --example ring",
        "rank 0/6: token 15 ",
        None,
    ),
    (
        "CH4_NODE_SIZE=1 target/release/ch4run -n 4 target/release/examples/ring",
        "rank 0/4: token 6 ",
        None,
    ),
    (
        "c-abi/bin/mpicc -O2 -o target/hello c-abi/examples/hello.c",
        "",
        None,
    ),
    (
        "target/release/ch4run -n 4 target/hello",
        "hello from rank 0 of 4: token 6",
        None,
    ),
    (
        "cargo run --release --example osu_mt_mr",
        "# OSU-style multithreaded message rate",
        None,
    ),
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The commands of the README's `sh` blocks: comment lines and blank ones left out,
/// continuation lines joined.
fn readme_commands(readme: &str) -> Vec<String> {
    let mut commands = Vec::new();
    let mut in_sh = false;
    let mut pending = String::new();
    for line in readme.lines() {
        let trimmed = line.trim();
        if !in_sh {
            in_sh = trimmed == "```sh";
            continue;
        }
        if trimmed == "```" {
            in_sh = false;
            continue;
        }
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(part) => {
                pending.push_str(part.trim_end());
                pending.push(' ');
            }
            None => {
                pending.push_str(trimmed);
                commands.push(std::mem::take(&mut pending));
            }
        }
    }
    commands
}

/// Runs `command` with bash in the workspace's root; its exit status and output.
fn bash(command: &str) -> (bool, String) {
    let out = Command::new("timeout")
        .args(["1200", "bash", "-c", command])
        .current_dir(root())
        // The commands are a user's: not a rank of some job, whatever this test runs under.
        .env_remove("PMI_FD")
        .env_remove("PMI_PORT")
        .env_remove("CH4_NP")
        .output()
        .unwrap_or_else(|e| panic!("{command}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// The script a command runs, when it is one of `scripts/`.
fn script_of(command: &str) -> Option<&str> {
    command
        .split_whitespace()
        .next()
        .and_then(|w| w.strip_prefix("./scripts/"))
}

#[test]
fn the_readme_parser_finds_commands_and_joins_continued_lines() {
    let text = "a\n```sh\n# comment\n\nx --a \\\n   --b\ny\n```\n```rust\nz\n```\n";
    assert_eq!(readme_commands(text), ["x --a --b", "y"]);
}

#[test]
fn every_readme_command_is_run_by_a_test_or_a_script() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let test_script = std::fs::read_to_string(root().join("scripts/test.sh")).unwrap();
    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    let commands = readme_commands(&readme);
    assert!(commands.len() >= RUN_HERE.len(), "{commands:?}");

    let mut here = Vec::new();
    for c in &commands {
        if c == "./scripts/test.sh" {
            assert!(
                ci.lines().any(|l| l.trim() == "exec ./scripts/test.sh"),
                ".ci/run must run the README's test command"
            );
        } else if let Some(script) = script_of(c) {
            // A comparison script: every argument the README gives it must be accepted.
            let args = c.split_once(' ').map_or("", |(_, rest)| rest);
            let (ok, out) = bash(&format!("./scripts/{script} --dry-run {args}"));
            assert!(ok, "{c} (dry run) was refused:\n{out}");
        } else if test_script.lines().any(|l| l.trim() == c) {
            // Run by scripts/test.sh.
        } else {
            here.push(c.as_str());
        }
    }
    let listed: Vec<&str> = RUN_HERE.iter().map(|(c, _, _)| *c).collect();
    assert_eq!(
        here, listed,
        "the README's commands that neither a script nor CI runs must be the ones this test \
         runs, in the same order: update RUN_HERE"
    );

    for (command, prints, needs) in RUN_HERE {
        if let Some(program) = needs {
            if !testkit::skip::on_path(program, &format!("readme: {command}"), "Debian's mpich") {
                continue;
            }
        }
        let (ok, out) = bash(command);
        assert!(ok, "`{command}` failed:\n{out}");
        assert!(
            out.contains(prints),
            "`{command}` did not print {prints:?}:\n{out}"
        );
    }
}

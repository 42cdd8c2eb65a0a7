//! Replays every kept input (`fuzz/regressions/<target>/`: the inputs that once found a bug,
//! and a few seeds) through its target's body, in the normal test run: a bug the fuzzer found
//! stays found without the fuzzer. Fast: a few hundred small inputs.

use std::path::{Path, PathBuf};

fn regressions() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../regressions")
}

#[test]
fn every_kept_input_replays_clean() {
    let mut replayed = 0;
    for (name, body) in fuzz_bodies::TARGETS {
        let dir = regressions().join(name);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut files: Vec<PathBuf> = entries.filter_map(|e| Some(e.ok()?.path())).collect();
        files.sort();
        for f in files {
            let data = std::fs::read(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            eprintln!("{name}: {}", f.display());
            body(&data);
            replayed += 1;
        }
    }
    assert!(replayed > 0, "no inputs under {}", regressions().display());
}

#[test]
fn every_target_has_kept_inputs() {
    for (name, _) in fuzz_bodies::TARGETS {
        let dir = regressions().join(name);
        let n = std::fs::read_dir(&dir).map(|d| d.count()).unwrap_or(0);
        assert!(
            n > 0,
            "no seeds or regressions for {name} in {}",
            dir.display()
        );
    }
}

/// Every target in `fuzz/fuzz_targets/` is one of the bodies' and the other way round, so a
/// body cannot go unfuzzed nor a target unreplayed.
#[test]
fn targets_and_bodies_match() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz_targets");
    let mut targets: Vec<String> = std::fs::read_dir(&dir)
        .expect("fuzz/fuzz_targets")
        .filter_map(|e| {
            let p = e.ok()?.path();
            Some(p.file_stem()?.to_str()?.to_owned())
        })
        .collect();
    targets.sort();
    let mut bodies: Vec<String> = fuzz_bodies::TARGETS
        .iter()
        .map(|(n, _)| n.to_string())
        .collect();
    bodies.sort();
    assert_eq!(targets, bodies);
}

/// Writes the seeds (`cargo test -p fuzz-bodies --test regressions -- --ignored`): the honest
/// traffic each target starts from. Rerun after a change to a body's input format.
#[test]
#[ignore]
fn write_seeds() {
    for (name, seeds) in fuzz_bodies::seeds::all() {
        let dir = regressions().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        for (i, s) in seeds.iter().enumerate() {
            std::fs::write(dir.join(format!("seed-{i}")), s).unwrap();
        }
    }
}

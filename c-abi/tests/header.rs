//! Our `mpi.h` against the standard ABI as MPICH 5 ships it (`mpi_abi.h`): every constant our
//! header defines must exist there with the same value, since a program compiled against one
//! runs on the other's library. Both headers are compiled into a program that prints each
//! constant, and the outputs compared. Without MPICH 5 installed, only our header is checked
//! (it compiles warning-free as C and as C++).

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

/// The constants a header defines: `#define MPI_X <value>` (not function-like) and enum
/// members `MPI_X = <value>`.
fn constants(header: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in header.lines() {
        let t = line.trim_start();
        if let Some(rest) = t.strip_prefix("#define ") {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let after = &rest[name.len()..];
            if name.starts_with("MPI_") && after.starts_with([' ', '\t']) {
                names.insert(name);
            }
        } else if t.starts_with("MPI_") && t.contains('=') {
            let name: String = t
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            names.insert(name);
        }
    }
    // Version macros and the include guard are no ABI constants.
    names.retain(|n| !n.ends_with("_H") && !n.starts_with("MPI_ABI_") || n == "MPI_ABI_VERSION");
    names
}

/// Compiles and runs a program that prints `name value` for each name, with `include`.
fn values(dir: &Path, tag: &str, include: &str, flags: &[String], names: &[&String]) -> String {
    let mut src = format!(
        "#include <stdio.h>\n#include <stdint.h>\n#include <{include}>\nint main(void) {{\n"
    );
    for n in names {
        src += &format!("    printf(\"%s %lld\\n\", \"{n}\", (long long)(intptr_t)({n}));\n");
    }
    src += "    return 0;\n}\n";
    let c = dir.join(format!("consts_{tag}.c"));
    let exe = dir.join(format!("consts_{tag}"));
    std::fs::write(&c, src).unwrap();
    common::run_ok(
        Command::new("cc")
            .args(flags)
            .args(["-Wall", "-Werror", "-o"])
            .arg(&exe)
            .arg(&c),
    );
    common::run_ok(&mut Command::new(&exe))
}

#[test]
fn every_constant_of_our_header_has_mpich_5s_value() {
    let ours_path = common::root().join("c-abi/include/mpi.h");
    let ours = std::fs::read_to_string(&ours_path).unwrap();
    let our_names = constants(&ours);
    assert!(our_names.len() > 250, "{} constants found", our_names.len());
    let dir = common::bin_dir().join("mpi-abi-test/header");
    std::fs::create_dir_all(&dir).unwrap();
    let inc = format!("-I{}", common::root().join("c-abi/include").display());
    let names: Vec<&String> = our_names.iter().collect();
    let mine = values(&dir, "ours", "mpi.h", std::slice::from_ref(&inc), &names);
    // C++ too: the header is what a C++ program includes as well.
    let cpp = dir.join("cpp.cc");
    std::fs::write(
        &cpp,
        "#include <mpi.h>\nint main() { return MPI_SUCCESS; }\n",
    )
    .unwrap();
    if Command::new("c++").arg("--version").output().is_ok() {
        common::run_ok(
            Command::new("c++")
                .args([&inc, "-Wall", "-Werror", "-o"])
                .arg(dir.join("cpp"))
                .arg(&cpp),
        );
    }
    let Some(mpich) = common::mpich5("header: our constants against MPICH 5's mpi_abi.h") else {
        return;
    };
    let theirs = std::fs::read_to_string(mpich.join("include/mpi_abi.h")).unwrap();
    let their_names = constants(&theirs);
    let missing: Vec<&&String> = names
        .iter()
        .filter(|n| !their_names.contains(**n))
        .collect();
    assert!(
        missing.is_empty(),
        "our header defines constants MPICH 5's mpi_abi.h does not: {missing:?}"
    );
    let theirs_out = values(
        &dir,
        "mpich",
        "mpi_abi.h",
        &[format!("-I{}", mpich.join("include").display())],
        &names,
    );
    let differ: Vec<(&str, &str)> = mine
        .lines()
        .zip(theirs_out.lines())
        .filter(|(a, b)| a != b)
        .collect();
    assert!(
        differ.is_empty(),
        "values differ (ours, MPICH 5's): {differ:?}"
    );
    assert_eq!(mine.lines().count(), names.len());
    eprintln!(
        "{} constants of our header compared with MPICH 5's: all equal",
        names.len()
    );
}

//! The library against the MPI a C program expects: every name of
//! `mpi-functions.txt` (the third-party folder's list of the functions of MPI 4.1 outside I/O,
//! one-sided communication, sessions, the tools interface, dynamic processes, Fortran interop,
//! handle conversion and deprecated calls) must be exported by `libmpi_abi.so.1` and declared
//! by our `mpi.h`, except those [`NOT_YET`] names with the reason.

mod common;

use std::collections::BTreeSet;
use std::process::Command;

/// Functions of the list the library does not have yet, with why.
const NOT_YET: &[(&str, &str)] = &[];

#[test]
fn the_library_exports_every_function_of_the_list() {
    let test = "functions: the_library_exports_every_function_of_the_list";
    let dir = match std::env::var_os(common::THIRD_PARTY_VAR) {
        Some(d) if !d.is_empty() => std::path::PathBuf::from(d),
        _ => common::root().join("../shared/third_party"),
    };
    let list = dir.join("mpi-functions.txt");
    if !list.is_file() {
        common::skipped(test, &format!("{} not found", list.display()));
        return;
    }
    let wanted: BTreeSet<String> = std::fs::read_to_string(&list)
        .unwrap()
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("MPI_"))
        .map(str::to_string)
        .collect();
    assert!(wanted.len() > 300, "the list has {} names", wanted.len());
    let lib = common::built().join("libmpi_abi.so.1");
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&lib)
        .output()
        .expect("nm (binutils)");
    assert!(out.status.success(), "nm {}", lib.display());
    let exported: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .map(str::to_string)
        .collect();
    let header = std::fs::read_to_string(common::root().join("c-abi/include/mpi.h")).unwrap();
    let declared =
        |f: &str| header.contains(&format!(" {f}(")) || header.contains(&format!("*{f}("));
    let excused: BTreeSet<&str> = NOT_YET.iter().map(|(f, _)| *f).collect();
    let missing: Vec<&String> = wanted
        .iter()
        .filter(|f| !exported.contains(*f) && !excused.contains(f.as_str()))
        .collect();
    let undeclared: Vec<&String> = wanted
        .iter()
        .filter(|f| exported.contains(*f) && !declared(f))
        .collect();
    assert!(
        missing.is_empty(),
        "{} functions of the list are not exported: {missing:?}",
        missing.len()
    );
    assert!(
        undeclared.is_empty(),
        "{} exported functions are not declared in mpi.h: {undeclared:?}",
        undeclared.len()
    );
    let stale: Vec<&str> = excused
        .iter()
        .filter(|f| exported.contains(**f))
        .copied()
        .collect();
    assert!(
        stale.is_empty(),
        "NOT_YET names exported functions: {stale:?}"
    );
}

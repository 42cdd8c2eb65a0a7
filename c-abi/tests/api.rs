//! `tests/c/api.c` — groups, communicator comparison and creation, Cartesian topologies,
//! struct and resized datatypes, thread levels, error handlers and their strings, the
//! environment — built with our mpicc and run as 4 processes under ch4run.

mod common;

use std::process::{Command, Stdio};

#[test]
fn the_c_api_checks_pass_on_four_processes() {
    let lib = common::built();
    let dir = common::bin_dir().join("mpi-abi-test");
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("api");
    common::run_ok(
        common::mpicc(&lib)
            .args(["-Wall", "-Werror", "-O1", "-o"])
            .arg(&exe)
            .arg(common::root().join("c-abi/tests/c/api.c"))
            .arg("-lpthread"),
    );
    let out = common::run_ok(
        Command::new(common::ch4run())
            .args(["-n", "4"])
            .arg(&exe)
            .stdin(Stdio::null()),
    );
    assert!(out.lines().any(|l| l == " No Errors"), "{out}");
}

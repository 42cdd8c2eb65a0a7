//! `tests/c/threads.c` — `MPI_THREAD_MULTIPLE` beyond MPICH's thread tests: the levels
//! reported, info objects, the `ch4_vci` hint of `MPI_Comm_dup_with_info`, and threads that
//! stream ordered messages on communicators of their own — built with our mpicc and run as 2
//! processes under ch4run.

mod common;

use std::process::{Command, Stdio};

#[test]
fn threads_info_and_placed_communicators_pass_on_two_processes() {
    let lib = common::built();
    let dir = common::bin_dir().join("mpi-abi-test");
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("threads");
    common::run_ok(
        common::mpicc(&lib)
            .args(["-Wall", "-Werror", "-O1", "-o"])
            .arg(&exe)
            .arg(common::root().join("c-abi/tests/c/threads.c"))
            .arg("-lpthread"),
    );
    let out = common::run_ok(
        Command::new(common::ch4run())
            .args(["-n", "2"])
            .arg(&exe)
            .stdin(Stdio::null()),
    );
    assert!(out.lines().any(|l| l == " No Errors"), "{out}");
}

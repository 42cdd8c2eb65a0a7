//! `tests/c/info.c` — info objects: every `MPI_Info_` function and its error classes,
//! `MPI_INFO_ENV` and `MPI_Info_create_env`, the calls before `MPI_Init` and after
//! `MPI_Finalize`, and four threads making and freeing infos at once — built with our mpicc
//! and run as 2 processes under ch4run, with two arguments for `MPI_INFO_ENV`'s `argv`.

mod common;

use std::process::{Command, Stdio};

#[test]
fn the_info_checks_pass_on_two_processes() {
    let lib = common::built();
    let dir = common::bin_dir().join("mpi-abi-test");
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("info");
    common::run_ok(
        common::mpicc(&lib)
            .args(["-Wall", "-Werror", "-O1", "-o"])
            .arg(&exe)
            .arg(common::root().join("c-abi/tests/c/info.c"))
            .arg("-lpthread"),
    );
    let out = common::run_ok(
        Command::new(common::ch4run())
            .args(["-n", "2"])
            .arg(&exe)
            .args(["first", "second"])
            .stdin(Stdio::null()),
    );
    assert!(out.lines().any(|l| l == " No Errors"), "{out}");
}

//! `tests/c/info.c` — info objects: every `MPI_Info_` function and its error classes,
//! `MPI_INFO_ENV` and `MPI_Info_create_env`, the calls before `MPI_Init` and after
//! `MPI_Finalize`, and four threads making and freeing infos at once — built with our mpicc
//! and run as 2 processes under ch4run, with two arguments for `MPI_INFO_ENV`'s `argv`.

mod common;

#[test]
fn the_info_checks_pass_on_two_processes() {
    common::run_c_checks("info", 2, &["first", "second"]);
}

//! `tests/c/threads.c` — `MPI_THREAD_MULTIPLE` beyond MPICH's thread tests: the levels
//! reported, info objects, the `ch4_vci` hint of `MPI_Comm_dup_with_info`, and threads that
//! stream ordered messages on communicators of their own — built with our mpicc and run as 2
//! processes under ch4run.

mod common;

#[test]
fn threads_info_and_placed_communicators_pass_on_two_processes() {
    common::run_c_checks("threads", 2, &[]);
}

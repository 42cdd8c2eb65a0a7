//! `tests/c/attributes.c` — the program's error handlers, error classes and codes, attributes
//! of communicators and datatypes, names, the status accessors and address arithmetic: what
//! MPICH's `attr` and `errhan` folders leave out — built with our mpicc and run as 4
//! processes under ch4run, at `MPI_THREAD_SINGLE` and at `MPI_THREAD_MULTIPLE` (where the
//! callbacks run with no gate to let go).

mod common;

#[test]
fn the_caching_and_error_handling_checks_pass_on_four_processes() {
    common::run_c_checks("attributes", 4, &[]);
}

#[test]
fn the_caching_and_error_handling_checks_pass_at_thread_multiple() {
    common::run_c_checks("attributes", 4, &["multiple"]);
}

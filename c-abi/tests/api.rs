//! `tests/c/api.c` — groups, communicator comparison and creation, Cartesian topologies,
//! struct and resized datatypes, thread levels, error handlers and their strings, the
//! environment — built with our mpicc and run as 4 processes under ch4run.

mod common;

#[test]
fn the_c_api_checks_pass_on_four_processes() {
    common::run_c_checks("api", 4, &[]);
}

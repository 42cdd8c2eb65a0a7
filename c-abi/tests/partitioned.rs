//! `tests/c/partitioned.c` — partitioned communication (MPI 4.1, chapter 4) — built with our
//! mpicc and run as 2 processes under ch4run, on one node (shared memory) and with every rank
//! its own node (over the network).

mod common;

#[test]
fn the_partitioned_checks_pass_on_one_node() {
    common::run_c_checks("partitioned", 2, &[]);
}

#[test]
fn the_partitioned_checks_pass_across_nodes() {
    common::run_c_checks_with("partitioned", 2, &[], &[("CH4_NODE_SIZE", "1")]);
}

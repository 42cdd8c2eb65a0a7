//! `tests/c/intercomm.c` — intercommunicators: from groups, comparisons, merge's order, the
//! remote queries' errors, the collectives MPICH's tests do not run on intercommunicators,
//! point-to-point by `MPI_ANY_SOURCE` — built with our mpicc and run under ch4run, on one node,
//! over the network, and with several VCIs.

mod common;

#[test]
fn the_intercommunicator_checks_pass_on_five_processes() {
    common::run_c_checks("intercomm", 5, &[]);
}

#[test]
fn the_intercommunicator_checks_pass_over_the_network() {
    common::run_c_checks_with("intercomm", 4, &[], &[("CH4_NODE_SIZE", "1")]);
}

#[test]
fn the_intercommunicator_checks_pass_over_several_vcis() {
    common::run_c_checks_with("intercomm", 6, &[], &[("CH4_NUM_VCIS", "3")]);
}

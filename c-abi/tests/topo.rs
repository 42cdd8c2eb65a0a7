//! `tests/c/topo.c` — groups by ranges, `MPI_Comm_create_group` (from one thread and from two
//! at once), Cartesian sub-grids and maps, graphs and distributed graphs — built with our
//! mpicc and run as 4 processes under ch4run, on one node and with every rank its own.

mod common;

#[test]
fn the_group_and_topology_checks_pass_on_four_processes() {
    common::run_c_checks("topo", 4, &[]);
}

#[test]
fn the_group_and_topology_checks_pass_over_the_network() {
    common::run_c_checks_with("topo", 4, &[], &[("CH4_NODE_SIZE", "1")]);
}

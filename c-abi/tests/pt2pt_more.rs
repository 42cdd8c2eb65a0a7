//! `tests/c/pt2pt_more.c` — the big-count (`_c`) forms of point-to-point, persistent buffered
//! sends, MPI 4.1's buffer functions and generalized requests — built with our mpicc and run
//! as 2 processes under ch4run, on one node (shared memory) and with every rank its own node
//! (over the network).

mod common;

#[test]
fn the_big_count_buffer_and_generalized_request_checks_pass_on_one_node() {
    common::run_c_checks("pt2pt_more", 2, &[]);
}

#[test]
fn the_big_count_buffer_and_generalized_request_checks_pass_across_nodes() {
    common::run_c_checks_with("pt2pt_more", 2, &[], &[("CH4_NODE_SIZE", "1")]);
}

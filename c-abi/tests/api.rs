//! `tests/c/api.c` — groups, communicator comparison and creation, Cartesian topologies,
//! struct and resized datatypes, thread levels, error handlers and their strings, the
//! environment — built with our mpicc and run as 4 processes under ch4run (on one node, on two,
//! every rank its own).

mod common;

#[test]
fn the_c_api_checks_pass_on_four_processes() {
    common::run_c_checks("api", 4, &[]);
}

/// The same on two nodes of two ranks each: `MPI_Comm_split_type` by node gives each pair its
/// own communicator (the checks read `CH4_NODE_SIZE` for what to expect).
#[test]
fn the_c_api_checks_pass_on_two_nodes() {
    common::run_c_checks_with("api", 4, &[], &[("CH4_NODE_SIZE", "2")]);
}

/// A library built with several netmods (`ABI_TEST_NETMOD=tcp,ofi`) takes its network from
/// `CH4_NETMOD` when the job starts, as a Rust program does: over each, every rank its own
/// node, `MPI_TAG_UB` is that network's and the checks pass. Skipped for a library of one
/// netmod (the other runs of this file cover it).
#[test]
fn a_c_program_runs_over_the_netmod_chosen_at_start() {
    let netmods = common::abi_netmod();
    if !netmods.contains(',') {
        return;
    }
    for name in netmods.split(',') {
        let tag_ub = if name == "tcp" {
            (1 << 30) - 1
        } else {
            (1 << 24) - 1
        }
        .to_string();
        common::run_c_checks_with(
            "api",
            4,
            &[],
            &[
                ("CH4_NETMOD", name),
                ("CH4_NODE_SIZE", "1"),
                ("EXP_TAG_UB", &tag_ub),
            ],
        );
    }
}

/// With `CH4_ASYNC_PROGRESS=1` the rank runs at the multiple level inside (its progress thread
/// shares the devices) whatever level the program asked for, which is still the one it is
/// told it has: the same checks pass, on shared memory and over the network.
#[test]
fn the_c_api_checks_pass_with_a_progress_thread() {
    common::run_c_checks_with("api", 4, &[], &[("CH4_ASYNC_PROGRESS", "1")]);
    common::run_c_checks_with(
        "api",
        4,
        &[],
        &[("CH4_ASYNC_PROGRESS", "1"), ("CH4_NODE_SIZE", "1")],
    );
}

//! `tests/c/reductions.c` — the prefix reductions, the program's own reduction operations
//! (commutative or not, at every root), `MPI_Reduce_local`, `MPI_Op_commutative`,
//! `MPI_Op_free` and `MPI_Pcontrol` — built with our mpicc and run as 5 processes (not a power
//! of two, which the prefix reductions' recursive doubling must handle) under ch4run.

mod common;

#[test]
fn reductions_with_the_programs_operations_keep_rank_order() {
    common::run_c_checks("reductions", 5, &[]);
}

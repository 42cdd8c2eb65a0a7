//! `tests/c/datatypes.c` — the datatype functions MPICH's datatype suite does not call (the
//! big-count `_c` constructors and queries and what the envelope reports of them, `_c`
//! packing and external32, `MPI_Type_get_value_index`, `MPI_Aint_add`/`_diff`,
//! `MPI_Status_set_elements_c`), and a subarray and a darray sent between ranks — built with
//! our mpicc and run as 2 processes under ch4run.

mod common;

#[test]
fn the_c_datatype_checks_pass_on_two_processes() {
    common::run_c_checks("datatypes", 2, &[]);
}

//! `libmpi_abi.so.1`: ch4 behind the MPI standard ABI (MPI 5.0), so that unmodified C MPI
//! programs — the OSU micro-benchmarks, MPICH's test suite, an application — run on ch4, and
//! the very same binary runs on MPICH 5's library of the same ABI by changing
//! `LD_LIBRARY_PATH`.
//!
//! - `abi`: the ABI's handles, constants and `MPI_Status` (the values of `include/mpi.h`).
//! - `state`: the process's universe and communicator table, and the thread rule
//!   (`MPI_THREAD_FUNNELED`).
//! - `errors`: error codes with their messages, the classes, the error handlers.
//! - `datatype`: the predefined datatypes and reduction operations.
//! - The functions themselves are below, by chapter of the standard: each checks its
//!   arguments, translates handles (a few instructions: predefined handles are small integers,
//!   a request is the device's handle with its top bit set) and calls the device.
//!
//! A process joins its job as every ch4 program does, through PMI: under `ch4run`, under
//! Hydra's `mpiexec`, or alone as a singleton.

// The MPI functions keep the C names the ABI gives them, and their C parameter lists.
#![allow(non_snake_case)]
#![allow(clippy::too_many_arguments)]

mod abi;
mod buffers;
mod call;
mod collectives;
mod comm;
mod datatype;
mod derived;
mod environment;
mod errors;
mod groups;
mod probe;
mod pt2pt;
mod request_sets;
mod requests;
mod state;
mod status;
mod topology;

use std::ffi::c_int;

// ------------------------------------------------------------------ not implemented yet

/// Exports functions the library declares but does not implement yet: each reports an error
/// of class `MPI_ERR_UNSUPPORTED_OPERATION` whose string names it, through
/// `MPI_COMM_WORLD`'s error handler. They take no parameters: on the C calling conventions of
/// the platforms ch4 builds for, the caller owns its arguments, so ignoring them is sound.
macro_rules! not_implemented {
    ($($name:ident),* $(,)?) => {$(
        #[doc = concat!("`", stringify!($name), "`: not implemented yet (fails, naming itself).")]
        #[no_mangle]
        pub extern "C" fn $name() -> c_int {
            errors::not_implemented(stringify!($name))
        }
    )*};
}

not_implemented!(
    MPI_Comm_create_from_group,
    MPI_Session_init,
    MPI_Session_finalize,
    MPI_Group_from_session_pset,
    MPI_Dist_graph_neighbors,
    MPI_Win_create,
    MPI_Win_allocate,
    MPI_Win_create_dynamic,
    MPI_Win_attach,
    MPI_Win_free,
);

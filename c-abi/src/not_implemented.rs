//! The functions the library exports but does not implement yet: the sessions and
//! `MPI_Group_from_session_pset` (the standard's chapter "Process Initialization, Creation, and
//! Management"), `MPI_Comm_create_from_group` ("Groups, Contexts, Communicators, and
//! Caching") and the windows of "One-Sided Communications".
//!
//! Our `include/mpi.h` declares them, so a program that names one builds and links, and runs
//! until it calls it: then the call fails with an error naming the function, instead of the
//! link failing on a symbol the program may never reach. They stand together so that what is
//! missing is one list.

use std::ffi::c_int;

use crate::errors;

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
    MPI_Win_create,
    MPI_Win_allocate,
    MPI_Win_create_dynamic,
    MPI_Win_attach,
    MPI_Win_free,
);

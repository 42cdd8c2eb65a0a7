//! `libmpi_abi.so.1`: ch4 behind the MPI standard ABI (MPI 5.0), so that unmodified C MPI
//! programs — the OSU micro-benchmarks, MPICH's test suite, an application — run on ch4, and
//! the very same binary runs on MPICH 5's library of the same ABI by changing
//! `LD_LIBRARY_PATH`.
//!
//! Each MPI function checks its arguments, translates handles (a few instructions: predefined
//! handles are small integers, a request is the device's handle with its top bit set) and
//! calls the device. The functions live in one module per chapter of the standard, as MPICH's
//! `src/mpi/` has them, so that a function's name says where it is.
//!
//! What every chapter uses:
//!
//! - `abi`: the ABI's handles, constants and `MPI_Status` (the values of `include/mpi.h`).
//! - `state`: the process's universe and handle tables, and the thread level's rule (up to
//!   `MPI_THREAD_MULTIPLE`, over VCIs).
//! - `call`: entering the state, running blocking device work on a communicator's VCI,
//!   reporting an error, writing results through C pointers.
//! - `buffers`: a C buffer (pointer, count, datatype) as the device's send or receive buffer.
//!
//! The chapters:
//!
//! - `environment`: `MPI_Init`, `MPI_Finalize`, the thread queries, `MPI_Abort`, versions,
//!   the processor name, `MPI_Wtime`.
//! - `errors`: error codes with their messages and classes, `MPI_Error_string`,
//!   `MPI_Error_class`, the error handlers (the program's own too), the program's error
//!   classes, codes and strings (`MPI_Add_error_class` ...).
//! - `pt2pt`: sends and receives — `blocking`, `nonblocking`, `buffered`, `sendrecv`,
//!   `persistent` (`MPI_Send_init`, `MPI_Start`).
//! - `requests`: completing one request (`MPI_Wait`, `MPI_Test`, `MPI_Request_free`,
//!   `MPI_Request_get_status`).
//! - `request_sets`: `MPI_Waitall`, `MPI_Testall`, `MPI_Waitany`, `MPI_Testany`,
//!   `MPI_Waitsome`, `MPI_Testsome`.
//! - `grequests`: generalized requests (`MPI_Grequest_start`, `MPI_Grequest_complete`) and
//!   their callbacks, and the library's own requests of that kind (`MPI_Buffer_iflush`).
//! - `status`: `MPI_Get_count`, `MPI_Get_elements` and their `_x`/`_c` forms, the status
//!   accessors and setters, `MPI_Aint_add` and `MPI_Aint_diff`.
//! - `probe`: `MPI_Probe`, `MPI_Iprobe`, the matched probes and their receives, `MPI_Cancel`,
//!   `MPI_Test_cancelled`.
//! - `collectives`: barrier, broadcast, reductions and prefix reductions, gathers, scatters,
//!   all-to-all, blocking and with their `_c` forms; nonblocking and persistent ones
//!   (`nonblocking`, on plans that build the device's schedules, `plans`) and the
//!   neighbourhood collectives (`neighbour`).
//! - `comm`: `MPI_Comm_rank`, `_size`, `_dup`, `_split`, `_create`, `_create_group`,
//!   `_compare`, `_free`.
//! - `attributes`: caching — attribute keys and the attributes of communicators and
//!   datatypes (their copy and delete functions), the predefined attributes, communicator
//!   names.
//! - `groups`: `MPI_Comm_group` and the `MPI_Group_` functions.
//! - `intercomm`: intercommunicators (`MPI_Intercomm_create`, `_merge`, the remote group's
//!   queries) and `MPI_Comm_idup`.
//! - `info`: info objects (`MPI_Info_`, `MPI_INFO_ENV`) and a communicator's hints
//!   (`MPI_Comm_dup_with_info`, whose `ch4_vci` places it on a VCI).
//! - `datatype`: the predefined datatypes and reduction operations.
//! - `ops`: the program's reduction operations (`MPI_Op_create`, `MPI_Op_free`,
//!   `MPI_Op_commutative`) and `MPI_Reduce_local`.
//! - `derived`: derived datatypes as trees of runs of copies, flattened only when moved; the
//!   `MPI_Type_` constructors (`derived::constructors`, `derived::arrays` for subarray and
//!   darray), their decoding (`derived::envelope`), packing and external32
//!   (`derived::pack`), and the queries, `MPI_Get_address`, `MPI_Pack_size`
//!   (`derived::queries`).
//! - `topology`: process topologies — Cartesian (`MPI_Cart_`, `MPI_Dims_create`), graph
//!   (`MPI_Graph_`) and distributed graph (`MPI_Dist_graph_`) — and `MPI_Topo_test`.
//! - `not_implemented`: the exported functions that fail with an error naming themselves.
//!
//! A process joins its job as every ch4 program does, through PMI: under `ch4run`, under
//! Hydra's `mpiexec`, or alone as a singleton.

// The MPI functions keep the C names the ABI gives them, and their C parameter lists.
#![allow(non_snake_case)]
#![allow(clippy::too_many_arguments)]

mod abi;
mod buffers;
mod call;
mod state;

mod attributes;
mod collectives;
mod comm;
mod datatype;
mod derived;
mod environment;
mod errors;
mod grequests;
mod groups;
mod info;
mod intercomm;
mod not_implemented;
mod ops;
mod probe;
mod pt2pt;
mod request_sets;
mod requests;
mod status;
mod topology;

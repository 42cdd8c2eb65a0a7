//! Point-to-point communication, the standard's chapter "Point-to-Point Communication", a file
//! for each kind of call:
//!
//! - `blocking`: `MPI_Send`, `MPI_Ssend`, `MPI_Rsend`, `MPI_Recv`.
//! - `nonblocking`: `MPI_Isend`, `MPI_Issend`, `MPI_Irsend`, `MPI_Irecv`.
//! - `buffered`: `MPI_Buffer_attach`, `MPI_Buffer_detach`, the flushes, a communicator's own
//!   buffer (`MPI_Comm_attach_buffer` ...), `MPI_Bsend`, `MPI_Ibsend`.
//! - `sendrecv`: `MPI_Sendrecv`, `MPI_Isendrecv`, `MPI_Sendrecv_replace`,
//!   `MPI_Isendrecv_replace`.
//! - `persistent`: `MPI_Send_init`, `MPI_Ssend_init`, `MPI_Rsend_init`, `MPI_Bsend_init`,
//!   `MPI_Recv_init`, `MPI_Start`, `MPI_Startall`.
//! - `partitioned`: partitioned communication (MPI 4.1, chapter 4): `MPI_Psend_init`,
//!   `MPI_Precv_init`, `MPI_Pready` and its range and list forms, `MPI_Parrived`.
//!
//! Each call that takes a count has its `_c` form (an `MPI_Count`) beside it, on a path of its
//! own that converts and shares the int form's inner code, so the int forms' hot paths stay as
//! they were.
//!
//! The hot calls (`MPI_Send`, `MPI_Recv`, `MPI_Isend`, `MPI_Irecv`) thus sit in two files with
//! only their other send modes beside them, apart from the calls that copy or keep state. The
//! chapter's other parts are modules beside this folder: completion (`requests`,
//! `request_sets`) and statuses (`status`) serve every kind of request — nonblocking,
//! persistent, send-receive, matched receive — and probes with cancel (`probe`) act on
//! messages and requests rather than make them.

mod blocking;
pub(crate) mod buffered;
mod nonblocking;
pub(crate) mod partitioned;
mod persistent;
mod sendrecv;

pub(crate) use buffered::Bsend;
pub(crate) use partitioned::Partitions;

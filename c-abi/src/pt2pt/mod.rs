//! Point-to-point communication, the standard's chapter "Point-to-Point Communication", a file
//! for each kind of call:
//!
//! - `blocking`: `MPI_Send`, `MPI_Ssend`, `MPI_Rsend`, `MPI_Recv`.
//! - `nonblocking`: `MPI_Isend`, `MPI_Issend`, `MPI_Irsend`, `MPI_Irecv`.
//! - `buffered`: `MPI_Buffer_attach`, `MPI_Buffer_detach`, `MPI_Bsend`, `MPI_Ibsend`.
//! - `sendrecv`: `MPI_Sendrecv`, `MPI_Isendrecv`, `MPI_Sendrecv_replace`,
//!   `MPI_Isendrecv_replace`.
//! - `persistent`: `MPI_Send_init`, `MPI_Ssend_init`, `MPI_Rsend_init`, `MPI_Recv_init`,
//!   `MPI_Start`, `MPI_Startall`.
//!
//! The hot calls (`MPI_Send`, `MPI_Recv`, `MPI_Isend`, `MPI_Irecv`) thus sit in two files with
//! only their other send modes beside them, apart from the calls that copy or keep state. The
//! chapter's other parts are modules beside this folder: completion (`requests`,
//! `request_sets`) and statuses (`status`) serve every kind of request — nonblocking,
//! persistent, send-receive, matched receive — and probes with cancel (`probe`) act on
//! messages and requests rather than make them.

mod blocking;
mod buffered;
mod nonblocking;
mod persistent;
mod sendrecv;

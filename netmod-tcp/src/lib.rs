//! netmod-tcp: ch4's TCP network module.
//!
//! Active messages over one nonblocking TCP connection per peer (the VCs that CH4 leaves to
//! connection-oriented netmods), with MPI semantics from `am_fallback::Am` (matching in the
//! core). [`frame`] is the stream format and its decoder; [`transport`] the netmod: its
//! connections (handshake, orderly close, failure), send queues, receiving and progress.
#![deny(unsafe_code)]

pub mod frame;
pub mod transport;

pub use transport::TcpNetmod;

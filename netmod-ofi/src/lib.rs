//! The libfabric (OFI) netmod of ch4: MPI point-to-point carried by libfabric's tagged
//! messages and matched by the provider, as MPICH's ch4:ofi does — the natively matching half
//! of the CH4 design.
//!
//! - [`provider`] wraps the libfabric calls the netmod needs (over the raw bindings of
//!   `libfabric-sys`) and knows nothing of ch4: provider selection, one tagged RDM endpoint, the
//!   data path on raw buffers, completions.
//! - [`tag`] lays out the 64 match bits (protocol, context id, source rank, tag) and the remote
//!   CQ data (the sender's process, a synchronous send's acknowledgement).
//! - [`OfiNetmod`] is the netmod (`Netmod`, and `Bootstrap` for joining a job by business
//!   cards); [`OfiEngine`] its engine, ch4-core's native-engine contract over the provider's
//!   asynchronous completion queue.

mod engine;
mod netmod;
pub mod provider;
pub mod tag;

pub use engine::OfiEngine;
pub use netmod::{OfiNetmod, PeerWatch};

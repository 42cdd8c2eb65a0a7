//! shm: ch4's integrated shared-memory layer.
//!
//! Ranks on one node exchange active messages through per-pair lock-free rings in one shared
//! segment ([`segment`]), or in anonymous memory when ranks are threads; MPI semantics on top
//! come from `am_fallback::Am`, with matching in the core's queues. A small message is one
//! record written into the receiver's ring and, on the other side, one copy from the ring into
//! the posted receive — no detour through a generic active-message layer.
#![deny(unsafe_op_in_unsafe_fn)]

#[cfg(not(loom))]
pub mod cma;
pub mod ring;
// Under `--cfg loom` only the ring protocol is modelled; the segment and transport (real
// shared memory, syscalls) are compiled out.
#[cfg(not(loom))]
pub mod segment;
mod sync;
#[cfg(not(loom))]
pub mod transport;

#[cfg(not(loom))]
pub use segment::Segment;
#[cfg(not(loom))]
pub use transport::{ShmConfig, ShmTransport};

#[cfg(loom)]
mod loom_tests;

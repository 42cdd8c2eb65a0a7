//! shm: ch4's integrated shared-memory layer.
//!
//! Ranks on one node exchange active messages through one shared segment ([`segment`]), or
//! anonymous memory when ranks are threads: per-pair lock-free rings ([`ring`]) are the fast
//! path, and per-receiver queues of fixed-size cells ([`cells`], Nemesis style) carry what the
//! rings cannot take at the moment — all of it on a crowded node, where rings are small. MPI
//! semantics on top come from `am_fallback::Am`, with matching in the core's queues. A small
//! message is one record or cell written for the receiver and, on the other side, one copy into
//! the posted receive — no detour through a generic active-message layer.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod cells;
#[cfg(not(loom))]
pub mod cma;
pub mod ring;
// Under `--cfg loom` only the ring and cell protocols are modelled; the segment and transport (real
// shared memory, syscalls) are compiled out.
#[cfg(not(loom))]
pub mod segment;
mod sync;
#[cfg(not(loom))]
pub mod transport;

#[cfg(not(loom))]
pub use segment::{Geometry, Segment};
#[cfg(not(loom))]
pub use transport::{ShmConfig, ShmTransport};

#[cfg(loom)]
mod loom_tests;

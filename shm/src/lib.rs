//! shm: ch4's integrated shared-memory layer.
//!
//! Ranks on one node exchange active messages through per-pair lock-free rings in one shared
//! segment (or in anonymous memory when ranks are threads); MPI semantics on top come from
//! `am_fallback::Am`, with matching in the core's queues.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod ring;
mod sync;

#[cfg(loom)]
mod loom_tests;

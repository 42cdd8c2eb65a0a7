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
mod lanes;
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

use ch4_core::env::Setting;

/// The settings this crate reads from the environment (see `ch4_core::env`); the README's
/// settings table lists them with the others.
pub const SETTINGS: &[Setting] = &[
    Setting::new(
        "CH4_SHM_EAGER_LIMIT",
        "32K",
        "messages up to this many bytes are one record; longer ones go by rendezvous",
    ),
    Setting::new(
        "CH4_SHM_RING_SIZE",
        "64M / ranks², 4K to 1M",
        "bytes per ring (a power of two)",
    ),
    Setting::new(
        "CH4_SHM_RING_RECORD_MAX",
        "half the ring",
        "largest record (header + payload) a ring takes; larger ones go through cells",
    ),
    Setting::new(
        "CH4_SHM_CELL_SIZE",
        "16K",
        "bytes per cell, 64 of them header",
    ),
    Setting::new("CH4_SHM_CELLS", "32", "cells per rank (at most 128)"),
    Setting::new(
        "CH4_SHM_PIECE_SIZE",
        "64K",
        "rendezvous data streams through the rings in pieces this big",
    ),
    Setting::new(
        "CH4_SHM_CMA",
        "auto",
        "single-copy rendezvous through Linux CMA (process_vm_readv): auto reads only while the host has more ranks than CPUs (else streaming wins here), on reads by the size rules always, off never; off at the first EPERM",
    ),
    Setting::new(
        "CH4_SHM_CMA_THRESHOLD",
        "0",
        "rendezvous messages of at least this many bytes are offered for a single-copy read",
    ),
    Setting::new(
        "CH4_SHM_CMA_MAX",
        "256K",
        "... and, for a lone message, of at most this many (larger ones stream: two cores copying beat one); while the receiver sends large messages itself, every one from 512K is read",
    ),
];

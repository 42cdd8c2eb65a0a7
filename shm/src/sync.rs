//! Every atomic the rings use comes from here, so that `RUSTFLAGS="--cfg loom"` swaps in loom's
//! model-checked versions (tokio's `loom` shim pattern).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering};

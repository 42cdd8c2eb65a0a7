//! libfabric netmod for ch4; this commit holds its provider layer, the engine comes next.
//!
//! The engine will implement ch4-core's netmod traits natively: MPI's matching done by the
//! provider's tagged messages (`fi_tsend` / `fi_trecv`), as MPICH's ch4:ofi does, for
//! networks whose libfabric provider matches in hardware or in its own queues. It will sit on
//! [`provider`], which wraps the libfabric calls it needs (over the raw bindings of
//! `libfabric-sys`) and knows nothing of ch4's traits.

pub mod provider;

//! The libfabric (OFI) netmod of ch4: MPI point-to-point carried by libfabric's tagged
//! messages and matched by the provider, as MPICH's ch4:ofi does — the natively matching half
//! of the CH4 design.
//!
//! - [`provider`] wraps the libfabric calls the netmod needs (over the raw bindings of
//!   `libfabric-sys`) and knows nothing of ch4: provider selection, one tagged RDM endpoint, the
//!   data path on raw buffers, completions.
//! - [`tag`] lays out the 64 match bits (protocol, context id, source rank, tag) and the remote
//!   CQ data (the sender's process, a synchronous send's acknowledgement).
//! - [`credit`] bounds what a receiver's provider holds of unexpected messages (eager credit,
//!   as the AM fallback's).
//! - [`OfiNetmod`] is the netmod (`Netmod`, and `Bootstrap` for joining a job by business
//!   cards); [`OfiEngine`] its engine, ch4-core's native-engine contract over the provider's
//!   asynchronous completion queue.

pub mod credit;
mod engine;
mod large;
mod netmod;
pub mod provider;
pub mod tag;

pub use engine::OfiEngine;

use ch4_core::env::Setting;

/// The settings of the OFI netmod: its own largest message, and libfabric's variables: ch4
/// reads `FI_PROVIDER` and, on a libfabric before 1.18, sets the two rxm variables unless the
/// user did (see `provider::workarounds`). The settings summary shows what is in force.
pub const SETTINGS: &[Setting] = &[
    Setting::new(
        "FI_PROVIDER",
        "the first offering tagged RDM messaging",
        "the libfabric provider (libfabric's own variable; the summary shows the one in use)",
    ),
    Setting::new(
        "CH4_OFI_MAX_MSG_SIZE",
        "the provider's max_msg_size",
        "the longest message handed to the provider in one operation; longer ones are read by RMA (for testing that path, or a provider that overstates its limit)",
    ),
    Setting::new(
        "CH4_OFI_DIRECTED_RECV",
        "on where the provider offers FI_DIRECTED_RECV",
        "receives that name their source are posted for that process's address, so no other endpoint's message completes them; off where the provider sees peers under other addresses than their cards (a proxy or NAT between ranks), where such receives would wait for ever",
    ),
    Setting::new(
        "FI_OFI_RXM_ENABLE_DYN_RBUF",
        "0 before libfabric 1.18 (set by ch4)",
        "rxm's direct placement into application buffers; on before 1.18 it breaks the endpoint after a truncated receive",
    ),
    Setting::new(
        "FI_OFI_RXM_SAR_LIMIT",
        "0 before libfabric 1.18 (set by ch4): no segmentation",
        "rxm's segmentation protocol; before 1.18 a truncated segmented message crashes the process",
    ),
    Setting::new(
        "FI_OFI_RXM_BUFFER_SIZE",
        "16384 (rxm's)",
        "rxm's eager limit: longer messages are read by RMA; each unexpected message holds one buffer, and the eager credit prices a message at it (65536 makes 32-64 KiB messages 1.7-2.7x faster for about 280 MiB more memory a process)",
    ),
];
pub use netmod::{OfiNetmod, PeerWatch};

/// The parsers of what a peer sends that are otherwise private to the engine, for the fuzz
/// targets (`fuzz/`); not an interface.
#[doc(hidden)]
pub mod fuzzing {
    use crate::netmod::Descriptor;

    /// A large message's stub payload: (acknowledgement name, length, address, key), `None`
    /// unless the bytes are one.
    pub fn inline_stub(b: &[u8]) -> Option<(u32, u64, u64, u64)> {
        crate::large::parse_inline_stub(b).map(|(ack, d)| (ack, d.len, d.addr, d.key))
    }

    /// The stub payload a sender writes for these values.
    pub fn inline_stub_bytes(ack: u32, len: u64, addr: u64, key: u64) -> Vec<u8> {
        crate::large::inline_stub(ack, Descriptor { len, addr, key })
    }

    /// A descriptor sent in a message of its own: (length, address, key).
    pub fn descriptor(b: &[u8]) -> Option<(u64, u64, u64)> {
        Descriptor::from_bytes(b).map(|d| (d.len, d.addr, d.key))
    }
}

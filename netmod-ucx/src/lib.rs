//! The UCX netmod of ch4: MPI point-to-point carried by UCP's tagged messages and matched by
//! UCX, as MPICH's ch4:ucx does — the second natively matching netmod of the CH4 design.
//!
//! - `worker` is the UCX layer (over the raw bindings of `ucx-sys`) and knows nothing of ch4:
//!   the context and worker, endpoints made on first contact with an error handler, and the
//!   `extern "C"` callbacks, which only record completions.
//! - [`tag`] lays out the 64 tag bits (context id, source rank, tag; a credit tag space).
//! - `credit` bounds what a receiver's UCX holds of unexpected messages (eager credit, as the
//!   AM fallback's and the libfabric netmod's).
//! - [`UcxNetmod`] is the netmod (`Netmod`, and `Bootstrap` for joining a job by business
//!   cards: the worker's address); [`UcxEngine`] its engine, ch4-core's native-engine contract
//!   over UCX's completions.
//!
//! UCX is configured as UCX programs are: `UCX_TLS`, `UCX_NET_DEVICES` and the rest of its
//! `UCX_*` variables, read from the environment when the worker is opened.

mod credit;
mod engine;
mod netmod;
mod paged;
pub mod tag;
mod worker;

pub use credit::MESSAGE_CHARGE;
pub use engine::UcxEngine;
pub use netmod::UcxNetmod;
pub use worker::ErrMode;

use ch4_core::env::Setting;

/// The settings of the UCX netmod: UCX's own variables, which UCX reads (the settings summary
/// shows what is in force).
pub const SETTINGS: &[Setting] = &[
    Setting::new(
        "UCX_TLS",
        "all (UCX's choice)",
        "the UCX transports (UCX's own variable: tcp, posix, sysv, cma, self, ...)",
    ),
    Setting::new(
        "UCX_NET_DEVICES",
        "all (UCX's choice)",
        "the network devices UCX may use (UCX's own variable, e.g. lo)",
    ),
    Setting::new(
        ERR_MODE_VAR,
        "none",
        "UCX's error handling mode for endpoints: none (a failed peer is learned from the \
         launcher, and from UCX's error handler where the transport reports it) or peer (UCX \
         guarantees the report, at a cost: over tcp it changes the rendezvous protocol and \
         4 MiB messages take 1.8x as long)",
    ),
];

/// The variable that chooses UCX's error handling mode ([`ErrMode`]).
pub const ERR_MODE_VAR: &str = "CH4_UCX_ERR_MODE";

//! The provider layer: a small, safe-where-it-can-be Rust layer over libfabric for one tagged
//! RDM endpoint. It knows nothing of ch4's traits; the ofi engine sits on it.
//!
//! Layering, bottom up: `libfabric-sys` (raw bindings, the `static inline` calls as Rust
//! functions) → this module → the engine (MPI matching semantics, requests, the tag layout) →
//! `ch4-core`'s `Netmod`. What lives here is what any libfabric user would write once:
//!
//! - [`select`]: provider selection from [`Hints`] (tagged + untagged messages on a reliable
//!   datagram endpoint with send-after-send ordering, RMA and directed receive if offered),
//!   returning an [`Info`] with the attributes the engine designs around (inject size, tag bits,
//!   iov limit, mode bits, ...), or an error naming the capability nobody offers.
//! - [`Endpoint`]: the fabric, domain, address vector (`FI_AV_TABLE`, so a peer's `fi_addr_t`
//!   is its process number), one tagged completion queue and the endpoint, opened and closed in
//!   order; the endpoint's name and the insertion of every process's name.
//! - The data path ([`Endpoint::tinject`], [`tsend`](Endpoint::tsend),
//!   [`tsendv`](Endpoint::tsendv), [`trecv`](Endpoint::trecv),
//!   [`trecvmsg`](Endpoint::trecvmsg), [`cancel`](Endpoint::cancel),
//!   [`poll`](Endpoint::poll)): one indirect call each, no allocation, `-FI_EAGAIN` returned
//!   as [`Posted::Again`] and error completions as [`Completions::Failed`].
//!
//! # Why the data path takes raw pointers
//!
//! libfabric writes into a posted receive buffer (and reads a send buffer) asynchronously,
//! after the call returns and until the operation's completion is read from the CQ; it also
//! uses the operation's `fi_context2` as scratch space for that long. No borrow can express
//! "until a completion that a later call returns", so those calls are `unsafe fn`s whose
//! `# Safety` sections state the lifetime the caller (the engine's request table) guarantees.
//! [`Endpoint::tinject`] is safe: libfabric copies the message before returning.
//!
//! # What the providers of libfabric 1.17 actually do
//!
//! Measured by this crate's tests and `libfabric-sys`'s smoke tests, on `tcp;ofi_rxm` and `shm`:
//!
//! - The first send to a peer returns `-FI_EAGAIN` (connection set-up in rxm, mapping the peer's
//!   region in shm) until the CQ has been read: retrying after [`Endpoint::poll`] is normal,
//!   not an error.
//! - Back-pressure differs: shm says `-FI_EAGAIN` after 1024 injects or sends to a peer that
//!   does not read (its queue to that peer); `tcp;ofi_rxm` after `tx_size` (2048) sends, and
//!   for injects only much later: ten thousand to a peer that never progresses are all
//!   accepted. Nothing bounds the receiver: rxm keeps every unexpected message in a 16 KiB
//!   receive buffer of its own and posts another, so four processes flooding a busy one with
//!   a million 1 KiB messages grew it by 15 GiB. The engine therefore bounds it with eager
//!   credit of its own (`crate::credit`), and the workspace's flood tests check the bound.
//! - A truncated receive completes with `FI_ETRUNC` but `len` and `olen` are 0 in both, and
//!   shm reports the code negated (-265); [`CqError::err`] is normalized to the positive code.
//!   `tcp;ofi_rxm` with dynamic receive buffers delivers none of the bytes that fit and then
//!   loses every later message on the endpoint (libfabric issue 8274); this crate turns them
//!   off before 1.18 (`workarounds`), and rxm then truncates correctly, delivering what fits.
//! - shm before 1.19 ignores `FI_PEEK`, `FI_CLAIM` and `FI_DISCARD`: a peek is a plain receive
//!   that consumes the message. [`Info::peek`] says so, and [`Endpoint::trecvmsg`] refuses those
//!   flags there instead of losing a message.

mod endpoint;
mod error;
mod info;
mod workarounds;

pub use endpoint::{Completions, CqError, Endpoint, Posted, Region};
pub use error::fi_error;
pub use info::{select, Hints, Info, DIRECTED_RECV_VAR, MAX_MSG_SIZE_VAR, MIN_MAX_MSG_SIZE};
pub use workarounds::{linked_version, rxm_eager_limit, rxm_truncation_breaks_endpoint};

/// The libfabric types and flags of the provider layer's signatures, re-exported so that its
/// users need not name `libfabric-sys` for them.
pub use libfabric_sys::{
    fi_addr_t, fi_context2, fi_cq_tagged_entry, fi_msg_tagged, iovec, FI_ADDR_UNSPEC, FI_CLAIM,
    FI_COMPLETION, FI_DIRECTED_RECV, FI_DISCARD, FI_PEEK,
};

//! ch4-core: the vocabulary and the device of ch4.
//!
//! The layering, top to bottom: the facade crate `ch4` (safe typed API) calls [`Device`], which
//! validates, translates ranks and routes each operation to the shared-memory layer or to the
//! netmod; each of those names its point-to-point engine as an associated type ([`P2p`]), either
//! its own native matching engine or `am_fallback::Am`, which runs MPI semantics over active
//! messages with matching in this crate's queues. Nothing here knows a concrete transport.
#![deny(unsafe_code)]

pub mod blocking;
pub mod bootstrap;
pub mod buffer;
pub mod coll;
pub mod comm;
pub mod core;
pub mod datatype;
pub mod device;
pub mod env;
pub mod error;
pub mod inter;
pub mod match_bits;
pub mod matching;
pub mod native;
pub mod nbc;
pub mod node_coll;
pub mod pool;
pub mod rankmap;
pub mod request;
pub mod schedule;
mod spares;
pub mod transport;
pub mod types;

pub use comm::CommId;
pub use device::Device;
pub use error::{Error, ErrorKind, Result};
pub use request::{Message, RecvState, ReqHandle};
pub use transport::{AmTransport, Netmod, NoNetmod, NoShm, P2p, PeerState, Shm};
pub use types::*;

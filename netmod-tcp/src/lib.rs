//! netmod-tcp: ch4's TCP network module.
//!
//! Active messages over one nonblocking TCP connection per peer (the VCs that CH4 leaves to
//! connection-oriented netmods), with MPI semantics from `am_fallback::Am` (matching in the
//! core). [`frame`] is the stream format and its decoder; [`transport`] the netmod: its
//! connections (handshake, orderly close, failure), send queues, receiving and progress.
#![deny(unsafe_code)]

mod bootstrap;
pub mod frame;
pub mod transport;

pub use transport::{PeerWatch, TcpNetmod};

use ch4_core::env::Setting;

/// The settings this crate reads from the environment (see `ch4_core::env`); the README's
/// settings table lists them with the others. `CH4_TCP_BIND` is read where the netmod is
/// bootstrapped (the facade's process mode), since it decides where [`TcpNetmod::bind`] listens.
pub const SETTINGS: &[Setting] = &[
    Setting::new(
        "CH4_TCP_EAGER_LIMIT",
        "64K",
        "messages up to this many bytes go eagerly over TCP; longer ones by rendezvous",
    ),
    Setting::new(
        "CH4_TCP_PIECE_SIZE",
        "512K",
        "rendezvous data moves in pieces this big (half as big while several messages stream at once)",
    ),
    Setting::new(
        "CH4_TCP_FIRST_PIECE",
        "the piece size (16K while a progress thread runs)",
        "bytes of a rendezvous message sent with its request-to-send, read straight into the matched receive (0: none)",
    ),
    Setting::new(
        "CH4_TCP_SCATTER_MIN",
        "4K",
        "a noncontiguous receive whose blocks average at least this many bytes is read straight into them (readv)",
    ),
    Setting::new(
        "CH4_TCP_BIND",
        "0.0.0.0:0",
        "address and port to listen on (IPv4 or IPv6); the business card carries this host's resolved address",
    ),
];

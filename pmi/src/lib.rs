//! pmi: the PMI-1 process-management interface of ch4, client and server, and a PMI-2 client,
//! in pure Rust.
//!
//! An MPI job needs, before any message moves, three things from whoever started it: each
//! process's rank, the job size, and a key-value space in which ranks publish their transport
//! addresses ("business cards"), fence, and read each other's. PMI-1 is the line protocol MPICH's
//! launchers speak for that. Speaking it makes ch4 programs start under ch4's own one-host
//! launcher `ch4run` *and*, unchanged, under MPICH's Hydra `mpiexec`, which reaches many hosts
//! through ssh, Slurm or PBS.
//!
//! Layering, bottom to top:
//!
//! * [`wire`]: parse and format PMI-1 lines; sans-IO, never panics, fuzzed.
//! * [`wire2`]: frame, parse and format PMI-2 messages (`srun --mpi=pmi2`), for the client.
//! * [`server`]: the sans-IO server state machine for one job (key-value space, barriers,
//!   abort), and [`SocketServer`], which runs it over sockets for `ch4run`.
//! * [`client`]: the blocking client a rank uses; connects by `PMI_FD`, `PMI_PORT`, or becomes
//!   a singleton when started without a launcher.
//! * [`mapping`] and [`hex`]: `PMI_process_mapping` (which ranks share a node) and binary
//!   values.
//! * [`launch`]: the one-host launcher behind `ch4run`, as a library: [`launch::run`] runs a job
//!   from a program, and [`launch::self_launch`] lets a program be its own launcher.
//!
//! # Launching
//!
//! * One host: `ch4run -n 4 target/release/examples/ring` (this crate's binary), or no
//!   launcher at all for a program that calls [`launch::self_launch`] first thing in `main`.
//! * Many hosts: the same binary under Hydra, which speaks the same protocol:
//!   `mpiexec.hydra -f hostfile -n 16 ./ring` (ssh to the hosts listed one per line, `host:slots`),
//!   `mpiexec.hydra -launcher slurm -n 64 ./ring` inside a Slurm allocation, or `-launcher pbs`
//!   under PBS. Hydra's default passes an inherited socket (`PMI_FD`); `-pmi-port` makes it use
//!   TCP (`PMI_PORT`); the client handles both. Node locality comes from the
//!   `PMI_process_mapping` Hydra publishes ([`Client::node_ids`]).
//! * No launcher: the program runs as a singleton, rank 0 of 1.
//!
//! ```
//! # fn main() -> pmi::Result<()> {
//! // With no launcher this is a singleton: rank 0 of 1.
//! let mut pmi = pmi::Client::from_env()?;
//! pmi.init()?;
//! pmi.put_bytes(&format!("card-{}", pmi.rank()), b"\x01\x02")?;
//! pmi.barrier()?;
//! assert_eq!(pmi.get_bytes("card-0")?, Some(vec![1, 2]));
//! pmi.finalize()?;
//! # Ok(())
//! # }
//! ```
#![deny(unsafe_code)]

pub mod client;
pub mod error;
pub mod hex;
pub mod launch;
pub mod mapping;
pub mod server;
pub mod socket;
pub mod wire;
pub mod wire2;

pub use client::{Client, ConnectionKind, Maxes, PeerEvent, Version, PEER_EVENTS_VAR};
pub use error::{Error, ErrorKind, Result};
pub use mapping::{node_ids, MapBlock, ProcessMapping, PROCESS_MAPPING_KEY};
pub use server::{ClientId, JobConfig, Output, Server};
pub use socket::{JobEvent, SocketServer};
pub use wire::{Command, Decoder, WireError};

//! pmix: the PMIx client of ch4, a safe layer over the system OpenPMIx (`pmix-sys`).
//!
//! PMIx is the process-management interface of Open MPI's `mpirun`, PRRTE and Slurm's
//! `srun --mpi=pmix`. It does for a rank what PMI-1 and PMI-2 do (the `pmi` crate): tells it
//! its rank and the job's size, and gives the job a key-value store in which each rank
//! publishes its business cards, fences, and reads the others'. Unlike PMI-1's one flat space
//! of keys, a PMIx value belongs to the rank that put it, so a read names the publisher
//! ([`Client::get`]); and PMIx knows the job's layout ([`Client::node_ids`]) and may tell a
//! rank when others fail ([`Client::watch_failures`]).
//!
//! The wire protocol between client and server is the library's: every PMIx server speaks
//! OpenPMIx's, and a client that spoke it on its own would follow each release. So this crate
//! links the library, found by pkg-config when `pmix-sys` builds.
//!
//! ```no_run
//! # fn main() -> Result<(), pmix::Error> {
//! // Under `mpirun -n 2` or `srun --mpi=pmix -n 2`:
//! let mut pmix = pmix::Client::init()?;
//! pmix.put("card", b"my address")?;
//! pmix.fence()?;
//! let peer = (pmix.rank() + 1) % pmix.size();
//! let card = pmix.get(peer, "card")?;
//! pmix.finalize()?;
//! # Ok(())
//! # }
//! ```

mod client;
mod error;
mod events;

pub use client::Client;
pub use error::Error;
pub use events::PeerEvent;

/// Whether this process was started by a PMIx launcher: the server sets `PMIX_NAMESPACE` and
/// `PMIX_RANK` in the environment of each process it starts (Open MPI's `mpirun`, PRRTE,
/// Slurm's `srun --mpi=pmix`). Without them [`Client::init`] fails: OpenPMIx 4.2 makes no
/// singleton.
pub fn launched() -> bool {
    std::env::var_os("PMIX_NAMESPACE").is_some() && std::env::var_os("PMIX_RANK").is_some()
}

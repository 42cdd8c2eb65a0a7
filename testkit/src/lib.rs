//! testkit: the one set of test harnesses every ch4 crate's tests use (a dev-only crate).
//!
//! Each crate's tests used to carry their own: an in-memory transport here, a TCP pair there,
//! a loop of "progress this one, test that one" everywhere, unbounded, so a regression hung CI
//! instead of failing. The kit gathers them, in the spirit of quinn-proto's `Pair` (two
//! endpoints stepped deterministically by the test) and smoltcp's wrapper devices
//! (`FaultInjector` stacked over any device):
//!
//! - [`Pipe`] and [`Wire`]: an ordered in-memory transport whose frames the test can read and
//!   forge;
//! - [`Faulty`] / [`Unordered`]: a seeded wrapper around any transport that drops,
//!   duplicates, delays, reorders, corrupts and kills peers — every failure replays from its
//!   seed ([`SplitMix64`] is the kit's own generator); [`Shuffled`] is re-exported so that
//!   all the wrappers are found here;
//! - [`Proxy`]: a TCP proxy that resets or drops the connections it carries after a given
//!   number of bytes — broken connections, for real, mid-transfer;
//! - [`Harness`]: N devices of any transport stepped from one thread, every wait bounded by a
//!   [`Limit`], with the usual send-receive-wait loops as methods;
//! - [`irecv_leaked`] and [`isend_owned`]: requests posted without tying a test's buffers to
//!   lifetimes;
//! - constructors for the jobs tests need: [`pipe_pair`], [`pipe_job`], [`tcp_job`],
//!   [`inproc_job`], [`shm_job`];
//! - [`skip`]: tests that need what is not in the repository (third-party programs, a system
//!   launcher) skip when it is absent, and say what is missing.
//!
//! It sits above every transport crate and depends on them, so a crate's integration tests
//! (`tests/`) can use all of it; its unit tests (`src/`) compile a second copy of the crate, so
//! constructors naming that crate's types do not fit them — they build their devices and hand
//! them to [`Harness::new`] or [`Harness::build`], which are generic.
#![deny(unsafe_code)]

mod fault;
mod harness;
mod jobs;
mod pipe;
mod proxy;
mod requests;
mod rng;
pub mod skip;

pub use fault::{FaultConfig, FaultControl, FaultStats, Faulty, Unordered};
pub use harness::{Harness, Limit, Transfer};
pub use jobs::{inproc_job, pipe_job, pipe_pair, tcp_job, InprocHarness, PipeHarness, TcpHarness};
#[cfg(not(loom))]
pub use jobs::{shm_job, ShmHarness};
pub use pipe::{Frame, Pipe, Wire};
pub use proxy::{Cut, Fragment, Plan, Proxy};
pub use requests::{irecv_leaked, isend_owned, leaked_buffer};
pub use rng::{fault_seeds, SplitMix64};

/// The reordering wrapper the facade's thread mode runs netmods under (it shuffles batches of
/// arrivals; [`Unordered`] reorders by seeded per-message faults instead).
pub use inproc::Shuffled;

//! ch4: an MPI point-to-point engine after MPICH's CH4 design, with a safe Rust API.
//!
//! The device underneath, `ch4_core::Device<N, S>`, is generic over the network module `N` and
//! the shared-memory layer `S`; every send and receive path is monomorphized for them. This
//! crate picks them for the build (Cargo features choose the netmod) and wraps the device in an
//! API that cannot be misused into undefined behaviour: typed buffers, `Result` for everything a
//! user or peer can get wrong, and nonblocking operations whose buffers are borrowed by a
//! [`scope`](Context::scope) that completes every request before the borrow ends.
//!
//! ```
//! use ch4::threads::Threads;
//!
//! // Four ranks as four threads of this process.
//! let sums = Threads::new(4).run(|ctx| {
//!     let world = ctx.world();
//!     let (rank, size) = (world.rank(), world.size());
//!     // Pass a token around the ring.
//!     let mut token = [0u64];
//!     if rank == 0 {
//!         world.send(&[1u64], 1, 0)?;
//!         world.recv(&mut token, size - 1, 0)?;
//!     } else {
//!         world.recv(&mut token, rank - 1, 0)?;
//!         token[0] += 1;
//!         world.send(&token, (rank + 1) % size, 0)?;
//!     }
//!     // And add up the ranks.
//!     let mut total = [0u64];
//!     world.allreduce(&[rank as u64], &mut total, ch4::op::sum)?;
//!     Ok(total[0])
//! })
//! .unwrap();
//! assert_eq!(sums, vec![6, 6, 6, 6]);
//! ```
#![deny(unsafe_op_in_unsafe_fn)]

mod communicator;
pub mod op;
pub mod process;
mod request;
pub mod threads;

use std::cell::{RefCell, RefMut};
use std::rc::Rc;

pub use ch4_core::coll::UNDEFINED;
pub use ch4_core::comm::CommId;
pub use ch4_core::core::DeviceConfig;
pub use ch4_core::datatype::{Layout, Pod, Zeroable};
pub use ch4_core::rankmap::{Group, RankMap};
pub use ch4_core::transport::{Netmod, NoShm, Shm};
pub use ch4_core::{
    Error, ErrorKind, Result, SendMode, Status, ANY_SOURCE, ANY_TAG, PROC_NULL, TAG_UB,
};
pub use ch4_core::{Rank, Tag};
pub use communicator::{Communicator, Message};
pub use request::{Request, Scope};

/// Re-exported so users can name the device type of their build.
pub use ch4_core::Device as GenericDevice;

/// The netmod of this build. Until a network netmod is enabled by a Cargo feature, the default
/// is the in-process active-message netmod (ranks as threads).
pub type SelectedNetmod = inproc::InprocNet<inproc::AmOnly>;
/// The shared-memory layer of this build: lock-free per-pair rings in a node segment.
pub type SelectedShm = shm::ShmTransport;
/// The device of this build.
pub type Device = ch4_core::Device<SelectedNetmod, SelectedShm>;

/// One rank's handle on its device: where communicators and scopes come from.
///
/// Not `Send`: a device belongs to the thread that drives it (MPI_THREAD_FUNNELED).
pub struct Context<N: Netmod, S: Shm> {
    dev: Rc<RefCell<ch4_core::Device<N, S>>>,
}

impl<N: Netmod, S: Shm> Clone for Context<N, S> {
    fn clone(&self) -> Self {
        Context {
            dev: self.dev.clone(),
        }
    }
}

impl<N: Netmod, S: Shm> Context<N, S> {
    /// Wraps a device that has already been connected to its peers.
    pub fn new(device: ch4_core::Device<N, S>) -> Context<N, S> {
        Context {
            dev: Rc::new(RefCell::new(device)),
        }
    }

    /// All processes of the job.
    pub fn world(&self) -> Communicator<N, S> {
        let id = self.dev.borrow().world();
        Communicator::new(self.dev.clone(), id)
    }

    /// This process alone.
    pub fn self_comm(&self) -> Communicator<N, S> {
        let id = self.dev.borrow().self_comm();
        Communicator::new(self.dev.clone(), id)
    }

    /// Makes one round of progress on every transport; returns how many events it handled.
    pub fn progress(&self) -> Result<usize> {
        self.device()?.progress()
    }

    /// The device itself, for what the safe API does not cover. Fails if it is already
    /// borrowed (a call from inside a reduction closure, for instance).
    pub fn device(&self) -> Result<RefMut<'_, ch4_core::Device<N, S>>> {
        borrow(&self.dev)
    }

    /// Runs `f` with a scope for nonblocking operations. Buffers lent to requests made in the
    /// scope must outlive it; when `f` returns (or panics), every request of the scope that is
    /// still pending is completed first — so even a forgotten request cannot outlive its buffer.
    pub fn scope<'a, R>(&self, f: impl FnOnce(&Scope<'a, N, S>) -> R) -> R {
        request::scope(self.dev.clone(), f)
    }
}

/// Borrows the device, turning a reentrant use into an error rather than a panic.
pub(crate) fn borrow<D>(dev: &RefCell<D>) -> Result<RefMut<'_, D>> {
    dev.try_borrow_mut().map_err(|_| {
        Error::new(
            ErrorKind::Arg,
            "the device is busy: ch4 calls cannot be made from inside a reduction operator",
        )
    })
}

/// The README's code runs as a doctest, so the example users copy first cannot rot.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

//! inproc: in-process transports and test doubles.
//!
//! Transports whose "wire" is memory of this process, for tests and for jobs whose ranks are
//! threads of one process (the facade's `threads` module runs ranks over the real shared-memory
//! layer, `shm::ShmTransport`, and over the build's netmod by default; these are the doubles it
//! can run them over instead). A [`Fabric`] is the shared meeting point; each rank takes its
//! endpoints from it:
//!
//! - [`InprocShm`]: a simple shared-memory layer (locked mailboxes) for ranks of one simulated
//!   node;
//! - [`InprocNet<AmOnly>`]: an active-message netmod that falls back to `am_fallback::Am`;
//! - [`InprocNet<Native>`]: a netmod that matches messages "in the network", the way libfabric
//!   or UCX do — the stand-in that lets the core's ANY_SOURCE partner logic be tested without
//!   hardware;
//! - [`Shuffled`]: a wrapper that reorders another transport's deliveries, to drive the AM
//!   fallback's sequence numbers.
//!
//! The fabric can split the ranks into nodes (`ranks_per_node`), so one process can exercise
//! every route of the device: shm between ranks of a node, the netmod between nodes. It also
//! records which ranks failed or left, which the thread runner and the TCP netmod consult.
//!
//! Each endpoint's mailbox is a locked byte buffer that senders append framed messages to and the
//! receiver swaps out whole, so steady-state traffic allocates nothing and costs one lock per
//! send and one per poll (the real shared-memory layer's lock-free rings and cell queues are
//! in the `shm` crate).

mod mailbox;
pub mod native;
mod shuffle;

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use ch4_core::transport::{AmSink, AmTransport, HandlerId, Netmod, PeerState, Shm};
use ch4_core::{Error, ErrorKind, Gpid, Result};

use mailbox::{Inbox, Mailbox};
pub use native::NativeEngine;
pub use shuffle::Shuffled;

/// Sizes that decide the protocol; small values let tests drive the rendezvous path.
#[derive(Debug, Clone, Copy)]
pub struct FabricConfig {
    /// Ranks in the job.
    pub ranks: u32,
    /// Ranks per simulated node (the last node may have fewer).
    pub ranks_per_node: u32,
    /// Messages up to this size go eagerly.
    pub eager_limit: usize,
    /// The largest active-message payload (rendezvous data is streamed in pieces this big).
    pub max_payload: usize,
}

impl FabricConfig {
    /// `ranks` ranks all on one node, with the default thresholds.
    pub fn new(ranks: u32) -> FabricConfig {
        FabricConfig {
            ranks,
            ranks_per_node: ranks.max(1),
            eager_limit: 16 * 1024,
            max_payload: 256 * 1024,
        }
    }
}

/// Which route a mailbox serves.
const SHM: usize = 0;
const NET: usize = 1;

/// The shared state of one thread job: every rank's mailboxes and liveness.
pub struct Fabric {
    config: FabricConfig,
    /// `mailboxes[route][gpid]`.
    mailboxes: [Vec<Mailbox>; 2],
    /// Per rank: [`ALIVE`], [`FAILED`] or [`LEFT`].
    alive: Vec<AtomicU8>,
}

const ALIVE: u8 = 0;
const FAILED: u8 = 1;
const LEFT: u8 = 2;

impl Fabric {
    /// A fabric for `config.ranks` ranks.
    pub fn new(config: FabricConfig) -> Result<Arc<Fabric>> {
        if config.ranks == 0 || config.ranks_per_node == 0 {
            return Err(Error::new(
                ErrorKind::Arg,
                "a fabric needs at least one rank per node",
            ));
        }
        if config.max_payload == 0 {
            return Err(Error::new(ErrorKind::Arg, "max_payload must be positive"));
        }
        let boxes = || (0..config.ranks).map(|_| Mailbox::default()).collect();
        Ok(Arc::new(Fabric {
            config,
            mailboxes: [boxes(), boxes()],
            alive: (0..config.ranks).map(|_| AtomicU8::new(ALIVE)).collect(),
        }))
    }

    /// The settings.
    pub fn config(&self) -> &FabricConfig {
        &self.config
    }

    /// The node a rank sits on.
    pub fn node_of(&self, gpid: Gpid) -> u32 {
        gpid / self.config.ranks_per_node
    }

    /// Marks `gpid` dead, as if its process had been killed. Its peers' requests fail. A rank
    /// that already left in order stays so.
    pub fn kill(&self, gpid: Gpid) {
        if let Some(a) = self.alive.get(gpid as usize) {
            let _ = a.compare_exchange(ALIVE, FAILED, Ordering::AcqRel, Ordering::Acquire);
        }
    }

    /// Marks `gpid` as having left the job in order (it finalized).
    pub fn leave(&self, gpid: Gpid) {
        if let Some(a) = self.alive.get(gpid as usize) {
            a.store(LEFT, Ordering::Release);
        }
    }

    /// Whether `gpid` is alive, left or failed.
    pub fn peer_state(&self, gpid: Gpid) -> PeerState {
        match self
            .alive
            .get(gpid as usize)
            .map(|a| a.load(Ordering::Acquire))
        {
            Some(ALIVE) => PeerState::Alive,
            Some(LEFT) => PeerState::Left,
            _ => PeerState::Failed,
        }
    }

    fn is_alive(&self, gpid: Gpid) -> bool {
        self.peer_state(gpid) == PeerState::Alive
    }

    fn check_rank(&self, gpid: Gpid) -> Result<()> {
        if gpid < self.config.ranks {
            Ok(())
        } else {
            Err(Error::new(
                ErrorKind::Arg,
                format!("rank {gpid} outside a fabric of {}", self.config.ranks),
            ))
        }
    }
}

/// One rank's view of one route: where it sends and what it receives.
struct Endpoint {
    fabric: Arc<Fabric>,
    me: Gpid,
    route: usize,
    inbox: Inbox,
}

impl Endpoint {
    fn new(fabric: Arc<Fabric>, me: Gpid, route: usize) -> Result<Endpoint> {
        fabric.check_rank(me)?;
        Ok(Endpoint {
            fabric,
            me,
            route,
            inbox: Inbox::default(),
        })
    }

    #[inline(always)]
    fn send(&self, dest: Gpid, handler: HandlerId, header: &[u8], payload: &[&[u8]]) -> Result<()> {
        let Some(mb) = self.fabric.mailboxes[self.route].get(dest as usize) else {
            return Err(Error::new(
                ErrorKind::Rank,
                format!(
                    "process {dest} outside a fabric of {}",
                    self.fabric.config.ranks
                ),
            ));
        };
        if !self.fabric.is_alive(dest) {
            return Err(Error::new(
                ErrorKind::PeerFailed,
                format!("process {dest} has exited"),
            ));
        }
        mb.push(self.me, handler, header, payload)
    }

    #[inline(always)]
    fn poll<K: AmSink>(&mut self, sink: &mut K, budget: usize) -> Result<usize> {
        let mb = &self.fabric.mailboxes[self.route][self.me as usize];
        self.inbox.poll(mb, budget, |src, h, hdr, payload| {
            sink.deliver(src, h, hdr, payload)
        })
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        // A rank whose endpoints are gone is dead to its peers (its thread ended or panicked).
        self.fabric.kill(self.me);
    }
}

/// The in-process shared-memory layer: reaches the ranks of this rank's node, itself included.
pub struct InprocShm {
    ep: Endpoint,
    node: u32,
}

impl InprocShm {
    /// The shm endpoint of rank `me`.
    pub fn new(fabric: Arc<Fabric>, me: Gpid) -> Result<InprocShm> {
        let node = fabric.node_of(me);
        Ok(InprocShm {
            ep: Endpoint::new(fabric, me, SHM)?,
            node,
        })
    }
}

impl AmTransport for InprocShm {
    const AM_ORDERED: bool = true;
    const NAME: &'static str = "inproc-shm";

    #[inline(always)]
    fn eager_limit(&self) -> usize {
        self.ep.fabric.config.eager_limit
    }
    #[inline(always)]
    fn am_max_payload(&self) -> usize {
        self.ep.fabric.config.max_payload
    }
    #[inline(always)]
    fn am_send(
        &mut self,
        dest: Gpid,
        h: HandlerId,
        header: &[u8],
        payload: &[&[u8]],
    ) -> Result<()> {
        self.ep.send(dest, h, header, payload)
    }
    #[inline(always)]
    fn am_poll<K: AmSink>(&mut self, sink: &mut K, budget: usize) -> Result<usize> {
        self.ep.poll(sink, budget)
    }
    fn peer_state(&self, gpid: Gpid) -> PeerState {
        self.ep.fabric.peer_state(gpid)
    }
    fn close_connections(&mut self) {
        self.ep.fabric.leave(self.ep.me);
    }
}

impl Shm for InprocShm {
    type P2p = am_fallback::Am;
    #[inline(always)]
    fn is_local(&self, gpid: Gpid) -> bool {
        self.ep.fabric.node_of(gpid) == self.node
    }
}

/// Marker: the netmod carries MPI semantics over active messages (`am_fallback::Am`).
pub struct AmOnly;
/// Marker: the netmod matches messages itself (like libfabric's FI_TAGGED or UCX's tag API).
pub struct Native;

/// The in-process netmod, in one of two flavours chosen by the marker type `M`.
pub struct InprocNet<M> {
    ep: Endpoint,
    native: NativeEngine,
    _mode: PhantomData<M>,
}

impl<M> InprocNet<M> {
    /// The netmod endpoint of rank `me`.
    pub fn new(fabric: Arc<Fabric>, me: Gpid) -> Result<InprocNet<M>> {
        Ok(InprocNet {
            ep: Endpoint::new(fabric, me, NET)?,
            native: NativeEngine::seeded(0x5EED_0000 ^ u64::from(me)),
            _mode: PhantomData,
        })
    }
}

impl InprocNet<Native> {
    /// The natively matching engine and its simulated NIC.
    pub fn engine(&self) -> &NativeEngine {
        &self.native
    }

    /// Mutable access to the engine (to stall its NIC in a test).
    pub fn engine_mut(&mut self) -> &mut NativeEngine {
        &mut self.native
    }
}

macro_rules! am_transport_for_net {
    ($mode:ty, $name:expr) => {
        impl AmTransport for InprocNet<$mode> {
            const AM_ORDERED: bool = true;
            const NAME: &'static str = $name;

            #[inline(always)]
            fn eager_limit(&self) -> usize {
                self.ep.fabric.config.eager_limit
            }
            #[inline(always)]
            fn am_max_payload(&self) -> usize {
                self.ep.fabric.config.max_payload
            }
            #[inline(always)]
            fn am_send(
                &mut self,
                dest: Gpid,
                h: HandlerId,
                header: &[u8],
                payload: &[&[u8]],
            ) -> Result<()> {
                self.ep.send(dest, h, header, payload)
            }
            #[inline(always)]
            fn am_poll<K: AmSink>(&mut self, sink: &mut K, budget: usize) -> Result<usize> {
                self.ep.poll(sink, budget)
            }
            fn peer_state(&self, gpid: Gpid) -> PeerState {
                self.ep.fabric.peer_state(gpid)
            }
            fn close_connections(&mut self) {
                self.ep.fabric.leave(self.ep.me);
            }
            fn has_queued_output(&self) -> bool {
                self.native.busy()
            }
        }
    };
}

am_transport_for_net!(AmOnly, "inproc-am");
am_transport_for_net!(Native, "inproc-native");

impl Netmod for InprocNet<AmOnly> {
    type P2p = am_fallback::Am;
}

impl Netmod for InprocNet<Native> {
    type P2p = NativeEngine;
}

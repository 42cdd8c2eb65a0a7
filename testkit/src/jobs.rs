//! Ready-made jobs, one per transport: the constructors the crates' tests used to write each
//! for themselves. Each returns a [`Harness`] and, where the test needs one, the shared handle
//! of the job's medium (the [`Wire`], the fabric, the segment).

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use ch4_core::core::DeviceConfig;
use ch4_core::transport::Netmod;
use ch4_core::{Error, ErrorKind, Gpid, NoShm, Result};
use inproc::{Fabric, FabricConfig, InprocNet, InprocShm};
use netmod_tcp::TcpNetmod;

use crate::harness::{Harness, Limit};
use crate::pipe::{Pipe, Wire};

/// A job over [`Pipe`]s, each perhaps wrapped (`T`): what [`pipe_job`] builds.
pub type PipeHarness<T = Pipe> = Harness<T, NoShm>;
/// A job over TCP on loopback: what [`tcp_job`] builds.
pub type TcpHarness = Harness<TcpNetmod, NoShm>;
/// A job over the in-process fabric with netmod flavour `M`: what [`inproc_job`] builds.
pub type InprocHarness<M> = Harness<InprocNet<M>, InprocShm>;
/// A job over the real shared-memory layer: what [`shm_job`] builds.
#[cfg(not(loom))]
pub type ShmHarness = Harness<ch4_core::NoNetmod, shm::ShmTransport>;

/// Two devices over a [`Pipe`], with the wire for the test to read and forge frames on.
pub fn pipe_pair(config: DeviceConfig) -> Result<(Wire, PipeHarness)> {
    pipe_job(2, config, |pipe| pipe)
}

/// `ranks` devices over one [`Wire`], each rank's [`Pipe`] passed through `wrap` first — the
/// place to change its limits or put a [`crate::Faulty`] wrapper around it.
pub fn pipe_job<T: Netmod>(
    ranks: u32,
    config: DeviceConfig,
    mut wrap: impl FnMut(Pipe) -> T,
) -> Result<(Wire, PipeHarness<T>)> {
    let wire = Wire::new(ranks as usize);
    let harness = Harness::build(ranks, config, |me| Ok((wrap(wire.endpoint(me)), NoShm)))?;
    Ok((wire, harness))
}

/// `ranks` devices over the TCP netmod on loopback (every rank its own node), connections
/// carrying `key`. `tune(gpid, netmod)` runs on each netmod before the addresses are
/// exchanged (`set_scatter_min` and the like). Connections open lazily, at the first message;
/// [`Harness::pass`] one across when a test must start connected. Waits are bounded by time
/// only (30 s): progress depends on the kernel, so a step count means little.
pub fn tcp_job(
    ranks: u32,
    key: u64,
    config: DeviceConfig,
    mut tune: impl FnMut(Gpid, &mut TcpNetmod),
) -> Result<TcpHarness> {
    let loopback = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
    let mut nets = (0..ranks)
        .map(|me| {
            let mut net = TcpNetmod::bind(me, ranks, key, loopback)?;
            tune(me, &mut net);
            Ok(net)
        })
        .collect::<Result<Vec<_>>>()?;
    let addrs: Vec<SocketAddr> = nets.iter().map(TcpNetmod::local_addr).collect();
    for net in &mut nets {
        for (peer, &addr) in addrs.iter().enumerate() {
            net.set_address(peer as Gpid, addr)?;
        }
    }
    let mut nets = nets.into_iter();
    let harness = Harness::build(ranks, config, |me| {
        let net = nets.next().ok_or_else(|| {
            Error::new(ErrorKind::Internal, format!("no TCP netmod for rank {me}"))
        })?;
        Ok((net, NoShm))
    })?;
    Ok(harness.with_limit(Limit::time(Duration::from_secs(30))))
}

/// A job over the in-process fabric: `fabric.ranks` devices, `fabric.ranks_per_node` to a
/// simulated node (the in-process shm layer within a node, netmod `InprocNet<M>` between
/// nodes), with the fabric for the test to kill ranks on.
pub fn inproc_job<M>(
    fabric: FabricConfig,
    config: DeviceConfig,
) -> Result<(Arc<Fabric>, InprocHarness<M>)>
where
    InprocNet<M>: Netmod,
{
    let ranks = fabric.ranks;
    let fabric = Fabric::new(fabric)?;
    let harness = Harness::build(ranks, config, |me| {
        Ok((
            InprocNet::new(fabric.clone(), me)?,
            InprocShm::new(fabric.clone(), me)?,
        ))
    })?;
    Ok((fabric, harness))
}

/// `ranks` devices on one node over the real shared-memory layer, in anonymous memory (ranks
/// as threads of this process), with the segment for the test to inspect.
#[cfg(not(loom))]
pub fn shm_job(
    ranks: usize,
    geometry: shm::Geometry,
    eager_limit: usize,
    config: DeviceConfig,
) -> Result<(Arc<shm::Segment>, ShmHarness)> {
    let seg = Arc::new(shm::Segment::anonymous(ranks, geometry)?);
    let gpids: Vec<Gpid> = (0..ranks as Gpid).collect();
    let harness = Harness::build(ranks as u32, config, |me| {
        let shm = shm::ShmTransport::new(
            seg.clone(),
            me as usize,
            &gpids,
            ranks as u32,
            eager_limit,
            0,
        )?;
        Ok((ch4_core::NoNetmod, shm))
    })?;
    Ok((seg, harness))
}

//! The CH4 claim, measured: a device generic over its transports, every call inlined, against
//! the same device reaching its shared-memory transport through function pointers.
//!
//! The `dyn` variant wraps the shared-memory transport in [`DynShm`], a `Box<dyn ErasedShm>`:
//! every call from the device and the AM engine into the transport (`am_send`, `am_poll`,
//! `eager_limit`, `can_send_now`, ...) and every delivery from the transport back into the
//! engine (`AmSink::deliver`) becomes an indirect call — the two directions in which MPICH's
//! CH4 goes through its netmod/shm function tables when it is not built with inlining. Nothing
//! else differs: same engine, same rings, same matching.
//!
//! One iteration is an 8-byte `isend` from rank 0, an `irecv` at rank 1 and its `wait`, both
//! devices stepped by this one thread, through [`isend_probe`], [`irecv_probe`] and
//! [`wait_probe`] (never inlined, so that callgrind can name them).
//!
//! Built with the `ofi` feature, the devices carry the libfabric netmod (opened for a job on
//! one node: no endpoint) instead of `NoNetmod`, so the same counts show what building a
//! natively matching netmod in costs the shared-memory path (the device's route choice and the
//! ANY_SOURCE partner checks are then live code).
//!
//! The network route, for the netmod chosen at run time: the same pair between two devices
//! over TCP on loopback with no shared memory, the device over `TcpNetmod` itself
//! (`net-generic`), over `netmod_any::AnyNetmod` holding it (`net-enum`: the enum of every
//! netmod the build has, dispatched by `match`), over it behind a vtable (`net-dyn`) and as the
//! one rail of `Rails` (`net-rails`, the default build's netmod without `CH4_RAILS`); and
//! the shared-memory route of a device over the enum (`shm-enum`) against one over TCP alone
//! (`shm-tcp`). `scripts/inlining-proof.sh --network` builds with all three netmods.
//!
//! `cargo bench --bench inlining -- [iterations] [generic|dyn|enqueue]` (`enqueue`: only the
//! transport's `am_send` of the same message, [`enqueue_probe`]); `scripts/inlining-proof.sh`
//! runs it under `valgrind --tool=callgrind` and prints instructions per pair for both variants,
//! and how many of the generic `isend`'s instructions come before the ring write (the enqueue).

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use ch4_core::bootstrap::Bootstrap;
use ch4_core::buffer::{RecvBuf, SendBuf};
use ch4_core::core::DeviceConfig;
#[cfg(feature = "tcp")]
use ch4_core::transport::NoShm;
use ch4_core::transport::{AmSink, AmTransport, HandlerId, Netmod, PeerRead, PeerState, Shm};
use ch4_core::{CommId, Device, Gpid, ReqHandle, Result, SendMode};
use shm::{Geometry, Segment, ShmTransport};

/// The transport calls, object-safe: `am_poll` takes its sink as `&mut dyn AmSink`.
trait ErasedShm {
    fn eager_limit(&self) -> usize;
    fn am_max_payload(&self) -> usize;
    fn am_send(&mut self, dest: Gpid, h: HandlerId, header: &[u8], payload: &[&[u8]])
        -> Result<()>;
    fn am_poll_dyn(&mut self, sink: &mut dyn AmSink, budget: usize) -> Result<usize>;
    fn peer_state(&self, gpid: Gpid) -> PeerState;
    fn has_queued_output(&self) -> bool;
    fn can_send_now(&mut self, dest: Gpid, bytes: usize) -> bool;
    fn offers_peer_read(&self, dest: Gpid, bytes: usize) -> bool;
    fn read_peer(&mut self, src: Gpid, addr: u64, into: &mut [u8]) -> Result<PeerRead>;
    fn is_local(&self, gpid: Gpid) -> bool;
}

/// A sink reached through a vtable: each delivered message is an indirect call.
struct DynSink<'a>(&'a mut dyn AmSink);

impl AmSink for DynSink<'_> {
    fn deliver(&mut self, src: Gpid, h: HandlerId, header: &[u8], payload: &[u8]) -> Result<()> {
        self.0.deliver(src, h, header, payload)
    }

    fn destination(
        &mut self,
        src: Gpid,
        h: HandlerId,
        header: &[u8],
        len: usize,
    ) -> Option<&mut [u8]> {
        self.0.destination(src, h, header, len)
    }

    fn placed(&mut self, src: Gpid, h: HandlerId, header: &[u8], len: usize) -> Result<()> {
        self.0.placed(src, h, header, len)
    }

    fn wants_more(&self) -> bool {
        self.0.wants_more()
    }
}

impl ErasedShm for ShmTransport {
    fn eager_limit(&self) -> usize {
        AmTransport::eager_limit(self)
    }
    fn am_max_payload(&self) -> usize {
        AmTransport::am_max_payload(self)
    }
    fn am_send(
        &mut self,
        dest: Gpid,
        h: HandlerId,
        header: &[u8],
        payload: &[&[u8]],
    ) -> Result<()> {
        AmTransport::am_send(self, dest, h, header, payload)
    }
    fn am_poll_dyn(&mut self, sink: &mut dyn AmSink, budget: usize) -> Result<usize> {
        AmTransport::am_poll(self, &mut DynSink(sink), budget)
    }
    fn peer_state(&self, gpid: Gpid) -> PeerState {
        AmTransport::peer_state(self, gpid)
    }
    fn has_queued_output(&self) -> bool {
        AmTransport::has_queued_output(self)
    }
    fn can_send_now(&mut self, dest: Gpid, bytes: usize) -> bool {
        AmTransport::can_send_now(self, dest, bytes)
    }
    fn offers_peer_read(&self, dest: Gpid, bytes: usize) -> bool {
        AmTransport::offers_peer_read(self, dest, bytes)
    }
    fn read_peer(&mut self, src: Gpid, addr: u64, into: &mut [u8]) -> Result<PeerRead> {
        AmTransport::read_peer(self, src, addr, into)
    }
    fn is_local(&self, gpid: Gpid) -> bool {
        Shm::is_local(self, gpid)
    }
}

/// The shared-memory transport behind a vtable.
struct DynShm(Box<dyn ErasedShm>);

impl AmTransport for DynShm {
    const AM_ORDERED: bool = true;
    const NAME: &'static str = "shm (dyn)";

    fn eager_limit(&self) -> usize {
        self.0.eager_limit()
    }
    fn am_max_payload(&self) -> usize {
        self.0.am_max_payload()
    }
    fn am_send(
        &mut self,
        dest: Gpid,
        h: HandlerId,
        header: &[u8],
        payload: &[&[u8]],
    ) -> Result<()> {
        self.0.am_send(dest, h, header, payload)
    }
    fn am_poll<K: AmSink>(&mut self, sink: &mut K, budget: usize) -> Result<usize> {
        self.0.am_poll_dyn(sink, budget)
    }
    fn peer_state(&self, gpid: Gpid) -> PeerState {
        self.0.peer_state(gpid)
    }
    fn has_queued_output(&self) -> bool {
        self.0.has_queued_output()
    }
    fn can_send_now(&mut self, dest: Gpid, bytes: usize) -> bool {
        self.0.can_send_now(dest, bytes)
    }
    fn offers_peer_read(&self, dest: Gpid, bytes: usize) -> bool {
        self.0.offers_peer_read(dest, bytes)
    }
    fn read_peer(&mut self, src: Gpid, addr: u64, into: &mut [u8]) -> Result<PeerRead> {
        self.0.read_peer(src, addr, into)
    }
}

impl Shm for DynShm {
    type P2p = am_fallback::Am;

    fn is_local(&self, gpid: Gpid) -> bool {
        self.0.is_local(gpid)
    }
}

/// The netmod the devices carry: none in a default build, libfabric's with `ofi` (never used:
/// both ranks are on one node).
#[cfg(not(feature = "ofi"))]
type Net = ch4_core::NoNetmod;
#[cfg(feature = "ofi")]
type Net = netmod_ofi::OfiNetmod;

/// The public `isend` of 8 bytes, as an application calls it.
#[inline(never)]
fn isend_probe<N: Netmod, S: Shm>(dev: &mut Device<N, S>, comm: CommId, msg: &[u8]) -> ReqHandle {
    // SAFETY: `msg` outlives the request, which completes within the same iteration.
    let buf = unsafe { SendBuf::borrowed(msg) };
    dev.isend(comm, 1, 7, buf, SendMode::Standard)
        .expect("isend")
}

/// The public `irecv`.
#[inline(never)]
fn irecv_probe<N: Netmod, S: Shm>(
    dev: &mut Device<N, S>,
    comm: CommId,
    buf: &mut [u8],
) -> ReqHandle {
    // SAFETY: `buf` outlives the request, which is waited for before `buf` is used again.
    let rb = unsafe { RecvBuf::borrowed(buf) };
    dev.irecv(comm, 0, 7, rb).expect("irecv")
}

/// The transport's enqueue alone: the same 8-byte eager message (a 40-byte match header and
/// the payload) handed straight to the shared-memory transport, as the engine hands it.
#[inline(never)]
fn enqueue_probe(t: &mut ShmTransport, header: &[u8; 40], msg: &[u8]) {
    AmTransport::am_send(t, 1, 1, header, &[msg]).expect("am_send");
}

/// Takes whatever arrives and drops it.
struct Discard;

impl AmSink for Discard {
    fn deliver(&mut self, _: Gpid, _: HandlerId, _: &[u8], _: &[u8]) -> Result<()> {
        Ok(())
    }
}

/// The public `wait`.
#[inline(never)]
fn wait_probe<N: Netmod, S: Shm>(dev: &mut Device<N, S>, r: ReqHandle) {
    dev.wait(r).expect("wait");
}

fn run<S: Shm>(mk: impl Fn(usize) -> S, iters: u64, name: &str) {
    let net = |rank| Net::open(rank, 2, 0, false).expect("netmod");
    pairs(net, mk, iters, name);
}

/// `iters` pairs between two devices made of `net(rank)` and `shm(rank)`, after one pair that
/// both devices are stepped through together (a network's connection is made on first
/// contact and needs both sides to progress).
fn pairs<N: Netmod, S: Shm>(
    net: impl Fn(Gpid) -> N,
    shm: impl Fn(usize) -> S,
    iters: u64,
    name: &str,
) {
    let cfg = DeviceConfig::default();
    let mut a = Device::new(net(0), shm(0), 0, 2, cfg).expect("device 0");
    let mut b = Device::new(net(1), shm(1), 1, 2, cfg).expect("device 1");
    {
        let (wa, wb) = (a.world(), b.world());
        let msg = [7u8; 8];
        let mut buf = [0u8; 8];
        let s = isend_probe(&mut a, wa, &msg);
        let r = irecv_probe(&mut b, wb, &mut buf);
        let (mut sent, mut got) = (false, false);
        while !(sent && got) {
            a.progress().expect("progress");
            b.progress().expect("progress");
            sent = sent || a.test(s).expect("test").is_some();
            got = got || b.test(r).expect("test").is_some();
        }
    }
    let (wa, wb) = (a.world(), b.world());
    let msg = [7u8; 8];
    let mut buf = [0u8; 8];
    let start = Instant::now();
    for _ in 0..iters {
        let s = isend_probe(&mut a, wa, black_box(&msg));
        let r = irecv_probe(&mut b, wb, &mut buf);
        wait_probe(&mut b, r);
        wait_probe(&mut a, s);
    }
    let ns = start.elapsed().as_nanos() as f64 / iters as f64;
    println!("{name}: {iters} isend+irecv+wait pairs, {ns:.1} ns each");
}

/// The network calls, object-safe, for the TCP netmod behind a vtable.
#[cfg(feature = "tcp")]
trait ErasedNet {
    fn eager_limit(&self) -> usize;
    fn am_max_payload(&self) -> usize;
    fn am_send(&mut self, dest: Gpid, h: HandlerId, header: &[u8], payload: &[&[u8]])
        -> Result<()>;
    fn am_poll_dyn(&mut self, sink: &mut dyn AmSink, budget: usize) -> Result<usize>;
    fn peer_state(&self, gpid: Gpid) -> PeerState;
    fn has_queued_output(&self) -> bool;
    fn can_send_now(&mut self, dest: Gpid, bytes: usize) -> bool;
    fn stream_piece(&self, crowded: bool) -> usize;
    fn first_piece(&self) -> usize;
}

#[cfg(feature = "tcp")]
impl ErasedNet for netmod_tcp::TcpNetmod {
    fn eager_limit(&self) -> usize {
        AmTransport::eager_limit(self)
    }
    fn am_max_payload(&self) -> usize {
        AmTransport::am_max_payload(self)
    }
    fn am_send(
        &mut self,
        dest: Gpid,
        h: HandlerId,
        header: &[u8],
        payload: &[&[u8]],
    ) -> Result<()> {
        AmTransport::am_send(self, dest, h, header, payload)
    }
    fn am_poll_dyn(&mut self, sink: &mut dyn AmSink, budget: usize) -> Result<usize> {
        AmTransport::am_poll(self, &mut DynSink(sink), budget)
    }
    fn peer_state(&self, gpid: Gpid) -> PeerState {
        AmTransport::peer_state(self, gpid)
    }
    fn has_queued_output(&self) -> bool {
        AmTransport::has_queued_output(self)
    }
    fn can_send_now(&mut self, dest: Gpid, bytes: usize) -> bool {
        AmTransport::can_send_now(self, dest, bytes)
    }
    fn stream_piece(&self, crowded: bool) -> usize {
        AmTransport::stream_piece(self, crowded)
    }
    fn first_piece(&self) -> usize {
        AmTransport::first_piece(self)
    }
}

/// The TCP netmod behind a vtable: every call from the device and the AM engine into it, and
/// every delivery back, an indirect call (Nemesis's netmod function table).
#[cfg(feature = "tcp")]
struct DynNet(Box<dyn ErasedNet>);

#[cfg(feature = "tcp")]
impl AmTransport for DynNet {
    const AM_ORDERED: bool = true;
    const NAME: &'static str = "tcp (dyn)";

    fn eager_limit(&self) -> usize {
        self.0.eager_limit()
    }
    fn am_max_payload(&self) -> usize {
        self.0.am_max_payload()
    }
    fn am_send(
        &mut self,
        dest: Gpid,
        h: HandlerId,
        header: &[u8],
        payload: &[&[u8]],
    ) -> Result<()> {
        self.0.am_send(dest, h, header, payload)
    }
    fn am_poll<K: AmSink>(&mut self, sink: &mut K, budget: usize) -> Result<usize> {
        self.0.am_poll_dyn(sink, budget)
    }
    fn peer_state(&self, gpid: Gpid) -> PeerState {
        self.0.peer_state(gpid)
    }
    fn has_queued_output(&self) -> bool {
        self.0.has_queued_output()
    }
    fn can_send_now(&mut self, dest: Gpid, bytes: usize) -> bool {
        self.0.can_send_now(dest, bytes)
    }
    fn stream_piece(&self, crowded: bool) -> usize {
        self.0.stream_piece(crowded)
    }
    fn first_piece(&self) -> usize {
        self.0.first_piece()
    }
}

#[cfg(feature = "tcp")]
impl Netmod for DynNet {
    type P2p = am_fallback::Am;
}

/// Two TCP netmods of one job in this process, each with the other's card.
#[cfg(feature = "tcp")]
fn tcp_pair() -> [Option<netmod_tcp::TcpNetmod>; 2] {
    let mut nets = [0, 1].map(|r| netmod_tcp::TcpNetmod::open(r, 2, 7, true).expect("tcp"));
    let cards: Vec<Vec<u8>> = nets
        .iter()
        .map(|n| n.business_card().expect("card"))
        .collect();
    for n in &mut nets {
        n.learn_cards(&cards).expect("cards");
    }
    nets.map(Some)
}

/// The network route over TCP on loopback (no shared memory: every message crosses the
/// netmod): the device over `TcpNetmod` itself (`net-generic`), over the enum of the build's
/// netmods holding it (`net-enum`), over it behind a vtable (`net-dyn`), and over it as the one
/// rail of `netmod_rails::Rails` (`net-rails`: the default build's netmod without `CH4_RAILS`).
#[cfg(feature = "tcp")]
fn network_route(variant: &str, iters: u64) {
    let nets = std::cell::RefCell::new(tcp_pair());
    let take = |r: Gpid| {
        nets.borrow_mut()[r as usize]
            .take()
            .expect("one netmod a rank")
    };
    match variant {
        "net-generic" => pairs(take, |_| NoShm, iters, variant),
        "net-enum" => pairs(
            |r| netmod_any::AnyNetmod::from(take(r)),
            |_| NoShm,
            iters,
            variant,
        ),
        "net-dyn" => pairs(|r| DynNet(Box::new(take(r))), |_| NoShm, iters, variant),
        "net-rails" => pairs(
            |r| netmod_rails::Rails::single(take(r)),
            |_| NoShm,
            iters,
            variant,
        ),
        _ => unreachable!("a network variant"),
    }
}

/// The shared-memory route of a device over the enum of the build's netmods (`shm-enum`), and
/// of one over the TCP netmod alone (`shm-tcp`, the default build's device), both opened for a
/// job on one node: on-node traffic never passes the netmod, enum or not.
#[cfg(feature = "tcp")]
fn shm_route_with(variant: &str, transport: impl Fn(usize) -> ShmTransport, iters: u64) {
    if variant == "shm-enum" {
        let net = |r| netmod_any::AnyNetmod::open(r, 2, 0, false).expect("netmod");
        pairs(net, transport, iters, variant);
    } else {
        let net = |r| netmod_tcp::TcpNetmod::open(r, 2, 0, false).expect("netmod");
        pairs(net, transport, iters, variant);
    }
}

fn main() {
    let iters: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        // `cargo test` runs benches without `--bench`: a short smoke run then.
        .unwrap_or(if std::env::args().any(|a| a == "--bench") {
            100_000
        } else {
            2_000
        });
    let only = std::env::args().find(|a| {
        [
            "generic",
            "dyn",
            "enqueue",
            "shm-enum",
            "shm-tcp",
            "net-generic",
            "net-enum",
            "net-dyn",
            "net-rails",
        ]
        .contains(&a.as_str())
    });
    #[cfg(feature = "tcp")]
    if let Some(v) = only.as_deref().filter(|v| v.starts_with("net-")) {
        network_route(v, iters);
        return;
    }
    let seg = Arc::new(Segment::anonymous(2, Geometry::with_ring(1 << 16)).expect("segment"));
    let transport =
        |me: usize| ShmTransport::new(seg.clone(), me, &[0, 1], 2, 16 << 10, 0).expect("transport");
    if only.is_none() || only.as_deref() == Some("generic") {
        run(transport, iters, "generic");
    }
    #[cfg(feature = "tcp")]
    if let Some(v) = only
        .as_deref()
        .filter(|v| *v == "shm-enum" || *v == "shm-tcp")
    {
        shm_route_with(v, transport, iters);
        return;
    }
    if only.as_deref() == Some("enqueue") {
        // The enqueue on its own, for the split of the isend (a pair of its own).
        let seg = Arc::new(Segment::anonymous(2, Geometry::with_ring(1 << 16)).expect("segment"));
        let mut tx = ShmTransport::new(seg.clone(), 0, &[0, 1], 2, 16 << 10, 0).expect("tx");
        let mut rx = ShmTransport::new(seg, 1, &[0, 1], 2, 16 << 10, 0).expect("rx");
        let header = [3u8; 40];
        for _ in 0..iters {
            enqueue_probe(&mut tx, &header, black_box(&[7u8; 8]));
            AmTransport::am_poll(&mut rx, &mut Discard, 64).expect("drain");
        }
    }
    if only.is_none() || only.as_deref() == Some("dyn") {
        let seg = Arc::new(Segment::anonymous(2, Geometry::with_ring(1 << 16)).expect("segment"));
        let transport = |me: usize| {
            let t = ShmTransport::new(seg.clone(), me, &[0, 1], 2, 16 << 10, 0).expect("transport");
            DynShm(Box::new(t))
        };
        run(transport, iters, "dyn");
    }
}

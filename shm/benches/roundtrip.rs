//! Cost of small messages through the whole stack (public send → device → AM engine → ring →
//! poll → match → copy → completion), with both ranks' devices driven by one thread so that no
//! time or instruction is spent waiting. Under `valgrind --tool=callgrind` the instruction
//! counts are exact and repeatable.
//!
//! Two patterns: blocking 8-byte ping-pong round trips (latency), and windows of 64
//! nonblocking 8-byte sends into 64 posted receives (the osu_bw / message-rate pattern).
//!
//! `cargo bench -p shm --bench roundtrip [-- iterations] [pingpong|window]` (one pattern only
//! when named, so that callgrind counts it alone)

use std::sync::Arc;
use std::time::Instant;

use ch4_core::buffer::{RecvBuf, SendBuf};
use ch4_core::core::DeviceConfig;
use ch4_core::{Device, NoNetmod, ReqHandle, SendMode};
use shm::{Segment, ShmTransport};

const WINDOW: usize = 64;

fn main() {
    let iters: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(if std::env::args().any(|a| a == "--bench") {
            2_000_000
        } else {
            10_000
        });
    let only = std::env::args().find(|a| a == "pingpong" || a == "window");
    let run = |pattern: &str| only.as_deref().map_or(true, |o| o == pattern);
    let seg = Arc::new(Segment::anonymous(2, shm::Geometry::with_ring(1 << 16)).expect("segment"));
    let mk = |me: usize| {
        let t = ShmTransport::new(seg.clone(), me, &[0, 1], 2, 16 << 10, 0).expect("transport");
        Device::new(NoNetmod, t, me as u32, 2, DeviceConfig::default()).expect("device")
    };
    let (mut a, mut b) = (mk(0), mk(1));
    let (wa, wb) = (a.world(), b.world());
    let msg = [7u8; 8];
    let mut buf = [0u8; 8];

    let iters_pp = if run("pingpong") { iters } else { 0 };
    let start = Instant::now();
    for _ in 0..iters_pp {
        a.send(wa, 1, 1, &msg, SendMode::Standard).expect("send");
        b.recv(wb, 0, 1, &mut buf).expect("recv");
        b.send(wb, 0, 1, &buf, SendMode::Standard).expect("send");
        a.recv(wa, 1, 1, &mut buf).expect("recv");
    }
    let ns = start.elapsed().as_nanos() as f64 / iters as f64;
    println!("# ch4 single-thread message costs, 8 bytes, shm rings");
    println!(
        "ping-pong: iterations {iters}  ns/round-trip {ns:.1}  ns/message {:.1}",
        ns / 2.0
    );

    let windows = if run("window") {
        (iters / WINDOW as u64).max(1)
    } else {
        0
    };
    let mut bufs = vec![[0u8; 8]; WINDOW];
    let start = Instant::now();
    for _ in 0..windows {
        let recvs = post_receives(&mut b, wb, &mut bufs);
        let sends = start_sends(&mut a, wa, &msg);
        wait_receives(&mut b, recvs);
        wait_sends(&mut a, sends);
    }
    let ns = start.elapsed().as_nanos() as f64 / (windows * WINDOW as u64) as f64;
    println!("windows of {WINDOW} isend/irecv: ns/message {ns:.1}");
}

// The window's four phases, never inlined, so that callgrind names each one's cost (the
// receiver's posting, the sender's starting, the receiver's completion — which polls the ring,
// matches and copies — and the sender's completion). Inside each, the device inlines as it does
// in an application.

type ShmDevice = Device<NoNetmod, ShmTransport>;

#[inline(never)]
fn post_receives(
    b: &mut ShmDevice,
    comm: ch4_core::CommId,
    bufs: &mut [[u8; 8]],
) -> Vec<ReqHandle> {
    let mut recvs = Vec::with_capacity(WINDOW);
    for slot in bufs.iter_mut() {
        // SAFETY: `bufs` outlives the requests, all of which complete in this iteration.
        let rb = unsafe { RecvBuf::borrowed(slot) };
        recvs.push(b.irecv(comm, 0, 2, rb).expect("irecv"));
    }
    recvs
}

#[inline(never)]
fn start_sends(a: &mut ShmDevice, comm: ch4_core::CommId, msg: &[u8; 8]) -> Vec<ReqHandle> {
    let mut sends = Vec::with_capacity(WINDOW);
    for _ in 0..WINDOW {
        // SAFETY: `msg` outlives the requests, all of which complete in this iteration.
        let sb = unsafe { SendBuf::borrowed(msg) };
        sends.push(a.isend(comm, 1, 2, sb, SendMode::Standard).expect("isend"));
    }
    sends
}

#[inline(never)]
fn wait_receives(b: &mut ShmDevice, recvs: Vec<ReqHandle>) {
    for r in recvs {
        b.wait(r).expect("wait recv");
    }
}

#[inline(never)]
fn wait_sends(a: &mut ShmDevice, sends: Vec<ReqHandle>) {
    for s in sends {
        a.wait(s).expect("wait send");
    }
}

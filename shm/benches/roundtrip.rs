//! Cost of one small-message round trip through the whole stack (public send → device → AM
//! engine → ring → poll → match → copy → completion, and back), with both ranks' devices driven
//! by one thread so that no time or instruction is spent waiting. Under
//! `valgrind --tool=callgrind` the instruction count per round trip is exact and repeatable.
//!
//! `cargo bench -p shm --bench roundtrip [-- iterations]`

use std::sync::Arc;
use std::time::Instant;

use ch4_core::core::DeviceConfig;
use ch4_core::{Device, NoNetmod, SendMode};
use shm::{Segment, ShmTransport};

fn main() {
    let iters: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(if std::env::args().any(|a| a == "--bench") {
            2_000_000
        } else {
            10_000
        });
    let seg = Arc::new(Segment::anonymous(2, 1 << 16).expect("segment"));
    let mk = |me: usize| {
        let t = ShmTransport::new(seg.clone(), me, &[0, 1], 2, 16 << 10, 0).expect("transport");
        Device::new(NoNetmod, t, me as u32, 2, DeviceConfig::default()).expect("device")
    };
    let (mut a, mut b) = (mk(0), mk(1));
    let (wa, wb) = (a.world(), b.world());
    let msg = [7u8; 8];
    let mut buf = [0u8; 8];
    let start = Instant::now();
    for _ in 0..iters {
        a.send(wa, 1, 1, &msg, SendMode::Standard).expect("send");
        b.recv(wb, 0, 1, &mut buf).expect("recv");
        b.send(wb, 0, 1, &buf, SendMode::Standard).expect("send");
        a.recv(wa, 1, 1, &mut buf).expect("recv");
    }
    let ns = start.elapsed().as_nanos() as f64 / iters as f64;
    println!("# ch4 single-thread round trip, 8 bytes, shm rings");
    println!(
        "iterations {iters}  ns/round-trip {ns:.1}  ns/message {:.1}",
        ns / 2.0
    );
}

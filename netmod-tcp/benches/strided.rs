//! Receiving into a strided (vector-layout) buffer over TCP: read straight into the blocks
//! with one `readv` per read, or copied out of the decoder block by block. The two ranks are
//! stepped in one thread over loopback, so the figure is the CPU cost of both sides of the
//! transfer; each block size runs both ways, interleaved, several rounds, and prints medians and
//! their ratio. This is what sets the default of `CH4_TCP_SCATTER_MIN` (blocks of 512 bytes
//! split a 1 MiB piece into more iovecs than one `readv` takes, so both columns copy there).
//!
//! `cargo bench -p netmod-tcp --bench strided [-- rounds]`

use std::time::Instant;

use ch4_core::buffer::{RecvBuf, SendBuf};
use ch4_core::core::DeviceConfig;
use ch4_core::datatype::Layout;
use testkit::{tcp_job, TcpHarness};

/// A connected pair whose receiver reads strided payloads in place only if `scatter`.
fn pair(scatter: bool) -> TcpHarness {
    let scatter_min = if scatter { 0 } else { usize::MAX };
    let mut h = tcp_job(2, 5, DeviceConfig::default(), |rank, net| {
        if rank == 1 {
            net.set_scatter_min(scatter_min);
        }
    })
    .unwrap();
    h.pass(0, 1, 0, b"hi").unwrap();
    h
}

/// MB/s moving `reps` messages of `bytes` into a vector layout of `block`-byte blocks (or,
/// with `strided_send`, out of one into a contiguous receive).
fn run(scatter: bool, strided_send: bool, block: usize, bytes: usize, reps: usize) -> f64 {
    let mut h = pair(scatter);
    let count = bytes / block;
    let layout = Layout::vector::<u8>(count, block, block + 64).unwrap();
    let strided = vec![7u8; layout.extent_bytes()];
    let packed = vec![7u8; count * block];
    let mut strided_in = vec![0u8; layout.extent_bytes()];
    let mut packed_in = vec![0u8; count * block];
    let start = Instant::now();
    for _ in 0..reps {
        // SAFETY: the buffers outlive the transfer, which completes both requests before it
        // returns.
        let (recv_buf, send_buf) = unsafe {
            if strided_send {
                (
                    RecvBuf::borrowed(&mut packed_in),
                    SendBuf::borrowed_with_layout(&strided, layout.clone()).unwrap(),
                )
            } else {
                (
                    RecvBuf::borrowed_with_layout(&mut strided_in, layout.clone()).unwrap(),
                    SendBuf::borrowed(&packed),
                )
            }
        };
        let t = h.transfer(0, 1, 1, send_buf, recv_buf).unwrap();
        assert_eq!(t.send.error, None);
    }
    (count * block * reps) as f64 / 1e6 / start.elapsed().as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    // `cargo test` runs benches without `--bench`: then one quick round of small transfers.
    let smoke = !std::env::args().any(|a| a == "--bench");
    let rounds: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(if smoke { 1 } else { 5 });
    let (bytes, reps) = if smoke { (1 << 18, 2) } else { (4 << 20, 40) };
    println!(
        "# strided receive over TCP loopback, {} KiB messages, medians of {rounds}",
        bytes >> 10
    );
    println!("# Block      readv (MB/s)    copy (MB/s)    readv/copy");
    for block in [512, 1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10] {
        let (mut direct, mut copied) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            direct.push(run(true, false, block, bytes, reps));
            copied.push(run(false, false, block, bytes, reps));
        }
        let (d, c) = (median(direct), median(copied));
        println!("{block:<10}{d:>16.0}{c:>15.0}{:>14.2}", d / c);
    }
    // The sending side: a strided send into a contiguous receive (blocks of up to 64 per
    // rendezvous piece go to the socket as a gather list; more are packed first).
    println!("# strided send, contiguous receive");
    println!("# Block       send (MB/s)");
    for block in [16 << 10, 64 << 10, 256 << 10] {
        let sends: Vec<f64> = (0..rounds)
            .map(|_| run(true, true, block, bytes, reps))
            .collect();
        println!("{block:<10}{:>16.0}", median(sends));
    }
}

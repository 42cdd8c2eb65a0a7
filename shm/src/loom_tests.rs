//! Model checks of the ring protocol: `scripts/loom.sh` (RUSTFLAGS="--cfg loom", with a
//! preemption bound that keeps the run to seconds). Loom explores the interleavings and
//! weak-memory outcomes of producer and consumer, with the body bytes in tracked cells and the
//! header words as atomics, so a missing ordering shows up as a race or a wrong byte.

use crate::ring::loom_support::ring;
use loom::thread;

/// Sends `sizes.len()` records with the given payload sizes and checks them on the other side.
fn stream(capacity: usize, sizes: &'static [usize]) {
    let (mut p, mut c, _keep) = ring(capacity);
    let t = thread::spawn(move || {
        let mut sent = 0;
        while sent < sizes.len() {
            let v = sent as u8;
            if p.push(v, &[v], &[&vec![v; sizes[sent]]]).is_ok() {
                sent += 1;
            } else {
                thread::yield_now();
            }
        }
    });
    let mut next = 0;
    while next < sizes.len() {
        match c.pop_with(|h, hd, pl| (h, hd.to_vec(), pl.to_vec())) {
            Some(r) => {
                let (h, hd, pl) = r.unwrap();
                let v = next as u8;
                assert_eq!((h, hd), (v, vec![v]));
                assert_eq!(pl, vec![v; sizes[next]]);
                next += 1;
            }
            None => thread::yield_now(),
        }
    }
    t.join().unwrap();
}

#[test]
fn loom_records_arrive_whole_and_in_order() {
    // One-line records: exercises publishing and the cleared slot after each record.
    loom::model(|| stream(256, &[5, 9]));
}

#[test]
fn loom_wraparound_with_padding() {
    // 64 + 128 bytes fill [0, 192); the third record (128) pads [192, 256) and starts the next
    // lap at 0 while the consumer may still be reading the first.
    loom::model(|| stream(256, &[20, 100, 100]));
}

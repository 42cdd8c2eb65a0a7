//! Model checks of the ring protocol: `RUSTFLAGS="--cfg loom" cargo test -p shm --release loom`.
//! Loom explores the interleavings and weak-memory outcomes of the producer and consumer, with
//! the data area in tracked cells, so a wrong ordering shows up as a race or a wrong byte.
//! `scripts/loom.sh` runs them with a preemption bound that keeps the run to a few minutes.

use crate::ring::loom_support::ring;
use loom::thread;

#[test]
fn loom_records_arrive_whole_and_in_order() {
    loom::model(|| {
        let (mut p, mut c, _keep) = ring(64);
        let t = thread::spawn(move || {
            let mut sent = 0u8;
            while sent < 2 {
                if p.push(sent, &[sent; 3], &[&[sent; 5]]).is_ok() {
                    sent += 1;
                } else {
                    thread::yield_now();
                }
            }
        });
        let mut next = 0u8;
        while next < 2 {
            match c.pop_with(|h, hd, pl| (h, hd.to_vec(), pl.to_vec())) {
                Some(r) => {
                    let (h, hd, pl) = r.unwrap();
                    assert_eq!(h, next);
                    assert_eq!(hd, vec![next; 3]);
                    assert_eq!(pl, vec![next; 5]);
                    next += 1;
                }
                None => thread::yield_now(),
            }
        }
        t.join().unwrap();
    });
}

#[test]
fn loom_wraparound_with_padding() {
    loom::model(|| {
        // 64-byte ring, 24-byte records: the third record pads to the start while the
        // consumer may still be reading the first.
        let (mut p, mut c, _keep) = ring(64);
        let t = thread::spawn(move || {
            let mut sent = 0u8;
            while sent < 4 {
                if p.push(sent, &[], &[&[sent; 16]]).is_ok() {
                    sent += 1;
                } else {
                    thread::yield_now();
                }
            }
        });
        let mut next = 0u8;
        while next < 4 {
            match c.pop_with(|h, _, pl| (h, pl.to_vec())) {
                Some(r) => {
                    let (h, pl) = r.unwrap();
                    assert_eq!((h, pl), (next, vec![next; 16]));
                    next += 1;
                }
                None => thread::yield_now(),
            }
        }
        t.join().unwrap();
    });
}

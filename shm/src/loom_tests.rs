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

/// `senders` ranks with `cells` cells each send `per_sender` messages to the last rank, which
/// checks that every message arrives whole and each sender's in order. With one cell per sender
/// every further message reuses the cell the receiver has just freed, so freeing and refilling
/// are modelled too.
fn cells_to_one_receiver(senders: usize, cells: usize, per_sender: u64) {
    use crate::cells::{heap, CellSendError};
    let (_keep, tx, mut rx) = heap::cells(senders + 1, cells, 128);
    let mut handles = Vec::new();
    for (id, mut s) in tx.into_iter().take(senders).enumerate() {
        handles.push(thread::spawn(move || {
            let mut seq = 0;
            while seq < per_sender {
                let v = (id as u8) * 16 + seq as u8;
                match s.send(senders, seq, id as u8, &[v], &[&[v, v]]) {
                    Ok(()) => seq += 1,
                    Err(CellSendError::NoFreeCell) => thread::yield_now(),
                    Err(e) => panic!("{e:?}"),
                }
            }
        }));
    }
    let mut next = vec![0u64; senders];
    while next.iter().any(|&n| n < per_sender) {
        let Some(front) = rx[senders].front() else {
            thread::yield_now();
            continue;
        };
        let front = front.unwrap();
        assert_eq!(front.seq, next[front.from]);
        let v = (front.from as u8) * 16 + front.seq as u8;
        let (h, hd, pl) = rx[senders]
            .pop_with(|h, hd, pl| (h, hd.to_vec(), pl.to_vec()))
            .unwrap()
            .unwrap();
        assert_eq!((h as usize, hd, pl), (front.from, vec![v], vec![v, v]));
        next[front.from] += 1;
    }
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn loom_cells_from_two_senders_arrive_whole_and_in_order() {
    // Both appenders race on the tail; the receiver may meet a swapped but unlinked cell, and
    // may empty the queue while the second appender is swapping in.
    loom::model(|| cells_to_one_receiver(2, 2, 1));
}

#[test]
fn loom_a_freed_cell_is_refilled_and_requeued() {
    // One cell, three messages: the sender refills the cell as soon as the receiver frees it,
    // and appends it to a queue the receiver has just emptied (or is emptying).
    loom::model(|| cells_to_one_receiver(1, 1, 3));
}

/// Two local ranks run `ops` collectives through one slot of collective lanes by
/// `ch4_core::node_coll`'s protocol. Allgather: each waits until both arrived at `op - 1`,
/// publishes, arrives at `op`, waits until both arrived at `op`, reads the other's outbox.
/// Broadcast from rank 0: the root publishes (after the same wait) and arrives; rank 1
/// arrives, waits for the root's arrival and reads; so the root may run one operation ahead
/// into the other outbox. Outboxes of 8 bytes, so that loom tracks every byte.
fn lanes(ops: u64, allgather: bool) {
    use crate::lanes::Lanes;
    use crate::sync::Bytes;
    const OUTBOX: usize = 8;
    let bytes = Bytes::zeroed(2 * Lanes::lane_size(OUTBOX));
    let rank = move |me: usize, bytes: Bytes| {
        move || {
            let l = Lanes::new(bytes, 2, 1, OUTBOX);
            let wait_all = |op: u64| {
                while (0..2).any(|r| l.arrived(0, r) < op) {
                    thread::yield_now();
                }
            };
            for op in 1..=ops {
                let payload = [me as u8, op as u8, 0xa5];
                if allgather || me == 0 {
                    wait_all(op - 1);
                    // SAFETY: `me` writes only its own lane, after both arrived at `op - 1`.
                    unsafe { l.publish(0, me, op, &payload) };
                }
                l.arrive(0, me, op);
                let from = if allgather { 1 - me } else { 0 };
                if from == me {
                    continue;
                }
                while l.arrived(0, from) < op {
                    thread::yield_now();
                }
                // SAFETY: saw `from` arrive at `op`; arrives at `op + 1` only after the read.
                let got = unsafe { l.read(0, from, op, |b| b.to_vec()) };
                assert_eq!(got, [from as u8, op as u8, 0xa5]);
            }
        }
    };
    let other = thread::spawn(rank(1, bytes.clone()));
    rank(0, bytes)();
    other.join().unwrap();
}

#[test]
fn loom_lanes_allgather_reuses_both_outboxes() {
    // Three operations: the third writes the outbox the first used.
    loom::model(|| lanes(3, true));
}

#[test]
fn loom_lanes_broadcasts_run_one_operation_ahead() {
    loom::model(|| lanes(3, false));
}

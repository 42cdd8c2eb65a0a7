//! Shared memory as a receiver reads it: the ring records and cell headers another process
//! wrote into the node segment, and the consumer index and busy words a sender reads back.
//! The fuzzer plays a foreign or broken process writing what it likes between honest writes;
//! the reader must report a corrupt segment, never panic, loop or touch memory outside it.

use shm::cells::{CellQueue, CellReceiver, CellSender, CELL_HEADER};
use shm::ring::{Consumer, Producer, RingIndices};

use crate::input::Input;

/// A 128-byte-aligned block, so that the areas below are aligned like the segment's.
#[repr(C, align(128))]
#[derive(Clone, Copy)]
struct Line([u8; 128]);

/// Zeroed memory of at least `bytes`, 128-byte aligned; fresh zeroed memory is an empty ring
/// and empty queues, as in a new segment.
fn area(bytes: usize) -> Vec<Line> {
    vec![Line([0; 128]); bytes.div_ceil(128)]
}

/// Writes `bytes` at `offset` (wrapping) into the `len`-byte area at `base`: a foreign
/// process's store.
///
/// # Safety
/// `base .. base + len` must be live, writable memory that nothing reads or writes during the
/// call (the fuzz bodies are one thread, and the ends aliasing the area are idle between
/// calls).
unsafe fn poke(base: *mut u8, len: usize, offset: usize, bytes: &[u8]) {
    for (i, &b) in bytes.iter().enumerate() {
        // SAFETY: the index is reduced modulo the area's length; the caller vouches for the
        // area.
        unsafe { base.add((offset + i) % len).write_volatile(b) };
    }
}

/// A ring of 4 or 8 KiB between an honest producer and the consumer under test, with the
/// input's operations in between: push a record, pop one, or overwrite bytes of the ring (its
/// data or the consumer index the producer reads). Every record popped lies inside the ring,
/// a corrupt one is reported, and the producer never writes outside the ring.
pub fn ring(data: &[u8]) {
    let mut input = Input::new(data);
    let capacity = if input.u8() & 1 == 0 { 4096 } else { 8192 };
    let mut indices = area(std::mem::size_of::<RingIndices>());
    let mut ring = area(capacity);
    let (ilen, dlen) = (indices.len() * 128, ring.len() * 128);
    let ib = indices.as_mut_ptr().cast::<u8>();
    let ip = ib.cast_const().cast::<RingIndices>();
    let dp = ring.as_mut_ptr().cast::<u8>();
    // SAFETY: both areas are zeroed, 128-aligned, live until the end of this function (the
    // ends are dropped first: declared after them), `capacity` is a power of two ≥ 4096, and
    // this is the ring's one producer and one consumer.
    let (mut p, mut c) = unsafe {
        (
            Producer::new(ip, dp, capacity),
            Consumer::new(ip, dp, capacity),
        )
    };
    let payload = [0xC4u8; 4096];
    while !input.is_empty() {
        match input.u8() % 5 {
            0 | 1 => {
                let handler = input.u8();
                let header = {
                    let n = usize::from(input.u8() % 64);
                    input.bytes(n)
                }
                .to_vec();
                let plen = usize::from(input.u16()) % (capacity / 2);
                let _ = p.push(handler, &header, &[&payload[..plen.min(payload.len())]]);
            }
            2 => {
                for _ in 0..usize::from(input.u8() % 8) + 1 {
                    let _ = c.watch(1);
                    let _ = c.is_empty();
                    match c.pop_with(|h, hd, pl| (h, hd.len(), pl.len())) {
                        None => break,
                        Some(Ok((_, hlen, plen))) => assert!(hlen + plen <= capacity),
                        Some(Err(_)) => break,
                    }
                }
            }
            3 => {
                let at = usize::from(input.u16());
                let bytes = {
                    let n = usize::from(input.u8() % 16) + 1;
                    input.bytes(n)
                }
                .to_vec();
                // SAFETY: the ring's data area, idle between operations.
                unsafe { poke(dp, dlen, at, &bytes) };
            }
            _ => {
                let at = usize::from(input.u8());
                let bytes = input.bytes(8).to_vec();
                // SAFETY: the ring's index, idle between operations.
                unsafe { poke(ib, ilen, at, &bytes) };
            }
        }
    }
}

/// Cells for two ranks (four cells each, 128 or 256 bytes), both ranks' senders honest, the
/// receiver under test rank 1's, with the input's operations: send, receive, or overwrite
/// bytes of the cells or the queues (links, busy words, lengths, heads and tails). The
/// receiver reports a corrupt list, never panics or reads outside the area.
pub fn cells(data: &[u8]) {
    const RANKS: usize = 2;
    const PER_RANK: usize = 4;
    let mut input = Input::new(data);
    let cell_size = if input.u8() & 1 == 0 { 128 } else { 256 };
    let mut queues = area(RANKS * std::mem::size_of::<CellQueue>());
    let mut cells = area(RANKS * PER_RANK * cell_size);
    let (qlen, clen) = (queues.len() * 128, cells.len() * 128);
    let qb = queues.as_mut_ptr().cast::<u8>();
    let qp = qb.cast_const().cast::<CellQueue>();
    let cp = cells.as_mut_ptr().cast::<u8>();
    // SAFETY: the areas are zeroed (empty queues, free cells), 128-aligned and large enough for
    // RANKS queues and RANKS * PER_RANK cells of `cell_size` (a multiple of 64); they outlive
    // the ends (declared after them, so dropped first); one sender per rank and one receiver.
    let (mut senders, mut receiver) = unsafe {
        (
            [0, 1].map(|me| CellSender::new(qp, cp, RANKS, PER_RANK, cell_size, me)),
            CellReceiver::new(qp, cp, RANKS, PER_RANK, cell_size, 1),
        )
    };
    let payload = [0x4Du8; 256];
    let mut seq = [0u64; 2];
    while !input.is_empty() {
        match input.u8() % 5 {
            0 | 1 => {
                let from = usize::from(input.u8() & 1);
                let handler = input.u8();
                let header = {
                    let n = usize::from(input.u8() % 32);
                    input.bytes(n)
                }
                .to_vec();
                let plen = usize::from(input.u8()) % (cell_size - CELL_HEADER + 8);
                if senders[from]
                    .send(1, seq[from], handler, &header, &[&payload[..plen]])
                    .is_ok()
                {
                    seq[from] += 1;
                }
            }
            2 => {
                for _ in 0..usize::from(input.u8() % 8) + 1 {
                    let _ = receiver.looks_empty();
                    match receiver.front() {
                        None | Some(Err(_)) => break,
                        Some(Ok(front)) => assert!(front.from < RANKS),
                    }
                    match receiver.pop_with(|h, hd, pl| (h, hd.len(), pl.len())) {
                        Some(Ok((_, hlen, plen))) => {
                            assert!(hlen + plen <= cell_size - CELL_HEADER)
                        }
                        None | Some(Err(_)) => break,
                    }
                }
            }
            3 => {
                let at = usize::from(input.u16());
                let bytes = {
                    let n = usize::from(input.u8() % 16) + 1;
                    input.bytes(n)
                }
                .to_vec();
                // SAFETY: the cell area, idle between operations.
                unsafe { poke(cp, clen, at, &bytes) };
            }
            _ => {
                let at = usize::from(input.u16());
                let bytes = input.bytes(8).to_vec();
                // SAFETY: the queues, idle between operations.
                unsafe { poke(qb, qlen, at, &bytes) };
            }
        }
    }
}

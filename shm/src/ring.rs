//! A single-producer single-consumer ring of variable-length records in shared memory.
//!
//! One ring carries the messages of one ordered pair of ranks (sender → receiver), so each side
//! is the only writer of what it owns and no read-modify-write atomics are needed.
//!
//! **The record header is the flag.** Records start on cache-line boundaries; each begins with
//! a header word (`length u24 | sequence u8 | handler u8 | header length u8 | kind u8 | lap u8`),
//! followed by
//! the active-message header and the payload. The producer writes the body first and then
//! publishes the record by storing its header word with `Release`; the consumer polls the header
//! word at its position with `Acquire`. A small message is therefore one cache line that travels
//! once from the sender's core to the receiver's — no separate index line to transfer first
//! (Nemesis fastboxes get the same effect with per-pair slots). The word carries the *lap* (the
//! position divided by the capacity, modulo 256) so that bytes left from an earlier lap can never
//! pass for a new record, and kind 0 means "nothing here", so fresh zeroed memory is an empty
//! ring. Because a record boundary of one lap may fall inside the body of a record of the lap
//! before, the producer clears the header slot that follows each record before publishing it;
//! lap boundaries themselves are always record starts (records never wrap), so the lap tag covers
//! them.
//!
//! The only index is `head`, written by the consumer after it has read a record (`Release`) and
//! read by the producer only when its cached copy says the ring is full (`Acquire`): space is
//! reused only after the consumer is done with it. A record never wraps; when it does not fit
//! before the end, the producer publishes a padding record and starts at offset 0, which is why a
//! record may use at most half the capacity — an empty ring always has room for it.
//!
//! Positions are byte offsets that only grow (u64: centuries at memory bandwidth). Inside a
//! shared segment everything is an offset from the segment base, never a pointer.

use crossbeam_utils::CachePadded;

use crate::sync::{AtomicU64, Ordering};

/// Bytes of the record header word.
pub const RECORD_HEADER: usize = 8;
/// Records start on this boundary (a cache line), so a record of up to this size is one line.
pub const RECORD_ALIGN: usize = 64;
/// Records up to this span have their lines after the first prefetched as soon as the header
/// word is seen. Measured on this project's 2-core host (osu_latency and osu_bw, interleaved
/// against no prefetch, medians of 5-8 rounds): 64-512 B latency 0.86-0.90x and 1-2 KiB
/// bandwidth 1.10-1.15x in the host's fast mode, no change in its slow one; records of 4-8 KiB
/// lost 7% of their streaming bandwidth with it (the hardware prefetcher follows a stream by
/// itself), so they are left alone.
const PREFETCHED_RECORD_MAX: usize = 2048 + RECORD_ALIGN;
const KIND_EMPTY: u64 = 0;
const KIND_MESSAGE: u64 = 1;
const KIND_PAD: u64 = 2;

/// The consumer's index of one ring, as laid out in shared memory. Zero bytes are a fresh ring.
#[repr(C)]
pub struct RingIndices {
    /// Next byte the consumer will read; written only by the consumer.
    head: CachePadded<AtomicU64>,
}

#[inline(always)]
const fn align_record(n: usize) -> usize {
    (n + RECORD_ALIGN - 1) & !(RECORD_ALIGN - 1)
}

/// The largest header + payload one record can carry in a ring of `capacity` bytes.
pub const fn max_record_body(capacity: usize) -> usize {
    capacity / 2 - RECORD_HEADER
}

/// The largest ring capacity: a record's length must fit the header word's 24 bits.
pub const MAX_CAPACITY: usize = 16 << 20;

/// Packs a header word. `lap` is the record's position divided by the capacity; `seq` the low
/// bits of the message's sequence number on its pair of ranks (see the transport: a pair's
/// messages may also travel through cells, and the receiver puts them back in order).
#[inline(always)]
fn header_word(total: usize, seq: u8, handler: u8, hlen: u8, kind: u64, lap: u64) -> u64 {
    (total as u64)
        | (u64::from(seq) << 24)
        | (u64::from(handler) << 32)
        | (u64::from(hlen) << 40)
        | (kind << 48)
        | ((lap & 0xFF) << 56)
}

use crate::sync::Bytes;

/// Where a record goes (see `Producer::place`).
struct Placement {
    pad: usize,
    end: u64,
    clear_next: bool,
}

/// The sending end of a ring.
pub struct Producer {
    indices: *const RingIndices,
    data: Bytes,
    mask: usize,
    capacity: usize,
    tail: u64,
    head_cache: u64,
    /// Number of the next message of this pair (records tag themselves with its low 8 bits).
    seq: u64,
    /// Largest record body this end accepts (at most [`max_record_body`]).
    record_max: usize,
}

/// The receiving end of a ring.
pub struct Consumer {
    indices: *const RingIndices,
    data: Bytes,
    mask: usize,
    capacity: usize,
    head: u64,
    /// Number of the next message of this pair to deliver, whichever way it comes.
    seq: u64,
}

// SAFETY: each end is the only user of its side of the ring (the producer writes free space and
// header words of records it publishes; the consumer reads published records and writes `head`);
// moving an end to another thread moves that exclusive role with it. The shared memory outlives
// both ends (whoever owns them keeps the segment alive).
unsafe impl Send for Producer {}
// SAFETY: as for `Producer`.
unsafe impl Send for Consumer {}

/// Why a push did not happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushError {
    /// No room now; try again after the consumer has caught up.
    Full,
    /// The record can never fit this ring (more than half its capacity).
    TooLarge,
}

impl Producer {
    /// The producer end of the ring whose index is at `indices` and whose `capacity`-byte data
    /// area starts at `data`.
    ///
    /// # Safety
    /// `indices` and `data .. data + capacity` must be valid shared memory for as long as this
    /// end exists, `data` 64-byte aligned; `capacity` a power of two ≥ 4096; the ring must be
    /// fresh (zeroed) and at most one `Producer` may ever exist for it.
    #[cfg(not(loom))]
    pub unsafe fn new(indices: *const RingIndices, data: *mut u8, capacity: usize) -> Producer {
        Producer {
            indices,
            data: Bytes { ptr: data },
            mask: capacity - 1,
            capacity,
            tail: 0,
            head_cache: 0,
            seq: 0,
            record_max: max_record_body(capacity),
        }
    }

    /// Refuses (as [`PushError::TooLarge`]) records with bodies over `bytes`, so that only the
    /// smallest messages take this ring and the rest go another way.
    pub fn limit_record(&mut self, bytes: usize) {
        self.record_max = self.record_max.min(bytes);
    }

    /// Takes the pair's next message number for a message that goes another way (a cell).
    #[inline]
    pub fn take_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq - 1
    }

    /// Number the pair's next message will get.
    #[inline]
    pub fn next_seq(&self) -> u64 {
        self.seq
    }

    #[inline(always)]
    fn indices(&self) -> &RingIndices {
        // SAFETY: `new`'s contract keeps the index valid while this end exists.
        unsafe { &*self.indices }
    }

    #[inline(always)]
    fn lap(&self, position: u64) -> u64 {
        // The capacity is a power of two: a shift, not a division, on every push.
        position >> self.capacity.trailing_zeros()
    }

    /// Appends one record (`header` followed by the concatenated `payload` slices), numbered as
    /// the pair's next message. Never blocks.
    #[inline(always)]
    pub fn push(&mut self, handler: u8, header: &[u8], payload: &[&[u8]]) -> Result<(), PushError> {
        let plen: usize = payload.iter().map(|p| p.len()).sum();
        let body = header.len() + plen;
        if body > self.record_max || header.len() > u8::MAX as usize {
            return Err(PushError::TooLarge);
        }
        let Placement {
            pad,
            end,
            clear_next,
        } = self.place(body);
        if !self.room_for(end, clear_next) {
            return Err(PushError::Full);
        }
        let mut position = self.tail;
        if pad != 0 {
            let word = header_word(pad, 0, 0, 0, KIND_PAD, self.lap(position));
            let idx = (position as usize) & self.mask;
            // SAFETY: `idx` is a record boundary (64-aligned) inside the free space checked above.
            unsafe { self.data.word(idx) }.store(word, Ordering::Release);
            position += pad as u64;
        }
        let at = (position as usize) & self.mask;
        // SAFETY: [at, at + need) lies in free space owned by the producer (checked above) and
        // does not wrap (padding moved it to 0 otherwise); the body goes after the header word.
        unsafe {
            let mut off = at + RECORD_HEADER;
            self.data.write(off, header);
            off += header.len();
            for p in payload {
                self.data.write(off, p);
                off += p.len();
            }
        }
        if clear_next {
            // The next record's header slot may hold body bytes of an earlier lap, which could
            // by chance look like a header of this lap. Clearing it before publishing this
            // record means the consumer, arriving there after reading this record, sees either
            // "empty" or the next real header. Relaxed suffices: the Release below orders it.
            let next = (end as usize) & self.mask;
            // SAFETY: `next` is a 64-aligned record boundary inside the free space checked above.
            unsafe { self.data.word(next) }.store(0, Ordering::Relaxed);
        }
        let word = header_word(
            RECORD_HEADER + body,
            self.seq as u8,
            handler,
            header.len() as u8,
            KIND_MESSAGE,
            self.lap(position),
        );
        // Release: the body written above becomes visible before the word that publishes it.
        // SAFETY: `at` is a 64-aligned record boundary inside the data area.
        unsafe { self.data.word(at) }.store(word, Ordering::Release);
        self.tail = end;
        self.seq += 1;
        Ok(())
    }

    /// Whether a record with `body` bytes of header + payload would fit now.
    #[inline]
    pub fn has_room(&mut self, body: usize) -> bool {
        if body > self.record_max {
            return false;
        }
        let p = self.place(body);
        self.room_for(p.end, p.clear_next)
    }

    /// Where the next record of `body` bytes goes: padding first if it would not fit before the
    /// end, the position after it, and whether the header slot after it
    /// (inside the same lap) must be cleared before publishing — then those 8 bytes must be free
    /// too.
    #[inline(always)]
    fn place(&self, body: usize) -> Placement {
        let need = align_record(RECORD_HEADER + body);
        let idx = (self.tail as usize) & self.mask;
        let to_end = self.capacity - idx;
        let pad = if to_end < need { to_end } else { 0 };
        let end = self.tail + (pad + need) as u64;
        Placement {
            pad,
            end,
            // A mask, not `%`: the capacity is a power of two, and a 64-bit division on every
            // push cost more than the rest of `place`.
            clear_next: end & self.mask as u64 != 0,
        }
    }

    /// Whether everything up to `end` (and the header slot after it, when it will be cleared)
    /// is free; reloads the consumer's index only when the cached one says no.
    #[inline(always)]
    fn room_for(&mut self, end: u64, clear_next: bool) -> bool {
        let reach = end + if clear_next { RECORD_HEADER as u64 } else { 0 };
        if reach - self.head_cache <= self.capacity as u64 {
            return true;
        }
        // Acquire: the consumer's reads of the space we are about to reuse are done.
        self.head_cache = self.indices().head.load(Ordering::Acquire);
        reach - self.head_cache <= self.capacity as u64
    }
}

impl Consumer {
    /// The consumer end; see [`Producer::new`].
    ///
    /// # Safety
    /// As for [`Producer::new`], with "at most one `Consumer`".
    #[cfg(not(loom))]
    pub unsafe fn new(indices: *const RingIndices, data: *mut u8, capacity: usize) -> Consumer {
        Consumer {
            indices,
            data: Bytes { ptr: data },
            mask: capacity - 1,
            capacity,
            head: 0,
            seq: 0,
        }
    }

    /// Number of the pair's next message to deliver.
    #[inline]
    pub fn expected_seq(&self) -> u64 {
        self.seq
    }

    /// Counts a message of the pair delivered another way (a cell).
    #[inline]
    pub fn skip_seq(&mut self) {
        self.seq += 1;
    }

    #[inline(always)]
    fn indices(&self) -> &RingIndices {
        // SAFETY: `new`'s contract keeps the index valid while this end exists.
        unsafe { &*self.indices }
    }

    /// The header word at the consumer's position if a record for this lap is published there.
    #[inline(always)]
    fn published(&self) -> Option<u64> {
        let at = (self.head as usize) & self.mask;
        // SAFETY: `head` is always a record boundary (64-aligned) inside the data area.
        let word = unsafe { self.data.word(at) }.load(Ordering::Acquire);
        // A shift rather than a division: this runs on every poll of an idle ring.
        let lap = (self.head >> self.capacity.trailing_zeros()) & 0xFF;
        let kind = (word >> 48) & 0xFF;
        (kind != KIND_EMPTY && word >> 56 == lap).then_some(word)
    }

    /// Whether no record is waiting (one load of the line the next record will arrive in).
    #[inline(always)]
    pub fn is_empty(&mut self) -> bool {
        self.published().is_none()
    }

    /// Hands the oldest record to `f` as (handler, header, payload) borrowed from the ring, then
    /// frees its space — if it is the pair's next message. `None` when the ring is empty or its
    /// oldest record is numbered later (an earlier message of the pair is still on its way by
    /// another path). `Err` if the ring holds a record that cannot be valid (a corrupted
    /// segment): the ring is then unusable.
    #[inline]
    pub fn pop_with<R>(
        &mut self,
        f: impl FnOnce(u8, &[u8], &[u8]) -> R,
    ) -> Option<Result<R, CorruptRing>> {
        loop {
            let word = self.published()?;
            let at = (self.head as usize) & self.mask;
            let total = (word & 0xFF_FFFF) as usize;
            let handler = (word >> 32) as u8;
            let hlen = ((word >> 40) & 0xFF) as usize;
            let kind = (word >> 48) & 0xFF;
            let span = align_record(total);
            if total < RECORD_HEADER || at + span > self.capacity {
                return Some(Err(CorruptRing));
            }
            if kind == KIND_PAD {
                self.head += span as u64;
                self.indices().head.store(self.head, Ordering::Release);
                continue;
            }
            if kind != KIND_MESSAGE || hlen > total - RECORD_HEADER {
                return Some(Err(CorruptRing));
            }
            if (word >> 24) as u8 != self.seq as u8 {
                return None;
            }
            let body = total - RECORD_HEADER;
            if span > RECORD_ALIGN && span <= PREFETCHED_RECORD_MAX {
                // The record's further lines: fetched while the sink matches the message, so
                // that its copy, which comes after the match, does not wait for them.
                self.data.prefetch(at + RECORD_ALIGN, span - RECORD_ALIGN);
            }
            // SAFETY: the record [at, at + total) was published by the Acquire load of its word
            // and stays ours until we move `head`.
            let r = unsafe {
                self.data.with_slice(at + RECORD_HEADER, body, |b| {
                    let (h, p) = b.split_at(hlen);
                    f(handler, h, p)
                })
            };
            self.head += span as u64;
            self.seq += 1;
            // Release: our reads of the record happen before the producer may reuse its space.
            self.indices().head.store(self.head, Ordering::Release);
            return Some(Ok(r));
        }
    }
}

/// The ring's bytes do not form valid records: the segment was corrupted (a peer that dies
/// mid-write cannot cause this — a record is published only when complete — so it means a bug or
/// a foreign writer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CorruptRing;

/// A ring on the heap for tests (both ends in this process).
#[cfg(all(test, not(loom)))]
pub(crate) struct HeapRing {
    _indices: Box<RingIndices>,
    _data: Vec<[u64; 8]>,
}

#[cfg(all(test, not(loom)))]
pub(crate) fn heap_ring(capacity: usize) -> (HeapRing, Producer, Consumer) {
    let indices = Box::new(RingIndices {
        head: CachePadded::new(AtomicU64::new(0)),
    });
    // `[u64; 8]` elements make the area 8-aligned; the tests only need 8-byte alignment.
    let mut data = vec![[0u64; 8]; capacity / 64];
    let ip: *const RingIndices = &*indices;
    let dp = data.as_mut_ptr() as *mut u8;
    // SAFETY: both allocations live in the returned HeapRing, which the tests keep alive longer
    // than the ends; the ring is fresh; one producer and one consumer.
    let (p, c) = unsafe {
        (
            Producer::new(ip, dp, capacity),
            Consumer::new(ip, dp, capacity),
        )
    };
    (
        HeapRing {
            _indices: indices,
            _data: data,
        },
        p,
        c,
    )
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn pop(c: &mut Consumer) -> Option<(u8, Vec<u8>, Vec<u8>)> {
        c.pop_with(|h, hd, p| (h, hd.to_vec(), p.to_vec()))
            .map(|r| r.unwrap())
    }

    #[test]
    fn records_round_trip_in_order() {
        let (_keep, mut p, mut c) = heap_ring(4096);
        assert!(pop(&mut c).is_none());
        p.push(3, b"hdr", &[b"pay", b"load"]).unwrap();
        p.push(4, b"", &[]).unwrap();
        assert_eq!(pop(&mut c), Some((3, b"hdr".to_vec(), b"payload".to_vec())));
        assert_eq!(pop(&mut c), Some((4, vec![], vec![])));
        assert!(pop(&mut c).is_none());
    }

    #[test]
    fn full_then_drained_and_wraps_with_padding_across_laps() {
        let (_keep, mut p, mut c) = heap_ring(4096);
        let big = [7u8; 1500]; // 1508 bytes → 1536 with alignment
        p.push(1, &[], &[&big]).unwrap(); // [0, 1536)
        p.push(1, &[], &[&big]).unwrap(); // [1536, 3072)
        assert_eq!(p.push(1, &[], &[&big]), Err(PushError::Full));
        assert_eq!(pop(&mut c).unwrap().2, big.to_vec());
        // 1536 free at the front, 1024 at the end: a 1408-byte record pads to the start (a
        // 1536-byte one would not fit: the header slot after it must be free to be cleared).
        let smaller = [8u8; 1400];
        assert_eq!(p.push(2, &[], &[&big]), Err(PushError::Full));
        p.push(2, &[], &[&smaller]).unwrap();
        assert_eq!(pop(&mut c).unwrap().0, 1);
        assert_eq!(pop(&mut c).unwrap(), (2, vec![], smaller.to_vec()));
        assert!(pop(&mut c).is_none());
        // Many laps: stale records of earlier laps must never be read again.
        for round in 0..50u32 {
            let n = (round as usize * 37) % 900;
            p.push(round as u8, &round.to_le_bytes(), &[&vec![round as u8; n]])
                .unwrap();
            let (h, hd, pl) = pop(&mut c).unwrap();
            assert_eq!(
                (h, hd, pl.len()),
                (round as u8, round.to_le_bytes().to_vec(), n)
            );
            assert!(
                pop(&mut c).is_none(),
                "a stale record was taken for a new one"
            );
        }
        assert_eq!(p.push(1, &[], &[&[0u8; 2041]]), Err(PushError::TooLarge));
    }

    #[test]
    fn body_bytes_of_an_earlier_lap_never_pass_for_a_header() {
        let (_keep, mut p, mut c) = heap_ring(4096);
        // Lap 0: a record whose body, at ring offset 64 (a record boundary in later laps),
        // holds a perfectly formed header word for lap 1.
        let forged = header_word(RECORD_HEADER + 4, 0, 9, 0, KIND_MESSAGE, 1).to_ne_bytes();
        let mut body = vec![0u8; 2000];
        body[56..64].copy_from_slice(&forged); // record body starts at offset 8
        p.push(1, &[], &[&body]).unwrap(); // [0, 2048)
        p.push(2, &[], &[&[0u8; 2000]]).unwrap(); // [2048, 4096): ends lap 0
        assert_eq!(pop(&mut c).unwrap().0, 1);
        assert_eq!(pop(&mut c).unwrap().0, 2);
        // Lap 1: one small record at offset 0; the consumer then looks at offset 64.
        p.push(3, &[], &[b"x"]).unwrap();
        assert_eq!(pop(&mut c).unwrap().0, 3);
        assert!(
            pop(&mut c).is_none(),
            "stale body bytes were read as a record"
        );
    }

    #[test]
    fn a_record_numbered_ahead_waits_for_the_messages_before_it() {
        let (_keep, mut p, mut c) = heap_ring(4096);
        // Messages 0 and 1 of the pair go another way (cells); message 2 by the ring.
        assert_eq!((p.take_seq(), p.take_seq()), (0, 1));
        p.push(1, b"", &[b"x"]).unwrap();
        assert_eq!(c.pop_with(|h, _, _| h), None, "message 0 not delivered yet");
        c.skip_seq();
        assert_eq!(c.pop_with(|h, _, _| h), None, "message 1 not delivered yet");
        c.skip_seq();
        assert_eq!(c.expected_seq(), 2);
        assert_eq!(c.pop_with(|h, _, _| h), Some(Ok(1)));
        assert_eq!(c.expected_seq(), 3);
        // A gap of 256 would alias: the transport keeps gaps below that (MAX_CELLS_PER_RANK).
        p.take_seq();
        p.push(2, b"", &[]).unwrap();
        assert_eq!(c.pop_with(|h, _, _| h), None);
    }

    #[test]
    fn corrupt_bytes_are_an_error_not_a_panic() {
        let (_keep, mut p, mut c) = heap_ring(4096);
        p.push(1, b"x", &[]).unwrap();
        // Overwrite the record header with a length running past the end of the buffer.
        // SAFETY: test-only poke into our own heap ring while no push is running.
        unsafe { c.data.word(0) }.store(
            header_word(5000, 0, 1, 1, KIND_MESSAGE, 0),
            Ordering::Release,
        );
        assert_eq!(c.pop_with(|_, _, _| ()), Some(Err(CorruptRing)));
    }

    #[test]
    fn two_threads_stream_many_records_in_order() {
        let (keep, mut p, mut c) = heap_ring(4096);
        let n: u64 = if cfg!(debug_assertions) {
            200_000
        } else {
            1_000_000
        };
        let producer = std::thread::spawn(move || {
            let mut i = 0u64;
            while i < n {
                let len = (i % 61) as usize;
                let payload = vec![(i % 251) as u8; len];
                match p.push((i % 200) as u8, &i.to_le_bytes(), &[&payload]) {
                    Ok(()) => i += 1,
                    Err(PushError::Full) => std::hint::spin_loop(),
                    Err(PushError::TooLarge) => panic!("record {i} too large"),
                }
            }
        });
        let mut next = 0u64;
        while next < n {
            let got = c.pop_with(|h, hd, pl| {
                let seq = u64::from_le_bytes(hd.try_into().unwrap());
                assert_eq!(seq, next);
                assert_eq!(h, (seq % 200) as u8);
                assert_eq!(pl.len(), (seq % 61) as usize);
                assert!(pl.iter().all(|&b| b == (seq % 251) as u8));
            });
            match got {
                Some(r) => {
                    r.unwrap();
                    next += 1;
                }
                None => std::hint::spin_loop(),
            }
        }
        producer.join().unwrap();
        drop(keep);
    }
}

#[cfg(loom)]
pub(crate) mod loom_support {
    //! Builds a ring on loom-tracked memory for model checking.
    use super::*;
    use std::sync::Arc;

    /// Both ends of a ring of `capacity` bytes, the index shared through an `Arc`.
    pub(crate) fn ring(capacity: usize) -> (Producer, Consumer, Arc<RingIndices>) {
        let indices = Arc::new(RingIndices {
            head: CachePadded::new(AtomicU64::new(0)),
        });
        let data = Bytes::zeroed(capacity);
        let ip: *const RingIndices = Arc::as_ptr(&indices);
        let p = Producer {
            indices: ip,
            data: data.clone(),
            mask: capacity - 1,
            capacity,
            tail: 0,
            head_cache: 0,
            seq: 0,
            record_max: max_record_body(capacity),
        };
        let c = Consumer {
            indices: ip,
            data,
            mask: capacity - 1,
            capacity,
            head: 0,
            seq: 0,
        };
        (p, c, indices)
    }
}

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
//! ring. Because a record boundary of one lap may fall inside the body of a record of an earlier
//! lap (or of a padding record's unwritten body), the producer keeps one bit per line saying
//! whether its start may hold such bytes, and clears the word after a record before publishing
//! it when that bit is set. A word it does not clear is zero or a header of the previous lap
//! (every lap writes a header or body bytes over every line start outside padding), which the lap
//! tag rejects. So a stream of records of one size never clears anything — clearing after every
//! record took, on every message, the line the consumer was polling. Lap boundaries themselves
//! are always record starts (records never wrap), so the lap tag covers them.
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
/// Record bodies from this size on (every record of two lines or more) are written first line
/// last (see `Producer::push`). Measured on this project's 2-core host, interleaved against
/// writing in order, in its slow mode: osu_latency 128 B-2 KiB 0.78-0.94x (6 rounds); at 64 B
/// (two lines) 0.77x (12 pairs, 0.49 to 0.37 µs) once waiting ranks spun without pausing,
/// which made the consumer take the first line back sooner. In the fast mode 64 B costs 1.05x
/// (20 pairs, 0.089 to 0.092 µs), and osu_mbw_mr and osu_bw at 32-128 B do not change in
/// either mode (50 pairs fast, 4 slow).
const LATE_FIRST_LINE_BODY: usize = RECORD_ALIGN - RECORD_HEADER + 1;
const KIND_EMPTY: u64 = 0;
const KIND_MESSAGE: u64 = 1;
const KIND_PAD: u64 = 2;

/// Whether header word `word` publishes a record (or padding) of the lap tagged `lap`.
#[inline(always)]
fn is_record_of_lap(word: u64, lap: u64) -> bool {
    (word >> 48) & 0xFF != KIND_EMPTY && word >> 56 == lap
}

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

/// A [`Producer::dirty`] map for a ring of `capacity` bytes, all clean (a fresh ring is zero).
fn dirty_map(capacity: usize) -> Vec<u64> {
    vec![0; (capacity / RECORD_ALIGN).div_ceil(64)]
}

/// Where a record goes (see `Producer::place`).
struct Placement {
    pad: usize,
    end: u64,
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
    /// One bit per line of the ring: set while the word at the line's start may hold bytes that
    /// the consumer could take for a header of a later lap — body bytes of a record longer than
    /// a line, or whatever a padding record's body left (see [`Producer::push`]).
    dirty: Vec<u64>,
    /// How many bits of `dirty` are set: while none is (a stream of one-line records), a push
    /// touches no bit.
    dirty_lines: usize,
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
            dirty: dirty_map(capacity),
            dirty_lines: 0,
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
        let Placement { pad, end } = self.place(body);
        if !self.room_for(end) {
            return Err(PushError::Full);
        }
        let mut position = self.tail;
        if pad != 0 {
            let word = header_word(pad, 0, 0, 0, KIND_PAD, self.lap(position));
            let idx = (position as usize) & self.mask;
            // The padding's body is never written: whatever words it holds stay there, and a
            // header word of this lap among them could pass for a record 256 laps on.
            self.mark_dirty(idx + RECORD_ALIGN, self.capacity);
            self.mark_clean(idx);
            // SAFETY: `idx` is a record boundary (64-aligned) inside the free space checked above.
            unsafe { self.data.word(idx) }.store(word, Ordering::Release);
            position += pad as u64;
        }
        let at = (position as usize) & self.mask;
        let span = (end - position) as usize;
        if self.dirty_lines != 0 {
            self.mark_clean(at);
        }
        if span > RECORD_ALIGN {
            self.mark_dirty(at + RECORD_ALIGN, at + span);
        }
        // SAFETY: [at, at + need) lies in free space owned by the producer (checked above) and
        // does not wrap (padding moved it to 0 otherwise); the body goes after the header word.
        unsafe {
            if body < LATE_FIRST_LINE_BODY {
                let mut off = at + RECORD_HEADER;
                self.data.write_fresh(off, header);
                off += header.len();
                for p in payload {
                    self.data.write(off, p);
                    off += p.len();
                }
            } else {
                // The lines after the first are written first, and the first — the one the
                // consumer polls — last, right before its header word: written in order, the
                // first line was taken by the consumer's next poll while the stores to the later
                // ones still waited for their lines, and had to be taken back for the word.
                let first_line_body = RECORD_ALIGN - RECORD_HEADER;
                self.write_body(at + RECORD_HEADER, header, payload, first_line_body..body);
                self.write_body(at + RECORD_HEADER, header, payload, 0..first_line_body);
            }
        }
        // The consumer, once it has read this record, looks at the word where the next one
        // will start. If that word may hold bytes that pass for a header of this lap (see
        // `dirty`), it is cleared first; Relaxed suffices, the Release below orders it. Other
        // words there are a header of an earlier lap, which the lap tag rejects, or zero.
        // (Clearing it after every record, as before, took that line from the consumer's cache
        // on every message — the line it was polling: osu_mbw_mr lost a third of its rate to
        // it in this project's 2-core host's slow mode.)
        let next = (end as usize) & self.mask;
        if self.dirty_lines != 0 && next != 0 && self.is_dirty(next) {
            // SAFETY: `next` is a 64-aligned record boundary inside the data area; the
            // consumer has not reached it (it is at or after this record's end).
            unsafe { self.data.word(next) }.store(0, Ordering::Relaxed);
            self.mark_clean(next);
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

    #[inline(always)]
    fn is_dirty(&self, offset: usize) -> bool {
        let line = offset / RECORD_ALIGN;
        self.dirty
            .get(line / 64)
            .is_some_and(|w| w & (1 << (line % 64)) != 0)
    }

    #[inline(always)]
    fn mark_clean(&mut self, offset: usize) {
        let line = offset / RECORD_ALIGN;
        if let Some(w) = self.dirty.get_mut(line / 64) {
            let bit = 1 << (line % 64);
            if *w & bit != 0 {
                *w &= !bit;
                self.dirty_lines -= 1;
            }
        }
    }

    /// Marks the line starts in `[from, to)` (byte offsets in the ring) dirty.
    #[inline]
    fn mark_dirty(&mut self, from: usize, to: usize) {
        let (mut line, end) = (from / RECORD_ALIGN, to.div_ceil(RECORD_ALIGN));
        while line < end {
            let (word, bit) = (line / 64, line % 64);
            let n = (64 - bit).min(end - line);
            let bits = if n == 64 {
                u64::MAX
            } else {
                ((1u64 << n) - 1) << bit
            };
            if let Some(w) = self.dirty.get_mut(word) {
                self.dirty_lines += (bits & !*w).count_ones() as usize;
                *w |= bits;
            }
            line += n;
        }
    }

    /// Writes the bytes `range` of a record's body (`header` followed by the `payload` slices)
    /// at `start` plus their offset in the body.
    ///
    /// # Safety
    /// `[start, start + body length)` lies in free space owned by the producer.
    #[inline(always)]
    unsafe fn write_body(
        &self,
        start: usize,
        header: &[u8],
        payload: &[&[u8]],
        range: std::ops::Range<usize>,
    ) {
        let mut piece_start = 0;
        for piece in std::iter::once(header).chain(payload.iter().copied()) {
            let piece_end = piece_start + piece.len();
            let (from, to) = (range.start.max(piece_start), range.end.min(piece_end));
            if from < to {
                // SAFETY: within the body, which the caller guarantees is ours to write.
                unsafe {
                    self.data
                        .write(start + from, &piece[from - piece_start..to - piece_start])
                };
            }
            piece_start = piece_end;
        }
    }

    /// Whether a record with `body` bytes of header + payload would fit now.
    #[inline]
    pub fn has_room(&mut self, body: usize) -> bool {
        if body > self.record_max {
            return false;
        }
        self.room_for(self.place(body).end)
    }

    /// Where the next record of `body` bytes goes: padding first if it would not fit before the
    /// end, and the position after it.
    #[inline(always)]
    fn place(&self, body: usize) -> Placement {
        let need = align_record(RECORD_HEADER + body);
        let idx = (self.tail as usize) & self.mask;
        let to_end = self.capacity - idx;
        let pad = if to_end < need { to_end } else { 0 };
        let end = self.tail + (pad + need) as u64;
        Placement { pad, end }
    }

    /// Whether everything up to `end` is free; reloads the consumer's index only when the cached
    /// one says no. The index is another process's write: one past `end` (a corrupted segment)
    /// wraps to "no room" instead of overflowing (a panic where overflow is checked).
    #[inline(always)]
    fn room_for(&mut self, end: u64) -> bool {
        if end.wrapping_sub(self.head_cache) <= self.capacity as u64 {
            return true;
        }
        // Acquire: the consumer's reads of the space we are about to reuse are done.
        self.head_cache = self.indices().head.load(Ordering::Acquire);
        end.wrapping_sub(self.head_cache) <= self.capacity as u64
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

    /// Watches the word where the next record will be published, for up to `loads` loads,
    /// and returns whether one was. Between loads it increments a local in memory: on this
    /// project's 2-core host (AMD EPYC), two C processes passing one-line records through two
    /// rings read, one-way, in its fast / slow mode: 0.062 / 0.28 µs with nothing between the
    /// loads, 0.034 / 0.11-0.15 with two to four such increments, 0.18 (slow) with a `pause`,
    /// 0.22-0.27 (slow) with as many `nop`s. A reader that asks for the line back as fast as
    /// it can delays the writer that holds it; a progress poll's worth of other work between
    /// loads (about 15 ns) spaces them too far apart (0.20-0.24 slow).
    #[inline]
    pub fn watch(&self, loads: usize) -> bool {
        let word = self.head_word();
        let lap = self.head_lap();
        let mut spacer = [0u64; 2];
        for i in 0..loads {
            // Relaxed: only a hint; `pop_with` reads the word again with Acquire.
            if is_record_of_lap(word.load(Ordering::Relaxed), lap) {
                return true;
            }
            spacer[i & 1] += 1;
            std::hint::black_box(&mut spacer);
        }
        false
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
        let word = self.head_word().load(Ordering::Acquire);
        is_record_of_lap(word, self.head_lap()).then_some(word)
    }

    /// The header word at the consumer's position.
    #[inline(always)]
    fn head_word(&self) -> &AtomicU64 {
        let at = (self.head as usize) & self.mask;
        // SAFETY: `head` is always a record boundary (64-aligned) inside the data area.
        unsafe { self.data.word(at) }
    }

    /// The lap tag a record at the consumer's position carries (the lap modulo 256). A shift
    /// rather than a division: this runs on every poll of an idle ring.
    #[inline(always)]
    fn head_lap(&self) -> u64 {
        (self.head >> self.capacity.trailing_zeros()) & 0xFF
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
                self.release(span);
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
            self.seq += 1;
            self.release(span);
            return Some(Ok(r));
        }
    }

    /// Gives the record (`span` bytes) at the consumer's position back to the producer.
    #[inline(always)]
    fn release(&mut self, span: usize) {
        self.head += span as u64;
        // Release: our reads of the record happen before the producer may reuse its space.
        self.indices().head.store(self.head, Ordering::Release);
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
    fn a_watch_sees_a_published_record_and_only_a_record_of_this_lap() {
        let (_keep, mut p, mut c) = heap_ring(4096);
        assert!(!c.watch(8), "an empty ring has nothing to see");
        p.push(1, b"h", &[b"x"]).unwrap();
        assert!(c.watch(8));
        assert!(pop(&mut c).is_some());
        assert!(!c.watch(8), "the consumed record is not seen again");
        // Around the ring once: the words the consumer watches next hold last lap's headers.
        for _ in 0..64 {
            p.push(1, b"", &[]).unwrap();
            assert!(c.watch(1));
            assert!(pop(&mut c).is_some());
            assert!(!c.watch(4), "a header of an earlier lap is not a record");
        }
    }

    #[test]
    fn full_then_drained_and_wraps_with_padding_across_laps() {
        let (_keep, mut p, mut c) = heap_ring(4096);
        let big = [7u8; 1500]; // 1508 bytes → 1536 with alignment
        p.push(1, &[], &[&big]).unwrap(); // [0, 1536)
        p.push(1, &[], &[&big]).unwrap(); // [1536, 3072)
        assert_eq!(p.push(1, &[], &[&big]), Err(PushError::Full));
        assert_eq!(pop(&mut c).unwrap().2, big.to_vec());
        // 1536 free at the front, 1024 at the end: a 1536-byte record pads to the start and
        // fills it exactly; then nothing fits until the consumer moves on.
        let other = [8u8; 1500];
        p.push(2, &[], &[&other]).unwrap();
        assert_eq!(p.push(3, &[], &[b"x"]), Err(PushError::Full));
        assert_eq!(pop(&mut c).unwrap().0, 1);
        assert_eq!(pop(&mut c).unwrap(), (2, vec![], other.to_vec()));
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
        // holds a perfectly formed header word for lap 1 — numbered 3, the number the consumer
        // will expect there after the three records below.
        let forged = header_word(RECORD_HEADER + 4, 3, 9, 0, KIND_MESSAGE, 1).to_ne_bytes();
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
    fn forged_headers_in_bodies_never_pass_for_records_over_many_laps() {
        // Records of changing sizes (so boundaries move from lap to lap, and paddings come and
        // go) whose bodies are nothing but well-formed headers of the next lap, numbered as
        // the records soon to come: none may ever be taken for a record.
        let (_keep, mut p, mut c) = heap_ring(4096);
        let mut x = 12345u32;
        for i in 0..3000u32 {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            let n = (x >> 8) as usize % 1500;
            let lap = p.tail / 4096;
            let words: Vec<u8> = (0..n.div_ceil(8))
                .flat_map(|k| {
                    // The next lap, numbered a few records ahead: where the consumer will
                    // look for the records written over this one's place.
                    let seq = (i as usize + 1 + k % 8) as u8;
                    header_word(RECORD_HEADER + 4, seq, 9, 0, KIND_MESSAGE, lap + 1).to_ne_bytes()
                })
                .take(n)
                .collect();
            p.push(1, &[], &[&words]).unwrap();
            let (h, _, pl) = pop(&mut c).unwrap();
            assert_eq!((h, pl.len()), (1, n), "record {i}");
            assert!(
                pop(&mut c).is_none(),
                "record {i}: forged bytes read as a record"
            );
        }
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

    /// A consumer index ahead of everything the producer wrote (another process's garbage) is
    /// "no room", not an overflow: found by the shm_ring fuzz target, which panicked with
    /// "attempt to subtract with overflow" in `room_for`.
    #[test]
    fn a_consumer_index_from_nowhere_leaves_no_room_and_no_panic() {
        let (_keep, mut p, c) = heap_ring(4096);
        let body = [0u8; 2000];
        while p.push(1, b"", &[&body]).is_ok() {}
        c.indices().head.store(u64::MAX, Ordering::Release);
        assert_eq!(p.push(1, b"", &[&body]), Err(PushError::Full));
        assert!(!p.has_room(8));
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
            dirty: dirty_map(capacity),
            dirty_lines: 0,
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

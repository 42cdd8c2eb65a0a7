//! A single-producer single-consumer ring of variable-length records in shared memory.
//!
//! One ring carries the messages of one ordered pair of ranks (sender → receiver), so each side
//! is the only writer of its own index and no read-modify-write atomics are needed: the producer
//! owns `tail`, the consumer owns `head` (rtrb's design). Each side keeps a cached copy of the
//! other's index and reloads it only when the cache says the ring is full (producer) or empty
//! (consumer), so a busy ring costs one shared cache-line transfer per batch, not per message.
//!
//! Records are 8-byte aligned: a header word (`total length u32 | handler u8 | header length
//! u8 | kind u16`), the active-message header, then the payload. A record never wraps: when it
//! does not fit before the end of the buffer the producer writes a padding record and starts
//! at offset 0. That is why a record may use at most half the capacity — an empty ring then
//! always has room for it.
//!
//! Orderings, in one place: the producer writes a record's bytes, then publishes it with a
//! `Release` store of `tail`; the consumer's `Acquire` load of `tail` makes those bytes visible
//! before it reads them. Symmetrically the consumer reads a record, then frees its space with a
//! `Release` store of `head`; the producer's `Acquire` load of `head` orders its later overwrite
//! after that read. The indices are byte positions that only grow (u64 never wraps in practice:
//! 2^64 bytes is centuries at memory bandwidth).
//!
//! Inside a shared segment everything is an offset from the segment base, never a pointer, so the
//! rings work whatever address each process maps the segment at.

use crossbeam_utils::CachePadded;

use crate::sync::{AtomicU64, Ordering};

/// Bytes of the record header word.
pub const RECORD_HEADER: usize = 8;
const KIND_MESSAGE: u16 = 0;
const KIND_PAD: u16 = 1;

/// The indices of one ring, as laid out in shared memory. All-zero bytes are a valid empty ring.
#[repr(C)]
pub struct RingIndices {
    /// Next byte the consumer will read; written only by the consumer.
    head: CachePadded<AtomicU64>,
    /// Next byte the producer will write; written only by the producer.
    tail: CachePadded<AtomicU64>,
}

/// Rounds up to the record alignment.
#[inline(always)]
const fn align8(n: usize) -> usize {
    (n + 7) & !7
}

/// The largest header + payload one record can carry in a ring of `capacity` bytes.
pub const fn max_record_body(capacity: usize) -> usize {
    capacity / 2 - RECORD_HEADER
}

#[cfg(not(loom))]
mod bytes {
    /// The data area of a ring: raw shared memory.
    pub(crate) struct Bytes {
        pub(crate) ptr: *mut u8,
    }

    impl Bytes {
        /// # Safety
        /// `off + src.len()` is within the data area and no one reads these bytes concurrently
        /// (the producer owns the free space it writes).
        #[inline(always)]
        pub(crate) unsafe fn write(&self, off: usize, src: &[u8]) {
            // SAFETY: the caller guarantees the range is in bounds and exclusively ours.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.add(off), src.len()) }
        }

        /// # Safety
        /// `off` is 8-aligned, in bounds, and the word was published to this reader.
        #[inline(always)]
        pub(crate) unsafe fn read_word(&self, off: usize) -> u64 {
            // SAFETY: in bounds and 8-aligned by the caller's contract (the data area is
            // 8-aligned and records start at multiples of 8).
            unsafe { std::ptr::read(self.ptr.add(off) as *const u64) }
        }

        /// # Safety
        /// The range is in bounds and was published to this reader, and the producer will not
        /// overwrite it until the consumer releases it.
        #[inline(always)]
        pub(crate) unsafe fn with_slice<R>(
            &self,
            off: usize,
            len: usize,
            f: impl FnOnce(&[u8]) -> R,
        ) -> R {
            // SAFETY: as the caller guarantees; the slice does not outlive this call.
            f(unsafe { std::slice::from_raw_parts(self.ptr.add(off), len) })
        }
    }
}

#[cfg(loom)]
mod bytes {
    use loom::cell::UnsafeCell;
    use std::sync::Arc;

    /// Under loom the data area is made of tracked cells, so a missing ordering shows up as a
    /// data race in the model instead of passing silently.
    pub(crate) struct Bytes {
        pub(crate) cells: Arc<Vec<UnsafeCell<u8>>>,
    }

    impl Bytes {
        pub(crate) unsafe fn write(&self, off: usize, src: &[u8]) {
            for (i, b) in src.iter().enumerate() {
                self.cells[off + i].with_mut(|p| {
                    // SAFETY: loom checks exclusivity of this access.
                    unsafe { *p = *b }
                });
            }
        }

        pub(crate) unsafe fn read_word(&self, off: usize) -> u64 {
            let mut w = [0u8; 8];
            self.read_into(off, &mut w);
            u64::from_ne_bytes(w)
        }

        fn read_into(&self, off: usize, out: &mut [u8]) {
            for (i, b) in out.iter_mut().enumerate() {
                // SAFETY: loom checks that no write races this read.
                *b = self.cells[off + i].with(|p| unsafe { *p });
            }
        }

        pub(crate) unsafe fn with_slice<R>(
            &self,
            off: usize,
            len: usize,
            f: impl FnOnce(&[u8]) -> R,
        ) -> R {
            let mut v = vec![0u8; len];
            self.read_into(off, &mut v);
            f(&v)
        }
    }
}

use bytes::Bytes;

#[inline(always)]
fn header_word(total: usize, handler: u8, hlen: u8, kind: u16) -> u64 {
    (total as u64) | (u64::from(handler) << 32) | (u64::from(hlen) << 40) | (u64::from(kind) << 48)
}

/// The sending end of a ring.
pub struct Producer {
    indices: *const RingIndices,
    data: Bytes,
    mask: usize,
    capacity: usize,
    tail: u64,
    head_cache: u64,
}

/// The receiving end of a ring.
pub struct Consumer {
    indices: *const RingIndices,
    data: Bytes,
    mask: usize,
    head: u64,
    tail_cache: u64,
}

// SAFETY: each end is the only user of its index and of its side of the data area (the
// producer writes free space, the consumer reads published records); moving an end to another
// thread moves that exclusive role with it. The shared memory outlives both ends (the segment
// is kept alive by whoever owns them).
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
    /// The producer end of the ring whose indices are at `indices` and whose `capacity`-byte data
    /// area starts at `data`.
    ///
    /// # Safety
    /// `indices` and `data .. data + capacity` must be valid, 8-aligned shared memory for as long
    /// as this end exists; `capacity` a power of two ≥ 64; and at most one `Producer` may exist
    /// for a ring at a time.
    #[cfg(not(loom))]
    pub unsafe fn new(indices: *const RingIndices, data: *mut u8, capacity: usize) -> Producer {
        // SAFETY: the caller guarantees `indices` is valid.
        let tail = unsafe { &*indices }.tail.load(Ordering::Relaxed);
        Producer {
            indices,
            data: Bytes { ptr: data },
            mask: capacity - 1,
            capacity,
            tail,
            head_cache: tail.saturating_sub(capacity as u64),
        }
    }

    #[inline(always)]
    fn indices(&self) -> &RingIndices {
        // SAFETY: `new`'s contract keeps the indices valid while this end exists.
        unsafe { &*self.indices }
    }

    /// Appends one record (`header` followed by the concatenated `payload` slices). Never blocks.
    #[inline]
    pub fn push(&mut self, handler: u8, header: &[u8], payload: &[&[u8]]) -> Result<(), PushError> {
        let plen: usize = payload.iter().map(|p| p.len()).sum();
        let body = header.len() + plen;
        if body > max_record_body(self.capacity) || header.len() > u8::MAX as usize {
            return Err(PushError::TooLarge);
        }
        let need = align8(RECORD_HEADER + body);
        let idx = (self.tail as usize) & self.mask;
        let to_end = self.capacity - idx;
        let pad = if to_end < need { to_end } else { 0 };
        let total = (pad + need) as u64;
        if self.tail + total - self.head_cache > self.capacity as u64 {
            self.head_cache = self.indices().head.load(Ordering::Acquire);
            if self.tail + total - self.head_cache > self.capacity as u64 {
                return Err(PushError::Full);
            }
        }
        let mut at = idx;
        if pad != 0 {
            // SAFETY: [idx, idx + 8) is in the free space we just checked (pad ≥ 8 because
            // records and the capacity are multiples of 8).
            unsafe {
                self.data
                    .write(at, &header_word(pad, 0, 0, KIND_PAD).to_ne_bytes())
            };
            at = 0;
        }
        let word = header_word(
            RECORD_HEADER + body,
            handler,
            header.len() as u8,
            KIND_MESSAGE,
        );
        // SAFETY: [at, at + need) lies in free space owned by the producer (checked above), and
        // does not wrap (padding moved it to 0 otherwise).
        unsafe {
            self.data.write(at, &word.to_ne_bytes());
            let mut off = at + RECORD_HEADER;
            self.data.write(off, header);
            off += header.len();
            for p in payload {
                self.data.write(off, p);
                off += p.len();
            }
        }
        self.tail += total;
        // Release: the record's bytes above become visible before the new tail.
        self.indices().tail.store(self.tail, Ordering::Release);
        Ok(())
    }

    /// Bytes of the largest header + payload a record can carry.
    pub fn max_body(&self) -> usize {
        max_record_body(self.capacity)
    }
}

impl Consumer {
    /// The consumer end; see [`Producer::new`].
    ///
    /// # Safety
    /// As for [`Producer::new`], with "at most one `Consumer`".
    #[cfg(not(loom))]
    pub unsafe fn new(indices: *const RingIndices, data: *mut u8, capacity: usize) -> Consumer {
        // SAFETY: the caller guarantees `indices` is valid.
        let head = unsafe { &*indices }.head.load(Ordering::Relaxed);
        Consumer {
            indices,
            data: Bytes { ptr: data },
            mask: capacity - 1,
            head,
            tail_cache: head,
        }
    }

    #[inline(always)]
    fn indices(&self) -> &RingIndices {
        // SAFETY: `new`'s contract keeps the indices valid while this end exists.
        unsafe { &*self.indices }
    }

    /// Whether a record may be waiting (cheap: reloads the producer's index only when the cache
    /// says empty).
    #[inline(always)]
    pub fn is_empty(&mut self) -> bool {
        if self.head != self.tail_cache {
            return false;
        }
        self.tail_cache = self.indices().tail.load(Ordering::Acquire);
        self.head == self.tail_cache
    }

    /// Hands the oldest record to `f` as (handler, header, payload) borrowed from the ring, then
    /// frees its space. `None` when the ring is empty. `Err` if the ring holds a record that
    /// cannot be valid (a corrupted segment): the ring is then unusable.
    #[inline]
    pub fn pop_with<R>(
        &mut self,
        f: impl FnOnce(u8, &[u8], &[u8]) -> R,
    ) -> Option<Result<R, CorruptRing>> {
        loop {
            if self.is_empty() {
                return None;
            }
            let at = (self.head as usize) & self.mask;
            // SAFETY: `at` is 8-aligned and inside a record published by the Acquire load of
            // `tail` in `is_empty`.
            let word = unsafe { self.data.read_word(at) };
            let total = (word & 0xFFFF_FFFF) as usize;
            let handler = (word >> 32) as u8;
            let hlen = ((word >> 40) & 0xFF) as usize;
            let kind = (word >> 48) as u16;
            let span = align8(total);
            let available = (self.tail_cache - self.head) as usize;
            if total < RECORD_HEADER || span > available || at + span > self.mask + 1 {
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
            let body = total - RECORD_HEADER;
            // SAFETY: the record [at, at + total) was published and is ours until we move head.
            let r = unsafe {
                self.data.with_slice(at + RECORD_HEADER, body, |b| {
                    let (h, p) = b.split_at(hlen);
                    f(handler, h, p)
                })
            };
            self.head += span as u64;
            // Release: our reads of the record happen before the producer may reuse its space.
            self.indices().head.store(self.head, Ordering::Release);
            return Some(Ok(r));
        }
    }
}

/// The ring's bytes do not form valid records: the segment was corrupted (a peer died mid-write
/// cannot cause this — records are published only when complete — so it means a bug or a
/// foreign writer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CorruptRing;

/// A ring on the heap for tests (both ends in this process).
#[cfg(all(test, not(loom)))]
pub(crate) struct HeapRing {
    _indices: Box<RingIndices>,
    _data: Vec<u64>,
}

#[cfg(all(test, not(loom)))]
pub(crate) fn heap_ring(capacity: usize) -> (HeapRing, Producer, Consumer) {
    let indices = Box::new(RingIndices {
        head: CachePadded::new(AtomicU64::new(0)),
        tail: CachePadded::new(AtomicU64::new(0)),
    });
    let mut data = vec![0u64; capacity / 8];
    let ip: *const RingIndices = &*indices;
    let dp = data.as_mut_ptr() as *mut u8;
    // SAFETY: both allocations live in the returned HeapRing, which the tests keep alive longer
    // than the ends; `data` is 8-aligned; one producer and one consumer.
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
        let (_keep, mut p, mut c) = heap_ring(256);
        assert!(pop(&mut c).is_none());
        p.push(3, b"hdr", &[b"pay", b"load"]).unwrap();
        p.push(4, b"", &[]).unwrap();
        assert_eq!(pop(&mut c), Some((3, b"hdr".to_vec(), b"payload".to_vec())));
        assert_eq!(pop(&mut c), Some((4, vec![], vec![])));
        assert!(pop(&mut c).is_none());
    }

    #[test]
    fn full_then_drained_and_wraps_with_padding() {
        let (_keep, mut p, mut c) = heap_ring(256);
        let big = [7u8; 100];
        p.push(1, &[], &[&big]).unwrap(); // 112 bytes
        p.push(1, &[], &[&big]).unwrap(); // 224
        assert_eq!(p.push(1, &[], &[&big]), Err(PushError::Full));
        assert_eq!(pop(&mut c).unwrap().2, big.to_vec());
        // 112 free at the front, 32 at the end: the next record pads to the start.
        p.push(2, &[], &[&big]).unwrap();
        assert_eq!(pop(&mut c).unwrap().0, 1);
        assert_eq!(pop(&mut c).unwrap(), (2, vec![], big.to_vec()));
        assert!(pop(&mut c).is_none());
        assert_eq!(p.push(1, &[], &[&[0u8; 121]]), Err(PushError::TooLarge));
    }

    #[test]
    fn corrupt_bytes_are_an_error_not_a_panic() {
        let (_keep, mut p, mut c) = heap_ring(64);
        p.push(1, b"x", &[]).unwrap();
        // Overwrite the record header with a length past the published bytes.
        // SAFETY: test-only poke into our own heap ring while no push is running.
        unsafe { c.data.write(0, &header_word(4000, 1, 1, 0).to_ne_bytes()) };
        assert_eq!(c.pop_with(|_, _, _| ()), Some(Err(CorruptRing)));
    }

    #[test]
    fn two_threads_stream_a_million_records_in_order() {
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
    use loom::cell::UnsafeCell;
    use std::sync::Arc;

    /// Both ends of a ring of `capacity` bytes, indices shared through an `Arc`.
    pub(crate) fn ring(capacity: usize) -> (Producer, Consumer, Arc<RingIndices>) {
        let indices = Arc::new(RingIndices {
            head: CachePadded::new(AtomicU64::new(0)),
            tail: CachePadded::new(AtomicU64::new(0)),
        });
        let cells: Arc<Vec<UnsafeCell<u8>>> =
            Arc::new((0..capacity).map(|_| UnsafeCell::new(0)).collect());
        let ip: *const RingIndices = Arc::as_ptr(&indices);
        let p = Producer {
            indices: ip,
            data: Bytes {
                cells: cells.clone(),
            },
            mask: capacity - 1,
            capacity,
            tail: 0,
            head_cache: 0,
        };
        let c = Consumer {
            indices: ip,
            data: Bytes { cells },
            mask: capacity - 1,
            head: 0,
            tail_cache: 0,
        };
        (p, c, indices)
    }
}

//! Every atomic and every byte of shared memory the rings and cell queues touch is reached
//! through here, so that `RUSTFLAGS="--cfg loom"` swaps in loom's model-checked versions
//! (tokio's `loom` shim pattern): atomics become loom atomics, and [`Bytes`] — a region of
//! shared memory — becomes tracked cells (message bytes) plus one atomic per 8-byte word
//! (control words), so a missing ordering shows up as a race in the model.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering};

#[cfg(not(loom))]
mod bytes {
    use super::AtomicU64;

    /// A region of shared memory (a ring's data area, or the node's cells): raw bytes.
    pub(crate) struct Bytes {
        pub(crate) ptr: *mut u8,
    }

    impl Bytes {
        /// # Safety
        /// `off + src.len()` is within the region and no one reads these bytes concurrently
        /// (the writer owns the free space it writes).
        #[inline(always)]
        pub(crate) unsafe fn write(&self, off: usize, src: &[u8]) {
            // SAFETY: the caller guarantees the range is in bounds and exclusively ours.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.add(off), src.len()) }
        }

        /// [`Bytes::write`] for bytes the caller has just stored (a header built on its stack):
        /// read in 4-byte loads, one per aligned word, which store-to-load forwarding can serve
        /// from those narrow stores. A copy in one wide load cannot be served (on this project's
        /// host, AMD EPYC): it waits until the stores have left the core, behind every older
        /// store — the previous record's stores into the ring among them, which wait for the
        /// consumer's core to give up the line. perf, the C ABI's MPI_Isend at 8 bytes: that
        /// one load took 87% of the call. The loads are volatile so that the compiler does not
        /// merge them back into one.
        ///
        /// # Safety
        /// As for [`Bytes::write`].
        #[inline(always)]
        pub(crate) unsafe fn write_fresh(&self, off: usize, src: &[u8]) {
            if src.as_ptr() as usize % 4 != 0 {
                // SAFETY: the caller's contract.
                return unsafe { self.write(off, src) };
            }
            let mut at = off;
            let mut words = src.chunks_exact(4);
            for w in &mut words {
                // SAFETY: `w` is 4 bytes of a live slice, 4-aligned (checked above, and every
                // chunk is 4 bytes further); the destination is in bounds and ours (the caller's
                // contract), written unaligned since a record's body need not be.
                unsafe {
                    let v = std::ptr::read_volatile(w.as_ptr().cast::<u32>());
                    std::ptr::write_unaligned(self.ptr.add(at).cast::<u32>(), v);
                }
                at += 4;
            }
            // SAFETY: the rest of the same range.
            unsafe { self.write(at, words.remainder()) }
        }

        /// The control word at `off`, as an atomic.
        ///
        /// # Safety
        /// `off` is a multiple of 8 inside the region (which is 8-aligned); every access to
        /// control words goes through this atomic view.
        #[inline(always)]
        pub(crate) unsafe fn word(&self, off: usize) -> &AtomicU64 {
            // SAFETY: in bounds and aligned by the caller's contract; an atomic is valid for any
            // bit pattern, including bytes that were last written as message body.
            unsafe { &*(self.ptr.add(off) as *const AtomicU64) }
        }

        /// Asks the CPU to start fetching the cache lines of `[off, off + len)` into its cache,
        /// without waiting for them: a hint, which reads nothing and can fault on nothing. The
        /// caller keeps `len` short (the ring: records up to 2 KiB).
        #[inline(always)]
        pub(crate) fn prefetch(&self, off: usize, len: usize) {
            #[cfg(target_arch = "x86_64")]
            {
                use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
                let mut at = 0;
                while at < len {
                    // SAFETY: SSE, which `prefetcht0` needs, is part of the x86-64 baseline; a
                    // prefetch reads nothing into the program and never faults, even on an
                    // address outside the mapping (so wrapping arithmetic is all it needs).
                    unsafe {
                        _mm_prefetch::<_MM_HINT_T0>(self.ptr.wrapping_add(off + at) as *const i8)
                    };
                    at += 64;
                }
            }
            #[cfg(not(target_arch = "x86_64"))]
            let _ = (off, len);
        }

        /// # Safety
        /// The range is in bounds and was published to this reader, and no one will overwrite
        /// it until the reader releases it.
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
    use super::AtomicU64;
    use loom::cell::UnsafeCell;
    use std::sync::Arc;

    /// Under loom a region is tracked cells (body bytes) plus one atomic per 8-byte word
    /// (control words).
    #[derive(Clone)]
    pub(crate) struct Bytes {
        pub(crate) cells: Arc<Vec<UnsafeCell<u8>>>,
        pub(crate) words: Arc<Vec<AtomicU64>>,
    }

    impl Bytes {
        /// A fresh (zeroed) region of `len` bytes.
        pub(crate) fn zeroed(len: usize) -> Bytes {
            Bytes {
                cells: Arc::new((0..len).map(|_| UnsafeCell::new(0)).collect()),
                words: Arc::new((0..len / 8).map(|_| AtomicU64::new(0)).collect()),
            }
        }

        /// As the non-loom version: a copy of bytes the caller just stored.
        ///
        /// # Safety
        /// As for `write`.
        pub(crate) unsafe fn write_fresh(&self, off: usize, src: &[u8]) {
            // SAFETY: the caller's contract.
            unsafe { self.write(off, src) }
        }

        pub(crate) unsafe fn write(&self, off: usize, src: &[u8]) {
            for (i, b) in src.iter().enumerate() {
                self.cells[off + i].with_mut(|p| {
                    // SAFETY: loom checks exclusivity of this access.
                    unsafe { *p = *b }
                });
            }
        }

        pub(crate) unsafe fn word(&self, off: usize) -> &AtomicU64 {
            &self.words[off / 8]
        }

        /// No cache under loom: nothing to fetch.
        pub(crate) fn prefetch(&self, _off: usize, _len: usize) {}

        pub(crate) unsafe fn with_slice<R>(
            &self,
            off: usize,
            len: usize,
            f: impl FnOnce(&[u8]) -> R,
        ) -> R {
            let mut v = vec![0u8; len];
            for (i, b) in v.iter_mut().enumerate() {
                // SAFETY: loom checks that no write races this read.
                *b = self.cells[off + i].with(|p| unsafe { *p });
            }
            f(&v)
        }
    }
}

pub(crate) use bytes::Bytes;

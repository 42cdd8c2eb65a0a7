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

//! User buffers held by pending requests.
//!
//! A nonblocking operation hands the device a buffer that the device reads or writes later,
//! during progress, after the call that lent it has returned. The borrow checker cannot follow
//! that, so this module is the one place in `ch4-core` that keeps raw pointers: the unsafe
//! constructors [`SendBuf::borrowed`] and [`RecvBuf::borrowed`] state the contract (the memory
//! stays valid and untouched until the request that holds the buffer completes or is removed),
//! and the safe API built on top keeps it — the blocking calls by waiting before they return, the
//! facade's scopes by completing every request before the borrow ends.
#![allow(unsafe_code)]

use std::ptr::NonNull;

use crate::datatype::Layout;
use crate::{Error, ErrorKind, Result};

/// Where the bytes of a buffer with a layout, or of an owned buffer, live.
enum Storage<P> {
    /// User memory lent for the lifetime of one request.
    Lent { ptr: P, len: usize },
    /// Memory owned by the request (packed copies, temporaries).
    Owned(Vec<u8>),
}

/// A buffer as it is held: contiguous lent memory — nearly every buffer of a real program —
/// in two words, anything else behind one pointer. Two words move between functions in
/// registers. A wider buffer went through the stack, and on this project's host (AMD EPYC)
/// reading it back there with wide loads over the narrow stores that had just written it
/// defeated store-to-load forwarding: the read waited until every older store had left the
/// core, the previous message's stores into the shared ring among them (perf: over half of
/// an 8-byte sender's time on one load).
enum Repr<G> {
    /// Contiguous user memory, lent for the lifetime of one request.
    Lent { ptr: NonNull<u8>, len: usize },
    /// A layout, or memory the buffer owns.
    General(Box<G>),
}

/// A [`SendBuf`] that is not plain contiguous lent memory.
struct SendGeneral {
    storage: Storage<*const u8>,
    layout: Option<Layout>,
}

/// The data of a send: user memory (contiguous or described by a [`Layout`]) or an owned copy.
pub struct SendBuf(Repr<SendGeneral>);

// SAFETY: a `SendBuf` is plain bytes: lent memory under `borrowed`'s contract (valid and not
// written until the request holding it is gone, whichever thread that is on) or an owned
// vector. Reading plain bytes has no thread affinity, so the device that holds it may move to
// another thread, or be driven by several in turn under a lock that orders their accesses.
unsafe impl Send for SendBuf {}

impl SendBuf {
    /// A send buffer over `bytes` that a request may read until it completes.
    ///
    /// # Safety
    /// The memory behind `bytes` must stay valid and must not be written until every request
    /// holding this `SendBuf` has completed or been removed from the device.
    #[inline(always)]
    pub unsafe fn borrowed(bytes: &[u8]) -> SendBuf {
        SendBuf(Repr::Lent {
            ptr: NonNull::from(bytes).cast(),
            len: bytes.len(),
        })
    }

    /// Like [`SendBuf::borrowed`], for the elements of `bytes` selected by `layout`.
    ///
    /// # Safety
    /// As for [`SendBuf::borrowed`].
    pub unsafe fn borrowed_with_layout(bytes: &[u8], layout: Layout) -> Result<SendBuf> {
        layout.check_fits(bytes.len())?;
        if layout.is_contiguous() {
            return Ok(SendBuf(Repr::Lent {
                ptr: NonNull::from(bytes).cast(),
                len: layout.packed_bytes(),
            }));
        }
        Ok(SendBuf(Repr::General(Box::new(SendGeneral {
            storage: Storage::Lent {
                ptr: bytes.as_ptr(),
                len: bytes.len(),
            },
            layout: Some(layout),
        }))))
    }

    /// A send buffer that owns its bytes (a packed copy made when the user's memory could not
    /// be held, or data the device generates itself).
    pub fn owned(bytes: Vec<u8>) -> SendBuf {
        SendBuf(Repr::General(Box::new(SendGeneral {
            storage: Storage::Owned(bytes),
            layout: None,
        })))
    }

    /// The layout that selects the message's bytes, if any.
    #[inline(always)]
    fn layout(&self) -> Option<&Layout> {
        match &self.0 {
            Repr::Lent { .. } => None,
            Repr::General(g) => g.layout.as_ref(),
        }
    }

    /// The data as (pointer, length) when it is contiguous, for a network that reads it
    /// asynchronously (a libfabric `fi_tsend`); valid while this buffer is held by a request,
    /// as for [`RecvBuf::raw_parts`]. `None` for a buffer with a layout (pack it first).
    #[inline]
    pub fn raw_parts(&self) -> Option<(*const u8, usize)> {
        match &self.0 {
            Repr::Lent { ptr, len } => Some((ptr.as_ptr().cast_const(), *len)),
            Repr::General(g) if g.layout.is_some() => None,
            Repr::General(g) => Some(match &g.storage {
                Storage::Lent { ptr, len } => (*ptr, *len),
                Storage::Owned(v) => (v.as_ptr(), v.len()),
            }),
        }
    }

    /// The user memory as a slice (its whole extent when a layout is present).
    #[inline(always)]
    fn extent(&self) -> &[u8] {
        match &self.0 {
            // SAFETY: `borrowed` requires the memory to stay valid and unwritten while this
            // buffer exists; `ptr`/`len` came from a valid slice.
            Repr::Lent { ptr, len } => unsafe { std::slice::from_raw_parts(ptr.as_ptr(), *len) },
            Repr::General(g) => match &g.storage {
                // SAFETY: as above.
                Storage::Lent { ptr, len } => unsafe { std::slice::from_raw_parts(*ptr, *len) },
                Storage::Owned(v) => v,
            },
        }
    }

    /// How many bytes the message carries.
    #[inline(always)]
    pub fn packed_len(&self) -> usize {
        match &self.0 {
            Repr::Lent { len, .. } => *len,
            Repr::General(g) => match &g.layout {
                None => self.extent().len(),
                Some(l) => l.packed_bytes(),
            },
        }
    }

    /// The message bytes when they are contiguous in memory (no packing needed).
    #[inline(always)]
    pub fn contiguous(&self) -> Option<&[u8]> {
        match self.layout() {
            None => Some(self.extent()),
            Some(_) => None,
        }
    }

    /// Copies message bytes `[offset, offset + out.len())` into `out`; returns how many.
    pub fn pack_range(&self, offset: usize, out: &mut [u8]) -> Result<usize> {
        match self.layout() {
            None => {
                let src = self.extent();
                let start = offset.min(src.len());
                let n = out.len().min(src.len() - start);
                out[..n].copy_from_slice(&src[start..start + n]);
                Ok(n)
            }
            Some(l) => l.pack_range(self.extent(), offset, out),
        }
    }

    /// For a buffer with a layout, the pieces of user memory holding message bytes
    /// `[offset, offset + len)`, in order (see [`Layout::segments`]), so a transport can send
    /// them as they lie instead of packing them. `None` for a contiguous buffer (use
    /// [`SendBuf::contiguous`]) and for a range spanning more than `max_pieces` blocks.
    pub fn segments(
        &self,
        offset: usize,
        len: usize,
        max_pieces: usize,
    ) -> Option<smallvec::SmallVec<[&[u8]; 8]>> {
        self.layout()?
            .segments(self.extent(), offset, len, max_pieces)
    }

    /// The message as one contiguous byte vector (packing noncontiguous data).
    pub fn to_vec(&self) -> Result<Vec<u8>> {
        match self.layout() {
            None => Ok(self.extent().to_vec()),
            Some(l) => l.pack(self.extent()),
        }
    }
}

/// A [`RecvBuf`] that is not plain contiguous lent memory.
struct RecvGeneral {
    storage: Storage<*mut u8>,
    layout: Option<Layout>,
}

impl RecvGeneral {
    /// The user memory (its whole extent when a layout is present) and the layout, borrowed
    /// apart.
    #[inline(always)]
    fn parts(&mut self) -> (&mut [u8], Option<&Layout>) {
        let extent: &mut [u8] = match &mut self.storage {
            // SAFETY: `borrowed` requires exclusive, valid memory for the life of this buffer;
            // `ptr`/`len` came from a valid mutable slice.
            Storage::Lent { ptr, len } => unsafe { std::slice::from_raw_parts_mut(*ptr, *len) },
            Storage::Owned(v) => v,
        };
        (extent, self.layout.as_ref())
    }
}

/// The destination of a receive: user memory (contiguous or described by a [`Layout`]).
pub struct RecvBuf(Repr<RecvGeneral>);

// SAFETY: as for `SendBuf`: lent bytes under `borrowed`'s contract (valid, and touched by no one
// else until the request holding them is gone) or an owned vector; writing plain bytes from
// the thread that drives the device, under the lock that also orders the owner's later read
// of the request's completion, is not a data race.
unsafe impl Send for RecvBuf {}

impl RecvBuf {
    /// A receive buffer over `bytes` that a request may write until it completes.
    ///
    /// # Safety
    /// The memory behind `bytes` must stay valid and must be neither read nor written by anyone
    /// else until every request holding this `RecvBuf` has completed or been removed.
    #[inline(always)]
    pub unsafe fn borrowed(bytes: &mut [u8]) -> RecvBuf {
        RecvBuf(Repr::Lent {
            len: bytes.len(),
            ptr: NonNull::from(bytes).cast(),
        })
    }

    /// Like [`RecvBuf::borrowed`], for the elements of `bytes` selected by `layout`.
    ///
    /// # Safety
    /// As for [`RecvBuf::borrowed`].
    pub unsafe fn borrowed_with_layout(bytes: &mut [u8], layout: Layout) -> Result<RecvBuf> {
        layout.check_fits(bytes.len())?;
        if layout.is_contiguous() {
            return Ok(RecvBuf(Repr::Lent {
                ptr: NonNull::from(bytes).cast(),
                len: layout.packed_bytes(),
            }));
        }
        Ok(RecvBuf(Repr::General(Box::new(RecvGeneral {
            storage: Storage::Lent {
                ptr: bytes.as_mut_ptr(),
                len: bytes.len(),
            },
            layout: Some(layout),
        }))))
    }

    /// A receive buffer the request owns (used where no user memory exists, e.g. a discard).
    pub fn owned(capacity: usize) -> RecvBuf {
        RecvBuf::owned_vec(vec![0; capacity])
    }

    /// A receive buffer the request owns, `bytes.len()` bytes long, in memory the caller already
    /// has (a collective's schedule lends its spares: fresh memory costs a page fault per page).
    pub fn owned_vec(bytes: Vec<u8>) -> RecvBuf {
        RecvBuf(Repr::General(Box::new(RecvGeneral {
            storage: Storage::Owned(bytes),
            layout: None,
        })))
    }

    /// The layout that selects where message bytes go, if any.
    #[inline(always)]
    fn layout(&self) -> Option<&Layout> {
        match &self.0 {
            Repr::Lent { .. } => None,
            Repr::General(g) => g.layout.as_ref(),
        }
    }

    #[inline(always)]
    fn extent_mut(&mut self) -> &mut [u8] {
        match &mut self.0 {
            // SAFETY: `borrowed` requires exclusive, valid memory for the life of this buffer;
            // `ptr`/`len` came from a valid mutable slice.
            Repr::Lent { ptr, len } => unsafe {
                std::slice::from_raw_parts_mut(ptr.as_ptr(), *len)
            },
            Repr::General(g) => g.parts().0,
        }
    }

    /// How many message bytes fit; anything beyond is truncated, never written.
    #[inline(always)]
    pub fn capacity(&self) -> usize {
        match &self.0 {
            Repr::Lent { len, .. } => *len,
            Repr::General(g) => match (&g.layout, &g.storage) {
                (Some(l), _) => l.packed_bytes(),
                (None, Storage::Lent { len, .. }) => *len,
                (None, Storage::Owned(v)) => v.len(),
            },
        }
    }

    /// The destination as (pointer, length) when it is contiguous, for a network that writes
    /// into it asynchronously (a posted libfabric or UCX receive): no Rust reference to the
    /// memory is formed, since the network writes it while the program runs on. The pointer
    /// stays valid while this buffer is held by a request, including when the request's pool
    /// moves it (the bytes live in the user's memory or this buffer's own heap block); the
    /// engine must have the network let go before the request is removed
    /// ([`P2p::quiesce`](crate::transport::P2p::quiesce)). `None` for a buffer with a layout:
    /// receive into a contiguous bounce buffer and unpack with [`RecvBuf::write_at`].
    #[inline]
    pub fn raw_parts(&mut self) -> Option<(*mut u8, usize)> {
        match &mut self.0 {
            Repr::Lent { ptr, len } => Some((ptr.as_ptr(), *len)),
            Repr::General(g) if g.layout.is_some() => None,
            Repr::General(g) => Some(match &mut g.storage {
                Storage::Lent { ptr, len } => (*ptr, *len),
                Storage::Owned(v) => (v.as_mut_ptr(), v.len()),
            }),
        }
    }

    /// The destination as one slice of [`RecvBuf::capacity`] bytes when it is contiguous (no
    /// layout), so a transport can copy into it directly.
    #[inline]
    pub fn contiguous_mut(&mut self) -> Option<&mut [u8]> {
        match self.layout() {
            None => Some(self.extent_mut()),
            Some(_) => None,
        }
    }

    /// For a buffer with a layout, the pieces of user memory that take message bytes
    /// `[offset, offset + len)`, in order (see [`Layout::segments_mut`]), so a transport can
    /// scatter a stream straight into them. `None` for a contiguous buffer (use
    /// [`RecvBuf::contiguous_mut`]) and where the layout cannot give such a list.
    pub fn segments_mut(
        &mut self,
        offset: usize,
        len: usize,
        max_pieces: usize,
    ) -> Option<smallvec::SmallVec<[&mut [u8]; 8]>> {
        let Repr::General(g) = &mut self.0 else {
            return None;
        };
        let (extent, layout) = g.parts();
        layout?.segments_mut(extent, offset, len, max_pieces)
    }

    /// Writes message bytes that start at message offset `offset`; bytes past
    /// [`RecvBuf::capacity`] are dropped. Returns how many were written.
    #[inline(always)]
    pub fn write_at(&mut self, offset: usize, data: &[u8]) -> usize {
        if self.layout().is_none() {
            let dst = self.extent_mut();
            let Some(room) = dst.len().checked_sub(offset) else {
                return 0;
            };
            let n = data.len().min(room);
            dst[offset..offset + n].copy_from_slice(&data[..n]);
            return n;
        }
        self.write_scattered(offset, data)
    }

    /// [`RecvBuf::write_at`] through a layout.
    #[inline(never)]
    fn write_scattered(&mut self, offset: usize, data: &[u8]) -> usize {
        let cap = self.capacity();
        if offset >= cap {
            return 0;
        }
        let n = data.len().min(cap - offset);
        let Repr::General(g) = &mut self.0 else {
            return 0;
        };
        match g.parts() {
            (extent, Some(l)) => l.unpack_range(extent, offset, &data[..n]).unwrap_or(0),
            (_, None) => 0,
        }
    }

    /// The owned bytes, for receives into device-owned memory.
    pub fn into_owned(self) -> Result<Vec<u8>> {
        match self.0 {
            Repr::General(g) => match g.storage {
                Storage::Owned(v) => Ok(v),
                Storage::Lent { .. } => Err(lent_not_owned()),
            },
            Repr::Lent { .. } => Err(lent_not_owned()),
        }
    }
}

fn lent_not_owned() -> Error {
    Error::new(ErrorKind::Internal, "into_owned on a lent receive buffer")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguous_lent_buffers_are_two_words() {
        assert_eq!(std::mem::size_of::<SendBuf>(), 16);
        assert_eq!(std::mem::size_of::<RecvBuf>(), 16);
    }

    #[test]
    fn owned_and_contiguous_layout_buffers_keep_their_bytes() {
        let mut out = RecvBuf::owned(4);
        assert_eq!(out.capacity(), 4);
        assert_eq!(out.write_at(1, &[9, 9, 9, 9]), 3);
        assert_eq!(out.into_owned().unwrap(), vec![0, 9, 9, 9]);
        let sent = SendBuf::owned(vec![1, 2, 3]);
        assert_eq!(sent.packed_len(), 3);
        assert_eq!(sent.contiguous(), Some(&[1u8, 2, 3][..]));
        let mem = [5u8; 12];
        let whole = Layout::vector::<u8>(1, 8, 8).unwrap();
        // SAFETY: `mem` outlives `buf` and is never written.
        let buf = unsafe { SendBuf::borrowed_with_layout(&mem, whole).unwrap() };
        assert_eq!(buf.contiguous(), Some(&mem[..8]));
        let mut lent = [0u8; 2];
        // SAFETY: `lent` outlives `rb` and is not touched while `rb` exists.
        let rb = unsafe { RecvBuf::borrowed(&mut lent) };
        assert!(rb.into_owned().is_err());
    }

    #[test]
    fn recv_truncates_at_capacity() {
        let mut mem = [0u8; 4];
        // SAFETY: `mem` outlives `buf` and is not touched while `buf` exists.
        let mut buf = unsafe { RecvBuf::borrowed(&mut mem) };
        assert_eq!(buf.write_at(0, &[1, 2, 3]), 3);
        assert_eq!(buf.write_at(3, &[4, 5, 6]), 1);
        assert_eq!(buf.write_at(9, &[7]), 0);
        drop(buf);
        assert_eq!(mem, [1, 2, 3, 4]);
    }

    #[test]
    fn strided_receive_scatters() {
        let mut mem = [0u8; 8];
        let layout = Layout::vector::<u8>(2, 2, 4).unwrap();
        // SAFETY: `mem` outlives `buf` and is not touched while `buf` exists.
        let mut buf = unsafe { RecvBuf::borrowed_with_layout(&mut mem, layout).unwrap() };
        assert_eq!(buf.capacity(), 4);
        assert_eq!(buf.write_at(0, &[1, 2, 3, 4, 5]), 4);
        drop(buf);
        assert_eq!(mem, [1, 2, 0, 0, 3, 4, 0, 0]);
    }

    #[test]
    fn send_packs_ranges() {
        let mem = [1u8, 2, 3, 4, 5, 6, 7, 8];
        let layout = Layout::vector::<u8>(2, 2, 4).unwrap();
        // SAFETY: `mem` outlives `buf` and is never written.
        let buf = unsafe { SendBuf::borrowed_with_layout(&mem, layout).unwrap() };
        assert_eq!(buf.packed_len(), 4);
        assert!(buf.contiguous().is_none());
        let mut out = [0u8; 3];
        assert_eq!(buf.pack_range(1, &mut out).unwrap(), 3);
        assert_eq!(out, [2, 5, 6]);
        assert_eq!(buf.to_vec().unwrap(), vec![1, 2, 5, 6]);
    }
}

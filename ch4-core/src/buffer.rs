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

use crate::datatype::Layout;
use crate::{Error, ErrorKind, Result};

/// Where the bytes of a buffer live.
enum Storage<P> {
    /// User memory lent for the lifetime of one request.
    Lent { ptr: P, len: usize },
    /// Memory owned by the request (packed copies, temporaries).
    Owned(Vec<u8>),
}

/// The data of a send: user memory (contiguous or described by a [`Layout`]) or an owned copy.
pub struct SendBuf {
    storage: Storage<*const u8>,
    layout: Option<Box<Layout>>,
}

impl SendBuf {
    /// A send buffer over `bytes` that a request may read until it completes.
    ///
    /// # Safety
    /// The memory behind `bytes` must stay valid and must not be written until every request
    /// holding this `SendBuf` has completed or been removed from the device.
    #[inline(always)]
    pub unsafe fn borrowed(bytes: &[u8]) -> SendBuf {
        SendBuf {
            storage: Storage::Lent {
                ptr: bytes.as_ptr(),
                len: bytes.len(),
            },
            layout: None,
        }
    }

    /// Like [`SendBuf::borrowed`], for the elements of `bytes` selected by `layout`.
    ///
    /// # Safety
    /// As for [`SendBuf::borrowed`].
    pub unsafe fn borrowed_with_layout(bytes: &[u8], layout: Layout) -> Result<SendBuf> {
        layout.check_fits(bytes.len())?;
        // SAFETY: the caller's contract is forwarded unchanged.
        let mut buf = unsafe { SendBuf::borrowed(bytes) };
        if !layout.is_contiguous() {
            buf.layout = Some(Box::new(layout));
        } else if let Storage::Lent { len, .. } = &mut buf.storage {
            *len = layout.packed_bytes();
        }
        Ok(buf)
    }

    /// A send buffer that owns its bytes (a packed copy made when the user's memory could not
    /// be held, or data the device generates itself).
    pub fn owned(bytes: Vec<u8>) -> SendBuf {
        SendBuf {
            storage: Storage::Owned(bytes),
            layout: None,
        }
    }

    /// The data as (pointer, length) when it is contiguous, for a network that reads it
    /// asynchronously (a libfabric `fi_tsend`); valid while this buffer is held by a request,
    /// as for [`RecvBuf::raw_parts`]. `None` for a buffer with a layout (pack it first).
    #[inline]
    pub fn raw_parts(&self) -> Option<(*const u8, usize)> {
        if self.layout.is_some() {
            return None;
        }
        Some(match &self.storage {
            Storage::Lent { ptr, len } => (*ptr, *len),
            Storage::Owned(v) => (v.as_ptr(), v.len()),
        })
    }

    /// The user memory as a slice (its whole extent when a layout is present).
    #[inline(always)]
    fn extent(&self) -> &[u8] {
        match &self.storage {
            // SAFETY: `borrowed` requires the memory to stay valid and unwritten while this
            // buffer exists; `ptr`/`len` came from a valid slice.
            Storage::Lent { ptr, len } => unsafe { std::slice::from_raw_parts(*ptr, *len) },
            Storage::Owned(v) => v,
        }
    }

    /// How many bytes the message carries.
    #[inline(always)]
    pub fn packed_len(&self) -> usize {
        match &self.layout {
            None => self.extent().len(),
            Some(l) => l.packed_bytes(),
        }
    }

    /// The message bytes when they are contiguous in memory (no packing needed).
    #[inline(always)]
    pub fn contiguous(&self) -> Option<&[u8]> {
        match self.layout {
            None => Some(self.extent()),
            Some(_) => None,
        }
    }

    /// Copies message bytes `[offset, offset + out.len())` into `out`; returns how many.
    pub fn pack_range(&self, offset: usize, out: &mut [u8]) -> Result<usize> {
        match &self.layout {
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
        let layout = self.layout.as_deref()?;
        layout.segments(self.extent(), offset, len, max_pieces)
    }

    /// The message as one contiguous byte vector (packing noncontiguous data).
    pub fn to_vec(&self) -> Result<Vec<u8>> {
        match &self.layout {
            None => Ok(self.extent().to_vec()),
            Some(l) => l.pack(self.extent()),
        }
    }
}

/// The destination of a receive: user memory (contiguous or described by a [`Layout`]).
pub struct RecvBuf {
    storage: Storage<*mut u8>,
    layout: Option<Box<Layout>>,
}

impl RecvBuf {
    /// A receive buffer over `bytes` that a request may write until it completes.
    ///
    /// # Safety
    /// The memory behind `bytes` must stay valid and must be neither read nor written by anyone
    /// else until every request holding this `RecvBuf` has completed or been removed.
    #[inline(always)]
    pub unsafe fn borrowed(bytes: &mut [u8]) -> RecvBuf {
        RecvBuf {
            storage: Storage::Lent {
                ptr: bytes.as_mut_ptr(),
                len: bytes.len(),
            },
            layout: None,
        }
    }

    /// Like [`RecvBuf::borrowed`], for the elements of `bytes` selected by `layout`.
    ///
    /// # Safety
    /// As for [`RecvBuf::borrowed`].
    pub unsafe fn borrowed_with_layout(bytes: &mut [u8], layout: Layout) -> Result<RecvBuf> {
        layout.check_fits(bytes.len())?;
        // SAFETY: the caller's contract is forwarded unchanged.
        let mut buf = unsafe { RecvBuf::borrowed(bytes) };
        if !layout.is_contiguous() {
            buf.layout = Some(Box::new(layout));
        } else if let Storage::Lent { len, .. } = &mut buf.storage {
            *len = layout.packed_bytes();
        }
        Ok(buf)
    }

    /// A receive buffer the request owns (used where no user memory exists, e.g. a discard).
    pub fn owned(capacity: usize) -> RecvBuf {
        RecvBuf {
            storage: Storage::Owned(vec![0; capacity]),
            layout: None,
        }
    }

    #[inline(always)]
    fn extent_mut(&mut self) -> &mut [u8] {
        match &mut self.storage {
            // SAFETY: `borrowed` requires exclusive, valid memory for the life of this buffer;
            // `ptr`/`len` came from a valid mutable slice.
            Storage::Lent { ptr, len } => unsafe { std::slice::from_raw_parts_mut(*ptr, *len) },
            Storage::Owned(v) => v,
        }
    }

    /// How many message bytes fit; anything beyond is truncated, never written.
    #[inline(always)]
    pub fn capacity(&self) -> usize {
        match (&self.layout, &self.storage) {
            (Some(l), _) => l.packed_bytes(),
            (None, Storage::Lent { len, .. }) => *len,
            (None, Storage::Owned(v)) => v.len(),
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
        if self.layout.is_some() {
            return None;
        }
        Some(match &mut self.storage {
            Storage::Lent { ptr, len } => (*ptr, *len),
            Storage::Owned(v) => (v.as_mut_ptr(), v.len()),
        })
    }

    /// The destination as one slice of [`RecvBuf::capacity`] bytes when it is contiguous (no
    /// layout), so a transport can copy into it directly.
    #[inline]
    pub fn contiguous_mut(&mut self) -> Option<&mut [u8]> {
        match self.layout {
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
        let RecvBuf { storage, layout } = self;
        let layout = layout.as_deref()?;
        let extent: &mut [u8] = match storage {
            // SAFETY: as in `extent_mut`: `borrowed` requires exclusive, valid memory for the
            // life of this buffer, and `ptr`/`len` came from a valid mutable slice.
            Storage::Lent { ptr, len } => unsafe { std::slice::from_raw_parts_mut(*ptr, *len) },
            Storage::Owned(v) => v,
        };
        layout.segments_mut(extent, offset, len, max_pieces)
    }

    /// Writes message bytes that start at message offset `offset`; bytes past
    /// [`RecvBuf::capacity`] are dropped. Returns how many were written.
    #[inline(always)]
    pub fn write_at(&mut self, offset: usize, data: &[u8]) -> usize {
        if self.layout.is_none() {
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
        match &self.layout {
            None => 0,
            Some(_) => {
                // Take the layout out for the call so the extent can be borrowed mutably.
                let layout = self.layout.take();
                let written = layout
                    .as_ref()
                    .map(|l| {
                        l.unpack_range(self.extent_mut(), offset, &data[..n])
                            .unwrap_or(0)
                    })
                    .unwrap_or(0);
                self.layout = layout;
                written
            }
        }
    }

    /// The owned bytes, for receives into device-owned memory.
    pub fn into_owned(self) -> Result<Vec<u8>> {
        match self.storage {
            Storage::Owned(v) => Ok(v),
            Storage::Lent { .. } => Err(Error::new(
                ErrorKind::Internal,
                "into_owned on a lent receive buffer",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

//! Typed buffers and noncontiguous layouts: the useful core of MPI datatypes.
//!
//! MPI lets a message live in a user buffer as a pattern of blocks (a column of a matrix, a
//! scattered set of records). The device does not want to know about element types, so a
//! [`Layout`] folds the element size in once, at construction, and from then on describes the
//! message purely in bytes: which byte ranges of the user buffer make up the message, and in
//! which order they are concatenated ("packed") on the wire.
//!
//! Sending and receiving any plain-old-data type is expressed with [`Pod`] (our counterpart of
//! an MPI "equivalence" between a Rust type and an MPI datatype): if a type is `Pod`, its bytes
//! are its value, so the device can move it as bytes without any conversion or `unsafe`.
//!
//! Layouts are validated once, when built, so the hot paths (packing a chunk, scattering an
//! arriving chunk) only need one buffer-length check per call and never panic.

use smallvec::SmallVec;

use crate::bail;
use crate::error::{Error, ErrorKind, Result};

/// Plain-old-data types can be sent and received as their bytes; derive it with
/// `#[derive(bytemuck::Pod, bytemuck::Zeroable, Clone, Copy)] #[repr(C)]` on your own structs.
/// Re-exported so users need no direct `bytemuck` dependency to name the bound.
pub use bytemuck::{Pod, Zeroable};

/// Views a typed buffer as the bytes the device moves, so that callers can hand any `Pod`
/// slice to the byte-level API of [`Layout`] without copying.
pub fn as_bytes<T: Pod>(s: &[T]) -> &[u8] {
    // Casting to `u8` cannot fail: `u8` has alignment 1 and every size is a multiple of 1.
    bytemuck::cast_slice(s)
}

/// Views a typed receive buffer as mutable bytes, so that the device can scatter arriving
/// data into it without knowing the element type; any byte pattern is a valid `Pod` value.
pub fn as_bytes_mut<T: Pod>(s: &mut [T]) -> &mut [u8] {
    // See `as_bytes`: a cast to bytes is always well aligned and sized.
    bytemuck::cast_slice_mut(s)
}

/// One block of an explicit (indexed) layout. `start` is the packed offset of the block's
/// first byte, i.e. the prefix sum of the lengths before it, kept so that a chunk at any
/// packed offset is located by binary search instead of a walk from the beginning.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Block {
    offset: usize,
    len: usize,
    start: usize,
}

/// The stored shape. Invariants established by the constructors (and relied upon by every
/// method, which is why they never need to re-check them):
/// * `Vector`: either `count == 0` (the empty layout, with `block == stride == 0`) or
///   `block > 0`, `stride >= block`, and `(count - 1) * stride + block` fits in `usize`;
///   `count == 1` always has `stride == block` so equal layouts compare equal.
/// * `List`: at least two blocks, all non-empty, pairwise disjoint, no block starting exactly
///   where its predecessor (in packing order) ends (those are merged), and `start` values are
///   the exact prefix sums. A list that would be empty or one block at offset 0 is stored as a
///   `Vector` instead, so `PartialEq` and `is_contiguous` see through the construction path.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Repr {
    Vector {
        count: usize,
        block: usize,
        stride: usize,
    },
    List(Box<[Block]>),
}

/// Where the bytes of a message sit inside a user buffer, in bytes.
///
/// Built from element counts by [`Layout::contiguous`], [`Layout::vector`] and
/// [`Layout::indexed`]; the element size is folded in at construction so the device and the
/// netmods work on bytes only. Regular strided layouts are stored as three numbers however
/// many blocks they have, so a million-row column costs no memory and any chunk of it is
/// located by a division.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    repr: Repr,
    /// Total payload bytes (the packed size), precomputed because every transfer asks.
    packed: usize,
    /// One past the last byte touched, precomputed for the per-call buffer check.
    extent: usize,
}

/// Multiplies user-provided sizes, turning overflow into an error that names the operands,
/// because a layout whose size cannot be represented can never describe a real buffer.
fn mul(a: usize, b: usize, what: &str) -> Result<usize> {
    match a.checked_mul(b) {
        Some(v) => Ok(v),
        None => bail!(Count, "{what}: {a} * {b} overflows usize"),
    }
}

/// Adds user-provided sizes; see [`mul`].
fn add(a: usize, b: usize, what: &str) -> Result<usize> {
    match a.checked_add(b) {
        Some(v) => Ok(v),
        None => bail!(Count, "{what}: {a} + {b} overflows usize"),
    }
}

/// Reports a broken internal invariant instead of panicking; unreachable if the constructors
/// are right, but a wrong answer must never take the process down.
#[cold]
fn internal(what: &str) -> Error {
    Error::new(
        ErrorKind::Internal,
        format!("datatype layout invariant broken: {what}"),
    )
}

impl Layout {
    /// The empty layout: a zero-count message, which MPI allows and which must still flow
    /// through matching and completion like any other.
    const EMPTY: Layout = Layout {
        repr: Repr::Vector {
            count: 0,
            block: 0,
            stride: 0,
        },
        packed: 0,
        extent: 0,
    };

    /// A single block of `bytes` bytes at offset 0: the common case, kept in the `Vector`
    /// form so that all paths share one representation for it.
    fn contiguous_bytes(bytes: usize) -> Layout {
        if bytes == 0 {
            return Layout::EMPTY;
        }
        Layout {
            repr: Repr::Vector {
                count: 1,
                block: bytes,
                stride: bytes,
            },
            packed: bytes,
            extent: bytes,
        }
    }

    /// `count` consecutive elements of `T` from the start of the buffer (MPI_Type_contiguous,
    /// or simply a typed buffer); fails with [`ErrorKind::Count`] if the byte size overflows.
    pub fn contiguous<T: Pod>(count: usize) -> Result<Layout> {
        let bytes = mul(count, std::mem::size_of::<T>(), "contiguous layout size")?;
        Ok(Layout::contiguous_bytes(bytes))
    }

    /// MPI_Type_vector: `count` blocks of `blocklen` elements, block starts `stride` elements
    /// apart.
    ///
    /// `stride < blocklen` is rejected ([`ErrorKind::Buffer`]) because the blocks would
    /// overlap, which would make a receive order-dependent (see [`Layout::indexed`]); negative
    /// strides are not representable at all. Sizes that overflow `usize` fail with
    /// [`ErrorKind::Count`]. A vector whose stride equals its block length is contiguous and
    /// is stored (and compares equal) as such.
    pub fn vector<T: Pod>(count: usize, blocklen: usize, stride: usize) -> Result<Layout> {
        if stride < blocklen {
            bail!(
                Buffer,
                "vector layout: stride {stride} is smaller than block length {blocklen}, so blocks would overlap"
            );
        }
        let size = std::mem::size_of::<T>();
        let block = mul(blocklen, size, "vector block size")?;
        let stride = mul(stride, size, "vector stride")?;
        let packed = mul(count, block, "vector packed size")?;
        if packed == 0 {
            return Ok(Layout::EMPTY);
        }
        // count >= 1 here because packed > 0.
        let extent = add(
            mul(count - 1, stride, "vector extent")?,
            block,
            "vector extent",
        )?;
        if count == 1 || stride == block {
            return Ok(Layout::contiguous_bytes(packed));
        }
        Ok(Layout {
            repr: Repr::Vector {
                count,
                block,
                stride,
            },
            packed,
            extent,
        })
    }

    /// MPI_Type_indexed: `(displacement, length)` pairs in elements, packed in the order
    /// given.
    ///
    /// Blocks may appear in any order but must not overlap ([`ErrorKind::Buffer`] otherwise).
    /// MPI permits overlapping blocks in send datatypes, but a layout does not know whether it
    /// will be used to send or to receive, and for a receive overlap means the result depends
    /// on the order in which bytes land, which with out-of-order rendezvous chunks would be
    /// nondeterministic; it also breaks the exactness of `unpack(pack(x))`. Zero-length blocks
    /// touch nothing and are dropped; blocks that continue exactly where the previous one
    /// ended are merged, so an indexed layout that is really contiguous reports
    /// [`Layout::is_contiguous`]. Overflowing sizes fail with [`ErrorKind::Count`].
    pub fn indexed<T: Pod>(blocks: &[(usize, usize)]) -> Result<Layout> {
        let size = std::mem::size_of::<T>();
        let mut list: Vec<Block> = Vec::with_capacity(blocks.len());
        let mut packed = 0usize;
        for &(disp, len) in blocks {
            let offset = mul(disp, size, "indexed block displacement")?;
            let len = mul(len, size, "indexed block length")?;
            if len == 0 {
                continue;
            }
            // Checked once here, so every later `offset + len` of a (merged) block is safe.
            add(offset, len, "indexed block end")?;
            match list.last_mut() {
                Some(prev) if prev.offset.checked_add(prev.len) == Some(offset) => {
                    prev.len = add(prev.len, len, "indexed block length")?;
                }
                _ => list.push(Block {
                    offset,
                    len,
                    start: packed,
                }),
            }
            // Disjoint blocks all end by usize::MAX, so their total cannot overflow: if it
            // does, blocks overlap, and that is the error worth reporting.
            packed = match packed.checked_add(len) {
                Some(p) => p,
                None => bail!(
                    Buffer,
                    "indexed layout: blocks overlap (their lengths add up to more than usize::MAX)"
                ),
            };
        }

        // Overlap check on a copy sorted by offset: each block must end before the next
        // starts. Merged neighbours cannot hide an overlap because merging only joins blocks
        // that touch without sharing a byte.
        let mut sorted: Vec<(usize, usize)> = list.iter().map(|b| (b.offset, b.len)).collect();
        sorted.sort_unstable();
        let mut extent = 0usize;
        for &(offset, len) in &sorted {
            if offset < extent {
                bail!(
                    Buffer,
                    "indexed layout: block at byte {offset} (length {len}) overlaps a block ending at byte {extent}"
                );
            }
            // Cannot fail: checked above (a merged block ends where its last part ended).
            extent = add(offset, len, "indexed block end")?;
        }

        match list.as_slice() {
            [] => Ok(Layout::EMPTY),
            [only] if only.offset == 0 => Ok(Layout::contiguous_bytes(only.len)),
            _ => Ok(Layout {
                repr: Repr::List(list.into_boxed_slice()),
                packed,
                extent,
            }),
        }
    }

    /// True if the message is one block at offset 0 of the buffer (the empty layout counts),
    /// so the device can send straight from, or receive straight into, the user buffer.
    pub fn is_contiguous(&self) -> bool {
        // Comparing packed size with extent is not enough: disjoint blocks can cover the
        // whole extent in a permuted packing order. The constructors store every layout that
        // is one block at 0 (or empty) as a vector of at most one block, so look at the form.
        matches!(self.repr, Repr::Vector { count: 0 | 1, .. })
    }

    /// The payload size: how many bytes go on the wire, and what a status reports as count.
    pub fn packed_bytes(&self) -> usize {
        self.packed
    }

    /// One past the last buffer byte the layout touches (0 if empty): the minimum buffer size.
    pub fn extent_bytes(&self) -> usize {
        self.extent
    }

    /// How many blocks [`Layout::blocks`] yields, without walking them; lets a netmod choose
    /// between an iovec send and packing before committing to either.
    pub fn block_count(&self) -> usize {
        match &self.repr {
            Repr::Vector { count, .. } => *count,
            Repr::List(list) => list.len(),
        }
    }

    /// Checks that a buffer of `buffer_bytes` bytes holds every byte the layout touches, so a
    /// bad user buffer is reported at the call ([`ErrorKind::Count`]) instead of mid-transfer.
    pub fn check_fits(&self, buffer_bytes: usize) -> Result<()> {
        if buffer_bytes < self.extent {
            bail!(
                Count,
                "layout extends to {} bytes but the buffer holds only {} bytes",
                self.extent,
                buffer_bytes
            );
        }
        Ok(())
    }

    /// The `(byte offset, byte length)` blocks of the message, in packing order. Never yields
    /// an empty block; useful for building transport-specific scatter/gather lists.
    pub fn blocks(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        let (count, block, stride, list): (usize, usize, usize, &[Block]) = match &self.repr {
            Repr::Vector {
                count,
                block,
                stride,
            } => (*count, *block, *stride, &[]),
            Repr::List(list) => (0, 0, 0, list),
        };
        // `i * stride` cannot overflow: i < count and (count - 1) * stride was checked.
        (0..count)
            .map(move |i| (i * stride, block))
            .chain(list.iter().map(|b| (b.offset, b.len)))
    }

    /// Calls `f(buffer offset, length)` for the pieces of the buffer that hold packed bytes
    /// `[offset, offset + len)`, in order. The caller guarantees `offset + len <= packed`.
    /// The first block is found in O(1) for vectors and O(log n) for lists, so streaming a
    /// large message in chunks costs time proportional to the chunk, not to its position.
    fn for_each_segment(
        &self,
        offset: usize,
        len: usize,
        mut f: impl FnMut(usize, usize) -> Result<()>,
    ) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        match &self.repr {
            Repr::Vector {
                count,
                block,
                stride,
            } => {
                let first = offset
                    .checked_div(*block)
                    .ok_or_else(|| internal("empty vector block with data"))?;
                let mut within = offset % *block;
                let mut left = len;
                for i in first..*count {
                    let n = (*block - within).min(left);
                    f(i * *stride + within, n)?;
                    left -= n;
                    if left == 0 {
                        return Ok(());
                    }
                    within = 0;
                }
                Err(internal("vector segment range beyond the message"))
            }
            Repr::List(list) => {
                let idx = list
                    .partition_point(|b| b.start <= offset)
                    .saturating_sub(1);
                let rest = list
                    .get(idx..)
                    .ok_or_else(|| internal("list block index"))?;
                let mut within = rest
                    .first()
                    .and_then(|b| offset.checked_sub(b.start))
                    .ok_or_else(|| internal("list block start"))?;
                let mut left = len;
                for b in rest {
                    let n = b
                        .len
                        .checked_sub(within)
                        .ok_or_else(|| internal("list offset inside block"))?
                        .min(left);
                    f(b.offset + within, n)?;
                    left -= n;
                    if left == 0 {
                        return Ok(());
                    }
                    within = 0;
                }
                Err(internal("list segment range beyond the message"))
            }
        }
    }

    /// Copies packed bytes `[offset, offset + out.len())` of the message, gathered from `src`,
    /// into `out`, and returns how many were copied: fewer than `out.len()` only at the end of
    /// the message. This streams a large send in chunks without packing it whole.
    ///
    /// Fails with [`ErrorKind::Count`] if `src` is shorter than [`Layout::extent_bytes`] or if
    /// `offset` lies beyond the message (`offset == packed_bytes()` copies nothing), since a
    /// sender asking for bytes past its own message is a bookkeeping bug worth surfacing.
    pub fn pack_range(&self, src: &[u8], offset: usize, out: &mut [u8]) -> Result<usize> {
        self.check_fits(src.len())?;
        let Some(remaining) = self.packed.checked_sub(offset) else {
            bail!(
                Count,
                "pack offset {offset} is beyond the message of {} bytes",
                self.packed
            );
        };
        let n = remaining.min(out.len());
        let mut pos = 0usize;
        self.for_each_segment(offset, n, |at, len| {
            let from = src
                .get(at..at + len)
                .ok_or_else(|| internal("pack source range"))?;
            let to = out
                .get_mut(pos..pos + len)
                .ok_or_else(|| internal("pack output range"))?;
            to.copy_from_slice(from);
            pos += len;
            Ok(())
        })?;
        Ok(n)
    }

    /// Scatters `data`, the packed bytes starting at packed offset `offset`, into `dst`, and
    /// returns how many were written. Chunks may arrive in any order (rendezvous data).
    ///
    /// Never writes past [`Layout::packed_bytes`]: bytes of `data` beyond the end of the
    /// message, and whole chunks starting at or beyond it, are ignored and the return value
    /// says how many were used. This is how a truncated receive stays memory-safe while the
    /// device still drains the sender's data; the caller reports MPI_ERR_TRUNCATE. Fails with
    /// [`ErrorKind::Count`] if `dst` is shorter than [`Layout::extent_bytes`].
    pub fn unpack_range(&self, dst: &mut [u8], offset: usize, data: &[u8]) -> Result<usize> {
        self.check_fits(dst.len())?;
        let n = self.packed.saturating_sub(offset).min(data.len());
        let mut pos = 0usize;
        self.for_each_segment(offset, n, |at, len| {
            let from = data
                .get(pos..pos + len)
                .ok_or_else(|| internal("unpack data range"))?;
            let to = dst
                .get_mut(at..at + len)
                .ok_or_else(|| internal("unpack destination range"))?;
            to.copy_from_slice(from);
            pos += len;
            Ok(())
        })?;
        Ok(n)
    }

    /// The pieces of `dst` that hold packed bytes `[offset, offset + len)`, in order, as
    /// disjoint mutable slices: a scatter list for reading a byte stream straight into a
    /// noncontiguous buffer. `None` when the range is not inside the message, when it touches
    /// more than `max_pieces` blocks, or when the blocks do not ascend through the buffer (an
    /// indexed layout listing them out of order), since then they cannot be split off one
    /// after the other — the caller copies through a staging buffer instead.
    pub fn segments_mut<'a>(
        &self,
        dst: &'a mut [u8],
        offset: usize,
        len: usize,
        max_pieces: usize,
    ) -> Option<SmallVec<[&'a mut [u8]; 8]>> {
        self.check_fits(dst.len()).ok()?;
        let spans = self.spans(offset, len, max_pieces)?;
        let mut pieces = SmallVec::with_capacity(spans.len());
        let mut rest = dst;
        let mut consumed = 0usize;
        for (at, n) in spans {
            let skip = at.checked_sub(consumed)?;
            if skip.checked_add(n)? > rest.len() {
                return None;
            }
            let (_, tail) = std::mem::take(&mut rest).split_at_mut(skip);
            let (piece, tail) = tail.split_at_mut(n);
            pieces.push(piece);
            rest = tail;
            consumed = at + n;
        }
        Some(pieces)
    }

    /// The pieces of `src` that hold packed bytes `[offset, offset + len)`, in packing order:
    /// a gather list, so a transport can send a range of a noncontiguous message without
    /// packing it first. `None` when the range is not inside the message or touches more than
    /// `max_pieces` blocks.
    pub fn segments<'a>(
        &self,
        src: &'a [u8],
        offset: usize,
        len: usize,
        max_pieces: usize,
    ) -> Option<SmallVec<[&'a [u8]; 8]>> {
        self.check_fits(src.len()).ok()?;
        let spans = self.spans(offset, len, max_pieces)?;
        spans.iter().map(|&(at, n)| src.get(at..at + n)).collect()
    }

    /// `(buffer offset, length)` of the blocks holding packed bytes `[offset, offset + len)`,
    /// if the range is inside the message and touches at most `max_pieces` blocks.
    fn spans(
        &self,
        offset: usize,
        len: usize,
        max_pieces: usize,
    ) -> Option<SmallVec<[(usize, usize); 8]>> {
        if offset.checked_add(len)? > self.packed {
            return None;
        }
        let mut spans = SmallVec::new();
        self.for_each_segment(offset, len, |at, n| {
            if spans.len() == max_pieces {
                bail!(Count, "more than {max_pieces} pieces");
            }
            spans.push((at, n));
            Ok(())
        })
        .ok()?;
        Some(spans)
    }

    /// Gathers the whole message from `src` into a new buffer, for transports (and eager
    /// sends) that need the payload in one piece. Fails like [`Layout::pack_range`].
    pub fn pack(&self, src: &[u8]) -> Result<Vec<u8>> {
        self.check_fits(src.len())?;
        let mut out = Vec::with_capacity(self.packed);
        for (at, len) in self.blocks() {
            let from = src
                .get(at..at + len)
                .ok_or_else(|| internal("pack source block"))?;
            out.extend_from_slice(from);
        }
        Ok(out)
    }

    /// Borrowed iovecs over the user buffer, in packing order, so a netmod can send a
    /// noncontiguous message with scatter/gather I/O instead of packing it. Fails with
    /// [`ErrorKind::Count`] if `src` is shorter than [`Layout::extent_bytes`].
    pub fn iovecs<'a>(&self, src: &'a [u8]) -> Result<SmallVec<[&'a [u8]; 4]>> {
        self.check_fits(src.len())?;
        let mut v = SmallVec::with_capacity(self.block_count());
        for (at, len) in self.blocks() {
            v.push(
                src.get(at..at + len)
                    .ok_or_else(|| internal("iovec block"))?,
            );
        }
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn kind<T: std::fmt::Debug>(r: Result<T>) -> ErrorKind {
        r.expect_err("expected an error").kind()
    }

    fn blocks(l: &Layout) -> Vec<(usize, usize)> {
        l.blocks().collect()
    }

    fn pattern(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + 3) as u8).collect()
    }

    /// The (buffer offset, length) of each piece `segments_mut` gives, found by pointer.
    fn pieces(
        l: &Layout,
        buf: &mut [u8],
        offset: usize,
        len: usize,
        max: usize,
    ) -> Option<Vec<(usize, usize)>> {
        let base = buf.as_ptr() as usize;
        let got = l.segments_mut(buf, offset, len, max)?;
        Some(
            got.iter()
                .map(|p| (p.as_ptr() as usize - base, p.len()))
                .collect(),
        )
    }

    #[test]
    fn gather_segments_concatenate_to_the_packed_range() {
        let l = Layout::indexed::<u8>(&[(12, 5), (0, 3), (30, 4)]).unwrap();
        let src = pattern(l.extent_bytes());
        let packed = l.pack(&src).unwrap();
        for (offset, len) in [(0, 12), (1, 9), (5, 7), (12, 0)] {
            let got: Vec<u8> = l.segments(&src, offset, len, 8).unwrap().concat();
            assert_eq!(got, packed[offset..offset + len], "range {offset}+{len}");
        }
        assert!(
            l.segments(&src, 0, 12, 2).is_none(),
            "three blocks, two allowed"
        );
        assert!(l.segments(&src, 10, 3, 8).is_none(), "beyond the message");
        assert!(
            l.segments(&src[..20], 0, 12, 8).is_none(),
            "buffer too short"
        );
    }

    #[test]
    fn segments_cover_a_range_of_the_packed_bytes_in_buffer_order() {
        // Blocks of 4 bytes every 10.
        let l = Layout::vector::<u8>(5, 4, 10).unwrap();
        let mut buf = vec![0u8; l.extent_bytes()];
        assert_eq!(
            pieces(&l, &mut buf, 0, 20, 8),
            Some(vec![(0, 4), (10, 4), (20, 4), (30, 4), (40, 4)])
        );
        // From the middle of a block to the middle of another.
        assert_eq!(
            pieces(&l, &mut buf, 2, 9, 8),
            Some(vec![(2, 2), (10, 4), (20, 3)])
        );
        assert_eq!(pieces(&l, &mut buf, 6, 0, 8), Some(vec![]));
        // Too many pieces, or beyond the message: none.
        assert_eq!(pieces(&l, &mut buf, 0, 20, 4), None);
        assert_eq!(pieces(&l, &mut buf, 8, 13, 8), None);
        // Blocks listed out of buffer order cannot be split off one after another.
        let back = Layout::indexed::<u8>(&[(20, 4), (0, 4)]).unwrap();
        let mut buf = vec![0u8; back.extent_bytes()];
        assert_eq!(pieces(&back, &mut buf, 0, 8, 8), None);
        // Writing through the pieces is unpacking.
        let l = Layout::indexed::<u8>(&[(1, 3), (6, 2), (9, 4)]).unwrap();
        let mut a = vec![0u8; l.extent_bytes()];
        let data = pattern(9);
        let mut at = 0;
        for p in l.segments_mut(&mut a, 0, 9, 8).unwrap() {
            let n = p.len();
            p.copy_from_slice(&data[at..at + n]);
            at += n;
        }
        let mut b = vec![0u8; l.extent_bytes()];
        l.unpack_range(&mut b, 0, &data).unwrap();
        assert_eq!(a, b);
    }

    #[derive(bytemuck::Pod, bytemuck::Zeroable, Clone, Copy, Debug, PartialEq)]
    #[repr(C)]
    struct Particle {
        x: f32,
        y: f32,
        id: u32,
    }

    #[test]
    fn as_bytes_views_pod_values() {
        let v = [0x0102_0304u32, 0x0506_0708];
        let b = as_bytes(&v);
        assert_eq!(b.len(), 8);
        assert_eq!(b[..4], 0x0102_0304u32.to_ne_bytes());
        let mut p = [Particle {
            x: 0.0,
            y: 0.0,
            id: 0,
        }; 2];
        let src = [Particle {
            x: 1.5,
            y: -2.0,
            id: 7,
        }; 2];
        as_bytes_mut(&mut p).copy_from_slice(as_bytes(&src));
        assert_eq!(p, src);
    }

    #[test]
    fn contiguous_layouts() {
        let l = Layout::contiguous::<u32>(5).unwrap();
        assert!(l.is_contiguous());
        assert_eq!(l.packed_bytes(), 20);
        assert_eq!(l.extent_bytes(), 20);
        assert_eq!(blocks(&l), vec![(0, 20)]);
        assert_eq!(l.block_count(), 1);
        assert_eq!(l, Layout::contiguous::<u8>(20).unwrap());
    }

    #[test]
    fn contiguous_zero_and_zst() {
        let l = Layout::contiguous::<u64>(0).unwrap();
        assert!(l.is_contiguous());
        assert_eq!(
            (l.packed_bytes(), l.extent_bytes(), l.block_count()),
            (0, 0, 0)
        );
        assert_eq!(blocks(&l), vec![]);
        assert_eq!(Layout::contiguous::<()>(usize::MAX).unwrap(), l);
    }

    #[test]
    fn contiguous_overflow_is_count_error() {
        assert_eq!(
            kind(Layout::contiguous::<u32>(usize::MAX)),
            ErrorKind::Count
        );
        assert_eq!(
            kind(Layout::contiguous::<u16>(usize::MAX / 2 + 1)),
            ErrorKind::Count
        );
        assert!(Layout::contiguous::<u16>(usize::MAX / 2).is_ok());
    }

    #[test]
    fn vector_layout_blocks_in_bytes() {
        // Column of a 4x3 matrix of u16: 4 blocks of 1 element, stride 3.
        let l = Layout::vector::<u16>(4, 1, 3).unwrap();
        assert!(!l.is_contiguous());
        assert_eq!(l.packed_bytes(), 8);
        assert_eq!(l.extent_bytes(), 3 * 6 + 2);
        assert_eq!(blocks(&l), vec![(0, 2), (6, 2), (12, 2), (18, 2)]);
        assert_eq!(l.block_count(), 4);
    }

    #[test]
    fn vector_normalizes_to_contiguous() {
        let c = Layout::contiguous::<u32>(6).unwrap();
        assert_eq!(Layout::vector::<u32>(3, 2, 2).unwrap(), c);
        assert_eq!(Layout::vector::<u32>(1, 6, 100).unwrap(), c);
        assert!(Layout::vector::<u32>(1, 6, 100).unwrap().is_contiguous());
        let empty = Layout::contiguous::<u8>(0).unwrap();
        assert_eq!(Layout::vector::<u32>(0, 6, 100).unwrap(), empty);
        assert_eq!(Layout::vector::<u32>(5, 0, 100).unwrap(), empty);
        assert_eq!(Layout::vector::<()>(5, 2, 3).unwrap(), empty);
    }

    #[test]
    fn vector_rejects_overlap_and_overflow() {
        assert_eq!(kind(Layout::vector::<u8>(3, 4, 3)), ErrorKind::Buffer);
        assert_eq!(kind(Layout::vector::<u8>(1, 4, 0)), ErrorKind::Buffer);
        assert_eq!(
            kind(Layout::vector::<u64>(2, 1, usize::MAX / 4)),
            ErrorKind::Count
        );
        assert_eq!(
            kind(Layout::vector::<u8>(usize::MAX, 2, 2)),
            ErrorKind::Count
        );
        // Packed size fits but the extent does not.
        assert_eq!(
            kind(Layout::vector::<u8>(3, 1, usize::MAX / 2 + 1)),
            ErrorKind::Count
        );
        // The largest representable extent is accepted.
        let l = Layout::vector::<u8>(2, 1, usize::MAX - 1).unwrap();
        assert_eq!(l.extent_bytes(), usize::MAX);
    }

    #[test]
    fn indexed_layout_keeps_packing_order() {
        let l = Layout::indexed::<u32>(&[(4, 2), (0, 1), (10, 3)]).unwrap();
        assert!(!l.is_contiguous());
        assert_eq!(blocks(&l), vec![(16, 8), (0, 4), (40, 12)]);
        assert_eq!(l.packed_bytes(), 24);
        assert_eq!(l.extent_bytes(), 52);
        assert_eq!(l.block_count(), 3);
    }

    #[test]
    fn indexed_merges_adjacent_blocks() {
        let l = Layout::indexed::<u16>(&[(0, 2), (2, 3), (5, 0), (5, 1)]).unwrap();
        assert!(l.is_contiguous());
        assert_eq!(l, Layout::contiguous::<u16>(6).unwrap());
        // Adjacent but in reverse order: not mergeable, not contiguous.
        let r = Layout::indexed::<u8>(&[(2, 2), (0, 2)]).unwrap();
        assert!(!r.is_contiguous());
        assert_eq!(blocks(&r), vec![(2, 2), (0, 2)]);
        // Merging in the middle keeps later blocks' packed offsets right.
        let m = Layout::indexed::<u8>(&[(10, 2), (12, 2), (0, 3)]).unwrap();
        assert_eq!(blocks(&m), vec![(10, 4), (0, 3)]);
        let src = pattern(20);
        assert_eq!(m.pack(&src).unwrap(), [&src[10..14], &src[0..3]].concat());
    }

    #[test]
    fn indexed_single_block_not_at_zero_is_not_contiguous() {
        let l = Layout::indexed::<u8>(&[(3, 4)]).unwrap();
        assert!(!l.is_contiguous());
        assert_eq!((l.packed_bytes(), l.extent_bytes()), (4, 7));
        assert_eq!(l.pack(&pattern(7)).unwrap(), pattern(7)[3..].to_vec());
    }

    #[test]
    fn indexed_empty_and_zero_length_blocks() {
        let empty = Layout::contiguous::<u8>(0).unwrap();
        assert_eq!(Layout::indexed::<u8>(&[]).unwrap(), empty);
        assert_eq!(Layout::indexed::<u8>(&[(5, 0), (1, 0)]).unwrap(), empty);
        // A zero-length block inside another block touches nothing, so it is not an overlap.
        let l = Layout::indexed::<u8>(&[(0, 4), (2, 0), (8, 1)]).unwrap();
        assert_eq!(blocks(&l), vec![(0, 4), (8, 1)]);
    }

    #[test]
    fn indexed_rejects_overlap() {
        for bad in [
            &[(0, 4), (3, 2)][..],
            &[(3, 2), (0, 4)],
            &[(0, 10), (2, 2)],
            &[(5, 1), (5, 1)],
            &[(0, 2), (2, 2), (3, 1)],
            &[(20, 1), (0, 2), (10, 5), (14, 3)],
        ] {
            assert_eq!(
                kind(Layout::indexed::<u32>(bad)),
                ErrorKind::Buffer,
                "{bad:?}"
            );
        }
    }

    #[test]
    fn indexed_rejects_overflow() {
        assert_eq!(
            kind(Layout::indexed::<u32>(&[(usize::MAX / 2, 1)])),
            ErrorKind::Count
        );
        assert_eq!(
            kind(Layout::indexed::<u8>(&[(usize::MAX, 1)])),
            ErrorKind::Count
        );
        assert_eq!(
            kind(Layout::indexed::<u16>(&[(0, usize::MAX / 2 + 1)])),
            ErrorKind::Count
        );
        // Lengths whose total overflows can only come from overlapping blocks.
        assert_eq!(
            kind(Layout::indexed::<u8>(&[(0, usize::MAX), (0, 1)])),
            ErrorKind::Buffer
        );
        // Ending exactly at usize::MAX is representable; a zero-length block anywhere is fine.
        let l = Layout::indexed::<u8>(&[(0, usize::MAX), (usize::MAX, 0)]).unwrap();
        assert_eq!(l.extent_bytes(), usize::MAX);
        assert!(l.is_contiguous());
    }

    #[test]
    fn check_fits_names_both_numbers() {
        let l = Layout::vector::<u8>(3, 2, 5).unwrap();
        assert_eq!(l.extent_bytes(), 12);
        assert!(l.check_fits(12).is_ok());
        assert!(l.check_fits(100).is_ok());
        let e = l.check_fits(11).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Count);
        assert!(
            e.detail().contains("12") && e.detail().contains("11"),
            "{e}"
        );
        assert!(Layout::contiguous::<u8>(0).unwrap().check_fits(0).is_ok());
    }

    #[test]
    fn short_buffers_are_errors_not_panics() {
        let l = Layout::indexed::<u8>(&[(6, 2), (0, 2)]).unwrap();
        let short = [0u8; 7];
        let mut short_mut = [0u8; 7];
        let mut out = [0u8; 4];
        assert_eq!(kind(l.pack(&short)), ErrorKind::Count);
        assert_eq!(kind(l.iovecs(&short)), ErrorKind::Count);
        assert_eq!(kind(l.pack_range(&short, 0, &mut out)), ErrorKind::Count);
        assert_eq!(
            kind(l.unpack_range(&mut short_mut, 0, &out)),
            ErrorKind::Count
        );
        assert_eq!(short_mut, [0u8; 7]);
    }

    #[test]
    fn pack_and_iovecs() {
        let src = pattern(32);
        let l = Layout::vector::<u16>(3, 2, 5).unwrap();
        let packed = l.pack(&src).unwrap();
        assert_eq!(packed, [&src[0..4], &src[10..14], &src[20..24]].concat());
        let iov = l.iovecs(&src).unwrap();
        assert_eq!(iov.len(), 3);
        assert!(!iov.spilled());
        assert_eq!(iov.concat(), packed);
        let c = Layout::contiguous::<u8>(5).unwrap();
        assert_eq!(c.iovecs(&src).unwrap().as_slice(), &[&src[..5]]);
        let e = Layout::contiguous::<u8>(0).unwrap();
        assert!(e.iovecs(&[]).unwrap().is_empty());
        assert!(e.pack(&[]).unwrap().is_empty());
    }

    #[test]
    fn pack_range_streams_chunks() {
        let src = pattern(64);
        let l = Layout::vector::<u8>(5, 3, 7).unwrap();
        let whole = l.pack(&src).unwrap();
        let mut out = [0u8; 4];
        assert_eq!(l.pack_range(&src, 5, &mut out).unwrap(), 4);
        assert_eq!(out, whole[5..9]);
        // Short at the end of the message.
        assert_eq!(l.pack_range(&src, 13, &mut out).unwrap(), 2);
        assert_eq!(out[..2], whole[13..15]);
        // At the end: nothing; beyond: an error.
        assert_eq!(l.pack_range(&src, 15, &mut out).unwrap(), 0);
        assert_eq!(kind(l.pack_range(&src, 16, &mut out)), ErrorKind::Count);
        assert_eq!(
            kind(l.pack_range(&src, usize::MAX, &mut out)),
            ErrorKind::Count
        );
        // Empty output copies nothing.
        assert_eq!(l.pack_range(&src, 3, &mut []).unwrap(), 0);
    }

    #[test]
    fn pack_range_on_large_vector_starts_mid_message() {
        // A million 8-byte blocks: the chunk near the end must be found by division.
        let l = Layout::vector::<u64>(1_000_000, 1, 2).unwrap();
        let src = vec![0xABu8; l.extent_bytes()];
        let mut out = [0u8; 24];
        let off = l.packed_bytes() - 20;
        assert_eq!(l.pack_range(&src, off, &mut out).unwrap(), 20);
        assert!(out[..20].iter().all(|&b| b == 0xAB));
    }

    #[test]
    fn unpack_range_scatters_and_truncates() {
        let l = Layout::indexed::<u8>(&[(8, 3), (0, 2)]).unwrap();
        let mut dst = [0xEEu8; 12];
        // Packed bytes 2.. are buffer byte 10, then bytes 0 and 1; the fourth is ignored.
        assert_eq!(l.unpack_range(&mut dst, 2, &[1, 2, 3, 4]).unwrap(), 3);
        let mut want = [0xEEu8; 12];
        want[10] = 1;
        want[0] = 2;
        want[1] = 3;
        assert_eq!(dst, want);
        assert_eq!(l.unpack_range(&mut dst, 0, &[9, 8]).unwrap(), 2);
        assert_eq!(dst[8..11], [9, 8, 1]);
        // Chunks at or beyond the end are ignored.
        let before = dst;
        assert_eq!(l.unpack_range(&mut dst, 5, &[7; 10]).unwrap(), 0);
        assert_eq!(l.unpack_range(&mut dst, usize::MAX, &[7; 10]).unwrap(), 0);
        assert_eq!(l.unpack_range(&mut dst, 1, &[]).unwrap(), 0);
        assert_eq!(dst, before);
    }

    #[test]
    fn unpack_into_typed_buffer() {
        let src: Vec<Particle> = (0..6)
            .map(|i| Particle {
                x: i as f32,
                y: -(i as f32),
                id: i,
            })
            .collect();
        let l = Layout::vector::<Particle>(3, 1, 2).unwrap();
        let packed = l.pack(as_bytes(&src)).unwrap();
        let mut dst = vec![Particle::zeroed(); 5];
        let n = l.unpack_range(as_bytes_mut(&mut dst), 0, &packed).unwrap();
        assert_eq!(n, 3 * std::mem::size_of::<Particle>());
        assert_eq!(dst[0], src[0]);
        assert_eq!(dst[2], src[2]);
        assert_eq!(dst[4], src[4]);
        assert_eq!(dst[1], Particle::zeroed());
    }

    // ---- property tests ----

    /// Builds a vector layout for one of a few element sizes, together with a reference list
    /// of packed buffer byte offsets computed straight from the MPI definition.
    fn vector_case() -> impl Strategy<Value = (Layout, Vec<usize>)> {
        (0usize..3, 0usize..12, 0usize..5, 0usize..4).prop_map(|(ty, count, blocklen, gap)| {
            let stride = blocklen + gap;
            let (l, size) = match ty {
                0 => (Layout::vector::<u8>(count, blocklen, stride), 1),
                1 => (Layout::vector::<u32>(count, blocklen, stride), 4),
                _ => (Layout::vector::<[u8; 3]>(count, blocklen, stride), 3),
            };
            let mut reference = Vec::new();
            for i in 0..count {
                for j in 0..blocklen * size {
                    reference.push(i * stride * size + j);
                }
            }
            (l.unwrap(), reference)
        })
    }

    /// Builds a random non-overlapping indexed layout with blocks in shuffled order (gaps of
    /// zero and empty blocks included, to exercise merging), and its reference byte offsets.
    fn indexed_case() -> impl Strategy<Value = (Layout, Vec<usize>)> {
        (
            0usize..3,
            prop::collection::vec((0usize..4, 0usize..6), 0..10),
            any::<bool>(),
        )
            .prop_flat_map(|(ty, spans, shuffle)| {
                let mut at = 0;
                let mut list = Vec::new();
                for (gap, len) in spans {
                    at += gap;
                    list.push((at, len));
                    at += len;
                }
                let order = if shuffle {
                    Just(list).prop_shuffle().boxed()
                } else {
                    Just(list).boxed()
                };
                (Just(ty), order)
            })
            .prop_map(|(ty, list)| {
                let (l, size) = match ty {
                    0 => (Layout::indexed::<u8>(&list), 1),
                    1 => (Layout::indexed::<u32>(&list), 4),
                    _ => (Layout::indexed::<[u8; 3]>(&list), 3),
                };
                let mut reference = Vec::new();
                for &(disp, len) in &list {
                    for j in 0..len * size {
                        reference.push(disp * size + j);
                    }
                }
                (l.unwrap(), reference)
            })
    }

    fn any_case() -> impl Strategy<Value = (Layout, Vec<usize>)> {
        prop_oneof![vector_case(), indexed_case()]
    }

    /// A layout, a source buffer covering its extent (plus slack), and a destination
    /// buffer with different random contents.
    fn with_buffers() -> impl Strategy<Value = (Layout, Vec<usize>, Vec<u8>, Vec<u8>)> {
        (any_case(), 0usize..8).prop_flat_map(|((l, r), slack)| {
            let n = l.extent_bytes() + slack;
            (
                Just(l),
                Just(r),
                prop::collection::vec(any::<u8>(), n),
                prop::collection::vec(any::<u8>(), n),
            )
        })
    }

    /// Splits `0..len` into consecutive chunks at random cut points.
    fn chunks(len: usize, cuts: &[usize]) -> Vec<(usize, usize)> {
        let mut points: Vec<usize> = cuts.iter().map(|c| c % (len + 1)).collect();
        points.push(0);
        points.push(len);
        points.sort_unstable();
        points.dedup();
        points.windows(2).map(|w| (w[0], w[1])).collect()
    }

    proptest! {
        #[test]
        fn layout_matches_reference((l, reference, src, _dst) in with_buffers()) {
            prop_assert_eq!(l.packed_bytes(), reference.len());
            prop_assert_eq!(l.extent_bytes(), reference.iter().map(|&o| o + 1).max().unwrap_or(0));
            let expect: Vec<u8> = reference.iter().map(|&o| src[o]).collect();
            prop_assert_eq!(l.pack(&src).unwrap(), expect);
            prop_assert_eq!(l.block_count(), l.blocks().count());
            prop_assert!(l.blocks().all(|(_, len)| len > 0));
            let contiguous = reference.iter().copied().eq(0..reference.len());
            prop_assert_eq!(l.is_contiguous(), contiguous);
        }

        #[test]
        fn pack_equals_concatenated_iovecs((l, _r, src, _dst) in with_buffers()) {
            let iov = l.iovecs(&src).unwrap();
            prop_assert_eq!(iov.len(), l.block_count());
            prop_assert_eq!(iov.concat(), l.pack(&src).unwrap());
        }

        #[test]
        fn unpack_restores_layout_bytes_only((l, _r, src, dst) in with_buffers()) {
            let packed = l.pack(&src).unwrap();
            let mut out = dst.clone();
            prop_assert_eq!(l.unpack_range(&mut out, 0, &packed).unwrap(), l.packed_bytes());
            let mut inside = vec![false; dst.len()];
            for (at, len) in l.blocks() {
                inside[at..at + len].iter_mut().for_each(|b| *b = true);
            }
            for i in 0..dst.len() {
                let want = if inside[i] { src[i] } else { dst[i] };
                prop_assert_eq!(out[i], want, "byte {}", i);
            }
            prop_assert_eq!(l.pack(&out).unwrap(), packed);
        }

        #[test]
        fn chunked_pack_and_shuffled_unpack_match_whole(
            (l, _r, src, dst) in with_buffers(),
            cuts in prop::collection::vec(any::<usize>(), 0..6),
            order in any::<u64>(),
        ) {
            let whole = l.pack(&src).unwrap();
            let parts = chunks(l.packed_bytes(), &cuts);
            let mut streamed = Vec::new();
            for &(a, b) in &parts {
                let mut buf = vec![0u8; b - a];
                prop_assert_eq!(l.pack_range(&src, a, &mut buf).unwrap(), b - a);
                streamed.extend_from_slice(&buf);
            }
            prop_assert_eq!(&streamed, &whole);

            let mut expect = dst.clone();
            l.unpack_range(&mut expect, 0, &whole).unwrap();
            // Deterministic shuffle of the chunk order from `order`.
            let mut shuffled = parts.clone();
            let mut seed = order | 1;
            for i in (1..shuffled.len()).rev() {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                shuffled.swap(i, (seed % (i as u64 + 1)) as usize);
            }
            let mut got = dst.clone();
            for &(a, b) in &shuffled {
                prop_assert_eq!(l.unpack_range(&mut got, a, &whole[a..b]).unwrap(), b - a);
            }
            prop_assert_eq!(got, expect);
        }

        #[test]
        fn pack_range_at_any_offset(
            (l, _r, src, _dst) in with_buffers(),
            off in any::<usize>(),
            len in 0usize..40,
        ) {
            let whole = l.pack(&src).unwrap();
            let off = off % (l.packed_bytes() + 1);
            let mut out = vec![0u8; len];
            let n = l.pack_range(&src, off, &mut out).unwrap();
            prop_assert_eq!(n, len.min(l.packed_bytes() - off));
            prop_assert_eq!(&out[..n], &whole[off..off + n]);
            prop_assert!(out[n..].iter().all(|&b| b == 0));
        }

        #[test]
        fn unpack_range_never_writes_past_message(
            (l, _r, src, dst) in with_buffers(),
            off in any::<usize>(),
            extra in prop::collection::vec(any::<u8>(), 1..16),
        ) {
            let whole = l.pack(&src).unwrap();
            let off = off % (l.packed_bytes() + 1);
            let mut data = whole[off..].to_vec();
            data.extend_from_slice(&extra);
            let mut got = dst.clone();
            prop_assert_eq!(l.unpack_range(&mut got, off, &data).unwrap(), l.packed_bytes() - off);
            let mut expect = dst.clone();
            l.unpack_range(&mut expect, 0, &whole).unwrap();
            if off == 0 {
                prop_assert_eq!(&got, &expect);
            }
            // Either way, no byte outside the layout changed.
            let mut inside = vec![false; dst.len()];
            for (at, len) in l.blocks() {
                inside[at..at + len].iter_mut().for_each(|b| *b = true);
            }
            for i in 0..dst.len() {
                if !inside[i] {
                    prop_assert_eq!(got[i], dst[i], "byte {} outside the layout changed", i);
                }
            }
            // Whole message plus trailing junk from offset 0 writes exactly packed_bytes.
            let mut got0 = dst.clone();
            let mut long = whole.clone();
            long.extend_from_slice(&extra);
            prop_assert_eq!(l.unpack_range(&mut got0, 0, &long).unwrap(), l.packed_bytes());
            prop_assert_eq!(got0, expect);
        }

        #[test]
        fn too_short_buffers_fail_cleanly((l, _r, src, dst) in with_buffers(), cut in 1usize..8) {
            if l.extent_bytes() == 0 {
                // No buffer is too short for an empty layout.
                prop_assert!(l.pack(&[]).is_ok());
                return Ok(());
            }
            let short = l.extent_bytes().saturating_sub(cut);
            let mut d = dst[..short].to_vec();
            let mut out = [0u8; 8];
            prop_assert_eq!(kind(l.pack(&src[..short])), ErrorKind::Count);
            prop_assert_eq!(kind(l.iovecs(&src[..short])), ErrorKind::Count);
            prop_assert_eq!(kind(l.pack_range(&src[..short], 0, &mut out)), ErrorKind::Count);
            prop_assert_eq!(kind(l.unpack_range(&mut d, 0, &src)), ErrorKind::Count);
            prop_assert_eq!(&d[..], &dst[..short]);
        }
    }
}

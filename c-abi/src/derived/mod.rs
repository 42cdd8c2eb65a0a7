//! Derived datatypes: every constructor flattens its type map into byte blocks of one element
//! (offset, length, in typemap order, neighbours merged) with the element's lower bound and
//! extent, as MPI defines them. A message of `count` elements is then a `ch4_core` [`Layout`]
//! of byte blocks (element `k` shifted by `k * extent`), relative to its lowest byte, and the
//! device moves it as any layout: in place where the transport can, packed where it cannot.
//!
//! A datatype that is one block at offset 0 as long as its extent (`MPI_Type_contiguous` of a
//! predefined type, say) takes the same path as a predefined one: no layout at all.
//!
//! Not supported (an error that says so): type maps whose blocks overlap (MPI allows them in
//! send types only; a layout does not know which way it will be used).
//!
//! This module holds that model ([`Desc`]) and what communication needs of it: the send and
//! receive buffers of `count` elements, and the element counts of a status. The MPI functions
//! of the chapter are its two children, which use the model's private parts:
//!
//! - `constructors`: `MPI_Type_contiguous`, `_vector`, `_create_hvector`, `_indexed`,
//!   `_create_indexed_block`, `_create_hindexed`, `_create_struct`, `_create_resized`,
//!   `_dup`, `_commit`, `_free`.
//! - `queries`: `MPI_Type_size` (`_c`, `_x`), `_get_extent`, `_get_true_extent`,
//!   `_get_name`, `_set_name`, `MPI_Get_address`, `MPI_Pack_size`.

pub(crate) mod constructors;
mod queries;

use std::ffi::c_int;

use ch4_core::buffer::{RecvBuf, SendBuf};
use ch4_core::datatype::Layout;
use ch4_core::ErrorKind;

use crate::abi::{self, Handle};
use crate::call::null_arg;
use crate::datatype::{self, raw, raw_mut};
use crate::state::State;

const TYPE_BIT: u64 = 1 << 60;

/// The C handle of derived datatype `i`.
fn type_out(i: usize) -> Handle {
    abi::indexed(TYPE_BIT, i)
}

/// The table index of a derived datatype handle.
fn type_in(h: Handle) -> Option<usize> {
    abi::index_of(h, TYPE_BIT)
}

/// One element of a datatype, in bytes.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Desc {
    /// The element's data: (offset from the buffer address, length), in typemap order.
    pub blocks: Vec<(isize, usize)>,
    /// Bytes of data (the type's size).
    pub size: usize,
    /// Lower bound and extent (the stride between consecutive elements).
    pub lb: isize,
    /// The extent.
    pub extent: isize,
    /// How many predefined elements one element holds (for `MPI_Get_elements`).
    pub elements: usize,
    /// Whether it was committed (only committed types may be used in communication).
    pub committed: bool,
    /// Its name (`MPI_Type_set_name`).
    pub name: Option<String>,
}

impl Desc {
    /// A predefined datatype.
    fn predefined(dt: Handle) -> Option<Desc> {
        let (blocks, extent, elements): (Vec<(isize, usize)>, isize, usize) = match dt {
            0x229 | 0x22a => (vec![(0, 8), (8, 4)], 16, 2), // DOUBLE_INT, LONG_INT
            0x22c => (vec![(0, 2), (4, 4)], 8, 2),          // SHORT_INT
            0x22d => (vec![(0, 16), (16, 4)], 32, 2),       // LONG_DOUBLE_INT
            0x228 | 0x22b | 0x230..=0x232 => {
                let s = datatype::size_of(dt)?;
                (vec![(0, s)], s as isize, 2)
            }
            _ => {
                let s = datatype::size_of(dt)?;
                (vec![(0, s)], s as isize, 1)
            }
        };
        Some(Desc {
            size: blocks.iter().map(|b| b.1).sum(),
            blocks,
            lb: 0,
            extent,
            elements,
            committed: true,
            name: None,
        })
    }

    /// Whether `count` elements are one block at the buffer address.
    pub fn contiguous(&self) -> bool {
        self.lb == 0
            && self.extent == self.size as isize
            && (self.size == 0 || self.blocks == [(0, self.size)])
    }

    /// A type made of runs of copies of `old`: for each `(start, n)`, `n` copies one extent
    /// apart from byte `start`, in order. Displacements are computed in `i128` and must fit
    /// an address offset (an error otherwise, never a wrapped value).
    fn of_copies(old: &Desc, runs: impl Iterator<Item = (i128, usize)>) -> ch4::Result<Desc> {
        let fit = |v: i128| isize::try_from(v).map_err(|_| too_big());
        let mut blocks: Vec<(isize, usize)> = Vec::new();
        let (mut lo, mut hi) = (i128::MAX, i128::MIN);
        let mut copies = 0usize;
        for (start, n) in runs {
            for j in 0..n as i128 {
                let d = start + j * old.extent as i128;
                copies += 1;
                lo = lo.min(d + old.lb as i128);
                hi = hi.max(d + old.lb as i128 + old.extent as i128);
                for &(o, l) in &old.blocks {
                    append(&mut blocks, fit(d + o as i128)?, l);
                }
            }
        }
        if copies == 0 {
            (lo, hi) = (0, 0);
        }
        Ok(Desc {
            size: old.size.checked_mul(copies).ok_or_else(too_big)?,
            blocks,
            lb: fit(lo)?,
            extent: fit(hi - lo)?,
            elements: old.elements.checked_mul(copies).ok_or_else(too_big)?,
            committed: false,
            name: None,
        })
    }

    /// The parts one after the other in the type map (`MPI_Type_create_struct`): the bounds
    /// span all parts that hold data.
    fn concat(parts: &[Desc]) -> ch4::Result<Desc> {
        let mut d = Desc {
            blocks: Vec::new(),
            size: 0,
            lb: 0,
            extent: 0,
            elements: 0,
            committed: false,
            name: None,
        };
        let (mut lo, mut hi) = (i128::MAX, i128::MIN);
        for p in parts.iter().filter(|p| p.elements > 0) {
            lo = lo.min(p.lb as i128);
            hi = hi.max(p.lb as i128 + p.extent as i128);
            d.size = d.size.checked_add(p.size).ok_or_else(too_big)?;
            d.elements = d.elements.checked_add(p.elements).ok_or_else(too_big)?;
            for &(o, l) in &p.blocks {
                append(&mut d.blocks, o, l);
            }
        }
        if d.elements > 0 {
            d.lb = isize::try_from(lo).map_err(|_| too_big())?;
            d.extent = isize::try_from(hi - lo).map_err(|_| too_big())?;
        }
        Ok(d)
    }

    /// The layout of `count` elements, and the byte offset (from the buffer address) where it
    /// starts. Its block list is allocated fallibly: a count too large for memory is an error.
    fn layout(&self, count: usize) -> ch4::Result<(isize, Layout)> {
        let n = self.blocks.len().checked_mul(count).ok_or_else(too_big)?;
        let mut all: Vec<(i128, usize)> = Vec::new();
        all.try_reserve_exact(n).map_err(|_| too_big())?;
        for k in 0..count as i128 {
            let shift = k * self.extent as i128;
            all.extend(self.blocks.iter().map(|&(o, l)| (o as i128 + shift, l)));
        }
        let base = all.iter().map(|b| b.0).min().unwrap_or(0);
        let mut rel: Vec<(usize, usize)> = Vec::new();
        rel.try_reserve_exact(n).map_err(|_| too_big())?;
        for &(o, l) in &all {
            rel.push((usize::try_from(o - base).map_err(|_| too_big())?, l));
        }
        let layout = Layout::indexed::<u8>(&rel).map_err(|e| {
            ch4::Error::new(
                e.kind(),
                format!("this datatype cannot be used here: {}", e.detail()),
            )
        })?;
        Ok((isize::try_from(base).map_err(|_| too_big())?, layout))
    }
}

/// Appends block `(o, l)`, merged into the last one when it continues it.
fn append(blocks: &mut Vec<(isize, usize)>, o: isize, l: usize) {
    match blocks.last_mut() {
        Some(prev) if prev.0.checked_add(prev.1 as isize) == Some(o) => prev.1 += l,
        _ => blocks.push((o, l)),
    }
}

#[cold]
fn too_big() -> ch4::Error {
    ch4::Error::new(ErrorKind::Count, "the datatype's size overflows")
}

/// The description of datatype `dt` (predefined or derived).
pub(crate) fn desc(st: &State, dt: Handle) -> ch4::Result<Desc> {
    if let Some(d) = Desc::predefined(dt) {
        return Ok(d);
    }
    type_in(dt)
        .and_then(|i| st.types.cloned(i))
        .ok_or_else(|| datatype::bad_type(dt))
}

fn add_type(st: &State, d: Desc) -> Handle {
    type_out(st.types.insert(d))
}

fn count_of(n: c_int, what: &str) -> ch4::Result<usize> {
    usize::try_from(n)
        .map_err(|_| ch4::Error::new(ErrorKind::Count, format!("{what} {n} is negative")))
}

/// `n` ints of a C array.
///
/// # Safety
/// `a` has `n` ints (or `n` is 0).
unsafe fn ints<'a>(a: *const c_int, n: usize) -> ch4::Result<&'a [c_int]> {
    if n == 0 {
        return Ok(&[]);
    }
    if a.is_null() {
        return Err(null_arg("an array argument"));
    }
    // SAFETY: the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(a, n) })
}

/// The send buffer of `count` elements of `dt` at `buf`, with the device's layout when the
/// type is not contiguous.
///
/// # Safety
/// The elements are readable (and unchanged) for as long as the request lives.
pub(crate) unsafe fn send_buf(
    st: &State,
    buf: *const u8,
    count: c_int,
    dt: Handle,
) -> ch4::Result<SendBuf> {
    let d = desc(st, dt)?;
    let n = count_of(count, "count")?;
    if !d.committed {
        return Err(uncommitted());
    }
    if d.contiguous() {
        // SAFETY: the caller's contract.
        return Ok(unsafe { SendBuf::borrowed(raw(buf, n * d.size)?) });
    }
    let (base, layout) = d.layout(n)?;
    let len = layout.extent_bytes();
    // SAFETY: the caller's contract: every byte of the elements is at buf + base + [0, len).
    unsafe { SendBuf::borrowed_with_layout(raw(buf.wrapping_offset(base), len)?, layout) }
}

/// The receive buffer of `count` elements of `dt` at `buf`.
///
/// # Safety
/// The elements are writable, and nobody else's, for as long as the request lives.
pub(crate) unsafe fn recv_buf(
    st: &State,
    buf: *mut u8,
    count: c_int,
    dt: Handle,
) -> ch4::Result<RecvBuf> {
    let d = desc(st, dt)?;
    let n = count_of(count, "count")?;
    if !d.committed {
        return Err(uncommitted());
    }
    if d.contiguous() {
        // SAFETY: the caller's contract.
        return Ok(unsafe { RecvBuf::borrowed(raw_mut(buf, n * d.size)?) });
    }
    let (base, layout) = d.layout(n)?;
    let len = layout.extent_bytes();
    // SAFETY: the caller's contract: every byte of the elements is at buf + base + [0, len).
    unsafe { RecvBuf::borrowed_with_layout(raw_mut(buf.wrapping_offset(base), len)?, layout) }
}

#[cold]
fn uncommitted() -> ch4::Error {
    ch4::Error::new(
        ErrorKind::Buffer,
        "the datatype was not committed (MPI_Type_commit)",
    )
}

/// The element count of `bytes` of `dt` (`MPI_Get_count`): `None` when not whole.
pub(crate) fn count_in(st: &State, bytes: u64, dt: Handle) -> ch4::Result<Option<u64>> {
    let d = desc(st, dt)?;
    Ok(if d.size == 0 {
        Some(0)
    } else if bytes % d.size as u64 == 0 {
        Some(bytes / d.size as u64)
    } else {
        None
    })
}

/// The predefined elements in `bytes` of `dt` (`MPI_Get_elements`): whole elements of the
/// type, plus the predefined elements of a partial one.
pub(crate) fn elements_in(st: &State, bytes: u64, dt: Handle) -> ch4::Result<Option<u64>> {
    let d = desc(st, dt)?;
    if d.size == 0 {
        return Ok(Some(0));
    }
    let whole = bytes / d.size as u64;
    let mut rest = bytes % d.size as u64;
    let mut n = whole * d.elements as u64;
    if rest > 0 {
        // A partial element counts the basic elements that arrived whole: with one basic size
        // per block (blocks of a single predefined type), a division.
        let basic = (d.size / d.elements.max(1)) as u64;
        if basic == 0 || rest % basic != 0 {
            return Ok(None);
        }
        n += rest / basic;
        rest = 0;
    }
    Ok((rest == 0).then_some(n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi;

    #[test]
    fn a_vector_of_ints_is_strided_blocks_with_the_standards_extent() {
        let int = Desc::predefined(0x209).unwrap();
        let v = Desc::of_copies(&int, (0..3).map(|i| (i * 5 * 4, 2))).unwrap();
        assert_eq!(v.blocks, vec![(0, 8), (20, 8), (40, 8)]);
        assert_eq!((v.size, v.lb, v.extent, v.elements), (24, 0, 48, 6));
        let (base, layout) = v.layout(2).unwrap();
        assert_eq!(base, 0);
        assert_eq!(layout.packed_bytes(), 48);
        assert_eq!(layout.extent_bytes(), 48 + 48);
        assert!(!v.contiguous());
        let c = Desc::of_copies(&int, std::iter::once((0, 4))).unwrap();
        assert!(c.contiguous(), "{c:?}");
        // A stride that does not fit an address offset is an error, not a wrapped value.
        let e = Desc::of_copies(&int, (0..2).map(|i| (i * (i64::MAX as i128) * 4, 1)));
        assert_eq!(e.unwrap_err().kind(), ErrorKind::Count);
    }

    #[test]
    fn the_gapped_pairs_and_handles() {
        let di = Desc::predefined(0x229).unwrap();
        assert_eq!((di.size, di.extent, di.elements), (12, 16, 2));
        assert!(!di.contiguous());
        assert_eq!(type_in(type_out(7)), Some(7));
        assert_eq!(type_in(0x209), None);
        assert_eq!(
            type_in(abi::request_out(crate::state::DevReq::new(
                ch4_core::ReqHandle::DONE,
                0
            ))),
            None
        );
    }
}

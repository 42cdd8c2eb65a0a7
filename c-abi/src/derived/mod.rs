//! Derived datatypes (MPI 4.1 chapter 5, "Datatypes"): every type is a tree ([`Type`]) of
//! runs of copies of smaller types, down to the predefined ones, with its size, bounds, true
//! bounds and element count computed once when it is made. Nothing is flattened up front: a
//! vector of a billion blocks (MPICH's `large_count` test makes one) costs a few words, and
//! its numbers are exact. A message of `count` elements is flattened only when it is moved:
//! into a `ch4_core` [`Layout`] of byte blocks (element `k` shifted by `k * extent`) for the
//! device, or walked block by block for `MPI_Pack` and `MPI_Unpack`, or element by element
//! (with each element's predefined type) for `MPI_Pack_external` and `MPI_Get_elements`.
//!
//! A datatype whose data is one block at offset 0 as long as its extent (`MPI_Type_contiguous`
//! of a predefined type, say) takes the same path as a predefined one: no layout at all.
//!
//! Each type also keeps how it was made (its combiner and the arguments of the call, the old
//! types among them held alive by the type itself), as `MPI_Type_get_envelope` and
//! `MPI_Type_get_contents` report them (MPI 4.1 section 5.1.13).
//!
//! Not supported in communication (an error that says so): type maps whose blocks overlap
//! (MPI allows them in send types only; a layout does not know which way it will be used).
//! `MPI_Pack` takes them.
//!
//! This module holds that model and what communication needs of it: the send and receive
//! buffers of `count` elements, and the element counts of a status. The MPI functions of the
//! chapter are its children, which use the model's private parts:
//!
//! - `constructors`: `MPI_Type_contiguous`, `_vector`, `_create_hvector`, `_indexed`,
//!   `_create_indexed_block`, `_create_hindexed`, `_create_hindexed_block`,
//!   `_create_struct`, `_create_resized`, `_dup`, `_commit`, `_free`, and their `_c` forms.
//! - `arrays`: `MPI_Type_create_subarray` and `MPI_Type_create_darray` (and `_c`).
//! - `envelope`: `MPI_Type_get_envelope` and `MPI_Type_get_contents` (and `_c`).
//! - `pack`: `MPI_Pack`, `MPI_Unpack`, `MPI_Pack_external`, `MPI_Unpack_external`,
//!   `MPI_Pack_external_size` (and `_c`).
//! - `queries`: `MPI_Type_size` (`_c`, `_x`), `_get_extent`, `_get_true_extent` (`_c`,
//!   `_x`), `_get_name`, `_set_name`, `_match_size`, `_get_value_index`, `MPI_Get_address`,
//!   `MPI_Aint_add`, `MPI_Aint_diff`, `MPI_Pack_size` (`_c`), `MPI_Status_set_elements`
//!   (`_c`).

mod arrays;
pub(crate) mod constructors;
mod envelope;
mod pack;
mod queries;

use std::ffi::c_int;
use std::sync::{Arc, OnceLock};

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

/// `count` blocks, `stride` bytes apart from byte `start`, each of `blocklen` consecutive
/// copies of a type (one extent apart): every constructor's copies are runs like this, so
/// a vector stays one run however long it is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Run {
    /// The first block's displacement in bytes.
    pub start: isize,
    /// Blocks.
    pub count: usize,
    /// Copies a block.
    pub blocklen: usize,
    /// Bytes from one block to the next.
    pub stride: isize,
}

impl Part {
    /// Where the part's data begins when it is one block (`size` bytes per copy, each copy
    /// continuing the last), `None` otherwise.
    fn dense_start(&self) -> Option<i128> {
        let (t, r) = (&self.ty, self.run);
        let o = t.dense? as i128;
        let in_block = r.blocklen == 1 || t.extent == t.size as isize;
        let across = r.count == 1 || r.stride as i128 == (r.blocklen as i128) * t.size as i128;
        (in_block && across).then_some(r.start as i128 + o)
    }
}

impl Run {
    /// One block of `n` copies at byte `start`.
    fn block(start: isize, n: usize) -> Run {
        Run {
            start,
            count: 1,
            blocklen: n,
            stride: 0,
        }
    }

    /// How many copies.
    fn copies(&self) -> ch4::Result<usize> {
        self.count.checked_mul(self.blocklen).ok_or_else(too_big)
    }

    /// The lowest and highest displacement of a copy of a type of extent `extent`.
    fn span(&self, extent: isize) -> (i128, i128) {
        let edge = |n: usize, step: isize| {
            let far = (n as i128 - 1) * step as i128;
            (far.min(0), far.max(0))
        };
        let (a0, a1) = edge(self.count, self.stride);
        let (b0, b1) = edge(self.blocklen, extent);
        (self.start as i128 + a0 + b0, self.start as i128 + a1 + b1)
    }
}

/// Copies of one type: a part of a bigger type.
#[derive(Clone, Debug)]
pub(crate) struct Part {
    /// The copied type.
    pub ty: Arc<Type>,
    /// Where its copies are.
    pub run: Run,
}

/// How a type's data is made.
#[derive(Debug)]
pub(crate) enum Shape {
    /// One element of a predefined type with no gap in it.
    Basic(Handle),
    /// Runs of copies of other types, in typemap order.
    Parts(Vec<Part>),
    /// Another type's data under new bounds (`MPI_Type_create_resized`, `MPI_Type_dup`).
    Resized(Arc<Type>),
}

/// What `MPI_Type_get_contents` returns of a type: its constructor and the arguments it was
/// called with (MPI 4.1 table 5.1; the `_c` constructors put their counts in `counts`).
#[derive(Clone, Debug, Default)]
pub(crate) struct Contents {
    /// `MPI_COMBINER_*` (`MPI_COMBINER_NAMED` for a predefined type).
    pub combiner: c_int,
    /// The integer arguments.
    pub ints: Vec<c_int>,
    /// The address arguments.
    pub aints: Vec<isize>,
    /// The large-count arguments (`_c` constructors).
    pub counts: Vec<i64>,
    /// The old types, kept alive with the type.
    pub types: Vec<Desc>,
}

/// `MPI_COMBINER_NAMED` and the constructors' combiners (values of the standard ABI).
pub(crate) mod combiner {
    use std::ffi::c_int;
    pub const NAMED: c_int = 101;
    pub const DUP: c_int = 102;
    pub const CONTIGUOUS: c_int = 103;
    pub const VECTOR: c_int = 104;
    pub const HVECTOR: c_int = 105;
    pub const INDEXED: c_int = 106;
    pub const HINDEXED: c_int = 107;
    pub const INDEXED_BLOCK: c_int = 108;
    pub const HINDEXED_BLOCK: c_int = 109;
    pub const STRUCT: c_int = 110;
    pub const SUBARRAY: c_int = 111;
    pub const DARRAY: c_int = 112;
    pub const RESIZED: c_int = 116;
}

/// A datatype: its data ([`Shape`]) and what every query and every move needs of it.
#[derive(Debug)]
pub(crate) struct Type {
    /// Its data.
    pub shape: Shape,
    /// Bytes of data (the type's size).
    pub size: usize,
    /// Lower bound.
    pub lb: isize,
    /// Extent (the stride between consecutive elements).
    pub extent: isize,
    /// Where its data begins, from the buffer address (`MPI_Type_get_true_extent`).
    pub true_lb: isize,
    /// Where its data ends.
    pub true_ub: isize,
    /// How many predefined elements one element holds (for `MPI_Get_elements`).
    pub elements: usize,
    /// The offset of its data when that data is one block in typemap order (`size` bytes
    /// without gaps or overlap): such a type is copied in one piece.
    pub dense: Option<isize>,
    /// The predefined type it is, if it is one.
    pub named: Option<Handle>,
    /// The strictest alignment of its predefined types, which a struct's extent is rounded
    /// up to (MPI 4.1 section 5.1.6, as C pads a struct).
    pub align: usize,
    /// Whether its bounds were set (`MPI_Type_create_resized`, in it or in a type it holds):
    /// such bounds are the program's, and a struct holding it is not padded.
    pub sticky: bool,
    /// How it was made.
    pub contents: Contents,
}

impl Type {
    /// One element of predefined type `h` with no gap (`size` bytes).
    fn basic(h: Handle, size: usize) -> Type {
        Type {
            shape: Shape::Basic(h),
            size,
            lb: 0,
            extent: size as isize,
            true_lb: 0,
            true_ub: size as isize,
            elements: 1,
            dense: Some(0),
            named: Some(h),
            align: basic_align(h, size),
            sticky: false,
            contents: Contents {
                combiner: combiner::NAMED,
                ..Contents::default()
            },
        }
    }

    /// The type made of `parts`, one after another in the type map, with its bounds as MPI
    /// defines them (MPI 4.1 section 5.1.7: the lowest lower bound and the highest upper
    /// bound of the copies; no copies at all: both 0). Displacements are computed in `i128`
    /// and must fit an address offset (an error otherwise, never a wrapped value).
    fn of_parts(parts: Vec<Part>, contents: Contents) -> ch4::Result<Type> {
        let fit = |v: i128| isize::try_from(v).map_err(|_| too_big());
        let (mut lo, mut hi) = (i128::MAX, i128::MIN);
        let (mut tlo, mut thi) = (i128::MAX, i128::MIN);
        let (mut size, mut elements) = (0usize, 0usize);
        let (mut align, mut sticky) = (1usize, false);
        // The data so far as one block (start, end), while it is one.
        let mut dense: Option<Option<(i128, i128)>> = Some(None);
        for p in &parts {
            let n = p.run.copies()?;
            if n == 0 {
                continue;
            }
            let t = &p.ty;
            align = align.max(t.align);
            sticky |= t.sticky;
            let (d0, d1) = p.run.span(t.extent);
            lo = lo.min(d0 + t.lb as i128);
            hi = hi.max(d1 + t.lb as i128 + t.extent as i128);
            size = n
                .checked_mul(t.size)
                .and_then(|s| s.checked_add(size))
                .ok_or_else(too_big)?;
            elements = n
                .checked_mul(t.elements)
                .and_then(|e| e.checked_add(elements))
                .ok_or_else(too_big)?;
            if t.size == 0 {
                continue;
            }
            tlo = tlo.min(d0 + t.true_lb as i128);
            thi = thi.max(d1 + t.true_ub as i128);
            dense = match (dense, p.dense_start()) {
                (Some(None), Some(s)) => Some(Some((s, s + (n * t.size) as i128))),
                (Some(Some((s0, e0))), Some(s)) if s == e0 => {
                    Some(Some((s0, e0 + (n * t.size) as i128)))
                }
                _ => None,
            };
        }
        if lo > hi {
            (lo, hi) = (0, 0);
        }
        if tlo > thi {
            (tlo, thi) = (0, 0);
        }
        let dense = match dense {
            Some(None) => Some(0),
            Some(Some((s, _))) => Some(fit(s)?),
            None => None,
        };
        Ok(Type {
            shape: Shape::Parts(parts),
            size,
            lb: fit(lo)?,
            extent: fit(hi - lo)?,
            true_lb: fit(tlo)?,
            true_ub: fit(thi)?,
            elements,
            dense,
            named: None,
            align,
            sticky,
            contents,
        })
    }

    /// Rounds the extent up to a multiple of the alignment, as C pads a struct of these
    /// members (what `MPI_Type_create_struct` does, MPI 4.1 section 5.1.6, unless bounds were
    /// set explicitly).
    fn pad(&mut self) {
        if self.sticky || self.align <= 1 || self.extent <= 0 {
            return;
        }
        let rem = self.extent as usize % self.align;
        if rem != 0 {
            self.extent += (self.align - rem) as isize;
        }
    }

    /// `old`'s data under the bounds `lb` and `extent`.
    fn resized(old: &Arc<Type>, lb: isize, extent: isize, contents: Contents) -> Type {
        Type {
            shape: Shape::Resized(old.clone()),
            size: old.size,
            lb,
            extent,
            true_lb: old.true_lb,
            true_ub: old.true_ub,
            elements: old.elements,
            dense: old.dense,
            named: None,
            align: old.align,
            sticky: true,
            contents,
        }
    }

    /// Whether consecutive elements are one block: the data is one block and the extent is
    /// its length.
    fn tiles(&self) -> Option<isize> {
        self.dense.filter(|_| self.extent == self.size as isize)
    }

    /// Whether `count` elements are one block at the buffer address.
    pub fn contiguous(&self) -> bool {
        self.size == 0 || (self.lb == 0 && self.tiles() == Some(0))
    }

    /// Visits the data of one element at byte `base` as blocks `(offset, length)`, in
    /// typemap order (neighbours not merged). Offsets wrap rather than overflow: the
    /// constructors checked that one element's fit, and callers check the count's.
    fn for_blocks(
        &self,
        base: isize,
        f: &mut dyn FnMut(isize, usize) -> ch4::Result<()>,
    ) -> ch4::Result<()> {
        if let Some(o) = self.dense {
            return if self.size == 0 {
                Ok(())
            } else {
                f(base.wrapping_add(o), self.size)
            };
        }
        match &self.shape {
            Shape::Basic(_) => f(base, self.size),
            Shape::Resized(t) => t.for_blocks(base, f),
            Shape::Parts(parts) => {
                for p in parts.iter().filter(|p| p.ty.size > 0) {
                    let (t, r) = (&p.ty, p.run);
                    for i in 0..r.count {
                        let row = base
                            .wrapping_add(r.start)
                            .wrapping_add((i as isize).wrapping_mul(r.stride));
                        if let Some(o) = t.tiles() {
                            f(row.wrapping_add(o), r.blocklen * t.size)?;
                            continue;
                        }
                        for j in 0..r.blocklen {
                            t.for_blocks(row.wrapping_add((j as isize).wrapping_mul(t.extent)), f)?;
                        }
                    }
                }
                Ok(())
            }
        }
    }

    /// Visits the predefined elements of one element at byte `base`, in typemap order, as
    /// runs `(offset, predefined type, how many)` of consecutive elements of one type.
    fn for_basics(
        &self,
        base: isize,
        f: &mut dyn FnMut(isize, Handle, usize) -> ch4::Result<()>,
    ) -> ch4::Result<()> {
        match &self.shape {
            Shape::Basic(h) => f(base, *h, 1),
            Shape::Resized(t) => t.for_basics(base, f),
            Shape::Parts(parts) => {
                for p in parts.iter().filter(|p| p.ty.size > 0) {
                    let (t, r) = (&p.ty, p.run);
                    for i in 0..r.count {
                        let row = base
                            .wrapping_add(r.start)
                            .wrapping_add((i as isize).wrapping_mul(r.stride));
                        if let Shape::Basic(h) = t.shape {
                            f(row, h, r.blocklen)?;
                            continue;
                        }
                        for j in 0..r.blocklen {
                            t.for_basics(row.wrapping_add((j as isize).wrapping_mul(t.extent)), f)?;
                        }
                    }
                }
                Ok(())
            }
        }
    }

    /// Checks that `count` elements' data lies within an address offset of the buffer, so
    /// that walking them does not wrap.
    fn check_count(&self, count: usize) -> ch4::Result<()> {
        if count == 0 || self.size == 0 {
            return Ok(());
        }
        let shift = (count as i128 - 1) * self.extent as i128;
        let lo = self.true_lb as i128 + shift.min(0);
        let hi = self.true_ub as i128 + shift.max(0);
        isize::try_from(lo).map_err(|_| too_big())?;
        isize::try_from(hi).map_err(|_| too_big())?;
        Ok(())
    }

    /// Visits the data of `count` elements at byte 0, blocks merged when one continues the
    /// last.
    pub(crate) fn for_merged_blocks(
        &self,
        count: usize,
        f: &mut dyn FnMut(isize, usize) -> ch4::Result<()>,
    ) -> ch4::Result<()> {
        self.check_count(count)?;
        let mut pending: Option<(isize, usize)> = None;
        let mut visit = |o: isize, l: usize| -> ch4::Result<()> {
            match &mut pending {
                Some((po, pl)) if po.wrapping_add(*pl as isize) == o => *pl += l,
                Some((po, pl)) => {
                    f(*po, *pl)?;
                    pending = Some((o, l));
                }
                None => pending = Some((o, l)),
            }
            Ok(())
        };
        for k in 0..count {
            self.for_blocks((k as isize).wrapping_mul(self.extent), &mut visit)?;
        }
        match pending {
            Some((o, l)) => f(o, l),
            None => Ok(()),
        }
    }

    /// The layout of `count` elements, and the byte offset (from the buffer address) where it
    /// starts. Blocks of one length at one stride (a vector, a column, a darray's row) make
    /// the device's strided layout, three numbers however many blocks there are; any other
    /// shape makes its block list, allocated fallibly (a count too large for memory is an
    /// error).
    fn layout(&self, count: usize) -> ch4::Result<(isize, Layout)> {
        // The lowest byte of the data: the true lower bound of the lowest element.
        let shift = (count.max(1) as i128 - 1) * self.extent as i128;
        let base = isize::try_from(self.true_lb as i128 + shift.min(0)).map_err(|_| too_big())?;
        let mut shape = Blocks::Regular {
            first: 0,
            len: 0,
            stride: 0,
            n: 0,
        };
        self.for_merged_blocks(count, &mut |o, l| shape.push((o - base) as usize, l))?;
        let layout = match shape {
            Blocks::Regular { n: 0, .. } => Layout::contiguous::<u8>(0),
            Blocks::Regular {
                first: 0,
                len,
                stride,
                n,
            } => Layout::vector::<u8>(n, len, if n == 1 { len } else { stride }),
            Blocks::Regular {
                first,
                len,
                stride,
                n,
            } => Layout::indexed::<u8>(
                &(0..n)
                    .map(|i| (first + i * stride, len))
                    .collect::<Vec<_>>(),
            ),
            Blocks::List(all) => Layout::indexed::<u8>(&all),
        }
        .map_err(|e| {
            ch4::Error::new(
                e.kind(),
                format!("this datatype cannot be used here: {}", e.detail()),
            )
        })?;
        Ok((base, layout))
    }

    /// The predefined elements in the first `bytes` bytes of one element's data, and whether
    /// those bytes end on an element's boundary.
    fn elements_within(&self, bytes: usize) -> ch4::Result<(usize, bool)> {
        let (mut n, mut left) = (0usize, bytes);
        let stop = || ch4::Error::new(ErrorKind::Internal, "stop");
        let r = self.for_basics(0, &mut |_, h, k| {
            let s = basic_size(h);
            if s == 0 {
                return Ok(());
            }
            let whole = (left / s).min(k);
            n += whole;
            left -= whole * s;
            if whole < k {
                return Err(stop());
            }
            Ok(())
        });
        match r {
            Ok(()) => Ok((n, left == 0)),
            Err(e) if e.kind() == ErrorKind::Internal => Ok((n, left == 0)),
            Err(e) => Err(e),
        }
    }
}

/// The alignment of predefined type `h` of `size` bytes on the platforms ch4 builds for
/// (x86-64 and aarch64 Linux): a complex number's is its parts', and nothing is aligned
/// beyond 16.
fn basic_align(h: Handle, size: usize) -> usize {
    let part = match h {
        // The complex types: two reals.
        0x212 | 0x213 | 0x21b | 0x2db | 0x216 | 0x217 | 0x21d | 0x2e3 | 0x2d3 | 0x2eb | 0x224
        | 0x225 => size / 2,
        _ => size,
    };
    part.clamp(1, 16)
}

/// The blocks of a layout as they are visited: one length at one stride while they are, a
/// list from the first that breaks the pattern.
enum Blocks {
    /// `n` blocks of `len` bytes, `stride` apart from byte `first`.
    Regular {
        first: usize,
        len: usize,
        stride: usize,
        n: usize,
    },
    /// Any blocks, in order.
    List(Vec<(usize, usize)>),
}

impl Blocks {
    /// Adds block `(o, l)`.
    fn push(&mut self, o: usize, l: usize) -> ch4::Result<()> {
        if let Blocks::Regular {
            first,
            len,
            stride,
            n,
        } = self
        {
            let fits = match *n {
                0 => {
                    (*first, *len) = (o, l);
                    true
                }
                1 if l == *len && o >= *first + *len => {
                    *stride = o - *first;
                    true
                }
                _ => l == *len && *n > 1 && o == *first + *n * *stride,
            };
            if fits {
                *n += 1;
                return Ok(());
            }
            let mut all = Vec::new();
            all.try_reserve(*n + 1).map_err(|_| too_big())?;
            all.extend((0..*n).map(|i| (*first + i * *stride, *len)));
            *self = Blocks::List(all);
        }
        if let Blocks::List(all) = self {
            all.try_reserve(1).map_err(|_| too_big())?;
            all.push((o, l));
        }
        Ok(())
    }
}

/// The size of one element of a predefined type with no gap (the leaves of [`Shape`]).
fn basic_size(h: Handle) -> usize {
    datatype::size_of(h).unwrap_or(0)
}

/// A datatype handle's type, and what belongs to the handle rather than to the type.
#[derive(Clone, Debug)]
pub(crate) struct Desc {
    /// The type.
    pub ty: Arc<Type>,
    /// Whether it was committed (only committed types may be used in communication).
    pub committed: bool,
    /// Its name (`MPI_Type_set_name`).
    pub name: Option<String>,
}

impl std::ops::Deref for Desc {
    type Target = Type;
    fn deref(&self) -> &Type {
        &self.ty
    }
}

impl Desc {
    /// A new, uncommitted handle's description of `ty`.
    fn new(ty: Type) -> Desc {
        Desc {
            ty: Arc::new(ty),
            committed: false,
            name: None,
        }
    }

    /// A predefined datatype.
    fn predefined(dt: Handle) -> Option<Desc> {
        let i = dt.checked_sub(0x200).filter(|&i| i < 0x100)?;
        let ty = predefined_table()[i].clone()?;
        Some(Desc {
            ty,
            committed: true,
            name: None,
        })
    }
}

/// The predefined datatypes' types, by handle - 0x200, made once.
fn predefined_table() -> &'static [Option<Arc<Type>>] {
    static TABLE: OnceLock<Vec<Option<Arc<Type>>>> = OnceLock::new();
    TABLE.get_or_init(|| {
        (0..0x100)
            .map(|i| predefined_type(0x200 + i).map(Arc::new))
            .collect()
    })
}

/// The type of predefined datatype `h`: a basic one, or one of the value-and-index pairs
/// (MPI 4.1 section 6.9.4), which are two basic members with the C struct's padding.
fn predefined_type(h: Handle) -> Option<Type> {
    let pair = |a: Handle, b: Handle, at: isize, extent: isize| {
        let part = |t: Handle, o: isize| Part {
            ty: Arc::new(Type::basic(t, basic_size(t))),
            run: Run::block(o, 1),
        };
        let mut t = Type::of_parts(vec![part(a, 0), part(b, at)], Contents::default()).ok()?;
        t.lb = 0;
        t.extent = extent;
        t.named = Some(h);
        t.contents.combiner = combiner::NAMED;
        Some(t)
    };
    match h {
        0x228 => pair(0x210, 0x209, 4, 8),   // MPI_FLOAT_INT
        0x229 => pair(0x214, 0x209, 8, 16),  // MPI_DOUBLE_INT
        0x22a => pair(0x20a, 0x209, 8, 16),  // MPI_LONG_INT
        0x22b => pair(0x209, 0x209, 4, 8),   // MPI_2INT
        0x22c => pair(0x208, 0x209, 4, 8),   // MPI_SHORT_INT
        0x22d => pair(0x220, 0x209, 16, 32), // MPI_LONG_DOUBLE_INT
        0x230 => pair(0x21a, 0x21a, 4, 8),   // MPI_2REAL
        0x231 => pair(0x21c, 0x21c, 8, 16),  // MPI_2DOUBLE_PRECISION
        0x232 => pair(0x219, 0x219, 4, 8),   // MPI_2INTEGER
        _ => datatype::size_of(h).map(|s| Type::basic(h, s)),
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

/// An `MPI_Count` (or `MPI_Aint`) count: an error for a negative one.
fn big_count_of(n: i64, what: &str) -> ch4::Result<usize> {
    usize::try_from(n)
        .map_err(|_| ch4::Error::new(ErrorKind::Count, format!("{what} {n} is negative")))
}

/// `n` values of a C array.
///
/// # Safety
/// `a` has `n` values (or `n` is 0).
unsafe fn array<'a, T>(a: *const T, n: usize) -> ch4::Result<&'a [T]> {
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
    // SAFETY: the caller's contract.
    unsafe { send_buf_big(st, buf, count.into(), dt) }
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
    // SAFETY: the caller's contract.
    unsafe { recv_buf_big(st, buf, count.into(), dt) }
}

/// [`send_buf`] of an `MPI_Count` of elements (the `_c` forms of point-to-point).
///
/// # Safety
/// As [`send_buf`].
pub(crate) unsafe fn send_buf_big(
    st: &State,
    buf: *const u8,
    count: i64,
    dt: Handle,
) -> ch4::Result<SendBuf> {
    let d = desc(st, dt)?;
    let n = big_count_of(count, "count")?;
    if !d.committed {
        return Err(uncommitted());
    }
    if d.contiguous() {
        let len = n.checked_mul(d.size).ok_or_else(too_big)?;
        // SAFETY: the caller's contract.
        return Ok(unsafe { SendBuf::borrowed(raw(buf, len)?) });
    }
    let (base, layout) = d.layout(n)?;
    let len = layout.extent_bytes();
    // SAFETY: the caller's contract: every byte of the elements is at buf + base + [0, len).
    unsafe { SendBuf::borrowed_with_layout(raw(buf.wrapping_offset(base), len)?, layout) }
}

/// [`recv_buf`] of an `MPI_Count` of elements (the `_c` forms of point-to-point).
///
/// # Safety
/// As [`recv_buf`].
pub(crate) unsafe fn recv_buf_big(
    st: &State,
    buf: *mut u8,
    count: i64,
    dt: Handle,
) -> ch4::Result<RecvBuf> {
    let d = desc(st, dt)?;
    let n = big_count_of(count, "count")?;
    if !d.committed {
        return Err(uncommitted());
    }
    if d.contiguous() {
        let len = n.checked_mul(d.size).ok_or_else(too_big)?;
        // SAFETY: the caller's contract.
        return Ok(unsafe { RecvBuf::borrowed(raw_mut(buf, len)?) });
    }
    let (base, layout) = d.layout(n)?;
    let len = layout.extent_bytes();
    // SAFETY: the caller's contract: every byte of the elements is at buf + base + [0, len).
    unsafe { RecvBuf::borrowed_with_layout(raw_mut(buf.wrapping_offset(base), len)?, layout) }
}

#[cold]
fn uncommitted() -> ch4::Error {
    ch4::Error::new(
        ErrorKind::Type,
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

/// The predefined elements in `bytes` of `dt` (`MPI_Get_elements`): those of the whole
/// elements of the type, plus those that arrived whole of a partial one (in typemap order);
/// `None` when the bytes end inside a predefined element.
pub(crate) fn elements_in(st: &State, bytes: u64, dt: Handle) -> ch4::Result<Option<u64>> {
    let d = desc(st, dt)?;
    if d.size == 0 {
        return Ok(Some(0));
    }
    let whole = bytes / d.size as u64;
    let rest = (bytes % d.size as u64) as usize;
    let mut n = whole * d.elements as u64;
    if rest > 0 {
        let (partial, exact) = d.elements_within(rest)?;
        if !exact {
            return Ok(None);
        }
        n += partial as u64;
    }
    Ok(Some(n))
}

/// The bytes that `count` predefined elements of `dt` take (`MPI_Status_set_elements`):
/// whole elements of the type, then the first predefined elements of one more, in typemap
/// order.
pub(crate) fn bytes_of_elements(st: &State, dt: Handle, count: i64) -> ch4::Result<u64> {
    let d = desc(st, dt)?;
    let count = u64::try_from(count)
        .map_err(|_| ch4::Error::new(ErrorKind::Count, format!("count {count} is negative")))?;
    if d.elements == 0 {
        return Ok(0);
    }
    let whole = count / d.elements as u64;
    let mut rest = (count % d.elements as u64) as usize;
    let mut bytes = whole.checked_mul(d.size as u64).ok_or_else(too_big)?;
    let stop = || ch4::Error::new(ErrorKind::Internal, "stop");
    let r = d.for_basics(0, &mut |_, h, k| {
        if rest == 0 {
            return Err(stop());
        }
        let n = rest.min(k);
        bytes += (n * basic_size(h)) as u64;
        rest -= n;
        Ok(())
    });
    match r {
        Err(e) if e.kind() != ErrorKind::Internal => Err(e),
        _ => Ok(bytes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi;

    fn int() -> Arc<Type> {
        Desc::predefined(0x209).unwrap().ty
    }

    #[test]
    fn a_vector_of_ints_is_strided_blocks_with_the_standards_extent() {
        let run = Run {
            start: 0,
            count: 3,
            blocklen: 2,
            stride: 20,
        };
        let v = Type::of_parts(vec![Part { ty: int(), run }], Contents::default()).unwrap();
        let mut blocks = Vec::new();
        v.for_merged_blocks(1, &mut |o, l| {
            blocks.push((o, l));
            Ok(())
        })
        .unwrap();
        assert_eq!(blocks, vec![(0, 8), (20, 8), (40, 8)]);
        assert_eq!((v.size, v.lb, v.extent, v.elements), (24, 0, 48, 6));
        assert_eq!((v.true_lb, v.true_ub), (0, 48));
        let (base, layout) = v.layout(2).unwrap();
        assert_eq!(base, 0);
        assert_eq!(layout.packed_bytes(), 48);
        assert_eq!(layout.extent_bytes(), 48 + 48);
        assert!(!v.contiguous());
        let c = Type::of_parts(
            vec![Part {
                ty: int(),
                run: Run::block(0, 4),
            }],
            Contents::default(),
        )
        .unwrap();
        assert!(c.contiguous(), "{c:?}");
        // A stride that does not fit an address offset is an error, not a wrapped value.
        let run = Run {
            start: 0,
            count: 3,
            blocklen: 1,
            stride: isize::MAX / 2,
        };
        let e = Type::of_parts(vec![Part { ty: int(), run }], Contents::default());
        assert_eq!(e.unwrap_err().kind(), ErrorKind::Count);
    }

    #[test]
    fn a_billion_blocks_cost_nothing_until_moved() {
        let run = Run {
            start: 0,
            count: i32::MAX as usize / 2,
            blocklen: 1,
            stride: 48,
        };
        let v = Type::of_parts(vec![Part { ty: int(), run }], Contents::default()).unwrap();
        assert_eq!(v.size, 4 * (i32::MAX as usize / 2));
        assert_eq!(v.true_ub, 48 * (i32::MAX as isize / 2 - 1) + 4);
    }

    #[test]
    fn the_gapped_pairs_and_handles() {
        let di = Desc::predefined(0x229).unwrap();
        assert_eq!((di.size, di.extent, di.elements), (12, 16, 2));
        assert!(!di.contiguous());
        assert_eq!(di.elements_within(8).unwrap(), (1, true));
        assert_eq!(di.elements_within(9).unwrap(), (1, false));
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

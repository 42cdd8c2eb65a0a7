//! The predefined datatypes (their sizes and names, for this platform: x86-64 and aarch64
//! Linux, LP64) and the predefined reduction operations over them.
//!
//! A buffer of `count` elements of a predefined type is `count * size` contiguous bytes. The
//! pair types with a hole between their members (`MPI_DOUBLE_INT`, `MPI_LONG_INT`,
//! `MPI_SHORT_INT`, `MPI_LONG_DOUBLE_INT`) are not contiguous: sends and receives move them as
//! two blocks an element, through the derived datatypes' layouts (`derived`), and reductions
//! (`MPI_MINLOC`, `MPI_MAXLOC`) read and write them as whole C structs (`pair_extent`).

use std::ffi::{c_int, c_void};

use ch4_core::ErrorKind;

use crate::abi::{op, Handle};

/// The size of a predefined datatype by its handle (0x200 + index), 0 for none: the
/// datatype handles of the ABI all sit in 0x200..0x300, so a lookup is one load.
const SIZES: [u8; 256] = {
    let mut t = [0u8; 256];
    let groups: [(&[usize], u8); 6] = [
        (
            &[
                0x07, 0x1e, 0x38, 0x39, 0x40, 0x41, 0x43, 0x44, 0x45, 0x47, 0xc0, 0xc1,
            ],
            1,
        ),
        (&[0x08, 0x0c, 0x48, 0x49, 0xc8, 0xc9, 0xca], 2),
        (
            &[
                0x09, 0x0d, 0x10, 0x18, 0x19, 0x1a, 0x3c, 0x50, 0x51, 0xd0, 0xd1, 0xd2, 0xd3,
            ],
            4,
        ),
        (
            &[
                0x01, 0x02, 0x03, 0x0a, 0x0b, 0x0e, 0x0f, 0x12, 0x13, 0x14, 0x1b, 0x1c, 0x28, 0x2b,
                0x30, 0x32, 0x58, 0x59, 0xd8, 0xd9, 0xda, 0xdb,
            ],
            8,
        ),
        (&[0x16, 0x17, 0x1d, 0x20, 0x31, 0xe0, 0xe1, 0xe2, 0xe3], 16),
        (&[0x24, 0x25, 0xeb], 32),
    ];
    let mut g = 0;
    while g < groups.len() {
        let (members, size) = groups[g];
        let mut i = 0;
        while i < members.len() {
            t[members[i]] = size;
            i += 1;
        }
        g += 1;
    }
    t
};

/// The size in bytes of predefined datatype `dt`; `None` for anything else.
#[inline(always)]
pub fn size_of(dt: Handle) -> Option<usize> {
    let i = dt.wrapping_sub(0x200);
    if i >= SIZES.len() {
        return None;
    }
    match SIZES[i] {
        0 => None,
        s => Some(s as usize),
    }
}

/// The name of predefined datatype `dt` (`MPI_Type_get_name`).
pub fn name_of(dt: Handle) -> Option<&'static str> {
    NAMES.iter().find(|(h, _)| *h == dt).map(|(_, n)| *n)
}

const NAMES: &[(Handle, &str)] = &[
    (0x200, "MPI_DATATYPE_NULL"),
    (0x201, "MPI_AINT"),
    (0x202, "MPI_COUNT"),
    (0x203, "MPI_OFFSET"),
    (0x207, "MPI_PACKED"),
    (0x208, "MPI_SHORT"),
    (0x209, "MPI_INT"),
    (0x20a, "MPI_LONG"),
    (0x20b, "MPI_LONG_LONG"),
    (0x20c, "MPI_UNSIGNED_SHORT"),
    (0x20d, "MPI_UNSIGNED"),
    (0x20e, "MPI_UNSIGNED_LONG"),
    (0x20f, "MPI_UNSIGNED_LONG_LONG"),
    (0x210, "MPI_FLOAT"),
    (0x212, "MPI_C_FLOAT_COMPLEX"),
    (0x213, "MPI_CXX_FLOAT_COMPLEX"),
    (0x214, "MPI_DOUBLE"),
    (0x216, "MPI_C_DOUBLE_COMPLEX"),
    (0x217, "MPI_CXX_DOUBLE_COMPLEX"),
    (0x218, "MPI_LOGICAL"),
    (0x219, "MPI_INTEGER"),
    (0x21a, "MPI_REAL"),
    (0x21b, "MPI_COMPLEX"),
    (0x21c, "MPI_DOUBLE_PRECISION"),
    (0x21d, "MPI_DOUBLE_COMPLEX"),
    (0x21e, "MPI_CHARACTER"),
    (0x220, "MPI_LONG_DOUBLE"),
    (0x224, "MPI_C_LONG_DOUBLE_COMPLEX"),
    (0x225, "MPI_CXX_LONG_DOUBLE_COMPLEX"),
    (0x228, "MPI_FLOAT_INT"),
    (0x229, "MPI_DOUBLE_INT"),
    (0x22a, "MPI_LONG_INT"),
    (0x22b, "MPI_2INT"),
    (0x22c, "MPI_SHORT_INT"),
    (0x22d, "MPI_LONG_DOUBLE_INT"),
    (0x230, "MPI_2REAL"),
    (0x231, "MPI_2DOUBLE_PRECISION"),
    (0x232, "MPI_2INTEGER"),
    (0x238, "MPI_C_BOOL"),
    (0x239, "MPI_CXX_BOOL"),
    (0x23c, "MPI_WCHAR"),
    (0x240, "MPI_INT8_T"),
    (0x241, "MPI_UINT8_T"),
    (0x243, "MPI_CHAR"),
    (0x244, "MPI_SIGNED_CHAR"),
    (0x245, "MPI_UNSIGNED_CHAR"),
    (0x247, "MPI_BYTE"),
    (0x248, "MPI_INT16_T"),
    (0x249, "MPI_UINT16_T"),
    (0x250, "MPI_INT32_T"),
    (0x251, "MPI_UINT32_T"),
    (0x258, "MPI_INT64_T"),
    (0x259, "MPI_UINT64_T"),
    (0x2c0, "MPI_LOGICAL1"),
    (0x2c1, "MPI_INTEGER1"),
    (0x2c8, "MPI_LOGICAL2"),
    (0x2c9, "MPI_INTEGER2"),
    (0x2ca, "MPI_REAL2"),
    (0x2d0, "MPI_LOGICAL4"),
    (0x2d1, "MPI_INTEGER4"),
    (0x2d2, "MPI_REAL4"),
    (0x2d3, "MPI_COMPLEX4"),
    (0x2d8, "MPI_LOGICAL8"),
    (0x2d9, "MPI_INTEGER8"),
    (0x2da, "MPI_REAL8"),
    (0x2db, "MPI_COMPLEX8"),
    (0x2e0, "MPI_LOGICAL16"),
    (0x2e1, "MPI_INTEGER16"),
    (0x2e2, "MPI_REAL16"),
    (0x2e3, "MPI_COMPLEX16"),
    (0x2eb, "MPI_COMPLEX32"),
];

/// The extent of the predefined pair types whose members have a gap between them
/// (`MPI_DOUBLE_INT`, `MPI_LONG_INT`, `MPI_SHORT_INT`): the C struct's size, padding included.
pub fn pair_extent(dt: Handle) -> Option<usize> {
    match dt {
        0x229 | 0x22a => Some(16),
        0x22c => Some(8),
        _ => None,
    }
}

/// The bytes one element of `dt` spans in a reduction's buffers: its size, or for a gapped
/// pair type its extent (the reduction reads and writes whole C structs).
pub fn reduce_elem(dt: Handle) -> Option<usize> {
    size_of(dt).or_else(|| pair_extent(dt))
}

/// The bytes of `count` elements of `dt` at `buf`, for a reduction's input.
///
/// # Safety
/// As [`send_bytes`].
pub unsafe fn reduce_in<'a>(buf: *const c_void, count: c_int, dt: Handle) -> ch4::Result<&'a [u8]> {
    // SAFETY: the caller's contract.
    unsafe { raw(buf, reduce_len(count, dt)?) }
}

/// The bytes of `count` elements of `dt` at `buf`, for a reduction's output.
///
/// # Safety
/// As [`recv_bytes`].
pub unsafe fn reduce_out<'a>(
    buf: *mut c_void,
    count: c_int,
    dt: Handle,
) -> ch4::Result<&'a mut [u8]> {
    // SAFETY: the caller's contract.
    unsafe { raw_mut(buf, reduce_len(count, dt)?) }
}

/// The length of `count` elements of `dt` in a reduction's buffers.
pub fn reduce_len(count: c_int, dt: Handle) -> ch4::Result<usize> {
    let e = reduce_elem(dt).ok_or_else(|| bad_type(dt))?;
    Ok(elements(count)? * e)
}

/// The bytes of `count` elements of `dt` at `buf`, for a send.
///
/// # Safety
/// `buf` points to `count` elements of `dt` that stay valid (and unwritten) for as long as the
/// slice or the operation using it (MPI's rule for send buffers).
#[inline(always)]
pub unsafe fn send_bytes<'a>(
    buf: *const c_void,
    count: c_int,
    dt: Handle,
) -> ch4::Result<&'a [u8]> {
    // SAFETY: the caller's contract.
    unsafe { raw(buf, byte_len(count, dt)?) }
}

/// The bytes of `count` elements of `dt` at `buf`, for a receive.
///
/// # Safety
/// As [`send_bytes`], and nothing else reads or writes the buffer while the operation runs.
#[inline(always)]
pub unsafe fn recv_bytes<'a>(
    buf: *mut c_void,
    count: c_int,
    dt: Handle,
) -> ch4::Result<&'a mut [u8]> {
    // SAFETY: the caller's contract.
    unsafe { raw_mut(buf, byte_len(count, dt)?) }
}

/// The length in bytes of `count` elements of `dt`.
#[inline(always)]
pub fn byte_len(count: c_int, dt: Handle) -> ch4::Result<usize> {
    let Some(size) = size_of(dt) else {
        // No elements of no datatype: what MPICH's tests pass for a receive from
        // MPI_PROC_NULL, and harmless anywhere.
        if count == 0 && dt == 0x200 {
            return Ok(0);
        }
        return Err(bad_type(dt));
    };
    Ok(elements(count)? * size)
}

/// An element count from C: an error for a negative one.
#[inline(always)]
pub fn elements(count: c_int) -> ch4::Result<usize> {
    usize::try_from(count).map_err(|_| negative(count))
}

#[cold]
fn negative(count: c_int) -> ch4::Error {
    ch4::Error::new(ErrorKind::Count, format!("count {count} is negative"))
}

/// The `len` bytes at `p` (any pointer type; none needed when `len` is 0).
///
/// # Safety
/// `p` has `len` readable bytes that stay unchanged for the slice's lifetime.
#[inline(always)]
pub unsafe fn raw<'a, T>(p: *const T, len: usize) -> ch4::Result<&'a [u8]> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(null_buffer());
    }
    // SAFETY: the caller's contract; `p` is not null.
    Ok(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) })
}

/// The `len` writable bytes at `p`, as [`raw`].
///
/// # Safety
/// `p` has `len` writable bytes, nobody else's for the slice's lifetime.
#[inline(always)]
pub unsafe fn raw_mut<'a, T>(p: *mut T, len: usize) -> ch4::Result<&'a mut [u8]> {
    if len == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(null_buffer());
    }
    // SAFETY: the caller's contract; `p` is not null.
    Ok(unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), len) })
}

#[cold]
fn null_buffer() -> ch4::Error {
    ch4::Error::new(ErrorKind::Buffer, "a null buffer with a nonzero count")
}

/// The error for a datatype handle that is not a supported predefined type.
#[cold]
pub fn bad_type(dt: Handle) -> ch4::Error {
    let why = match name_of(dt) {
        Some("MPI_DATATYPE_NULL") => "MPI_DATATYPE_NULL is no datatype".to_string(),
        Some(n) => format!("{n} is not supported yet (its members have a gap between them)"),
        None => format!("datatype {dt:#x} is not a predefined datatype"),
    };
    ch4::Error::new(ErrorKind::Type, why)
}

/// The element kinds reductions compute on.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    I8,
    U8,
    I16,
    U16,
    I32,
    U32,
    I64,
    U64,
    F32,
    F64,
    /// C's `bool` (one byte, 0 or 1): logical operations only.
    Bool,
}

fn kind_of(dt: Handle) -> Option<Kind> {
    Some(match dt {
        0x240 | 0x243 | 0x244 | 0x2c1 => Kind::I8,
        0x241 | 0x245 | 0x247 => Kind::U8,
        0x208 | 0x248 | 0x2c9 => Kind::I16,
        0x20c | 0x249 => Kind::U16,
        0x209 | 0x250 | 0x219 | 0x2d1 | 0x218 | 0x2d0 => Kind::I32,
        0x20d | 0x251 => Kind::U32,
        0x20a | 0x20b | 0x258 | 0x201 | 0x202 | 0x203 | 0x2d9 | 0x2d8 => Kind::I64,
        0x20e | 0x20f | 0x259 => Kind::U64,
        0x210 | 0x21a | 0x2d2 => Kind::F32,
        0x214 | 0x21c | 0x2da => Kind::F64,
        0x238 | 0x239 => Kind::Bool,
        _ => return None,
    })
}

/// Applies `f` element by element: `acc[i] = f(acc[i], x[i])`.
fn fold<T: Copy>(acc: &mut [u8], x: &[u8], f: impl Fn(T, T) -> T) {
    let n = std::mem::size_of::<T>();
    for (a, b) in acc.chunks_exact_mut(n).zip(x.chunks_exact(n)) {
        // SAFETY: both chunks are exactly `size_of::<T>()` bytes, read and written unaligned;
        // T is one of the plain numeric types below (every bit pattern valid).
        unsafe {
            let va = a.as_ptr().cast::<T>().read_unaligned();
            let vb = b.as_ptr().cast::<T>().read_unaligned();
            a.as_mut_ptr().cast::<T>().write_unaligned(f(va, vb));
        }
    }
}

macro_rules! int_ops {
    ($t:ty, $op:expr, $acc:expr, $x:expr) => {
        match $op {
            op::SUM => fold::<$t>($acc, $x, |a, b| a.wrapping_add(b)),
            op::PROD => fold::<$t>($acc, $x, |a, b| a.wrapping_mul(b)),
            op::MIN => fold::<$t>($acc, $x, |a, b| a.min(b)),
            op::MAX => fold::<$t>($acc, $x, |a, b| a.max(b)),
            op::BAND => fold::<$t>($acc, $x, |a, b| a & b),
            op::BOR => fold::<$t>($acc, $x, |a, b| a | b),
            op::BXOR => fold::<$t>($acc, $x, |a, b| a ^ b),
            op::LAND => fold::<$t>($acc, $x, |a, b| <$t>::from(a != 0 && b != 0)),
            op::LOR => fold::<$t>($acc, $x, |a, b| <$t>::from(a != 0 || b != 0)),
            op::LXOR => fold::<$t>($acc, $x, |a, b| <$t>::from((a != 0) != (b != 0))),
            _ => unreachable!("checked by reduction"),
        }
    };
}

macro_rules! float_ops {
    ($t:ty, $op:expr, $acc:expr, $x:expr) => {
        match $op {
            op::SUM => fold::<$t>($acc, $x, |a, b| a + b),
            op::PROD => fold::<$t>($acc, $x, |a, b| a * b),
            op::MIN => fold::<$t>($acc, $x, |a, b| a.min(b)),
            op::MAX => fold::<$t>($acc, $x, |a, b| a.max(b)),
            _ => unreachable!("checked by reduction"),
        }
    };
}

/// A byte-level reduction the device's collectives apply (accumulator, incoming).
pub type Fold = Box<dyn FnMut(&mut [u8], &[u8]) + Send>;

/// The byte-level fold of predefined operation `op_h` over elements of `dt`, for the device's
/// reductions (`MPI_MINLOC` and `MPI_MAXLOC` over the value-and-index pair types); an error
/// naming the pair when the standard does not define it (or ch4 does not support it yet:
/// complex and long double types).
pub fn reduction(op_h: Handle, dt: Handle) -> ch4::Result<Fold> {
    if op_h == op::MINLOC || op_h == op::MAXLOC {
        return loc_reduction(op_h == op::MINLOC, dt).map(|f| Box::new(f) as Fold);
    }
    let kind = kind_of(dt);
    let arithmetic = matches!(op_h, op::SUM | op::PROD | op::MIN | op::MAX);
    let bitwise = matches!(op_h, op::BAND | op::BOR | op::BXOR);
    let logical = matches!(op_h, op::LAND | op::LOR | op::LXOR);
    let ok = match kind {
        Some(Kind::F32 | Kind::F64) => arithmetic,
        Some(Kind::Bool) => logical,
        Some(Kind::U8) if dt == 0x247 => bitwise,
        Some(_) => arithmetic || bitwise || logical,
        None => false,
    };
    let (Some(kind), true) = (kind, ok) else {
        let op_name = match op_h {
            op::SUM => "MPI_SUM".to_string(),
            op::PROD => "MPI_PROD".to_string(),
            op::MIN => "MPI_MIN".to_string(),
            op::MAX => "MPI_MAX".to_string(),
            op::BAND => "MPI_BAND".to_string(),
            op::BOR => "MPI_BOR".to_string(),
            op::BXOR => "MPI_BXOR".to_string(),
            op::LAND => "MPI_LAND".to_string(),
            op::LOR => "MPI_LOR".to_string(),
            op::LXOR => "MPI_LXOR".to_string(),
            h => format!("operation {h:#x}"),
        };
        let type_name = name_of(dt).map_or_else(|| format!("datatype {dt:#x}"), str::to_string);
        return Err(ch4::Error::new(
            ErrorKind::Op,
            format!("{op_name} on {type_name}: not a reduction ch4 supports"),
        ));
    };
    Ok(Box::new(move |acc: &mut [u8], x: &[u8]| match kind {
        Kind::I8 => int_ops!(i8, op_h, acc, x),
        Kind::U8 => int_ops!(u8, op_h, acc, x),
        Kind::I16 => int_ops!(i16, op_h, acc, x),
        Kind::U16 => int_ops!(u16, op_h, acc, x),
        Kind::I32 => int_ops!(i32, op_h, acc, x),
        Kind::U32 => int_ops!(u32, op_h, acc, x),
        Kind::I64 => int_ops!(i64, op_h, acc, x),
        Kind::U64 => int_ops!(u64, op_h, acc, x),
        Kind::Bool => int_ops!(u8, op_h, acc, x),
        Kind::F32 => float_ops!(f32, op_h, acc, x),
        Kind::F64 => float_ops!(f64, op_h, acc, x),
    }))
}

/// Reads a `T` at byte `at` of `b`.
fn get<T: Copy>(b: &[u8], at: usize) -> T {
    // SAFETY: callers pass `at + size_of::<T>() <= b.len()` (element strides from the pair
    // type's layout); read unaligned, T a plain numeric type.
    unsafe { b.as_ptr().add(at).cast::<T>().read_unaligned() }
}

/// Writes a `T` at byte `at` of `b`.
fn set<T: Copy>(b: &mut [u8], at: usize, v: T) {
    // SAFETY: as in `get`.
    unsafe { b.as_mut_ptr().add(at).cast::<T>().write_unaligned(v) }
}

/// `MPI_MINLOC` (`min`) or `MPI_MAXLOC` over a value-and-index pair type: the better value,
/// the smaller index on a tie.
fn pair_fold<V: Copy + PartialOrd, I: Copy + PartialOrd>(
    min: bool,
    stride: usize,
    index_at: usize,
) -> impl Fn(&mut [u8], &[u8]) {
    move |acc: &mut [u8], x: &[u8]| {
        let n = acc.len().min(x.len()) / stride;
        for e in 0..n {
            let at = e * stride;
            let (u, i): (V, I) = (get(acc, at), get(acc, at + index_at));
            let (v, j): (V, I) = (get(x, at), get(x, at + index_at));
            let take = if min { v < u } else { v > u };
            if take || (v == u && j < i) {
                set(acc, at, v);
                set(acc, at + index_at, j);
            }
        }
    }
}

/// A pair reduction of [`pair_fold`].
type PairFold = dyn Fn(&mut [u8], &[u8]) + Send;

fn loc_reduction(min: bool, dt: Handle) -> ch4::Result<impl FnMut(&mut [u8], &[u8]) + Send> {
    let f: Box<PairFold> = match dt {
        0x228 => Box::new(pair_fold::<f32, i32>(min, 8, 4)), // MPI_FLOAT_INT
        0x229 => Box::new(pair_fold::<f64, i32>(min, 16, 8)), // MPI_DOUBLE_INT
        0x22a => Box::new(pair_fold::<i64, i32>(min, 16, 8)), // MPI_LONG_INT
        0x22b | 0x232 => Box::new(pair_fold::<i32, i32>(min, 8, 4)), // MPI_2INT, MPI_2INTEGER
        0x22c => Box::new(pair_fold::<i16, i32>(min, 8, 4)), // MPI_SHORT_INT
        0x230 => Box::new(pair_fold::<f32, f32>(min, 8, 4)), // MPI_2REAL
        0x231 => Box::new(pair_fold::<f64, f64>(min, 16, 8)), // MPI_2DOUBLE_PRECISION
        _ => {
            let name = name_of(dt).map_or_else(|| format!("datatype {dt:#x}"), str::to_string);
            return Err(ch4::Error::new(
                ErrorKind::Op,
                format!(
                    "{} on {name}: MPI_MINLOC and MPI_MAXLOC take a value-and-index pair type",
                    if min { "MPI_MINLOC" } else { "MPI_MAXLOC" }
                ),
            ));
        }
    };
    Ok(move |acc: &mut [u8], x: &[u8]| f(acc, x))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_named_type_with_a_size_is_contiguous_and_the_gapped_pairs_are_refused() {
        assert_eq!(size_of(0x209), Some(4)); // MPI_INT
        assert_eq!(size_of(0x214), Some(8)); // MPI_DOUBLE
        assert_eq!(size_of(0x247), Some(1)); // MPI_BYTE
        for gapped in [0x229, 0x22a, 0x22c, 0x22d] {
            assert_eq!(size_of(gapped), None);
            assert!(bad_type(gapped).to_string().contains("gap"));
        }
        assert_eq!(name_of(0x20b), Some("MPI_LONG_LONG"));
        assert_eq!(byte_len(3, 0x214).unwrap(), 24);
        assert_eq!(byte_len(-1, 0x214).unwrap_err().kind(), ErrorKind::Count);
        assert_eq!(byte_len(1, 0x1234).unwrap_err().kind(), ErrorKind::Type);
    }

    #[test]
    fn reductions_compute_per_element_and_refuse_what_the_standard_does_not_define() {
        let mut acc = [1i32, 5, -3].map(i32::to_ne_bytes).concat();
        let x = [2i32, 4, 7].map(i32::to_ne_bytes).concat();
        reduction(op::MAX, 0x209).unwrap()(&mut acc, &x);
        assert_eq!(acc, [2i32, 5, 7].map(i32::to_ne_bytes).concat());
        let mut d = 1.5f64.to_ne_bytes().to_vec();
        reduction(op::SUM, 0x214).unwrap()(&mut d, &2.25f64.to_ne_bytes());
        assert_eq!(f64::from_ne_bytes(d.try_into().unwrap()), 3.75);
        assert!(reduction(op::BAND, 0x214).is_err(), "bitwise on double");
        assert!(reduction(op::SUM, 0x247).is_err(), "arithmetic on MPI_BYTE");
        assert!(reduction(0x38, 0x209).is_err(), "MPI_MINLOC on a plain int");
        // MPI_MAXLOC on MPI_DOUBLE_INT (16-byte structs): value, then the smaller index on ties.
        let pair = |v: f64, i: i32| {
            [
                v.to_ne_bytes().to_vec(),
                i.to_ne_bytes().to_vec(),
                vec![0; 4],
            ]
            .concat()
        };
        let mut acc = [pair(1.0, 5), pair(2.0, 1)].concat();
        let x = [pair(3.0, 7), pair(2.0, 0)].concat();
        reduction(0x39, 0x229).unwrap()(&mut acc, &x);
        assert_eq!(acc, [pair(3.0, 7), pair(2.0, 0)].concat());
    }
}

//! Packing (MPI 4.1 sections 5.2 and 5.3): `MPI_Pack` and `MPI_Unpack` copy the data of
//! `count` elements of a datatype to or from a contiguous buffer, in typemap order (the bytes
//! as they are: a packed buffer is read by the same library on the same platform);
//! `MPI_Pack_external`, `MPI_Unpack_external` and `MPI_Pack_external_size` do it in the
//! "external32" representation (MPI 4.1 section 13.5.2), which any MPI library on any
//! platform reads: every predefined element big-endian, at the standard's size for its type
//! (`MPI_LONG` is 4 bytes there, `MPI_LONG_DOUBLE` is an IEEE binary128 of 16, `MPI_WCHAR`
//! 2), so each element is converted on its way. Each has its `_c` form.
//!
//! The data is walked through the type's tree ([`Type::for_merged_blocks`],
//! [`Type::for_basics`]), never flattened into a list first; a contiguous type is one copy.

use std::ffi::{c_char, c_int, c_void};

use ch4_core::ErrorKind;

use super::{desc, too_big, Shape, Type};
use crate::abi::{self, Handle};
use crate::call::{call, null_arg};
use crate::state::State;

// The conversions below read and write native integers as little-endian bytes, which every
// platform ch4 builds for (x86-64 and aarch64 Linux) uses.
const _: () = assert!(cfg!(target_endian = "little"));

/// How one element of a predefined type is written in external32: its units (two for a
/// complex number), each `native` bytes here and `external` bytes there.
#[derive(Clone, Copy, Debug, PartialEq)]
struct External {
    native: usize,
    external: usize,
    units: usize,
    rep: Rep,
}

/// A unit's kind of number.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Rep {
    /// Bytes (characters, booleans, `MPI_BYTE`, `MPI_PACKED`): copied.
    Raw,
    /// A two's-complement integer, sign-extended when widened.
    Signed,
    /// An unsigned integer.
    Unsigned,
    /// An IEEE float of the same size on both sides: its bytes reversed.
    Float,
    /// C's `long double`: on x86-64 the x87 80-bit format, which external32 writes as IEEE
    /// binary128 (MPI 4.1 table 13.2); elsewhere binary128 already.
    LongDouble,
}

/// The external32 representation of predefined type `h` (MPI 4.1 table 13.2).
fn external(h: Handle) -> Option<External> {
    let e = |native, external, units, rep| External {
        native,
        external,
        units,
        rep,
    };
    Some(match h {
        // MPI_PACKED, MPI_BYTE, the chars, the 8-bit integers, the booleans, MPI_CHARACTER,
        // MPI_LOGICAL1, MPI_INTEGER1.
        0x207 | 0x247 | 0x243 | 0x244 | 0x245 | 0x240 | 0x241 | 0x238 | 0x239 | 0x21e | 0x2c0
        | 0x2c1 => e(1, 1, 1, Rep::Raw),
        // MPI_LONG and MPI_UNSIGNED_LONG: 4 bytes in external32.
        0x20a => e(8, 4, 1, Rep::Signed),
        0x20e => e(8, 4, 1, Rep::Unsigned),
        // MPI_WCHAR: 2 bytes in external32.
        0x23c => e(4, 2, 1, Rep::Unsigned),
        0x20c | 0x20d | 0x20f | 0x249 | 0x251 | 0x259 => {
            let s = super::basic_size(h);
            e(s, s, 1, Rep::Unsigned)
        }
        // The signed integers, MPI_AINT, MPI_COUNT, MPI_OFFSET, the Fortran integers and
        // logicals.
        0x208 | 0x209 | 0x20b | 0x248 | 0x250 | 0x258 | 0x201 | 0x202 | 0x203 | 0x218 | 0x219
        | 0x2c8 | 0x2c9 | 0x2d0 | 0x2d1 | 0x2d8 | 0x2d9 | 0x2e0 | 0x2e1 => {
            let s = super::basic_size(h);
            e(s, s, 1, Rep::Signed)
        }
        // The reals.
        0x210 | 0x214 | 0x21a | 0x21c | 0x2ca | 0x2d2 | 0x2da | 0x2e2 => {
            let s = super::basic_size(h);
            e(s, s, 1, Rep::Float)
        }
        // The complex types: two reals.
        0x212 | 0x213 | 0x21b | 0x2db => e(4, 4, 2, Rep::Float),
        0x216 | 0x217 | 0x21d | 0x2e3 => e(8, 8, 2, Rep::Float),
        0x2d3 => e(2, 2, 2, Rep::Float),
        0x2eb => e(16, 16, 2, Rep::Float),
        0x220 => e(16, 16, 1, Rep::LongDouble),
        0x224 | 0x225 => e(16, 16, 2, Rep::LongDouble),
        _ => return None,
    })
}

fn no_external(h: Handle) -> ch4::Error {
    ch4::Error::new(
        ErrorKind::Arg,
        format!("datatype {h:#x} has no external32 representation in ch4"),
    )
}

/// The external32 size of one element of `t`.
fn external_size_of(t: &Type) -> ch4::Result<usize> {
    match &t.shape {
        Shape::Basic(h) => external(*h)
            .map(|e| e.external * e.units)
            .ok_or_else(|| no_external(*h)),
        Shape::Resized(old) => external_size_of(old),
        Shape::Parts(parts) => parts.iter().try_fold(0usize, |sum, p| {
            let n = p.run.copies()?;
            if n == 0 {
                return Ok(sum);
            }
            n.checked_mul(external_size_of(&p.ty)?)
                .and_then(|s| s.checked_add(sum))
                .ok_or_else(too_big)
        }),
    }
}

/// Writes one unit `from` (native) into `to` (external32).
fn to_external(e: External, from: &[u8], to: &mut [u8]) {
    match e.rep {
        Rep::Raw => to.copy_from_slice(from),
        Rep::Float => {
            to.copy_from_slice(from);
            to.reverse();
        }
        Rep::Signed | Rep::Unsigned => {
            // Big-endian: the low `external` bytes, most significant first (a narrowing keeps
            // the value when it fits, as MPI asks; one that does not fit is the program's
            // error).
            for (i, b) in to.iter_mut().enumerate() {
                *b = from[e.external - 1 - i];
            }
        }
        Rep::LongDouble => long_double_out(from, to),
    }
}

/// Reads one external32 unit `from` into `to` (native).
fn from_external(e: External, from: &[u8], to: &mut [u8]) {
    match e.rep {
        Rep::Raw => to.copy_from_slice(from),
        Rep::Float => {
            to.copy_from_slice(from);
            to.reverse();
        }
        Rep::Signed | Rep::Unsigned => {
            let negative = e.rep == Rep::Signed && from[0] & 0x80 != 0;
            for (i, b) in to.iter_mut().enumerate() {
                *b = if i < e.external {
                    from[e.external - 1 - i]
                } else if negative {
                    0xff
                } else {
                    0
                };
            }
        }
        Rep::LongDouble => long_double_in(from, to),
    }
}

/// An x87 extended-precision number (64-bit significand with its integer bit, 15-bit
/// exponent, sign) as big-endian IEEE binary128 (same exponent bias; the fraction is the
/// significand without its integer bit, widened).
#[cfg(target_arch = "x86_64")]
fn long_double_out(from: &[u8], to: &mut [u8]) {
    let mut m = [0u8; 8];
    m.copy_from_slice(&from[..8]);
    let significand = u64::from_le_bytes(m);
    let sign_exp = u16::from_le_bytes([from[8], from[9]]);
    let fraction = u128::from(significand & (u64::MAX >> 1)) << 49;
    let quad = (u128::from(sign_exp) << 112) | fraction;
    to.copy_from_slice(&quad.to_be_bytes());
}

/// Big-endian IEEE binary128 as an x87 extended-precision number (the fraction cut to 63
/// bits; the integer bit set unless the number is zero or subnormal).
#[cfg(target_arch = "x86_64")]
fn long_double_in(from: &[u8], to: &mut [u8]) {
    let mut q = [0u8; 16];
    q.copy_from_slice(from);
    let quad = u128::from_be_bytes(q);
    let sign_exp = (quad >> 112) as u16;
    let integer_bit = if sign_exp & 0x7fff != 0 {
        1u64 << 63
    } else {
        0
    };
    let significand = ((quad >> 49) as u64 & (u64::MAX >> 1)) | integer_bit;
    to.fill(0);
    to[..8].copy_from_slice(&significand.to_le_bytes());
    to[8..10].copy_from_slice(&sign_exp.to_le_bytes());
}

/// `long double` is binary128 here already: its bytes reversed.
#[cfg(not(target_arch = "x86_64"))]
fn long_double_out(from: &[u8], to: &mut [u8]) {
    to.copy_from_slice(from);
    to.reverse();
}

/// As [`long_double_out`], back.
#[cfg(not(target_arch = "x86_64"))]
fn long_double_in(from: &[u8], to: &mut [u8]) {
    to.copy_from_slice(from);
    to.reverse();
}

/// The only data representation besides the native one (MPI 4.1 section 13.5.2).
///
/// # Safety
/// `datarep` is a NUL-terminated string.
unsafe fn check_datarep(datarep: *const c_char) -> ch4::Result<()> {
    if datarep.is_null() {
        return Err(null_arg("the data representation"));
    }
    // SAFETY: the caller's contract.
    let name = unsafe { std::ffi::CStr::from_ptr(datarep) };
    if name.to_bytes() != b"external32" {
        return Err(ch4::Error::new(
            ErrorKind::Arg,
            format!(
                "data representation {:?}: only \"external32\" is defined",
                name.to_string_lossy()
            ),
        ));
    }
    Ok(())
}

/// The committed type of `dt`, for packing.
fn packable(st: &State, dt: Handle) -> ch4::Result<super::Desc> {
    let d = desc(st, dt)?;
    if !d.committed {
        return Err(super::uncommitted());
    }
    Ok(d)
}

/// An address `o` bytes from `base` (which may be `MPI_BOTTOM`, with absolute offsets).
fn at(base: usize, o: isize) -> usize {
    base.wrapping_add_signed(o)
}

/// The room left in a buffer of `size` from `position`, which must hold `need` bytes.
fn room(size: usize, position: usize, need: usize, what: &str) -> ch4::Result<()> {
    if position.checked_add(need).map_or(true, |end| end > size) {
        return Err(ch4::Error::new(
            if what == "input" {
                ErrorKind::Truncate
            } else {
                ErrorKind::Arg
            },
            format!(
                "the {what} buffer of {size} bytes has no room for {need} bytes at position \
                 {position}"
            ),
        ));
    }
    Ok(())
}

/// `MPI_Pack`'s body: the data of `count` elements of `dt` at `inbuf`, copied to `outbuf`
/// from byte `position`; the position after them.
///
/// # Safety
/// `inbuf` holds the elements; `outbuf` has `outsize` writable bytes.
unsafe fn pack(
    st: &State,
    inbuf: *const c_void,
    count: usize,
    dt: Handle,
    outbuf: *mut c_void,
    outsize: usize,
    position: usize,
) -> ch4::Result<usize> {
    let d = packable(st, dt)?;
    let need = count.checked_mul(d.size).ok_or_else(too_big)?;
    room(outsize, position, need, "output")?;
    if need > 0 && outbuf.is_null() {
        return Err(null_arg("the output buffer"));
    }
    let (src, mut dst) = (inbuf as usize, outbuf as usize + position);
    if d.contiguous() {
        // SAFETY: the caller's contract: `need` bytes of data at `inbuf`, room at `dst`.
        unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, need) };
        return Ok(position + need);
    }
    d.for_merged_blocks(count, &mut |o, l| {
        // SAFETY: the caller's contract: each block of the type map is the program's data at
        // `inbuf + o`; the room for all of them was checked above.
        unsafe { std::ptr::copy(at(src, o) as *const u8, dst as *mut u8, l) };
        dst += l;
        Ok(())
    })?;
    Ok(position + need)
}

/// `MPI_Unpack`'s body: `count` elements of `dt` at `outbuf` from the bytes at `inbuf` from
/// `position`; the position after them.
///
/// # Safety
/// `inbuf` has `insize` readable bytes; `outbuf` has room for the elements.
unsafe fn unpack(
    st: &State,
    inbuf: *const c_void,
    insize: usize,
    position: usize,
    outbuf: *mut c_void,
    count: usize,
    dt: Handle,
) -> ch4::Result<usize> {
    let d = packable(st, dt)?;
    let need = count.checked_mul(d.size).ok_or_else(too_big)?;
    room(insize, position, need, "input")?;
    if need > 0 && inbuf.is_null() {
        return Err(null_arg("the input buffer"));
    }
    let (mut src, dst) = (inbuf as usize + position, outbuf as usize);
    if d.contiguous() {
        // SAFETY: the caller's contract.
        unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, need) };
        return Ok(position + need);
    }
    d.for_merged_blocks(count, &mut |o, l| {
        // SAFETY: the caller's contract: each block is the program's room at `outbuf + o`;
        // the input's length was checked above.
        unsafe { std::ptr::copy(src as *const u8, at(dst, o) as *mut u8, l) };
        src += l;
        Ok(())
    })?;
    Ok(position + need)
}

/// Visits the predefined elements of `count` elements of `d` with their external32 form.
fn for_externals(
    d: &Type,
    count: usize,
    f: &mut dyn FnMut(isize, External, usize) -> ch4::Result<()>,
) -> ch4::Result<()> {
    d.check_count(count)?;
    for k in 0..count {
        d.for_basics((k as isize).wrapping_mul(d.extent), &mut |o, h, n| {
            let e = external(h).ok_or_else(|| no_external(h))?;
            f(o, e, n)
        })?;
    }
    Ok(())
}

/// `MPI_Pack_external`'s body.
///
/// # Safety
/// As [`pack`].
unsafe fn pack_external(
    st: &State,
    datarep: *const c_char,
    inbuf: *const c_void,
    count: usize,
    dt: Handle,
    outbuf: *mut c_void,
    outsize: usize,
    position: usize,
) -> ch4::Result<usize> {
    // SAFETY: the caller's contract.
    unsafe { check_datarep(datarep) }?;
    let d = packable(st, dt)?;
    let need = count
        .checked_mul(external_size_of(&d)?)
        .ok_or_else(too_big)?;
    room(outsize, position, need, "output")?;
    if need > 0 && outbuf.is_null() {
        return Err(null_arg("the output buffer"));
    }
    let (src, mut dst) = (inbuf as usize, outbuf as usize + position);
    for_externals(&d, count, &mut |o, e, n| {
        for i in 0..n * e.units {
            // SAFETY: the caller's contract: the unit is the program's data at
            // `inbuf + o + i * native`; room for every external unit was checked above.
            let (from, to) = unsafe {
                (
                    std::slice::from_raw_parts(
                        at(src, o.wrapping_add((i * e.native) as isize)) as *const u8,
                        e.native,
                    ),
                    std::slice::from_raw_parts_mut(dst as *mut u8, e.external),
                )
            };
            to_external(e, from, to);
            dst += e.external;
        }
        Ok(())
    })?;
    Ok(position + need)
}

/// `MPI_Unpack_external`'s body.
///
/// # Safety
/// As [`unpack`].
unsafe fn unpack_external(
    st: &State,
    datarep: *const c_char,
    inbuf: *const c_void,
    insize: usize,
    position: usize,
    outbuf: *mut c_void,
    count: usize,
    dt: Handle,
) -> ch4::Result<usize> {
    // SAFETY: the caller's contract.
    unsafe { check_datarep(datarep) }?;
    let d = packable(st, dt)?;
    let need = count
        .checked_mul(external_size_of(&d)?)
        .ok_or_else(too_big)?;
    room(insize, position, need, "input")?;
    if need > 0 && inbuf.is_null() {
        return Err(null_arg("the input buffer"));
    }
    let (mut src, dst) = (inbuf as usize + position, outbuf as usize);
    for_externals(&d, count, &mut |o, e, n| {
        for i in 0..n * e.units {
            // SAFETY: the caller's contract: room for the unit at `outbuf + o + i * native`;
            // the input's length was checked above.
            let (from, to) = unsafe {
                (
                    std::slice::from_raw_parts(src as *const u8, e.external),
                    std::slice::from_raw_parts_mut(
                        at(dst, o.wrapping_add((i * e.native) as isize)) as *mut u8,
                        e.native,
                    ),
                )
            };
            from_external(e, from, to);
            src += e.external;
        }
        Ok(())
    })?;
    Ok(position + need)
}

/// A position from C (an error for a negative one).
fn position_of(p: i64) -> ch4::Result<usize> {
    usize::try_from(p)
        .map_err(|_| ch4::Error::new(ErrorKind::Arg, format!("position {p} is negative")))
}

/// Reads the position at `p`, runs `f` from it and writes back the position it returns.
///
/// # Safety
/// `p` is readable and writable.
unsafe fn moving<P: Copy + TryInto<i64> + TryFrom<usize>>(
    p: *mut P,
    f: impl FnOnce(usize) -> ch4::Result<usize>,
) -> ch4::Result<()> {
    if p.is_null() {
        return Err(null_arg("the position"));
    }
    // SAFETY: the caller's contract.
    let from = position_of(unsafe { p.read() }.try_into().map_err(|_| too_big())?)?;
    let to = P::try_from(f(from)?).map_err(|_| too_big())?;
    // SAFETY: the caller's contract.
    unsafe { p.write(to) };
    Ok(())
}

/// A count or size from C.
fn count(n: i64, what: &str) -> ch4::Result<usize> {
    super::big_count_of(n, what)
}

/// `MPI_Pack`.
///
/// # Safety
/// `inbuf` holds `incount` elements of `datatype`; `outbuf` has `outsize` bytes; `position`
/// is readable and writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Pack(
    inbuf: *const c_void,
    incount: c_int,
    datatype: Handle,
    outbuf: *mut c_void,
    outsize: c_int,
    position: *mut c_int,
    comm: Handle,
) -> c_int {
    call(comm, "MPI_Pack", |st| {
        let (n, size) = (
            count(incount.into(), "incount")?,
            count(outsize.into(), "outsize")?,
        );
        // SAFETY: the caller's contract.
        unsafe { moving(position, |p| pack(st, inbuf, n, datatype, outbuf, size, p)) }
    })
}

/// `MPI_Pack_c`.
///
/// # Safety
/// As `MPI_Pack`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Pack_c(
    inbuf: *const c_void,
    incount: i64,
    datatype: Handle,
    outbuf: *mut c_void,
    outsize: i64,
    position: *mut i64,
    comm: Handle,
) -> c_int {
    call(comm, "MPI_Pack_c", |st| {
        let (n, size) = (count(incount, "incount")?, count(outsize, "outsize")?);
        // SAFETY: the caller's contract.
        unsafe { moving(position, |p| pack(st, inbuf, n, datatype, outbuf, size, p)) }
    })
}

/// `MPI_Unpack`.
///
/// # Safety
/// `inbuf` has `insize` bytes; `outbuf` has room for `outcount` elements of `datatype`;
/// `position` is readable and writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Unpack(
    inbuf: *const c_void,
    insize: c_int,
    position: *mut c_int,
    outbuf: *mut c_void,
    outcount: c_int,
    datatype: Handle,
    comm: Handle,
) -> c_int {
    call(comm, "MPI_Unpack", |st| {
        let (size, n) = (
            count(insize.into(), "insize")?,
            count(outcount.into(), "outcount")?,
        );
        // SAFETY: the caller's contract.
        unsafe {
            moving(position, |p| {
                unpack(st, inbuf, size, p, outbuf, n, datatype)
            })
        }
    })
}

/// `MPI_Unpack_c`.
///
/// # Safety
/// As `MPI_Unpack`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Unpack_c(
    inbuf: *const c_void,
    insize: i64,
    position: *mut i64,
    outbuf: *mut c_void,
    outcount: i64,
    datatype: Handle,
    comm: Handle,
) -> c_int {
    call(comm, "MPI_Unpack_c", |st| {
        let (size, n) = (count(insize, "insize")?, count(outcount, "outcount")?);
        // SAFETY: the caller's contract.
        unsafe {
            moving(position, |p| {
                unpack(st, inbuf, size, p, outbuf, n, datatype)
            })
        }
    })
}

/// `MPI_Pack_external`.
///
/// # Safety
/// As `MPI_Pack`; `datarep` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn MPI_Pack_external(
    datarep: *const c_char,
    inbuf: *const c_void,
    incount: c_int,
    datatype: Handle,
    outbuf: *mut c_void,
    outsize: isize,
    position: *mut isize,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Pack_external", |st| {
        let (n, size) = (
            count(incount.into(), "incount")?,
            count(outsize as i64, "outsize")?,
        );
        // SAFETY: the caller's contract.
        unsafe {
            moving(position, |p| {
                pack_external(st, datarep, inbuf, n, datatype, outbuf, size, p)
            })
        }
    })
}

/// `MPI_Pack_external_c`.
///
/// # Safety
/// As `MPI_Pack_external`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Pack_external_c(
    datarep: *const c_char,
    inbuf: *const c_void,
    incount: i64,
    datatype: Handle,
    outbuf: *mut c_void,
    outsize: i64,
    position: *mut i64,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Pack_external_c", |st| {
        let (n, size) = (count(incount, "incount")?, count(outsize, "outsize")?);
        // SAFETY: the caller's contract.
        unsafe {
            moving(position, |p| {
                pack_external(st, datarep, inbuf, n, datatype, outbuf, size, p)
            })
        }
    })
}

/// `MPI_Unpack_external`.
///
/// # Safety
/// As `MPI_Unpack`; `datarep` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn MPI_Unpack_external(
    datarep: *const c_char,
    inbuf: *const c_void,
    insize: isize,
    position: *mut isize,
    outbuf: *mut c_void,
    outcount: c_int,
    datatype: Handle,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Unpack_external", |st| {
        let (size, n) = (
            count(insize as i64, "insize")?,
            count(outcount.into(), "outcount")?,
        );
        // SAFETY: the caller's contract.
        unsafe {
            moving(position, |p| {
                unpack_external(st, datarep, inbuf, size, p, outbuf, n, datatype)
            })
        }
    })
}

/// `MPI_Unpack_external_c`.
///
/// # Safety
/// As `MPI_Unpack_external`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Unpack_external_c(
    datarep: *const c_char,
    inbuf: *const c_void,
    insize: i64,
    position: *mut i64,
    outbuf: *mut c_void,
    outcount: i64,
    datatype: Handle,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Unpack_external_c", |st| {
        let (size, n) = (count(insize, "insize")?, count(outcount, "outcount")?);
        // SAFETY: the caller's contract.
        unsafe {
            moving(position, |p| {
                unpack_external(st, datarep, inbuf, size, p, outbuf, n, datatype)
            })
        }
    })
}

/// The external32 bytes of `n` elements of `dt`.
///
/// # Safety
/// `datarep` is a NUL-terminated string.
unsafe fn external_size(
    st: &State,
    datarep: *const c_char,
    n: usize,
    dt: Handle,
) -> ch4::Result<usize> {
    // SAFETY: the caller's contract.
    unsafe { check_datarep(datarep) }?;
    let d = desc(st, dt)?;
    n.checked_mul(external_size_of(&d)?).ok_or_else(too_big)
}

/// `MPI_Pack_external_size`.
///
/// # Safety
/// `datarep` is a NUL-terminated string; `size` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Pack_external_size(
    datarep: *const c_char,
    incount: c_int,
    datatype: Handle,
    size: *mut isize,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Pack_external_size", |st| {
        // SAFETY: the caller's contract.
        let s = unsafe { external_size(st, datarep, count(incount.into(), "incount")?, datatype) }?;
        let s = isize::try_from(s).map_err(|_| too_big())?;
        // SAFETY: the caller's contract.
        unsafe { crate::call::put(size, s) };
        Ok(())
    })
}

/// `MPI_Pack_external_size_c`.
///
/// # Safety
/// `datarep` is a NUL-terminated string; `size` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Pack_external_size_c(
    datarep: *const c_char,
    incount: i64,
    datatype: Handle,
    size: *mut i64,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Pack_external_size_c", |st| {
        // SAFETY: the caller's contract.
        let s = unsafe { external_size(st, datarep, count(incount, "incount")?, datatype) }?;
        let s = i64::try_from(s).map_err(|_| too_big())?;
        // SAFETY: the caller's contract.
        unsafe { crate::call::put(size, s) };
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(h: Handle, native: &[u8]) -> Vec<u8> {
        let e = external(h).unwrap();
        let mut out = vec![0u8; e.external];
        to_external(e, native, &mut out);
        let mut back = vec![0u8; e.native];
        from_external(e, &out, &mut back);
        assert_eq!(back, native, "{h:#x}");
        out
    }

    #[test]
    fn external32_is_big_endian_at_the_standards_sizes() {
        assert_eq!(
            round_trip(0x209, &(-2i32).to_le_bytes()),
            [0xff, 0xff, 0xff, 0xfe]
        );
        assert_eq!(
            round_trip(0x20a, &(-2i64).to_le_bytes()),
            [0xff, 0xff, 0xff, 0xfe]
        );
        assert_eq!(round_trip(0x20e, &7u64.to_le_bytes()), [0, 0, 0, 7]);
        assert_eq!(round_trip(0x210, &1.0f32.to_le_bytes()), [0x3f, 0x80, 0, 0]);
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn an_x87_long_double_is_written_as_binary128() {
        // 1.0: significand 0x8000_0000_0000_0000, exponent 0x3fff.
        let mut one = [0u8; 16];
        one[7] = 0x80;
        one[8] = 0xff;
        one[9] = 0x3f;
        let out = round_trip(0x220, &one);
        assert_eq!(&out[..2], &[0x3f, 0xff]);
        assert!(out[2..].iter().all(|&b| b == 0));
    }
}

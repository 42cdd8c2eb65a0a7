//! What a program may ask of any datatype, predefined or derived, from the standard's chapter
//! "Datatypes": `MPI_Type_size` (and `_c`, `_x`), `MPI_Type_get_extent` and
//! `MPI_Type_get_true_extent` (and `_c`, `_x`), `MPI_Type_get_name`, `MPI_Type_set_name`,
//! `MPI_Type_match_size`, `MPI_Type_get_value_index`, `MPI_Get_address`, `MPI_Aint_add`,
//! `MPI_Aint_diff`, `MPI_Pack_size` (and `_c`), and `MPI_Status_set_elements` (and `_c`),
//! which says how many predefined elements of a type a status holds.
//!
//! They read a type's [`Desc`](super::Desc), which a predefined type also has, so one answer
//! serves both kinds; the hot path never comes here (a predefined type's size for a send is
//! `datatype::size_of`, a table lookup).

use std::ffi::{c_char, c_int, c_void};

use ch4_core::ErrorKind;

use super::{desc, type_in};
use crate::abi::{self, class, Handle};
use crate::call::{call, null_arg, put, put_string};
use crate::datatype;

/// `MPI_Type_size`.
///
/// # Safety
/// `size` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_size(datatype: Handle, size: *mut c_int) -> c_int {
    call(abi::COMM_WORLD, "MPI_Type_size", |st| {
        let d = desc(st, datatype)?;
        // SAFETY: the caller's contract.
        unsafe { put(size, c_int::try_from(d.size).unwrap_or(abi::UNDEFINED)) };
        Ok(())
    })
}

/// `MPI_Type_size_c` / `MPI_Type_size_x`: the size as an `MPI_Count`.
///
/// # Safety
/// `size` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_size_c(datatype: Handle, size: *mut i64) -> c_int {
    call(abi::COMM_WORLD, "MPI_Type_size_c", |st| {
        let d = desc(st, datatype)?;
        // SAFETY: the caller's contract.
        unsafe { put(size, d.size as i64) };
        Ok(())
    })
}

/// `MPI_Type_size_x`.
///
/// # Safety
/// `size` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_size_x(datatype: Handle, size: *mut i64) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { MPI_Type_size_c(datatype, size) }
}

/// `MPI_Type_get_extent`.
///
/// # Safety
/// `lb` and `extent` are writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_get_extent(
    datatype: Handle,
    lb: *mut isize,
    extent: *mut isize,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Type_get_extent", |st| {
        let d = desc(st, datatype)?;
        // SAFETY: the caller's contract.
        unsafe {
            put(lb, d.lb);
            put(extent, d.extent);
        }
        Ok(())
    })
}

/// `MPI_Type_get_true_extent`: the span of the data itself.
///
/// # Safety
/// `true_lb` and `true_extent` are writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_get_true_extent(
    datatype: Handle,
    true_lb: *mut isize,
    true_extent: *mut isize,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Type_get_true_extent", |st| {
        let d = desc(st, datatype)?;
        // SAFETY: the caller's contract.
        unsafe {
            put(true_lb, d.true_lb);
            put(true_extent, d.true_ub - d.true_lb);
        }
        Ok(())
    })
}

/// `MPI_Type_get_true_extent_c` (and `_x`): as `MPI_Count`s.
///
/// # Safety
/// `true_lb` and `true_extent` are writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_get_true_extent_c(
    datatype: Handle,
    true_lb: *mut i64,
    true_extent: *mut i64,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Type_get_true_extent_c", |st| {
        let d = desc(st, datatype)?;
        // SAFETY: the caller's contract.
        unsafe {
            put(true_lb, d.true_lb as i64);
            put(true_extent, (d.true_ub - d.true_lb) as i64);
        }
        Ok(())
    })
}

/// `MPI_Type_get_true_extent_x`.
///
/// # Safety
/// `true_lb` and `true_extent` are writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_get_true_extent_x(
    datatype: Handle,
    true_lb: *mut i64,
    true_extent: *mut i64,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { MPI_Type_get_true_extent_c(datatype, true_lb, true_extent) }
}

/// `MPI_Type_get_extent_c` (and `_x`): as `MPI_Count`s.
///
/// # Safety
/// `lb` and `extent` are writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_get_extent_c(
    datatype: Handle,
    lb: *mut i64,
    extent: *mut i64,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Type_get_extent_c", |st| {
        let d = desc(st, datatype)?;
        // SAFETY: the caller's contract.
        unsafe {
            put(lb, d.lb as i64);
            put(extent, d.extent as i64);
        }
        Ok(())
    })
}

/// `MPI_Type_get_extent_x`.
///
/// # Safety
/// `lb` and `extent` are writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_get_extent_x(
    datatype: Handle,
    lb: *mut i64,
    extent: *mut i64,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { MPI_Type_get_extent_c(datatype, lb, extent) }
}

/// `MPI_Type_get_name`: a predefined type's MPI name, a derived type's given name (or none).
///
/// # Safety
/// `type_name` has `MPI_MAX_OBJECT_NAME` bytes; `resultlen` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_get_name(
    datatype: Handle,
    type_name: *mut c_char,
    resultlen: *mut c_int,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Type_get_name", |st| {
        let name = match datatype::name_of(datatype) {
            Some(n) => n.to_string(),
            None => desc(st, datatype)?.name.unwrap_or_default(),
        };
        // SAFETY: the caller's contract.
        unsafe { put_string(&name, type_name, abi::MAX_OBJECT_NAME, resultlen) };
        Ok(())
    })
}

/// `MPI_Type_set_name` (derived types).
///
/// # Safety
/// `type_name` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_set_name(datatype: Handle, type_name: *const c_char) -> c_int {
    call(abi::COMM_WORLD, "MPI_Type_set_name", |st| {
        if type_name.is_null() {
            return Err(null_arg("the name"));
        }
        // SAFETY: the caller's contract.
        let name = unsafe { std::ffi::CStr::from_ptr(type_name) }
            .to_string_lossy()
            .into_owned();
        match type_in(datatype).and_then(|i| st.types.with(i, |d| d.name = Some(name))) {
            Some(()) => Ok(()),
            None => Err(ch4::Error::new(
                ErrorKind::Arg,
                "a predefined datatype's name cannot be changed",
            )),
        }
    })
}

/// `MPI_Get_address`.
///
/// # Safety
/// `address` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Get_address(location: *const c_void, address: *mut isize) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { put(address, location as isize) };
    class::SUCCESS
}

/// `MPI_Pack_size`: the bytes `MPI_Pack` writes for `incount` elements (`MPI_UNDEFINED`
/// when that does not fit an int).
///
/// # Safety
/// `size` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Pack_size(
    incount: c_int,
    datatype: Handle,
    comm: Handle,
    size: *mut c_int,
) -> c_int {
    call(comm, "MPI_Pack_size", |st| {
        let n = packed_bytes(st, incount.into(), datatype)?;
        // SAFETY: the caller's contract.
        unsafe { put(size, c_int::try_from(n).unwrap_or(abi::UNDEFINED)) };
        Ok(())
    })
}

/// `MPI_Pack_size_c`.
///
/// # Safety
/// `size` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Pack_size_c(
    incount: i64,
    datatype: Handle,
    comm: Handle,
    size: *mut i64,
) -> c_int {
    call(comm, "MPI_Pack_size_c", |st| {
        let n = packed_bytes(st, incount, datatype)?;
        // SAFETY: the caller's contract.
        unsafe { put(size, i64::try_from(n).map_err(|_| super::too_big())?) };
        Ok(())
    })
}

/// The packed bytes of `count` elements of `dt` (its data, with no header).
fn packed_bytes(st: &crate::state::State, count: i64, dt: Handle) -> ch4::Result<usize> {
    let d = desc(st, dt)?;
    super::big_count_of(count, "incount")?
        .checked_mul(d.size)
        .ok_or_else(super::too_big)
}

/// `MPI_Aint_add` (MPI 4.1 section 5.1.5): address arithmetic as the platform does it.
#[no_mangle]
pub extern "C" fn MPI_Aint_add(base: isize, disp: isize) -> isize {
    base.wrapping_add(disp)
}

/// `MPI_Aint_diff`.
#[no_mangle]
pub extern "C" fn MPI_Aint_diff(addr1: isize, addr2: isize) -> isize {
    addr1.wrapping_sub(addr2)
}

/// `MPI_TYPECLASS_INTEGER`, `_REAL`, `_COMPLEX`.
const TYPECLASS_INTEGER: c_int = 192;
const TYPECLASS_REAL: c_int = 193;
const TYPECLASS_COMPLEX: c_int = 194;

/// `MPI_Type_match_size` (MPI 4.1 section 19.1.9): the predefined `MPI_INTEGERn`,
/// `MPI_REALn` or `MPI_COMPLEXn` of `size` bytes; an error for a size the class does not
/// have.
///
/// # Safety
/// `datatype` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_match_size(
    typeclass: c_int,
    size: c_int,
    datatype: *mut Handle,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Type_match_size", |_| {
        let h = match (typeclass, size) {
            (TYPECLASS_INTEGER, 1) => 0x2c1,
            (TYPECLASS_INTEGER, 2) => 0x2c9,
            (TYPECLASS_INTEGER, 4) => 0x2d1,
            (TYPECLASS_INTEGER, 8) => 0x2d9,
            (TYPECLASS_INTEGER, 16) => 0x2e1,
            (TYPECLASS_REAL, 2) => 0x2ca,
            (TYPECLASS_REAL, 4) => 0x2d2,
            (TYPECLASS_REAL, 8) => 0x2da,
            (TYPECLASS_REAL, 16) => 0x2e2,
            (TYPECLASS_COMPLEX, 4) => 0x2d3,
            (TYPECLASS_COMPLEX, 8) => 0x2db,
            (TYPECLASS_COMPLEX, 16) => 0x2e3,
            (TYPECLASS_COMPLEX, 32) => 0x2eb,
            _ => {
                return Err(ch4::Error::new(
                    ErrorKind::Arg,
                    format!("no predefined type of class {typeclass} has {size} bytes"),
                ))
            }
        };
        if datatype.is_null() {
            return Err(null_arg("the datatype"));
        }
        // SAFETY: checked non-null; the caller's contract.
        unsafe { datatype.write(h) };
        Ok(())
    })
}

/// `MPI_Type_get_value_index` (MPI 4.1 section 6.9.4): the predefined value-and-index pair
/// type of `value_type` and `index_type` (`MPI_FLOAT` and `MPI_INT`: `MPI_FLOAT_INT`), or
/// `MPI_DATATYPE_NULL` when there is none.
///
/// # Safety
/// `pair_type` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_get_value_index(
    value_type: Handle,
    index_type: Handle,
    pair_type: *mut Handle,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Type_get_value_index", |st| {
        desc(st, value_type)?;
        desc(st, index_type)?;
        let h = match (value_type, index_type) {
            (0x210, 0x209) => 0x228, // MPI_FLOAT, MPI_INT: MPI_FLOAT_INT
            (0x214, 0x209) => 0x229, // MPI_DOUBLE_INT
            (0x20a, 0x209) => 0x22a, // MPI_LONG_INT
            (0x209, 0x209) => 0x22b, // MPI_2INT
            (0x208, 0x209) => 0x22c, // MPI_SHORT_INT
            (0x220, 0x209) => 0x22d, // MPI_LONG_DOUBLE_INT
            (0x21a, 0x21a) => 0x230, // MPI_2REAL
            (0x21c, 0x21c) => 0x231, // MPI_2DOUBLE_PRECISION
            (0x219, 0x219) => 0x232, // MPI_2INTEGER
            _ => abi::DATATYPE_NULL,
        };
        if pair_type.is_null() {
            return Err(null_arg("the pair type"));
        }
        // SAFETY: checked non-null; the caller's contract.
        unsafe { pair_type.write(h) };
        Ok(())
    })
}

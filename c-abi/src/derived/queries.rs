//! What a program may ask of any datatype, predefined or derived, from the standard's chapter
//! "Datatypes": `MPI_Type_size` (and `_c`, `_x`), `MPI_Type_get_extent`,
//! `MPI_Type_get_true_extent`, `MPI_Type_get_name`, `MPI_Type_set_name`, `MPI_Get_address`
//! and `MPI_Pack_size`.
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
        let lo = d.blocks.iter().map(|b| b.0).min().unwrap_or(0);
        let hi = d
            .blocks
            .iter()
            .map(|b| b.0 + b.1 as isize)
            .max()
            .unwrap_or(0);
        // SAFETY: the caller's contract.
        unsafe {
            put(true_lb, lo);
            put(true_extent, hi - lo);
        }
        Ok(())
    })
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

/// `MPI_Pack_size` (predefined datatypes: their packed size is their size).
///
/// # Safety
/// `size` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Pack_size(
    incount: c_int,
    datatype: Handle,
    _comm: Handle,
    size: *mut c_int,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Pack_size", |st| {
        let d = crate::derived::desc(st, datatype)?;
        let n = usize::try_from(incount)
            .map_err(|_| ch4::Error::new(ErrorKind::Count, "a negative count"))?
            * d.size;
        // SAFETY: the caller's contract.
        unsafe { put(size, c_int::try_from(n).unwrap_or(c_int::MAX)) };
        Ok(())
    })
}

//! What a status says, from the standard's chapters "Point-to-Point Communication"
//! (`MPI_Get_count`), "Datatypes" (`MPI_Get_elements`, `MPI_Get_elements_x`,
//! `MPI_Get_elements_c`, `MPI_Get_count_c`) and "External Interfaces"
//! (`MPI_Status_set_elements_x`, `MPI_Status_set_cancelled`).
//!
//! A status is the ABI's `MPI_Status` (`abi::MpiStatus`): the byte count and the cancelled
//! flag sit in its private ints, which a program cannot read itself; these functions (and
//! `MPI_Test_cancelled`, with cancel in `probe`) are how it reads or sets them. A count in
//! elements depends on the datatype: a predefined one is a division, a derived one is asked of
//! its description (`derived`).

use std::ffi::c_int;

use crate::abi::{self, class, Handle, MpiStatus};
use crate::call::{call, null_arg, put};
use crate::datatype;
use crate::derived;
use crate::errors;
use crate::state::State;

/// `MPI_Get_count`: `MPI_UNDEFINED` when the bytes are not a whole number of elements (or
/// their number does not fit an int).
///
/// # Safety
/// `status` is readable, `count` writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Get_count(
    status: *const MpiStatus,
    datatype: Handle,
    count: *mut c_int,
) -> c_int {
    if status.is_null() {
        return errors::refuse("MPI_Get_count", "the status is a null pointer");
    }
    // SAFETY: the caller's contract.
    let bytes = unsafe { (*status).bytes() };
    let n = match datatype::size_of(datatype) {
        Some(size) if size > 0 && bytes % size as u64 == 0 => {
            c_int::try_from(bytes / size as u64).unwrap_or(abi::UNDEFINED)
        }
        Some(_) => abi::UNDEFINED,
        None => {
            let mut n = abi::UNDEFINED;
            let code = call(abi::COMM_WORLD, "MPI_Get_count", |st| {
                if let Some(c) = derived::count_in(st, bytes, datatype)? {
                    n = c_int::try_from(c).unwrap_or(abi::UNDEFINED);
                }
                Ok(())
            });
            if code != class::SUCCESS {
                return code;
            }
            n
        }
    };
    // SAFETY: the caller's contract.
    unsafe { put(count, n) };
    class::SUCCESS
}

/// `MPI_Get_elements`: the predefined elements received (for a derived datatype, those of
/// whole elements plus those of a partial one).
///
/// # Safety
/// As `MPI_Get_count`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Get_elements(
    status: *const MpiStatus,
    datatype: Handle,
    count: *mut c_int,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Get_elements", |st| {
        if status.is_null() {
            return Err(null_arg("the status"));
        }
        // SAFETY: the caller's contract.
        let bytes = unsafe { (*status).bytes() };
        let n = derived::elements_in(st, bytes, datatype)?
            .and_then(|n| c_int::try_from(n).ok())
            .unwrap_or(abi::UNDEFINED);
        // SAFETY: the caller's contract.
        unsafe { put(count, n) };
        Ok(())
    })
}

/// `MPI_Get_elements_x`.
///
/// # Safety
/// `status` readable, `count` writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Get_elements_x(
    status: *const MpiStatus,
    datatype: Handle,
    count: *mut i64,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Get_elements_x", |st| {
        // SAFETY: the caller's contract.
        unsafe { put_count_x(st, status, datatype, count, crate::derived::elements_in) }
    })
}

/// Writes what `of` makes of `status`'s bytes in `datatype` as an `MPI_Count`
/// (`MPI_UNDEFINED` when not whole).
///
/// # Safety
/// `status` readable, `count` writable.
unsafe fn put_count_x(
    st: &State,
    status: *const MpiStatus,
    datatype: Handle,
    count: *mut i64,
    of: fn(&State, u64, Handle) -> ch4::Result<Option<u64>>,
) -> ch4::Result<()> {
    if status.is_null() {
        return Err(null_arg("the status"));
    }
    // SAFETY: the caller's contract.
    let bytes = unsafe { (*status).bytes() };
    let n = of(st, bytes, datatype)?.map_or(i64::from(abi::UNDEFINED), |n| n as i64);
    // SAFETY: the caller's contract.
    unsafe { put(count, n) };
    Ok(())
}

/// `MPI_Get_count_c`: the count as an `MPI_Count` (`MPI_UNDEFINED` when not whole).
///
/// # Safety
/// `status` readable, `count` writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Get_count_c(
    status: *const MpiStatus,
    datatype: Handle,
    count: *mut i64,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Get_count_c", |st| {
        // SAFETY: the caller's contract.
        unsafe { put_count_x(st, status, datatype, count, crate::derived::count_in) }
    })
}

/// `MPI_Get_elements_c`: as `MPI_Get_elements_x`.
///
/// # Safety
/// `status` readable, `count` writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Get_elements_c(
    status: *const MpiStatus,
    datatype: Handle,
    count: *mut i64,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { MPI_Get_elements_x(status, datatype, count) }
}

/// `MPI_Status_set_elements_x`.
///
/// # Safety
/// `status` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Status_set_elements_x(
    status: *mut MpiStatus,
    datatype: Handle,
    count: i64,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Status_set_elements_x", |st| {
        if status.is_null() {
            return Err(null_arg("the status"));
        }
        let bytes = crate::derived::bytes_of_elements(st, datatype, count)?;
        // SAFETY: the caller's contract.
        let s = unsafe { &mut *status };
        s.internal[0] = bytes as c_int;
        s.internal[1] = (bytes >> 32) as c_int;
        Ok(())
    })
}

/// `MPI_Status_set_cancelled`.
///
/// # Safety
/// `status` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Status_set_cancelled(status: *mut MpiStatus, flag: c_int) -> c_int {
    if status.is_null() {
        return crate::errors::refuse("MPI_Status_set_cancelled", "the status is a null pointer");
    }
    // SAFETY: the caller's contract.
    unsafe { (*status).internal[2] = c_int::from(flag != 0) };
    class::SUCCESS
}

//! What a status says, from the standard's chapters "Point-to-Point Communication"
//! (`MPI_Get_count`; MPI 5.0's `MPI_Status_get_source`, `_get_tag`, `_get_error` and their
//! setters), "Datatypes" (`MPI_Get_elements`, `MPI_Get_elements_x`, `MPI_Get_elements_c`,
//! `MPI_Get_count_c`, and the address arithmetic `MPI_Aint_add`, `MPI_Aint_diff`) and
//! "External Interfaces" (`MPI_Status_set_elements` with its `_x` and `_c` forms,
//! `MPI_Status_set_cancelled`).
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

/// `MPI_Status_set_elements`: as `MPI_Status_set_elements_x`, with an int count.
///
/// # Safety
/// `status` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Status_set_elements(
    status: *mut MpiStatus,
    datatype: Handle,
    count: c_int,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { MPI_Status_set_elements_x(status, datatype, i64::from(count)) }
}

/// `MPI_Status_set_elements_c`: `MPI_Status_set_elements_x` under its MPI 4.0 name.
///
/// # Safety
/// `status` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Status_set_elements_c(
    status: *mut MpiStatus,
    datatype: Handle,
    count: i64,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { MPI_Status_set_elements_x(status, datatype, count) }
}

/// Reads field `field` of a status for `func` (MPI 5.0's accessors, which a program of the
/// ABI uses where it cannot name the fields: another language's binding, a tool). They need
/// no running MPI.
///
/// # Safety
/// `status` is null or readable, `out` null or writable.
unsafe fn get_field(
    func: &str,
    status: *const MpiStatus,
    out: *mut c_int,
    field: fn(&MpiStatus) -> c_int,
) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { status.as_ref() } {
        Some(s) if !out.is_null() => {
            // SAFETY: the caller's contract; checked non-null.
            unsafe { out.write(field(s)) };
            class::SUCCESS
        }
        _ => errors::refuse(func, "the status or the result is a null pointer"),
    }
}

/// Sets field `field` of a status for `func`.
///
/// # Safety
/// `status` is null or writable.
unsafe fn set_field(func: &str, status: *mut MpiStatus, set: impl FnOnce(&mut MpiStatus)) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { status.as_mut() } {
        Some(s) => {
            set(s);
            class::SUCCESS
        }
        None => errors::refuse(func, "the status is a null pointer"),
    }
}

/// `MPI_Status_get_source`.
///
/// # Safety
/// `status` is readable, `source` writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Status_get_source(
    status: *const MpiStatus,
    source: *mut c_int,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { get_field("MPI_Status_get_source", status, source, |s| s.source) }
}

/// `MPI_Status_get_tag`.
///
/// # Safety
/// `status` is readable, `tag` writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Status_get_tag(status: *const MpiStatus, tag: *mut c_int) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { get_field("MPI_Status_get_tag", status, tag, |s| s.tag) }
}

/// `MPI_Status_get_error`.
///
/// # Safety
/// `status` is readable, `error` writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Status_get_error(
    status: *const MpiStatus,
    error: *mut c_int,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { get_field("MPI_Status_get_error", status, error, |s| s.error) }
}

/// `MPI_Status_set_source`.
///
/// # Safety
/// `status` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Status_set_source(status: *mut MpiStatus, source: c_int) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { set_field("MPI_Status_set_source", status, |s| s.source = source) }
}

/// `MPI_Status_set_tag`.
///
/// # Safety
/// `status` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Status_set_tag(status: *mut MpiStatus, tag: c_int) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { set_field("MPI_Status_set_tag", status, |s| s.tag = tag) }
}

/// `MPI_Status_set_error`.
///
/// # Safety
/// `status` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Status_set_error(status: *mut MpiStatus, error: c_int) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { set_field("MPI_Status_set_error", status, |s| s.error = error) }
}

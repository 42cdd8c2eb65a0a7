//! The datatype constructors, the standard's "Derived Datatypes" (chapter "Datatypes"):
//! `MPI_Type_contiguous`, `MPI_Type_vector`, `MPI_Type_create_hvector`, `MPI_Type_indexed`,
//! `MPI_Type_create_indexed_block`, `MPI_Type_create_hindexed`, `MPI_Type_create_struct`,
//! `MPI_Type_create_resized` and `MPI_Type_dup`, and a type's commit and free
//! (`MPI_Type_commit`, `MPI_Type_free`).
//!
//! Each one is a recipe over its old type's [`Desc`]: copies of it at some
//! displacements (`Desc::of_copies`), or parts one after another (`Desc::concat`). The recipes
//! differ only in how they read their arguments, so the flattening itself stays in the parent
//! module, once.

use std::ffi::c_int;

use ch4_core::ErrorKind;

use super::{add_type, count_of, desc, ints, type_in, Desc};
use crate::abi::{self, Handle};
use crate::call::{call, null_arg};
use crate::datatype;

/// Makes a new type with `make` from `oldtype`'s description, writing its handle.
///
/// # Safety
/// `newtype` is writable.
unsafe fn construct(
    func: &'static str,
    oldtype: Handle,
    newtype: *mut Handle,
    make: impl FnOnce(&Desc) -> ch4::Result<Desc>,
) -> c_int {
    call(abi::COMM_WORLD, func, |st| {
        if newtype.is_null() {
            return Err(null_arg("the new datatype"));
        }
        let old = desc(st, oldtype)?;
        let new = make(&old)?;
        let h = add_type(st, new);
        // SAFETY: checked non-null; the caller's contract.
        unsafe { newtype.write(h) };
        Ok(())
    })
}

/// `MPI_Type_contiguous`.
///
/// # Safety
/// `newtype` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_contiguous(
    count: c_int,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        construct("MPI_Type_contiguous", oldtype, newtype, |old| {
            let n = count_of(count, "count")?;
            Desc::of_copies(old, std::iter::once((0, n)))
        })
    }
}

/// `MPI_Type_vector`.
///
/// # Safety
/// `newtype` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_vector(
    count: c_int,
    blocklength: c_int,
    stride: c_int,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        construct("MPI_Type_vector", oldtype, newtype, |old| {
            let (n, b) = (
                count_of(count, "count")?,
                count_of(blocklength, "blocklength")?,
            );
            let s = stride as i128 * old.extent as i128;
            Desc::of_copies(old, (0..n as i128).map(|i| (i * s, b)))
        })
    }
}

/// `MPI_Type_create_hvector` (stride in bytes).
///
/// # Safety
/// `newtype` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_create_hvector(
    count: c_int,
    blocklength: c_int,
    stride: isize,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        construct("MPI_Type_create_hvector", oldtype, newtype, |old| {
            let (n, b) = (
                count_of(count, "count")?,
                count_of(blocklength, "blocklength")?,
            );
            Desc::of_copies(old, (0..n as i128).map(|i| (i * stride as i128, b)))
        })
    }
}

/// Blocks of copies: `lens[i]` copies of `old` from byte displacement `disps[i]`.
fn blocks_of(old: &Desc, lens: &[usize], disps: &[i128]) -> ch4::Result<Desc> {
    Desc::of_copies(old, disps.iter().zip(lens).map(|(&d, &l)| (d, l)))
}

/// `MPI_Type_indexed` (displacements in extents of `oldtype`).
///
/// # Safety
/// The arrays have `count` entries; `newtype` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_indexed(
    count: c_int,
    array_of_blocklengths: *const c_int,
    array_of_displacements: *const c_int,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        construct("MPI_Type_indexed", oldtype, newtype, |old| {
            let n = count_of(count, "count")?;
            let lens = ints(array_of_blocklengths, n)?
                .iter()
                .map(|&l| count_of(l, "block length"))
                .collect::<ch4::Result<Vec<_>>>()?;
            let disps: Vec<i128> = ints(array_of_displacements, n)?
                .iter()
                .map(|&d| d as i128 * old.extent as i128)
                .collect();
            blocks_of(old, &lens, &disps)
        })
    }
}

/// `MPI_Type_create_indexed_block`.
///
/// # Safety
/// `array_of_displacements` has `count` entries; `newtype` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_create_indexed_block(
    count: c_int,
    blocklength: c_int,
    array_of_displacements: *const c_int,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        construct("MPI_Type_create_indexed_block", oldtype, newtype, |old| {
            let n = count_of(count, "count")?;
            let lens = vec![count_of(blocklength, "blocklength")?; n];
            let disps: Vec<i128> = ints(array_of_displacements, n)?
                .iter()
                .map(|&d| d as i128 * old.extent as i128)
                .collect();
            blocks_of(old, &lens, &disps)
        })
    }
}

/// `MPI_Type_create_hindexed` (displacements in bytes).
///
/// # Safety
/// The arrays have `count` entries; `newtype` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_create_hindexed(
    count: c_int,
    array_of_blocklengths: *const c_int,
    array_of_displacements: *const isize,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        construct("MPI_Type_create_hindexed", oldtype, newtype, |old| {
            let n = count_of(count, "count")?;
            let lens = ints(array_of_blocklengths, n)?
                .iter()
                .map(|&l| count_of(l, "block length"))
                .collect::<ch4::Result<Vec<_>>>()?;
            if n > 0 && array_of_displacements.is_null() {
                return Err(null_arg("the displacements"));
            }
            let disps: Vec<i128> = if n == 0 {
                Vec::new()
            } else {
                std::slice::from_raw_parts(array_of_displacements, n)
                    .iter()
                    .map(|&d| d as i128)
                    .collect()
            };
            blocks_of(old, &lens, &disps)
        })
    }
}

/// `MPI_Type_create_struct`.
///
/// # Safety
/// The arrays have `count` entries; `newtype` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_create_struct(
    count: c_int,
    array_of_blocklengths: *const c_int,
    array_of_displacements: *const isize,
    array_of_types: *const Handle,
    newtype: *mut Handle,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Type_create_struct", |st| {
        if newtype.is_null() {
            return Err(null_arg("the new datatype"));
        }
        let n = count_of(count, "count")?;
        // SAFETY: the caller's contract: `n` entries each.
        let lens = unsafe { ints(array_of_blocklengths, n) }?;
        if n > 0 && (array_of_displacements.is_null() || array_of_types.is_null()) {
            return Err(null_arg("the displacements or the types"));
        }
        let (disps, types) = if n == 0 {
            (&[][..], &[][..])
        } else {
            // SAFETY: the caller's contract.
            unsafe {
                (
                    std::slice::from_raw_parts(array_of_displacements, n),
                    std::slice::from_raw_parts(array_of_types, n),
                )
            }
        };
        let mut parts = Vec::with_capacity(n);
        for i in 0..n {
            let old = desc(st, types[i])?;
            let len = count_of(lens[i], "block length")?;
            parts.push(Desc::of_copies(
                &old,
                std::iter::once((disps[i] as i128, len)),
            )?);
        }
        let h = add_type(st, Desc::concat(&parts)?);
        // SAFETY: checked non-null.
        unsafe { newtype.write(h) };
        Ok(())
    })
}

/// `MPI_Type_create_resized`.
///
/// # Safety
/// `newtype` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_create_resized(
    oldtype: Handle,
    lb: isize,
    extent: isize,
    newtype: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        construct("MPI_Type_create_resized", oldtype, newtype, |old| {
            Ok(Desc {
                lb,
                extent,
                committed: false,
                name: None,
                ..old.clone()
            })
        })
    }
}

/// `MPI_Type_dup`.
///
/// # Safety
/// `newtype` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_dup(oldtype: Handle, newtype: *mut Handle) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        let code = construct("MPI_Type_dup", oldtype, newtype, |old| {
            Ok(Desc {
                committed: true,
                ..old.clone()
            })
        });
        crate::attributes::after_type_dup(code, oldtype, newtype)
    }
}

/// `MPI_Type_commit`.
///
/// # Safety
/// `datatype` is readable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_commit(datatype: *mut Handle) -> c_int {
    call(abi::COMM_WORLD, "MPI_Type_commit", |st| {
        if datatype.is_null() {
            return Err(null_arg("the datatype"));
        }
        // SAFETY: the caller's contract.
        let h = unsafe { datatype.read() };
        if Desc::predefined(h).is_some() {
            return Ok(());
        }
        match type_in(h).and_then(|i| st.types.with(i, |d| d.committed = true)) {
            Some(()) => Ok(()),
            None => Err(datatype::bad_type(h)),
        }
    })
}

/// `MPI_Type_free`: the handle becomes `MPI_DATATYPE_NULL`; predefined types cannot be freed.
///
/// # Safety
/// `datatype` is readable and writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_free(datatype: *mut Handle) -> c_int {
    // SAFETY: the caller's contract.
    let deleted = unsafe { crate::attributes::before_type_free(datatype) };
    if deleted != crate::abi::class::SUCCESS {
        return deleted;
    }
    call(abi::COMM_WORLD, "MPI_Type_free", |st| {
        if datatype.is_null() {
            return Err(null_arg("the datatype"));
        }
        // SAFETY: the caller's contract.
        let h = unsafe { datatype.read() };
        match type_in(h).and_then(|i| st.types.remove(i)) {
            Some(_) => {
                // SAFETY: the caller's contract.
                unsafe { datatype.write(0x200) };
                Ok(())
            }
            None => Err(ch4::Error::new(
                ErrorKind::Arg,
                "only a derived datatype can be freed",
            )),
        }
    })
}

//! How a datatype was made (MPI 4.1 section 5.1.13, "Decoding a Datatype"):
//! `MPI_Type_get_envelope` says which constructor and how many arguments of each kind,
//! `MPI_Type_get_contents` returns the arguments, with their `_c` forms, which also report the
//! large counts of the `_c` constructors. Libraries that serialize or copy datatypes (MPI-IO
//! layers, tools) walk a type with them down to its predefined types (`MPI_COMBINER_NAMED`).
//!
//! The old types come back as handles: a predefined one as itself, a derived one as a new
//! handle to the same type, which the caller frees (the standard lets an implementation
//! return new handles; each call here makes them).

use std::ffi::c_int;

use ch4_core::ErrorKind;

use super::{add_type, combiner, desc, Contents};
use crate::abi::{self, Handle};
use crate::call::{call, put};

/// The contents of `dt`, refused for a predefined type (MPI 4.1: erroneous).
fn contents_of(st: &crate::state::State, dt: Handle) -> ch4::Result<Contents> {
    let d = desc(st, dt)?;
    if d.contents.combiner == combiner::NAMED {
        return Err(ch4::Error::new(
            ErrorKind::Arg,
            "a predefined datatype has no contents (its combiner is MPI_COMBINER_NAMED)",
        ));
    }
    Ok(d.contents.clone())
}

/// `MPI_Type_get_envelope`. A type made by a `_c` constructor has large counts, which this
/// form cannot report: an error, as MPI 4.1 section 5.1.13 requires.
///
/// # Safety
/// The outputs are writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_get_envelope(
    datatype: Handle,
    num_integers: *mut c_int,
    num_addresses: *mut c_int,
    num_datatypes: *mut c_int,
    combiner: *mut c_int,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Type_get_envelope", |st| {
        let d = desc(st, datatype)?;
        let c = &d.contents;
        if !c.counts.is_empty() {
            return Err(ch4::Error::new(
                ErrorKind::Arg,
                "the datatype was made with large counts: use MPI_Type_get_envelope_c",
            ));
        }
        // SAFETY: the caller's contract.
        unsafe {
            put(num_integers, c.ints.len() as c_int);
            put(num_addresses, c.aints.len() as c_int);
            put(num_datatypes, c.types.len() as c_int);
            put(combiner, c.combiner);
        }
        Ok(())
    })
}

/// `MPI_Type_get_envelope_c`.
///
/// # Safety
/// The outputs are writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_get_envelope_c(
    datatype: Handle,
    num_integers: *mut i64,
    num_addresses: *mut i64,
    num_large_counts: *mut i64,
    num_datatypes: *mut i64,
    combiner: *mut c_int,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Type_get_envelope_c", |st| {
        let d = desc(st, datatype)?;
        let c = &d.contents;
        // SAFETY: the caller's contract.
        unsafe {
            put(num_integers, c.ints.len() as i64);
            put(num_addresses, c.aints.len() as i64);
            put(num_large_counts, c.counts.len() as i64);
            put(num_datatypes, c.types.len() as i64);
            put(combiner, c.combiner);
        }
        Ok(())
    })
}

/// Copies `from` into the C array `to` of room for `max` (an error when it does not fit).
///
/// # Safety
/// `to` has room for `max` values.
unsafe fn fill<T: Copy>(from: &[T], to: *mut T, max: i64, what: &str) -> ch4::Result<()> {
    if from.is_empty() {
        return Ok(());
    }
    if max < from.len() as i64 || to.is_null() {
        return Err(ch4::Error::new(
            ErrorKind::Arg,
            format!(
                "room for {max} {what}, but the datatype has {} (MPI_Type_get_envelope \
                 says how many)",
                from.len()
            ),
        ));
    }
    // SAFETY: the caller's contract, and the check above.
    unsafe { std::ptr::copy_nonoverlapping(from.as_ptr(), to, from.len()) };
    Ok(())
}

/// Writes `c`'s old types as handles: predefined ones as themselves, derived ones as new
/// handles.
///
/// # Safety
/// `to` has room for `max` handles.
unsafe fn fill_types(
    st: &crate::state::State,
    c: &Contents,
    to: *mut Handle,
    max: i64,
) -> ch4::Result<()> {
    let handles: Vec<Handle> = c
        .types
        .iter()
        .map(|t| t.named)
        .map(|n| n.unwrap_or(0))
        .collect();
    // SAFETY: the caller's contract (checked for room first, before any handle is made).
    unsafe { fill(&handles, to, max, "datatypes") }?;
    for (i, t) in c.types.iter().enumerate() {
        if t.named.is_none() {
            let h = add_type(st, t.clone());
            // SAFETY: `fill` checked room for every entry.
            unsafe { to.add(i).write(h) };
        }
    }
    Ok(())
}

/// `MPI_Type_get_contents`.
///
/// # Safety
/// Each array has room for its `max_` count.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_get_contents(
    datatype: Handle,
    max_integers: c_int,
    max_addresses: c_int,
    max_datatypes: c_int,
    array_of_integers: *mut c_int,
    array_of_addresses: *mut isize,
    array_of_datatypes: *mut Handle,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Type_get_contents", |st| {
        let c = contents_of(st, datatype)?;
        if !c.counts.is_empty() {
            return Err(ch4::Error::new(
                ErrorKind::Arg,
                "the datatype was made with large counts: use MPI_Type_get_contents_c",
            ));
        }
        // SAFETY: the caller's contract.
        unsafe {
            fill(&c.ints, array_of_integers, max_integers.into(), "integers")?;
            fill(
                &c.aints,
                array_of_addresses,
                max_addresses.into(),
                "addresses",
            )?;
            fill_types(st, &c, array_of_datatypes, max_datatypes.into())
        }
    })
}

/// `MPI_Type_get_contents_c`.
///
/// # Safety
/// Each array has room for its `max_` count.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_get_contents_c(
    datatype: Handle,
    max_integers: i64,
    max_addresses: i64,
    max_large_counts: i64,
    max_datatypes: i64,
    array_of_integers: *mut c_int,
    array_of_addresses: *mut isize,
    array_of_large_counts: *mut i64,
    array_of_datatypes: *mut Handle,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Type_get_contents_c", |st| {
        let c = contents_of(st, datatype)?;
        // SAFETY: the caller's contract.
        unsafe {
            fill(&c.ints, array_of_integers, max_integers, "integers")?;
            fill(&c.aints, array_of_addresses, max_addresses, "addresses")?;
            fill(
                &c.counts,
                array_of_large_counts,
                max_large_counts,
                "large counts",
            )?;
            fill_types(st, &c, array_of_datatypes, max_datatypes)
        }
    })
}

//! Communicators, from the standard's chapter "Groups, Contexts, Communicators, and Caching":
//! the accessors `MPI_Comm_rank`, `MPI_Comm_size` and `MPI_Comm_compare`, the constructors
//! `MPI_Comm_dup`, `MPI_Comm_split` and `MPI_Comm_create`, `MPI_Comm_free`, and from caching
//! `MPI_Comm_get_attr` (the predefined attributes).
//!
//! A communicator handle is an index into the process's table (`state`), with
//! `MPI_COMM_WORLD` and `MPI_COMM_SELF` predefined; the device owns the communicator itself.
//! Each function here translates the handle, asks the device, and keeps the table in step: a
//! new communicator takes its parent's error handler, and a freed one's slot empties. Groups,
//! from which `MPI_Comm_create` builds, are in `groups`.

use std::ffi::{c_int, c_void};

use ch4_core::ErrorKind;

use crate::abi::{self, Handle, CONGRUENT, IDENT};
use crate::call::{call, null_arg, put};
use crate::groups::{compare, group_in};

/// `MPI_Comm_rank`.
///
/// # Safety
/// `rank` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_rank(comm: Handle, rank: *mut c_int) -> c_int {
    call(comm, "MPI_Comm_rank", |st| {
        let id = st.comm(comm)?;
        let r = st.device()?.rank(id)?;
        // SAFETY: the caller's contract.
        unsafe { put(rank, r) };
        Ok(())
    })
}

/// `MPI_Comm_size`.
///
/// # Safety
/// `size` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_size(comm: Handle, size: *mut c_int) -> c_int {
    call(comm, "MPI_Comm_size", |st| {
        let id = st.comm(comm)?;
        let n = st.device()?.size(id)?;
        // SAFETY: the caller's contract.
        unsafe { put(size, n) };
        Ok(())
    })
}

/// `MPI_Comm_dup`: a new communicator with the same members (and error handler).
///
/// # Safety
/// `newcomm` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_dup(comm: Handle, newcomm: *mut Handle) -> c_int {
    call(comm, "MPI_Comm_dup", |st| {
        let slot = st.slot(comm)?;
        let (id, fatal) = (slot.id, slot.fatal);
        let new = st.device()?.comm_dup(id)?;
        let h = st.add_comm(new, fatal);
        // SAFETY: the caller's contract.
        unsafe { put(newcomm, h) };
        Ok(())
    })
}

/// `MPI_Comm_split`: `MPI_COMM_NULL` for members whose color is `MPI_UNDEFINED`.
///
/// # Safety
/// `newcomm` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_split(
    comm: Handle,
    color: c_int,
    key: c_int,
    newcomm: *mut Handle,
) -> c_int {
    call(comm, "MPI_Comm_split", |st| {
        let slot = st.slot(comm)?;
        let (id, fatal) = (slot.id, slot.fatal);
        let new = st.device()?.comm_split(id, color, key)?;
        let h = new.map_or(abi::COMM_NULL, |c| st.add_comm(c, fatal));
        // SAFETY: the caller's contract.
        unsafe { put(newcomm, h) };
        Ok(())
    })
}

/// `MPI_Comm_free`: the handle becomes `MPI_COMM_NULL`; the predefined communicators cannot be
/// freed.
///
/// # Safety
/// `comm` is valid for a read and a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_free(comm: *mut Handle) -> c_int {
    if comm.is_null() {
        return call(abi::COMM_WORLD, "MPI_Comm_free", |_| {
            Err(null_arg("the communicator"))
        });
    }
    // SAFETY: the caller's contract.
    let h = unsafe { comm.read() };
    call(h, "MPI_Comm_free", |st| {
        if h < abi::COMM_BASE {
            return Err(ch4::Error::new(
                ErrorKind::Comm,
                "MPI_COMM_WORLD, MPI_COMM_SELF and MPI_COMM_NULL cannot be freed",
            ));
        }
        let id = st.comm(h)?;
        st.device()?.comm_free(id)?;
        st.comms[h - abi::COMM_BASE] = None;
        // SAFETY: the caller's contract.
        unsafe { comm.write(abi::COMM_NULL) };
        Ok(())
    })
}

/// `MPI_Comm_create`: `MPI_COMM_NULL` for processes outside `group`.
///
/// # Safety
/// `newcomm` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_create(
    comm: Handle,
    group: Handle,
    newcomm: *mut Handle,
) -> c_int {
    call(comm, "MPI_Comm_create", |st| {
        let slot = st.slot(comm)?;
        let (id, fatal) = (slot.id, slot.fatal);
        let g = group_in(st, group)?;
        let new = st.device()?.comm_create(id, &g)?;
        let h = new.map_or(abi::COMM_NULL, |c| st.add_comm(c, fatal));
        // SAFETY: the caller's contract.
        unsafe { put(newcomm, h) };
        Ok(())
    })
}

/// `MPI_Comm_compare`.
///
/// # Safety
/// `result` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_compare(
    comm1: Handle,
    comm2: Handle,
    result: *mut c_int,
) -> c_int {
    call(comm1, "MPI_Comm_compare", |st| {
        let (a, b) = (st.comm(comm1)?, st.comm(comm2)?);
        let r = if comm1 == comm2 {
            IDENT
        } else {
            let dev = st.device()?;
            match compare(&dev.comm_group(a)?, &dev.comm_group(b)?) {
                IDENT => CONGRUENT,
                other => other,
            }
        };
        // SAFETY: the caller's contract.
        unsafe { put(result, r) };
        Ok(())
    })
}

// ------------------------------------------------------------------ attributes

/// The values behind the predefined attribute keys, at fixed addresses (attributes are
/// returned as pointers to them).
static TAG_UB: std::sync::OnceLock<c_int> = std::sync::OnceLock::new();

static WTIME_IS_GLOBAL: c_int = 0;

/// `MPI_Comm_get_attr` for the predefined keys: `MPI_TAG_UB` (the largest tag),
/// `MPI_WTIME_IS_GLOBAL` (no); other keys are not set.
///
/// # Safety
/// `attribute_val` is valid for a write of a pointer; `flag` of an int.
#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_get_attr(
    comm: Handle,
    comm_keyval: c_int,
    attribute_val: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    call(comm, "MPI_Comm_get_attr", |st| {
        st.comm(comm)?;
        let value: Option<*const c_int> = match comm_keyval {
            501 => Some(TAG_UB.get_or_init(|| ch4::Device::TAG_UB)),
            504 => Some(&WTIME_IS_GLOBAL),
            _ => None,
        };
        // SAFETY: the caller's contract (C passes the address of a pointer as void*).
        unsafe {
            put(flag, c_int::from(value.is_some()));
            if let Some(v) = value {
                put(attribute_val.cast::<*const c_int>(), v);
            }
        }
        Ok(())
    })
}

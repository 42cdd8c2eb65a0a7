//! Communicators, from the standard's chapter "Groups, Contexts, Communicators, and Caching":
//! the accessors `MPI_Comm_rank`, `MPI_Comm_size` and `MPI_Comm_compare`, the constructors
//! `MPI_Comm_dup`, `MPI_Comm_split`, `MPI_Comm_create` and `MPI_Comm_create_group`, and
//! `MPI_Comm_free`. Caching (attributes, names) is in `attributes`, whose hooks these call
//! where a communicator is duplicated or freed.
//!
//! A communicator handle is an index into the process's table (`state`), with
//! `MPI_COMM_WORLD` and `MPI_COMM_SELF` predefined; the device owns the communicator itself.
//! Each function here translates the handle, asks the device, and keeps the table in step: a
//! new communicator takes its parent's error handler, and a freed one's slot empties. Groups,
//! from which `MPI_Comm_create` builds, are in `groups`.

use std::ffi::c_int;

use ch4_core::ErrorKind;

use crate::abi::{self, Handle, CONGRUENT, IDENT};
use crate::call::{call, null_arg, on_device, put};
use crate::groups::{compare, group_in};
use crate::state::{CommRef, State};
use ch4_core::comm::Comm;

/// `MPI_Comm_rank`.
///
/// # Safety
/// `rank` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_rank(comm: Handle, rank: *mut c_int) -> c_int {
    call(comm, "MPI_Comm_rank", |st| {
        let c = st.comm(comm)?;
        let id = c.id;
        let r = st.device(c.vci)?.rank(id)?;
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
        let c = st.comm(comm)?;
        let id = c.id;
        let n = st.device(c.vci)?.size(id)?;
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
    let code = call(comm, "MPI_Comm_dup", |st| {
        let (c, fatal) = parent(st, comm)?;
        if crate::intercomm::remote_size(st, c)?.is_some() {
            let h = crate::intercomm::dup(st, c, fatal)?;
            // SAFETY: the caller's contract.
            unsafe { put(newcomm, h) };
            return Ok(());
        }
        let new = on_device!(st, c.vci, |b| ch4_core::coll::new_dup(b, c.id))?;
        let new = st.adopt_comm(new)?;
        let h = st.add_comm(new.id, new.vci, fatal);
        copy_topology(st, comm, h)?;
        // SAFETY: the caller's contract.
        unsafe { put(newcomm, h) };
        Ok(())
    });
    // SAFETY: the caller's contract.
    unsafe { crate::attributes::after_comm_dup(code, comm, newcomm) }
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
    let code = call(comm, "MPI_Comm_split", |st| {
        let (c, fatal) = parent(st, comm)?;
        if crate::intercomm::remote_size(st, c)?.is_some() {
            let h = crate::intercomm::split(st, c, color, key, fatal)?;
            // SAFETY: the caller's contract.
            unsafe { put(newcomm, h) };
            return Ok(());
        }
        let new = on_device!(st, c.vci, |b| ch4_core::coll::new_split(
            b, c.id, color, key
        ))?;
        let h = adopt_all(st, new, fatal)?;
        // SAFETY: the caller's contract.
        unsafe { put(newcomm, h) };
        Ok(())
    });
    // SAFETY: the caller's contract.
    unsafe { crate::errors::inherit_after(code, comm, newcomm) }
}

/// `MPI_Comm_split_type` (MPI 4.1 section 7.4.2): `MPI_COMM_TYPE_SHARED` splits `comm` by
/// node, from the device's own map of which processes share its memory. The guided types
/// (`MPI_COMM_TYPE_HW_GUIDED`, `MPI_COMM_TYPE_RESOURCE_GUIDED`) split by the level the info
/// key `mpi_hw_resource_type` names: ch4 knows one level between the process and the job,
/// the node, which MPI calls `mpi_shared_memory`; any other level, or no key, leaves the
/// caller out (`MPI_COMM_NULL`), as the standard asks for a level the implementation does not
/// know. `MPI_COMM_TYPE_HW_UNGUIDED` splits by the node when that is a proper subset of
/// `comm` (else every member gets `MPI_COMM_NULL`) and names the level in `info`.
/// `MPI_UNDEFINED` leaves this process out, as the other members must still take part; other
/// types are refused with `MPI_ERR_ARG`. Members may pass different types and keys: each
/// finds its color alone, and the split is one collective for all.
///
/// # Safety
/// `newcomm` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_split_type(
    comm: Handle,
    split_type: c_int,
    key: c_int,
    info: Handle,
    newcomm: *mut Handle,
) -> c_int {
    const NODE_LEVEL: &str = "mpi_shared_memory";
    let code = call(comm, "MPI_Comm_split_type", |st| {
        let (c, fatal) = parent(st, comm)?;
        crate::intercomm::check_intra(st, c, "MPI_Comm_split_type")?;
        let named_node = || -> ch4::Result<bool> {
            if info == abi::INFO_NULL {
                return Ok(false);
            }
            Ok(crate::info::value(info, "mpi_hw_resource_type")?.as_deref() == Some(NODE_LEVEL))
        };
        let shared = match split_type {
            abi::COMM_TYPE_SHARED | abi::COMM_TYPE_HW_UNGUIDED => true,
            abi::UNDEFINED => false,
            abi::COMM_TYPE_HW_GUIDED | abi::COMM_TYPE_RESOURCE_GUIDED => named_node()?,
            other => {
                return Err(ch4::Error::new(
                    ErrorKind::Arg,
                    format!(
                        "split type {other}: ch4 splits by MPI_COMM_TYPE_SHARED,                          MPI_COMM_TYPE_HW_UNGUIDED, MPI_COMM_TYPE_HW_GUIDED or                          MPI_COMM_TYPE_RESOURCE_GUIDED, or MPI_UNDEFINED"
                    ),
                ))
            }
        };
        let new = on_device!(st, c.vci, |b| {
            let color = if shared {
                // Process ids fit an i32 color: jobs are far smaller than 2^31.
                let leader = ch4_core::blocking::Blocking::visit(b, |d| Ok(d.node_leader()))?;
                i32::try_from(leader).unwrap_or(i32::MAX)
            } else {
                abi::UNDEFINED
            };
            ch4_core::coll::new_split(b, c.id, color, key)
        })?;
        let mut h = adopt_all(st, new, fatal)?;
        if split_type == abi::COMM_TYPE_HW_UNGUIDED && h != abi::COMM_NULL {
            // Every member's node is all of `comm` or none is: the same answer everywhere.
            let new = st.comm(h)?;
            let n = st.device(new.vci)?.size(new.id)?;
            let whole = st.device(c.vci)?.size(c.id)?;
            if n == whole {
                st.device(new.vci)?.comm_free(new.id)?;
                st.comms.lock()[h - abi::COMM_BASE] = None;
                h = abi::COMM_NULL;
            } else if info != abi::INFO_NULL {
                crate::info::set(info, "mpi_hw_resource_type", NODE_LEVEL)?;
            }
        }
        // SAFETY: the caller's contract.
        unsafe { put(newcomm, h) };
        Ok(())
    });
    // SAFETY: the caller's contract.
    unsafe { crate::errors::inherit_after(code, comm, newcomm) }
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
    let deleted = crate::attributes::before_comm_free(h);
    if deleted != crate::abi::class::SUCCESS {
        return deleted;
    }
    let code = call(h, "MPI_Comm_free", |st| {
        if h < abi::COMM_BASE {
            return Err(ch4::Error::new(
                ErrorKind::Comm,
                "MPI_COMM_WORLD, MPI_COMM_SELF and MPI_COMM_NULL cannot be freed",
            ));
        }
        let c = st.comm(h)?;
        let id = c.id;
        st.device(c.vci)?.comm_free(id)?;
        st.comms.lock()[h - abi::COMM_BASE] = None;
        // SAFETY: the caller's contract.
        unsafe { comm.write(abi::COMM_NULL) };
        Ok(())
    });
    if code == crate::abi::class::SUCCESS {
        crate::attributes::forget_comm(h);
    }
    code
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
    let code = call(comm, "MPI_Comm_create", |st| {
        let (c, fatal) = parent(st, comm)?;
        let g = group_in(st, group)?;
        if crate::intercomm::remote_size(st, c)?.is_some() {
            let h = crate::intercomm::create(st, c, &g, fatal)?;
            // SAFETY: the caller's contract.
            unsafe { put(newcomm, h) };
            return Ok(());
        }
        let new = on_device!(st, c.vci, |b| ch4_core::coll::new_create(b, c.id, &g))?;
        let h = adopt_all(st, new, fatal)?;
        // SAFETY: the caller's contract.
        unsafe { put(newcomm, h) };
        Ok(())
    });
    // SAFETY: the caller's contract.
    unsafe { crate::errors::inherit_after(code, comm, newcomm) }
}

/// `MPI_Comm_create_group`: collective over the members of `group` only (MPI 4.1 section
/// 7.4.2), which agree on the new communicator's context among themselves, with messages on
/// `comm`'s collective context tagged by `tag` (`ch4_core::coll::new_create_group`); the other
/// members of `comm` need not call. A caller outside `group` gets `MPI_COMM_NULL`.
///
/// # Safety
/// `newcomm` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_create_group(
    comm: Handle,
    group: Handle,
    tag: c_int,
    newcomm: *mut Handle,
) -> c_int {
    call(comm, "MPI_Comm_create_group", |st| {
        if newcomm.is_null() {
            return Err(null_arg("the new communicator"));
        }
        let (c, fatal) = parent(st, comm)?;
        crate::intercomm::check_intra(st, c, "MPI_Comm_create_group")?;
        let g = group_in(st, group)?;
        let new = on_device!(st, c.vci, |b| ch4_core::coll::new_create_group(
            b, c.id, &g, tag
        ))?;
        let h = adopt_all(st, new, fatal)?;
        // SAFETY: checked non-null.
        unsafe { newcomm.write(h) };
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
            let ga = st.device(a.vci)?.comm_group(a.id)?;
            let gb = st.device(b.vci)?.comm_group(b.id)?;
            let ra = st.device(a.vci)?.comm_remote_group(a.id)?;
            let rb = st.device(b.vci)?.comm_remote_group(b.id)?;
            // Intercommunicators compare by both groups (MPI 4.1 section 7.4.1): the
            // weaker of the two results; an intra- and an intercommunicator are unequal.
            let remote = match (&ra, &rb) {
                (None, None) => IDENT,
                (Some(x), Some(y)) => compare(x, y),
                _ => abi::UNEQUAL,
            };
            match (compare(&ga, &gb), remote) {
                (IDENT, IDENT) => CONGRUENT,
                (abi::UNEQUAL, _) | (_, abi::UNEQUAL) => abi::UNEQUAL,
                _ => abi::SIMILAR,
            }
        };
        // SAFETY: the caller's contract.
        unsafe { put(result, r) };
        Ok(())
    })
}

/// A parent communicator: where a new one is agreed on, and the error handler it passes on.
pub(crate) fn parent(st: &State, comm: Handle) -> ch4::Result<(CommRef, bool)> {
    st.with_slot(comm, |s| {
        (
            CommRef {
                id: s.id,
                vci: s.vci,
            },
            s.fatal,
        )
    })
}

/// Gives communicator `to`, a duplicate of `from`, the topology of `from`: a duplicate
/// carries its parent's topology (MPI 4.1 section 7.4.2, for `MPI_Comm_dup` and its
/// `_with_info` and nonblocking forms).
pub(crate) fn copy_topology(st: &State, from: Handle, to: Handle) -> ch4::Result<()> {
    let topo = st.with_slot(from, |s| s.topo.clone())?;
    st.with_slot(to, |s| s.topo = topo)
}

/// A handle for the communicator just agreed on (`MPI_COMM_NULL` for none), added to the VCI
/// its context id binds it to.
pub(crate) fn adopt_all(st: &State, new: Option<Comm>, fatal: bool) -> ch4::Result<Handle> {
    Ok(match new {
        None => abi::COMM_NULL,
        Some(c) => {
            let c = st.adopt_comm(c)?;
            st.add_comm(c.id, c.vci, fatal)
        }
    })
}

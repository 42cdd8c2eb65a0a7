//! The `static inline` calls of `rdma/fabric.h`: any fid's generic ops (close, control,
//! ops_open, ops_set), `fi_allocinfo` and the traffic-class helpers.

use core::ffi::{c_char, c_int, c_void};

use super::{checked_op, op};
// `struct fi_alias` shares its name with the call `fi_alias` below.
use crate::bindings::fi_alias as fi_alias_arg;
use crate::{
    fi_dupinfo, fi_fid_var, fi_info, fid, FI_ALIAS, FI_ENOSYS, FI_GET_VAL, FI_SET_VAL, FI_TC_DSCP,
};

/// `fi_tc_dscp_set`: the traffic class that carries DSCP value `dscp`.
#[inline(always)]
pub const fn fi_tc_dscp_set(dscp: u8) -> u32 {
    (dscp as u32) | FI_TC_DSCP as u32
}

/// `fi_tc_dscp_get`: the DSCP value of traffic class `tclass`, 0 if it is not a DSCP class.
#[inline(always)]
pub const fn fi_tc_dscp_get(tclass: u32) -> u8 {
    if tclass & FI_TC_DSCP as u32 != 0 {
        tclass as u8
    } else {
        0
    }
}

/// `fi_allocinfo`: a zeroed `fi_info` with all its attribute structs allocated (for hints),
/// or null; free it with [`fi_freeinfo`](crate::fi_freeinfo).
///
/// # Safety
///
/// None beyond the FFI call; `unsafe` like the `fi_dupinfo` it wraps.
#[inline(always)]
pub unsafe fn fi_allocinfo() -> *mut fi_info {
    // SAFETY: fi_dupinfo(NULL) is documented to allocate a fresh, zeroed fi_info; it reads
    // nothing through its (null) argument.
    unsafe { fi_dupinfo(core::ptr::null()) }
}

/// `fi_close`: closes any fabric object (and frees it): `fid->ops->close(fid)`.
///
/// # Safety
///
/// The crate's contract; `fid` is not used again afterwards, and objects bound to it are
/// closed first (endpoints before their CQs and AVs, those before their domain, ...).
#[inline(always)]
pub unsafe fn fi_close(fid: *mut fid) -> c_int {
    // SAFETY: `fid` is a live object (contract 1), so `(*fid).ops` is its provider's fi_ops
    // table; the caller hands the object over to close.
    unsafe { op!((*fid).ops, fi_ops.close)(fid) }
}

/// `fi_control`: `fid->ops->control(fid, command, arg)`, the generic control call.
///
/// # Safety
///
/// The crate's contract; `arg` is what `command` requires (fi_control(3)).
#[inline(always)]
pub unsafe fn fi_control(fid: *mut fid, command: c_int, arg: *mut c_void) -> c_int {
    // SAFETY: `fid` is a live object (contract 1), so `(*fid).ops` is its provider's fi_ops
    // table; `arg` fits `command` (caller).
    unsafe { op!((*fid).ops, fi_ops.control)(fid, command, arg) }
}

/// `fi_alias`: a second fid for the same object with other default flags
/// (`fi_control(FI_ALIAS)`).
///
/// # Safety
///
/// The crate's contract; `alias_fid` is writable.
#[inline(always)]
pub unsafe fn fi_alias(fid: *mut fid, alias_fid: *mut *mut fid, flags: u64) -> c_int {
    let mut alias = fi_alias_arg {
        fid: alias_fid,
        flags,
    };
    // SAFETY: `fid` is live (contract 1); FI_ALIAS takes a `struct fi_alias *`, and `alias`
    // lives on this stack frame for the whole call.
    unsafe { fi_control(fid, FI_ALIAS, core::ptr::addr_of_mut!(alias).cast()) }
}

/// `fi_get_val`: reads the object's value `name` into `val` (`fi_control(FI_GET_VAL)`).
///
/// # Safety
///
/// The crate's contract; `val` is writable as the value `name` requires.
#[inline(always)]
pub unsafe fn fi_get_val(fid: *mut fid, name: c_int, val: *mut c_void) -> c_int {
    let mut var = fi_fid_var { name, val };
    // SAFETY: `fid` is live (contract 1); FI_GET_VAL takes a `struct fi_fid_var *`, and `var`
    // lives on this stack frame for the whole call.
    unsafe { fi_control(fid, FI_GET_VAL, core::ptr::addr_of_mut!(var).cast()) }
}

/// `fi_set_val`: sets the object's value `name` from `val` (`fi_control(FI_SET_VAL)`).
///
/// # Safety
///
/// The crate's contract; `val` points to the value `name` requires.
#[inline(always)]
pub unsafe fn fi_set_val(fid: *mut fid, name: c_int, val: *mut c_void) -> c_int {
    let mut var = fi_fid_var { name, val };
    // SAFETY: `fid` is live (contract 1); FI_SET_VAL takes a `struct fi_fid_var *`, and `var`
    // lives on this stack frame for the whole call.
    unsafe { fi_control(fid, FI_SET_VAL, core::ptr::addr_of_mut!(var).cast()) }
}

/// `fi_open_ops`: opens the provider-specific ops table `name` of an object.
///
/// # Safety
///
/// The crate's contract; `name` is a NUL-terminated string and `ops` writable.
#[inline(always)]
pub unsafe fn fi_open_ops(
    fid: *mut fid,
    name: *const c_char,
    flags: u64,
    ops: *mut *mut c_void,
    context: *mut c_void,
) -> c_int {
    // SAFETY: `fid` is a live object (contract 1), so `(*fid).ops` is its provider's fi_ops
    // table; the other arguments are the caller's (contract 2).
    unsafe { op!((*fid).ops, fi_ops.ops_open)(fid, name, flags, ops, context) }
}

/// `fi_set_ops`: installs the ops table `name` (such as `FI_SET_OPS_HMEM_OVERRIDE`) on an
/// object; `-FI_ENOSYS` if the provider's table predates `ops_set`, as in C.
///
/// # Safety
///
/// The crate's contract; `name` is a NUL-terminated string and `ops` the table `name` names,
/// alive as long as the object uses it.
#[inline(always)]
pub unsafe fn fi_set_ops(
    fid: *mut fid,
    name: *const c_char,
    flags: u64,
    ops: *mut c_void,
    context: *mut c_void,
) -> c_int {
    // SAFETY: `fid` is a live object (contract 1), so `(*fid).ops` is its provider's fi_ops
    // table, whose `size` tells how far it may be read (checked_op!); the other arguments are
    // the caller's (contract 2).
    unsafe {
        match checked_op!((*fid).ops, fi_ops.ops_set) {
            Some(f) => f(fid, name, flags, ops, context),
            None => -FI_ENOSYS,
        }
    }
}

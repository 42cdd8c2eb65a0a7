//! The `static inline` calls of `rdma/fi_cm.h`: endpoint names (the addresses peers insert
//! in their AVs), connection management for `FI_EP_MSG` endpoints, multicast joins.

use core::ffi::{c_int, c_void};

use super::{checked_op, ep_of, op};
use crate::{fi_addr_t, fid_ep, fid_mc, fid_pep, fid_t, FI_ENOSYS};

/// `fi_setname`: sets the endpoint's own address to `addr[..addrlen]`.
///
/// # Safety
///
/// The crate's contract: `fid` is `&(*ep).fid` of a live endpoint (or passive endpoint:
/// `fid_pep` begins like `fid_ep`, as C relies on); `addr` readable for `addrlen` bytes.
#[inline(always)]
pub unsafe fn fi_setname(fid: fid_t, addr: *mut c_void, addrlen: usize) -> c_int {
    let ep = ep_of(fid);
    // SAFETY: `fid` is embedded in a live endpoint (contract 1), so `ep` is that endpoint and
    // `(*ep).cm` its fi_ops_cm table; the address is the caller's (contract 2).
    unsafe { op!((*ep).cm, fi_ops_cm.setname)(fid, addr, addrlen) }
}

/// `fi_getname`: the endpoint's own address into `addr` (`*addrlen` bytes; set to the
/// address's length, and `-FI_ETOOSMALL` if it did not fit).
///
/// # Safety
///
/// The crate's contract: `fid` is `&(*ep).fid` of a live endpoint (or passive endpoint, as
/// for [`fi_setname`]); `addrlen` is readable and writable, `addr` writable for `*addrlen`
/// bytes.
#[inline(always)]
pub unsafe fn fi_getname(fid: fid_t, addr: *mut c_void, addrlen: *mut usize) -> c_int {
    let ep = ep_of(fid);
    // SAFETY: `fid` is embedded in a live endpoint (contract 1), so `ep` is that endpoint and
    // `(*ep).cm` its fi_ops_cm table; the out-pointers are the caller's (contract 2).
    unsafe { op!((*ep).cm, fi_ops_cm.getname)(fid, addr, addrlen) }
}

/// `fi_getpeer`: the address of a connected endpoint's peer into `addr` (as [`fi_getname`]).
///
/// # Safety
///
/// The crate's contract; `addrlen` is readable and writable, `addr` writable for `*addrlen`
/// bytes.
#[inline(always)]
pub unsafe fn fi_getpeer(ep: *mut fid_ep, addr: *mut c_void, addrlen: *mut usize) -> c_int {
    // SAFETY: `ep` is live (contract 1), so `(*ep).cm` is its fi_ops_cm table; the
    // out-pointers are the caller's (contract 2).
    unsafe { op!((*ep).cm, fi_ops_cm.getpeer)(ep, addr, addrlen) }
}

/// `fi_listen`: starts listening for connection requests on a passive endpoint.
///
/// # Safety
///
/// The crate's contract.
#[inline(always)]
pub unsafe fn fi_listen(pep: *mut fid_pep) -> c_int {
    // SAFETY: `pep` is live (contract 1), so `(*pep).cm` is its fi_ops_cm table.
    unsafe { op!((*pep).cm, fi_ops_cm.listen)(pep) }
}

/// `fi_connect`: requests a connection to the passive endpoint at `addr`, sending
/// `param[..paramlen]` with the request.
///
/// # Safety
///
/// The crate's contract; `addr` is an address of the endpoint's format, `param` readable for
/// `paramlen` bytes (or null with 0).
#[inline(always)]
pub unsafe fn fi_connect(
    ep: *mut fid_ep,
    addr: *const c_void,
    param: *const c_void,
    paramlen: usize,
) -> c_int {
    // SAFETY: `ep` is live (contract 1), so `(*ep).cm` is its fi_ops_cm table; the address and
    // parameters are the caller's (contract 2).
    unsafe { op!((*ep).cm, fi_ops_cm.connect)(ep, addr, param, paramlen) }
}

/// `fi_accept`: accepts the connection request the endpoint was opened for, sending
/// `param[..paramlen]` back.
///
/// # Safety
///
/// The crate's contract; `param` readable for `paramlen` bytes (or null with 0).
#[inline(always)]
pub unsafe fn fi_accept(ep: *mut fid_ep, param: *const c_void, paramlen: usize) -> c_int {
    // SAFETY: `ep` is live (contract 1), so `(*ep).cm` is its fi_ops_cm table; the parameters
    // are the caller's (contract 2).
    unsafe { op!((*ep).cm, fi_ops_cm.accept)(ep, param, paramlen) }
}

/// `fi_reject`: rejects the connection request `handle` (from an `FI_CONNREQ` event) on a
/// passive endpoint, sending `param[..paramlen]` back.
///
/// # Safety
///
/// The crate's contract; `handle` is the `fid` of a pending `FI_CONNREQ` event, `param`
/// readable for `paramlen` bytes (or null with 0).
#[inline(always)]
pub unsafe fn fi_reject(
    pep: *mut fid_pep,
    handle: fid_t,
    param: *const c_void,
    paramlen: usize,
) -> c_int {
    // SAFETY: `pep` is live (contract 1), so `(*pep).cm` is its fi_ops_cm table; the handle
    // and parameters are the caller's (contract 2).
    unsafe { op!((*pep).cm, fi_ops_cm.reject)(pep, handle, param, paramlen) }
}

/// `fi_shutdown`: shuts a connection down.
///
/// # Safety
///
/// The crate's contract.
#[inline(always)]
pub unsafe fn fi_shutdown(ep: *mut fid_ep, flags: u64) -> c_int {
    // SAFETY: `ep` is live (contract 1), so `(*ep).cm` is its fi_ops_cm table.
    unsafe { op!((*ep).cm, fi_ops_cm.shutdown)(ep, flags) }
}

/// `fi_join`: joins the multicast group at `addr`; `-FI_ENOSYS` if the provider's table
/// predates `join`, as in C.
///
/// # Safety
///
/// The crate's contract; `addr` is a group address of the endpoint's format, `mc` writable.
#[inline(always)]
pub unsafe fn fi_join(
    ep: *mut fid_ep,
    addr: *const c_void,
    flags: u64,
    mc: *mut *mut fid_mc,
    context: *mut c_void,
) -> c_int {
    // SAFETY: `ep` is live (contract 1), so `(*ep).cm` is its fi_ops_cm table, whose `size`
    // bounds the read (checked_op!); the other arguments are the caller's (contract 2).
    unsafe {
        match checked_op!((*ep).cm, fi_ops_cm.join) {
            Some(f) => f(ep, addr, flags, mc, context),
            None => -FI_ENOSYS,
        }
    }
}

/// `fi_mc_addr`: the `fi_addr_t` to send to a joined multicast group.
///
/// # Safety
///
/// The crate's contract (`mc` is live).
#[inline(always)]
pub unsafe fn fi_mc_addr(mc: *mut fid_mc) -> fi_addr_t {
    // SAFETY: `mc` is a live multicast object (contract 1), so it can be read.
    unsafe { (*mc).fi_addr }
}

//! The `static inline` calls of `rdma/fi_rma.h`: one-sided reads and writes of a peer's
//! registered memory, named by its address (`addr`, or an offset with `FI_MR_VIRT_ADDR`
//! unset) and remote key (`key`, from the peer's `fi_mr_key`).

use core::ffi::c_void;

use libc::iovec;

use super::op;
use crate::{fi_addr_t, fi_msg_rma, fid_ep};

/// `fi_read`: reads `len` bytes of the peer's region `key` at `addr` into `buf`.
///
/// # Safety
///
/// The crate's contract; `buf[..len]` is writable and left alone until the read's completion
/// is read, `desc` is its memory descriptor (or null when the domain needs none).
#[allow(clippy::too_many_arguments)] // libfabric's signature
#[inline(always)]
pub unsafe fn fi_read(
    ep: *mut fid_ep,
    buf: *mut c_void,
    len: usize,
    desc: *mut c_void,
    src_addr: fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    // SAFETY: `ep` is live (contract 1), so `(*ep).rma` is its fi_ops_rma table; the buffer,
    // descriptor and context are the caller's (contract 2).
    unsafe { op!((*ep).rma, fi_ops_rma.read)(ep, buf, len, desc, src_addr, addr, key, context) }
}

/// `fi_readv`: [`fi_read`] into the `count` buffers of `iov`.
///
/// # Safety
///
/// The crate's contract; `iov[..count]` (and `desc[..count]` if not null) are readable for
/// the call, their buffers writable and left alone until the completion is read.
#[allow(clippy::too_many_arguments)] // libfabric's signature
#[inline(always)]
pub unsafe fn fi_readv(
    ep: *mut fid_ep,
    iov: *const iovec,
    desc: *mut *mut c_void,
    count: usize,
    src_addr: fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    // SAFETY: `ep` is live (contract 1), so `(*ep).rma` is its fi_ops_rma table; the iovecs
    // and context are the caller's (contract 2).
    unsafe { op!((*ep).rma, fi_ops_rma.readv)(ep, iov, desc, count, src_addr, addr, key, context) }
}

/// `fi_readmsg`: [`fi_read`] described by an `fi_msg_rma`, with operation `flags`.
///
/// # Safety
///
/// The crate's contract; `msg` and the arrays it points to are readable for the call, its
/// local buffers writable and left alone until the completion is read.
#[inline(always)]
pub unsafe fn fi_readmsg(ep: *mut fid_ep, msg: *const fi_msg_rma, flags: u64) -> isize {
    // SAFETY: `ep` is live (contract 1), so `(*ep).rma` is its fi_ops_rma table; the message
    // is the caller's (contract 2).
    unsafe { op!((*ep).rma, fi_ops_rma.readmsg)(ep, msg, flags) }
}

/// `fi_write`: writes `buf[..len]` into the peer's region `key` at `addr`.
///
/// # Safety
///
/// The crate's contract; `buf[..len]` is readable and left unchanged until the write's
/// completion is read, `desc` is its memory descriptor (or null when the domain needs none).
#[allow(clippy::too_many_arguments)] // libfabric's signature
#[inline(always)]
pub unsafe fn fi_write(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    desc: *mut c_void,
    dest_addr: fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    // SAFETY: `ep` is live (contract 1), so `(*ep).rma` is its fi_ops_rma table; the buffer,
    // descriptor and context are the caller's (contract 2).
    unsafe { op!((*ep).rma, fi_ops_rma.write)(ep, buf, len, desc, dest_addr, addr, key, context) }
}

/// `fi_writev`: [`fi_write`] of the `count` buffers of `iov`.
///
/// # Safety
///
/// The crate's contract; `iov[..count]` (and `desc[..count]` if not null) are readable for
/// the call, their buffers readable and unchanged until the completion is read.
#[allow(clippy::too_many_arguments)] // libfabric's signature
#[inline(always)]
pub unsafe fn fi_writev(
    ep: *mut fid_ep,
    iov: *const iovec,
    desc: *mut *mut c_void,
    count: usize,
    dest_addr: fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    // SAFETY: `ep` is live (contract 1), so `(*ep).rma` is its fi_ops_rma table; the iovecs
    // and context are the caller's (contract 2).
    unsafe {
        op!((*ep).rma, fi_ops_rma.writev)(ep, iov, desc, count, dest_addr, addr, key, context)
    }
}

/// `fi_writemsg`: [`fi_write`] described by an `fi_msg_rma`, with operation `flags`.
///
/// # Safety
///
/// The crate's contract; `msg` and the arrays it points to are readable for the call, its
/// local buffers unchanged until the completion is read (or the call returns, with
/// `FI_INJECT`).
#[inline(always)]
pub unsafe fn fi_writemsg(ep: *mut fid_ep, msg: *const fi_msg_rma, flags: u64) -> isize {
    // SAFETY: `ep` is live (contract 1), so `(*ep).rma` is its fi_ops_rma table; the message
    // is the caller's (contract 2).
    unsafe { op!((*ep).rma, fi_ops_rma.writemsg)(ep, msg, flags) }
}

/// `fi_inject_write`: [`fi_write`] of at most `inject_size` bytes; `buf` may be reused on
/// return and no completion is written.
///
/// # Safety
///
/// The crate's contract; `buf[..len]` is readable for the call.
#[inline(always)]
pub unsafe fn fi_inject_write(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    dest_addr: fi_addr_t,
    addr: u64,
    key: u64,
) -> isize {
    // SAFETY: `ep` is live (contract 1), so `(*ep).rma` is its fi_ops_rma table; the buffer
    // is the caller's (contract 2).
    unsafe { op!((*ep).rma, fi_ops_rma.inject)(ep, buf, len, dest_addr, addr, key) }
}

/// `fi_writedata`: [`fi_write`] with `data` delivered to the target as remote CQ data.
///
/// # Safety
///
/// As [`fi_write`].
#[allow(clippy::too_many_arguments)] // libfabric's signature
#[inline(always)]
pub unsafe fn fi_writedata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    desc: *mut c_void,
    data: u64,
    dest_addr: fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    // SAFETY: `ep` is live (contract 1), so `(*ep).rma` is its fi_ops_rma table; the buffer,
    // descriptor and context are the caller's (contract 2).
    unsafe {
        op!((*ep).rma, fi_ops_rma.writedata)(
            ep, buf, len, desc, data, dest_addr, addr, key, context,
        )
    }
}

/// `fi_inject_writedata`: [`fi_inject_write`] with `data` delivered as remote CQ data.
///
/// # Safety
///
/// As [`fi_inject_write`].
#[inline(always)]
pub unsafe fn fi_inject_writedata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest_addr: fi_addr_t,
    addr: u64,
    key: u64,
) -> isize {
    // SAFETY: `ep` is live (contract 1), so `(*ep).rma` is its fi_ops_rma table; the buffer
    // is the caller's (contract 2).
    unsafe { op!((*ep).rma, fi_ops_rma.injectdata)(ep, buf, len, data, dest_addr, addr, key) }
}

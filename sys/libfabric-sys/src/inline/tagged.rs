//! The `static inline` calls of `rdma/fi_tagged.h`: tagged messages, matched by the provider
//! on (source, tag, ignore mask). MPI's point-to-point data path.

use core::ffi::c_void;

use libc::iovec;

use super::op;
use crate::{fi_addr_t, fi_msg_tagged, fid_ep};

/// `fi_trecv`: posts a receive into `buf[..len]` of a message from `src_addr`
/// (`FI_ADDR_UNSPEC`: any source, or the endpoint lacks `FI_DIRECTED_RECV`) whose tag equals
/// `tag` in the bits not set in `ignore`.
///
/// # Safety
///
/// The crate's contract; `buf[..len]` is writable and left alone until the receive's
/// completion is read, `desc` is its memory descriptor (or null when the domain needs none).
#[allow(clippy::too_many_arguments)] // libfabric's signature
#[inline(always)]
pub unsafe fn fi_trecv(
    ep: *mut fid_ep,
    buf: *mut c_void,
    len: usize,
    desc: *mut c_void,
    src_addr: fi_addr_t,
    tag: u64,
    ignore: u64,
    context: *mut c_void,
) -> isize {
    // SAFETY: `ep` is live (contract 1), so `(*ep).tagged` is its fi_ops_tagged table; the
    // buffer, descriptor and context are the caller's (contract 2).
    unsafe {
        op!((*ep).tagged, fi_ops_tagged.recv)(ep, buf, len, desc, src_addr, tag, ignore, context)
    }
}

/// `fi_trecvv`: [`fi_trecv`] into the `count` buffers of `iov`.
///
/// # Safety
///
/// The crate's contract; `iov[..count]` (and `desc[..count]` if not null) are readable for
/// the call, their buffers writable and left alone until the completion is read.
#[allow(clippy::too_many_arguments)] // libfabric's signature
#[inline(always)]
pub unsafe fn fi_trecvv(
    ep: *mut fid_ep,
    iov: *const iovec,
    desc: *mut *mut c_void,
    count: usize,
    src_addr: fi_addr_t,
    tag: u64,
    ignore: u64,
    context: *mut c_void,
) -> isize {
    // SAFETY: `ep` is live (contract 1), so `(*ep).tagged` is its fi_ops_tagged table; the
    // iovecs and context are the caller's (contract 2).
    unsafe {
        op!((*ep).tagged, fi_ops_tagged.recvv)(ep, iov, desc, count, src_addr, tag, ignore, context)
    }
}

/// `fi_trecvmsg`: [`fi_trecv`] described by an `fi_msg_tagged`, with operation `flags`
/// (`FI_PEEK`, `FI_CLAIM`, `FI_DISCARD`, `FI_COMPLETION`, ...).
///
/// # Safety
///
/// The crate's contract; `msg` and the arrays it points to are readable for the call, its
/// buffers writable and left alone until the completion is read. With `FI_PEEK | FI_CLAIM`
/// the context is an `fi_context` that the later `FI_CLAIM` receive passes again (fi_tagged(3)).
#[inline(always)]
pub unsafe fn fi_trecvmsg(ep: *mut fid_ep, msg: *const fi_msg_tagged, flags: u64) -> isize {
    // SAFETY: `ep` is live (contract 1), so `(*ep).tagged` is its fi_ops_tagged table; the
    // message is the caller's (contract 2).
    unsafe { op!((*ep).tagged, fi_ops_tagged.recvmsg)(ep, msg, flags) }
}

/// `fi_tsend`: sends `buf[..len]` to `dest_addr` with tag `tag`.
///
/// # Safety
///
/// The crate's contract; `buf[..len]` is readable and left unchanged until the send's
/// completion is read, `desc` is its memory descriptor (or null when the domain needs none).
#[inline(always)]
pub unsafe fn fi_tsend(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    desc: *mut c_void,
    dest_addr: fi_addr_t,
    tag: u64,
    context: *mut c_void,
) -> isize {
    // SAFETY: `ep` is live (contract 1), so `(*ep).tagged` is its fi_ops_tagged table; the
    // buffer, descriptor and context are the caller's (contract 2).
    unsafe { op!((*ep).tagged, fi_ops_tagged.send)(ep, buf, len, desc, dest_addr, tag, context) }
}

/// `fi_tsendv`: [`fi_tsend`] of the `count` buffers of `iov`, as one message.
///
/// # Safety
///
/// The crate's contract; `iov[..count]` (and `desc[..count]` if not null) are readable for
/// the call, their buffers readable and unchanged until the completion is read.
#[inline(always)]
pub unsafe fn fi_tsendv(
    ep: *mut fid_ep,
    iov: *const iovec,
    desc: *mut *mut c_void,
    count: usize,
    dest_addr: fi_addr_t,
    tag: u64,
    context: *mut c_void,
) -> isize {
    // SAFETY: `ep` is live (contract 1), so `(*ep).tagged` is its fi_ops_tagged table; the
    // iovecs and context are the caller's (contract 2).
    unsafe { op!((*ep).tagged, fi_ops_tagged.sendv)(ep, iov, desc, count, dest_addr, tag, context) }
}

/// `fi_tsendmsg`: [`fi_tsend`] described by an `fi_msg_tagged`, with operation `flags`.
///
/// # Safety
///
/// The crate's contract; `msg` and the arrays it points to are readable for the call, its
/// buffers unchanged until the completion is read (or the call returns, with `FI_INJECT`).
#[inline(always)]
pub unsafe fn fi_tsendmsg(ep: *mut fid_ep, msg: *const fi_msg_tagged, flags: u64) -> isize {
    // SAFETY: `ep` is live (contract 1), so `(*ep).tagged` is its fi_ops_tagged table; the
    // message is the caller's (contract 2).
    unsafe { op!((*ep).tagged, fi_ops_tagged.sendmsg)(ep, msg, flags) }
}

/// `fi_tinject`: sends `buf[..len]` (at most the endpoint's `inject_size`) to `dest_addr`
/// with tag `tag`; the buffer may be reused on return and no completion is written.
///
/// # Safety
///
/// The crate's contract; `buf[..len]` is readable for the call.
#[inline(always)]
pub unsafe fn fi_tinject(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    dest_addr: fi_addr_t,
    tag: u64,
) -> isize {
    // SAFETY: `ep` is live (contract 1), so `(*ep).tagged` is its fi_ops_tagged table; the
    // buffer is the caller's (contract 2).
    unsafe { op!((*ep).tagged, fi_ops_tagged.inject)(ep, buf, len, dest_addr, tag) }
}

/// `fi_tsenddata`: [`fi_tsend`] with `data` delivered as remote CQ data.
///
/// # Safety
///
/// As [`fi_tsend`].
#[allow(clippy::too_many_arguments)] // libfabric's signature
#[inline(always)]
pub unsafe fn fi_tsenddata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    desc: *mut c_void,
    data: u64,
    dest_addr: fi_addr_t,
    tag: u64,
    context: *mut c_void,
) -> isize {
    // SAFETY: `ep` is live (contract 1), so `(*ep).tagged` is its fi_ops_tagged table; the
    // buffer, descriptor and context are the caller's (contract 2).
    unsafe {
        op!((*ep).tagged, fi_ops_tagged.senddata)(ep, buf, len, desc, data, dest_addr, tag, context)
    }
}

/// `fi_tinjectdata`: [`fi_tinject`] with `data` delivered as remote CQ data.
///
/// # Safety
///
/// As [`fi_tinject`].
#[inline(always)]
pub unsafe fn fi_tinjectdata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest_addr: fi_addr_t,
    tag: u64,
) -> isize {
    // SAFETY: `ep` is live (contract 1), so `(*ep).tagged` is its fi_ops_tagged table; the
    // buffer is the caller's (contract 2).
    unsafe { op!((*ep).tagged, fi_ops_tagged.injectdata)(ep, buf, len, data, dest_addr, tag) }
}

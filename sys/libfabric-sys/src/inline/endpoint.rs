//! The `static inline` calls of `rdma/fi_endpoint.h`: opening endpoints (active, passive,
//! scalable, shared contexts), binding and enabling them, their options and cancel, and the
//! untagged message calls (`fi_send`, `fi_recv`, ...).

use core::ffi::{c_int, c_void};
use core::ptr::null_mut;

use libc::iovec;

use super::{checked_op, ep_of, fid_of, op};
use crate::{
    fi_addr_t, fi_alias, fi_info, fi_msg, fi_rx_attr, fi_tx_attr, fid, fid_domain, fid_ep,
    fid_fabric, fid_pep, fid_stx, fid_t, FI_ENABLE, FI_ENOSYS,
};

/// `fi_passive_ep`: opens a passive (listening) endpoint of `fabric` for connection-oriented
/// (`FI_EP_MSG`) endpoints.
///
/// # Safety
///
/// The crate's contract; `info` is an `fi_info` from `fi_getinfo` (or a copy) and `pep`
/// writable.
#[inline(always)]
pub unsafe fn fi_passive_ep(
    fabric: *mut fid_fabric,
    info: *mut fi_info,
    pep: *mut *mut fid_pep,
    context: *mut c_void,
) -> c_int {
    // SAFETY: `fabric` is live (contract 1), so `(*fabric).ops` is its fi_ops_fabric table;
    // the other arguments are the caller's (contract 2).
    unsafe { op!((*fabric).ops, fi_ops_fabric.passive_ep)(fabric, info, pep, context) }
}

/// `fi_endpoint`: opens an active endpoint on `domain` as described by `info`.
///
/// # Safety
///
/// The crate's contract; `info` is an `fi_info` from `fi_getinfo` (or a copy) and `ep`
/// writable.
#[inline(always)]
pub unsafe fn fi_endpoint(
    domain: *mut fid_domain,
    info: *mut fi_info,
    ep: *mut *mut fid_ep,
    context: *mut c_void,
) -> c_int {
    // SAFETY: `domain` is live (contract 1), so `(*domain).ops` is its fi_ops_domain table;
    // the other arguments are the caller's (contract 2).
    unsafe { op!((*domain).ops, fi_ops_domain.endpoint)(domain, info, ep, context) }
}

/// `fi_endpoint2`: [`fi_endpoint`] with open flags; without flags it is `fi_endpoint`, and
/// `-FI_ENOSYS` if the provider's table predates `endpoint2`.
///
/// # Safety
///
/// As [`fi_endpoint`].
#[inline(always)]
pub unsafe fn fi_endpoint2(
    domain: *mut fid_domain,
    info: *mut fi_info,
    ep: *mut *mut fid_ep,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    if flags == 0 {
        // SAFETY: the caller's guarantees for fi_endpoint2 are those of fi_endpoint.
        return unsafe { fi_endpoint(domain, info, ep, context) };
    }
    // SAFETY: `domain` is live (contract 1), so `(*domain).ops` is its fi_ops_domain table,
    // whose `size` bounds the read (checked_op!); the other arguments are the caller's.
    unsafe {
        match checked_op!((*domain).ops, fi_ops_domain.endpoint2) {
            Some(f) => f(domain, info, ep, flags, context),
            None => -FI_ENOSYS,
        }
    }
}

/// `fi_scalable_ep`: opens a scalable endpoint (several transmit and receive contexts behind
/// one address) on `domain`.
///
/// # Safety
///
/// The crate's contract; `info` is an `fi_info` from `fi_getinfo` (or a copy) and `sep`
/// writable.
#[inline(always)]
pub unsafe fn fi_scalable_ep(
    domain: *mut fid_domain,
    info: *mut fi_info,
    sep: *mut *mut fid_ep,
    context: *mut c_void,
) -> c_int {
    // SAFETY: `domain` is live (contract 1), so `(*domain).ops` is its fi_ops_domain table;
    // the other arguments are the caller's (contract 2).
    unsafe { op!((*domain).ops, fi_ops_domain.scalable_ep)(domain, info, sep, context) }
}

/// `fi_ep_bind`: binds an object (CQ, counter, AV, EQ, shared context) to an endpoint, with
/// `flags` saying for what (`FI_TRANSMIT | FI_RECV`, ...).
///
/// # Safety
///
/// The crate's contract (for both objects).
#[inline(always)]
pub unsafe fn fi_ep_bind(ep: *mut fid_ep, bfid: *mut fid, flags: u64) -> c_int {
    // SAFETY: `ep` is live (contract 1), so its embedded fid's `ops` is its fi_ops table.
    unsafe { op!((*ep).fid.ops, fi_ops.bind)(fid_of!(ep), bfid, flags) }
}

/// `fi_pep_bind`: binds an object (an EQ) to a passive endpoint.
///
/// # Safety
///
/// The crate's contract (for both objects).
#[inline(always)]
pub unsafe fn fi_pep_bind(pep: *mut fid_pep, bfid: *mut fid, flags: u64) -> c_int {
    // SAFETY: `pep` is live (contract 1), so its embedded fid's `ops` is its fi_ops table.
    unsafe { op!((*pep).fid.ops, fi_ops.bind)(fid_of!(pep), bfid, flags) }
}

/// `fi_scalable_ep_bind`: binds an object (an AV, an EQ) to a scalable endpoint.
///
/// # Safety
///
/// The crate's contract (for both objects).
#[inline(always)]
pub unsafe fn fi_scalable_ep_bind(sep: *mut fid_ep, bfid: *mut fid, flags: u64) -> c_int {
    // SAFETY: `sep` is live (contract 1), so its embedded fid's `ops` is its fi_ops table.
    unsafe { op!((*sep).fid.ops, fi_ops.bind)(fid_of!(sep), bfid, flags) }
}

/// `fi_enable`: enables an endpoint once its objects are bound
/// (`fi_control(FI_ENABLE, NULL)`); data transfers need it.
///
/// # Safety
///
/// The crate's contract.
#[inline(always)]
pub unsafe fn fi_enable(ep: *mut fid_ep) -> c_int {
    // SAFETY: `ep` is live (contract 1), so its fid's `ops` is its fi_ops table; FI_ENABLE
    // takes no argument (NULL).
    unsafe { op!((*ep).fid.ops, fi_ops.control)(fid_of!(ep), FI_ENABLE, null_mut()) }
}

/// `fi_cancel`: asks the endpoint to cancel the operation posted with `context`; if it is
/// canceled, its completion is an error entry with `FI_ECANCELED`.
///
/// # Safety
///
/// The crate's contract: `fid` is `&(*ep).fid` of a live endpoint (`container_of`, as in C).
#[inline(always)]
pub unsafe fn fi_cancel(fid: fid_t, context: *mut c_void) -> isize {
    let ep = ep_of(fid);
    // SAFETY: `fid` is embedded in a live fid_ep (contract 1), so `ep` is that endpoint and
    // `(*ep).ops` its fi_ops_ep table; `context` is only compared by the provider.
    unsafe { op!((*ep).ops, fi_ops_ep.cancel)(fid, context) }
}

/// `fi_setopt`: sets endpoint option `optname` at `level` (`FI_OPT_ENDPOINT`) from
/// `optval[..optlen]`.
///
/// # Safety
///
/// The crate's contract: `fid` is `&(*ep).fid` of a live endpoint; `optval` is readable for
/// `optlen` bytes and of the type the option requires.
#[inline(always)]
pub unsafe fn fi_setopt(
    fid: fid_t,
    level: c_int,
    optname: c_int,
    optval: *const c_void,
    optlen: usize,
) -> c_int {
    let ep = ep_of(fid);
    // SAFETY: `fid` is embedded in a live fid_ep (contract 1), so `ep` is that endpoint and
    // `(*ep).ops` its fi_ops_ep table; the option value is the caller's (contract 2).
    unsafe { op!((*ep).ops, fi_ops_ep.setopt)(fid, level, optname, optval, optlen) }
}

/// `fi_getopt`: reads endpoint option `optname` at `level` into `optval` (`*optlen` bytes;
/// set to the option's length).
///
/// # Safety
///
/// The crate's contract: `fid` is `&(*ep).fid` of a live endpoint; `optlen` is readable and
/// writable, `optval` writable for `*optlen` bytes.
#[inline(always)]
pub unsafe fn fi_getopt(
    fid: fid_t,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    optlen: *mut usize,
) -> c_int {
    let ep = ep_of(fid);
    // SAFETY: `fid` is embedded in a live fid_ep (contract 1), so `ep` is that endpoint and
    // `(*ep).ops` its fi_ops_ep table; the out-pointers are the caller's (contract 2).
    unsafe { op!((*ep).ops, fi_ops_ep.getopt)(fid, level, optname, optval, optlen) }
}

/// `fi_ep_alias`: a second endpoint for the same one with other default operation flags
/// (`fi_alias` on its fid); on success `*alias_ep` is set.
///
/// # Safety
///
/// The crate's contract; `alias_ep` is writable.
#[inline(always)]
pub unsafe fn fi_ep_alias(ep: *mut fid_ep, alias_ep: *mut *mut fid_ep, flags: u64) -> c_int {
    let mut alias: *mut fid = null_mut();
    // SAFETY: `ep` is live (contract 1); `alias` lives on this frame for the whole call.
    let ret = unsafe { fi_alias(fid_of!(ep), &mut alias, flags) };
    if ret == 0 {
        // SAFETY: on success the provider returned the fid embedded in the alias endpoint
        // (container_of, as in C); `alias_ep` is writable (caller).
        unsafe { *alias_ep = ep_of(alias) };
    }
    ret
}

/// `fi_tx_context`: opens transmit context `idx` of a scalable endpoint.
///
/// # Safety
///
/// The crate's contract; `attr` is readable (or null for the endpoint's defaults), `tx_ep`
/// writable.
#[inline(always)]
pub unsafe fn fi_tx_context(
    ep: *mut fid_ep,
    idx: c_int,
    attr: *mut fi_tx_attr,
    tx_ep: *mut *mut fid_ep,
    context: *mut c_void,
) -> c_int {
    // SAFETY: `ep` is live (contract 1), so `(*ep).ops` is its fi_ops_ep table; the other
    // arguments are the caller's (contract 2).
    unsafe { op!((*ep).ops, fi_ops_ep.tx_ctx)(ep, idx, attr, tx_ep, context) }
}

/// `fi_rx_context`: opens receive context `idx` of a scalable endpoint.
///
/// # Safety
///
/// The crate's contract; `attr` is readable (or null for the endpoint's defaults), `rx_ep`
/// writable.
#[inline(always)]
pub unsafe fn fi_rx_context(
    ep: *mut fid_ep,
    idx: c_int,
    attr: *mut fi_rx_attr,
    rx_ep: *mut *mut fid_ep,
    context: *mut c_void,
) -> c_int {
    // SAFETY: `ep` is live (contract 1), so `(*ep).ops` is its fi_ops_ep table; the other
    // arguments are the caller's (contract 2).
    unsafe { op!((*ep).ops, fi_ops_ep.rx_ctx)(ep, idx, attr, rx_ep, context) }
}

/// `fi_rx_size_left`: deprecated in libfabric (as in C): the receive operations the endpoint
/// can still take.
///
/// # Safety
///
/// The crate's contract.
#[deprecated(note = "deprecated by libfabric (FI_DEPRECATED_FUNC)")]
#[inline(always)]
pub unsafe fn fi_rx_size_left(ep: *mut fid_ep) -> isize {
    // SAFETY: `ep` is live (contract 1), so `(*ep).ops` is its fi_ops_ep table.
    unsafe { op!((*ep).ops, fi_ops_ep.rx_size_left)(ep) }
}

/// `fi_tx_size_left`: deprecated in libfabric (as in C): the transmit operations the endpoint
/// can still take.
///
/// # Safety
///
/// The crate's contract.
#[deprecated(note = "deprecated by libfabric (FI_DEPRECATED_FUNC)")]
#[inline(always)]
pub unsafe fn fi_tx_size_left(ep: *mut fid_ep) -> isize {
    // SAFETY: `ep` is live (contract 1), so `(*ep).ops` is its fi_ops_ep table.
    unsafe { op!((*ep).ops, fi_ops_ep.tx_size_left)(ep) }
}

/// `fi_stx_context`: opens a shared transmit context on `domain`.
///
/// # Safety
///
/// The crate's contract; `attr` is readable, `stx` writable.
#[inline(always)]
pub unsafe fn fi_stx_context(
    domain: *mut fid_domain,
    attr: *mut fi_tx_attr,
    stx: *mut *mut fid_stx,
    context: *mut c_void,
) -> c_int {
    // SAFETY: `domain` is live (contract 1), so `(*domain).ops` is its fi_ops_domain table;
    // the other arguments are the caller's (contract 2).
    unsafe { op!((*domain).ops, fi_ops_domain.stx_ctx)(domain, attr, stx, context) }
}

/// `fi_srx_context`: opens a shared receive context on `domain`.
///
/// # Safety
///
/// The crate's contract; `attr` is readable, `rx_ep` writable.
#[inline(always)]
pub unsafe fn fi_srx_context(
    domain: *mut fid_domain,
    attr: *mut fi_rx_attr,
    rx_ep: *mut *mut fid_ep,
    context: *mut c_void,
) -> c_int {
    // SAFETY: `domain` is live (contract 1), so `(*domain).ops` is its fi_ops_domain table;
    // the other arguments are the caller's (contract 2).
    unsafe { op!((*domain).ops, fi_ops_domain.srx_ctx)(domain, attr, rx_ep, context) }
}

/// `fi_recv`: posts a receive of an untagged message into `buf[..len]` from `src_addr`
/// (`FI_ADDR_UNSPEC`: any source).
///
/// # Safety
///
/// The crate's contract; `buf[..len]` is writable and left alone until the receive's
/// completion is read, `desc` is its memory descriptor (or null when the domain needs none).
#[inline(always)]
pub unsafe fn fi_recv(
    ep: *mut fid_ep,
    buf: *mut c_void,
    len: usize,
    desc: *mut c_void,
    src_addr: fi_addr_t,
    context: *mut c_void,
) -> isize {
    // SAFETY: `ep` is live (contract 1), so `(*ep).msg` is its fi_ops_msg table; the buffer,
    // descriptor and context are the caller's (contract 2).
    unsafe { op!((*ep).msg, fi_ops_msg.recv)(ep, buf, len, desc, src_addr, context) }
}

/// `fi_recvv`: [`fi_recv`] into the `count` buffers of `iov`.
///
/// # Safety
///
/// The crate's contract; `iov[..count]` (and `desc[..count]` if not null) are readable for
/// the call, their buffers writable and left alone until the completion is read.
#[inline(always)]
pub unsafe fn fi_recvv(
    ep: *mut fid_ep,
    iov: *const iovec,
    desc: *mut *mut c_void,
    count: usize,
    src_addr: fi_addr_t,
    context: *mut c_void,
) -> isize {
    // SAFETY: `ep` is live (contract 1), so `(*ep).msg` is its fi_ops_msg table; the iovecs
    // and context are the caller's (contract 2).
    unsafe { op!((*ep).msg, fi_ops_msg.recvv)(ep, iov, desc, count, src_addr, context) }
}

/// `fi_recvmsg`: [`fi_recv`] described by an `fi_msg`, with operation `flags`.
///
/// # Safety
///
/// The crate's contract; `msg` and the arrays it points to are readable for the call, its
/// buffers writable and left alone until the completion is read.
#[inline(always)]
pub unsafe fn fi_recvmsg(ep: *mut fid_ep, msg: *const fi_msg, flags: u64) -> isize {
    // SAFETY: `ep` is live (contract 1), so `(*ep).msg` is its fi_ops_msg table; the message
    // is the caller's (contract 2).
    unsafe { op!((*ep).msg, fi_ops_msg.recvmsg)(ep, msg, flags) }
}

/// `fi_send`: sends `buf[..len]` as an untagged message to `dest_addr`.
///
/// # Safety
///
/// The crate's contract; `buf[..len]` is readable and left unchanged until the send's
/// completion is read, `desc` is its memory descriptor (or null when the domain needs none).
#[inline(always)]
pub unsafe fn fi_send(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    desc: *mut c_void,
    dest_addr: fi_addr_t,
    context: *mut c_void,
) -> isize {
    // SAFETY: `ep` is live (contract 1), so `(*ep).msg` is its fi_ops_msg table; the buffer,
    // descriptor and context are the caller's (contract 2).
    unsafe { op!((*ep).msg, fi_ops_msg.send)(ep, buf, len, desc, dest_addr, context) }
}

/// `fi_sendv`: [`fi_send`] of the `count` buffers of `iov`, as one message.
///
/// # Safety
///
/// The crate's contract; `iov[..count]` (and `desc[..count]` if not null) are readable for
/// the call, their buffers readable and unchanged until the completion is read.
#[inline(always)]
pub unsafe fn fi_sendv(
    ep: *mut fid_ep,
    iov: *const iovec,
    desc: *mut *mut c_void,
    count: usize,
    dest_addr: fi_addr_t,
    context: *mut c_void,
) -> isize {
    // SAFETY: `ep` is live (contract 1), so `(*ep).msg` is its fi_ops_msg table; the iovecs
    // and context are the caller's (contract 2).
    unsafe { op!((*ep).msg, fi_ops_msg.sendv)(ep, iov, desc, count, dest_addr, context) }
}

/// `fi_sendmsg`: [`fi_send`] described by an `fi_msg`, with operation `flags`.
///
/// # Safety
///
/// The crate's contract; `msg` and the arrays it points to are readable for the call, its
/// buffers unchanged until the completion is read (or the call returns, with `FI_INJECT`).
#[inline(always)]
pub unsafe fn fi_sendmsg(ep: *mut fid_ep, msg: *const fi_msg, flags: u64) -> isize {
    // SAFETY: `ep` is live (contract 1), so `(*ep).msg` is its fi_ops_msg table; the message
    // is the caller's (contract 2).
    unsafe { op!((*ep).msg, fi_ops_msg.sendmsg)(ep, msg, flags) }
}

/// `fi_inject`: sends `buf[..len]` (at most the endpoint's `inject_size`) to `dest_addr`;
/// the buffer may be reused on return and no completion is written.
///
/// # Safety
///
/// The crate's contract; `buf[..len]` is readable for the call.
#[inline(always)]
pub unsafe fn fi_inject(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    dest_addr: fi_addr_t,
) -> isize {
    // SAFETY: `ep` is live (contract 1), so `(*ep).msg` is its fi_ops_msg table; the buffer
    // is the caller's (contract 2).
    unsafe { op!((*ep).msg, fi_ops_msg.inject)(ep, buf, len, dest_addr) }
}

/// `fi_senddata`: [`fi_send`] with `data` delivered as remote CQ data.
///
/// # Safety
///
/// As [`fi_send`].
#[inline(always)]
pub unsafe fn fi_senddata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    desc: *mut c_void,
    data: u64,
    dest_addr: fi_addr_t,
    context: *mut c_void,
) -> isize {
    // SAFETY: `ep` is live (contract 1), so `(*ep).msg` is its fi_ops_msg table; the buffer,
    // descriptor and context are the caller's (contract 2).
    unsafe { op!((*ep).msg, fi_ops_msg.senddata)(ep, buf, len, desc, data, dest_addr, context) }
}

/// `fi_injectdata`: [`fi_inject`] with `data` delivered as remote CQ data.
///
/// # Safety
///
/// As [`fi_inject`].
#[inline(always)]
pub unsafe fn fi_injectdata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest_addr: fi_addr_t,
) -> isize {
    // SAFETY: `ep` is live (contract 1), so `(*ep).msg` is its fi_ops_msg table; the buffer
    // is the caller's (contract 2).
    unsafe { op!((*ep).msg, fi_ops_msg.injectdata)(ep, buf, len, data, dest_addr) }
}

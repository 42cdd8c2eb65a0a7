//! The `static inline` calls of `rdma/fi_domain.h`: opening a domain and the objects it makes
//! (CQs, counters, AVs, poll and wait sets), memory registration, address vectors.

use core::ffi::{c_char, c_int, c_void};
use core::ptr::{addr_of_mut, null_mut};

use libc::iovec;

use super::{checked_op, fid_of, op};
// `struct fi_mr_raw_attr` and `struct fi_mr_map_raw` share their names with calls below.
use crate::bindings::{fi_mr_map_raw as fi_mr_map_raw_arg, fi_mr_raw_attr as fi_mr_raw_attr_arg};
use crate::{
    fi_addr_t, fi_av_attr, fi_cntr_attr, fi_cq_attr, fi_info, fi_mr_attr, fi_mr_modify,
    fi_poll_attr, fi_wait_attr, fid, fid_av, fid_cntr, fid_cq, fid_domain, fid_fabric, fid_mr,
    fid_poll, fid_wait, FI_ENABLE, FI_ENOSYS, FI_GET_RAW_MR, FI_MAP_RAW_MR, FI_REFRESH,
    FI_UNMAP_KEY,
};

/// `fi_domain`: opens a domain (a NIC's resources) of `fabric` as described by `info`.
///
/// # Safety
///
/// The crate's contract; `info` is an `fi_info` from `fi_getinfo` (or a copy) and `domain`
/// writable.
#[inline(always)]
pub unsafe fn fi_domain(
    fabric: *mut fid_fabric,
    info: *mut fi_info,
    domain: *mut *mut fid_domain,
    context: *mut c_void,
) -> c_int {
    // SAFETY: `fabric` is live (contract 1), so `(*fabric).ops` is its fi_ops_fabric table;
    // the other arguments are the caller's (contract 2).
    unsafe { op!((*fabric).ops, fi_ops_fabric.domain)(fabric, info, domain, context) }
}

/// `fi_domain2`: [`fi_domain`] with open flags; without flags it is `fi_domain`, and
/// `-FI_ENOSYS` if the provider's table predates `domain2`.
///
/// # Safety
///
/// As [`fi_domain`].
#[inline(always)]
pub unsafe fn fi_domain2(
    fabric: *mut fid_fabric,
    info: *mut fi_info,
    domain: *mut *mut fid_domain,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    if flags == 0 {
        // SAFETY: the caller's guarantees for fi_domain2 are those of fi_domain.
        return unsafe { fi_domain(fabric, info, domain, context) };
    }
    // SAFETY: `fabric` is live (contract 1), so `(*fabric).ops` is its fi_ops_fabric table,
    // whose `size` bounds the read (checked_op!); the other arguments are the caller's.
    unsafe {
        match checked_op!((*fabric).ops, fi_ops_fabric.domain2) {
            Some(f) => f(fabric, info, domain, flags, context),
            None => -FI_ENOSYS,
        }
    }
}

/// `fi_domain_bind`: binds an object (such as an EQ for asynchronous MR events) to a domain.
///
/// # Safety
///
/// The crate's contract (for both objects).
#[inline(always)]
pub unsafe fn fi_domain_bind(domain: *mut fid_domain, fid: *mut fid, flags: u64) -> c_int {
    // SAFETY: `domain` is live (contract 1), so its embedded fid's `ops` is its fi_ops table.
    unsafe { op!((*domain).fid.ops, fi_ops.bind)(fid_of!(domain), fid, flags) }
}

/// `fi_cq_open`: opens a completion queue on `domain`.
///
/// # Safety
///
/// The crate's contract; `attr` is readable (and may be updated by the provider), `cq`
/// writable.
#[inline(always)]
pub unsafe fn fi_cq_open(
    domain: *mut fid_domain,
    attr: *mut fi_cq_attr,
    cq: *mut *mut fid_cq,
    context: *mut c_void,
) -> c_int {
    // SAFETY: `domain` is live (contract 1), so `(*domain).ops` is its fi_ops_domain table;
    // the other arguments are the caller's (contract 2).
    unsafe { op!((*domain).ops, fi_ops_domain.cq_open)(domain, attr, cq, context) }
}

/// `fi_cntr_open`: opens a completion counter on `domain`.
///
/// # Safety
///
/// The crate's contract; `attr` is readable, `cntr` writable.
#[inline(always)]
pub unsafe fn fi_cntr_open(
    domain: *mut fid_domain,
    attr: *mut fi_cntr_attr,
    cntr: *mut *mut fid_cntr,
    context: *mut c_void,
) -> c_int {
    // SAFETY: `domain` is live (contract 1), so `(*domain).ops` is its fi_ops_domain table;
    // the other arguments are the caller's (contract 2).
    unsafe { op!((*domain).ops, fi_ops_domain.cntr_open)(domain, attr, cntr, context) }
}

/// `fi_wait_open`: opens a wait set on `fabric`.
///
/// # Safety
///
/// The crate's contract; `attr` is readable, `waitset` writable.
#[inline(always)]
pub unsafe fn fi_wait_open(
    fabric: *mut fid_fabric,
    attr: *mut fi_wait_attr,
    waitset: *mut *mut fid_wait,
) -> c_int {
    // SAFETY: `fabric` is live (contract 1), so `(*fabric).ops` is its fi_ops_fabric table;
    // the other arguments are the caller's (contract 2).
    unsafe { op!((*fabric).ops, fi_ops_fabric.wait_open)(fabric, attr, waitset) }
}

/// `fi_poll_open`: opens a poll set on `domain`.
///
/// # Safety
///
/// The crate's contract; `attr` is readable, `pollset` writable.
#[inline(always)]
pub unsafe fn fi_poll_open(
    domain: *mut fid_domain,
    attr: *mut fi_poll_attr,
    pollset: *mut *mut fid_poll,
) -> c_int {
    // SAFETY: `domain` is live (contract 1), so `(*domain).ops` is its fi_ops_domain table;
    // the other arguments are the caller's (contract 2).
    unsafe { op!((*domain).ops, fi_ops_domain.poll_open)(domain, attr, pollset) }
}

/// `fi_mr_reg`: registers `buf[..len]` for the accesses `acs` (`FI_SEND`, `FI_RECV`,
/// `FI_READ`, `FI_REMOTE_WRITE`, ...).
///
/// # Safety
///
/// The crate's contract; `buf[..len]` stays allocated until the region is closed, `mr` is
/// writable.
#[allow(clippy::too_many_arguments)] // libfabric's signature
#[inline(always)]
pub unsafe fn fi_mr_reg(
    domain: *mut fid_domain,
    buf: *const c_void,
    len: usize,
    acs: u64,
    offset: u64,
    requested_key: u64,
    flags: u64,
    mr: *mut *mut fid_mr,
    context: *mut c_void,
) -> c_int {
    // SAFETY: `domain` is live (contract 1), so `(*domain).mr` is its fi_ops_mr table; the
    // other arguments are the caller's (contract 2).
    unsafe {
        op!((*domain).mr, fi_ops_mr.reg)(
            fid_of!(domain),
            buf,
            len,
            acs,
            offset,
            requested_key,
            flags,
            mr,
            context,
        )
    }
}

/// `fi_mr_regv`: registers the `count` buffers of `iov` as one region.
///
/// # Safety
///
/// The crate's contract; `iov[..count]` is readable and its buffers stay allocated until the
/// region is closed, `mr` is writable.
#[allow(clippy::too_many_arguments)] // libfabric's signature
#[inline(always)]
pub unsafe fn fi_mr_regv(
    domain: *mut fid_domain,
    iov: *const iovec,
    count: usize,
    acs: u64,
    offset: u64,
    requested_key: u64,
    flags: u64,
    mr: *mut *mut fid_mr,
    context: *mut c_void,
) -> c_int {
    // SAFETY: `domain` is live (contract 1), so `(*domain).mr` is its fi_ops_mr table; the
    // other arguments are the caller's (contract 2).
    unsafe {
        op!((*domain).mr, fi_ops_mr.regv)(
            fid_of!(domain),
            iov,
            count,
            acs,
            offset,
            requested_key,
            flags,
            mr,
            context,
        )
    }
}

/// `fi_mr_regattr`: registers memory described by an `fi_mr_attr`.
///
/// # Safety
///
/// The crate's contract; `attr` and its iovecs are readable, the memory stays allocated until
/// the region is closed, `mr` is writable.
#[inline(always)]
pub unsafe fn fi_mr_regattr(
    domain: *mut fid_domain,
    attr: *const fi_mr_attr,
    flags: u64,
    mr: *mut *mut fid_mr,
) -> c_int {
    // SAFETY: `domain` is live (contract 1), so `(*domain).mr` is its fi_ops_mr table; the
    // other arguments are the caller's (contract 2).
    unsafe { op!((*domain).mr, fi_ops_mr.regattr)(fid_of!(domain), attr, flags, mr) }
}

/// `fi_mr_desc`: the region's local descriptor, the `desc` argument of data transfers.
///
/// # Safety
///
/// The crate's contract (`mr` is live).
#[inline(always)]
pub unsafe fn fi_mr_desc(mr: *mut fid_mr) -> *mut c_void {
    // SAFETY: `mr` is a live memory region (contract 1), so it can be read.
    unsafe { (*mr).mem_desc }
}

/// `fi_mr_key`: the region's remote key, for peers' RMA.
///
/// # Safety
///
/// The crate's contract (`mr` is live).
#[inline(always)]
pub unsafe fn fi_mr_key(mr: *mut fid_mr) -> u64 {
    // SAFETY: `mr` is a live memory region (contract 1), so it can be read.
    unsafe { (*mr).key }
}

/// `fi_mr_raw_attr`: the region's raw key and base address (`FI_MR_RAW` providers).
///
/// # Safety
///
/// The crate's contract; `base_addr` and `key_size` are writable, `raw_key` writable for
/// `*key_size` bytes.
#[inline(always)]
pub unsafe fn fi_mr_raw_attr(
    mr: *mut fid_mr,
    base_addr: *mut u64,
    raw_key: *mut u8,
    key_size: *mut usize,
    flags: u64,
) -> c_int {
    let mut attr = fi_mr_raw_attr_arg {
        flags,
        base_addr,
        raw_key,
        key_size,
    };
    // SAFETY: `mr` is live (contract 1), so its fid's `ops` is its fi_ops table; FI_GET_RAW_MR
    // takes a `struct fi_mr_raw_attr *`, and `attr` lives on this frame for the whole call.
    unsafe {
        op!((*mr).fid.ops, fi_ops.control)(fid_of!(mr), FI_GET_RAW_MR, addr_of_mut!(attr).cast())
    }
}

/// `fi_mr_map_raw`: turns a peer's raw key into a key usable in RMA calls.
///
/// # Safety
///
/// The crate's contract; `raw_key[..key_size]` is readable and `key` writable.
#[inline(always)]
pub unsafe fn fi_mr_map_raw(
    domain: *mut fid_domain,
    base_addr: u64,
    raw_key: *mut u8,
    key_size: usize,
    key: *mut u64,
    flags: u64,
) -> c_int {
    let mut map = fi_mr_map_raw_arg {
        flags,
        base_addr,
        raw_key,
        key_size,
        key,
    };
    // SAFETY: `domain` is live (contract 1), so its fid's `ops` is its fi_ops table;
    // FI_MAP_RAW_MR takes a `struct fi_mr_map_raw *`, and `map` lives on this frame for the
    // whole call.
    unsafe {
        op!((*domain).fid.ops, fi_ops.control)(
            fid_of!(domain),
            FI_MAP_RAW_MR,
            addr_of_mut!(map).cast(),
        )
    }
}

/// `fi_mr_unmap_key`: releases a key made by [`fi_mr_map_raw`].
///
/// # Safety
///
/// The crate's contract.
#[inline(always)]
pub unsafe fn fi_mr_unmap_key(domain: *mut fid_domain, key: u64) -> c_int {
    let mut key = key;
    // SAFETY: `domain` is live (contract 1), so its fid's `ops` is its fi_ops table;
    // FI_UNMAP_KEY takes a `uint64_t *`, and `key` lives on this frame for the whole call.
    unsafe {
        op!((*domain).fid.ops, fi_ops.control)(
            fid_of!(domain),
            FI_UNMAP_KEY,
            addr_of_mut!(key).cast(),
        )
    }
}

/// `fi_mr_bind`: binds a region to an endpoint or counter (`FI_MR_ENDPOINT` domains).
///
/// # Safety
///
/// The crate's contract (for both objects).
#[inline(always)]
pub unsafe fn fi_mr_bind(mr: *mut fid_mr, bfid: *mut fid, flags: u64) -> c_int {
    // SAFETY: `mr` is live (contract 1), so its fid's `ops` is its fi_ops table.
    unsafe { op!((*mr).fid.ops, fi_ops.bind)(fid_of!(mr), bfid, flags) }
}

/// `fi_mr_refresh`: tells the provider the pages behind a region changed
/// (`fi_control(FI_REFRESH)` with a zeroed `fi_mr_modify`, as C's `memset`).
///
/// # Safety
///
/// The crate's contract; `iov[..count]` is readable.
#[allow(clippy::field_reassign_with_default)] // see the body
#[inline(always)]
pub unsafe fn fi_mr_refresh(mr: *mut fid_mr, iov: *const iovec, count: usize, flags: u64) -> c_int {
    // bindgen's Default zero-fills the whole struct, padding included, like C's memset; the
    // fields are then set one by one, as in C (struct-update syntax would not keep the
    // padding zeroed).
    let mut modify = fi_mr_modify::default();
    modify.flags = flags;
    modify.attr.mr_iov = iov;
    modify.attr.iov_count = count;
    // SAFETY: `mr` is live (contract 1), so its fid's `ops` is its fi_ops table; FI_REFRESH
    // takes a `struct fi_mr_modify *`, and `modify` lives on this frame for the whole call.
    unsafe {
        op!((*mr).fid.ops, fi_ops.control)(fid_of!(mr), FI_REFRESH, addr_of_mut!(modify).cast())
    }
}

/// `fi_mr_enable`: enables a region once bound (`FI_MR_ENDPOINT` domains).
///
/// # Safety
///
/// The crate's contract.
#[inline(always)]
pub unsafe fn fi_mr_enable(mr: *mut fid_mr) -> c_int {
    // SAFETY: `mr` is live (contract 1), so its fid's `ops` is its fi_ops table; FI_ENABLE
    // takes no argument (NULL).
    unsafe { op!((*mr).fid.ops, fi_ops.control)(fid_of!(mr), FI_ENABLE, null_mut()) }
}

/// `fi_av_open`: opens an address vector on `domain`.
///
/// # Safety
///
/// The crate's contract; `attr` is readable, `av` writable.
#[inline(always)]
pub unsafe fn fi_av_open(
    domain: *mut fid_domain,
    attr: *mut fi_av_attr,
    av: *mut *mut fid_av,
    context: *mut c_void,
) -> c_int {
    // SAFETY: `domain` is live (contract 1), so `(*domain).ops` is its fi_ops_domain table;
    // the other arguments are the caller's (contract 2).
    unsafe { op!((*domain).ops, fi_ops_domain.av_open)(domain, attr, av, context) }
}

/// `fi_av_bind`: binds an EQ to an address vector (for asynchronous inserts).
///
/// # Safety
///
/// The crate's contract (for both objects).
#[inline(always)]
pub unsafe fn fi_av_bind(av: *mut fid_av, fid: *mut fid, flags: u64) -> c_int {
    // SAFETY: `av` is live (contract 1), so its fid's `ops` is its fi_ops table.
    unsafe { op!((*av).fid.ops, fi_ops.bind)(fid_of!(av), fid, flags) }
}

/// `fi_av_insert`: inserts `count` endpoint names (as from `fi_getname`) into the AV, writing
/// their `fi_addr_t`s to `fi_addr`; returns how many were inserted.
///
/// # Safety
///
/// The crate's contract; `addr` holds `count` names of the AV's address format, `fi_addr` is
/// writable for `count` entries (or null with `FI_AV_USER_ID` semantics as documented).
#[inline(always)]
pub unsafe fn fi_av_insert(
    av: *mut fid_av,
    addr: *const c_void,
    count: usize,
    fi_addr: *mut fi_addr_t,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    // SAFETY: `av` is live (contract 1), so `(*av).ops` is its fi_ops_av table; the other
    // arguments are the caller's (contract 2).
    unsafe { op!((*av).ops, fi_ops_av.insert)(av, addr, count, fi_addr, flags, context) }
}

/// `fi_av_insertsvc`: inserts the address of a node and service (host and port) into the AV.
///
/// # Safety
///
/// The crate's contract; `node` and `service` are NUL-terminated strings, `fi_addr` writable.
#[inline(always)]
pub unsafe fn fi_av_insertsvc(
    av: *mut fid_av,
    node: *const c_char,
    service: *const c_char,
    fi_addr: *mut fi_addr_t,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    // SAFETY: `av` is live (contract 1), so `(*av).ops` is its fi_ops_av table; the other
    // arguments are the caller's (contract 2).
    unsafe { op!((*av).ops, fi_ops_av.insertsvc)(av, node, service, fi_addr, flags, context) }
}

/// `fi_av_insertsym`: inserts `nodecnt * svccnt` addresses of consecutive nodes and services.
///
/// # Safety
///
/// The crate's contract; `node` and `service` are NUL-terminated strings, `fi_addr` writable
/// for `nodecnt * svccnt` entries.
#[allow(clippy::too_many_arguments)] // libfabric's signature
#[inline(always)]
pub unsafe fn fi_av_insertsym(
    av: *mut fid_av,
    node: *const c_char,
    nodecnt: usize,
    service: *const c_char,
    svccnt: usize,
    fi_addr: *mut fi_addr_t,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    // SAFETY: `av` is live (contract 1), so `(*av).ops` is its fi_ops_av table; the other
    // arguments are the caller's (contract 2).
    unsafe {
        op!((*av).ops, fi_ops_av.insertsym)(
            av, node, nodecnt, service, svccnt, fi_addr, flags, context,
        )
    }
}

/// `fi_av_remove`: removes `count` addresses from the AV.
///
/// # Safety
///
/// The crate's contract; `fi_addr[..count]` is readable.
#[inline(always)]
pub unsafe fn fi_av_remove(
    av: *mut fid_av,
    fi_addr: *mut fi_addr_t,
    count: usize,
    flags: u64,
) -> c_int {
    // SAFETY: `av` is live (contract 1), so `(*av).ops` is its fi_ops_av table; the other
    // arguments are the caller's (contract 2).
    unsafe { op!((*av).ops, fi_ops_av.remove)(av, fi_addr, count, flags) }
}

/// `fi_av_lookup`: the endpoint name behind `fi_addr`, into `addr` (`*addrlen` bytes; set to
/// the name's length).
///
/// # Safety
///
/// The crate's contract; `addrlen` is readable and writable, `addr` writable for `*addrlen`
/// bytes.
#[inline(always)]
pub unsafe fn fi_av_lookup(
    av: *mut fid_av,
    fi_addr: fi_addr_t,
    addr: *mut c_void,
    addrlen: *mut usize,
) -> c_int {
    // SAFETY: `av` is live (contract 1), so `(*av).ops` is its fi_ops_av table; the other
    // arguments are the caller's (contract 2).
    unsafe { op!((*av).ops, fi_ops_av.lookup)(av, fi_addr, addr, addrlen) }
}

/// `fi_av_straddr`: an endpoint name as a printable string, into `buf` (`*len` bytes).
///
/// # Safety
///
/// The crate's contract; `addr` is a name of the AV's format, `len` readable and writable,
/// `buf` writable for `*len` bytes.
#[inline(always)]
pub unsafe fn fi_av_straddr(
    av: *mut fid_av,
    addr: *const c_void,
    buf: *mut c_char,
    len: *mut usize,
) -> *const c_char {
    // SAFETY: `av` is live (contract 1), so `(*av).ops` is its fi_ops_av table; the other
    // arguments are the caller's (contract 2).
    unsafe { op!((*av).ops, fi_ops_av.straddr)(av, addr, buf, len) }
}

/// `fi_rx_addr`: the address of receive context `rx_index` of a scalable endpoint at
/// `fi_addr`, for an AV opened with `rx_ctx_bits` (1 to 64) context bits.
#[inline(always)]
pub const fn fi_rx_addr(fi_addr: fi_addr_t, rx_index: c_int, rx_ctx_bits: c_int) -> fi_addr_t {
    ((rx_index as u64) << (64 - rx_ctx_bits)) | fi_addr
}

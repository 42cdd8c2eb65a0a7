//! The `static inline` calls of `rdma/fi_eq.h`: wait and poll sets, event queues (control
//! events), completion queues (the data path's completions) and counters.

use core::ffi::{c_char, c_int, c_void};

use super::{checked_op, op};
use crate::{
    fi_addr_t, fi_cq_err_entry, fi_eq_attr, fi_eq_err_entry, fid, fid_cntr, fid_cq, fid_eq,
    fid_fabric, fid_poll, fid_wait, FI_ENOSYS,
};

/// `fi_trywait`: whether the application may block on the wait objects of `fids[..count]`
/// (0), or must read them first (`-FI_EAGAIN`).
///
/// # Safety
///
/// The crate's contract; `fids[..count]` are live objects of `fabric`.
#[inline(always)]
pub unsafe fn fi_trywait(fabric: *mut fid_fabric, fids: *mut *mut fid, count: c_int) -> c_int {
    // SAFETY: `fabric` is live (contract 1), so `(*fabric).ops` is its fi_ops_fabric table;
    // the fid array is the caller's (contract 2).
    unsafe { op!((*fabric).ops, fi_ops_fabric.trywait)(fabric, fids, count) }
}

/// `fi_wait`: blocks on a wait set for up to `timeout` milliseconds (-1: no limit).
///
/// # Safety
///
/// The crate's contract.
#[inline(always)]
pub unsafe fn fi_wait(waitset: *mut fid_wait, timeout: c_int) -> c_int {
    // SAFETY: `waitset` is live (contract 1), so `(*waitset).ops` is its fi_ops_wait table.
    unsafe { op!((*waitset).ops, fi_ops_wait.wait)(waitset, timeout) }
}

/// `fi_poll`: the contexts of up to `count` objects of a poll set that have events, into
/// `context`; returns how many.
///
/// # Safety
///
/// The crate's contract; `context` is writable for `count` entries.
#[inline(always)]
pub unsafe fn fi_poll(pollset: *mut fid_poll, context: *mut *mut c_void, count: c_int) -> c_int {
    // SAFETY: `pollset` is live (contract 1), so `(*pollset).ops` is its fi_ops_poll table;
    // the output array is the caller's (contract 2).
    unsafe { op!((*pollset).ops, fi_ops_poll.poll)(pollset, context, count) }
}

/// `fi_poll_add`: adds a CQ or counter to a poll set.
///
/// # Safety
///
/// The crate's contract (for both objects).
#[inline(always)]
pub unsafe fn fi_poll_add(pollset: *mut fid_poll, event_fid: *mut fid, flags: u64) -> c_int {
    // SAFETY: `pollset` is live (contract 1), so `(*pollset).ops` is its fi_ops_poll table.
    unsafe { op!((*pollset).ops, fi_ops_poll.poll_add)(pollset, event_fid, flags) }
}

/// `fi_poll_del`: removes a CQ or counter from a poll set.
///
/// # Safety
///
/// The crate's contract (for both objects).
#[inline(always)]
pub unsafe fn fi_poll_del(pollset: *mut fid_poll, event_fid: *mut fid, flags: u64) -> c_int {
    // SAFETY: `pollset` is live (contract 1), so `(*pollset).ops` is its fi_ops_poll table.
    unsafe { op!((*pollset).ops, fi_ops_poll.poll_del)(pollset, event_fid, flags) }
}

/// `fi_eq_open`: opens an event queue on `fabric` (connection, AV and MR events).
///
/// # Safety
///
/// The crate's contract; `attr` is readable, `eq` writable.
#[inline(always)]
pub unsafe fn fi_eq_open(
    fabric: *mut fid_fabric,
    attr: *mut fi_eq_attr,
    eq: *mut *mut fid_eq,
    context: *mut c_void,
) -> c_int {
    // SAFETY: `fabric` is live (contract 1), so `(*fabric).ops` is its fi_ops_fabric table;
    // the other arguments are the caller's (contract 2).
    unsafe { op!((*fabric).ops, fi_ops_fabric.eq_open)(fabric, attr, eq, context) }
}

/// `fi_eq_read`: reads one event into `buf[..len]` and its type into `event`; `-FI_EAGAIN`
/// if there is none, `-FI_EAVAIL` if an error entry is waiting ([`fi_eq_readerr`]).
///
/// # Safety
///
/// The crate's contract; `event` is writable, `buf` writable for `len` bytes.
#[inline(always)]
pub unsafe fn fi_eq_read(
    eq: *mut fid_eq,
    event: *mut u32,
    buf: *mut c_void,
    len: usize,
    flags: u64,
) -> isize {
    // SAFETY: `eq` is live (contract 1), so `(*eq).ops` is its fi_ops_eq table; the
    // out-pointers are the caller's (contract 2).
    unsafe { op!((*eq).ops, fi_ops_eq.read)(eq, event, buf, len, flags) }
}

/// `fi_eq_readerr`: reads the waiting error entry into `buf`.
///
/// # Safety
///
/// The crate's contract; `buf` is writable (with `err_data`/`err_data_size` set as
/// fi_eq(3) describes, or zeroed).
#[inline(always)]
pub unsafe fn fi_eq_readerr(eq: *mut fid_eq, buf: *mut fi_eq_err_entry, flags: u64) -> isize {
    // SAFETY: `eq` is live (contract 1), so `(*eq).ops` is its fi_ops_eq table; the entry is
    // the caller's (contract 2).
    unsafe { op!((*eq).ops, fi_ops_eq.readerr)(eq, buf, flags) }
}

/// `fi_eq_write`: adds an event of type `event` with payload `buf[..len]` to the queue.
///
/// # Safety
///
/// The crate's contract; `buf` is readable for `len` bytes.
#[inline(always)]
pub unsafe fn fi_eq_write(
    eq: *mut fid_eq,
    event: u32,
    buf: *const c_void,
    len: usize,
    flags: u64,
) -> isize {
    // SAFETY: `eq` is live (contract 1), so `(*eq).ops` is its fi_ops_eq table; the payload
    // is the caller's (contract 2).
    unsafe { op!((*eq).ops, fi_ops_eq.write)(eq, event, buf, len, flags) }
}

/// `fi_eq_sread`: [`fi_eq_read`], blocking up to `timeout` milliseconds (-1: no limit).
///
/// # Safety
///
/// As [`fi_eq_read`]; the queue was opened with a wait object.
#[inline(always)]
pub unsafe fn fi_eq_sread(
    eq: *mut fid_eq,
    event: *mut u32,
    buf: *mut c_void,
    len: usize,
    timeout: c_int,
    flags: u64,
) -> isize {
    // SAFETY: `eq` is live (contract 1), so `(*eq).ops` is its fi_ops_eq table; the
    // out-pointers are the caller's (contract 2).
    unsafe { op!((*eq).ops, fi_ops_eq.sread)(eq, event, buf, len, timeout, flags) }
}

/// `fi_eq_strerror`: the text of a provider error (`prov_errno`, `err_data` of an error
/// entry), written to `buf[..len]` if `buf` is not null.
///
/// # Safety
///
/// The crate's contract; `err_data` is the entry's (or null), `buf` writable for `len` bytes
/// (or null). The result is valid until the next call on the queue.
#[inline(always)]
pub unsafe fn fi_eq_strerror(
    eq: *mut fid_eq,
    prov_errno: c_int,
    err_data: *const c_void,
    buf: *mut c_char,
    len: usize,
) -> *const c_char {
    // SAFETY: `eq` is live (contract 1), so `(*eq).ops` is its fi_ops_eq table; the other
    // arguments are the caller's (contract 2).
    unsafe { op!((*eq).ops, fi_ops_eq.strerror)(eq, prov_errno, err_data, buf, len) }
}

/// `fi_cq_read`: reads up to `count` completions into `buf` (entries of the CQ's format);
/// returns how many, `-FI_EAGAIN` if there are none, `-FI_EAVAIL` if an error entry is next
/// ([`fi_cq_readerr`]). Also drives the provider's progress.
///
/// # Safety
///
/// The crate's contract; `buf` is writable for `count` entries of the CQ's format.
#[inline(always)]
pub unsafe fn fi_cq_read(cq: *mut fid_cq, buf: *mut c_void, count: usize) -> isize {
    // SAFETY: `cq` is live (contract 1), so `(*cq).ops` is its fi_ops_cq table; the output
    // buffer is the caller's (contract 2).
    unsafe { op!((*cq).ops, fi_ops_cq.read)(cq, buf, count) }
}

/// `fi_cq_readfrom`: [`fi_cq_read`] that also writes each completion's source address
/// (`FI_SOURCE` endpoints) to `src_addr`.
///
/// # Safety
///
/// As [`fi_cq_read`]; `src_addr` is writable for `count` entries.
#[inline(always)]
pub unsafe fn fi_cq_readfrom(
    cq: *mut fid_cq,
    buf: *mut c_void,
    count: usize,
    src_addr: *mut fi_addr_t,
) -> isize {
    // SAFETY: `cq` is live (contract 1), so `(*cq).ops` is its fi_ops_cq table; the output
    // buffers are the caller's (contract 2).
    unsafe { op!((*cq).ops, fi_ops_cq.readfrom)(cq, buf, count, src_addr) }
}

/// `fi_cq_readerr`: reads the error completion that made [`fi_cq_read`] return
/// `-FI_EAVAIL` into `buf`; returns 1, or `-FI_EAGAIN` if there is none.
///
/// # Safety
///
/// The crate's contract; `buf` is writable, and its `err_data_size` is 0 (zeroed entry: the
/// provider then points `err_data` at its own buffer) or describes a writable `err_data`.
#[inline(always)]
pub unsafe fn fi_cq_readerr(cq: *mut fid_cq, buf: *mut fi_cq_err_entry, flags: u64) -> isize {
    // SAFETY: `cq` is live (contract 1), so `(*cq).ops` is its fi_ops_cq table; the entry is
    // the caller's (contract 2).
    unsafe { op!((*cq).ops, fi_ops_cq.readerr)(cq, buf, flags) }
}

/// `fi_cq_sread`: [`fi_cq_read`], blocking up to `timeout` milliseconds (-1: no limit) until
/// `cond` holds (by default: one completion).
///
/// # Safety
///
/// As [`fi_cq_read`]; the CQ was opened with a wait object, `cond` is what its `wait_cond`
/// requires (or null).
#[inline(always)]
pub unsafe fn fi_cq_sread(
    cq: *mut fid_cq,
    buf: *mut c_void,
    count: usize,
    cond: *const c_void,
    timeout: c_int,
) -> isize {
    // SAFETY: `cq` is live (contract 1), so `(*cq).ops` is its fi_ops_cq table; the other
    // arguments are the caller's (contract 2).
    unsafe { op!((*cq).ops, fi_ops_cq.sread)(cq, buf, count, cond, timeout) }
}

/// `fi_cq_sreadfrom`: [`fi_cq_sread`] that also writes each completion's source address.
///
/// # Safety
///
/// As [`fi_cq_sread`]; `src_addr` is writable for `count` entries.
#[inline(always)]
pub unsafe fn fi_cq_sreadfrom(
    cq: *mut fid_cq,
    buf: *mut c_void,
    count: usize,
    src_addr: *mut fi_addr_t,
    cond: *const c_void,
    timeout: c_int,
) -> isize {
    // SAFETY: `cq` is live (contract 1), so `(*cq).ops` is its fi_ops_cq table; the other
    // arguments are the caller's (contract 2).
    unsafe { op!((*cq).ops, fi_ops_cq.sreadfrom)(cq, buf, count, src_addr, cond, timeout) }
}

/// `fi_cq_signal`: wakes a thread blocked in [`fi_cq_sread`] on this CQ.
///
/// # Safety
///
/// The crate's contract.
#[inline(always)]
pub unsafe fn fi_cq_signal(cq: *mut fid_cq) -> c_int {
    // SAFETY: `cq` is live (contract 1), so `(*cq).ops` is its fi_ops_cq table.
    unsafe { op!((*cq).ops, fi_ops_cq.signal)(cq) }
}

/// `fi_cq_strerror`: the text of a provider error (`prov_errno`, `err_data` of an error
/// entry), written to `buf[..len]` if `buf` is not null.
///
/// # Safety
///
/// The crate's contract; `err_data` is the entry's (or null), `buf` writable for `len` bytes
/// (or null). The result is valid until the next call on the CQ.
#[inline(always)]
pub unsafe fn fi_cq_strerror(
    cq: *mut fid_cq,
    prov_errno: c_int,
    err_data: *const c_void,
    buf: *mut c_char,
    len: usize,
) -> *const c_char {
    // SAFETY: `cq` is live (contract 1), so `(*cq).ops` is its fi_ops_cq table; the other
    // arguments are the caller's (contract 2).
    unsafe { op!((*cq).ops, fi_ops_cq.strerror)(cq, prov_errno, err_data, buf, len) }
}

/// `fi_cntr_read`: the counter's count of successful operations.
///
/// # Safety
///
/// The crate's contract.
#[inline(always)]
pub unsafe fn fi_cntr_read(cntr: *mut fid_cntr) -> u64 {
    // SAFETY: `cntr` is live (contract 1), so `(*cntr).ops` is its fi_ops_cntr table.
    unsafe { op!((*cntr).ops, fi_ops_cntr.read)(cntr) }
}

/// `fi_cntr_readerr`: the counter's count of failed operations.
///
/// # Safety
///
/// The crate's contract.
#[inline(always)]
pub unsafe fn fi_cntr_readerr(cntr: *mut fid_cntr) -> u64 {
    // SAFETY: `cntr` is live (contract 1), so `(*cntr).ops` is its fi_ops_cntr table.
    unsafe { op!((*cntr).ops, fi_ops_cntr.readerr)(cntr) }
}

/// `fi_cntr_add`: adds `value` to the counter.
///
/// # Safety
///
/// The crate's contract.
#[inline(always)]
pub unsafe fn fi_cntr_add(cntr: *mut fid_cntr, value: u64) -> c_int {
    // SAFETY: `cntr` is live (contract 1), so `(*cntr).ops` is its fi_ops_cntr table.
    unsafe { op!((*cntr).ops, fi_ops_cntr.add)(cntr, value) }
}

/// `fi_cntr_adderr`: adds `value` to the counter's error count; `-FI_ENOSYS` if the
/// provider's table predates `adderr`, as in C.
///
/// # Safety
///
/// The crate's contract.
#[inline(always)]
pub unsafe fn fi_cntr_adderr(cntr: *mut fid_cntr, value: u64) -> c_int {
    // SAFETY: `cntr` is live (contract 1), so `(*cntr).ops` is its fi_ops_cntr table, whose
    // `size` bounds the read (checked_op!).
    unsafe {
        match checked_op!((*cntr).ops, fi_ops_cntr.adderr) {
            Some(f) => f(cntr, value),
            None => -FI_ENOSYS,
        }
    }
}

/// `fi_cntr_set`: sets the counter to `value`.
///
/// # Safety
///
/// The crate's contract.
#[inline(always)]
pub unsafe fn fi_cntr_set(cntr: *mut fid_cntr, value: u64) -> c_int {
    // SAFETY: `cntr` is live (contract 1), so `(*cntr).ops` is its fi_ops_cntr table.
    unsafe { op!((*cntr).ops, fi_ops_cntr.set)(cntr, value) }
}

/// `fi_cntr_seterr`: sets the counter's error count to `value`; `-FI_ENOSYS` if the
/// provider's table predates `seterr`, as in C.
///
/// # Safety
///
/// The crate's contract.
#[inline(always)]
pub unsafe fn fi_cntr_seterr(cntr: *mut fid_cntr, value: u64) -> c_int {
    // SAFETY: `cntr` is live (contract 1), so `(*cntr).ops` is its fi_ops_cntr table, whose
    // `size` bounds the read (checked_op!).
    unsafe {
        match checked_op!((*cntr).ops, fi_ops_cntr.seterr) {
            Some(f) => f(cntr, value),
            None => -FI_ENOSYS,
        }
    }
}

/// `fi_cntr_wait`: blocks until the counter reaches `threshold` or `timeout` milliseconds
/// pass (-1: no limit); `-FI_ETIMEDOUT` on timeout, `-FI_EAVAIL` if an error was counted.
///
/// # Safety
///
/// The crate's contract; the counter was opened with a wait object.
#[inline(always)]
pub unsafe fn fi_cntr_wait(cntr: *mut fid_cntr, threshold: u64, timeout: c_int) -> c_int {
    // SAFETY: `cntr` is live (contract 1), so `(*cntr).ops` is its fi_ops_cntr table.
    unsafe { op!((*cntr).ops, fi_ops_cntr.wait)(cntr, threshold, timeout) }
}

//! Buffered sends, the standard's "Buffer Allocation and Usage" (MPI 4.1, section 3.6):
//! `MPI_Buffer_attach`, `MPI_Buffer_detach`, `MPI_Buffer_flush`, `MPI_Buffer_iflush`, a
//! communicator's own buffer (`MPI_Comm_attach_buffer`, `MPI_Comm_detach_buffer`,
//! `MPI_Comm_flush_buffer`, `MPI_Comm_iflush_buffer`), `MPI_Bsend`, `MPI_Ibsend`, and the
//! `_c` forms.
//!
//! The device has no buffered mode. A buffered send copies its data and sends the copy as a
//! standard send left to complete in the background; the attached buffer is the account the
//! standard requires such sends to fit in (a message that does not fit is an error), not the
//! memory the copy lives in. A communicator's buffer, when it has one, takes the place of the
//! process's for the sends on it (section 3.6.1). `MPI_BUFFER_AUTOMATIC` attaches an account
//! with no limit: the library allocates the copies as it needs them, which is what the ABI's
//! value asks for. Detaching or flushing waits for the copies still on their way; the
//! nonblocking flush is one of the library's own generalized requests (`grequests`), complete
//! once every send its buffer held when it was called has left.

use std::ffi::{c_int, c_void};

use ch4_core::buffer::SendBuf;
use ch4_core::{ErrorKind, SendMode};

use crate::abi::{self, rank_in, tag_in, Handle};
use crate::call::{call, null_arg, on_device, put};
use crate::state::{DevReq, State};

/// What MPI reserves in the attached buffer per buffered message (`MPI_BSEND_OVERHEAD`).
const BSEND_OVERHEAD: usize = 512;

/// `MPI_BUFFER_AUTOMATIC`: attach an account the library grows as it needs.
const BUFFER_AUTOMATIC: usize = 2;

/// Which attached buffer a buffered send counts against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Owner {
    /// The process's (`MPI_Buffer_attach`).
    Process,
    /// Communicator handle `h`'s (`MPI_Comm_attach_buffer`).
    Comm(Handle),
}

/// One attached buffer and the buffered sends it holds.
pub(crate) struct Attached {
    owner: Owner,
    /// The address the program attached (`MPI_BUFFER_AUTOMATIC`'s value for that).
    addr: usize,
    /// Its size in bytes (`usize::MAX` for `MPI_BUFFER_AUTOMATIC`: no limit).
    size: usize,
    /// The sends in flight: the device's request, the bytes of the buffer it holds, and its
    /// number (for a flush: what was in the buffer when it was called).
    sends: Vec<(DevReq, usize, u64)>,
}

/// The attached buffers of the process and its communicators.
#[derive(Default)]
pub(crate) struct Bsend {
    buffers: Vec<Attached>,
    /// The number the next buffered send gets.
    next: u64,
}

impl Bsend {
    fn find(&mut self, owner: Owner) -> Option<&mut Attached> {
        self.buffers.iter_mut().find(|b| b.owner == owner)
    }

    fn take(&mut self, owner: Owner) -> Option<Attached> {
        let i = self.buffers.iter().position(|b| b.owner == owner)?;
        Some(self.buffers.swap_remove(i))
    }
}

/// Drops from `a` the sends that have left (their room is free again).
fn reap(st: &State, a: &mut Attached) -> ch4::Result<()> {
    let mut failed = None;
    a.sends.retain(|(r, _, _)| {
        match st
            .device(r.vci())
            .and_then(|mut dev| dev.test_status(r.handle()))
        {
            Ok(pending) => pending.is_none(),
            Err(e) => {
                failed.get_or_insert(e);
                true
            }
        }
    });
    failed.map_or(Ok(()), Err)
}

/// Attaches the buffer of `size` bytes at `buffer` for `owner`.
fn attach(st: &State, owner: Owner, buffer: *mut c_void, size: i64) -> ch4::Result<()> {
    let automatic = buffer as usize == BUFFER_AUTOMATIC;
    let size = if automatic {
        usize::MAX
    } else {
        usize::try_from(size)
            .map_err(|_| ch4::Error::new(ErrorKind::Count, "a negative buffer size"))?
    };
    if let Owner::Comm(h) = owner {
        st.comm(h)?;
    }
    let mut bs = st.bsend.lock();
    if bs.find(owner).is_some() {
        return Err(ch4::Error::new(
            ErrorKind::Buffer,
            "a buffer is already attached (detach it first)",
        ));
    }
    bs.buffers.push(Attached {
        owner,
        addr: buffer as usize,
        size,
        sends: Vec::new(),
    });
    Ok(())
}

/// Waits until every send of `sends` has left.
fn wait_sends(st: &State, sends: Vec<(DevReq, usize, u64)>) -> ch4::Result<()> {
    for (r, _, _) in sends {
        on_device!(st, r.vci(), |b| b.wait_status(r.handle()))?;
    }
    Ok(())
}

/// Detaches `owner`'s buffer once every message in it has left: its address and size
/// (`MPI_BUFFER_AUTOMATIC` and 0 for an automatic one; a null address and 0 when none was
/// attached).
fn detach(st: &State, owner: Owner) -> ch4::Result<(usize, usize)> {
    if let Owner::Comm(h) = owner {
        st.comm(h)?;
    }
    let Some(a) = st.bsend.lock().take(owner) else {
        return Ok((0, 0));
    };
    wait_sends(st, a.sends)?;
    Ok(if a.addr == BUFFER_AUTOMATIC {
        (BUFFER_AUTOMATIC, 0)
    } else {
        (a.addr, a.size)
    })
}

/// Waits until every message in `owner`'s buffer has left (`MPI_Buffer_flush`); the buffer
/// stays attached.
fn flush(st: &State, owner: Owner) -> ch4::Result<()> {
    if let Owner::Comm(h) = owner {
        st.comm(h)?;
    }
    let sends = match st.bsend.lock().find(owner) {
        Some(a) => std::mem::take(&mut a.sends),
        None => return Ok(()),
    };
    wait_sends(st, sends)
}

/// The number below which every send of `owner`'s buffer must have left for a nonblocking
/// flush called now to be complete.
fn flush_mark(st: &State, owner: Owner) -> ch4::Result<u64> {
    if let Owner::Comm(h) = owner {
        st.comm(h)?;
    }
    Ok(st.bsend.lock().next)
}

/// Whether every send of `owner`'s buffer numbered below `mark` has left (the test of a
/// nonblocking flush, see `grequests`).
pub(crate) fn flushed(st: &State, owner: Owner, mark: u64) -> ch4::Result<bool> {
    let mut bs = st.bsend.lock();
    let Some(a) = bs.find(owner) else {
        return Ok(true);
    };
    reap(st, a)?;
    Ok(a.sends.iter().all(|&(_, _, n)| n >= mark))
}

/// A buffered send: the data is copied (counted against the communicator's attached buffer,
/// or else the process's, as MPI requires: a message that does not fit is an error) and sent
/// from the copy; the request returned (for `MPI_Ibsend`) is complete at once.
pub(crate) fn bsend(
    st: &State,
    bytes: &[u8],
    dest: c_int,
    tag: c_int,
    comm: Handle,
) -> ch4::Result<ch4_core::ReqHandle> {
    let c = st.comm(comm)?;
    let mut bs = st.bsend.lock();
    let owner = if bs.find(Owner::Comm(comm)).is_some() {
        Owner::Comm(comm)
    } else {
        Owner::Process
    };
    let n = bs.next;
    let Some(a) = bs.find(owner) else {
        return Err(ch4::Error::new(
            ErrorKind::Buffer,
            "a buffered send with no buffer attached (MPI_Buffer_attach, MPI_Comm_attach_buffer)",
        ));
    };
    // Messages that have left give their room back.
    reap(st, a)?;
    let used: usize = a.sends.iter().map(|(_, n, _)| n).sum();
    let need = bytes.len() + BSEND_OVERHEAD;
    if used.saturating_add(need) > a.size {
        return Err(ch4::Error::new(
            ErrorKind::Buffer,
            format!(
                "the attached buffer has {} of {} bytes free; this message needs {need} \
                 (its {} bytes and MPI_BSEND_OVERHEAD)",
                a.size.saturating_sub(used),
                a.size,
                bytes.len()
            ),
        ));
    }
    let h = st.device(c.vci)?.isend(
        c.id,
        rank_in(dest),
        tag_in(tag),
        SendBuf::owned(bytes.to_vec()),
        SendMode::Standard,
    )?;
    a.sends.push((DevReq::new(h, c.vci), need, n));
    bs.next += 1;
    Ok(ch4_core::ReqHandle::DONE)
}

/// `MPI_Buffer_attach`.
///
/// # Safety
/// `buffer` has `size` bytes, the library's until detached (or is `MPI_BUFFER_AUTOMATIC`).
#[no_mangle]
pub unsafe extern "C" fn MPI_Buffer_attach(buffer: *mut c_void, size: c_int) -> c_int {
    call(abi::COMM_WORLD, "MPI_Buffer_attach", |st| {
        attach(st, Owner::Process, buffer, i64::from(size))
    })
}

/// `MPI_Buffer_attach_c`.
///
/// # Safety
/// As `MPI_Buffer_attach`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Buffer_attach_c(buffer: *mut c_void, size: i64) -> c_int {
    call(abi::COMM_WORLD, "MPI_Buffer_attach_c", |st| {
        attach(st, Owner::Process, buffer, size)
    })
}

/// `MPI_Comm_attach_buffer` (MPI 4.1): a buffer for the buffered sends on `comm`, used instead
/// of the process's.
///
/// # Safety
/// As `MPI_Buffer_attach`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_attach_buffer(
    comm: Handle,
    buffer: *mut c_void,
    size: c_int,
) -> c_int {
    call(comm, "MPI_Comm_attach_buffer", |st| {
        attach(st, Owner::Comm(comm), buffer, i64::from(size))
    })
}

/// `MPI_Comm_attach_buffer_c`.
///
/// # Safety
/// As `MPI_Buffer_attach`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_attach_buffer_c(
    comm: Handle,
    buffer: *mut c_void,
    size: i64,
) -> c_int {
    call(comm, "MPI_Comm_attach_buffer_c", |st| {
        attach(st, Owner::Comm(comm), buffer, size)
    })
}

/// Writes a detached buffer's address and size through the program's pointers.
///
/// # Safety
/// `buffer_addr` is null or valid for a write of a pointer (C passes the address of a
/// pointer as `void *`), `size` for one of a `T`.
unsafe fn put_detached<T>(buffer_addr: *mut c_void, size: *mut T, got: (usize, T)) {
    // SAFETY: the caller's contract.
    unsafe {
        put(buffer_addr.cast::<usize>(), got.0);
        put(size, got.1);
    }
}

/// The int size of a detached buffer (one attached with the `_c` form may not fit).
fn int_size(size: usize) -> ch4::Result<c_int> {
    c_int::try_from(size).map_err(|_| {
        ch4::Error::new(
            ErrorKind::Count,
            format!("the buffer's size {size} does not fit an int: detach it with the _c form"),
        )
    })
}

/// `MPI_Buffer_detach`: waits until every buffered message has left, then returns the
/// buffer's address and size.
///
/// # Safety
/// `buffer_addr` is valid for a write of a pointer, `size` of an int.
#[no_mangle]
pub unsafe extern "C" fn MPI_Buffer_detach(buffer_addr: *mut c_void, size: *mut c_int) -> c_int {
    call(abi::COMM_WORLD, "MPI_Buffer_detach", |st| {
        let (addr, len) = detach(st, Owner::Process)?;
        // SAFETY: the caller's contract.
        unsafe { put_detached(buffer_addr, size, (addr, int_size(len)?)) };
        Ok(())
    })
}

/// `MPI_Buffer_detach_c`.
///
/// # Safety
/// `buffer_addr` is valid for a write of a pointer, `size` of an `MPI_Count`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Buffer_detach_c(buffer_addr: *mut c_void, size: *mut i64) -> c_int {
    call(abi::COMM_WORLD, "MPI_Buffer_detach_c", |st| {
        let (addr, len) = detach(st, Owner::Process)?;
        // SAFETY: the caller's contract.
        unsafe { put_detached(buffer_addr, size, (addr, len as i64)) };
        Ok(())
    })
}

/// `MPI_Comm_detach_buffer`.
///
/// # Safety
/// As `MPI_Buffer_detach`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_detach_buffer(
    comm: Handle,
    buffer_addr: *mut c_void,
    size: *mut c_int,
) -> c_int {
    call(comm, "MPI_Comm_detach_buffer", |st| {
        let (addr, len) = detach(st, Owner::Comm(comm))?;
        // SAFETY: the caller's contract.
        unsafe { put_detached(buffer_addr, size, (addr, int_size(len)?)) };
        Ok(())
    })
}

/// `MPI_Comm_detach_buffer_c`.
///
/// # Safety
/// As `MPI_Buffer_detach_c`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_detach_buffer_c(
    comm: Handle,
    buffer_addr: *mut c_void,
    size: *mut i64,
) -> c_int {
    call(comm, "MPI_Comm_detach_buffer_c", |st| {
        let (addr, len) = detach(st, Owner::Comm(comm))?;
        // SAFETY: the caller's contract.
        unsafe { put_detached(buffer_addr, size, (addr, len as i64)) };
        Ok(())
    })
}

/// `MPI_Buffer_flush` (MPI 4.1): waits until every message in the process's buffer has left.
#[no_mangle]
pub extern "C" fn MPI_Buffer_flush() -> c_int {
    call(abi::COMM_WORLD, "MPI_Buffer_flush", |st| {
        flush(st, Owner::Process)
    })
}

/// `MPI_Comm_flush_buffer` (MPI 4.1): [`MPI_Buffer_flush`] of `comm`'s buffer.
#[no_mangle]
pub extern "C" fn MPI_Comm_flush_buffer(comm: Handle) -> c_int {
    call(comm, "MPI_Comm_flush_buffer", |st| {
        flush(st, Owner::Comm(comm))
    })
}

/// A nonblocking flush of `owner`'s buffer: a request of the library's complete once the
/// messages in the buffer now have left.
///
/// # Safety
/// `request` is null or writable.
unsafe fn iflush(st: &State, owner: Owner, request: *mut Handle) -> ch4::Result<()> {
    if request.is_null() {
        return Err(null_arg("the request"));
    }
    let mark = flush_mark(st, owner)?;
    let h = crate::grequests::start_flush(st, owner, mark);
    // SAFETY: checked non-null; the caller's contract.
    unsafe { request.write(h) };
    Ok(())
}

/// `MPI_Buffer_iflush` (MPI 4.1).
///
/// # Safety
/// `request` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Buffer_iflush(request: *mut Handle) -> c_int {
    call(abi::COMM_WORLD, "MPI_Buffer_iflush", |st| {
        // SAFETY: the caller's contract.
        unsafe { iflush(st, Owner::Process, request) }
    })
}

/// `MPI_Comm_iflush_buffer` (MPI 4.1).
///
/// # Safety
/// `request` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_iflush_buffer(comm: Handle, request: *mut Handle) -> c_int {
    call(comm, "MPI_Comm_iflush_buffer", |st| {
        // SAFETY: the caller's contract.
        unsafe { iflush(st, Owner::Comm(comm), request) }
    })
}

/// `MPI_Bsend`.
///
/// # Safety
/// `buf` holds `count` elements of `datatype`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Bsend(
    buf: *const c_void,
    count: c_int,
    datatype: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
) -> c_int {
    call(comm, "MPI_Bsend", |st| {
        // SAFETY: the caller's contract; the data is copied before this returns.
        let bytes = unsafe { crate::buffers::sbuf(st, buf, count, datatype) }?.to_vec()?;
        bsend(st, &bytes, dest, tag, comm).map(drop)
    })
}

/// `MPI_Bsend_c`.
///
/// # Safety
/// `buf` holds `count` elements of `datatype`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Bsend_c(
    buf: *const c_void,
    count: i64,
    datatype: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
) -> c_int {
    call(comm, "MPI_Bsend_c", |st| {
        // SAFETY: the caller's contract; the data is copied before this returns.
        let bytes = unsafe { crate::buffers::sbuf_big(st, buf, count, datatype) }?.to_vec()?;
        bsend(st, &bytes, dest, tag, comm).map(drop)
    })
}

/// Writes the (complete) request of a buffered send.
///
/// # Safety
/// `request` is null or writable.
unsafe fn ibsend(
    st: &State,
    bytes: &[u8],
    dest: c_int,
    tag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> ch4::Result<()> {
    if request.is_null() {
        return Err(null_arg("the request"));
    }
    let h = bsend(st, bytes, dest, tag, comm)?;
    // SAFETY: checked non-null.
    unsafe { request.write(abi::request_out(DevReq::new(h, 0))) };
    Ok(())
}

/// `MPI_Ibsend`.
///
/// # Safety
/// `buf` holds `count` elements of `datatype`; `request` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Ibsend(
    buf: *const c_void,
    count: c_int,
    datatype: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    call(comm, "MPI_Ibsend", |st| {
        // SAFETY: the caller's contract; the data is copied before this returns.
        let bytes = unsafe { crate::buffers::sbuf(st, buf, count, datatype) }?.to_vec()?;
        // SAFETY: the caller's contract.
        unsafe { ibsend(st, &bytes, dest, tag, comm, request) }
    })
}

/// `MPI_Ibsend_c`.
///
/// # Safety
/// As `MPI_Ibsend`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Ibsend_c(
    buf: *const c_void,
    count: i64,
    datatype: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    call(comm, "MPI_Ibsend_c", |st| {
        // SAFETY: the caller's contract; the data is copied before this returns.
        let bytes = unsafe { crate::buffers::sbuf_big(st, buf, count, datatype) }?.to_vec()?;
        // SAFETY: the caller's contract.
        unsafe { ibsend(st, &bytes, dest, tag, comm, request) }
    })
}

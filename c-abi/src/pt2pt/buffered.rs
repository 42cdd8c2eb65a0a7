//! Buffered sends, the standard's "Buffer Allocation and Usage": `MPI_Buffer_attach`,
//! `MPI_Buffer_detach`, `MPI_Bsend` and `MPI_Ibsend`.
//!
//! The device has no buffered mode. A buffered send copies its data and sends the copy as a
//! standard send left to complete in the background; the attached buffer is the account the
//! standard requires such sends to fit in (a message that does not fit is an error), not the
//! memory the copy lives in. Detaching waits for the copies still on their way.

use std::ffi::{c_int, c_void};

use ch4_core::buffer::SendBuf;
use ch4_core::{ErrorKind, SendMode};

use crate::abi::{self, rank_in, tag_in, Handle};
use crate::call::{call, null_arg, on_device, put};
use crate::state::{DevReq, State};

/// What MPI reserves in the attached buffer per buffered message (`MPI_BSEND_OVERHEAD`).
const BSEND_OVERHEAD: usize = 512;

/// `MPI_Buffer_attach`.
///
/// # Safety
/// `buffer` has `size` bytes, the library's until detached.
#[no_mangle]
pub unsafe extern "C" fn MPI_Buffer_attach(buffer: *mut c_void, size: c_int) -> c_int {
    call(abi::COMM_WORLD, "MPI_Buffer_attach", |st| {
        let size = usize::try_from(size)
            .map_err(|_| ch4::Error::new(ErrorKind::Count, "a negative buffer size"))?;
        let mut bs = st.bsend.lock();
        if bs.buffer.is_some() {
            return Err(ch4::Error::new(
                ErrorKind::Buffer,
                "a buffer is already attached (detach it first)",
            ));
        }
        bs.buffer = Some((buffer as usize, size));
        Ok(())
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
        let (buffer, pending) = {
            let mut bs = st.bsend.lock();
            (bs.buffer.take(), std::mem::take(&mut bs.sends))
        };
        let Some((addr, len)) = buffer else {
            // SAFETY: the caller's contract.
            unsafe {
                put(buffer_addr.cast::<usize>(), 0);
                put(size, 0);
            }
            return Ok(());
        };
        for (r, _) in pending {
            on_device!(st, r.vci(), |b| b.wait_status(r.handle()))?;
        }
        // SAFETY: the caller's contract (C passes the address of a pointer as void*).
        unsafe {
            put(buffer_addr.cast::<usize>(), addr);
            put(size, len as c_int);
        }
        Ok(())
    })
}

/// A buffered send: the data is copied (counted against the attached buffer, as MPI
/// requires: a message that does not fit is an error) and sent from the copy; the request
/// returned (for `MPI_Ibsend`) is complete at once.
fn bsend(
    st: &State,
    bytes: &[u8],
    dest: c_int,
    tag: c_int,
    comm: Handle,
) -> ch4::Result<ch4_core::ReqHandle> {
    let c = st.comm(comm)?;
    let id = c.id;
    let mut bs = st.bsend.lock();
    // Messages that have left give their room back.
    let mut failed = None;
    bs.sends.retain(|(r, _)| {
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
    if let Some(e) = failed {
        return Err(e);
    }
    let Some((_, capacity)) = bs.buffer else {
        return Err(ch4::Error::new(
            ErrorKind::Buffer,
            "a buffered send with no buffer attached (MPI_Buffer_attach)",
        ));
    };
    let used: usize = bs.sends.iter().map(|(_, n)| n).sum();
    let need = bytes.len() + BSEND_OVERHEAD;
    if used + need > capacity {
        return Err(ch4::Error::new(
            ErrorKind::Buffer,
            format!(
                "the attached buffer has {} of {capacity} bytes free; this message needs {need} \
                 (its {} bytes and MPI_BSEND_OVERHEAD)",
                capacity.saturating_sub(used),
                bytes.len()
            ),
        ));
    }
    let h = st.device(c.vci)?.isend(
        id,
        rank_in(dest),
        tag_in(tag),
        SendBuf::owned(bytes.to_vec()),
        SendMode::Standard,
    )?;
    bs.sends.push((DevReq::new(h, c.vci), need));
    Ok(ch4_core::ReqHandle::DONE)
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
        if request.is_null() {
            return Err(null_arg("the request"));
        }
        // SAFETY: the caller's contract; the data is copied before this returns.
        let bytes = unsafe { crate::buffers::sbuf(st, buf, count, datatype) }?.to_vec()?;
        let h = bsend(st, &bytes, dest, tag, comm)?;
        // SAFETY: checked non-null.
        unsafe { request.write(abi::request_out(DevReq::new(h, 0))) };
        Ok(())
    })
}

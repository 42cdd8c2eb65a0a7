//! A C program's buffer — a pointer, a count and a datatype handle — as the device's send or
//! receive buffer.
//!
//! Point-to-point, persistent requests, sends-and-receives and the collectives (which pack
//! derived datatypes into bytes) all make their buffers here, so a predefined datatype takes
//! the same inlined path everywhere: one table lookup for its size, then the bytes themselves.
//! A derived datatype leaves that path for its layout (`derived`).

use std::ffi::{c_int, c_void};

use ch4_core::buffer::{RecvBuf, SendBuf};

use crate::abi::{self, Handle};
use crate::datatype::{self, raw, raw_mut};
use crate::derived;
use crate::state::State;

/// The byte length of `count` elements of `dt` when they are plain bytes (a predefined
/// contiguous type, or nothing of `MPI_DATATYPE_NULL`); `None` for a derived (or gapped)
/// datatype, which takes the layout path. One table lookup.
#[inline(always)]
fn plain_len(count: c_int, dt: Handle) -> ch4::Result<Option<usize>> {
    match datatype::size_of(dt) {
        Some(size) => Ok(Some(datatype::elements(count)? * size)),
        None if count == 0 && dt == abi::DATATYPE_NULL => Ok(Some(0)),
        None => Ok(None),
    }
}

/// Whether `count` elements of `dt` are plain bytes (see [`plain_len`]).
#[inline(always)]
pub(crate) fn plain(dt: Handle, count: c_int) -> bool {
    datatype::size_of(dt).is_some() || (count == 0 && dt == abi::DATATYPE_NULL)
}

/// The send buffer of `count` elements of `dt` at `buf`: the bytes themselves for a
/// predefined type, the device's layout over them for a derived one.
///
/// # Safety
/// The elements stay readable and unchanged while the buffer is in use.
#[inline(always)]
pub(crate) unsafe fn sbuf(
    st: &State,
    buf: *const c_void,
    count: c_int,
    dt: Handle,
) -> ch4::Result<SendBuf> {
    match plain_len(count, dt)? {
        // SAFETY: the caller's contract: `len` bytes of elements at `buf`, unchanged while the
        // buffer is in use.
        Some(len) => Ok(unsafe { SendBuf::borrowed(raw(buf, len)?) }),
        // SAFETY: the caller's contract.
        None => unsafe { derived::send_buf(st, buf.cast(), count, dt) },
    }
}

/// The receive buffer of `count` elements of `dt` at `buf`, as [`sbuf`].
///
/// # Safety
/// The elements stay writable, and nobody else's, while the buffer is in use.
#[inline(always)]
pub(crate) unsafe fn rbuf(
    st: &State,
    buf: *mut c_void,
    count: c_int,
    dt: Handle,
) -> ch4::Result<RecvBuf> {
    match plain_len(count, dt)? {
        // SAFETY: the caller's contract: room for `len` bytes at `buf`, the request's alone.
        Some(len) => Ok(unsafe { RecvBuf::borrowed(raw_mut(buf, len)?) }),
        // SAFETY: the caller's contract.
        None => unsafe { derived::recv_buf(st, buf.cast(), count, dt) },
    }
}

/// The byte length of `count` elements of `dt` when they are plain bytes, for the `_c` forms'
/// `MPI_Count`: a count beyond what a buffer can hold (more bytes than `isize::MAX`, the
/// largest a slice may span) is `MPI_ERR_COUNT`, never a length cut to fit.
fn plain_len_big(count: i64, dt: Handle) -> ch4::Result<Option<usize>> {
    let too_many = || {
        ch4::Error::new(
            ch4_core::ErrorKind::Count,
            format!("count {count} is negative, or more bytes than a buffer can hold"),
        )
    };
    let n = usize::try_from(count).map_err(|_| too_many())?;
    match datatype::size_of(dt) {
        Some(size) => match n.checked_mul(size) {
            Some(len) if len <= isize::MAX as usize => Ok(Some(len)),
            _ => Err(too_many()),
        },
        None if n == 0 && dt == abi::DATATYPE_NULL => Ok(Some(0)),
        None => Ok(None),
    }
}

/// [`sbuf`] of an `MPI_Count` of elements (the `_c` forms).
///
/// # Safety
/// As [`sbuf`].
pub(crate) unsafe fn sbuf_big(
    st: &State,
    buf: *const c_void,
    count: i64,
    dt: Handle,
) -> ch4::Result<SendBuf> {
    match plain_len_big(count, dt)? {
        // SAFETY: the caller's contract, as in `sbuf`.
        Some(len) => Ok(unsafe { SendBuf::borrowed(raw(buf, len)?) }),
        // SAFETY: the caller's contract.
        None => unsafe { derived::send_buf_big(st, buf.cast(), count, dt) },
    }
}

/// [`rbuf`] of an `MPI_Count` of elements (the `_c` forms).
///
/// # Safety
/// As [`rbuf`].
pub(crate) unsafe fn rbuf_big(
    st: &State,
    buf: *mut c_void,
    count: i64,
    dt: Handle,
) -> ch4::Result<RecvBuf> {
    match plain_len_big(count, dt)? {
        // SAFETY: the caller's contract, as in `rbuf`.
        Some(len) => Ok(unsafe { RecvBuf::borrowed(raw_mut(buf, len)?) }),
        // SAFETY: the caller's contract.
        None => unsafe { derived::recv_buf_big(st, buf.cast(), count, dt) },
    }
}

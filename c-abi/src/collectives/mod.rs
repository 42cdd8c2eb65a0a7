//! Collective communication, the standard's chapter "Collective Communication", a file for each
//! family of calls:
//!
//! - `barrier_bcast`: `MPI_Barrier`, `MPI_Bcast`.
//! - `reduce`: `MPI_Reduce`, `MPI_Allreduce`, `MPI_Reduce_scatter`.
//! - `gather`: `MPI_Gather`, `MPI_Gatherv`, `MPI_Allgather`, `MPI_Allgatherv`.
//! - `scatter`: `MPI_Scatter`, `MPI_Scatterv`.
//! - `alltoall`: `MPI_Alltoall`, `MPI_Alltoallv`, `MPI_Alltoallw`.
//! - `inter`: every one of those on an intercommunicator, through schedules.
//!
//! The device's collectives move contiguous bytes, so every function turns the program's
//! buffers into byte slices, with counts and displacements in bytes: a predefined datatype's
//! elements are used in place, a derived one's are packed into a copy first and unpacked
//! after. Those conversions serve every family, so they are here, visible to the files below
//! and to nothing else.

mod alltoall;
mod barrier_bcast;
mod big_count;
mod gather;
mod inter;
mod neighbour;
pub(crate) mod nonblocking;
pub(crate) mod plans;
mod reduce;
mod scatter;

use std::ffi::{c_int, c_void};

use ch4_core::ErrorKind;

use crate::abi::Handle;
use crate::buffers::{rbuf, sbuf};
use crate::call::null_arg;
use crate::datatype;
use crate::derived;
use crate::state::{CommRef, State};

/// The elements of a collective's buffers packed into bytes (for a derived datatype: the
/// device's collectives move contiguous bytes).
///
/// # Safety
/// `buf` holds `count` elements of `dt`.
unsafe fn packed(st: &State, buf: *const c_void, count: c_int, dt: Handle) -> ch4::Result<Vec<u8>> {
    // SAFETY: the caller's contract; the copy is made before this returns.
    unsafe { sbuf(st, buf, count, dt) }?.to_vec()
}

/// Unpacks `data` into `count` elements of `dt` at `buf`.
///
/// # Safety
/// `buf` has room for `count` elements of `dt`.
unsafe fn unpack(
    st: &State,
    buf: *mut c_void,
    count: c_int,
    dt: Handle,
    data: &[u8],
) -> ch4::Result<()> {
    // SAFETY: the caller's contract; the buffer is written before this returns.
    let mut r = unsafe { rbuf(st, buf, count, dt) }?;
    if r.write_at(0, data) != data.len() {
        return Err(ch4::Error::new(
            ErrorKind::Count,
            "the collective's data does not fit its receive buffer",
        ));
    }
    Ok(())
}

/// The packed bytes of `count` elements of `dt`.
fn packed_len(st: &State, count: c_int, dt: Handle) -> ch4::Result<usize> {
    Ok(datatype::elements(count)? * derived::desc(st, dt)?.size)
}

/// `n` counts (or displacements) of elements of `size` bytes from a C array, in bytes.
///
/// # Safety
/// `a` has `n` readable ints (or is null when `n` is 0).
unsafe fn scaled(a: *const c_int, n: usize, size: usize, what: &str) -> ch4::Result<Vec<usize>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    if a.is_null() {
        return Err(null_arg(what));
    }
    // SAFETY: the caller's contract.
    let ints = unsafe { std::slice::from_raw_parts(a, n) };
    ints.iter()
        .map(|&c| {
            usize::try_from(c)
                .map(|c| c * size)
                .map_err(|_| ch4::Error::new(ErrorKind::Count, format!("{what}: {c} is negative")))
        })
        .collect()
}

/// The byte span that `counts` blocks at `displs` cover (for a buffer's length).
fn span(counts: &[usize], displs: &[usize]) -> usize {
    counts
        .iter()
        .zip(displs)
        .map(|(c, d)| c + d)
        .max()
        .unwrap_or(0)
}

/// Rank and size of `id`.
fn rank_size(st: &State, c: CommRef) -> ch4::Result<(c_int, usize)> {
    let dev = st.device(c.vci)?;
    Ok((dev.rank(c.id)?, dev.size(c.id)? as usize))
}

fn type_size(dt: Handle) -> ch4::Result<usize> {
    datatype::size_of(dt).ok_or_else(|| datatype::bad_type(dt))
}

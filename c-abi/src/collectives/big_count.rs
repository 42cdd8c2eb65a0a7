//! The big-count (`_c`) forms of the blocking collectives (MPI 4.1, section 6.1: counts as
//! `MPI_Count`, displacements as `MPI_Aint`), and `MPI_Reduce_scatter_block`.
//!
//! The library's datatypes count elements in C `int`s, so each `_c` form checks that its
//! counts and displacements fit one and calls the `int` form: a count beyond it is an
//! `MPI_ERR_COUNT` through the communicator's error handler, never a truncation. The arrays
//! of the `v` and `w` forms are converted whole (only at the root where MPI makes them
//! significant only there).

use std::ffi::{c_int, c_void};

use ch4_core::ErrorKind;

use super::alltoall::{MPI_Alltoall, MPI_Alltoallv, MPI_Alltoallw};
use super::barrier_bcast::MPI_Bcast;
use super::gather::{MPI_Allgather, MPI_Allgatherv, MPI_Gather, MPI_Gatherv};
use super::reduce::{MPI_Allreduce, MPI_Exscan, MPI_Reduce, MPI_Reduce_scatter, MPI_Scan};
use super::scatter::{MPI_Scatter, MPI_Scatterv};
use crate::abi::{class, Handle};
use crate::call::call;
use crate::comm::{MPI_Comm_rank, MPI_Comm_size};

/// `MPI_Count`.
type Count = i64;
/// `MPI_Aint`.
type Aint = i64;

/// A count or displacement as C's `int`, or the error that says why not.
fn int(v: i64) -> Result<c_int, ch4::Error> {
    c_int::try_from(v).map_err(|_| {
        ch4::Error::new(
            ErrorKind::Count,
            format!("{v} does not fit the library's element counts (C int)"),
        )
    })
}

/// Reports `e` as `func`'s error through `comm`'s handler.
fn fail(comm: Handle, func: &'static str, e: ch4::Error) -> c_int {
    call(comm, func, |_| Err(e))
}

/// The communicator's size, or the error code of asking.
fn size_of(comm: Handle) -> Result<usize, c_int> {
    let mut n = 0;
    // SAFETY: `n` is a valid int to write.
    let code = unsafe { MPI_Comm_size(comm, &mut n) };
    if code != class::SUCCESS {
        return Err(code);
    }
    Ok(n.max(0) as usize)
}

/// Whether this process is `root` of `comm`, or the error code of asking.
fn is_root(comm: Handle, root: c_int) -> Result<bool, c_int> {
    let mut me = 0;
    // SAFETY: `me` is a valid int to write.
    let code = unsafe { MPI_Comm_rank(comm, &mut me) };
    if code != class::SUCCESS {
        return Err(code);
    }
    Ok(me == root)
}

/// `n` entries of a C array of `MPI_Count`s or `MPI_Aint`s as `int`s (none when `read` is
/// false or the array is null: the `int` form then reports what it should).
///
/// # Safety
/// `a` has `n` readable entries when `read` is true and it is not null.
unsafe fn ints(a: *const i64, n: usize, read: bool) -> Result<Vec<c_int>, ch4::Error> {
    if !read || a.is_null() {
        return Ok(Vec::new());
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(a, n) }
        .iter()
        .map(|&v| int(v))
        .collect()
}

/// The pointer the `int` form gets for converted array `v`: null where none was read.
fn ptr(v: &[c_int]) -> *const c_int {
    if v.is_empty() {
        std::ptr::null()
    } else {
        v.as_ptr()
    }
}

/// Runs `body` with the converted values, or reports the conversion's error as `func`'s.
macro_rules! converted {
    ($comm:expr, $func:expr, $body:expr) => {
        match (|| -> Result<c_int, ch4::Error> { Ok($body) })() {
            Ok(code) => code,
            Err(e) => fail($comm, $func, e),
        }
    };
}

/// Runs `$body`, which may end early with an error code (`?` on `Result<_, c_int>`).
macro_rules! or_code {
    ($body:expr) => {
        match (|| -> Result<c_int, c_int> { Ok($body) })() {
            Ok(code) | Err(code) => code,
        }
    };
}

/// `MPI_Bcast_c`.
///
/// # Safety
/// As `MPI_Bcast`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Bcast_c(
    buffer: *mut c_void,
    count: Count,
    datatype: Handle,
    root: c_int,
    comm: Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    converted!(comm, "MPI_Bcast_c", unsafe {
        MPI_Bcast(buffer, int(count)?, datatype, root, comm)
    })
}

macro_rules! reduction_c {
    ($name:ident, $int:ident) => {
        #[doc = concat!("`", stringify!($name), "`.")]
        ///
        /// # Safety
        #[doc = concat!("As `", stringify!($int), "`.")]
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            sendbuf: *const c_void,
            recvbuf: *mut c_void,
            count: Count,
            datatype: Handle,
            op: Handle,
            comm: Handle,
        ) -> c_int {
            // SAFETY: the caller's contract.
            converted!(comm, stringify!($name), unsafe {
                $int(sendbuf, recvbuf, int(count)?, datatype, op, comm)
            })
        }
    };
}

reduction_c!(MPI_Allreduce_c, MPI_Allreduce);
reduction_c!(MPI_Scan_c, MPI_Scan);
reduction_c!(MPI_Exscan_c, MPI_Exscan);

/// `MPI_Reduce_c`.
///
/// # Safety
/// As `MPI_Reduce`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Reduce_c(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: Count,
    datatype: Handle,
    op: Handle,
    root: c_int,
    comm: Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    converted!(comm, "MPI_Reduce_c", unsafe {
        MPI_Reduce(sendbuf, recvbuf, int(count)?, datatype, op, root, comm)
    })
}

/// `MPI_Reduce_scatter_block`: `MPI_Reduce_scatter` with `recvcount` elements for every
/// member.
///
/// # Safety
/// `sendbuf` holds `size * recvcount` elements (or is `MPI_IN_PLACE`, the vector then in
/// `recvbuf`); `recvbuf` has room for `recvcount` (for the whole vector with `MPI_IN_PLACE`).
#[no_mangle]
pub unsafe extern "C" fn MPI_Reduce_scatter_block(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcount: c_int,
    datatype: Handle,
    op: Handle,
    comm: Handle,
) -> c_int {
    or_code!({
        let counts = vec![recvcount; size_of(comm)?];
        // SAFETY: the caller's contract; one count per member.
        unsafe { MPI_Reduce_scatter(sendbuf, recvbuf, counts.as_ptr(), datatype, op, comm) }
    })
}

/// `MPI_Reduce_scatter_block_c`.
///
/// # Safety
/// As `MPI_Reduce_scatter_block`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Reduce_scatter_block_c(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcount: Count,
    datatype: Handle,
    op: Handle,
    comm: Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    converted!(comm, "MPI_Reduce_scatter_block_c", unsafe {
        MPI_Reduce_scatter_block(sendbuf, recvbuf, int(recvcount)?, datatype, op, comm)
    })
}

/// `MPI_Reduce_scatter_c`.
///
/// # Safety
/// As `MPI_Reduce_scatter`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Reduce_scatter_c(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcounts: *const Count,
    datatype: Handle,
    op: Handle,
    comm: Handle,
) -> c_int {
    or_code!({
        let n = size_of(comm)?;
        // SAFETY: the caller's contract: one count per member.
        converted!(comm, "MPI_Reduce_scatter_c", unsafe {
            let counts = ints(recvcounts, n, true)?;
            MPI_Reduce_scatter(sendbuf, recvbuf, ptr(&counts), datatype, op, comm)
        })
    })
}

macro_rules! fixed_c {
    ($name:ident, $int:ident $(, $root:ident)?) => {
        #[doc = concat!("`", stringify!($name), "`.")]
        ///
        /// # Safety
        #[doc = concat!("As `", stringify!($int), "`.")]
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            sendbuf: *const c_void,
            sendcount: Count,
            sendtype: Handle,
            recvbuf: *mut c_void,
            recvcount: Count,
            recvtype: Handle,
            $($root: c_int,)?
            comm: Handle,
        ) -> c_int {
            // SAFETY: the caller's contract.
            converted!(comm, stringify!($name), unsafe {
                $int(
                    sendbuf,
                    int(sendcount)?,
                    sendtype,
                    recvbuf,
                    int(recvcount)?,
                    recvtype,
                    $($root,)?
                    comm,
                )
            })
        }
    };
}

fixed_c!(MPI_Gather_c, MPI_Gather, root);
fixed_c!(MPI_Scatter_c, MPI_Scatter, root);
fixed_c!(MPI_Allgather_c, MPI_Allgather);
fixed_c!(MPI_Alltoall_c, MPI_Alltoall);

/// `MPI_Gatherv_c`.
///
/// # Safety
/// As `MPI_Gatherv`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Gatherv_c(
    sendbuf: *const c_void,
    sendcount: Count,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcounts: *const Count,
    displs: *const Aint,
    recvtype: Handle,
    root: c_int,
    comm: Handle,
) -> c_int {
    or_code!({
        let (n, at_root) = (size_of(comm)?, is_root(comm, root)?);
        // SAFETY: the caller's contract: one entry per member at the root.
        converted!(comm, "MPI_Gatherv_c", unsafe {
            let (c, d) = (ints(recvcounts, n, at_root)?, ints(displs, n, at_root)?);
            MPI_Gatherv(
                sendbuf,
                int(sendcount)?,
                sendtype,
                recvbuf,
                ptr(&c),
                ptr(&d),
                recvtype,
                root,
                comm,
            )
        })
    })
}

/// `MPI_Scatterv_c`.
///
/// # Safety
/// As `MPI_Scatterv`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Scatterv_c(
    sendbuf: *const c_void,
    sendcounts: *const Count,
    displs: *const Aint,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: Count,
    recvtype: Handle,
    root: c_int,
    comm: Handle,
) -> c_int {
    or_code!({
        let (n, at_root) = (size_of(comm)?, is_root(comm, root)?);
        // SAFETY: the caller's contract: one entry per member at the root.
        converted!(comm, "MPI_Scatterv_c", unsafe {
            let (c, d) = (ints(sendcounts, n, at_root)?, ints(displs, n, at_root)?);
            MPI_Scatterv(
                sendbuf,
                ptr(&c),
                ptr(&d),
                sendtype,
                recvbuf,
                int(recvcount)?,
                recvtype,
                root,
                comm,
            )
        })
    })
}

/// `MPI_Allgatherv_c`.
///
/// # Safety
/// As `MPI_Allgatherv`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Allgatherv_c(
    sendbuf: *const c_void,
    sendcount: Count,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcounts: *const Count,
    displs: *const Aint,
    recvtype: Handle,
    comm: Handle,
) -> c_int {
    or_code!({
        let n = size_of(comm)?;
        // SAFETY: the caller's contract: one entry per member.
        converted!(comm, "MPI_Allgatherv_c", unsafe {
            let (c, d) = (ints(recvcounts, n, true)?, ints(displs, n, true)?);
            MPI_Allgatherv(
                sendbuf,
                int(sendcount)?,
                sendtype,
                recvbuf,
                ptr(&c),
                ptr(&d),
                recvtype,
                comm,
            )
        })
    })
}

/// `MPI_Alltoallv_c`.
///
/// # Safety
/// As `MPI_Alltoallv`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Alltoallv_c(
    sendbuf: *const c_void,
    sendcounts: *const Count,
    sdispls: *const Aint,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcounts: *const Count,
    rdispls: *const Aint,
    recvtype: Handle,
    comm: Handle,
) -> c_int {
    or_code!({
        let n = size_of(comm)?;
        // SAFETY: the caller's contract: one entry per member in each array.
        converted!(comm, "MPI_Alltoallv_c", unsafe {
            let (sc, sd) = (ints(sendcounts, n, true)?, ints(sdispls, n, true)?);
            let (rc, rd) = (ints(recvcounts, n, true)?, ints(rdispls, n, true)?);
            MPI_Alltoallv(
                sendbuf,
                ptr(&sc),
                ptr(&sd),
                sendtype,
                recvbuf,
                ptr(&rc),
                ptr(&rd),
                recvtype,
                comm,
            )
        })
    })
}

/// `MPI_Alltoallw_c`.
///
/// # Safety
/// As `MPI_Alltoallw`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Alltoallw_c(
    sendbuf: *const c_void,
    sendcounts: *const Count,
    sdispls: *const Aint,
    sendtypes: *const Handle,
    recvbuf: *mut c_void,
    recvcounts: *const Count,
    rdispls: *const Aint,
    recvtypes: *const Handle,
    comm: Handle,
) -> c_int {
    or_code!({
        let n = size_of(comm)?;
        // SAFETY: the caller's contract: one entry per member in each array.
        converted!(comm, "MPI_Alltoallw_c", unsafe {
            let (sc, sd) = (ints(sendcounts, n, true)?, ints(sdispls, n, true)?);
            let (rc, rd) = (ints(recvcounts, n, true)?, ints(rdispls, n, true)?);
            MPI_Alltoallw(
                sendbuf,
                ptr(&sc),
                ptr(&sd),
                sendtypes,
                recvbuf,
                ptr(&rc),
                ptr(&rd),
                recvtypes,
                comm,
            )
        })
    })
}

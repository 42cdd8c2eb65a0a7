//! `MPI_Barrier` and `MPI_Bcast`, the standard's "Barrier Synchronization" and "Broadcast".
//!
//! The device does each whole; the library only translates the communicator and, for a
//! derived datatype, broadcasts a packed copy (the root packs, the others unpack).

use std::ffi::{c_int, c_void};

use super::{packed, packed_len, unpack};
use crate::abi::Handle;
use crate::buffers::plain;
use crate::call::call;
use crate::datatype::recv_bytes;

/// `MPI_Barrier`.
#[no_mangle]
pub extern "C" fn MPI_Barrier(comm: Handle) -> c_int {
    call(comm, "MPI_Barrier", |st| {
        let id = st.comm(comm)?;
        st.device()?.barrier(id)
    })
}

/// `MPI_Bcast`.
///
/// # Safety
/// `buffer` holds (has room for) `count` elements of `datatype`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Bcast(
    buffer: *mut c_void,
    count: c_int,
    datatype: Handle,
    root: c_int,
    comm: Handle,
) -> c_int {
    call(comm, "MPI_Bcast", |st| {
        let id = st.comm(comm)?;
        if !plain(datatype, count) {
            let me = st.device()?.rank(id)?;
            let mut data = if me == root {
                // SAFETY: the caller's contract.
                unsafe { packed(st, buffer, count, datatype) }?
            } else {
                vec![0u8; packed_len(st, count, datatype)?]
            };
            st.device()?.bcast(id, root, &mut data)?;
            if me != root {
                // SAFETY: the caller's contract.
                unsafe { unpack(st, buffer, count, datatype, &data) }?;
            }
            return Ok(());
        }
        // SAFETY: the caller's contract.
        let buf = unsafe { recv_bytes(buffer, count, datatype) }?;
        st.device()?.bcast(id, root, buf)
    })
}

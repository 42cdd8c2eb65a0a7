//! `MPI_Barrier` and `MPI_Bcast`, the standard's "Barrier Synchronization" and "Broadcast".
//!
//! The device does each whole; the library only translates the communicator and, for a
//! derived datatype, broadcasts a packed copy (the root packs, the others unpack).

use std::ffi::{c_int, c_void};

use super::{packed, packed_len, unpack};
use crate::abi::Handle;
use crate::buffers::plain;
use crate::call::{call, on_device};
use crate::datatype::recv_bytes;

/// `MPI_Barrier`.
#[no_mangle]
pub extern "C" fn MPI_Barrier(comm: Handle) -> c_int {
    call(comm, "MPI_Barrier", |st| {
        let c = st.comm(comm)?;
        if super::inter::of(st, c)?.is_some() {
            return super::inter::run(st, c, Ok(super::inter::barrier()));
        }
        let id = c.id;
        on_device!(st, c.vci, |b| ch4_core::coll::barrier(b, id))
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
        let c = st.comm(comm)?;
        if let Some(m) = super::inter::of(st, c)? {
            let plan = super::nonblocking::bcast(buffer, count.into(), datatype, root, m);
            return super::inter::run(st, c, plan);
        }
        let id = c.id;
        if !plain(datatype, count) {
            let me = st.device(c.vci)?.rank(id)?;
            let mut data = if me == root {
                // SAFETY: the caller's contract.
                unsafe { packed(st, buffer, count, datatype) }?
            } else {
                vec![0u8; packed_len(st, count, datatype)?]
            };
            on_device!(st, c.vci, |b| ch4_core::coll::bcast(b, id, root, &mut data))?;
            if me != root {
                // SAFETY: the caller's contract.
                unsafe { unpack(st, buffer, count, datatype, &data) }?;
            }
            return Ok(());
        }
        // SAFETY: the caller's contract.
        let buf = unsafe { recv_bytes(buffer, count, datatype) }?;
        on_device!(st, c.vci, |b| ch4_core::coll::bcast(b, id, root, buf))
    })
}

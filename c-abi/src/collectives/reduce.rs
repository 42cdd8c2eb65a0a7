//! Reductions, the standard's "Global Reduction Operations", "Reduce-Scatter" and "Scan":
//! `MPI_Reduce`, `MPI_Allreduce`, `MPI_Reduce_scatter`, `MPI_Scan` and `MPI_Exscan`, with the
//! predefined operations and the program's own (`ops`).
//!
//! The device reduces, applying the byte-level fold the library hands it (`ops::reduction`),
//! so the library's part is the buffers: `MPI_IN_PLACE` becomes a copy of the receive buffer,
//! and `MPI_Reduce_scatter` is a reduction at rank 0 followed by a scatter of its blocks, in a
//! buffer kept between calls. A derived datatype goes the nonblocking form's way (a schedule,
//! waited for), whose plans fold packed elements with the operation's own layout. An operation that does not commute is reduced in rank order
//! (`ch4_core::coll::reduce_in_order` when the root is not rank 0; the others keep that
//! order by construction).

use std::ffi::{c_int, c_void};

use super::nonblocking::{
    via_schedule, MPI_Iallreduce, MPI_Iexscan, MPI_Ireduce, MPI_Ireduce_scatter, MPI_Iscan,
};
use super::{rank_size, scaled};
use crate::abi::{self, Handle};
use crate::call::{call, on_device};
use crate::datatype::{self, raw, raw_mut};
use crate::ops;

/// The contribution of a reduction: the send buffer, or with `MPI_IN_PLACE` a copy of the
/// receive buffer.
///
/// # Safety
/// As the reduction functions' buffers.
unsafe fn contribution(
    sendbuf: *const c_void,
    recv: &[u8],
    count: c_int,
    dt: Handle,
) -> ch4::Result<std::borrow::Cow<'static, [u8]>> {
    if sendbuf as usize == abi::IN_PLACE {
        return Ok(std::borrow::Cow::Owned(recv.to_vec()));
    }
    // SAFETY: the caller's contract; the slice is used only during the call.
    let s: &'static [u8] = unsafe { datatype::reduce_in(sendbuf, count, dt) }?;
    Ok(std::borrow::Cow::Borrowed(s))
}

/// `MPI_Reduce`.
///
/// # Safety
/// `sendbuf` holds `count` elements of `datatype` (or is `MPI_IN_PLACE` at the root);
/// `recvbuf` has room for them at the root.
#[no_mangle]
pub unsafe extern "C" fn MPI_Reduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: Handle,
    op: Handle,
    root: c_int,
    comm: Handle,
) -> c_int {
    if datatype::reduce_elem(datatype).is_none() {
        // A derived datatype: the schedule's plan folds its packed elements.
        // SAFETY: the caller's contract.
        return unsafe {
            via_schedule(|req| MPI_Ireduce(sendbuf, recvbuf, count, datatype, op, root, comm, req))
        };
    }
    call(comm, "MPI_Reduce", |st| {
        let c = st.comm(comm)?;
        if super::inter::of(st, c)?.is_some() {
            let plan = super::inter::reduce(sendbuf, recvbuf, count.into(), datatype, op, root);
            return super::inter::run(st, c, plan);
        }
        let id = c.id;
        let (fold, commutes) = ops::reduction(st, op, datatype)?;
        let me = st.device(c.vci)?.rank(id)?;
        // Only the root's receive buffer is used (the device's reduction keeps its own
        // working buffers).
        let recv: &mut [u8] = if me == root {
            // SAFETY: the caller's contract.
            unsafe { datatype::reduce_out(recvbuf, count, datatype) }?
        } else {
            &mut []
        };
        // SAFETY: the caller's contract.
        let send = unsafe { contribution(sendbuf, recv, count, datatype) }?;
        if commutes {
            on_device!(st, c.vci, |b| ch4_core::coll::reduce(
                b, id, root, &send, recv, fold
            ))
        } else {
            on_device!(st, c.vci, |b| ch4_core::coll::reduce_in_order(
                b, id, root, &send, recv, fold
            ))
        }
    })
}

/// `MPI_Allreduce`.
///
/// # Safety
/// `sendbuf` holds `count` elements of `datatype` (or is `MPI_IN_PLACE`); `recvbuf` has room
/// for them.
#[no_mangle]
pub unsafe extern "C" fn MPI_Allreduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: Handle,
    op: Handle,
    comm: Handle,
) -> c_int {
    if datatype::reduce_elem(datatype).is_none() {
        // SAFETY: the caller's contract (as in MPI_Reduce).
        return unsafe {
            via_schedule(|req| MPI_Iallreduce(sendbuf, recvbuf, count, datatype, op, comm, req))
        };
    }
    call(comm, "MPI_Allreduce", |st| {
        let c = st.comm(comm)?;
        if super::inter::of(st, c)?.is_some() {
            let plan = super::inter::allreduce(sendbuf, recvbuf, count.into(), datatype, op);
            return super::inter::run(st, c, plan);
        }
        let id = c.id;
        // Reduced at rank 0 and broadcast: rank order for any operation.
        let (fold, _) = ops::reduction(st, op, datatype)?;
        // SAFETY: the caller's contract.
        let recv = unsafe { datatype::reduce_out(recvbuf, count, datatype) }?;
        // SAFETY: the caller's contract.
        let send = unsafe { contribution(sendbuf, recv, count, datatype) }?;
        on_device!(st, c.vci, |b| ch4_core::coll::allreduce(
            b, id, &send, recv, fold
        ))
    })
}

/// `MPI_Reduce_scatter`: a reduction of the whole vector at rank 0, then a scatter of its
/// blocks.
///
/// # Safety
/// The buffers and `recvcounts` (one entry per member) are as MPI describes them.
#[no_mangle]
pub unsafe extern "C" fn MPI_Reduce_scatter(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    datatype: Handle,
    op: Handle,
    comm: Handle,
) -> c_int {
    if datatype::reduce_elem(datatype).is_none() {
        // SAFETY: the caller's contract (as in MPI_Reduce).
        return unsafe {
            via_schedule(|req| {
                MPI_Ireduce_scatter(sendbuf, recvbuf, recvcounts, datatype, op, comm, req)
            })
        };
    }
    call(comm, "MPI_Reduce_scatter", |st| {
        let c = st.comm(comm)?;
        if let Some(m) = super::inter::of(st, c)? {
            // SAFETY: the caller's contract: a count per member of the local group.
            let counts = unsafe { super::plans::array(recvcounts, m.size, "recvcounts") }?;
            let plan = super::inter::reduce_scatter(sendbuf, recvbuf, counts, datatype, op);
            return super::inter::run(st, c, plan);
        }
        let id = c.id;
        let (me, size) = rank_size(st, c)?;
        let es = datatype::reduce_elem(datatype).ok_or_else(|| datatype::bad_type(datatype))?;
        // Reduced at rank 0: rank order for any operation.
        let (fold, _) = ops::reduction(st, op, datatype)?;
        // SAFETY: the caller's contract.
        let counts = unsafe { scaled(recvcounts, size, es, "recvcounts") }?;
        let total: usize = counts.iter().sum();
        let offs: Vec<usize> = counts
            .iter()
            .scan(0, |at, &c| {
                let d = *at;
                *at += c;
                Some(d)
            })
            .collect();
        let mine = counts[me as usize];
        // SAFETY: the caller's contract.
        let recv = unsafe {
            raw_mut(
                recvbuf,
                if sendbuf as usize == abi::IN_PLACE {
                    total
                } else {
                    mine
                },
            )
        }?;
        let owned;
        let send: &[u8] = if sendbuf as usize == abi::IN_PLACE {
            owned = recv.to_vec();
            &owned
        } else {
            // SAFETY: the caller's contract.
            unsafe { raw(sendbuf, total) }?
        };
        // The reduced vector, at rank 0 only, in a buffer the library keeps between calls
        // (a fresh one page-faults on every call).
        let mut whole = std::mem::take(&mut *st.scratch.lock());
        whole.resize(if me == 0 { total } else { 0 }, 0);
        let result = on_device!(st, c.vci, |b| {
            ch4_core::coll::reduce(b, id, 0, send, &mut whole, fold).and_then(|()| {
                ch4_core::coll::scatterv(b, id, 0, &whole, &counts, &offs, &mut recv[..mine])
            })
        });
        *st.scratch.lock() = whole;
        result
    })
}

/// `MPI_Scan`.
///
/// # Safety
/// `sendbuf` holds `count` elements of `datatype` (or is `MPI_IN_PLACE`); `recvbuf` has room
/// for them.
#[no_mangle]
pub unsafe extern "C" fn MPI_Scan(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: Handle,
    op: Handle,
    comm: Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        prefix(
            "MPI_Scan", sendbuf, recvbuf, count, datatype, op, comm, true,
        )
    }
}

/// `MPI_Exscan`: rank 0's `recvbuf` is left as it was (the standard leaves it undefined).
///
/// # Safety
/// As [`MPI_Scan`].
#[no_mangle]
pub unsafe extern "C" fn MPI_Exscan(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: Handle,
    op: Handle,
    comm: Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        prefix(
            "MPI_Exscan",
            sendbuf,
            recvbuf,
            count,
            datatype,
            op,
            comm,
            false,
        )
    }
}

/// Both prefix reductions (the device's recursive doubling keeps rank order for any
/// operation).
///
/// # Safety
/// As [`MPI_Scan`].
unsafe fn prefix(
    func: &'static str,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: Handle,
    op: Handle,
    comm: Handle,
    inclusive: bool,
) -> c_int {
    if datatype::reduce_elem(datatype).is_none() {
        // SAFETY: the caller's contract (as in MPI_Reduce).
        return unsafe {
            via_schedule(|req| {
                if inclusive {
                    MPI_Iscan(sendbuf, recvbuf, count, datatype, op, comm, req)
                } else {
                    MPI_Iexscan(sendbuf, recvbuf, count, datatype, op, comm, req)
                }
            })
        };
    }
    call(comm, func, |st| {
        let c = st.comm(comm)?;
        if super::inter::of(st, c)?.is_some() {
            return Err(super::inter::undefined(func));
        }
        let id = c.id;
        let (fold, _) = ops::reduction(st, op, datatype)?;
        // SAFETY: the caller's contract.
        let recv = unsafe { datatype::reduce_out(recvbuf, count, datatype) }?;
        // SAFETY: the caller's contract.
        let send = unsafe { contribution(sendbuf, recv, count, datatype) }?;
        if inclusive {
            on_device!(st, c.vci, |b| ch4_core::coll::scan(
                b, id, &send, recv, fold
            ))
        } else {
            on_device!(st, c.vci, |b| ch4_core::coll::exscan(
                b, id, &send, recv, fold
            ))
        }
    })
}

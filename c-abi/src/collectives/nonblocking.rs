//! Nonblocking and persistent collectives, the standard's "Nonblocking Collective Operations"
//! and "Persistent Collective Operations": `MPI_Ibarrier` … `MPI_Iexscan`, `MPI_Barrier_init`
//! … `MPI_Exscan_init`, with their big-count `_c` forms.
//!
//! Each call makes a plan (`plans`) from its arguments and either starts its schedule at once
//! — the device runs it from then on, in every progress step of this rank, including those of
//! the asynchronous progress thread, and the request is an ordinary device request that
//! `MPI_Wait`, `MPI_Test` and the request sets complete — or, for the persistent forms, keeps
//! the plan in a persistent request with a tag of its own, started by every `MPI_Start`.
//!
//! A count or displacement array is read at the call; the arrays that MPI makes significant
//! only at the root (a gather's receive counts, a scatter's send counts) are read only there.

use std::ffi::{c_int, c_void};

use ch4_core::ErrorKind;

use super::inter;
use super::plans::{
    self, array, byte_blocks, equal_blocks, handles, v_blocks, Block, Plan, Reduction,
};
use super::rank_size;
use crate::abi::{self, Handle};
use ch4_core::blocking::Blocking;

use crate::call::{call, null_arg, on_device};
use crate::state::{DevReq, Persistent, State};

/// `MPI_Count`: a count of the big-count (`_c`) forms.
type Count = i64;
/// `MPI_Aint`: a displacement of the big-count forms.
type Aint = i64;

/// The member's rank and the communicator's size, for a plan's maker.
#[derive(Clone, Copy)]
pub(super) struct Members {
    /// This member's rank.
    pub rank: c_int,
    /// The communicator's size (an intercommunicator's local group's).
    pub size: usize,
    /// An intercommunicator's remote group's size; `None` for an intracommunicator.
    pub remote: Option<usize>,
}

impl Members {
    /// How many members the blocks of an all-to-all or an allgather are for: the remote
    /// group's on an intercommunicator.
    pub fn peers(&self) -> usize {
        self.remote.unwrap_or(self.size)
    }

    /// The plan of an allgather on this communicator (`send` `None` for `MPI_IN_PLACE`, which
    /// an intercommunicator does not take).
    pub fn allgatherv(&self, send: Option<Block>, recv: Vec<Block>) -> ch4::Result<Plan> {
        match (self.remote, send) {
            (None, send) => Ok(plans::allgatherv(send, recv)),
            (Some(_), Some(send)) => Ok(inter::allgatherv(send, recv)),
            (Some(_), None) => Err(in_place_inter()),
        }
    }

    /// The plan of an all-to-all on this communicator (as [`Members::allgatherv`]).
    pub fn alltoallw(&self, send: Option<Vec<Block>>, recv: Vec<Block>) -> ch4::Result<Plan> {
        match (self.remote, send) {
            (None, send) => Ok(plans::alltoallw(send, recv)),
            (Some(_), Some(send)) => Ok(inter::alltoallw(send, recv)),
            (Some(_), None) => Err(in_place_inter()),
        }
    }

    /// The plan of a reduce-scatter on this communicator.
    pub fn reduce_scatter(
        &self,
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        counts: Vec<i64>,
        dt: Handle,
        op: Handle,
    ) -> ch4::Result<Plan> {
        if self.remote.is_some() {
            inter::reduce_scatter(sendbuf, recvbuf, counts, dt, op)
        } else {
            plans::reduce_scatter(sendbuf, recvbuf, counts, dt, op)
        }
    }
}

/// `MPI_IN_PLACE` on an intercommunicator, where MPI gives it no meaning.
pub(super) fn in_place_inter() -> ch4::Error {
    ch4::Error::new(
        ErrorKind::Buffer,
        "MPI_IN_PLACE is not allowed on an intercommunicator",
    )
}

/// The [`Members`] of communicator `c`.
pub(super) fn members(st: &State, c: crate::state::CommRef) -> ch4::Result<Members> {
    let (rank, size) = rank_size(st, c)?;
    let remote = crate::intercomm::remote_size(st, c)?.map(|n| n as usize);
    Ok(Members { rank, size, remote })
}

/// Makes a nonblocking collective's plan, builds its schedule, starts it and writes its
/// request.
///
/// # Safety
/// `request` is writable; `make` reads the program's arrays as its caller's contract allows.
pub(super) unsafe fn start_now(
    comm: Handle,
    func: &'static str,
    request: *mut Handle,
    make: impl FnOnce(&State, Members) -> ch4::Result<Plan>,
) -> c_int {
    call(comm, func, |st| {
        if request.is_null() {
            return Err(null_arg("the request"));
        }
        let c = st.comm(comm)?;
        let plan = make(st, members(st, c)?)?;
        let schedule = plan(st, c)?;
        let h = st.device(c.vci)?.start_schedule(schedule, None)?;
        // SAFETY: checked non-null; the caller's contract.
        unsafe { request.write(abi::request_out(DevReq::new(h, c.vci))) };
        Ok(())
    })
}

/// Makes a persistent collective's plan and keeps it, with a tag reserved for it, in a new
/// persistent request (inactive until `MPI_Start`).
///
/// # Safety
/// As [`start_now`].
pub(super) unsafe fn init(
    comm: Handle,
    func: &'static str,
    request: *mut Handle,
    make: impl FnOnce(&State, Members) -> ch4::Result<Plan>,
) -> c_int {
    call(comm, func, |st| {
        if request.is_null() {
            return Err(null_arg("the request"));
        }
        let c = st.comm(comm)?;
        let plan = make(st, members(st, c)?)?;
        let tag = st.device(c.vci)?.reserve_schedule_tag(c.id)?;
        let i = st.add_persistent(Persistent::collective(comm, c.vci, plan, tag));
        // SAFETY: checked non-null; the caller's contract.
        unsafe { request.write(abi::persistent_out(i)) };
        Ok(())
    })
}

/// Starts the schedule of a persistent collective (from `MPI_Start`).
pub(crate) fn start_persistent(
    st: &State,
    comm: Handle,
    plan: &Plan,
    tag: ch4_core::Tag,
) -> ch4::Result<ch4_core::ReqHandle> {
    let c = st.comm(comm)?;
    let schedule = plan(st, c)?;
    st.device(c.vci)?.start_schedule(schedule, Some(tag))
}

/// Makes a blocking collective's plan, runs its schedule and waits for it (the neighbourhood
/// collectives, which have no blocking algorithm of their own).
pub(super) fn run_blocking(
    comm: Handle,
    func: &'static str,
    make: impl FnOnce(&State, Members) -> ch4::Result<Plan>,
) -> c_int {
    call(comm, func, |st| {
        let c = st.comm(comm)?;
        let plan = make(st, members(st, c)?)?;
        run_plan(st, c, &plan)
    })
}

/// A blocking collective run as its nonblocking form and a wait: the path of the cases the
/// blocking functions' own code does not take (derived datatypes in reductions and
/// all-to-all-w, the arguments MPI makes significant only at the root), which the plans
/// handle in general.
///
/// # Safety
/// `start` is the nonblocking call with the blocking call's arguments.
pub(crate) unsafe fn via_schedule(start: impl FnOnce(*mut Handle) -> c_int) -> c_int {
    let mut req = abi::REQUEST_NULL;
    let code = start(&mut req);
    if code != abi::class::SUCCESS {
        return code;
    }
    // SAFETY: `req` is the request the call just made; no status is asked for.
    unsafe { crate::requests::MPI_Wait(&mut req, std::ptr::null_mut()) }
}

/// Builds `plan`'s schedule on `c`, runs it and waits for it: a blocking collective done as
/// a schedule (the neighbourhood collectives, and every collective on an intercommunicator).
pub(super) fn run_plan(st: &State, c: crate::state::CommRef, plan: &Plan) -> ch4::Result<()> {
    let schedule = plan(st, c)?;
    let h = st.device(c.vci)?.start_schedule(schedule, None)?;
    on_device!(st, c.vci, |b| b.wait_or_abandon(h).map(drop))
}

/// Exports a nonblocking collective and its persistent form: the parameters before `comm`,
/// then a body that makes the plan from them (`$st` the state, `$m` the [`Members`]).
macro_rules! collective {
    ($i:ident, $init:ident, ($($p:ident: $t:ty),* $(,)?), |$st:ident, $m:ident| $make:expr) => {
        #[doc = concat!("`", stringify!($i), "`: starts the collective; its request completes when it ends.")]
        ///
        /// # Safety
        /// The buffers and arrays are as MPI describes them, and the buffers stay the
        /// collective's until its request completes; `request` is writable.
        #[no_mangle]
        pub unsafe extern "C" fn $i($($p: $t,)* comm: Handle, request: *mut Handle) -> c_int {
            let make = |$st: &State, $m: Members| -> ch4::Result<Plan> { $make };
            // SAFETY: the caller's contract.
            unsafe { start_now(comm, stringify!($i), request, make) }
        }

        #[doc = concat!("`", stringify!($init), "`: the persistent form, started by `MPI_Start`.")]
        ///
        /// # Safety
        /// As the nonblocking form, whenever the request is active.
        #[no_mangle]
        pub unsafe extern "C" fn $init(
            $($p: $t,)*
            comm: Handle,
            info: Handle,
            request: *mut Handle,
        ) -> c_int {
            let _ = info;
            let make = |$st: &State, $m: Members| -> ch4::Result<Plan> { $make };
            // SAFETY: the caller's contract.
            unsafe { init(comm, stringify!($init), request, make) }
        }
    };
}

collective!(MPI_Ibarrier, MPI_Barrier_init, (), |_st, m| Ok(
    if m.remote.is_some() {
        inter::barrier()
    } else {
        plans::barrier()
    }
));

/// `MPI_Ibcast`'s plan.
pub(super) fn bcast(
    buffer: *mut c_void,
    count: i64,
    datatype: Handle,
    root: c_int,
    m: Members,
) -> ch4::Result<Plan> {
    let buf = Block::new(buffer, count, datatype)?;
    Ok(if m.remote.is_some() {
        inter::bcast(buf, root)
    } else {
        plans::bcast(buf, root)
    })
}

collective!(
    MPI_Ibcast,
    MPI_Bcast_init,
    (buffer: *mut c_void, count: c_int, datatype: Handle, root: c_int),
    |_st, m| bcast(buffer, count.into(), datatype, root, m)
);
collective!(
    MPI_Ibcast_c,
    MPI_Bcast_init_c,
    (buffer: *mut c_void, count: Count, datatype: Handle, root: c_int),
    |_st, m| bcast(buffer, count, datatype, root, m)
);

macro_rules! reductions {
    ($count:ty, $ireduce:ident, $reduce_init:ident, $iall:ident, $all_init:ident,
     $iscan:ident, $scan_init:ident, $iexscan:ident, $exscan_init:ident) => {
        collective!(
            $ireduce,
            $reduce_init,
            (
                sendbuf: *const c_void,
                recvbuf: *mut c_void,
                count: $count,
                datatype: Handle,
                op: Handle,
                root: c_int,
            ),
            |_st, m| if m.remote.is_some() {
                inter::reduce(sendbuf, recvbuf, count.into(), datatype, op, root)
            } else {
                plans::reduction(
                    Reduction::Reduce(root),
                    sendbuf,
                    recvbuf,
                    count.into(),
                    datatype,
                    op,
                )
            }
        );
        collective!(
            $iall,
            $all_init,
            (
                sendbuf: *const c_void,
                recvbuf: *mut c_void,
                count: $count,
                datatype: Handle,
                op: Handle,
            ),
            |_st, m| if m.remote.is_some() {
                inter::allreduce(sendbuf, recvbuf, count.into(), datatype, op)
            } else {
                plans::reduction(Reduction::All, sendbuf, recvbuf, count.into(), datatype, op)
            }
        );
        collective!(
            $iscan,
            $scan_init,
            (
                sendbuf: *const c_void,
                recvbuf: *mut c_void,
                count: $count,
                datatype: Handle,
                op: Handle,
            ),
            |_st, m| if m.remote.is_some() {
                Err(inter::undefined(stringify!($iscan)))
            } else {
                plans::reduction(Reduction::Scan, sendbuf, recvbuf, count.into(), datatype, op)
            }
        );
        collective!(
            $iexscan,
            $exscan_init,
            (
                sendbuf: *const c_void,
                recvbuf: *mut c_void,
                count: $count,
                datatype: Handle,
                op: Handle,
            ),
            |_st, m| if m.remote.is_some() {
                Err(inter::undefined(stringify!($iexscan)))
            } else { plans::reduction(
                Reduction::Exscan,
                sendbuf,
                recvbuf,
                count.into(),
                datatype,
                op
            ) }
        );
    };
}

reductions!(
    c_int,
    MPI_Ireduce,
    MPI_Reduce_init,
    MPI_Iallreduce,
    MPI_Allreduce_init,
    MPI_Iscan,
    MPI_Scan_init,
    MPI_Iexscan,
    MPI_Exscan_init
);
reductions!(
    Count,
    MPI_Ireduce_c,
    MPI_Reduce_init_c,
    MPI_Iallreduce_c,
    MPI_Allreduce_init_c,
    MPI_Iscan_c,
    MPI_Scan_init_c,
    MPI_Iexscan_c,
    MPI_Exscan_init_c
);

fn is_in_place(buf: *const c_void) -> bool {
    buf as usize == abi::IN_PLACE
}

/// The root of a rooted collective, checked before anything is read by it.
fn root_ok(root: c_int, m: Members) -> ch4::Result<bool> {
    if !(0..m.size as c_int).contains(&root) {
        return Err(ch4::Error::new(
            ErrorKind::Root,
            format!("root {root} outside a communicator of {}", m.size),
        ));
    }
    Ok(m.rank == root)
}

macro_rules! gathers {
    ($count:ty, $displ:ty, $igather:ident, $gather_init:ident, $igatherv:ident,
     $gatherv_init:ident, $iallgather:ident, $allgather_init:ident, $iallgatherv:ident,
     $allgatherv_init:ident) => {
        collective!(
            $igather,
            $gather_init,
            (
                sendbuf: *const c_void,
                sendcount: $count,
                sendtype: Handle,
                recvbuf: *mut c_void,
                recvcount: $count,
                recvtype: Handle,
                root: c_int,
            ),
            |st, m| {
                if let Some(rs) = m.remote {
                    let recv = if inter::at_root(root, rs)? {
                        equal_blocks(st, recvbuf, recvcount.into(), recvtype, rs)?
                    } else {
                        Vec::new()
                    };
                    let send = Block::new(sendbuf, sendcount.into(), sendtype)?;
                    return Ok(inter::gatherv(send, recv, root));
                }
                let at_root = root_ok(root, m)?;
                let recv = if at_root {
                    equal_blocks(st, recvbuf, recvcount.into(), recvtype, m.size)?
                } else {
                    Vec::new()
                };
                let place = at_root && is_in_place(sendbuf);
                let send = if place {
                    Block::new(recvbuf, 0, recvtype)?
                } else {
                    Block::new(sendbuf, sendcount.into(), sendtype)?
                };
                Ok(plans::gatherv(send, place, recv, root))
            }
        );
        collective!(
            $igatherv,
            $gatherv_init,
            (
                sendbuf: *const c_void,
                sendcount: $count,
                sendtype: Handle,
                recvbuf: *mut c_void,
                recvcounts: *const $count,
                displs: *const $displ,
                recvtype: Handle,
                root: c_int,
            ),
            |st, m| {
                if let Some(rs) = m.remote {
                    let recv = if inter::at_root(root, rs)? {
                        // SAFETY: the caller's contract: one entry per remote member at the
                        // root.
                        let counts = unsafe { array(recvcounts, rs, "recvcounts") }?;
                        // SAFETY: as above.
                        let displs = unsafe { array(displs, rs, "displs") }?;
                        v_blocks(st, recvbuf, &counts, &displs, recvtype)?
                    } else {
                        Vec::new()
                    };
                    let send = Block::new(sendbuf, sendcount.into(), sendtype)?;
                    return Ok(inter::gatherv(send, recv, root));
                }
                let at_root = root_ok(root, m)?;
                let recv = if at_root {
                    // SAFETY: the caller's contract: one entry per member at the root.
                    let counts = unsafe { array(recvcounts, m.size, "recvcounts") }?;
                    // SAFETY: as above.
                    let displs = unsafe { array(displs, m.size, "displs") }?;
                    v_blocks(st, recvbuf, &counts, &displs, recvtype)?
                } else {
                    Vec::new()
                };
                let place = at_root && is_in_place(sendbuf);
                let send = if place {
                    Block::new(recvbuf, 0, recvtype)?
                } else {
                    Block::new(sendbuf, sendcount.into(), sendtype)?
                };
                Ok(plans::gatherv(send, place, recv, root))
            }
        );
        collective!(
            $iallgather,
            $allgather_init,
            (
                sendbuf: *const c_void,
                sendcount: $count,
                sendtype: Handle,
                recvbuf: *mut c_void,
                recvcount: $count,
                recvtype: Handle,
            ),
            |st, m| {
                let recv = equal_blocks(st, recvbuf, recvcount.into(), recvtype, m.peers())?;
                let send = if is_in_place(sendbuf) {
                    None
                } else {
                    Some(Block::new(sendbuf, sendcount.into(), sendtype)?)
                };
                m.allgatherv(send, recv)
            }
        );
        collective!(
            $iallgatherv,
            $allgatherv_init,
            (
                sendbuf: *const c_void,
                sendcount: $count,
                sendtype: Handle,
                recvbuf: *mut c_void,
                recvcounts: *const $count,
                displs: *const $displ,
                recvtype: Handle,
            ),
            |st, m| {
                // SAFETY: the caller's contract: one entry per member (of the remote group).
                let counts = unsafe { array(recvcounts, m.peers(), "recvcounts") }?;
                // SAFETY: as above.
                let displs = unsafe { array(displs, m.peers(), "displs") }?;
                let recv = v_blocks(st, recvbuf, &counts, &displs, recvtype)?;
                let send = if is_in_place(sendbuf) {
                    None
                } else {
                    Some(Block::new(sendbuf, sendcount.into(), sendtype)?)
                };
                m.allgatherv(send, recv)
            }
        );
    };
}

gathers!(
    c_int,
    c_int,
    MPI_Igather,
    MPI_Gather_init,
    MPI_Igatherv,
    MPI_Gatherv_init,
    MPI_Iallgather,
    MPI_Allgather_init,
    MPI_Iallgatherv,
    MPI_Allgatherv_init
);
gathers!(
    Count,
    Aint,
    MPI_Igather_c,
    MPI_Gather_init_c,
    MPI_Igatherv_c,
    MPI_Gatherv_init_c,
    MPI_Iallgather_c,
    MPI_Allgather_init_c,
    MPI_Iallgatherv_c,
    MPI_Allgatherv_init_c
);

macro_rules! scatters {
    ($count:ty, $displ:ty, $iscatter:ident, $scatter_init:ident, $iscatterv:ident,
     $scatterv_init:ident) => {
        collective!(
            $iscatter,
            $scatter_init,
            (
                sendbuf: *const c_void,
                sendcount: $count,
                sendtype: Handle,
                recvbuf: *mut c_void,
                recvcount: $count,
                recvtype: Handle,
                root: c_int,
            ),
            |st, m| {
                if let Some(rs) = m.remote {
                    let send = if inter::at_root(root, rs)? {
                        equal_blocks(st, sendbuf, sendcount.into(), sendtype, rs)?
                    } else {
                        Vec::new()
                    };
                    let recv = Block::new(recvbuf, recvcount.into(), recvtype)?;
                    return Ok(inter::scatterv(send, recv, root));
                }
                let at_root = root_ok(root, m)?;
                let send = if at_root {
                    equal_blocks(st, sendbuf, sendcount.into(), sendtype, m.size)?
                } else {
                    Vec::new()
                };
                let place = at_root && is_in_place(recvbuf);
                let recv = if place {
                    Block::new(sendbuf, 0, sendtype)?
                } else {
                    Block::new(recvbuf, recvcount.into(), recvtype)?
                };
                Ok(plans::scatterv(send, recv, place, root))
            }
        );
        collective!(
            $iscatterv,
            $scatterv_init,
            (
                sendbuf: *const c_void,
                sendcounts: *const $count,
                displs: *const $displ,
                sendtype: Handle,
                recvbuf: *mut c_void,
                recvcount: $count,
                recvtype: Handle,
                root: c_int,
            ),
            |st, m| {
                if let Some(rs) = m.remote {
                    let send = if inter::at_root(root, rs)? {
                        // SAFETY: the caller's contract: one entry per remote member at the
                        // root.
                        let counts = unsafe { array(sendcounts, rs, "sendcounts") }?;
                        // SAFETY: as above.
                        let displs = unsafe { array(displs, rs, "displs") }?;
                        v_blocks(st, sendbuf, &counts, &displs, sendtype)?
                    } else {
                        Vec::new()
                    };
                    let recv = Block::new(recvbuf, recvcount.into(), recvtype)?;
                    return Ok(inter::scatterv(send, recv, root));
                }
                let at_root = root_ok(root, m)?;
                let send = if at_root {
                    // SAFETY: the caller's contract: one entry per member at the root.
                    let counts = unsafe { array(sendcounts, m.size, "sendcounts") }?;
                    // SAFETY: as above.
                    let displs = unsafe { array(displs, m.size, "displs") }?;
                    v_blocks(st, sendbuf, &counts, &displs, sendtype)?
                } else {
                    Vec::new()
                };
                let place = at_root && is_in_place(recvbuf);
                let recv = if place {
                    Block::new(sendbuf, 0, sendtype)?
                } else {
                    Block::new(recvbuf, recvcount.into(), recvtype)?
                };
                Ok(plans::scatterv(send, recv, place, root))
            }
        );
    };
}

scatters!(
    c_int,
    c_int,
    MPI_Iscatter,
    MPI_Scatter_init,
    MPI_Iscatterv,
    MPI_Scatterv_init
);
scatters!(
    Count,
    Aint,
    MPI_Iscatter_c,
    MPI_Scatter_init_c,
    MPI_Iscatterv_c,
    MPI_Scatterv_init_c
);

macro_rules! all_to_all {
    ($count:ty, $displ:ty, $ia:ident, $a_init:ident, $iav:ident, $av_init:ident,
     $iaw:ident, $aw_init:ident) => {
        collective!(
            $ia,
            $a_init,
            (
                sendbuf: *const c_void,
                sendcount: $count,
                sendtype: Handle,
                recvbuf: *mut c_void,
                recvcount: $count,
                recvtype: Handle,
            ),
            |st, m| {
                let recv = equal_blocks(st, recvbuf, recvcount.into(), recvtype, m.peers())?;
                let send = if is_in_place(sendbuf) {
                    None
                } else {
                    Some(equal_blocks(st, sendbuf, sendcount.into(), sendtype, m.peers())?)
                };
                m.alltoallw(send, recv)
            }
        );
        collective!(
            $iav,
            $av_init,
            (
                sendbuf: *const c_void,
                sendcounts: *const $count,
                sdispls: *const $displ,
                sendtype: Handle,
                recvbuf: *mut c_void,
                recvcounts: *const $count,
                rdispls: *const $displ,
                recvtype: Handle,
            ),
            |st, m| {
                // SAFETY: the caller's contract: one entry per member in each array.
                let (rc, rd) = unsafe {
                    (
                        array(recvcounts, m.peers(), "recvcounts")?,
                        array(rdispls, m.peers(), "rdispls")?,
                    )
                };
                let recv = v_blocks(st, recvbuf, &rc, &rd, recvtype)?;
                let send = if is_in_place(sendbuf) {
                    None
                } else {
                    // SAFETY: as above.
                    let (sc, sd) = unsafe {
                        (
                            array(sendcounts, m.peers(), "sendcounts")?,
                            array(sdispls, m.peers(), "sdispls")?,
                        )
                    };
                    Some(v_blocks(st, sendbuf, &sc, &sd, sendtype)?)
                };
                m.alltoallw(send, recv)
            }
        );
        collective!(
            $iaw,
            $aw_init,
            (
                sendbuf: *const c_void,
                sendcounts: *const $count,
                sdispls: *const $displ,
                sendtypes: *const Handle,
                recvbuf: *mut c_void,
                recvcounts: *const $count,
                rdispls: *const $displ,
                recvtypes: *const Handle,
            ),
            |_st, m| {
                // SAFETY: the caller's contract: one entry per member in each array.
                let (rc, rd, rt) = unsafe {
                    (
                        array(recvcounts, m.peers(), "recvcounts")?,
                        array(rdispls, m.peers(), "rdispls")?,
                        handles(recvtypes, m.peers(), "recvtypes")?,
                    )
                };
                let recv = byte_blocks(recvbuf, &rc, &rd, &rt)?;
                let send = if is_in_place(sendbuf) {
                    None
                } else {
                    // SAFETY: as above.
                    let (sc, sd, stypes) = unsafe {
                        (
                            array(sendcounts, m.peers(), "sendcounts")?,
                            array(sdispls, m.peers(), "sdispls")?,
                            handles(sendtypes, m.peers(), "sendtypes")?,
                        )
                    };
                    Some(byte_blocks(sendbuf, &sc, &sd, &stypes)?)
                };
                m.alltoallw(send, recv)
            }
        );
    };
}

all_to_all!(
    c_int,
    c_int,
    MPI_Ialltoall,
    MPI_Alltoall_init,
    MPI_Ialltoallv,
    MPI_Alltoallv_init,
    MPI_Ialltoallw,
    MPI_Alltoallw_init
);
all_to_all!(
    Count,
    Aint,
    MPI_Ialltoall_c,
    MPI_Alltoall_init_c,
    MPI_Ialltoallv_c,
    MPI_Alltoallv_init_c,
    MPI_Ialltoallw_c,
    MPI_Alltoallw_init_c
);

macro_rules! reduce_scatters {
    ($count:ty, $irs:ident, $rs_init:ident, $irsb:ident, $rsb_init:ident) => {
        collective!(
            $irs,
            $rs_init,
            (
                sendbuf: *const c_void,
                recvbuf: *mut c_void,
                recvcounts: *const $count,
                datatype: Handle,
                op: Handle,
            ),
            |_st, m| {
                // SAFETY: the caller's contract: one entry per member.
                let counts = unsafe { array(recvcounts, m.size, "recvcounts") }?;
                m.reduce_scatter(sendbuf, recvbuf, counts, datatype, op)
            }
        );
        collective!(
            $irsb,
            $rsb_init,
            (
                sendbuf: *const c_void,
                recvbuf: *mut c_void,
                recvcount: $count,
                datatype: Handle,
                op: Handle,
            ),
            |_st, m| {
                let counts = vec![i64::from(recvcount); m.size];
                m.reduce_scatter(sendbuf, recvbuf, counts, datatype, op)
            }
        );
    };
}

reduce_scatters!(
    c_int,
    MPI_Ireduce_scatter,
    MPI_Reduce_scatter_init,
    MPI_Ireduce_scatter_block,
    MPI_Reduce_scatter_block_init
);
reduce_scatters!(
    Count,
    MPI_Ireduce_scatter_c,
    MPI_Reduce_scatter_init_c,
    MPI_Ireduce_scatter_block_c,
    MPI_Reduce_scatter_block_init_c
);

//! The collectives on intercommunicators (MPI 4.1 section 6.2.2), blocking and nonblocking
//! alike: plans whose schedules run the algorithms of `ch4_core::inter`, which work within
//! the local group over the intercommunicator's own communicator of that group and across the
//! groups over the intercommunicator. A blocking call runs its plan's schedule and waits for it
//! (`nonblocking::run_plan`), as a neighbourhood collective does; a nonblocking or persistent
//! one starts it as every other schedule.
//!
//! The rooted ones take MPI's conventions: the root passes `MPI_ROOT`, the other members of its
//! group `MPI_PROC_NULL` (they take no part), and the other group's members the root's rank in
//! the root's group. Blocks are per member of the remote group: a gather's receive blocks at the
//! root, a scatter's send blocks, an all-to-all's both sides. `MPI_IN_PLACE` has no meaning on
//! an intercommunicator and is not looked for. The prefix reductions and the neighbourhood
//! collectives are not defined on intercommunicators.

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use ch4_core::inter::{self as ic, Rooted};
use ch4_core::schedule::Schedule;
use ch4_core::ErrorKind;

use super::nonblocking::{members, Members};
use super::plans::{array, deliver_blocks, scratch_blocks, Block, Plan};
use crate::abi::Handle;
use crate::derived;
use crate::ops;
use crate::state::{CommRef, State};

/// Rank, local size and remote size of intercommunicator `c`.
fn sizes(st: &State, c: CommRef) -> ch4::Result<(c_int, c_int, c_int)> {
    let m = members(st, c)?;
    let remote = m.remote.ok_or_else(|| {
        ch4::Error::new(
            ErrorKind::Internal,
            "an intercommunicator's plan on an intracommunicator",
        )
    })?;
    Ok((m.rank, m.size as c_int, remote as c_int))
}

fn plan(f: impl Fn(&State, CommRef) -> ch4::Result<Schedule> + Send + Sync + 'static) -> Plan {
    Arc::new(f)
}

/// Whether root argument `root` makes this member the root (checked against the remote size
/// `remote`, before any array that only the root reads is read).
pub(super) fn at_root(root: c_int, remote: usize) -> ch4::Result<bool> {
    Ok(Rooted::of(root, remote as c_int)? == Rooted::Root)
}

/// The error for a collective that MPI does not define on intercommunicators.
pub(super) fn undefined(func: &str) -> ch4::Error {
    ch4::Error::new(
        ErrorKind::Comm,
        format!("{func} is not defined on an intercommunicator"),
    )
}

/// `MPI_Barrier` / `MPI_Ibarrier`.
pub(super) fn barrier() -> Plan {
    plan(|st, c| {
        let (r, n, _) = sizes(st, c)?;
        let mut s = Schedule::new(c.id);
        ic::barrier(&mut s, r, n);
        Ok(s)
    })
}

/// `MPI_Bcast` / `MPI_Ibcast` of `buf`.
pub(super) fn bcast(buf: Block, root: c_int) -> Plan {
    plan(move |st, c| {
        let (r, n, rs) = sizes(st, c)?;
        let at = Rooted::of(root, rs)?;
        let mut s = Schedule::new(c.id);
        match at {
            Rooted::Root => {
                // SAFETY: MPI's rule for the root's buffer while the broadcast is active.
                let data = s.buffer(unsafe { buf.pack(st) }?);
                ic::bcast(&mut s, r, n, at, data);
            }
            Rooted::Idle => {}
            Rooted::Leaf(_) => {
                let data = s.scratch(buf.len(st)?);
                ic::bcast(&mut s, r, n, at, data);
                // SAFETY: MPI's rule for the buffer of a member that receives.
                let out = s.output(unsafe { buf.output(st) }?);
                s.deliver(data, out, 0);
            }
        }
        Ok(s)
    })
}

/// `MPI_Reduce` / `MPI_Ireduce`: the other group's `count` elements reduced to the root.
pub(super) fn reduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: i64,
    dt: Handle,
    op: Handle,
    root: c_int,
) -> ch4::Result<Plan> {
    let send = Block::new(sendbuf, count, dt)?;
    let recv = Block::new(recvbuf, count, dt)?;
    Ok(plan(move |st, c| {
        let (r, n, rs) = sizes(st, c)?;
        let at = Rooted::of(root, rs)?;
        let mut s = Schedule::new(c.id);
        match at {
            Rooted::Root => {
                let acc = s.scratch(recv.len(st)?);
                ic::reduce(&mut s, r, n, at, acc, true);
                // SAFETY: MPI's rule for the root's receive buffer of an active reduction.
                let out = s.output(unsafe { recv.output(st) }?);
                s.deliver(acc, out, 0);
            }
            Rooted::Idle => {}
            Rooted::Leaf(_) => {
                let (fold, commutes) = ops::reduction(st, op, dt)?;
                s.set_fold(fold);
                // SAFETY: MPI's rule for the send buffer of an active reduction.
                let acc = s.buffer(unsafe { send.pack(st) }?);
                ic::reduce(&mut s, r, n, at, acc, commutes);
            }
        }
        Ok(s)
    }))
}

/// `MPI_Allreduce` / `MPI_Iallreduce`: each group gets the reduction of the other's.
pub(super) fn allreduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: i64,
    dt: Handle,
    op: Handle,
) -> ch4::Result<Plan> {
    let send = Block::new(sendbuf, count, dt)?;
    let recv = Block::new(recvbuf, count, dt)?;
    Ok(plan(move |st, c| {
        let (r, n, _) = sizes(st, c)?;
        let (fold, commutes) = ops::reduction(st, op, dt)?;
        let mut s = Schedule::new(c.id);
        s.set_fold(fold);
        // SAFETY: MPI's rule for the send buffer of an active reduction.
        let acc = s.buffer(unsafe { send.pack(st) }?);
        let result = s.scratch(recv.len(st)?);
        ic::allreduce(&mut s, r, n, acc, result, commutes);
        // SAFETY: MPI's rule for the receive buffer of an active reduction.
        let out = s.output(unsafe { recv.output(st) }?);
        s.deliver(result, out, 0);
        Ok(s)
    }))
}

/// `MPI_Reduce_scatter` / `_block` and their `I` forms: the other group's vector of
/// `sum(counts)` elements reduced, member `i` of this group getting `counts[i]` of them.
pub(super) fn reduce_scatter(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    counts: Vec<i64>,
    dt: Handle,
    op: Handle,
) -> ch4::Result<Plan> {
    let total: i64 = counts.iter().sum();
    let send = Block::new(sendbuf, total, dt)?;
    let recvbuf = recvbuf as usize;
    Ok(plan(move |st, c| {
        let (r, n, _) = sizes(st, c)?;
        if counts.len() != n as usize {
            return Err(ch4::Error::new(
                ErrorKind::Internal,
                "reduce-scatter counts",
            ));
        }
        let (fold, commutes) = ops::reduction(st, op, dt)?;
        let mut s = Schedule::new(c.id);
        s.set_fold(fold);
        // SAFETY: MPI's rule for the send buffer of an active reduce-scatter.
        let acc = s.buffer(unsafe { send.pack(st) }?);
        let result = s.scratch(acc.len());
        let size = if total == 0 {
            0
        } else {
            derived::desc(st, dt)?.size
        };
        let mut blocks = Vec::with_capacity(counts.len());
        let mut off = 0;
        for &k in &counts {
            let len = usize::try_from(k)
                .map_err(|_| ch4::Error::new(ErrorKind::Count, format!("count {k} is negative")))?
                * size;
            blocks.push(result.sub(off, len));
            off += len;
        }
        let mine = s.scratch(blocks[r as usize].len());
        ic::reduce_scatter(&mut s, r, n, acc, result, &blocks, mine, commutes)?;
        let out = Block::new(recvbuf as *const c_void, counts[r as usize], dt)?;
        // SAFETY: MPI's rule for the receive buffer of an active reduce-scatter.
        let o = s.output(unsafe { out.output(st) }?);
        s.deliver(mine, o, 0);
        Ok(s)
    }))
}

/// `MPI_Gather(v)` / `MPI_Igather(v)`: at the root, `recv[i]` is where remote member `i`'s
/// block goes; the other group's members send `send` to it.
pub(super) fn gatherv(send: Block, recv: Vec<Block>, root: c_int) -> Plan {
    plan(move |st, c| {
        let (_, _, rs) = sizes(st, c)?;
        let mut s = Schedule::new(c.id);
        match Rooted::of(root, rs)? {
            Rooted::Root => {
                let blocks = scratch_blocks(st, &mut s, &recv, rs)?;
                let from: Vec<_> = (0..rs).zip(blocks.iter().copied()).collect();
                ic::exchange(&mut s, &[], &from);
                deliver_blocks(st, &mut s, &recv, &blocks, None)?;
            }
            Rooted::Idle => {}
            Rooted::Leaf(root) => {
                // SAFETY: MPI's rule for the send buffer of an active gather.
                let mine = s.buffer(unsafe { send.pack(st) }?);
                ic::exchange(&mut s, &[(root, mine)], &[]);
            }
        }
        Ok(s)
    })
}

/// `MPI_Scatter(v)` / `MPI_Iscatter(v)`: at the root, `send[j]` goes to remote member `j`;
/// the other group's members receive theirs into `recv`.
pub(super) fn scatterv(send: Vec<Block>, recv: Block, root: c_int) -> Plan {
    plan(move |st, c| {
        let (_, _, rs) = sizes(st, c)?;
        let mut s = Schedule::new(c.id);
        match Rooted::of(root, rs)? {
            Rooted::Root => {
                if send.len() != rs as usize {
                    return Err(ch4::Error::new(ErrorKind::Internal, "scatter blocks"));
                }
                let mut to = Vec::with_capacity(send.len());
                for (j, b) in send.iter().enumerate() {
                    // SAFETY: MPI's rule for the root's send buffer of an active scatter.
                    to.push((j as c_int, s.buffer(unsafe { b.pack(st) }?)));
                }
                ic::exchange(&mut s, &to, &[]);
            }
            Rooted::Idle => {}
            Rooted::Leaf(root) => {
                let mine = s.scratch(recv.len(st)?);
                ic::exchange(&mut s, &[], &[(root, mine)]);
                // SAFETY: MPI's rule for the receive buffer of an active scatter.
                let out = s.output(unsafe { recv.output(st) }?);
                s.deliver(mine, out, 0);
            }
        }
        Ok(s)
    })
}

/// `MPI_Allgather(v)` / `MPI_Iallgather(v)`: `send` goes to every member of the other group,
/// `recv[i]` comes from its member `i`.
pub(super) fn allgatherv(send: Block, recv: Vec<Block>) -> Plan {
    plan(move |st, c| {
        let (_, _, rs) = sizes(st, c)?;
        let mut s = Schedule::new(c.id);
        // SAFETY: MPI's rule for the send buffer of an active allgather.
        let mine = s.buffer(unsafe { send.pack(st) }?);
        let blocks = scratch_blocks(st, &mut s, &recv, rs)?;
        let to: Vec<_> = (0..rs).map(|j| (j, mine)).collect();
        let from: Vec<_> = (0..rs).zip(blocks.iter().copied()).collect();
        ic::exchange(&mut s, &to, &from);
        deliver_blocks(st, &mut s, &recv, &blocks, None)?;
        Ok(s)
    })
}

/// `MPI_Alltoall(v, w)` / `MPI_Ialltoall(v, w)`: `send[j]` goes to remote member `j`,
/// `recv[i]` comes from remote member `i`.
pub(super) fn alltoallw(send: Vec<Block>, recv: Vec<Block>) -> Plan {
    plan(move |st, c| {
        let (_, _, rs) = sizes(st, c)?;
        if send.len() != rs as usize {
            return Err(ch4::Error::new(ErrorKind::Internal, "all-to-all blocks"));
        }
        let mut s = Schedule::new(c.id);
        let mut to = Vec::with_capacity(send.len());
        for (j, b) in send.iter().enumerate() {
            // SAFETY: MPI's rule for the send buffer of an active all-to-all (copied now).
            to.push((j as c_int, s.buffer(unsafe { b.pack(st) }?)));
        }
        let blocks = scratch_blocks(st, &mut s, &recv, rs)?;
        let from: Vec<_> = (0..rs).zip(blocks.iter().copied()).collect();
        ic::exchange(&mut s, &to, &from);
        deliver_blocks(st, &mut s, &recv, &blocks, None)?;
        Ok(s)
    })
}

/// The [`Members`] of `c` if it is an intercommunicator (a blocking collective's branch).
pub(super) fn of(st: &State, c: CommRef) -> ch4::Result<Option<Members>> {
    let m = members(st, c)?;
    Ok(m.remote.is_some().then_some(m))
}

/// Runs a blocking collective on an intercommunicator: `plan`'s schedule, waited for.
pub(super) fn run(st: &State, c: CommRef, plan: ch4::Result<Plan>) -> ch4::Result<()> {
    super::nonblocking::run_plan(st, c, &plan?)
}

/// The blocks of `count` elements of `dt` each, one per remote member, from `buf`.
pub(super) fn equal(
    st: &State,
    buf: *const c_void,
    count: c_int,
    dt: Handle,
    m: Members,
) -> ch4::Result<Vec<Block>> {
    super::plans::equal_blocks(st, buf, count.into(), dt, m.peers())
}

/// The blocks of a `v` collective's buffer with one count and displacement per remote member.
///
/// # Safety
/// `counts` and `displs` have an entry per remote member.
pub(super) unsafe fn v(
    st: &State,
    buf: *const c_void,
    counts: *const c_int,
    displs: *const c_int,
    dt: Handle,
    m: Members,
) -> ch4::Result<Vec<Block>> {
    // SAFETY: the caller's contract.
    let (k, d) = unsafe {
        (
            array(counts, m.peers(), "counts")?,
            array(displs, m.peers(), "displacements")?,
        )
    };
    super::plans::v_blocks(st, buf, &k, &d, dt)
}

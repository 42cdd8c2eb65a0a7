//! What a nonblocking, persistent or neighbourhood collective does, kept as a plan that builds
//! the collective's schedule (`ch4_core::schedule`) from the program's buffers.
//!
//! A nonblocking call builds its schedule at once and starts it; a persistent one
//! (`MPI_Allreduce_init`) keeps the plan and builds a fresh schedule at every `MPI_Start`,
//! which is when MPI says the send buffers are read. A plan holds the call's arguments —
//! addresses, counts, datatypes, the count and displacement arrays copied at the call (the
//! program may reuse its arrays at once for all the library cares) — and builds in three
//! parts: the program's send data packed into the schedule's buffers, the algorithm of
//! `ch4_core::nbc`, and delivery steps that write each result block through a receive buffer
//! made over the program's memory (a layout for a derived datatype).

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use ch4_core::buffer::RecvBuf;
use ch4_core::nbc;
use ch4_core::schedule::{Schedule, Slice};
use ch4_core::{ErrorKind, Tag};

use super::rank_size;
use crate::abi::{self, Handle};
use crate::buffers::{rbuf, sbuf};
use crate::call::null_arg;
use crate::derived;
use crate::ops;
use crate::state::{CommRef, State};

/// Builds a collective's schedule on a communicator.
pub(crate) type Plan = Arc<dyn Fn(&State, CommRef) -> ch4::Result<Schedule> + Send + Sync>;

/// `count` elements of datatype `dt` at address `addr` of the program's memory.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Block {
    addr: usize,
    count: c_int,
    dt: Handle,
}

impl Block {
    /// The block at `buf`; a count beyond C's `int` is refused (the library's datatypes count
    /// in `int`s).
    pub fn new(buf: *const c_void, count: i64, dt: Handle) -> ch4::Result<Block> {
        Ok(Block {
            addr: buf as usize,
            count: int_count(count)?,
            dt,
        })
    }

    /// The block `displ` elements of `dt` (its extent each) past `buf`, as the `v` forms of
    /// the collectives place their blocks.
    pub fn displaced(
        st: &State,
        buf: *const c_void,
        displ: i64,
        count: i64,
        dt: Handle,
    ) -> ch4::Result<Block> {
        let extent = if count == 0 {
            0
        } else {
            derived::desc(st, dt)?.extent as i64
        };
        Block::at_bytes(buf, displ.saturating_mul(extent), count, dt)
    }

    /// The block `bytes` bytes past `buf` (`MPI_Alltoallw`'s displacements).
    pub fn at_bytes(buf: *const c_void, bytes: i64, count: i64, dt: Handle) -> ch4::Result<Block> {
        let addr = (buf as usize as i64).wrapping_add(bytes) as usize;
        Block::new(addr as *const c_void, count, dt)
    }

    /// The packed length of its elements.
    pub fn len(&self, st: &State) -> ch4::Result<usize> {
        if self.count == 0 {
            return Ok(0);
        }
        Ok(self.count as usize * derived::desc(st, self.dt)?.size)
    }

    /// A packed copy of its elements.
    ///
    /// # Safety
    /// The program's memory holds the elements (MPI's rule for a collective's send buffer
    /// while its call or request is active).
    pub unsafe fn pack(&self, st: &State) -> ch4::Result<Vec<u8>> {
        if self.count == 0 {
            return Ok(Vec::new());
        }
        // SAFETY: the caller's contract; the copy is made before this returns.
        unsafe { sbuf(st, self.addr as *const c_void, self.count, self.dt) }?.to_vec()
    }

    /// A receive buffer over its elements, for a schedule's deliveries.
    ///
    /// # Safety
    /// The program's memory has room for the elements and leaves them to the library until
    /// the collective completes (MPI's rule for a receive buffer of an active request).
    pub unsafe fn output(&self, st: &State) -> ch4::Result<RecvBuf> {
        if self.count == 0 {
            return Ok(RecvBuf::owned(0));
        }
        // SAFETY: the caller's contract.
        unsafe { rbuf(st, self.addr as *mut c_void, self.count, self.dt) }
    }
}

/// The blocks of a `v` collective's buffer: `counts[i]` elements of `dt` at `displs[i]`
/// extents past `buf`.
pub(crate) fn v_blocks(
    st: &State,
    buf: *const c_void,
    counts: &[i64],
    displs: &[i64],
    dt: Handle,
) -> ch4::Result<Vec<Block>> {
    counts
        .iter()
        .zip(displs)
        .map(|(&k, &d)| Block::displaced(st, buf, d, k, dt))
        .collect()
}

/// `count` elements of `dt` a block, one per member, back to back from `buf`.
pub(crate) fn equal_blocks(
    st: &State,
    buf: *const c_void,
    count: i64,
    dt: Handle,
    n: usize,
) -> ch4::Result<Vec<Block>> {
    (0..n as i64)
        .map(|i| Block::displaced(st, buf, i * count, count, dt))
        .collect()
}

/// Blocks at byte displacements, each of its own datatype (the `w` forms).
pub(crate) fn byte_blocks(
    buf: *const c_void,
    counts: &[i64],
    displs: &[i64],
    types: &[Handle],
) -> ch4::Result<Vec<Block>> {
    counts
        .iter()
        .zip(displs)
        .zip(types)
        .map(|((&k, &d), &t)| Block::at_bytes(buf, d, k, t))
        .collect()
}

/// A count that fits C's `int`, or a count error.
pub(crate) fn int_count(count: i64) -> ch4::Result<c_int> {
    c_int::try_from(count).map_err(|_| {
        ch4::Error::new(
            ErrorKind::Count,
            format!("count {count} is negative or beyond 2^31 - 1 elements"),
        )
    })
}

/// `n` entries of a C array of counts or displacements (`int`, `MPI_Count` or `MPI_Aint`).
///
/// # Safety
/// `a` has `n` readable entries, or is null when `n` is 0.
pub(crate) unsafe fn array<T: Copy + Into<i64>>(
    a: *const T,
    n: usize,
    what: &str,
) -> ch4::Result<Vec<i64>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    if a.is_null() {
        return Err(null_arg(what));
    }
    // SAFETY: the caller's contract.
    let s = unsafe { std::slice::from_raw_parts(a, n) };
    Ok(s.iter().map(|&v| v.into()).collect())
}

/// `n` datatype handles of `MPI_Alltoallw`.
///
/// # Safety
/// As [`array`].
pub(crate) unsafe fn handles(a: *const Handle, n: usize, what: &str) -> ch4::Result<Vec<Handle>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    if a.is_null() {
        return Err(null_arg(what));
    }
    // SAFETY: the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(a, n) }.to_vec())
}

fn in_place(buf: *const c_void) -> bool {
    buf as usize == abi::IN_PLACE
}

fn check_root(root: c_int, size: c_int) -> ch4::Result<()> {
    if (0..size).contains(&root) {
        Ok(())
    } else {
        Err(ch4::Error::new(
            ErrorKind::Root,
            format!("root {root} outside a communicator of {size}"),
        ))
    }
}

fn length_mismatch(what: &str) -> ch4::Error {
    ch4::Error::new(
        ErrorKind::Count,
        format!("{what}: the send and receive blocks differ in length"),
    )
}

/// Where the rank and size of the communicator go (`c_int` for both).
fn members(st: &State, c: CommRef) -> ch4::Result<(c_int, c_int)> {
    let (r, n) = rank_size(st, c)?;
    Ok((r, n as c_int))
}

/// A plan from a closure (the address values it captures are plain integers).
pub(super) fn plan(
    f: impl Fn(&State, CommRef) -> ch4::Result<Schedule> + Send + Sync + 'static,
) -> Plan {
    Arc::new(f)
}

/// The largest allreduce (bytes) that goes through member 0 on a crowded node
/// ([`ch4_core::nbc::allreduce_flat`]): beyond, member 0's folds and sends of the whole vector
/// to everyone cost more than the waits they save.
const FLAT_ALLREDUCE_MAX: usize = 4096;

/// `MPI_Ibarrier`.
pub(crate) fn barrier() -> Plan {
    plan(|st, c| {
        let (r, n) = members(st, c)?;
        let mut s = Schedule::new(c.id);
        nbc::barrier(&mut s, r, n);
        Ok(s)
    })
}

/// `MPI_Ibcast`.
pub(crate) fn bcast(buf: Block, root: c_int) -> Plan {
    plan(move |st, c| {
        let (r, n) = members(st, c)?;
        check_root(root, n)?;
        let mut s = Schedule::new(c.id);
        let data = if r == root {
            // SAFETY: MPI's rule for the root's buffer while the broadcast is active.
            s.buffer(unsafe { buf.pack(st) }?)
        } else {
            s.scratch(buf.len(st)?)
        };
        nbc::bcast(&mut s, r, n, root, data);
        if r != root {
            // SAFETY: MPI's rule for the buffer of a member that receives.
            let out = s.output(unsafe { buf.output(st) }?);
            s.deliver(data, out, 0);
        }
        Ok(s)
    })
}

/// The reduction kinds that share [`reduction`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reduction {
    /// `MPI_Ireduce` to this root.
    Reduce(c_int),
    /// `MPI_Iallreduce`.
    All,
    /// `MPI_Iscan`.
    Scan,
    /// `MPI_Iexscan`.
    Exscan,
}

/// `MPI_Ireduce`, `MPI_Iallreduce`, `MPI_Iscan`, `MPI_Iexscan`: `count` elements of `dt` from
/// `sendbuf` (or, with `MPI_IN_PLACE`, from `recvbuf`) folded with `op` into `recvbuf`.
pub(crate) fn reduction(
    kind: Reduction,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: i64,
    dt: Handle,
    op: Handle,
) -> ch4::Result<Plan> {
    let send = Block::new(sendbuf, count, dt)?;
    let recv = Block::new(recvbuf, count, dt)?;
    let place = in_place(sendbuf);
    Ok(plan(move |st, c| {
        let (r, n) = members(st, c)?;
        let (fold, commutes) = ops::reduction(st, op, dt)?;
        let mut s = Schedule::new(c.id);
        s.set_fold(fold);
        let receives = match kind {
            Reduction::Reduce(root) => {
                check_root(root, n)?;
                r == root
            }
            Reduction::Exscan => r > 0,
            Reduction::All | Reduction::Scan => true,
        };
        // SAFETY: MPI's rule for a reduction's buffers while it is active: the contribution
        // is in the send buffer, or with MPI_IN_PLACE in the receive buffer.
        let mine = unsafe {
            if place {
                recv.pack(st)
            } else {
                send.pack(st)
            }
        }?;
        let acc = s.buffer(mine);
        let result = match kind {
            Reduction::Reduce(root) => {
                nbc::reduce(&mut s, r, n, root, acc, commutes);
                acc
            }
            Reduction::All => {
                // Through member 0 where the node's ranks crowd its CPUs (every member of a
                // communicator on one node decides it alike), by recursive doubling elsewhere.
                let flat = n > 2
                    && acc.len() <= FLAT_ALLREDUCE_MAX
                    && ch4_core::device::yields_at_once()
                    && st.device(c.vci)?.collectives_on_node(c.id)? == Some(true);
                if flat {
                    nbc::allreduce_flat(&mut s, r, n, acc);
                } else {
                    nbc::allreduce(&mut s, r, n, acc);
                }
                acc
            }
            Reduction::Scan | Reduction::Exscan => {
                let result = s.scratch(acc.len());
                nbc::scan(&mut s, r, n, acc, result, kind == Reduction::Scan);
                result
            }
        };
        if receives {
            // SAFETY: MPI's rule for the receive buffer of an active reduction.
            let out = s.output(unsafe { recv.output(st) }?);
            s.deliver(result, out, 0);
        }
        Ok(s)
    }))
}

/// `MPI_Igatherv` (and `MPI_Igather`, with equal blocks): `recv[i]` is where member `i`'s
/// block goes at the root.
pub(crate) fn gatherv(send: Block, in_place_root: bool, recv: Vec<Block>, root: c_int) -> Plan {
    plan(move |st, c| {
        let (r, n) = members(st, c)?;
        check_root(root, n)?;
        let mut s = Schedule::new(c.id);
        if r != root {
            // SAFETY: MPI's rule for the send buffer of an active gather.
            let mine = s.buffer(unsafe { send.pack(st) }?);
            nbc::gatherv(&mut s, r, n, root, mine, &[])?;
            return Ok(s);
        }
        let blocks = scratch_blocks(st, &mut s, &recv, n)?;
        let me = root as usize;
        // SAFETY: as above; with MPI_IN_PLACE the root's block is already where it goes.
        let mine = s.buffer(unsafe {
            if in_place_root {
                recv[me].pack(st)
            } else {
                send.pack(st)
            }
        }?);
        if mine.len() != blocks[me].len() {
            return Err(length_mismatch("gather"));
        }
        nbc::gatherv(&mut s, r, n, root, mine, &blocks)?;
        deliver_blocks(st, &mut s, &recv, &blocks, in_place_root.then_some(me))?;
        Ok(s)
    })
}

/// `MPI_Iscatterv` (and `MPI_Iscatter`): `send[i]` is member `i`'s block at the root.
pub(crate) fn scatterv(send: Vec<Block>, recv: Block, in_place_root: bool, root: c_int) -> Plan {
    plan(move |st, c| {
        let (r, n) = members(st, c)?;
        check_root(root, n)?;
        let mut s = Schedule::new(c.id);
        if r != root {
            let mine = s.scratch(recv.len(st)?);
            nbc::scatterv(&mut s, r, n, root, &[], mine, 0)?;
            // SAFETY: MPI's rule for the receive buffer of an active scatter.
            let out = s.output(unsafe { recv.output(st) }?);
            s.deliver(mine, out, 0);
            return Ok(s);
        }
        if send.len() != n as usize {
            return Err(ch4::Error::new(ErrorKind::Internal, "scatter blocks"));
        }
        let mut blocks = Vec::with_capacity(send.len());
        for b in &send {
            // SAFETY: MPI's rule for the root's send buffer of an active scatter.
            blocks.push(s.buffer(unsafe { b.pack(st) }?));
        }
        let me = root as usize;
        let mine = if in_place_root {
            s.scratch(blocks[me].len())
        } else {
            s.scratch(recv.len(st)?)
        };
        if mine.len() != blocks[me].len() {
            return Err(length_mismatch("scatter"));
        }
        nbc::scatterv(&mut s, r, n, root, &blocks, mine, 0)?;
        if !in_place_root {
            // SAFETY: as above, the root's receive buffer.
            let out = s.output(unsafe { recv.output(st) }?);
            s.deliver(mine, out, 0);
        }
        Ok(s)
    })
}

/// `MPI_Iallgatherv` (and `MPI_Iallgather`): `recv[i]` is where member `i`'s block goes; with
/// `send` `None` (`MPI_IN_PLACE`) this member's block is already in its place.
pub(crate) fn allgatherv(send: Option<Block>, recv: Vec<Block>) -> Plan {
    plan(move |st, c| {
        let (r, n) = members(st, c)?;
        let mut s = Schedule::new(c.id);
        let blocks = scratch_blocks(st, &mut s, &recv, n)?;
        let me = r as usize;
        // SAFETY: MPI's rule for the buffers of an active allgather.
        let mine = s.buffer(unsafe {
            match send {
                Some(b) => b.pack(st),
                None => recv[me].pack(st),
            }
        }?);
        if mine.len() != blocks[me].len() {
            return Err(length_mismatch("allgather"));
        }
        if !mine.is_empty() {
            s.copy(mine, blocks[me]);
        }
        nbc::allgatherv(&mut s, r, n, &blocks)?;
        deliver_blocks(st, &mut s, &recv, &blocks, send.is_none().then_some(me))?;
        Ok(s)
    })
}

/// `MPI_Ialltoallw` (and the `v` and plain forms): `send[j]` goes to member `j`, `recv[i]`
/// comes from member `i`; with `send` `None` (`MPI_IN_PLACE`) the data to send is what the
/// receive blocks hold when the collective starts.
pub(crate) fn alltoallw(send: Option<Vec<Block>>, recv: Vec<Block>) -> Plan {
    plan(move |st, c| {
        let (r, n) = members(st, c)?;
        let mut s = Schedule::new(c.id);
        let from = send.as_ref().unwrap_or(&recv);
        if from.len() != n as usize || recv.len() != n as usize {
            return Err(ch4::Error::new(ErrorKind::Internal, "all-to-all blocks"));
        }
        let mut out_blocks = Vec::with_capacity(from.len());
        for b in from {
            // SAFETY: MPI's rule for the buffers of an active all-to-all (copied now).
            out_blocks.push(s.buffer(unsafe { b.pack(st) }?));
        }
        let blocks = scratch_blocks(st, &mut s, &recv, n)?;
        nbc::alltoallv(&mut s, r, n, &out_blocks, &blocks)?;
        deliver_blocks(st, &mut s, &recv, &blocks, None)?;
        Ok(s)
    })
}

/// `MPI_Ireduce_scatter` (and `_block`): the vector of `sum(counts)` elements folded with `op`,
/// member `i` getting the `counts[i]` elements after the first `i` blocks.
pub(crate) fn reduce_scatter(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    counts: Vec<i64>,
    dt: Handle,
    op: Handle,
) -> ch4::Result<Plan> {
    let total: i64 = counts.iter().sum();
    let send = Block::new(sendbuf, total, dt)?;
    let whole_recv = Block::new(recvbuf, total, dt)?;
    let place = in_place(sendbuf);
    let recvbuf = recvbuf as usize;
    Ok(plan(move |st, c| {
        let (r, n) = members(st, c)?;
        if counts.len() != n as usize {
            return Err(ch4::Error::new(
                ErrorKind::Internal,
                "reduce-scatter counts",
            ));
        }
        let (fold, _) = ops::reduction(st, op, dt)?;
        let mut s = Schedule::new(c.id);
        s.set_fold(fold);
        // SAFETY: MPI's rule for the buffers of an active reduce-scatter: the whole vector in
        // the send buffer, or with MPI_IN_PLACE in the receive buffer.
        let acc = s.buffer(unsafe {
            if place {
                whole_recv.pack(st)
            } else {
                send.pack(st)
            }
        }?);
        let size = if total == 0 {
            0
        } else {
            derived::desc(st, dt)?.size
        };
        let mut blocks = Vec::with_capacity(counts.len());
        let mut off = 0;
        for &k in &counts {
            let len = usize::try_from(k).map_err(|_| negative(k))? * size;
            blocks.push(acc.sub(off, len));
            off += len;
        }
        let mine = s.scratch(blocks[r as usize].len());
        nbc::reduce_scatter(&mut s, r, n, acc, &blocks, mine)?;
        let out = Block::new(recvbuf as *const c_void, counts[r as usize], dt)?;
        // SAFETY: MPI's rule for the receive buffer of an active reduce-scatter.
        let o = s.output(unsafe { out.output(st) }?);
        s.deliver(mine, o, 0);
        Ok(s)
    }))
}

/// A neighbourhood collective: `send[k]` goes to `dests[k]`, `recv[k]` comes from
/// `sources[k]`, each edge on the sub-tag given with it.
pub(crate) fn neighbours(
    sources: Vec<(c_int, Tag)>,
    dests: Vec<(c_int, Tag)>,
    send: Vec<Block>,
    recv: Vec<Block>,
) -> Plan {
    plan(move |st, c| {
        let mut s = Schedule::new(c.id);
        let mut out_blocks = Vec::with_capacity(send.len());
        for b in &send {
            // SAFETY: MPI's rule for the send buffer of an active neighbourhood collective.
            out_blocks.push(s.buffer(unsafe { b.pack(st) }?));
        }
        let mut in_blocks = Vec::with_capacity(recv.len());
        for b in &recv {
            in_blocks.push(s.scratch(b.len(st)?));
        }
        nbc::neighbours(&mut s, &sources, &dests, &out_blocks, &in_blocks)?;
        for (k, (b, &slice)) in recv.iter().zip(&in_blocks).enumerate() {
            if sources[k].0 == abi::PROC_NULL || slice.is_empty() {
                continue;
            }
            // SAFETY: MPI's rule for the receive buffer of an active neighbourhood collective.
            let o = s.output(unsafe { b.output(st) }?);
            s.deliver(slice, o, 0);
        }
        Ok(s)
    })
}

/// A working block for each of `recv`'s, in one buffer.
pub(super) fn scratch_blocks(
    st: &State,
    s: &mut Schedule,
    recv: &[Block],
    n: c_int,
) -> ch4::Result<Vec<Slice>> {
    if recv.len() != n as usize {
        return Err(ch4::Error::new(ErrorKind::Internal, "a block per member"));
    }
    let lens = recv
        .iter()
        .map(|b| b.len(st))
        .collect::<ch4::Result<Vec<_>>>()?;
    let all = s.scratch(lens.iter().sum());
    let mut off = 0;
    Ok(lens
        .iter()
        .map(|&len| {
            let b = all.sub(off, len);
            off += len;
            b
        })
        .collect())
}

/// Delivery steps writing each working block into the program's block, except `skip`'s.
pub(super) fn deliver_blocks(
    st: &State,
    s: &mut Schedule,
    recv: &[Block],
    blocks: &[Slice],
    skip: Option<usize>,
) -> ch4::Result<()> {
    for (i, (b, &slice)) in recv.iter().zip(blocks).enumerate() {
        if Some(i) == skip || slice.is_empty() {
            continue;
        }
        // SAFETY: MPI's rule for the receive buffer of an active collective.
        let o = s.output(unsafe { b.output(st) }?);
        s.deliver(slice, o, 0);
    }
    Ok(())
}

fn negative(k: i64) -> ch4::Error {
    ch4::Error::new(ErrorKind::Count, format!("count {k} is negative"))
}

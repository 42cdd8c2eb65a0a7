//! Collectives built on the device's point-to-point, and the communicator constructors that
//! need them.
//!
//! Every collective runs on its communicator's collective context, so it can never match a
//! user's point-to-point message, and uses a fixed tag per operation: collectives are called in
//! the same order by every member, and non-overtaking keeps consecutive ones apart. The
//! algorithms are the classic latency-optimal ones (dissemination barrier, binomial trees for
//! broadcast and reduction, recursive doubling for allreduce and the prefix reductions, as
//! MPICH's defaults for small messages); they are what benchmarks and frameworks need, not a
//! tuned collective library.
//!
//! Each is written once over [`Blocking`], so it runs on a device one thread owns (the
//! `Device` methods below) and on one that threads share behind a lock
//! ([`crate::blocking::Shared`]), which lets go of the lock while it waits.

use crate::blocking::Blocking;
use crate::buffer::SendBuf;
use crate::comm::{Comm, CommId, Offer, CONTEXT_WORDS};
use crate::device::Device;
use crate::node_coll;
use crate::rankmap::Group;
use crate::transport::{Netmod, Shm};
use crate::types::{ContextId, Rank, SendMode, Status, Tag};
use crate::{Error, ErrorKind, Result};

const TAG_BARRIER: Tag = 1;
pub(crate) const TAG_BCAST: Tag = 2;
const TAG_REDUCE: Tag = 3;
const TAG_GATHER: Tag = 4;
pub(crate) const TAG_CONTEXT: Tag = 5;
const TAG_SPLIT: Tag = 6;
const TAG_SCATTER: Tag = 7;
const TAG_ALLTOALL: Tag = 8;
const TAG_SCAN: Tag = 9;
const TAG_LANES: Tag = 10;
/// The first of the tags of [`new_create_group`]'s exchanges, which carry the program's tag
/// above the fixed ones (folded into the tags the network carries).
const TAG_CREATE_GROUP: Tag = crate::schedule::TAGS_END;

/// Color for [`Device::comm_split`] meaning "not a member of any new communicator".
pub const UNDEFINED: i32 = -32766;

/// A collective's send. Started as a nonblocking send, which never waits for the receiver's
/// eager credit (beyond it, it goes by rendezvous): the receiver has posted this receive, but
/// may hold credit in a burst of the program's messages it takes only after the collective,
/// and a blocking send would wait for that credit for ever.
pub(crate) fn csend<B: Blocking + ?Sized>(
    b: &mut B,
    comm: CommId,
    dest: Rank,
    tag: Tag,
    data: &[u8],
) -> Result<()> {
    #[allow(unsafe_code)]
    // SAFETY: `data` is borrowed for this whole call and the request is waited for, or
    // removed from the device when its wait fails, before we return.
    let buf = unsafe { SendBuf::borrowed(data) };
    let h = b.visit(|d| d.isend_on(comm, dest, tag, buf, SendMode::Standard, true))?;
    b.wait_or_abandon(h).map(drop)
}

pub(crate) fn crecv<B: Blocking + ?Sized>(
    b: &mut B,
    comm: CommId,
    src: Rank,
    tag: Tag,
    buf: &mut [u8],
) -> Result<Status> {
    let st = b.recv_on(comm, src, tag, buf, true)?;
    if st.bytes != buf.len() {
        return Err(Error::new(
            ErrorKind::Count,
            format!(
                "collective expected {} bytes from rank {src}, got {}",
                buf.len(),
                st.bytes
            ),
        ));
    }
    Ok(st)
}

/// Sends `send` to `dest` and receives into `recv` from `src` at the same time
/// (MPI_Sendrecv), so exchanges in a ring or pairs cannot deadlock.
#[allow(clippy::too_many_arguments)]
pub fn sendrecv<B: Blocking + ?Sized>(
    b: &mut B,
    comm: CommId,
    send: &[u8],
    dest: Rank,
    send_tag: Tag,
    recv: &mut [u8],
    src: Rank,
    recv_tag: Tag,
) -> Result<Status> {
    sendrecv_on(b, comm, send, dest, send_tag, recv, src, recv_tag, false)
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn sendrecv_on<B: Blocking + ?Sized>(
    b: &mut B,
    comm: CommId,
    send: &[u8],
    dest: Rank,
    send_tag: Tag,
    recv: &mut [u8],
    src: Rank,
    recv_tag: Tag,
    coll: bool,
) -> Result<Status> {
    #[allow(unsafe_code)]
    // SAFETY: `send` is borrowed for this whole call and the send request is waited for, or
    // removed from the device when its wait fails, before we return.
    let buf = unsafe { SendBuf::borrowed(send) };
    let sreq = b.visit(|d| d.isend_on(comm, dest, send_tag, buf, SendMode::Standard, coll))?;
    let received = b.recv_on(comm, src, recv_tag, recv, coll);
    let sent = b.wait_or_abandon(sreq);
    let st = received?;
    sent?;
    Ok(st)
}

/// Blocks until every member of `comm` has called it (dissemination algorithm:
/// ceil(log2 n) rounds of one zero-byte exchange).
pub fn barrier<B: Blocking + ?Sized>(b: &mut B, comm: CommId) -> Result<()> {
    if node_coll::barrier(b, comm)? {
        return Ok(());
    }
    let (rank, size) = rank_size(b, comm)?;
    let mut dist = 1;
    while dist < size {
        let to = (rank + dist) % size;
        let from = (rank - dist + size) % size;
        sendrecv_on(
            b,
            comm,
            &[],
            to,
            TAG_BARRIER,
            &mut [],
            from,
            TAG_BARRIER,
            true,
        )?;
        dist *= 2;
    }
    Ok(())
}

/// Copies `buf` of `root` into `buf` of every member (binomial tree).
pub fn bcast<B: Blocking + ?Sized>(
    b: &mut B,
    comm: CommId,
    root: Rank,
    buf: &mut [u8],
) -> Result<()> {
    let (_, size) = rank_size(b, comm)?;
    check_root(root, size)?;
    if node_coll::bcast(b, comm, root, buf)? {
        return Ok(());
    }
    bcast_on(b, comm, root, buf, TAG_BCAST)
}

/// The binomial-tree broadcast, on the collective context with `tag`.
pub(crate) fn bcast_on<B: Blocking + ?Sized>(
    b: &mut B,
    comm: CommId,
    root: Rank,
    buf: &mut [u8],
    tag: Tag,
) -> Result<()> {
    let (rank, size) = rank_size(b, comm)?;
    check_root(root, size)?;
    let rel = (rank - root + size) % size;
    let mut mask = 1;
    while mask < size {
        if rel & mask != 0 {
            let parent = (rank - mask + size) % size;
            crecv(b, comm, parent, tag, buf)?;
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    while mask > 0 {
        if rel + mask < size {
            let child = (rank + mask) % size;
            csend(b, comm, child, tag, buf)?;
        }
        mask >>= 1;
    }
    Ok(())
}

/// Combines every member's `send` with `op` into `recv` at `root` (binomial tree).
///
/// `op(acc, other)` folds `other` into `acc`; it must be associative, and commutative unless
/// `root` is 0: with root 0 the tree folds the members in rank order (`acc` holds the lower
/// ranks' contributions, `other` the higher ones'), which is the order MPI prescribes for an
/// operation that does not commute ([`reduce_in_order`] does it for any root). `recv` is only
/// written at the root, and must have the length of `send` there.
pub fn reduce<B: Blocking + ?Sized, F: FnMut(&mut [u8], &[u8])>(
    b: &mut B,
    comm: CommId,
    root: Rank,
    send: &[u8],
    recv: &mut [u8],
    mut op: F,
) -> Result<()> {
    let (rank, size) = rank_size(b, comm)?;
    check_root(root, size)?;
    check_reduce_buffers(rank == root, send, recv)?;
    if node_coll::reduce(b, comm, root, send, recv, &mut op)? {
        return Ok(());
    }
    reduce_on(b, comm, root, send, recv, op, TAG_REDUCE)
}

/// The binomial-tree reduction, on the collective context with `tag`.
fn reduce_on<B: Blocking + ?Sized, F: FnMut(&mut [u8], &[u8])>(
    b: &mut B,
    comm: CommId,
    root: Rank,
    send: &[u8],
    recv: &mut [u8],
    mut op: F,
    tag: Tag,
) -> Result<()> {
    let (rank, size) = rank_size(b, comm)?;
    check_root(root, size)?;
    check_reduce_buffers(rank == root, send, recv)?;
    let rel = (rank - root + size) % size;
    // The working buffers are the core's, reused from one reduction to the next.
    let [mut acc, mut incoming] = b.visit(|d| Ok(std::mem::take(&mut d.core.coll_scratch)))?;
    acc.clear();
    acc.extend_from_slice(send);
    incoming.resize(send.len(), 0);
    let result = (|| {
        let mut mask = 1;
        while mask < size {
            if rel & mask != 0 {
                let parent = (rank - mask + size) % size;
                return csend(b, comm, parent, tag, &acc);
            }
            if rel + mask < size {
                let child = (rank + mask) % size;
                crecv(b, comm, child, tag, &mut incoming[..send.len()])?;
                op(&mut acc, &incoming[..send.len()]);
            }
            mask <<= 1;
        }
        if rank == root {
            recv.copy_from_slice(&acc);
        }
        Ok(())
    })();
    // A failed visit (the device gone) only loses the buffers for reuse.
    let _ = b.visit(|d| {
        d.core.coll_scratch = [acc, incoming];
        Ok(())
    });
    result
}

/// [`reduce`] for an operation that does not commute, at any root: the members' contributions
/// are folded in rank order at rank 0, which then passes the result to `root` (MPICH does the
/// same for non-commutative operations: the tree's order is rank order only from rank 0).
pub fn reduce_in_order<B: Blocking + ?Sized, F: FnMut(&mut [u8], &[u8])>(
    b: &mut B,
    comm: CommId,
    root: Rank,
    send: &[u8],
    recv: &mut [u8],
    op: F,
) -> Result<()> {
    let (rank, size) = rank_size(b, comm)?;
    check_root(root, size)?;
    check_reduce_buffers(rank == root, send, recv)?;
    let mut op = op;
    // The lanes fold in rank order at any root.
    if node_coll::reduce(b, comm, root, send, recv, &mut op)? {
        return Ok(());
    }
    if root == 0 {
        return reduce_on(b, comm, 0, send, recv, op, TAG_REDUCE);
    }
    let mut at_zero = if rank == 0 {
        vec![0u8; send.len()]
    } else {
        Vec::new()
    };
    reduce_on(b, comm, 0, send, &mut at_zero, op, TAG_REDUCE)?;
    if rank == 0 {
        csend(b, comm, root, TAG_REDUCE, &at_zero)?;
    } else if rank == root {
        crecv(b, comm, 0, TAG_REDUCE, recv)?;
    }
    Ok(())
}

/// The inclusive prefix reduction (MPI_Scan): member `r`'s `recv` gets the fold of the
/// contributions of members 0 to `r`, in rank order, so `op` need not commute.
pub fn scan<B: Blocking + ?Sized, F: FnMut(&mut [u8], &[u8])>(
    b: &mut B,
    comm: CommId,
    send: &[u8],
    recv: &mut [u8],
    op: F,
) -> Result<()> {
    prefix(b, comm, send, recv, op, true)
}

/// The exclusive prefix reduction (MPI_Exscan): member `r > 0`'s `recv` gets the fold of the
/// contributions of members 0 to `r - 1`, in rank order; member 0's `recv` is left as it was
/// (MPI leaves it undefined).
pub fn exscan<B: Blocking + ?Sized, F: FnMut(&mut [u8], &[u8])>(
    b: &mut B,
    comm: CommId,
    send: &[u8],
    recv: &mut [u8],
    op: F,
) -> Result<()> {
    prefix(b, comm, send, recv, op, false)
}

/// Both prefix reductions by recursive doubling (the algorithm of MPICH's `MPIR_Scan`): in
/// round `k` each member trades the fold of its block of 2^k members with the partner whose
/// rank differs in bit `k`, so ceil(log2 n) exchanges. A fold from lower ranks goes in front
/// of what a member holds (`lower op mine`), one from higher ranks behind it.
fn prefix<B: Blocking + ?Sized, F: FnMut(&mut [u8], &[u8])>(
    b: &mut B,
    comm: CommId,
    send: &[u8],
    recv: &mut [u8],
    mut op: F,
    inclusive: bool,
) -> Result<()> {
    let (rank, size) = rank_size(b, comm)?;
    if recv.len() != send.len() {
        return Err(Error::new(
            ErrorKind::Count,
            "scan: send and receive buffers differ in length",
        ));
    }
    if node_coll::prefix(b, comm, send, recv, &mut op, inclusive)? {
        return Ok(());
    }
    let n = send.len();
    // `partial`: the fold of this member's block so far; `incoming`: the partner's.
    let mut partial = send.to_vec();
    let mut incoming = vec![0u8; n];
    let mut front = vec![0u8; n];
    // Whether `recv` holds a fold yet (at once for the inclusive scan: this member's own).
    let mut have = inclusive;
    if inclusive {
        recv.copy_from_slice(send);
    }
    let mut mask = 1;
    while mask < size {
        let partner = rank ^ mask;
        if partner < size {
            sendrecv_on(
                b,
                comm,
                &partial,
                partner,
                TAG_SCAN,
                &mut incoming,
                partner,
                TAG_SCAN,
                true,
            )?;
            if partner < rank {
                fold_from_lower(&mut op, &mut partial, &incoming, &mut front);
                if have {
                    fold_from_lower(&mut op, recv, &incoming, &mut front);
                } else {
                    recv.copy_from_slice(&incoming);
                    have = true;
                }
            } else {
                op(&mut partial, &incoming);
            }
        }
        mask <<= 1;
    }
    Ok(())
}

/// `lower op acc` into `acc`, through `front` (all three of one length): how a fold from
/// lower ranks joins what a member holds, so that an operation that does not commute keeps
/// rank order (`op(acc, other)` computes `acc op other`).
fn fold_from_lower<F: FnMut(&mut [u8], &[u8])>(
    op: &mut F,
    acc: &mut [u8],
    lower: &[u8],
    front: &mut [u8],
) {
    front.copy_from_slice(lower);
    op(front, acc);
    acc.copy_from_slice(front);
}

/// Combines every member's `send` with `op` into `recv` at every member, in rank order (so
/// `op` need not commute).
pub fn allreduce<B: Blocking + ?Sized, F: FnMut(&mut [u8], &[u8])>(
    b: &mut B,
    comm: CommId,
    send: &[u8],
    recv: &mut [u8],
    mut op: F,
) -> Result<()> {
    if recv.len() == send.len() && node_coll::allreduce(b, comm, send, recv, &mut op)? {
        return Ok(());
    }
    allreduce_on(b, comm, send, recv, op, TAG_REDUCE)
}

/// The allreduce by recursive doubling (MPICH's `MPIR_Allreduce_intra_recursive_doubling`):
/// ceil(log2 n) exchanges of the whole vector, each member folding its partner's half of the
/// job into its own, where a reduction to rank 0 and a broadcast take twice as many steps one
/// after the other. Every step costs a wake-up when ranks outnumber the cores, so the count
/// of steps is what an 8-byte allreduce costs there. With n not a power of two, the first
/// `2 * (n - p)` members (p the power of two below n) pair up first, the even one of each
/// pair handing its vector to the odd one and sitting out, which gives it the result at the
/// end. A fold from lower ranks goes in front (`lower op mine`), so rank order holds.
fn allreduce_on<B: Blocking + ?Sized, F: FnMut(&mut [u8], &[u8])>(
    b: &mut B,
    comm: CommId,
    send: &[u8],
    recv: &mut [u8],
    mut op: F,
    tag: Tag,
) -> Result<()> {
    if recv.len() != send.len() {
        return Err(Error::new(
            ErrorKind::Count,
            "allreduce: send and receive buffers differ in length",
        ));
    }
    let (rank, size) = rank_size(b, comm)?;
    recv.copy_from_slice(send);
    if size == 1 {
        return Ok(());
    }
    let n = send.len();
    let pof2 = 1 << (31 - (size as u32).leading_zeros());
    let rem = size - pof2;
    // The working buffers are the core's, reused from one reduction to the next.
    let [mut incoming, mut front] = b.visit(|d| Ok(std::mem::take(&mut d.core.coll_scratch)))?;
    incoming.resize(n, 0);
    front.resize(n, 0);
    let result = (|| {
        let new_rank = if rank < 2 * rem {
            if rank % 2 == 0 {
                csend(b, comm, rank + 1, tag, recv)?;
                None
            } else {
                crecv(b, comm, rank - 1, tag, &mut incoming[..n])?;
                fold_from_lower(&mut op, recv, &incoming[..n], &mut front);
                Some(rank / 2)
            }
        } else {
            Some(rank - rem)
        };
        if let Some(new_rank) = new_rank {
            let mut mask = 1;
            while mask < pof2 {
                let new_partner = new_rank ^ mask;
                let partner = if new_partner < rem {
                    new_partner * 2 + 1
                } else {
                    new_partner + rem
                };
                sendrecv_on(
                    b,
                    comm,
                    recv,
                    partner,
                    tag,
                    &mut incoming[..n],
                    partner,
                    tag,
                    true,
                )?;
                if partner < rank {
                    fold_from_lower(&mut op, recv, &incoming[..n], &mut front);
                } else {
                    op(recv, &incoming[..n]);
                }
                mask <<= 1;
            }
        }
        if rank < 2 * rem {
            if rank % 2 == 1 {
                csend(b, comm, rank - 1, tag, recv)?;
            } else {
                crecv(b, comm, rank + 1, tag, recv)?;
            }
        }
        Ok(())
    })();
    // A failed visit (the device gone) only loses the buffers for reuse.
    let _ = b.visit(|d| {
        d.core.coll_scratch = [incoming, front];
        Ok(())
    });
    result
}

/// Collects every member's `send` (all of one length) into `recv` at `root`, in rank order.
pub fn gather<B: Blocking + ?Sized>(
    b: &mut B,
    comm: CommId,
    root: Rank,
    send: &[u8],
    recv: &mut [u8],
) -> Result<()> {
    let (rank, size) = rank_size(b, comm)?;
    check_root(root, size)?;
    if rank != root {
        return csend(b, comm, root, TAG_GATHER, send);
    }
    let n = send.len();
    if recv.len() != n * size as usize {
        return Err(Error::new(
            ErrorKind::Count,
            format!(
                "gather: root buffer of {} bytes for {size} x {n} bytes",
                recv.len()
            ),
        ));
    }
    for (r, slot) in recv.chunks_mut(n.max(1)).enumerate().take(size as usize) {
        if r as Rank == rank {
            slot.copy_from_slice(send);
        } else {
            crecv(b, comm, r as Rank, TAG_GATHER, &mut slot[..n])?;
        }
    }
    Ok(())
}

/// Collects every member's `send` into `recv` at every member, in rank order (a ring:
/// size - 1 steps, each passing on to the right the block received from the left, so every
/// block crosses each link once and no member relays everything, as through a root).
pub fn allgather<B: Blocking + ?Sized>(
    b: &mut B,
    comm: CommId,
    send: &[u8],
    recv: &mut [u8],
) -> Result<()> {
    let (rank, size) = rank_size(b, comm)?;
    if recv.len() != send.len() * size as usize {
        return Err(Error::new(
            ErrorKind::Count,
            format!(
                "allgather: buffer of {} bytes for {size} x {} bytes",
                recv.len(),
                send.len()
            ),
        ));
    }
    if node_coll::allgather(b, comm, send, recv)? {
        return Ok(());
    }
    let n = send.len();
    let (right, left) = ((rank + 1) % size, (rank - 1 + size) % size);
    recv[rank as usize * n..][..n].copy_from_slice(send);
    for step in 0..size - 1 {
        // Pass on the block received in the previous step (our own first); take the next.
        let out = ((rank - step + size) % size) as usize;
        let inc = ((rank - step - 1 + 2 * size) % size) as usize;
        let (lo, hi) = recv.split_at_mut(out.max(inc) * n);
        let (outgoing, incoming) = if out < inc {
            (&lo[out * n..][..n], &mut hi[..n])
        } else {
            (&hi[..n], &mut lo[inc * n..][..n])
        };
        let st = sendrecv_on(
            b, comm, outgoing, right, TAG_GATHER, incoming, left, TAG_GATHER, true,
        )?;
        if st.bytes != n {
            return Err(Error::new(
                ErrorKind::Count,
                format!(
                    "allgather: expected {n} bytes from rank {left}, got {}",
                    st.bytes
                ),
            ));
        }
    }
    Ok(())
}

/// Collects member `r`'s `send` into `recv[displs[r]..][..counts[r]]` at `root` (lengths
/// and offsets in bytes; MPI_Gatherv). Only the root's `recv`, `counts` and `displs` are
/// read.
pub fn gatherv<B: Blocking + ?Sized>(
    b: &mut B,
    comm: CommId,
    root: Rank,
    send: &[u8],
    recv: &mut [u8],
    counts: &[usize],
    displs: &[usize],
) -> Result<()> {
    let (rank, size) = rank_size(b, comm)?;
    check_root(root, size)?;
    if rank != root {
        return csend(b, comm, root, TAG_GATHER, send);
    }
    check_blocks("gatherv", size, recv.len(), counts, displs)?;
    for r in 0..size {
        let (at, n) = (displs[r as usize], counts[r as usize]);
        let block = &mut recv[at..at + n];
        if r == rank {
            if send.len() != n {
                return Err(Error::new(
                    ErrorKind::Count,
                    format!("gatherv: the root sends {} bytes into {n}", send.len()),
                ));
            }
            block.copy_from_slice(send);
        } else {
            crecv(b, comm, r, TAG_GATHER, block)?;
        }
    }
    Ok(())
}

/// Sends `send[displs[r]..][..counts[r]]` of `root` to member `r`, into its `recv` (MPI_Scatterv;
/// lengths and offsets in bytes). Only the root's `send`, `counts` and `displs` are read.
pub fn scatterv<B: Blocking + ?Sized>(
    b: &mut B,
    comm: CommId,
    root: Rank,
    send: &[u8],
    counts: &[usize],
    displs: &[usize],
    recv: &mut [u8],
) -> Result<()> {
    let (rank, size) = rank_size(b, comm)?;
    check_root(root, size)?;
    if rank != root {
        crecv(b, comm, root, TAG_SCATTER, recv)?;
        return Ok(());
    }
    check_blocks("scatterv", size, send.len(), counts, displs)?;
    for r in 0..size {
        let block = &send[displs[r as usize]..displs[r as usize] + counts[r as usize]];
        if r == rank {
            if recv.len() != block.len() {
                return Err(Error::new(
                    ErrorKind::Count,
                    format!(
                        "scatterv: the root keeps {} bytes in {}",
                        block.len(),
                        recv.len()
                    ),
                ));
            }
            recv.copy_from_slice(block);
        } else {
            csend(b, comm, r, TAG_SCATTER, block)?;
        }
    }
    Ok(())
}

/// Every member's `send` into `recv[displs[r]..][..counts[r]]` at every member
/// (MPI_Allgatherv; bytes): a gatherv at rank 0, then a broadcast of `recv`.
pub fn allgatherv<B: Blocking + ?Sized>(
    b: &mut B,
    comm: CommId,
    send: &[u8],
    recv: &mut [u8],
    counts: &[usize],
    displs: &[usize],
) -> Result<()> {
    gatherv(b, comm, 0, send, recv, counts, displs)?;
    bcast(b, comm, 0, recv)
}

/// Member `r` gets `send[sdispls[r]..][..scounts[r]]` of every member `q`, into
/// `recv[rdispls[q]..][..rcounts[q]]` (MPI_Alltoallv; bytes): size - 1 rounds of pairwise
/// exchanges, each rank sending to `rank + k` while receiving from `rank - k`.
#[allow(clippy::too_many_arguments)]
pub fn alltoallv<B: Blocking + ?Sized>(
    b: &mut B,
    comm: CommId,
    send: &[u8],
    scounts: &[usize],
    sdispls: &[usize],
    recv: &mut [u8],
    rcounts: &[usize],
    rdispls: &[usize],
) -> Result<()> {
    let (rank, size) = rank_size(b, comm)?;
    check_blocks("alltoallv", size, send.len(), scounts, sdispls)?;
    check_blocks("alltoallv", size, recv.len(), rcounts, rdispls)?;
    let me = rank as usize;
    if scounts[me] != rcounts[me] {
        return Err(Error::new(
            ErrorKind::Count,
            format!(
                "alltoallv: {} bytes to itself into {}",
                scounts[me], rcounts[me]
            ),
        ));
    }
    recv[rdispls[me]..rdispls[me] + rcounts[me]]
        .copy_from_slice(&send[sdispls[me]..sdispls[me] + scounts[me]]);
    for k in 1..size {
        let to = ((rank + k) % size) as usize;
        let from = ((rank - k + size) % size) as usize;
        let out = &send[sdispls[to]..sdispls[to] + scounts[to]];
        let into = &mut recv[rdispls[from]..rdispls[from] + rcounts[from]];
        let expected = into.len();
        let st = sendrecv_on(
            b,
            comm,
            out,
            to as Rank,
            TAG_ALLTOALL,
            into,
            from as Rank,
            TAG_ALLTOALL,
            true,
        )?;
        if st.bytes != expected {
            return Err(Error::new(
                ErrorKind::Count,
                format!(
                    "alltoallv: expected {expected} bytes from rank {from}, got {}",
                    st.bytes
                ),
            ));
        }
    }
    Ok(())
}

pub(crate) fn rank_size<B: Blocking + ?Sized>(b: &mut B, comm: CommId) -> Result<(Rank, Rank)> {
    b.visit(|d| {
        let c = d.core.comm(comm)?;
        Ok((c.rank, c.size()))
    })
}

// ------------------------------------------------------- communicators

/// Agrees with every member of `parent` on a context id free at all of them, and takes it.
/// Runs again while another agreement of a member's process holds that process's context ids
/// ([`crate::comm::ContextIds`]).
pub(crate) fn agree_context<B: Blocking + ?Sized>(b: &mut B, parent: CommId) -> Result<ContextId> {
    agree_context_by(b, parent, 0, |b, send, recv| {
        allreduce_tagged(b, parent, send, recv, TAG_CONTEXT)
    })
}

/// How far above every context id the priority of an agreement among a group lies
/// ([`new_create_group`]): ids stay below `2 * CONTEXT_SLOTS`.
const PRIORITY_SHIFT: u32 = 12;
const _: () = assert!(2 * crate::comm::CONTEXT_SLOTS <= 1 << PRIORITY_SHIFT);

/// [`agree_context`] with the AND-allreduce of the offers done by `exchange(b, send, recv)`:
/// over every member of `parent`, or over some of them only ([`new_create_group`]). The
/// agreement's priority among those of this process ([`crate::comm::ContextIds`]) is
/// `parent`'s context id plus `above << PRIORITY_SHIFT`: the same at every member, and, for the
/// agreements among groups, different for each tag, so that two threads creating
/// communicators over one parent with different tags finish one after the other.
pub(crate) fn agree_context_by<B: Blocking + ?Sized>(
    b: &mut B,
    parent: CommId,
    above: u32,
    mut exchange: impl FnMut(&mut B, &[u8], &mut [u8]) -> Result<()>,
) -> Result<ContextId> {
    let priority = b.visit(|d| Ok(d.core.comm(parent)?.context))? + (above << PRIORITY_SHIFT);
    let mut rounds = 0u32;
    loop {
        let (offer, claimed) = b.visit(|d| Ok(d.core.contexts.offer(priority)))?;
        let mut bytes = [0u8; (CONTEXT_WORDS + 1) * 8];
        for (chunk, w) in bytes.chunks_exact_mut(8).zip(offer.iter()) {
            chunk.copy_from_slice(&w.to_le_bytes());
        }
        let send = bytes;
        let exchanged = exchange(b, &send, &mut bytes);
        let mut agreed: Offer = [0; CONTEXT_WORDS + 1];
        for (w, chunk) in agreed.iter_mut().zip(bytes.chunks_exact(8)) {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            *w = u64::from_le_bytes(word);
        }
        if exchanged.is_err() {
            // Let go of the claim (the zero outcome takes nothing) before failing.
            agreed = [0; CONTEXT_WORDS + 1];
        }
        let taken = b.visit(|d| d.core.contexts.conclude(priority, claimed, &agreed))?;
        exchanged?;
        if let Some(context) = taken {
            return Ok(context);
        }
        // Another thread's agreement holds a member's ids: give it time to finish.
        rounds += 1;
        crate::device::backoff(rounds.saturating_mul(64));
    }
}

/// A bitwise-AND allreduce with its own tag (the context agreement must not be confused with
/// a user's reduction that is still in flight on another communicator).
pub(crate) fn allreduce_tagged<B: Blocking + ?Sized>(
    b: &mut B,
    comm: CommId,
    send: &[u8],
    recv: &mut [u8],
    tag: Tag,
) -> Result<()> {
    let and = |acc: &mut [u8], other: &[u8]| {
        for (a, b) in acc.iter_mut().zip(other) {
            *a &= b;
        }
    };
    allreduce_on(b, comm, send, recv, and, tag)
}

/// A bitwise-AND allreduce over messages with a tag of its own: how the members of a
/// communicator agree on its slot in the node's collective lanes ([`crate::node_coll`]).
pub(crate) fn and_allreduce<B: Blocking + ?Sized>(
    b: &mut B,
    comm: CommId,
    send: &[u8],
    recv: &mut [u8],
) -> Result<()> {
    allreduce_tagged(b, comm, send, recv, TAG_LANES)
}

/// A new communicator with the same members as `comm` and its own context (MPI_Comm_dup):
/// its description, with the context id taken, for the caller to add to the device that will
/// carry its traffic ([`Device::adopt_comm`]). The rank map is shared with `comm`, not copied.
/// Collective over `comm`.
pub fn new_dup<B: Blocking + ?Sized>(b: &mut B, comm: CommId) -> Result<Comm> {
    let context = agree_context(b, comm)?;
    b.visit(|d| {
        let c = d.core.comm(comm)?;
        Ok(Comm::intra(context, c.rank, c.group.clone()))
    })
    .inspect_err(|_| release_context(b, context))
}

/// Fails on every member unless all passed the same `value` (a choice the members must make
/// alike, such as the VCI of a communicator being made: MPI asks the same of info hints that
/// change a communicator's behaviour). Collective over `comm`: one allreduce of the largest
/// value and of the largest complement, which are each other's complements only when every
/// member named one value.
pub fn agree<B: Blocking + ?Sized>(b: &mut B, comm: CommId, what: &str, value: u64) -> Result<()> {
    let mine = [value.to_le_bytes(), (!value).to_le_bytes()].concat();
    let mut all = [0u8; 16];
    let max = |acc: &mut [u8], other: &[u8]| {
        for (a, o) in acc.chunks_exact_mut(8).zip(other.chunks_exact(8)) {
            let (x, y) = (
                u64::from_le_bytes(a.try_into().unwrap_or_default()),
                u64::from_le_bytes(o.try_into().unwrap_or_default()),
            );
            a.copy_from_slice(&x.max(y).to_le_bytes());
        }
    };
    allreduce(b, comm, &mine, &mut all, max)?;
    let (hi, lo) = all.split_at(8);
    let hi = u64::from_le_bytes(hi.try_into().unwrap_or_default());
    let not_lo = u64::from_le_bytes(lo.try_into().unwrap_or_default());
    if hi == !not_lo {
        Ok(())
    } else {
        Err(Error::new(
            ErrorKind::Arg,
            format!(
                "the members named different {what}s (from {} to {hi}); all must name the same",
                !not_lo
            ),
        ))
    }
}

/// Splits `comm` by `color` into disjoint communicators, ordering each by `key` then by rank
/// in `comm` (MPI_Comm_split): this member's new communicator as [`new_dup`] gives it, `None`
/// for [`UNDEFINED`]. Collective over `comm`.
pub fn new_split<B: Blocking + ?Sized>(
    b: &mut B,
    comm: CommId,
    color: i32,
    key: i32,
) -> Result<Option<Comm>> {
    if color < 0 && color != UNDEFINED {
        return Err(Error::new(
            ErrorKind::Arg,
            format!("split color {color} is negative and not UNDEFINED"),
        ));
    }
    let (_, size) = rank_size(b, comm)?;
    let mut mine = [0u8; 8];
    mine[..4].copy_from_slice(&color.to_le_bytes());
    mine[4..].copy_from_slice(&key.to_le_bytes());
    let mut all = vec![0u8; 8 * size as usize];
    gather(b, comm, 0, &mine, &mut all)?;
    // The split exchange has its own tag so it cannot meet a user bcast in flight.
    bcast_on(b, comm, 0, &mut all, TAG_SPLIT)?;
    let context = agree_context(b, comm)?;
    if color == UNDEFINED {
        release_context(b, context);
        return Ok(None);
    }
    let mut members: Vec<(i32, Rank)> = all
        .chunks_exact(8)
        .enumerate()
        .filter_map(|(r, e)| {
            let c = i32::from_le_bytes([e[0], e[1], e[2], e[3]]);
            let k = i32::from_le_bytes([e[4], e[5], e[6], e[7]]);
            (c == color).then_some((k, r as Rank))
        })
        .collect();
    members.sort_unstable();
    let ranks: Vec<Rank> = members.iter().map(|&(_, r)| r).collect();
    b.visit(|d| {
        let parent = d.core.comm(comm)?;
        let group = parent.group.incl(&ranks)?;
        let me = parent.rank;
        let rank = ranks
            .iter()
            .position(|&r| r == me)
            .ok_or_else(|| Error::new(ErrorKind::Internal, "split lost the calling rank"))?;
        Ok(Some(Comm::intra(context, rank as Rank, group)))
    })
    .inspect_err(|_| release_context(b, context))
}

/// A communicator of the members of `group`, which must be a subset of `comm`'s
/// (MPI_Comm_create): this member's as [`new_dup`] gives it, `None` outside `group`.
/// Collective over `comm`.
pub fn new_create<B: Blocking + ?Sized>(
    b: &mut B,
    comm: CommId,
    group: &Group,
) -> Result<Option<Comm>> {
    let me = b.visit(|d| {
        let pg = &d.core.comm(comm)?.group;
        for r in 0..group.size() as Rank {
            if group.gpid(r).and_then(|g| pg.rank_of(g)).is_none() {
                return Err(Error::new(
                    ErrorKind::Arg,
                    format!("group member {r} is not in the parent communicator"),
                ));
            }
        }
        Ok(group.rank_of(d.core.gpid))
    })?;
    let context = agree_context(b, comm)?;
    match me {
        Some(rank) => Ok(Some(Comm::intra(context, rank, group.clone()))),
        None => {
            release_context(b, context);
            Ok(None)
        }
    }
}

/// A communicator of the members of `group`, a subset of `comm`'s, made by those members only
/// (MPI_Comm_create_group, MPI 4.1 section 7.4.2): the other members of `comm` take no part,
/// so the context id is agreed among the group alone, by an AND-allreduce over the group's
/// members on `comm`'s collective context ([`group_and_allreduce`]) with a tag made from the
/// program's `tag`, which keeps concurrent creations over one parent (from different threads)
/// apart as the standard asks. `None` when the caller is not in `group` (nothing is sent).
pub fn new_create_group<B: Blocking + ?Sized>(
    b: &mut B,
    comm: CommId,
    group: &Group,
    tag: Tag,
) -> Result<Option<Comm>> {
    if tag < 0 {
        return Err(Error::new(ErrorKind::Tag, format!("tag {tag} is negative")));
    }
    let (me, ranks, tag_ub) = b.visit(|d| {
        let pg = &d.core.comm(comm)?.group;
        let mut ranks = Vec::with_capacity(group.size() as usize);
        for r in 0..group.size() as Rank {
            let p = group.gpid(r).and_then(|g| pg.rank_of(g)).ok_or_else(|| {
                Error::new(
                    ErrorKind::Arg,
                    format!("group member {r} is not in the parent communicator"),
                )
            })?;
            ranks.push(p);
        }
        Ok((group.rank_of(d.core.gpid), ranks, d.tag_ub()))
    })?;
    if tag > tag_ub {
        return Err(Error::new(
            ErrorKind::Tag,
            format!("tag {tag} is above the tag upper bound {tag_ub}"),
        ));
    }
    let Some(rank) = me else {
        return Ok(None);
    };
    // The program's tags are folded into those above the fixed collective ones; two
    // creations whose tags fold together are told apart only by their order, as MPI's
    // non-overtaking rule orders any two messages of one tag.
    let span = (tag_ub - TAG_CREATE_GROUP).max(0) + 1;
    let wire_tag = TAG_CREATE_GROUP + tag % span;
    // Tags past 2^19 share priorities (a tie is only slower: both try again).
    let above = 1 + (tag as u32 & ((1 << (32 - PRIORITY_SHIFT - 1)) - 1));
    let context = agree_context_by(b, comm, above, |b, send, recv| {
        group_and_allreduce(b, comm, &ranks, rank, send, recv, wire_tag)
    })?;
    Ok(Some(Comm::intra(context, rank, group.clone())))
}

/// A bitwise-AND allreduce among the members of `comm` at ranks `ranks` (this process being
/// `ranks[me]`), the others of `comm` taking no part: a binomial-tree reduction to `ranks[0]`
/// and a binomial-tree broadcast back, on the collective context with `tag`. Each ordered pair
/// of members exchanges at most one message per phase, in opposite directions, so the one tag
/// serves both.
fn group_and_allreduce<B: Blocking + ?Sized>(
    b: &mut B,
    comm: CommId,
    ranks: &[Rank],
    me: Rank,
    send: &[u8],
    recv: &mut [u8],
    tag: Tag,
) -> Result<()> {
    recv.copy_from_slice(send);
    let (n, me) = (ranks.len(), me as usize);
    let mut incoming = vec![0u8; recv.len()];
    let mut mask = 1;
    while mask < n {
        if me & mask != 0 {
            csend(b, comm, ranks[me - mask], tag, recv)?;
            break;
        }
        if me + mask < n {
            crecv(b, comm, ranks[me + mask], tag, &mut incoming)?;
            for (a, x) in recv.iter_mut().zip(&incoming) {
                *a &= x;
            }
        }
        mask <<= 1;
    }
    // The broadcast of the result from ranks[0], down the same tree.
    let mut mask = 1;
    while mask < n {
        if me & mask != 0 {
            crecv(b, comm, ranks[me - mask], tag, recv)?;
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    while mask > 0 {
        if me + mask < n {
            csend(b, comm, ranks[me + mask], tag, recv)?;
        }
        mask >>= 1;
    }
    Ok(())
}

/// Returns an agreed context id that no communicator of this process took.
pub(crate) fn release_context<B: Blocking + ?Sized>(b: &mut B, context: ContextId) {
    let _ = b.visit(|d| {
        d.core.contexts.release(context);
        Ok(())
    });
}

impl<N: Netmod, S: Shm> Device<N, S> {
    /// Makes this device take context ids from the same set as `other`, another device (VCI)
    /// of this process: a communicator made over any of them may then be adopted by any
    /// ([`Device::adopt_comm`]) without two ever sharing an id. Call it before either device
    /// makes a communicator.
    pub fn share_context_ids(&mut self, other: &Device<N, S>) {
        self.core.contexts = other.core.contexts.clone();
    }

    /// Whether the small collectives of `comm` go through the node's shared segment
    /// ([`crate::node_coll`]): `None` until its first collective has agreed on it.
    pub fn collectives_on_node(&self, comm: CommId) -> Result<Option<bool>> {
        Ok(match self.core.comm(comm)?.node {
            node_coll::NodeLanes::Unknown => None,
            node_coll::NodeLanes::Off => Some(false),
            node_coll::NodeLanes::On { .. } => Some(true),
        })
    }

    /// The group of `comm` (MPI_Comm_group).
    pub fn comm_group(&self, comm: CommId) -> Result<Group> {
        Ok(self.core.comm(comm)?.group.clone())
    }

    /// Frees `comm`; using its id afterwards is a `Comm` error. The world and self
    /// communicators cannot be freed. Operations already started on it still complete.
    pub fn comm_free(&mut self, comm: CommId) -> Result<()> {
        if comm == self.core.world || comm == self.core.self_comm {
            return Err(Error::new(
                ErrorKind::Comm,
                "the world and self communicators cannot be freed",
            ));
        }
        let c = self
            .core
            .comms
            .remove(comm.0)
            .ok_or_else(|| Error::new(ErrorKind::Comm, "communicator already freed"))?;
        self.core.contexts.release(c.context);
        // An intercommunicator's own communicator of its local group goes with it.
        if let Some(local) = c.local.and_then(|l| self.core.comms.remove(l.0)) {
            self.core.contexts.release(local.context);
        }
        Ok(())
    }

    /// The remote group of intercommunicator `comm` (MPI_Comm_remote_group); `None` for an
    /// intracommunicator.
    pub fn comm_remote_group(&self, comm: CommId) -> Result<Option<Group>> {
        Ok(self.core.comm(comm)?.remote.clone())
    }

    /// The size of the remote group of intercommunicator `comm`; `None` for an
    /// intracommunicator.
    pub fn remote_size(&self, comm: CommId) -> Result<Option<Rank>> {
        Ok(self
            .core
            .comm(comm)?
            .remote
            .as_ref()
            .map(|g| g.size() as Rank))
    }

    /// Makes intercommunicator `inter` (adopted, or about to be) work within its local group
    /// over `local`, a communicator of this device with the same local group.
    pub fn set_inter_local(&mut self, inter: CommId, local: CommId) -> Result<()> {
        self.core.comm_mut(inter)?.local = Some(local);
        Ok(())
    }

    /// Adds `c`, made by [`new_dup`], [`new_split`] or [`new_create`] (on this device or on
    /// another device of this process that shares its context ids), to this device's
    /// communicator table; its context id goes back to the free set if the table is full.
    pub fn adopt_comm(&mut self, c: Comm) -> Result<CommId> {
        let context = c.context;
        match self.core.comms.insert(c) {
            Ok(h) => Ok(CommId(h)),
            Err(e) => {
                self.core.contexts.release(context);
                Err(e)
            }
        }
    }

    /// [`sendrecv`] on this device.
    #[allow(clippy::too_many_arguments)]
    pub fn sendrecv(
        &mut self,
        comm: CommId,
        send: &[u8],
        dest: Rank,
        send_tag: Tag,
        recv: &mut [u8],
        src: Rank,
        recv_tag: Tag,
    ) -> Result<Status> {
        sendrecv(self, comm, send, dest, send_tag, recv, src, recv_tag)
    }

    /// [`barrier`] on this device.
    pub fn barrier(&mut self, comm: CommId) -> Result<()> {
        barrier(self, comm)
    }

    /// [`bcast`] on this device.
    pub fn bcast(&mut self, comm: CommId, root: Rank, buf: &mut [u8]) -> Result<()> {
        bcast(self, comm, root, buf)
    }

    /// [`reduce`] on this device.
    pub fn reduce<F: FnMut(&mut [u8], &[u8])>(
        &mut self,
        comm: CommId,
        root: Rank,
        send: &[u8],
        recv: &mut [u8],
        op: F,
    ) -> Result<()> {
        reduce(self, comm, root, send, recv, op)
    }

    /// [`reduce_in_order`] on this device.
    pub fn reduce_in_order<F: FnMut(&mut [u8], &[u8])>(
        &mut self,
        comm: CommId,
        root: Rank,
        send: &[u8],
        recv: &mut [u8],
        op: F,
    ) -> Result<()> {
        reduce_in_order(self, comm, root, send, recv, op)
    }

    /// [`scan`] on this device.
    pub fn scan<F: FnMut(&mut [u8], &[u8])>(
        &mut self,
        comm: CommId,
        send: &[u8],
        recv: &mut [u8],
        op: F,
    ) -> Result<()> {
        scan(self, comm, send, recv, op)
    }

    /// [`exscan`] on this device.
    pub fn exscan<F: FnMut(&mut [u8], &[u8])>(
        &mut self,
        comm: CommId,
        send: &[u8],
        recv: &mut [u8],
        op: F,
    ) -> Result<()> {
        exscan(self, comm, send, recv, op)
    }

    /// [`allreduce`] on this device.
    pub fn allreduce<F: FnMut(&mut [u8], &[u8])>(
        &mut self,
        comm: CommId,
        send: &[u8],
        recv: &mut [u8],
        op: F,
    ) -> Result<()> {
        allreduce(self, comm, send, recv, op)
    }

    /// [`gather`] on this device.
    pub fn gather(&mut self, comm: CommId, root: Rank, send: &[u8], recv: &mut [u8]) -> Result<()> {
        gather(self, comm, root, send, recv)
    }

    /// [`allgather`] on this device.
    pub fn allgather(&mut self, comm: CommId, send: &[u8], recv: &mut [u8]) -> Result<()> {
        allgather(self, comm, send, recv)
    }

    /// [`gatherv`] on this device.
    pub fn gatherv(
        &mut self,
        comm: CommId,
        root: Rank,
        send: &[u8],
        recv: &mut [u8],
        counts: &[usize],
        displs: &[usize],
    ) -> Result<()> {
        gatherv(self, comm, root, send, recv, counts, displs)
    }

    /// [`scatterv`] on this device.
    pub fn scatterv(
        &mut self,
        comm: CommId,
        root: Rank,
        send: &[u8],
        counts: &[usize],
        displs: &[usize],
        recv: &mut [u8],
    ) -> Result<()> {
        scatterv(self, comm, root, send, counts, displs, recv)
    }

    /// [`allgatherv`] on this device.
    pub fn allgatherv(
        &mut self,
        comm: CommId,
        send: &[u8],
        recv: &mut [u8],
        counts: &[usize],
        displs: &[usize],
    ) -> Result<()> {
        allgatherv(self, comm, send, recv, counts, displs)
    }

    /// [`alltoallv`] on this device.
    #[allow(clippy::too_many_arguments)]
    pub fn alltoallv(
        &mut self,
        comm: CommId,
        send: &[u8],
        scounts: &[usize],
        sdispls: &[usize],
        recv: &mut [u8],
        rcounts: &[usize],
        rdispls: &[usize],
    ) -> Result<()> {
        alltoallv(self, comm, send, scounts, sdispls, recv, rcounts, rdispls)
    }

    /// A new communicator with the same members as `comm` and its own context
    /// (MPI_Comm_dup; [`new_dup`]) on this device. Collective over `comm`.
    pub fn comm_dup(&mut self, comm: CommId) -> Result<CommId> {
        let c = new_dup(self, comm)?;
        self.adopt_comm(c)
    }

    /// Splits `comm` by `color`, ordered by `key` (MPI_Comm_split; [`new_split`]) on this
    /// device. A member passing [`UNDEFINED`] gets `None`. Collective over `comm`.
    pub fn comm_split(&mut self, comm: CommId, color: i32, key: i32) -> Result<Option<CommId>> {
        match new_split(self, comm, color, key)? {
            Some(c) => self.adopt_comm(c).map(Some),
            None => Ok(None),
        }
    }

    /// A communicator of the members of `group` (MPI_Comm_create; [`new_create`]) on this
    /// device. Collective over `comm`; members outside `group` get `None`.
    pub fn comm_create(&mut self, comm: CommId, group: &Group) -> Result<Option<CommId>> {
        match new_create(self, comm, group)? {
            Some(c) => self.adopt_comm(c).map(Some),
            None => Ok(None),
        }
    }
}

/// Checks that `size` blocks of `counts[i]` bytes at `displs[i]` fit a buffer of `len` bytes.
fn check_blocks(
    what: &str,
    size: Rank,
    len: usize,
    counts: &[usize],
    displs: &[usize],
) -> Result<()> {
    let n = size as usize;
    if counts.len() < n || displs.len() < n {
        return Err(Error::new(
            ErrorKind::Count,
            format!(
                "{what}: {n} members but {} counts and {} offsets",
                counts.len(),
                displs.len()
            ),
        ));
    }
    for r in 0..n {
        if displs[r]
            .checked_add(counts[r])
            .map_or(true, |end| end > len)
        {
            return Err(Error::new(
                ErrorKind::Count,
                format!(
                    "{what}: block {r} ({} bytes at {}) beyond the buffer's {len}",
                    counts[r], displs[r]
                ),
            ));
        }
    }
    Ok(())
}

/// The root's receive buffer must hold what every member contributes.
fn check_reduce_buffers(root: bool, send: &[u8], recv: &[u8]) -> Result<()> {
    if root && recv.len() != send.len() {
        return Err(Error::new(
            ErrorKind::Count,
            format!(
                "reduce: receive buffer of {} bytes for {} bytes of data",
                recv.len(),
                send.len()
            ),
        ));
    }
    Ok(())
}

fn check_root(root: Rank, size: Rank) -> Result<()> {
    if (0..size).contains(&root) {
        Ok(())
    } else {
        Err(Error::new(
            ErrorKind::Root,
            format!("root {root} outside communicator of size {size}"),
        ))
    }
}

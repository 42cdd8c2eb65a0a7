//! The nonblocking collectives' algorithms, each writing the steps of one collective into a
//! [`Schedule`] (which [`Device::start_schedule`](crate::Device::start_schedule) then runs).
//!
//! They are the latency-optimal classics the blocking collectives use (`crate::coll`), as
//! MPICH's schedules of the same names (`src/mpi/coll/i*/`) have them: a dissemination
//! barrier, binomial trees for broadcast and reduction, recursive doubling for allreduce and
//! the prefix reductions; gathers, scatters and all-to-all post every message at once, which
//! is one round. An algorithm takes the member's rank and the communicator's size and works on
//! byte ranges of the schedule's buffers: the caller copies the program's send data into the
//! schedule and adds the delivery steps that write the results into the program's buffers.
//! A fold from lower ranks goes in front (`lower op mine`), so an operation that does not
//! commute keeps rank order wherever the blocking algorithm keeps it.

use crate::schedule::{Schedule, Slice};
use crate::types::{Rank, Tag};
use crate::{Error, ErrorKind, Result};

/// The dissemination barrier: round `k` sends to `rank + 2^k` and receives from `rank - 2^k`.
pub fn barrier(s: &mut Schedule, rank: Rank, size: Rank) {
    let empty = s.scratch(0);
    let mut dist = 1;
    while dist < size {
        s.send((rank + dist) % size, empty);
        s.recv((rank - dist + size) % size, empty);
        s.fence();
        dist *= 2;
    }
}

/// The binomial broadcast of `data` from `root`: at the root it holds the data, elsewhere it
/// receives it.
pub fn bcast(s: &mut Schedule, rank: Rank, size: Rank, root: Rank, data: Slice) {
    let rel = (rank - root + size) % size;
    let mut mask = 1;
    while mask < size {
        if rel & mask != 0 {
            s.recv((rank - mask + size) % size, data);
            s.fence();
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    while mask > 0 {
        if rel + mask < size {
            s.send((rank + mask) % size, data);
        }
        mask >>= 1;
    }
}

/// The binomial reduction of every member's `acc` to `root`, where `acc` ends holding the
/// result (elsewhere it ends as a partial fold). With `commutes` false and a root other than
/// 0 the fold runs to rank 0 in rank order and rank 0 passes it on (as `coll::reduce_in_order`).
pub fn reduce(s: &mut Schedule, rank: Rank, size: Rank, root: Rank, acc: Slice, commutes: bool) {
    if commutes || root == 0 {
        reduce_tree(s, rank, size, root, acc, 0);
        return;
    }
    reduce_tree(s, rank, size, 0, acc, 0);
    if rank == 0 {
        s.send_phase(root, 1, acc);
    } else if rank == root {
        s.recv_phase(0, 1, acc);
    }
    s.fence();
}

/// The binomial tree of [`reduce`] on sub-tag `phase`: every child's fold is received at once,
/// then folded in (the children's ranks are above this member's, so their data goes behind).
fn reduce_tree(s: &mut Schedule, rank: Rank, size: Rank, root: Rank, acc: Slice, phase: Tag) {
    let rel = (rank - root + size) % size;
    let mut incoming = Vec::new();
    let mut parent = None;
    let mut mask = 1;
    while mask < size {
        if rel & mask != 0 {
            parent = Some((rank - mask + size) % size);
            break;
        }
        if rel + mask < size {
            let inc = s.scratch(acc.len());
            s.recv_phase((rank + mask) % size, phase, inc);
            incoming.push(inc);
        }
        mask <<= 1;
    }
    for inc in incoming {
        s.fold(acc, inc, false);
    }
    if let Some(p) = parent {
        s.fence();
        s.send_phase(p, phase, acc);
    }
    s.fence();
}

/// Allreduce by recursive doubling (as `coll::allreduce`): `acc` holds this member's
/// contribution and ends holding the result.
pub fn allreduce(s: &mut Schedule, rank: Rank, size: Rank, acc: Slice) {
    if size == 1 {
        return;
    }
    let pof2 = 1 << (31 - (size as u32).leading_zeros());
    let rem = size - pof2;
    let inc = s.scratch(acc.len());
    let new_rank = if rank < 2 * rem {
        if rank % 2 == 0 {
            s.send(rank + 1, acc);
            None
        } else {
            s.recv(rank - 1, inc);
            s.fold(acc, inc, true);
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
            s.send(partner, acc);
            s.recv(partner, inc);
            s.fold(acc, inc, partner < rank);
            mask <<= 1;
        }
    }
    if rank < 2 * rem {
        if rank % 2 == 1 {
            s.send(rank - 1, acc);
        } else {
            s.recv(rank + 1, acc);
        }
    }
    s.fence();
}

/// Allreduce through member 0 in one round each way: every other member sends its
/// contribution at once and waits for the result; member 0 folds them in rank order and sends
/// the result to each. Where the ranks crowd the CPUs (more of them than cores), every round of
/// [`allreduce`] costs each member a wait for a partner the scheduler may not run for a while,
/// and this waits once (twice at member 0, whose receives have mostly arrived by then).
/// Measured with `benches/c/nbc.c` on this project's 2-core host, 8 ranks, interleaved: the
/// 8-byte `MPI_Iallreduce` 26.8 µs by recursive doubling, Open MPI's 19.3.
pub fn allreduce_flat(s: &mut Schedule, rank: Rank, size: Rank, acc: Slice) {
    if size == 1 {
        return;
    }
    if rank != 0 {
        s.send(0, acc);
        s.recv(0, acc);
        s.fence();
        return;
    }
    let incoming: Vec<Slice> = (1..size)
        .map(|i| {
            let inc = s.scratch(acc.len());
            s.recv(i, inc);
            inc
        })
        .collect();
    for inc in incoming {
        s.fold(acc, inc, false);
    }
    for i in 1..size {
        s.send(i, acc);
    }
    s.fence();
}

/// The prefix reductions by recursive doubling (as `coll::scan`): `partial` holds this
/// member's contribution (and is worked on); `result` gets the fold of members 0 to `rank`
/// (`inclusive`) or 0 to `rank - 1`, and is left as it was at rank 0 of an exclusive scan.
pub fn scan(
    s: &mut Schedule,
    rank: Rank,
    size: Rank,
    partial: Slice,
    result: Slice,
    inclusive: bool,
) {
    let inc = s.scratch(partial.len());
    let mut have = inclusive;
    if inclusive {
        s.copy(partial, result);
    }
    let mut mask = 1;
    while mask < size {
        let partner = rank ^ mask;
        if partner < size {
            s.send(partner, partial);
            s.recv(partner, inc);
            if partner < rank {
                s.fold(partial, inc, true);
                if have {
                    s.fold(result, inc, true);
                } else {
                    s.copy(inc, result);
                    have = true;
                }
            } else {
                s.fold(partial, inc, false);
            }
        }
        mask <<= 1;
    }
    s.fence();
}

/// Gathers at `root`: `blocks` (at the root, one per member) receive each member's block;
/// the root's own comes from `mine`. Elsewhere `mine` is sent and `blocks` is unused.
pub fn gatherv(
    s: &mut Schedule,
    rank: Rank,
    size: Rank,
    root: Rank,
    mine: Slice,
    blocks: &[Slice],
) -> Result<()> {
    if rank != root {
        s.send(root, mine);
        s.fence();
        return Ok(());
    }
    check_blocks(blocks, size)?;
    for (i, b) in blocks.iter().enumerate() {
        if i as Rank == root {
            if !b.is_empty() || !mine.is_empty() {
                s.copy(mine, *b);
            }
        } else {
            s.recv(i as Rank, *b);
        }
    }
    s.fence();
    Ok(())
}

/// Scatters from `root` (on sub-tag `phase`): member `i` receives `blocks[i]` into `mine`.
pub fn scatterv(
    s: &mut Schedule,
    rank: Rank,
    size: Rank,
    root: Rank,
    blocks: &[Slice],
    mine: Slice,
    phase: Tag,
) -> Result<()> {
    if rank != root {
        s.recv_phase(root, phase, mine);
        s.fence();
        return Ok(());
    }
    check_blocks(blocks, size)?;
    for (i, b) in blocks.iter().enumerate() {
        if i as Rank == root {
            if !b.is_empty() || !mine.is_empty() {
                s.copy(*b, mine);
            }
        } else {
            s.send_phase(i as Rank, phase, *b);
        }
    }
    s.fence();
    Ok(())
}

/// Every member's block to every member: `blocks[rank]` holds this member's, the others
/// receive theirs (one round of `size - 1` sends and receives each).
pub fn allgatherv(s: &mut Schedule, rank: Rank, size: Rank, blocks: &[Slice]) -> Result<()> {
    check_blocks(blocks, size)?;
    let mine = blocks[rank as usize];
    for i in 1..size {
        s.recv(
            (rank - i + size) % size,
            blocks[((rank - i + size) % size) as usize],
        );
        s.send((rank + i) % size, mine);
    }
    s.fence();
    Ok(())
}

/// Member `i`'s block `send[j]` to member `j`'s `recv[i]`, all at once.
pub fn alltoallv(
    s: &mut Schedule,
    rank: Rank,
    size: Rank,
    send: &[Slice],
    recv: &[Slice],
) -> Result<()> {
    check_blocks(send, size)?;
    check_blocks(recv, size)?;
    for i in 1..size {
        let from = (rank - i + size) % size;
        s.recv(from, recv[from as usize]);
    }
    for i in 1..size {
        let to = (rank + i) % size;
        s.send(to, send[to as usize]);
    }
    let me = rank as usize;
    if send[me].len() != recv[me].len() {
        return Err(Error::new(
            ErrorKind::Count,
            "this member's block to itself differs in length from its receive block",
        ));
    }
    if !send[me].is_empty() {
        s.copy(send[me], recv[me]);
    }
    s.fence();
    Ok(())
}

/// The reduction of the whole vector `acc` to rank 0 in rank order, then a scatter of its
/// `blocks` (ranges of `acc` at rank 0): member `i` gets block `i` in `mine`.
pub fn reduce_scatter(
    s: &mut Schedule,
    rank: Rank,
    size: Rank,
    acc: Slice,
    blocks: &[Slice],
    mine: Slice,
) -> Result<()> {
    reduce_tree(s, rank, size, 0, acc, 0);
    scatterv(s, rank, size, 0, blocks, mine, 1)
}

/// A neighbourhood exchange (MPI 4.1, section 8.6): `send[k]` goes to `dests[k]` and
/// `recv[k]` comes from `sources[k]`, each edge on the sub-tag given with it (a Cartesian
/// topology's sender in one direction is its neighbour's source in the other: the caller gives
/// both ends of an edge the same sub-tag). `PROC_NULL` neighbours are skipped, their blocks
/// left alone.
pub fn neighbours(
    s: &mut Schedule,
    sources: &[(Rank, Tag)],
    dests: &[(Rank, Tag)],
    send: &[Slice],
    recv: &[Slice],
) -> Result<()> {
    if send.len() != dests.len() || recv.len() != sources.len() {
        return Err(Error::new(
            ErrorKind::Internal,
            "a neighbourhood collective's blocks do not match its neighbours",
        ));
    }
    for (&(from, phase), &into) in sources.iter().zip(recv) {
        s.recv_phase(from, phase, into);
    }
    for (&(to, phase), &from) in dests.iter().zip(send) {
        s.send_phase(to, phase, from);
    }
    s.fence();
    Ok(())
}

fn check_blocks(blocks: &[Slice], size: Rank) -> Result<()> {
    if blocks.len() != size as usize {
        return Err(Error::new(
            ErrorKind::Internal,
            format!(
                "a collective with {} blocks on a communicator of {size}",
                blocks.len()
            ),
        ));
    }
    Ok(())
}

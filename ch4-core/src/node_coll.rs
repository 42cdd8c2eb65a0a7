//! Small collectives through the node's shared segment: one flag store and a look at the
//! others' flags, instead of a chain of point-to-point messages.
//!
//! On a node, a message-based collective costs a hop per step of its algorithm, and every hop
//! needs the receiving rank to run: where ranks outnumber the cores, each step waits for a
//! wake-up. MPICH's CH4 answers with collectives over shared memory (`release_gather` in its
//! POSIX shared-memory module: a broadcast buffer and flags, with a gather of flags back up a
//! tree); Open MPI's `coll/sm` the same. ch4 takes the flat form of that design, which suits
//! the dozens of ranks one node holds:
//!
//! - A communicator whose members are all on this node takes one of the segment's collective
//!   *slots*, agreed at its first collective (one allreduce of the slots free at every
//!   member, as context ids are agreed). In a slot every local rank has a *lane*: an arrival
//!   word and two outboxes, one for odd-numbered and one for even-numbered operations.
//! - Every collective that goes through the slot has a number `op`, counted alike by every
//!   member. A rank *arrives* at `op` by storing `op` in its arrival word (release), after it
//!   has published what others will read of it (its contribution, or the broadcast data).
//!   Barrier: arrive, wait until every member's word is at least `op`. Broadcast: the root
//!   publishes and arrives; the others arrive and wait for the root's word. Reductions and
//!   allgather: everyone publishes and arrives, then folds, in rank order, what the others
//!   published. One step wherever the algorithm over messages took log2(n).
//! - Reuse: a rank writes its outbox for `op` only once every member has arrived at `op - 1`,
//!   and a rank arrives at `op - 1` only after it has read all it wanted of operation
//!   `op - 2`, the last to use that outbox. The check is a look at n words that after a
//!   barrier or reduction always passes; it holds a run of broadcasts to one operation ahead.
//! - A slot, once used by a communicator of a process, is never offered by that process
//!   again: a member of the freed communicator might still read an outbox of its last
//!   operation, and freeing a communicator does not wait for the others (MPI_Comm_free is not
//!   synchronizing). A node's segment has up to 32 slots (fewer on large nodes, to keep the
//!   lanes near 1 MiB), which gives a program that many communicators on the fast path; later
//!   ones run the algorithms over messages, as do communicators that span nodes and
//!   contributions larger than an outbox (2 KiB).
//!
//! While it waits, a rank keeps driving its own progress (a peer may need it to finish a
//! point-to-point transfer before it can enter the collective) and watches the members it
//! waits for: one that fails fails the collective, as a receive from it would.

use std::cell::Cell;
use std::sync::Arc;

use crate::blocking::Blocking;
use crate::comm::CommId;
use crate::transport::{AmTransport, Shm};
use crate::types::{Gpid, Rank};
use crate::{Error, ErrorKind, Result};

/// Whether a communicator's collectives go through the node's lanes.
#[derive(Debug, Clone, Default)]
pub enum NodeLanes {
    /// Not agreed yet: its first collective agrees.
    #[default]
    Unknown,
    /// Over messages: a member is elsewhere, or no slot was free at every member.
    Off,
    /// Through a slot of the segment, `ops` operations done so far.
    On {
        /// The slot and the members' lanes.
        slot: Arc<NodeSlot>,
        /// Operations done through the slot by this member.
        ops: u64,
    },
}

/// A communicator's slot in the node's collective lanes.
#[derive(Debug)]
pub struct NodeSlot {
    slot: u32,
    /// The local index of each member, by rank.
    locals: Box<[u32]>,
    /// The process of each member, by rank.
    gpids: Box<[Gpid]>,
}

/// One operation through a slot.
struct Op {
    lanes: Arc<NodeSlot>,
    /// The operation's number, one more than the last.
    op: u64,
    rank: Rank,
}

/// Which members a wait is for.
#[derive(Clone, Copy)]
enum Members {
    All,
    One(Rank),
    Below(Rank),
}

/// Starts an operation through the lanes for data of `len` bytes per member, or says that
/// this one goes over messages (`None`). The first call on a communicator agrees on its slot.
fn enter<B: Blocking + ?Sized>(b: &mut B, comm: CommId, len: usize) -> Result<Option<Op>> {
    // Decided by the type and the length alone, alike at every member: whether the lanes
    // exist on this node is for the agreement to find out.
    let outbox = <B::Shm as Shm>::COLL_OUTBOX;
    if !<B::Shm as Shm>::PRESENT || outbox == 0 || len > outbox {
        return Ok(None);
    }
    let next = |b: &mut B| {
        b.visit(|d| {
            let rank = d.core.comm(comm)?.rank;
            let c = d.core.comm_mut(comm)?;
            Ok(match &mut c.node {
                NodeLanes::Unknown => None,
                NodeLanes::Off => Some(None),
                NodeLanes::On { slot, ops } => {
                    *ops += 1;
                    Some(Some(Op {
                        lanes: slot.clone(),
                        op: *ops,
                        rank,
                    }))
                }
            })
        })
    };
    if let Some(entered) = next(b)? {
        return Ok(entered);
    }
    agree(b, comm)?;
    Ok(next(b)?.flatten())
}

/// Agrees with the members on a slot free at all of them, when all are on this node (over
/// messages, which then travel through the node's segment); runs once per communicator, at
/// its first collective (every member makes it, so every member agrees here).
fn agree<B: Blocking + ?Sized>(b: &mut B, comm: CommId) -> Result<()> {
    let (offer, members) = b.visit(|d| {
        let c = d.core.comm(comm)?;
        let size = c.size();
        let mut locals = Vec::with_capacity(size as usize);
        let mut gpids = Vec::with_capacity(size as usize);
        for r in 0..size {
            let gpid = c.gpid(r)?;
            match d.shm.coll_local(gpid) {
                Some(l) => locals.push(l),
                None => break,
            }
            gpids.push(gpid);
        }
        if size < 2 || locals.len() != size as usize {
            return Ok((0, None));
        }
        Ok((d.shm.coll_offer(), Some((locals, gpids))))
    })?;
    if members.is_none() {
        // Not every member is on this node: then no member has them all on its node (a node
        // is a class of processes: a member with all on its node would have this one there
        // too), so every member decides this alone, with no message. An exchange here would
        // also be one more receive for the network to hold: libfabric's rxm holds 2,048
        // posted receives, and a program that posted more waits for this one behind them.
        return b.visit(|d| {
            let c = d.core.comm_mut(comm)?;
            if matches!(c.node, NodeLanes::Unknown) {
                c.node = NodeLanes::Off;
            }
            Ok(())
        });
    }
    let mut agreed = [0u8; 8];
    let exchanged = crate::coll::and_allreduce(b, comm, &offer.to_le_bytes(), &mut agreed);
    let agreed = u64::from_le_bytes(agreed);
    let taken = match (&exchanged, members) {
        (Ok(()), Some(m)) if agreed != 0 => Some((agreed.trailing_zeros(), m)),
        _ => None,
    };
    b.visit(|d| {
        d.shm.coll_conclude(offer, taken.as_ref().map(|t| t.0));
        let c = d.core.comm_mut(comm)?;
        if matches!(c.node, NodeLanes::Unknown) && exchanged.is_ok() {
            c.node = match taken {
                Some((slot, (locals, gpids))) => NodeLanes::On {
                    slot: Arc::new(NodeSlot {
                        slot,
                        locals: locals.into(),
                        gpids: gpids.into(),
                    }),
                    ops: 0,
                },
                None => NodeLanes::Off,
            };
        }
        Ok(())
    })?;
    exchanged
}

/// Waits until the arrival word of each member in `who` reads `op` or more, making progress
/// meanwhile; fails if one of them has failed without arriving.
fn wait<B: Blocking + ?Sized>(b: &mut B, o: &Op, who: Members, op: u64) -> Result<()> {
    let l = &*o.lanes;
    let ranks = match who {
        Members::All => 0..l.locals.len(),
        Members::One(r) => r as usize..r as usize + 1,
        Members::Below(r) => 0..r as usize,
    };
    let failed = Cell::new(None);
    b.block_until(
        |d| {
            if ranks
                .clone()
                .all(|r| d.shm.coll_arrived(l.slot, l.locals[r]) >= op)
            {
                return Ok(Some(()));
            }
            match failed.take() {
                Some(e) => Err(e),
                None => Ok(None),
            }
        },
        |d| {
            for r in ranks.clone() {
                if d.shm.peer_failed(l.gpids[r]) && d.shm.coll_arrived(l.slot, l.locals[r]) < op {
                    failed.set(Some(Error::new(
                        ErrorKind::PeerFailed,
                        format!("rank {r} failed before it entered the collective"),
                    )));
                }
            }
        },
    )
}

/// Publishes `data` as this member's part of `o`, once every member is done with the
/// operation that last used this outbox, and arrives.
fn publish<B: Blocking + ?Sized>(b: &mut B, o: &Op, data: &[u8]) -> Result<()> {
    if o.op > 1 {
        wait(b, o, Members::All, o.op - 1)?;
    }
    b.visit(|d| {
        d.shm.coll_publish(o.lanes.slot, o.op, data);
        d.shm.coll_arrive(o.lanes.slot, o.op);
        Ok(())
    })
}

fn arrive<B: Blocking + ?Sized>(b: &mut B, o: &Op) -> Result<()> {
    b.visit(|d| {
        d.shm.coll_arrive(o.lanes.slot, o.op);
        Ok(())
    })
}

/// Runs `f` on what member `r` published for `o`, checked to be `len` bytes long.
fn read<S: Shm, R>(shm: &S, o: &Op, r: Rank, len: usize, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
    let l = &*o.lanes;
    shm.coll_read(l.slot, l.locals[r as usize], o.op, |part| {
        if part.len() == len {
            Ok(f(part))
        } else {
            Err(Error::new(
                ErrorKind::Count,
                format!(
                    "collective: rank {r} gave {} bytes where this rank expected {len}",
                    part.len()
                ),
            ))
        }
    })
}

/// MPI_Barrier through the lanes; `false`: not on this communicator.
pub(crate) fn barrier<B: Blocking + ?Sized>(b: &mut B, comm: CommId) -> Result<bool> {
    let Some(o) = enter(b, comm, 0)? else {
        return Ok(false);
    };
    arrive(b, &o)?;
    wait(b, &o, Members::All, o.op)?;
    Ok(true)
}

/// MPI_Bcast through the lanes; `false`: not on this communicator, or `buf` too long.
pub(crate) fn bcast<B: Blocking + ?Sized>(
    b: &mut B,
    comm: CommId,
    root: Rank,
    buf: &mut [u8],
) -> Result<bool> {
    let Some(o) = enter(b, comm, buf.len())? else {
        return Ok(false);
    };
    if o.rank == root {
        publish(b, &o, buf)?;
    } else {
        arrive(b, &o)?;
        wait(b, &o, Members::One(root), o.op)?;
        b.visit(|d| {
            read(&d.shm, &o, root, buf.len(), |data| {
                buf.copy_from_slice(data)
            })
        })?;
    }
    Ok(true)
}

/// MPI_Reduce through the lanes, folding in rank order at `root` (so `op` need not commute,
/// whatever the root); `false`: not on this communicator, or `send` too long.
pub(crate) fn reduce<B: Blocking + ?Sized, F: FnMut(&mut [u8], &[u8])>(
    b: &mut B,
    comm: CommId,
    root: Rank,
    send: &[u8],
    recv: &mut [u8],
    op: &mut F,
) -> Result<bool> {
    let Some(o) = enter(b, comm, send.len())? else {
        return Ok(false);
    };
    if o.rank != root {
        publish(b, &o, send)?;
        return Ok(true);
    }
    arrive(b, &o)?;
    wait(b, &o, Members::All, o.op)?;
    fold(b, &o, 0..o.lanes.locals.len() as Rank, send, recv, op)?;
    Ok(true)
}

/// Folds into `acc` the parts of members `ranks` in rank order, this member's being `mine`.
fn fold<B: Blocking + ?Sized, F: FnMut(&mut [u8], &[u8])>(
    b: &mut B,
    o: &Op,
    ranks: std::ops::Range<Rank>,
    mine: &[u8],
    acc: &mut [u8],
    op: &mut F,
) -> Result<()> {
    let n = mine.len();
    b.visit(|d| {
        for r in ranks.clone() {
            let first = r == ranks.start;
            let mut join = |part: &[u8]| {
                if first {
                    acc.copy_from_slice(part);
                } else {
                    op(acc, part);
                }
            };
            if r == o.rank {
                join(mine);
            } else {
                read(&d.shm, o, r, n, join)?;
            }
        }
        Ok(())
    })
}

/// MPI_Allreduce through the lanes (every member folds every part, in rank order); `false`:
/// not on this communicator, or `send` too long.
pub(crate) fn allreduce<B: Blocking + ?Sized, F: FnMut(&mut [u8], &[u8])>(
    b: &mut B,
    comm: CommId,
    send: &[u8],
    recv: &mut [u8],
    op: &mut F,
) -> Result<bool> {
    let Some(o) = enter(b, comm, send.len())? else {
        return Ok(false);
    };
    publish(b, &o, send)?;
    wait(b, &o, Members::All, o.op)?;
    fold(b, &o, 0..o.lanes.locals.len() as Rank, send, recv, op)?;
    Ok(true)
}

/// MPI_Scan (`inclusive`) and MPI_Exscan through the lanes: each member folds the parts of
/// the members below it (and its own); `false`: not on this communicator, or `send` too long.
pub(crate) fn prefix<B: Blocking + ?Sized, F: FnMut(&mut [u8], &[u8])>(
    b: &mut B,
    comm: CommId,
    send: &[u8],
    recv: &mut [u8],
    op: &mut F,
    inclusive: bool,
) -> Result<bool> {
    let Some(o) = enter(b, comm, send.len())? else {
        return Ok(false);
    };
    publish(b, &o, send)?;
    wait(b, &o, Members::Below(o.rank), o.op)?;
    let end = if inclusive { o.rank + 1 } else { o.rank };
    if end > 0 {
        fold(b, &o, 0..end, send, recv, op)?;
    }
    Ok(true)
}

/// MPI_Allgather through the lanes; `false`: not on this communicator, or `send` too long.
pub(crate) fn allgather<B: Blocking + ?Sized>(
    b: &mut B,
    comm: CommId,
    send: &[u8],
    recv: &mut [u8],
) -> Result<bool> {
    let Some(o) = enter(b, comm, send.len())? else {
        return Ok(false);
    };
    let n = send.len();
    publish(b, &o, send)?;
    wait(b, &o, Members::All, o.op)?;
    b.visit(|d| {
        for (r, block) in recv.chunks_exact_mut(n.max(1)).enumerate() {
            if r as Rank == o.rank {
                block.copy_from_slice(send);
            } else if n > 0 {
                read(&d.shm, &o, r as Rank, n, |part| block.copy_from_slice(part))?;
            }
        }
        Ok(())
    })?;
    Ok(true)
}

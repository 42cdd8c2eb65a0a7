//! Intercommunicators (MPI 4.1 section 7.6): making them, and their collectives' schedules.
//!
//! An intercommunicator joins two disjoint groups; its sends and receives name ranks of the
//! other group ([`Comm::remote`]). As in MPICH (`MPIR_Intercomm_create_impl`,
//! `MPIR_Get_intercomm_contextid`), each group agrees on its own receive context id among its
//! members over a communicator of its own, and the two groups' leaders tell each other their
//! ids and members: the agreement needs no exchange across the groups, and a process sends with
//! the other group's id ([`Comm::send_context`]). Every intercommunicator also has a
//! communicator of its local group ([`Comm::local`]), made with it, over which its collectives
//! work within the group; a collective's steps across the groups go over the intercommunicator
//! itself ([`crate::schedule::Schedule::within_local`]).
//!
//! The constructors are written over [`Blocking`] as `crate::coll`'s are; those that need the
//! intercommunicator's peer communicator (`MPI_Intercomm_create`) come in steps, so that a
//! caller whose peer communicator lives on another VCI than the local one runs each step on
//! its own VCI. The collectives follow MPI 4.1 section 6.2.2 (`MPI_ROOT` and `MPI_PROC_NULL`
//! at the root's group, the root's remote rank at the other) with MPICH's algorithms
//! (`src/mpi/coll/*/*_inter_*.c`): a reduction within the group, one exchange between the
//! leaders and a broadcast within the group; gathers, scatters and all-to-all go directly
//! between the members of the two groups.

use crate::blocking::Blocking;
use crate::coll::{self, allgather, bcast_on, release_context, sendrecv_on, UNDEFINED};
use crate::comm::{Comm, CommId, PENDING_CONTEXT};
use crate::device::Device;
use crate::nbc;
use crate::rankmap::{Group, RankMap};
use crate::request::ReqHandle;
use crate::schedule::{Schedule, Slice};
use crate::transport::{Netmod, Shm};
use crate::types::{ContextId, Rank, Tag, PROC_NULL};
use crate::{Error, ErrorKind, Result};

/// The leaders' exchanges over an intercommunicator's collective context.
const TAG_EXCHANGE: Tag = 11;
/// What a leader learned, broadcast within its group.
const TAG_SHARE: Tag = 12;
/// The context agreement across both groups ([`merge`]).
const TAG_AGREE: Tag = 13;

/// `MPI_ROOT`'s value in a rooted collective's root argument (the ABI's, as `ch4_core`
/// receives it).
pub const ROOT: Rank = -4;

/// An intercommunicator of local group `group` (this process at `rank`) receiving on
/// `context`, whose peers are `remote`, receiving on `send_context`.
fn inter_comm(
    context: ContextId,
    send_context: ContextId,
    rank: Rank,
    group: Group,
    remote: Group,
) -> Comm {
    Comm {
        send_context,
        remote: Some(remote),
        ..Comm::intra(context, rank, group)
    }
}

/// The context id an intercommunicator's VCI is chosen by: the same at both groups.
pub fn binding_context(c: &Comm) -> ContextId {
    c.context.min(c.send_context)
}

fn internal(what: &str) -> Error {
    Error::new(ErrorKind::Internal, what.to_string())
}

fn le32(b: &[u8], at: usize) -> Result<u32> {
    b.get(at..at + 4)
        .and_then(|s| s.try_into().ok())
        .map(u32::from_le_bytes)
        .ok_or_else(|| internal("a short intercommunicator description"))
}

/// The local part of a new intercommunicator, agreed among the members of `local_comm`:
/// the context id they will receive on, and their own communicator of the group (a dup of
/// `local_comm`). Collective over `local_comm` (`MPI_Intercomm_create`'s first step).
pub fn create_local<B: Blocking + ?Sized>(
    b: &mut B,
    local_comm: CommId,
) -> Result<(ContextId, Comm)> {
    let recv = coll::agree_context(b, local_comm)?;
    match coll::new_dup(b, local_comm) {
        Ok(local) => Ok((recv, local)),
        Err(e) => {
            release_context(b, recv);
            Err(e)
        }
    }
}

/// What a leader tells the other group's: its group's receive context id and members, as
/// little-endian words.
pub fn describe(recv: ContextId, group: &Group) -> Vec<u8> {
    let n = group.size();
    let mut out = Vec::with_capacity(8 + 4 * n as usize);
    out.extend_from_slice(&recv.to_le_bytes());
    out.extend_from_slice(&n.to_le_bytes());
    for r in 0..n as Rank {
        out.extend_from_slice(&group.gpid(r).unwrap_or(u32::MAX).to_le_bytes());
    }
    out
}

/// The leaders' exchange of their descriptions over `peer` (`MPI_Intercomm_create`'s peer
/// communicator), with the program's `tag` on its point-to-point context as MPI specifies:
/// the length first, then the description. Called by the leaders only.
pub fn exchange_over_peer<B: Blocking + ?Sized>(
    b: &mut B,
    peer: CommId,
    remote_leader: Rank,
    tag: Tag,
    mine: &[u8],
) -> Result<Vec<u8>> {
    let len = (mine.len() as u64).to_le_bytes();
    let mut theirs_len = [0u8; 8];
    let st = coll::sendrecv(
        b,
        peer,
        &len,
        remote_leader,
        tag,
        &mut theirs_len,
        remote_leader,
        tag,
    )?;
    if st.bytes != 8 {
        return Err(internal(
            "a bad intercommunicator header from the remote leader",
        ));
    }
    let n = usize::try_from(u64::from_le_bytes(theirs_len))
        .map_err(|_| internal("an intercommunicator description too large"))?;
    let mut theirs = vec![0u8; n];
    let st = coll::sendrecv(
        b,
        peer,
        mine,
        remote_leader,
        tag,
        &mut theirs,
        remote_leader,
        tag,
    )?;
    if st.bytes != n {
        return Err(internal("a short intercommunicator description"));
    }
    Ok(theirs)
}

/// The last step of `MPI_Intercomm_create`: the leader (`leader` of `local_comm`, which
/// passes the remote description it received) broadcasts it within the group, and every
/// member makes the intercommunicator. `recv` and `local` are what [`create_local`] gave;
/// their context ids go back to the free set if this fails. Collective over `local_comm`.
pub fn create_finish<B: Blocking + ?Sized>(
    b: &mut B,
    local_comm: CommId,
    leader: Rank,
    remote: Option<Vec<u8>>,
    recv: ContextId,
    local: &Comm,
) -> Result<Comm> {
    let out = (|| {
        let mut data = remote.unwrap_or_default();
        let mut len = (data.len() as u64).to_le_bytes();
        bcast_on(b, local_comm, leader, &mut len, TAG_SHARE)?;
        let n = usize::try_from(u64::from_le_bytes(len))
            .map_err(|_| internal("an intercommunicator description too large"))?;
        data.resize(n, 0);
        bcast_on(b, local_comm, leader, &mut data, TAG_SHARE)?;
        let send_context = le32(&data, 0)?;
        let size = le32(&data, 4)? as usize;
        let gpids = (0..size)
            .map(|i| le32(&data, 8 + 4 * i))
            .collect::<Result<Vec<_>>>()?;
        let me = b.visit(|d| Ok(d.core.gpid))?;
        if gpids.contains(&me) {
            return Err(Error::new(
                ErrorKind::Arg,
                "the local and remote groups of an intercommunicator overlap",
            ));
        }
        let remote = Group::from_map(std::sync::Arc::new(RankMap::from_gpids(&gpids)?));
        Ok(inter_comm(
            recv,
            send_context,
            local.rank,
            local.group.clone(),
            remote,
        ))
    })();
    if out.is_err() {
        release_context(b, recv);
        release_context(b, local.context);
    }
    out
}

/// An intercommunicator's local communicator, rank in it, and remote group.
fn parts<B: Blocking + ?Sized>(b: &mut B, inter: CommId) -> Result<(CommId, Rank, Group)> {
    b.visit(|d| {
        let c = d.core.comm(inter)?;
        match (c.local, &c.remote) {
            (Some(l), Some(r)) => Ok((l, c.rank, r.clone())),
            _ => Err(Error::new(
                ErrorKind::Comm,
                "the communicator is not an intercommunicator",
            )),
        }
    })
}

/// Splits intercommunicator `inter` by `color` (MPI 4.1 section 7.4.2, `MPI_Comm_split` on an
/// intercommunicator): the members of each group with one color make an intercommunicator
/// with the other group's members of that color, each side ordered by `key`, then by rank.
/// A member whose color is [`UNDEFINED`] or absent from the other group gets `None`. The
/// result's intercommunicator and its communicator of the local group, for the caller to
/// adopt. `MPI_Comm_dup` (one color, the rank as key) and `MPI_Comm_create` (the color of
/// membership, the rank in the group as key) on an intercommunicator are splits too.
/// Collective over `inter`.
pub fn split<B: Blocking + ?Sized>(
    b: &mut B,
    inter: CommId,
    color: i32,
    key: i32,
) -> Result<Option<(Comm, Comm)>> {
    if color < 0 && color != UNDEFINED {
        return Err(Error::new(
            ErrorKind::Arg,
            format!("split color {color} is negative and not MPI_UNDEFINED"),
        ));
    }
    let (local, lrank, remote) = parts(b, inter)?;
    let (_, lsize) = coll::rank_size(b, local)?;
    let mut mine = [0u8; 8];
    mine[..4].copy_from_slice(&color.to_le_bytes());
    mine[4..].copy_from_slice(&key.to_le_bytes());
    let mut table = vec![0u8; 8 * lsize as usize];
    allgather(b, local, &mine, &mut table)?;
    let recv = coll::agree_context(b, local)?;
    let new_local = match coll::new_split(b, local, color, key) {
        Ok(l) => l,
        Err(e) => {
            release_context(b, recv);
            return Err(e);
        }
    };
    let out = (|| {
        let mut theirs = vec![0u8; 4 + 8 * remote.size() as usize];
        if lrank == 0 {
            let mut send = recv.to_le_bytes().to_vec();
            send.extend_from_slice(&table);
            sendrecv_on(
                b,
                inter,
                &send,
                0,
                TAG_EXCHANGE,
                &mut theirs,
                0,
                TAG_EXCHANGE,
                true,
            )?;
        }
        bcast_on(b, local, 0, &mut theirs, TAG_SHARE)?;
        let send_context = le32(&theirs, 0)?;
        let mut members: Vec<(i32, Rank)> = theirs[4..]
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
        match &new_local {
            Some(nl) if color != UNDEFINED && !ranks.is_empty() => Ok(Some((
                inter_comm(
                    recv,
                    send_context,
                    nl.rank,
                    nl.group.clone(),
                    remote.incl(&ranks)?,
                ),
                nl.clone(),
            ))),
            _ => Ok(None),
        }
    })();
    if !matches!(out, Ok(Some(_))) {
        release_context(b, recv);
        if let Some(nl) = &new_local {
            release_context(b, nl.context);
        }
    }
    out
}

/// The intracommunicator of both groups of `inter` (`MPI_Intercomm_merge`): the group whose
/// members passed `high` false first; when both passed the same, the group whose first
/// member has the lower process id first (MPI leaves that order to the implementation). The
/// context id is agreed across both groups: within each over its local communicator, between
/// them by the leaders. Collective over `inter`.
pub fn merge<B: Blocking + ?Sized>(b: &mut B, inter: CommId, high: bool) -> Result<Comm> {
    let (local, lrank, remote) = parts(b, inter)?;
    let group = b.visit(|d| Ok(d.core.comm(inter)?.group.clone()))?;
    let mut flags = [high as u8, 0];
    if lrank == 0 {
        let mut theirs = [0u8; 1];
        sendrecv_on(
            b,
            inter,
            &flags[..1],
            0,
            TAG_EXCHANGE,
            &mut theirs,
            0,
            TAG_EXCHANGE,
            true,
        )?;
        flags[1] = theirs[0];
    }
    bcast_on(b, local, 0, &mut flags, TAG_SHARE)?;
    let (local_high, remote_high) = (flags[0] != 0, flags[1] != 0);
    let local_first = if local_high != remote_high {
        !local_high
    } else {
        group.gpid(0) < remote.gpid(0)
    };
    let (merged, rank) = if local_first {
        (group.union(&remote), lrank)
    } else {
        (remote.union(&group), remote.size() as Rank + lrank)
    };
    let context = coll::agree_context_by(b, local, 0, |b, send, recv| {
        coll::allreduce_tagged(b, local, send, recv, coll::TAG_CONTEXT)?;
        if lrank == 0 {
            let mine = recv.to_vec();
            let mut theirs = vec![0u8; recv.len()];
            sendrecv_on(
                b,
                inter,
                &mine,
                0,
                TAG_AGREE,
                &mut theirs,
                0,
                TAG_AGREE,
                true,
            )?;
            for (a, t) in recv.iter_mut().zip(&theirs) {
                *a &= t;
            }
        }
        bcast_on(b, local, 0, recv, TAG_SHARE)
    })?;
    Ok(Comm::intra(context, rank, merged))
}

// ------------------------------------------------------------------ collectives' schedules

/// Where a member stands in a rooted collective on an intercommunicator (MPI 4.1 section
/// 6.2.2): the root itself, another member of the root's group, or a member of the other
/// group, which names the root by its rank there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rooted {
    /// `MPI_ROOT`: this member is the root.
    Root,
    /// `MPI_PROC_NULL`: in the root's group, not the root; takes no part.
    Idle,
    /// A member of the other group; the root is this remote rank.
    Leaf(Rank),
}

impl Rooted {
    /// The standing that root argument `root` gives, checked against the remote size.
    pub fn of(root: Rank, remote_size: Rank) -> Result<Rooted> {
        match root {
            ROOT => Ok(Rooted::Root),
            PROC_NULL => Ok(Rooted::Idle),
            r if (0..remote_size).contains(&r) => Ok(Rooted::Leaf(r)),
            r => Err(Error::new(
                ErrorKind::Root,
                format!(
                    "root {r} on an intercommunicator: MPI_ROOT, MPI_PROC_NULL or a rank of \
                     the remote group of {remote_size}"
                ),
            )),
        }
    }
}

/// The barrier: a barrier within each group, an exchange of the leaders, a broadcast within
/// each group (MPICH's `MPIR_Ibarrier_inter_sched_bcast`).
pub fn barrier(s: &mut Schedule, rank: Rank, size: Rank) {
    let empty = s.scratch(0);
    s.within_local(true);
    nbc::barrier(s, rank, size);
    s.fence();
    s.within_local(false);
    if rank == 0 {
        s.send(0, empty);
        s.recv(0, empty);
    }
    s.fence();
    s.within_local(true);
    nbc::bcast(s, rank, size, 0, empty);
    s.within_local(false);
}

/// The broadcast of `data` from the root: the root sends it to the other group's leader,
/// which broadcasts it within its group. `data` is the root's data, or where the other
/// group's members receive it.
pub fn bcast(s: &mut Schedule, rank: Rank, size: Rank, at: Rooted, data: Slice) {
    match at {
        Rooted::Root => s.send(0, data),
        Rooted::Idle => {}
        Rooted::Leaf(root) => {
            if rank == 0 {
                s.recv(root, data);
            }
            s.fence();
            s.within_local(true);
            nbc::bcast(s, rank, size, 0, data);
            s.within_local(false);
        }
    }
}

/// The reduction to the root: the other group reduces within itself to its leader
/// (`acc`, this member's contribution, holds the result there), which sends it to the root;
/// at the root, `acc` is where the result arrives.
pub fn reduce(s: &mut Schedule, rank: Rank, size: Rank, at: Rooted, acc: Slice, commutes: bool) {
    match at {
        Rooted::Root => s.recv(0, acc),
        Rooted::Idle => {}
        Rooted::Leaf(root) => {
            s.within_local(true);
            nbc::reduce(s, rank, size, 0, acc, commutes);
            s.within_local(false);
            s.fence();
            if rank == 0 {
                s.send(root, acc);
            }
        }
    }
}

/// The allreduce: each group reduces its contributions (`acc`) to its leader, the leaders
/// swap the results, and each broadcasts the other group's within its group into `result`.
pub fn allreduce(
    s: &mut Schedule,
    rank: Rank,
    size: Rank,
    acc: Slice,
    result: Slice,
    commutes: bool,
) {
    s.within_local(true);
    nbc::reduce(s, rank, size, 0, acc, commutes);
    s.within_local(false);
    s.fence();
    if rank == 0 {
        s.send(0, acc);
        s.recv(0, result);
    }
    s.fence();
    s.within_local(true);
    nbc::bcast(s, rank, size, 0, result);
    s.within_local(false);
}

/// The reduce-scatter: as [`allreduce`] (the whole vector), then the leader scatters the
/// other group's result within the group, `blocks[i]` of `result` to member `i`, into `mine`.
#[allow(clippy::too_many_arguments)]
pub fn reduce_scatter(
    s: &mut Schedule,
    rank: Rank,
    size: Rank,
    acc: Slice,
    result: Slice,
    blocks: &[Slice],
    mine: Slice,
    commutes: bool,
) -> Result<()> {
    s.within_local(true);
    nbc::reduce(s, rank, size, 0, acc, commutes);
    s.within_local(false);
    s.fence();
    if rank == 0 {
        s.send(0, acc);
        s.recv(0, result);
    }
    s.fence();
    s.within_local(true);
    let out = nbc::scatterv(s, rank, size, 0, blocks, mine, 0);
    s.within_local(false);
    out
}

/// Sends `send[j]` to remote member `j` and receives `recv[i]` from remote member `i`, all
/// at once (the gathers, scatters and all-to-all between the groups; an empty list sends or
/// receives nothing).
pub fn exchange(s: &mut Schedule, send: &[(Rank, Slice)], recv: &[(Rank, Slice)]) {
    for &(from, into) in recv {
        s.recv(from, into);
    }
    for &(to, from) in send {
        s.send(to, from);
    }
}

// ------------------------------------------------------------------ the nonblocking dup

impl<N: Netmod, S: Shm> Device<N, S> {
    /// Starts `MPI_Comm_idup` of `parent` (an intra- or intercommunicator): the new
    /// communicator is made at once, with a pending context id
    /// ([`crate::comm::PENDING_CONTEXT`]), and gets its own when the returned request
    /// completes: a schedule agrees on it ([`Schedule::agree_contexts`]) without holding the
    /// process's context ids while it waits, so members may start other collectives, and
    /// blocking agreements, in between, as MPI allows (MPI 4.1 section 7.4.2). On an
    /// intercommunicator each group agrees on its receive id and its local communicator's,
    /// and the leaders exchange the receive ids, as [`split`] does. Using the new
    /// communicator before the request completes is erroneous (and finds no match).
    pub fn comm_idup_start(&mut self, parent: CommId) -> Result<(CommId, ReqHandle)> {
        let c = self.core.comm(parent)?.clone();
        let size = c.size();
        let mut s = Schedule::new(parent);
        let made = match &c.remote {
            None => {
                let id = self.adopt_comm(Comm::intra(PENDING_CONTEXT, c.rank, c.group.clone()))?;
                let out = s.agree_contexts(c.rank, size, 1);
                s.install(id, out, out);
                id
            }
            Some(remote) => {
                let local =
                    self.adopt_comm(Comm::intra(PENDING_CONTEXT, c.rank, c.group.clone()))?;
                let inter = match self.adopt_comm(inter_comm(
                    PENDING_CONTEXT,
                    PENDING_CONTEXT,
                    c.rank,
                    c.group.clone(),
                    remote.clone(),
                )) {
                    Ok(id) => id,
                    Err(e) => {
                        let _ = self.comm_free(local);
                        return Err(e);
                    }
                };
                self.set_inter_local(inter, local)?;
                s.within_local(true);
                let out = s.agree_contexts(c.rank, size, 2);
                s.within_local(false);
                let theirs = s.scratch(4);
                if c.rank == 0 {
                    s.send(0, out.sub(0, 4));
                    s.recv(0, theirs);
                }
                s.fence();
                s.within_local(true);
                nbc::bcast(&mut s, c.rank, size, 0, theirs);
                s.within_local(false);
                s.fence();
                s.install(inter, out.sub(0, 4), theirs);
                s.install(local, out.sub(4, 4), out.sub(4, 4));
                inter
            }
        };
        match self.start_schedule(s, None) {
            Ok(h) => Ok((made, h)),
            Err(e) => {
                let _ = self.comm_free(made);
                Err(e)
            }
        }
    }
}

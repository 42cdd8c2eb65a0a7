//! Typed communicators: point-to-point, probes, nonblocking operations and collectives on
//! slices of any [`Pod`] type.

use ch4_core::blocking::{Blocking, Shared};
use ch4_core::buffer::{RecvBuf, SendBuf};
use ch4_core::comm::{Comm, CommId};
use ch4_core::datatype::{as_bytes, as_bytes_mut, Layout, Pod};
use ch4_core::rankmap::Group;
use ch4_core::transport::{Netmod, Shm};
use ch4_core::{Error, ErrorKind, Rank, Result, SendMode, Status, Tag};

use crate::level::VciSet;
use crate::owned::OwnedRequest;
use crate::request::{Request, Scope};
use crate::{blocking, Context, RankState, SelectedNetmod, SelectedShm, Single, ThreadLevel};

/// A communicator of one rank's device: a group of processes with its own message space.
///
/// Cheap to clone (all clones name the same communicator). Methods take `&self`: the device is
/// shared by every communicator of the rank and borrowed for the length of each call.
pub struct Communicator<N: Netmod = SelectedNetmod, S: Shm = SelectedShm, L: ThreadLevel = Single> {
    rank_state: L::Shared<RankState<N, S, L>>,
    /// The VCI that carries all of this communicator's traffic.
    vci: usize,
    id: CommId,
    rank: Rank,
    size: Rank,
}

impl<N: Netmod, S: Shm, L: ThreadLevel> Clone for Communicator<N, S, L> {
    fn clone(&self) -> Self {
        Communicator {
            rank_state: self.rank_state.clone(),
            vci: self.vci,
            id: self.id,
            rank: self.rank,
            size: self.size,
        }
    }
}

impl<N: Netmod, S: Shm, L: ThreadLevel> Communicator<N, S, L> {
    pub(crate) fn new(
        rank_state: L::Shared<RankState<N, S, L>>,
        vci: usize,
        id: CommId,
    ) -> Communicator<N, S, L> {
        // A finalized rank's device cannot be borrowed: the communicator it hands out then has
        // no members, and every call on it fails with the finalized error.
        let (rank, size) = match rank_state.device(vci) {
            Ok(d) => (d.rank(id).unwrap_or(-1), d.size(id).unwrap_or(0)),
            Err(_) => (-1, 0),
        };
        Communicator {
            rank_state,
            vci,
            id,
            rank,
            size,
        }
    }

    /// This process's rank in the communicator.
    pub fn rank(&self) -> Rank {
        self.rank
    }

    /// Number of processes in the communicator.
    pub fn size(&self) -> Rank {
        self.size
    }

    /// The largest tag a message on this communicator may carry (MPI_TAG_UB, an attribute
    /// of every communicator in MPI): [`Context::tag_ub`](crate::Context::tag_ub).
    pub fn tag_ub(&self) -> Result<Tag> {
        Ok(self.device()?.tag_ub())
    }

    /// The device-level id, for use with [`Context::device`].
    pub fn id(&self) -> CommId {
        self.id
    }

    /// The VCI that carries this communicator's traffic (always 0 below the multiple level).
    pub fn vci(&self) -> usize {
        self.vci
    }

    /// This communicator's device (its VCI's), for what the safe API does not cover, with
    /// [`Communicator::id`]. Fails as [`Context::device`] does.
    pub fn device(&self) -> Result<crate::DeviceGuard<'_, N, S, L>> {
        self.rank_state.device(self.vci)
    }

    /// The rank's context (to open scopes, reach the world communicator).
    pub fn context(&self) -> Context<N, S, L> {
        Context {
            rank: self.rank_state.clone(),
        }
    }

    // ------------------------------------------------------------ blocking

    /// Sends `buf` to `dest` with `tag` (MPI_Send). Returns once `buf` may be reused.
    #[inline]
    pub fn send<T: Pod>(&self, buf: &[T], dest: Rank, tag: Tag) -> Result<()> {
        blocking!(L, self.rank_state, self.vci, |b| Blocking::send_on(
            b,
            self.id,
            dest,
            tag,
            as_bytes(buf),
            SendMode::Standard,
            false
        ))
    }

    /// Synchronous send (MPI_Ssend): returns only after the receiver has matched the message.
    pub fn ssend<T: Pod>(&self, buf: &[T], dest: Rank, tag: Tag) -> Result<()> {
        blocking!(L, self.rank_state, self.vci, |b| Blocking::send_on(
            b,
            self.id,
            dest,
            tag,
            as_bytes(buf),
            SendMode::Synchronous,
            false
        ))
    }

    /// Ready send (MPI_Rsend): the caller asserts the receive is posted; if it is not, the
    /// receive that later matches fails with [`ErrorKind::ReadyNotPosted`].
    pub fn rsend<T: Pod>(&self, buf: &[T], dest: Rank, tag: Tag) -> Result<()> {
        blocking!(L, self.rank_state, self.vci, |b| Blocking::send_on(
            b,
            self.id,
            dest,
            tag,
            as_bytes(buf),
            SendMode::Ready,
            false
        ))
    }

    /// Receives into `buf` from `src` (or [`crate::ANY_SOURCE`]) with `tag` (or
    /// [`crate::ANY_TAG`]). A message longer than `buf` fills it and fails with
    /// [`ErrorKind::Truncate`]; nothing past `buf` is written.
    #[inline]
    pub fn recv<T: Pod>(&self, buf: &mut [T], src: Rank, tag: Tag) -> Result<Status> {
        blocking!(L, self.rank_state, self.vci, |b| Blocking::recv_on(
            b,
            self.id,
            src,
            tag,
            as_bytes_mut(buf),
            false
        ))
    }

    /// Receives a message of any length into a new vector (probe, then receive exactly it).
    pub fn recv_vec<T: Pod>(&self, src: Rank, tag: Tag) -> Result<(Vec<T>, Status)> {
        let (msg, st) = self.mprobe(src, tag)?;
        let n = st.count(std::mem::size_of::<T>()).ok_or_else(|| {
            Error::new(
                ErrorKind::Count,
                format!(
                    "message of {} bytes is not a whole number of {}-byte elements",
                    st.bytes,
                    std::mem::size_of::<T>()
                ),
            )
        })?;
        let mut v = vec![T::zeroed(); n];
        let st = msg.recv(&mut v)?;
        Ok((v, st))
    }

    /// Sends `send` to `dest` while receiving into `recv` from `src` (MPI_Sendrecv).
    #[allow(clippy::too_many_arguments)]
    pub fn sendrecv<T: Pod, U: Pod>(
        &self,
        send: &[T],
        dest: Rank,
        send_tag: Tag,
        recv: &mut [U],
        src: Rank,
        recv_tag: Tag,
    ) -> Result<Status> {
        blocking!(L, self.rank_state, self.vci, |b| ch4_core::coll::sendrecv(
            b,
            self.id,
            as_bytes(send),
            dest,
            send_tag,
            as_bytes_mut(recv),
            src,
            recv_tag,
        ))
    }

    /// Sends the elements of `buf` selected by `layout` (a vector or indexed datatype). The
    /// blocks go to the transport as they lie in `buf` when they are few enough, without being
    /// packed into a copy first.
    pub fn send_layout<T: Pod>(
        &self,
        buf: &[T],
        layout: &Layout,
        dest: Rank,
        tag: Tag,
    ) -> Result<()> {
        // SAFETY: `buf` is borrowed for this whole call, and the request is waited for or
        // released before we return.
        let sbuf = unsafe { SendBuf::borrowed_with_layout(as_bytes(buf), layout.clone())? };
        let h = self.rank_state.device(self.vci)?.isend(
            self.id,
            dest,
            tag,
            sbuf,
            SendMode::Standard,
        )?;
        blocking!(L, self.rank_state, self.vci, |b| Blocking::wait_or_abandon(
            b, h
        ))
        .map(drop)
    }

    /// Receives into the elements of `buf` selected by `layout`; other elements are untouched.
    pub fn recv_layout<T: Pod>(
        &self,
        buf: &mut [T],
        layout: &Layout,
        src: Rank,
        tag: Tag,
    ) -> Result<Status> {
        let bytes = as_bytes_mut(buf);
        // SAFETY: `bytes` is borrowed for this whole call, and the request is waited for or
        // released before we return.
        let rbuf = unsafe { RecvBuf::borrowed_with_layout(bytes, layout.clone())? };
        let h = self
            .rank_state
            .device(self.vci)?
            .irecv(self.id, src, tag, rbuf)?;
        blocking!(L, self.rank_state, self.vci, |b| Blocking::wait_or_abandon(
            b, h
        ))
    }

    // -------------------------------------------------------------- probes

    /// Blocks until a matching message has arrived and returns its status (MPI_Probe).
    pub fn probe(&self, src: Rank, tag: Tag) -> Result<Status> {
        if L::YIELDS {
            let id = self.id;
            Shared(&self.rank_state.vci(self.vci)).block_until(|d| d.iprobe(id, src, tag), |_| {})
        } else {
            self.rank_state.device(self.vci)?.probe(self.id, src, tag)
        }
    }

    /// Whether a matching message has arrived (MPI_Iprobe).
    pub fn iprobe(&self, src: Rank, tag: Tag) -> Result<Option<Status>> {
        self.rank_state.device(self.vci)?.iprobe(self.id, src, tag)
    }

    /// Takes a matching message out of matching; only the returned [`Message`] can receive it
    /// (MPI_Mprobe), so another thread's or library's receive cannot steal it.
    pub fn mprobe(&self, src: Rank, tag: Tag) -> Result<(Message<N, S, L>, Status)> {
        let (m, st) = if L::YIELDS {
            let id = self.id;
            Shared(&self.rank_state.vci(self.vci))
                .block_until(|d| d.improbe(id, src, tag), |_| {})?
        } else {
            self.rank_state
                .device(self.vci)?
                .mprobe(self.id, src, tag)?
        };
        Ok((
            Message {
                rank: self.rank_state.clone(),
                vci: self.vci,
                msg: Some(m),
            },
            st,
        ))
    }

    /// Nonblocking matched probe (MPI_Improbe).
    pub fn improbe(&self, src: Rank, tag: Tag) -> Result<Option<Probed<N, S, L>>> {
        let found = self
            .rank_state
            .device(self.vci)?
            .improbe(self.id, src, tag)?;
        Ok(found.map(|(m, st)| {
            (
                Message {
                    rank: self.rank_state.clone(),
                    vci: self.vci,
                    msg: Some(m),
                },
                st,
            )
        }))
    }

    // ---------------------------------------------------------- nonblocking

    /// Starts a send of `buf`, borrowed until the request completes (MPI_Isend).
    pub fn isend<'a, 's, T: Pod>(
        &self,
        scope: &'s Scope<'a, N, S, L>,
        buf: &'a [T],
        dest: Rank,
        tag: Tag,
    ) -> Result<Request<'s, N, S, L>> {
        self.isend_mode(scope, buf, dest, tag, SendMode::Standard)
    }

    /// Starts a synchronous send (MPI_Issend).
    pub fn issend<'a, 's, T: Pod>(
        &self,
        scope: &'s Scope<'a, N, S, L>,
        buf: &'a [T],
        dest: Rank,
        tag: Tag,
    ) -> Result<Request<'s, N, S, L>> {
        self.isend_mode(scope, buf, dest, tag, SendMode::Synchronous)
    }

    /// Starts a ready send (MPI_Irsend).
    pub fn irsend<'a, 's, T: Pod>(
        &self,
        scope: &'s Scope<'a, N, S, L>,
        buf: &'a [T],
        dest: Rank,
        tag: Tag,
    ) -> Result<Request<'s, N, S, L>> {
        self.isend_mode(scope, buf, dest, tag, SendMode::Ready)
    }

    /// Starts a send in the given mode.
    // Inlined into the caller's loop: a call returned the request through the stack, and the
    // caller's reads of it stalled as the buffer's did (see below). osu_mbw_mr in the host's
    // slow mode: 8-32 B 1.03-1.09x, 64-256 B 1.42-1.53x (5 interleaved rounds).
    #[inline(always)]
    pub fn isend_mode<'a, 's, T: Pod>(
        &self,
        scope: &'s Scope<'a, N, S, L>,
        buf: &'a [T],
        dest: Rank,
        tag: Tag,
        mode: SendMode,
    ) -> Result<Request<'s, N, S, L>> {
        self.same_device(scope)?;
        // SAFETY: `buf` is borrowed for `'a`, which outlives the scope; the scope completes (or
        // releases) the request before it returns, so the device never reads `buf` after 'a.
        let sbuf = unsafe { SendBuf::borrowed(as_bytes(buf)) };
        // The device's send inlined whole: through a call, the buffer went by the stack, and
        // reading it back there stalled behind the previous message's stores into the ring,
        // which wait for the receiver's core to give up the line (a wide load over narrow
        // stores cannot be forwarded). osu_mbw_mr 8-32 B: 1.33-1.36x in the host's slow mode.
        let h = self
            .rank_state
            .device(self.vci)?
            .isend_inline(self.id, dest, tag, sbuf, mode)?;
        Ok(scope.register(self.vci, h))
    }

    /// Starts a receive into `buf`, borrowed until the request completes (MPI_Irecv).
    // Inlined into the caller's loop, as `isend_mode` is and for the same reason: osu_mbw_mr
    // 1.20-1.22x at 8-256 B in the host's fast mode (5 interleaved rounds).
    #[inline(always)]
    pub fn irecv<'a, 's, T: Pod>(
        &self,
        scope: &'s Scope<'a, N, S, L>,
        buf: &'a mut [T],
        src: Rank,
        tag: Tag,
    ) -> Result<Request<'s, N, S, L>> {
        self.same_device(scope)?;
        // SAFETY: `buf` is mutably borrowed for `'a`, which outlives the scope; the scope
        // completes or releases the request before it returns, so no write happens after 'a.
        let rbuf = unsafe { RecvBuf::borrowed(as_bytes_mut(buf)) };
        let h = self
            .rank_state
            .device(self.vci)?
            .irecv(self.id, src, tag, rbuf)?;
        Ok(scope.register(self.vci, h))
    }

    /// Starts a send of the elements of `buf` selected by `layout`, borrowed until the request
    /// completes (MPI_Isend with a derived datatype): no packed copy is made when the transport
    /// can take the blocks as they lie.
    pub fn isend_layout<'a, 's, T: Pod>(
        &self,
        scope: &'s Scope<'a, N, S, L>,
        buf: &'a [T],
        layout: &Layout,
        dest: Rank,
        tag: Tag,
    ) -> Result<Request<'s, N, S, L>> {
        self.same_device(scope)?;
        // SAFETY: as in `isend_mode`: `buf` outlives the scope, which completes or releases
        // the request before 'a ends.
        let sbuf = unsafe { SendBuf::borrowed_with_layout(as_bytes(buf), layout.clone())? };
        let h = self.rank_state.device(self.vci)?.isend(
            self.id,
            dest,
            tag,
            sbuf,
            SendMode::Standard,
        )?;
        Ok(scope.register(self.vci, h))
    }

    /// Starts a receive into the elements of `buf` selected by `layout` (other elements are
    /// untouched), borrowed until the request completes (MPI_Irecv with a derived datatype).
    pub fn irecv_layout<'a, 's, T: Pod>(
        &self,
        scope: &'s Scope<'a, N, S, L>,
        buf: &'a mut [T],
        layout: &Layout,
        src: Rank,
        tag: Tag,
    ) -> Result<Request<'s, N, S, L>> {
        self.same_device(scope)?;
        // SAFETY: as in `irecv`: `buf` is mutably borrowed for 'a, which outlives the scope;
        // the scope completes or releases the request before it returns.
        let rbuf = unsafe { RecvBuf::borrowed_with_layout(as_bytes_mut(buf), layout.clone())? };
        let h = self
            .rank_state
            .device(self.vci)?
            .irecv(self.id, src, tag, rbuf)?;
        Ok(scope.register(self.vci, h))
    }

    /// Starts a send of `buf`, which the returned request owns until it completes and hands
    /// it back (MPI_Isend with an owned buffer). Needs no scope; see [`OwnedRequest`].
    pub fn isend_owned<T: Pod + Send>(
        &self,
        buf: Vec<T>,
        dest: Rank,
        tag: Tag,
    ) -> Result<OwnedRequest<T, N, S, L>> {
        self.isend_owned_mode(buf, dest, tag, SendMode::Standard)
    }

    /// Starts a synchronous send of an owned buffer (MPI_Issend; see
    /// [`Communicator::isend_owned`]).
    pub fn issend_owned<T: Pod + Send>(
        &self,
        buf: Vec<T>,
        dest: Rank,
        tag: Tag,
    ) -> Result<OwnedRequest<T, N, S, L>> {
        self.isend_owned_mode(buf, dest, tag, SendMode::Synchronous)
    }

    /// Starts a send of an owned buffer in the given mode.
    pub fn isend_owned_mode<T: Pod + Send>(
        &self,
        buf: Vec<T>,
        dest: Rank,
        tag: Tag,
        mode: SendMode,
    ) -> Result<OwnedRequest<T, N, S, L>> {
        let id = self.id;
        OwnedRequest::start_send(self.rank_state.clone(), self.vci, buf, |dev, sbuf| {
            dev.isend(id, dest, tag, sbuf, mode)
        })
    }

    /// Starts a receive into `buf`, which the returned request owns until it completes and
    /// hands it back (MPI_Irecv with an owned buffer). Needs no scope; see [`OwnedRequest`].
    pub fn irecv_owned<T: Pod + Send>(
        &self,
        buf: Vec<T>,
        src: Rank,
        tag: Tag,
    ) -> Result<OwnedRequest<T, N, S, L>> {
        let id = self.id;
        OwnedRequest::start_recv(self.rank_state.clone(), self.vci, buf, |dev, rbuf| {
            dev.irecv(id, src, tag, rbuf)
        })
    }

    // ------------------------------------------------------ rank translation

    /// The ranks in `other` of the processes that have ranks `ranks` here, `None` for one that
    /// is not a member of `other` (MPI_Group_translate_ranks on the two communicators' groups).
    /// [`crate::PROC_NULL`] translates to itself. A rank outside this communicator is an error.
    pub fn translate_ranks(
        &self,
        ranks: &[Rank],
        other: &Communicator<N, S, L>,
    ) -> Result<Vec<Option<Rank>>> {
        let (mine, theirs) = {
            let dev = self.rank_state.device(self.vci)?;
            (dev.comm_group(self.id)?, dev.comm_group(other.id)?)
        };
        ranks
            .iter()
            .map(|&r| {
                if r == crate::PROC_NULL {
                    return Ok(Some(crate::PROC_NULL));
                }
                let g = mine.gpid(r).ok_or_else(|| {
                    Error::new(
                        ErrorKind::Rank,
                        format!("rank {r} is not in this communicator of {}", mine.size()),
                    )
                })?;
                Ok(theirs.rank_of(g))
            })
            .collect()
    }

    /// The rank in `other` of the process that has rank `rank` here (see
    /// [`Communicator::translate_ranks`]).
    pub fn translate_rank(
        &self,
        rank: Rank,
        other: &Communicator<N, S, L>,
    ) -> Result<Option<Rank>> {
        Ok(self.translate_ranks(&[rank], other)?[0])
    }

    fn same_device(&self, scope: &Scope<'_, N, S, L>) -> Result<()> {
        if L::same(&self.rank_state, scope.rank()) {
            Ok(())
        } else {
            Err(Error::new(
                ErrorKind::Arg,
                "the scope belongs to another rank's device",
            ))
        }
    }

    // --------------------------------------------------------- collectives

    /// Waits for every member (MPI_Barrier).
    pub fn barrier(&self) -> Result<()> {
        blocking!(L, self.rank_state, self.vci, |b| ch4_core::coll::barrier(
            b, self.id
        ))
    }

    /// Copies `root`'s `buf` to every member's `buf` (MPI_Bcast).
    pub fn bcast<T: Pod>(&self, root: Rank, buf: &mut [T]) -> Result<()> {
        blocking!(L, self.rank_state, self.vci, |b| ch4_core::coll::bcast(
            b,
            self.id,
            root,
            as_bytes_mut(buf)
        ))
    }

    /// Combines every member's `send` element-wise with `op` into `recv` at `root`
    /// (MPI_Reduce). `op` must be associative and commutative; see [`crate::op`].
    pub fn reduce<T: Pod>(
        &self,
        root: Rank,
        send: &[T],
        recv: &mut [T],
        op: impl FnMut(&mut T, &T),
    ) -> Result<()> {
        let recv_bytes: &mut [u8] = if self.rank == root {
            as_bytes_mut(recv)
        } else {
            &mut []
        };
        blocking!(L, self.rank_state, self.vci, |b| ch4_core::coll::reduce(
            b,
            self.id,
            root,
            as_bytes(send),
            recv_bytes,
            elementwise(op)
        ))
    }

    /// Combines every member's `send` element-wise with `op` into every member's `recv`
    /// (MPI_Allreduce).
    pub fn allreduce<T: Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: impl FnMut(&mut T, &T),
    ) -> Result<()> {
        blocking!(L, self.rank_state, self.vci, |b| ch4_core::coll::allreduce(
            b,
            self.id,
            as_bytes(send),
            as_bytes_mut(recv),
            elementwise(op),
        ))
    }

    /// Member `r`'s `recv` gets `send` of members 0 to `r` combined element-wise with `op`, in
    /// rank order (MPI_Scan): `op(acc, other)` folds a higher rank's `other` into `acc`, so it
    /// must be associative but need not commute.
    pub fn scan<T: Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: impl FnMut(&mut T, &T),
    ) -> Result<()> {
        blocking!(L, self.rank_state, self.vci, |b| ch4_core::coll::scan(
            b,
            self.id,
            as_bytes(send),
            as_bytes_mut(recv),
            elementwise(op),
        ))
    }

    /// As [`Communicator::scan`] without the member's own `send` (MPI_Exscan): member `r > 0`
    /// gets members 0 to `r - 1` combined; member 0's `recv` is left as it was.
    pub fn exscan<T: Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: impl FnMut(&mut T, &T),
    ) -> Result<()> {
        blocking!(L, self.rank_state, self.vci, |b| ch4_core::coll::exscan(
            b,
            self.id,
            as_bytes(send),
            as_bytes_mut(recv),
            elementwise(op),
        ))
    }

    /// Collects every member's `send` at `root`, in rank order (MPI_Gather). `recv` is only
    /// used at the root and must hold `size * send.len()` elements there.
    pub fn gather<T: Pod>(&self, root: Rank, send: &[T], recv: &mut [T]) -> Result<()> {
        blocking!(L, self.rank_state, self.vci, |b| ch4_core::coll::gather(
            b,
            self.id,
            root,
            as_bytes(send),
            as_bytes_mut(recv)
        ))
    }

    /// Collects every member's `send` at every member, in rank order (MPI_Allgather).
    pub fn allgather<T: Pod>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        blocking!(L, self.rank_state, self.vci, |b| ch4_core::coll::allgather(
            b,
            self.id,
            as_bytes(send),
            as_bytes_mut(recv)
        ))
    }

    // ------------------------------------------------------- communicators

    /// A communicator with the same members and a separate message space (MPI_Comm_dup).
    pub fn dup(&self) -> Result<Communicator<N, S, L>> {
        let c = blocking!(L, self.rank_state, self.vci, |b| ch4_core::coll::new_dup(
            b, self.id
        ))?;
        self.adopt(c)
    }

    /// A duplicate bound to VCI `vci` rather than the one its context id picks (the default
    /// spreads communicators round the VCIs; a program that knows which threads will share
    /// which communicators places them itself). Every member must name the same VCI, which is
    /// checked (an [`ErrorKind::Arg`] error on every member otherwise); below [`crate::Multiple`]
    /// the rank has one VCI, and only 0 is valid.
    pub fn dup_on_vci(&self, vci: usize) -> Result<Communicator<N, S, L>> {
        let vcis = self.rank_state.vcis.len();
        if vci >= vcis {
            return Err(Error::new(
                ErrorKind::Arg,
                format!("VCI {vci} of a rank with {vcis} (CH4_NUM_VCIS)"),
            ));
        }
        let c = blocking!(L, self.rank_state, self.vci, |b| {
            ch4_core::coll::agree(b, self.id, "VCI", vci as u64)
                .and_then(|()| ch4_core::coll::new_dup(b, self.id))
        })?;
        let id = self.rank_state.device(vci)?.adopt_comm(c)?;
        Ok(Communicator::new(self.rank_state.clone(), vci, id))
    }

    /// Splits by `color`, ordered by `key` (MPI_Comm_split); [`crate::UNDEFINED`] opts out.
    pub fn split(&self, color: i32, key: i32) -> Result<Option<Communicator<N, S, L>>> {
        let c = blocking!(L, self.rank_state, self.vci, |b| ch4_core::coll::new_split(
            b, self.id, color, key
        ))?;
        c.map(|c| self.adopt(c)).transpose()
    }

    /// A communicator of the members of `group` (MPI_Comm_create); collective over `self`.
    pub fn create(&self, group: &Group) -> Result<Option<Communicator<N, S, L>>> {
        let c = blocking!(
            L,
            self.rank_state,
            self.vci,
            |b| ch4_core::coll::new_create(b, self.id, group)
        )?;
        c.map(|c| self.adopt(c)).transpose()
    }

    /// Adds a communicator just agreed on to the device.
    fn adopt(&self, c: Comm) -> Result<Communicator<N, S, L>> {
        let vci = self.rank_state.vci_of_context(c.context);
        let id = self.rank_state.device(vci)?.adopt_comm(c)?;
        Ok(Communicator::new(self.rank_state.clone(), vci, id))
    }

    /// The members (MPI_Comm_group).
    pub fn group(&self) -> Result<Group> {
        self.rank_state.device(self.vci)?.comm_group(self.id)
    }

    /// Frees the communicator (MPI_Comm_free). Clones become invalid: using one is a
    /// [`ErrorKind::Comm`] error.
    pub fn free(self) -> Result<()> {
        self.rank_state.device(self.vci)?.comm_free(self.id)
    }
}

/// A message taken by a matched probe, with its status.
pub type Probed<N, S, L> = (Message<N, S, L>, Status);

/// Lifts an element operator to the byte-level fold the device runs. Reads and writes go
/// through unaligned loads, since the device's buffers are plain bytes.
fn elementwise<T: Pod>(mut op: impl FnMut(&mut T, &T)) -> impl FnMut(&mut [u8], &[u8]) {
    move |acc: &mut [u8], other: &[u8]| {
        let size = std::mem::size_of::<T>().max(1);
        for (a, b) in acc.chunks_exact_mut(size).zip(other.chunks_exact(size)) {
            let mut x: T = bytemuck::pod_read_unaligned(a);
            let y: T = bytemuck::pod_read_unaligned(b);
            op(&mut x, &y);
            a.copy_from_slice(bytemuck::bytes_of(&x));
        }
    }
}

/// A message taken by a matched probe; receive it with [`Message::recv`], or start its
/// receive with [`Message::irecv`] (in a scope) or [`Message::irecv_owned`].
///
/// Dropped without being received, the message is discarded: its data is freed and its sender
/// released (a rendezvous sender would otherwise wait for it forever), as MPICH's ch4:ofi does
/// with `FI_CLAIM | FI_DISCARD`.
pub struct Message<N: Netmod = SelectedNetmod, S: Shm = SelectedShm, L: ThreadLevel = Single> {
    rank: L::Shared<RankState<N, S, L>>,
    /// The VCI of the communicator the message came on.
    vci: usize,
    /// `None` once received.
    msg: Option<ch4_core::Message>,
}

impl<N: Netmod, S: Shm, L: ThreadLevel> Drop for Message<N, S, L> {
    fn drop(&mut self) {
        if let Some(msg) = self.msg.take() {
            match self.rank.device(self.vci) {
                Ok(mut dev) => {
                    if let Err(e) = dev.discard_message(msg) {
                        tracing::warn!(error = %e, "discarding a probed message failed");
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "a probed message dropped while its device was busy")
                }
            }
        }
    }
}

impl<N: Netmod, S: Shm, L: ThreadLevel> Message<N, S, L> {
    /// The message itself, leaving `self` to drop without discarding it.
    fn take(&mut self) -> Result<ch4_core::Message> {
        self.msg
            .take()
            .ok_or_else(|| Error::new(ErrorKind::Request, "the message was already received"))
    }

    /// Receives the message into `buf` (MPI_Mrecv).
    pub fn recv<T: Pod>(mut self, buf: &mut [T]) -> Result<Status> {
        let rank = self.rank.clone();
        let mut dev = rank.device(self.vci)?; // first, so a busy device leaves the message to discard
        if !L::YIELDS {
            return dev.mrecv(self.take()?, as_bytes_mut(buf));
        }
        // SAFETY: `buf` is borrowed mutably for this whole call, and the request holding it is
        // waited for, or removed from the device when the wait fails, before we return.
        let rbuf = unsafe { RecvBuf::borrowed(as_bytes_mut(buf)) };
        let h = dev.imrecv(self.take()?, rbuf)?;
        drop(dev);
        Shared(&rank.vci(self.vci)).wait_or_abandon(h)
    }

    /// Starts receiving the message into `buf`, borrowed until the request completes
    /// (MPI_Imrecv).
    pub fn irecv<'a, 's, T: Pod>(
        mut self,
        scope: &'s Scope<'a, N, S, L>,
        buf: &'a mut [T],
    ) -> Result<Request<'s, N, S, L>> {
        if !L::same(&self.rank, scope.rank()) {
            return Err(Error::new(
                ErrorKind::Arg,
                "the scope belongs to another rank's device",
            ));
        }
        // SAFETY: `buf` is mutably borrowed for `'a`, which outlives the scope; the scope
        // completes or releases the request before it returns, so no write happens after 'a.
        let rbuf = unsafe { RecvBuf::borrowed(as_bytes_mut(buf)) };
        let rank = self.rank.clone();
        let mut dev = rank.device(self.vci)?;
        let h = dev.imrecv(self.take()?, rbuf)?;
        drop(dev);
        Ok(scope.register(self.vci, h))
    }

    /// Starts receiving the message into `buf`, which the request owns until it hands it back
    /// (MPI_Imrecv with an owned buffer; see [`OwnedRequest`]).
    pub fn irecv_owned<T: Pod + Send>(mut self, buf: Vec<T>) -> Result<OwnedRequest<T, N, S, L>> {
        let rank = self.rank.clone();
        let msg = self.take()?;
        OwnedRequest::start_recv(rank, self.vci, buf, |dev, rbuf| dev.imrecv(msg, rbuf))
    }
}

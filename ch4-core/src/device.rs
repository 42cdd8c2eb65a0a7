//! `Device<N, S>`: the point-to-point engine of one process.
//!
//! Each operation validates its arguments, translates the communicator rank to a process id,
//! and routes: peers on this node (and self) to the shared-memory layer `S`, the others to the
//! netmod `N`. Both are type parameters and each route's engine is an associated type, so the
//! branch a build does not need disappears after monomorphization.
//!
//! ANY_SOURCE receives: shm and an active-message netmod match in the same core queues, so the
//! receive is one posted entry. When the netmod matches natively, the receive is posted to both
//! and the two halves resolve through [`Partner`]: whoever matches first cancels the other, and a
//! failed cancel means the other side won.

use crate::buffer::{RecvBuf, SendBuf};
use crate::comm::CommId;
use crate::core::{Core, DeviceConfig};
use crate::request::{
    CancelState, Message, NativeHalf, RecvState, ReqHandle, Request, RequestKind, Route,
};
use crate::transport::{
    send_ctrl, Arm, Caps, Cx, Netmod, NoPartner, P2p, Partner, PeerState, SendOp, Shm,
};
use crate::types::{
    ContextId, Envelope, Gpid, Rank, SendMode, Status, Tag, ANY_SOURCE, ANY_TAG, PROC_NULL,
};
use crate::{Error, ErrorKind, Result};

/// The device of one process, generic over its netmod `N` and shared-memory layer `S`.
pub struct Device<N: Netmod, S: Shm> {
    pub(crate) core: Core,
    pub(crate) net: N,
    pub(crate) shm: S,
    /// Whether any process of the job is reached through the netmod. A job that fits on one
    /// node never needs it, and progress then skips polling it (a TCP netmod's poll makes an
    /// epoll system call now and then).
    net_in_use: bool,
    /// The collectives' schedules that are running (`crate::schedule`), moved on by every
    /// progress step while there are any.
    pub(crate) schedules: Vec<crate::schedule::Running>,
    /// Large byte vectors the finished schedules left, for the next ones (`crate::spares`).
    pub(crate) schedule_spares: crate::spares::Spares,
}

/// Cancels the netmod half of an ANY_SOURCE receive on behalf of the shm engine.
struct NetPartner<'a, N>(&'a mut N);

impl<N: Netmod> Partner for NetPartner<'_, N> {
    const NATIVE_HALVES: bool = <N::P2p as P2p<N>>::NATIVE_MATCHING;
    #[inline]
    fn cancel_partner(&mut self, core: &mut Core, req: ReqHandle) -> Result<bool> {
        let cx = &mut Cx {
            core,
            transport: &mut *self.0,
            route: Route::Net,
            partner: &mut NoPartner,
        };
        let cancelled = <N::P2p as P2p<N>>::cancel_recv(cx, req)?;
        if let Some(r) = cx.core.requests.get_mut(req).and_then(Request::recv_mut) {
            r.native = if cancelled {
                NativeHalf::NotPosted
            } else {
                NativeHalf::Matched
            };
        }
        Ok(cancelled)
    }
}

/// Runs `$body` with `$cx` lent to the shm engine.
macro_rules! on_shm {
    ($dev:expr, |$cx:ident| $body:expr) => {{
        let Device { core, net, shm, .. } = $dev;
        let mut partner = NetPartner(net);
        let $cx = &mut Cx {
            core,
            transport: shm,
            route: Route::Shm,
            partner: &mut partner,
        };
        $body
    }};
}

/// Runs `$body` with `$cx` lent to the netmod engine.
macro_rules! on_net {
    ($dev:expr, |$cx:ident| $body:expr) => {{
        let Device { core, net, .. } = $dev;
        let $cx = &mut Cx {
            core,
            transport: net,
            route: Route::Net,
            partner: &mut NoPartner,
        };
        $body
    }};
}

/// Calls `$method` on the engine that owns the core's queues: shm when present, else the netmod.
macro_rules! on_core_queues {
    ($dev:expr, $method:ident($($arg:expr),*)) => {{
        if S::PRESENT {
            on_shm!($dev, |cx| ShmP2p::<S>::$method(cx, $($arg),*))
        } else {
            on_net!($dev, |cx| NetP2p::<N>::$method(cx, $($arg),*))
        }
    }};
}

type ShmP2p<S> = <S as Shm>::P2p;
type NetP2p<N> = <N as Netmod>::P2p;

impl<N: Netmod, S: Shm> Device<N, S> {
    /// A device for process `gpid` of a job of `world_size` processes, over transports that are
    /// already connected (or connect on demand).
    pub fn new(net: N, shm: S, gpid: Gpid, world_size: u32, config: DeviceConfig) -> Result<Self> {
        const {
            assert!(
                !<S::P2p as P2p<S>>::NATIVE_MATCHING,
                "the shm layer must match in the core's queues"
            )
        };
        let net_in_use = !S::PRESENT || (0..world_size).any(|g| !shm.is_local(g));
        if net_in_use {
            let caps = <N::P2p as P2p<N>>::caps(&net);
            if u64::from(world_size) > caps.max_processes {
                return Err(Error::new(
                    ErrorKind::Arg,
                    format!(
                        "a job of {world_size} processes: the {} netmod addresses at most {}",
                        N::NAME,
                        caps.max_processes
                    ),
                ));
            }
        }
        // Each route keeps credit for the processes it reaches only: the shared-memory route
        // for the node's (a block of a large job), the network's for the others, none when the
        // job fits on the node.
        let local = |g: Gpid| S::PRESENT && shm.is_local(g);
        let span = |on: &dyn Fn(Gpid) -> bool| {
            let first = (0..world_size).find(|&g| on(g));
            let last = (0..world_size).rev().find(|&g| on(g));
            match (first, last) {
                (Some(a), Some(b)) => a..b + 1,
                _ => 0..0,
            }
        };
        let reach = [span(&local), span(&|g| !local(g))];
        Ok(Device {
            core: Core::with_reach(gpid, world_size, config, reach)?,
            net,
            shm,
            net_in_use,
            schedules: Vec::new(),
            schedule_spares: Default::default(),
        })
    }

    /// Whether the netmod's engine matches messages in the network (for a netmod chosen at
    /// run time, the one chosen); a constant after inlining for a netmod named at build time.
    #[inline(always)]
    fn net_native(&self) -> bool {
        NetP2p::<N>::native_matching(&self.net)
    }

    /// The largest tag a message may carry in this job (MPI_TAG_UB): the smallest that the
    /// device's engines carry, so a tag that is valid to one peer is valid to all. For a
    /// netmod named at build time it is [`Device::TAG_UB`]; for one chosen at run time, that
    /// of the one chosen.
    #[inline(always)]
    pub fn tag_ub(&self) -> Tag {
        let (a, b) = (
            NetP2p::<N>::tag_ub(&self.net),
            ShmP2p::<S>::tag_ub(&self.shm),
        );
        if a < b {
            a
        } else {
            b
        }
    }

    /// The largest tag a message may carry over any netmod this device type can run on: for
    /// a netmod named at build time, the job's limit ([`Device::tag_ub`]); for one chosen at
    /// run time, an upper bound only.
    pub const TAG_UB: Tag = {
        let (a, b) = (<N::P2p as P2p<N>>::TAG_UB, <S::P2p as P2p<S>>::TAG_UB);
        if a < b {
            a
        } else {
            b
        }
    };

    /// What the device's engines can carry together (see [`Caps`]); the netmod counts only
    /// when some peer is reached through it.
    pub fn caps(&self) -> Caps {
        let shm = if S::PRESENT {
            <S::P2p as P2p<S>>::caps(&self.shm)
        } else {
            Caps::CORE
        };
        let caps = if self.net_in_use {
            shm.meet(<N::P2p as P2p<N>>::caps(&self.net))
        } else {
            shm
        };
        Caps {
            tag_ub: self.tag_ub(),
            ..caps
        }
    }

    /// The world communicator (every process of the job).
    #[inline(always)]
    pub fn world(&self) -> CommId {
        self.core.world
    }

    /// The communicator holding only this process.
    #[inline(always)]
    pub fn self_comm(&self) -> CommId {
        self.core.self_comm
    }

    /// This process's rank in `comm`.
    pub fn rank(&self, comm: CommId) -> Result<Rank> {
        Ok(self.core.comm(comm)?.rank)
    }

    /// Number of processes in `comm`.
    pub fn size(&self, comm: CommId) -> Result<Rank> {
        Ok(self.core.comm(comm)?.size())
    }

    /// This process's id in the job.
    pub fn gpid(&self) -> Gpid {
        self.core.gpid
    }

    /// The lowest process id of the job on this process's node: the same for every process of
    /// a node and different across nodes (shared memory reaches exactly the processes of this
    /// node), which is what `MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)` colors by.
    pub fn node_leader(&self) -> Gpid {
        let me = self.core.gpid;
        if !S::PRESENT {
            return me;
        }
        (0..me).find(|&g| self.shm.is_local(g)).unwrap_or(me)
    }

    /// The netmod, for its own settings and statistics.
    pub fn netmod(&self) -> &N {
        &self.net
    }

    /// The shared-memory layer.
    pub fn shm(&self) -> &S {
        &self.shm
    }

    /// The netmod, to change its settings (and, in tests, to stall a simulated network).
    pub fn netmod_mut(&mut self) -> &mut N {
        &mut self.net
    }

    /// The shared-memory layer, to change its settings (thresholds, single-copy reads).
    pub fn shm_mut(&mut self) -> &mut S {
        &mut self.shm
    }

    /// Requests currently alive in the pool (for leak checks and statistics).
    pub fn live_requests(&self) -> usize {
        self.core.requests.len()
    }

    /// The settings this device runs with, as (environment variable, value in force): its own
    /// (eager credit) and its transports.
    pub fn settings(&self) -> Vec<(&'static str, String)> {
        let mut v = vec![
            ("CH4_EAGER_CREDIT", self.core.am[0].credit_init.to_string()),
            (
                "CH4_EAGER_CREDIT_TOTAL",
                self.core.config.eager_credit_total.to_string(),
            ),
        ];
        v.extend(self.shm.settings());
        v.extend(self.net.settings());
        v
    }

    /// Whether any request is live: posted and not completed, or completed and not yet waited
    /// for (a constant-time look, for a progress thread deciding whether to keep polling).
    #[inline]
    pub fn has_requests(&self) -> bool {
        !self.core.requests.is_empty()
    }

    /// Requests that have not completed yet (live ones minus those completed but not yet
    /// waited for): what must be finished before the process may leave.
    pub fn pending_requests(&self) -> usize {
        self.core
            .requests
            .iter()
            .filter(|(_, r)| !r.complete)
            .count()
    }

    /// Messages waiting in the core's unexpected queue.
    pub fn unexpected_len(&self) -> usize {
        self.core.unexpected.len()
    }

    #[inline(always)]
    fn route_of(&self, gpid: Gpid) -> Route {
        if S::PRESENT && self.shm.is_local(gpid) {
            Route::Shm
        } else {
            Route::Net
        }
    }

    // ---------------------------------------------------------------- sends

    /// Checks a send's arguments; `None` for PROC_NULL.
    #[inline(always)]
    fn send_target(
        &self,
        comm: CommId,
        dest: Rank,
        tag: Tag,
        coll: bool,
    ) -> Result<Option<(Gpid, Envelope)>> {
        let c = self.core.comm(comm)?;
        let tag_ub = self.tag_ub();
        if !(0..=tag_ub).contains(&tag) {
            return Err(bad_tag(tag, tag_ub, false));
        }
        if dest == PROC_NULL {
            return Ok(None);
        }
        let gpid = c.gpid(dest)?;
        // The receivers' context: the communicator's own, or an intercommunicator's remote
        // group's (a field read, no branch).
        let context = c.send_context + coll as ContextId;
        Ok(Some((
            gpid,
            Envelope {
                context,
                source: c.rank,
                tag,
            },
        )))
    }

    /// Starts a send on its route. Unlike a receive, which may match a waiting message and owe
    /// its sender a reply, starting a send never queues a reply, so nothing is flushed here
    /// (anything queued would still leave at the next progress).
    #[inline(always)]
    fn start_send(&mut self, op: SendOp) -> Result<ReqHandle> {
        if self.route_of(op.dest) == Route::Shm {
            on_shm!(self, |cx| ShmP2p::<S>::isend(cx, op))
        } else {
            on_net!(self, |cx| NetP2p::<N>::isend(cx, op))
        }
    }

    /// Blocking send of contiguous bytes. Completes without creating a request when the
    /// message can leave at once (small standard sends).
    #[inline]
    pub fn send(
        &mut self,
        comm: CommId,
        dest: Rank,
        tag: Tag,
        data: &[u8],
        mode: SendMode,
    ) -> Result<()> {
        self.send_on(comm, dest, tag, data, mode, false)
    }

    #[inline(always)]
    pub(crate) fn send_on(
        &mut self,
        comm: CommId,
        dest: Rank,
        tag: Tag,
        data: &[u8],
        mode: SendMode,
        coll: bool,
    ) -> Result<()> {
        let Some((gpid, env)) = self.send_target(comm, dest, tag, coll)? else {
            return Ok(());
        };
        #[allow(unsafe_code)]
        // SAFETY: `data` is borrowed for this whole call. If the engine keeps the buffer in a
        // request, we wait for that request below, or remove it on failure, before returning.
        let buf = unsafe { SendBuf::borrowed(data) };
        if !self.send_ready(gpid, data.len()) {
            self.wait_for_send_room(gpid, data.len())?;
        }
        let op = SendOp {
            dest: gpid,
            env,
            buf,
            mode,
        };
        match self.start_send(op)? {
            ReqHandle::DONE => Ok(()),
            h => self.wait_or_abandon(h).map(drop),
        }
    }

    /// Whether the engine of `dest`'s route lets a blocking send of `total` bytes start now
    /// ([`P2p::send_ready`]).
    #[inline(always)]
    fn send_ready(&mut self, dest: Gpid, total: usize) -> bool {
        if self.route_of(dest) == Route::Shm {
            on_shm!(self, |cx| ShmP2p::<S>::send_ready(cx, dest, total))
        } else {
            on_net!(self, |cx| NetP2p::<N>::send_ready(cx, dest, total))
        }
    }

    /// One idle poll's pause in a waiting loop (`idle` counts the idle polls in a row):
    /// [`backoff`], except that on the polls [`set_cpu_mate_check`] names, if the on-node peer
    /// waited for (`peer`, or for `None` the one last heard from) last ran on this CPU, it
    /// gives way: that peer cannot run until this rank stops. It moves to another CPU
    /// ([`Shm::move_off_cpu`]), or, if it moved too lately to move again, yields.
    #[inline(always)]
    pub fn pause(&mut self, idle: u32, peer: Option<Gpid>) {
        let every = CPU_MATE_CHECK.load(std::sync::atomic::Ordering::Relaxed);
        if S::PRESENT && every != 0 && idle % every == 0 && self.shm.peer_shares_cpu(peer) {
            if !self.shm.move_off_cpu() {
                std::thread::yield_now();
            }
        } else {
            backoff(idle);
        }
    }

    /// Makes progress until a blocking send of `total` bytes to `dest` may start (flow
    /// control: the receiver has given back enough credit); fails if `dest` is gone.
    #[cold]
    #[inline(never)]
    fn wait_for_send_room(&mut self, dest: Gpid, total: usize) -> Result<()> {
        let mut idle = 0u32;
        while !self.send_ready(dest, total) {
            if self.progress()? == 0 {
                idle += 1;
                if idle % 256 == 0 && self.peer_state(dest) != PeerState::Alive {
                    return Err(Error::new(
                        ErrorKind::PeerFailed,
                        format!("process {dest} is gone: a send to it can never be received"),
                    ));
                }
                self.pause(idle, Some(dest));
            } else {
                idle = 0;
            }
        }
        Ok(())
    }

    /// Starts a nonblocking send of `buf`, which stays lent to the request until it completes.
    pub fn isend(
        &mut self,
        comm: CommId,
        dest: Rank,
        tag: Tag,
        buf: SendBuf,
        mode: SendMode,
    ) -> Result<ReqHandle> {
        self.isend_on(comm, dest, tag, buf, mode, false)
    }

    /// [`Device::isend`] inlined into its caller whatever the caller's size. For an entry point
    /// whose whole job is this call, like the C ABI's `MPI_Isend`: there a call boundary costs
    /// moving the buffer and the arguments through the stack on every message. Rust code calls
    /// `isend`, which the compiler inlines where that pays. (The two lines are `isend_on`'s:
    /// sharing them through an always-inlined function costs the Rust path 4 instructions in
    /// `scripts/inlining-proof.sh`.)
    #[inline(always)]
    pub fn isend_inline(
        &mut self,
        comm: CommId,
        dest: Rank,
        tag: Tag,
        buf: SendBuf,
        mode: SendMode,
    ) -> Result<ReqHandle> {
        let Some((dest, env)) = self.send_target(comm, dest, tag, false)? else {
            return Ok(ReqHandle::DONE);
        };
        self.start_send(SendOp {
            dest,
            env,
            buf,
            mode,
        })
    }

    /// A send of a collective's schedule (`crate::schedule`), out of line and not through
    /// `isend_on`: with the schedules among its callers the compiler stopped inlining
    /// `isend_on` into the public `isend` (`scripts/inlining-proof.sh`: the public isend
    /// 182 -> 226 instructions).
    #[inline(never)]
    pub(crate) fn isend_scheduled(
        &mut self,
        comm: CommId,
        dest: Rank,
        tag: Tag,
        buf: SendBuf,
    ) -> Result<ReqHandle> {
        let Some((dest, env)) = self.send_target(comm, dest, tag, true)? else {
            return Ok(ReqHandle::DONE);
        };
        self.start_send(SendOp {
            dest,
            env,
            buf,
            mode: SendMode::Standard,
        })
    }

    /// A receive of a collective's schedule, out of line for the reason of
    /// [`Device::isend_scheduled`].
    #[inline(never)]
    pub(crate) fn irecv_scheduled(
        &mut self,
        comm: CommId,
        src: Rank,
        tag: Tag,
        buf: RecvBuf,
    ) -> Result<ReqHandle> {
        self.irecv_body(comm, src, tag, buf, true)
    }

    pub(crate) fn isend_on(
        &mut self,
        comm: CommId,
        dest: Rank,
        tag: Tag,
        buf: SendBuf,
        mode: SendMode,
        coll: bool,
    ) -> Result<ReqHandle> {
        let Some((gpid, env)) = self.send_target(comm, dest, tag, coll)? else {
            return Ok(ReqHandle::DONE);
        };
        let op = SendOp {
            dest: gpid,
            env,
            buf,
            mode,
        };
        // No request when the send finished at once: the handle says so by itself.
        self.start_send(op)
    }

    // ------------------------------------------------------------- receives

    /// Checks a receive's arguments: the envelope to match and, for a specific source, its
    /// process id. `None` for PROC_NULL.
    #[inline(always)]
    fn recv_target(
        &self,
        comm: CommId,
        src: Rank,
        tag: Tag,
        coll: bool,
    ) -> Result<Option<(Envelope, Option<Gpid>)>> {
        let c = self.core.comm(comm)?;
        let tag_ub = self.tag_ub();
        if tag != ANY_TAG && !(0..=tag_ub).contains(&tag) {
            return Err(bad_tag(tag, tag_ub, true));
        }
        if src == PROC_NULL {
            return Ok(None);
        }
        let gpid = if src == ANY_SOURCE {
            None
        } else {
            Some(c.gpid(src)?)
        };
        let context = if coll { c.coll_context() } else { c.context };
        Ok(Some((
            Envelope {
                context,
                source: src,
                tag,
            },
            gpid,
        )))
    }

    /// Starts a nonblocking receive into `buf`, which stays lent to the request until it
    /// completes. `src` may be [`ANY_SOURCE`], `tag` may be [`ANY_TAG`].
    pub fn irecv(&mut self, comm: CommId, src: Rank, tag: Tag, buf: RecvBuf) -> Result<ReqHandle> {
        self.irecv_on(comm, src, tag, buf, false)
    }

    /// [`Device::irecv`] inlined into its caller whatever the caller's size (see
    /// [`Device::isend_inline`]).
    #[inline(always)]
    pub fn irecv_inline(
        &mut self,
        comm: CommId,
        src: Rank,
        tag: Tag,
        buf: RecvBuf,
    ) -> Result<ReqHandle> {
        self.irecv_body(comm, src, tag, buf, false)
    }

    pub(crate) fn irecv_on(
        &mut self,
        comm: CommId,
        src: Rank,
        tag: Tag,
        buf: RecvBuf,
        coll: bool,
    ) -> Result<ReqHandle> {
        self.irecv_body(comm, src, tag, buf, coll)
    }

    #[inline(always)]
    fn irecv_body(
        &mut self,
        comm: CommId,
        src: Rank,
        tag: Tag,
        buf: RecvBuf,
        coll: bool,
    ) -> Result<ReqHandle> {
        let Some((want, gpid)) = self.recv_target(comm, src, tag, coll)? else {
            return self
                .core
                .requests
                .insert(Request::completed(proc_null_status()));
        };
        let h = self.core.requests.insert(Request {
            complete: false,
            status: Status::EMPTY,
            kind: RequestKind::Recv(RecvState::new(want, buf)),
        })?;
        let started = self.start_recv(h, gpid, &want);
        if let Err(e) = started {
            self.abandon(h);
            return Err(e);
        }
        self.flush_replies()?;
        Ok(h)
    }

    #[inline(always)]
    fn start_recv(&mut self, h: ReqHandle, gpid: Option<Gpid>, want: &Envelope) -> Result<()> {
        match gpid {
            Some(g) if self.route_of(g) == Route::Shm => {
                on_shm!(self, |cx| ShmP2p::<S>::irecv(cx, h, want, gpid))
            }
            Some(_) => {
                if self.net_native() {
                    self.post_native(h, false, want, gpid)
                } else {
                    on_net!(self, |cx| NetP2p::<N>::irecv(cx, h, want, gpid))
                }
            }
            None => {
                // ANY_SOURCE: the core's queues first (shm, and the netmod when it is AM-only)...
                on_core_queues!(self, irecv(h, want, None))?;
                // ...then, for a natively matching netmod, its partner half in the network —
                // only while the core's half is still unmatched (a matched rendezvous is not
                // complete yet, but it is taken).
                if S::PRESENT && self.net_native() && self.net_in_use && self.still_posted(h) {
                    self.post_native(h, true, want, None)?;
                }
                Ok(())
            }
        }
    }

    /// Posts receive `h` to the natively matching netmod, its state [`NativeHalf::Posted`]
    /// before the engine sees it (the engine may match at once and move it on).
    fn post_native(
        &mut self,
        h: ReqHandle,
        partnered: bool,
        want: &Envelope,
        from: Option<Gpid>,
    ) -> Result<()> {
        if let Some(r) = self.core.requests.get_mut(h).and_then(Request::recv_mut) {
            r.native = NativeHalf::Posted { partnered };
        }
        let posted = on_net!(self, |cx| NetP2p::<N>::irecv(cx, h, want, from));
        if posted.is_err() {
            if let Some(r) = self.core.requests.get_mut(h).and_then(Request::recv_mut) {
                r.native = NativeHalf::NotPosted;
            }
        }
        posted
    }

    /// Whether receive `h` still waits unmatched in the core's posted queue.
    #[inline(always)]
    fn still_posted(&mut self, h: ReqHandle) -> bool {
        self.core
            .requests
            .get_mut(h)
            .and_then(Request::recv_mut)
            .is_some_and(|r| r.posted.is_some())
    }

    /// Blocking receive into contiguous bytes.
    #[inline]
    pub fn recv(&mut self, comm: CommId, src: Rank, tag: Tag, buf: &mut [u8]) -> Result<Status> {
        self.recv_on(comm, src, tag, buf, false)
    }

    #[inline(always)]
    pub(crate) fn recv_on(
        &mut self,
        comm: CommId,
        src: Rank,
        tag: Tag,
        buf: &mut [u8],
        coll: bool,
    ) -> Result<Status> {
        if S::PRESENT {
            if let Some((want, Some(g))) = self.recv_target(comm, src, tag, coll)? {
                if self.route_of(g) == Route::Shm {
                    if let Some(st) = self.recv_direct(&want, g, buf, &mut 0, |_| false)? {
                        return status_result(st);
                    }
                }
            }
        }
        #[allow(unsafe_code)]
        // SAFETY: `buf` is borrowed mutably for this whole call; we wait for the request, or
        // abandon it on failure (which drops every reference to the buffer), before returning.
        let rbuf = unsafe { RecvBuf::borrowed(buf) };
        let h = self.irecv_on(comm, src, tag, rbuf, coll)?;
        self.wait_or_abandon(h)
    }

    /// The direct path of a blocking receive ([`Device::recv`]'s, without a request), for a
    /// caller that holds the device behind a lock: it watches for the message until
    /// `stop(idle polls)` says to let go (another thread wants the device). `Ok(None)` when the
    /// message did not come by then or the receive cannot go this way (not an on-node peer, a
    /// wildcard source, a receive already posted): nothing is consumed then, and the caller
    /// posts the receive the ordinary way, or calls again. `idle` counts the idle polls of the
    /// whole wait across such calls (the failed-peer check and the back-off go by it). A
    /// status with an error is returned as a value.
    #[allow(clippy::too_many_arguments)]
    pub fn recv_direct_until(
        &mut self,
        comm: CommId,
        src: Rank,
        tag: Tag,
        buf: &mut [u8],
        coll: bool,
        idle: &mut u32,
        stop: impl FnMut(u32) -> bool,
    ) -> Result<Option<Status>> {
        if !S::PRESENT {
            return Ok(None);
        }
        match self.recv_target(comm, src, tag, coll)? {
            Some((want, Some(g))) if self.route_of(g) == Route::Shm => {
                self.recv_direct(&want, g, buf, idle, stop)
            }
            _ => Ok(None),
        }
    }

    /// A blocking receive from an on-node peer without a request: the shm engine watches for
    /// the message and copies it straight into `buf`. `None` when the engine says the ordinary
    /// path is needed (nothing has been consumed then). `idle_polls` counts the wait's idle
    /// polls, on entry and on return.
    #[inline(always)]
    fn recv_direct(
        &mut self,
        want: &Envelope,
        peer: Gpid,
        buf: &mut [u8],
        idle_polls: &mut u32,
        mut stop: impl FnMut(u32) -> bool,
    ) -> Result<Option<Status>> {
        use crate::transport::Direct;
        let mut idle = *idle_polls;
        loop {
            match on_shm!(self, |cx| ShmP2p::<S>::recv_direct(cx, want, buf))? {
                Direct::Done(st) => {
                    self.flush_replies()?;
                    return Ok(Some(st));
                }
                Direct::Fallback => {
                    self.flush_replies()?;
                    return Ok(None);
                }
                Direct::Pending => {}
            }
            // The netmod keeps moving while we wait.
            let n = if self.net_in_use {
                on_net!(self, |cx| NetP2p::<N>::progress(cx))?
            } else {
                0
            };
            self.flush_replies()?;
            if n == 0 {
                idle += 1;
                if stop(idle) {
                    // Nothing is consumed between two steps: the ordinary path takes over.
                    *idle_polls = idle;
                    return Ok(None);
                }
                if idle % 256 == 0 && self.shm.peer_failed(peer) {
                    // The ordinary path drains what the peer sent before it failed the
                    // receive.
                    return Ok(None);
                }
                self.pause(idle, Some(peer));
                if idle <= TIGHT_SPIN.load(std::sync::atomic::Ordering::Relaxed) {
                    self.shm.watch_for_arrival(peer, WATCH_LOADS);
                }
            } else {
                idle = 0;
            }
        }
    }

    // ------------------------------------------------------------ completion

    /// Drives progress until `h` completes, frees it, and returns its status. A status that
    /// carries an error (truncation, ready-send without receive, peer failure) is returned as
    /// that error; use [`Device::wait_status`] to see such statuses as values.
    #[inline(always)]
    pub fn wait(&mut self, h: ReqHandle) -> Result<Status> {
        // The completed-at-once case without entering the progress loop.
        if let Some(st) = self.take_if_complete(h)? {
            return status_result(st);
        }
        status_result(self.wait_pending(h)?)
    }

    /// Like [`Device::wait`], but an error status is returned as `Ok(status)` with
    /// `status.error` set; `Err` only for a bad handle or a failing device. Always inlined, as
    /// [`Device::wait`] is: its completed-at-once check is a few instructions and its loop is
    /// out of line; a call here put a call more into the C library's `MPI_Wait`.
    #[inline(always)]
    pub fn wait_status(&mut self, h: ReqHandle) -> Result<Status> {
        if let Some(st) = self.take_if_complete(h)? {
            return Ok(st);
        }
        self.wait_pending(h)
    }

    /// The progress loop of a wait whose request was found pending. Never inlined: the loop is
    /// large, and inlined into [`Device::wait`] it made every wait — most of which find their
    /// request complete, like the receives of a window after the first — save and restore all
    /// the registers the loop uses (about 60 of the 85 instructions a completed wait cost).
    #[inline(never)]
    fn wait_pending(&mut self, h: ReqHandle) -> Result<Status> {
        let mut idle = 0u32;
        loop {
            if self.progress()? == 0 {
                idle += 1;
                if idle % 256 == 0 {
                    self.fail_if_peer_gone(h);
                }
                self.pause(idle, None);
            } else {
                idle = 0;
            }
            if let Some(st) = self.take_if_complete(h)? {
                return Ok(st);
            }
        }
    }

    /// Waits for `h`; if that fails, removes the request so nothing refers to its buffer.
    pub(crate) fn wait_or_abandon(&mut self, h: ReqHandle) -> Result<Status> {
        match self.wait(h) {
            Ok(st) => Ok(st),
            Err(e) => {
                self.abandon(h);
                Err(e)
            }
        }
    }

    /// One progress step, then whether `h` has completed: `Some(status)` frees it.
    pub fn test(&mut self, h: ReqHandle) -> Result<Option<Status>> {
        if let Some(st) = self.take_if_complete(h)? {
            return status_result(st).map(Some);
        }
        self.progress_or_check_peer(h)?;
        match self.take_if_complete(h)? {
            Some(st) => status_result(st).map(Some),
            None => Ok(None),
        }
    }

    /// Like [`Device::test`] but returns error statuses as values.
    pub fn test_status(&mut self, h: ReqHandle) -> Result<Option<Status>> {
        if let Some(st) = self.take_if_complete(h)? {
            return Ok(Some(st));
        }
        self.progress_or_check_peer(h)?;
        self.take_if_complete(h)
    }

    /// One progress step; only when it found nothing to do may `h` be failed for a dead peer —
    /// a peer's last messages can still be in flight after it died.
    fn progress_or_check_peer(&mut self, h: ReqHandle) -> Result<()> {
        if self.progress()? == 0 {
            self.fail_if_peer_gone(h);
        }
        Ok(())
    }

    /// Whether `h` has completed, without freeing it or making progress.
    pub fn is_done(&self, h: ReqHandle) -> Result<bool> {
        if h == ReqHandle::DONE {
            return Ok(true);
        }
        match self.core.requests.get(h) {
            Some(r) => Ok(r.complete),
            None => Err(stale_request()),
        }
    }

    /// The status of `h` if it has completed, without freeing it (MPI_Request_get_status);
    /// `None` while it is pending or for a handle that is no request.
    pub fn peek_status(&self, h: ReqHandle) -> Option<Status> {
        if h == ReqHandle::DONE {
            return Some(Status::EMPTY);
        }
        self.core
            .requests
            .get(h)
            .filter(|r| r.complete)
            .map(|r| r.status)
    }

    /// If `h` has completed, frees it and returns its status — an error status as a value, in
    /// `status.error` — without making progress; `None` while it is pending. The request sets
    /// of the facade complete their members with it.
    #[inline]
    pub fn take_completed(&mut self, h: ReqHandle) -> Result<Option<Status>> {
        self.take_if_complete(h)
    }

    #[inline(always)]
    fn take_if_complete(&mut self, h: ReqHandle) -> Result<Option<Status>> {
        if h == ReqHandle::DONE {
            return Ok(Some(Status::EMPTY));
        }
        self.core
            .requests
            .take_if(h, |r| r.complete, |r| r.status)
            .map_err(|()| stale_request())
    }

    /// Fails `h` with [`ErrorKind::PeerFailed`] if it can no longer complete because a peer
    /// is gone: a send whose receiver left or failed, a receive whose one source did, or an
    /// ANY_SOURCE receive on a communicator one of whose members failed (ULFM's rule:
    /// the message it waits for may have been the failed process's; a member that left in
    /// order is no reason). Returns whether it failed the request. Call it only after progress
    /// found nothing to do: a peer's last messages may still be on their way when it is gone.
    pub fn fail_if_peer_gone(&mut self, h: ReqHandle) -> bool {
        let Some(req) = self.core.requests.get(h) else {
            return false;
        };
        if req.complete {
            return false;
        }
        let (failed, source) = match &req.kind {
            RequestKind::Send(s) => (self.peer_state(s.dest) != PeerState::Alive, PROC_NULL),
            RequestKind::Recv(r) => {
                let Some(comm) = self
                    .core
                    .comms
                    .iter()
                    .find(|(_, c)| c.context == r.want.context & !1)
                    .map(|(_, c)| c)
                else {
                    return false;
                };
                if r.want.source == ANY_SOURCE {
                    let me = self.core.gpid;
                    let group = comm.peers().clone();
                    let failed = (0..group.size() as Rank)
                        .filter_map(|rank| group.gpid(rank).map(|g| (rank, g)))
                        .find(|&(_, g)| g != me && self.peer_state(g) == PeerState::Failed);
                    match failed {
                        Some((rank, _)) => (true, rank),
                        None => (false, PROC_NULL),
                    }
                } else {
                    match comm.peers().gpid(r.want.source) {
                        Some(g) => (self.peer_state(g) != PeerState::Alive, r.want.source),
                        None => (false, PROC_NULL),
                    }
                }
            }
            RequestKind::Done => (false, PROC_NULL),
            RequestKind::Schedule => return self.fail_schedule_if_peer_gone(h),
        };
        if !failed {
            return false;
        }
        // The peer is gone, and what it sent before it went is visible now (its going was
        // published after its last message): take that in before deciding. A caller's poll
        // that found nothing may have run just before the peer's last message arrived and its
        // departure (seen under thread-mode oversubscription: a barrier failed although its
        // message was in the mailbox).
        if self.drains_to_completion(h) {
            return false;
        }
        let Some(req) = self.core.requests.get(h) else {
            return false;
        };
        let is_recv = matches!(req.kind, RequestKind::Recv(_));
        tracing::warn!(source, "failing a request: a peer process is gone");
        if is_recv {
            let _ = self.cancel_recv_halves(h);
        }
        if self.net_native() && self.net_holds(h) {
            // Completing the request hands its buffer back to the program: the network must
            // have let go of it first (see `P2p::quiesce`).
            if let Err(e) = on_net!(self, |cx| NetP2p::<N>::quiesce(cx, h)) {
                tracing::error!(error = %e, "the netmod did not let go of a failed request");
            }
        }
        if let Some(r) = self.core.requests.get_mut(h) {
            r.status.error = Some(ErrorKind::PeerFailed);
            r.status.source = source;
            r.complete = true;
        }
        true
    }

    /// Runs progress until request `h` completes, at most [`DRAIN_POLLS`] times: whether it
    /// did. Several polls, not one: a natively matching netmod may report a receive it has
    /// already matched only at a later poll (its completion queue). Cold and out of line; even
    /// so the compiler now inlines less of `progress` into `wait` (inlining proof pair 1,041 ->
    /// 1,062; 1,068 without `cold`, 1,091-1,094 with other arrangements tried).
    #[cold]
    #[inline(never)]
    fn drains_to_completion(&mut self, h: ReqHandle) -> bool {
        for _ in 0..DRAIN_POLLS {
            let _ = self.progress();
            if self.core.requests.get(h).map_or(true, |r| r.complete) {
                return true;
            }
        }
        false
    }

    /// Whether process `gpid` is alive, left or failed, asked of the transport that reaches it.
    fn peer_state(&self, gpid: Gpid) -> PeerState {
        if self.route_of(gpid) == Route::Shm {
            self.shm.peer_state(gpid)
        } else {
            self.net.peer_state(gpid)
        }
    }

    /// Removes a request that will not be waited for: unposts a receive everywhere, so no
    /// transport writes its buffer later, and drops the request. A send's data stops streaming.
    pub fn release(&mut self, h: ReqHandle) {
        self.abandon(h)
    }

    fn abandon(&mut self, h: ReqHandle) {
        let _ = self.cancel_recv_halves(h);
        if self.net_native() && self.net_holds(h) {
            // The network may still read or write the request's buffer: make it let go first
            // (see `P2p::quiesce`). If it cannot, the engine has shut its endpoint down.
            if let Err(e) = on_net!(self, |cx| NetP2p::<N>::quiesce(cx, h)) {
                tracing::error!(error = %e, "the netmod did not let go of a request's buffer");
            }
        }
        self.core.requests.remove(h);
    }

    /// Whether the natively matching netmod may still hold request `h`'s buffer.
    fn net_holds(&self, h: ReqHandle) -> bool {
        match self.core.requests.get(h).map(|r| (r.complete, &r.kind)) {
            Some((_, RequestKind::Recv(r))) => r.native.holds_buffer(),
            Some((false, RequestKind::Send(s))) => s.route == Route::Net,
            _ => false,
        }
    }

    // -------------------------------------------------------------- cancel

    /// Asks to cancel `h` (MPI_Cancel). The request still has to be waited for or tested; its
    /// status says whether the cancel took effect.
    pub fn cancel(&mut self, h: ReqHandle) -> Result<()> {
        if h == ReqHandle::DONE {
            return Ok(()); // complete: too late to cancel, as MPI allows
        }
        let req = self.core.requests.get_mut(h).ok_or_else(stale_request)?;
        if req.complete {
            return Ok(());
        }
        match &mut req.kind {
            RequestKind::Recv(_) => {
                if self.cancel_recv_halves(h)? {
                    self.core.complete_recv(
                        h,
                        Status {
                            cancelled: true,
                            ..Status::EMPTY
                        },
                    );
                }
                Ok(())
            }
            RequestKind::Send(s) => {
                if s.cancel != CancelState::None {
                    return Ok(());
                }
                let route = s.route;
                let r = if route == Route::Shm {
                    on_shm!(self, |cx| ShmP2p::<S>::cancel_send(cx, h))
                } else {
                    on_net!(self, |cx| NetP2p::<N>::cancel_send(cx, h))
                };
                self.flush_replies()?;
                r
            }
            // A collective cannot be cancelled (MPI 4.1, section 3.8.4); its request
            // completes as the collective does.
            RequestKind::Done | RequestKind::Schedule => Ok(()),
        }
    }

    /// Unposts a receive from the core's queue and from the netmod; true when no transport
    /// can match it any more and it had not matched.
    fn cancel_recv_halves(&mut self, h: ReqHandle) -> Result<bool> {
        let Some(r) = self.core.requests.get_mut(h).and_then(Request::recv_mut) else {
            return Ok(false);
        };
        let posted = r.posted.take();
        let native = matches!(r.native, NativeHalf::Posted { .. });
        let mut unmatched = false;
        if let Some(id) = posted {
            unmatched = self.core.posted.remove(id).is_some();
        }
        if native {
            let cancelled = on_net!(self, |cx| NetP2p::<N>::cancel_recv(cx, h))?;
            if let Some(r) = self.core.requests.get_mut(h).and_then(Request::recv_mut) {
                r.native = if cancelled {
                    NativeHalf::NotPosted
                } else {
                    NativeHalf::Matched
                };
            }
            // Posted in both: cancelled only if both halves were still unmatched.
            unmatched = if posted.is_some() {
                unmatched && cancelled
            } else {
                cancelled
            };
        }
        Ok(unmatched)
    }

    // -------------------------------------------------------------- probes

    /// Whether a message matching (`src`, `tag`) has arrived, without receiving it.
    pub fn iprobe(&mut self, comm: CommId, src: Rank, tag: Tag) -> Result<Option<Status>> {
        self.progress()?;
        self.iprobe_no_progress(comm, src, tag)
    }

    fn iprobe_no_progress(&mut self, comm: CommId, src: Rank, tag: Tag) -> Result<Option<Status>> {
        let Some((want, gpid)) = self.recv_target(comm, src, tag, false)? else {
            return Ok(Some(proc_null_status()));
        };
        match gpid {
            Some(g) if self.route_of(g) == Route::Shm => {
                on_shm!(self, |cx| ShmP2p::<S>::iprobe(cx, &want, gpid))
            }
            Some(_) => on_net!(self, |cx| NetP2p::<N>::iprobe(cx, &want, gpid)),
            None => {
                let found = on_core_queues!(self, iprobe(&want, None))?;
                if found.is_none() && S::PRESENT && self.net_native() && self.net_in_use {
                    return on_net!(self, |cx| NetP2p::<N>::iprobe(cx, &want, None));
                }
                Ok(found)
            }
        }
    }

    /// Blocks until a message matching (`src`, `tag`) has arrived; returns its status.
    pub fn probe(&mut self, comm: CommId, src: Rank, tag: Tag) -> Result<Status> {
        let mut idle = 0;
        loop {
            if let Some(st) = self.iprobe_no_progress(comm, src, tag)? {
                return Ok(st);
            }
            idle = if self.progress()? == 0 { idle + 1 } else { 0 };
            self.pause(idle, None);
        }
    }

    /// Matched probe (MPI_Improbe): takes a matching message out of matching so that only
    /// [`Device::imrecv`] with the returned [`Message`] can receive it.
    pub fn improbe(
        &mut self,
        comm: CommId,
        src: Rank,
        tag: Tag,
    ) -> Result<Option<(Message, Status)>> {
        self.progress()?;
        self.improbe_no_progress(comm, src, tag)
    }

    fn improbe_no_progress(
        &mut self,
        comm: CommId,
        src: Rank,
        tag: Tag,
    ) -> Result<Option<(Message, Status)>> {
        let Some((want, gpid)) = self.recv_target(comm, src, tag, false)? else {
            return Ok(Some((Message::NoProc, proc_null_status())));
        };
        match gpid {
            Some(g) if self.route_of(g) == Route::Shm => {
                on_shm!(self, |cx| ShmP2p::<S>::improbe(cx, &want, gpid))
            }
            Some(_) => on_net!(self, |cx| NetP2p::<N>::improbe(cx, &want, gpid)),
            None => {
                let found = on_core_queues!(self, improbe(&want, None))?;
                if found.is_none() && S::PRESENT && self.net_native() && self.net_in_use {
                    return on_net!(self, |cx| NetP2p::<N>::improbe(cx, &want, None));
                }
                Ok(found)
            }
        }
    }

    /// Blocking matched probe (MPI_Mprobe).
    pub fn mprobe(&mut self, comm: CommId, src: Rank, tag: Tag) -> Result<(Message, Status)> {
        let mut idle = 0;
        loop {
            if let Some(found) = self.improbe_no_progress(comm, src, tag)? {
                return Ok(found);
            }
            idle = if self.progress()? == 0 { idle + 1 } else { 0 };
            self.pause(idle, None);
        }
    }

    /// Drops a message taken by a matched probe without receiving it: its engine discards it
    /// (releasing a rendezvous sender, acknowledging a synchronous one) instead of leaking it.
    pub fn discard_message(&mut self, msg: Message) -> Result<()> {
        let r = match msg {
            Message::Native { .. } => on_net!(self, |cx| NetP2p::<N>::discard(cx, msg)),
            Message::Am { .. } => on_core_queues!(self, discard(msg)),
            Message::NoProc => return Ok(()),
        };
        self.flush_replies()?;
        r
    }

    /// Receives a message taken by a matched probe into `buf` (MPI_Imrecv).
    pub fn imrecv(&mut self, msg: Message, buf: RecvBuf) -> Result<ReqHandle> {
        let want = match &msg {
            Message::Am { env, .. } | Message::Native { env, .. } => *env,
            Message::NoProc => {
                return self
                    .core
                    .requests
                    .insert(Request::completed(proc_null_status()))
            }
        };
        let mut state = RecvState::new(want, buf);
        if let Message::Native { src, .. } = msg {
            // Matched already: the network holds the message, and will write the buffer.
            state.native = NativeHalf::Matched;
            state.source_process = src;
        }
        let h = self.core.requests.insert(Request {
            complete: false,
            status: Status::EMPTY,
            kind: RequestKind::Recv(state),
        })?;
        let r = match msg {
            Message::Native { .. } => on_net!(self, |cx| NetP2p::<N>::imrecv(cx, msg, h)),
            _ => on_core_queues!(self, imrecv(msg, h)),
        };
        if let Err(e) = r {
            self.core.requests.remove(h);
            return Err(e);
        }
        self.flush_replies()?;
        Ok(h)
    }

    /// Blocking receive of a matched-probe message into contiguous bytes (MPI_Mrecv).
    pub fn mrecv(&mut self, msg: Message, buf: &mut [u8]) -> Result<Status> {
        #[allow(unsafe_code)]
        // SAFETY: `buf` is borrowed for this whole call; we wait for the request or abandon it
        // before returning.
        let rbuf = unsafe { RecvBuf::borrowed(buf) };
        let h = self.imrecv(msg, rbuf)?;
        self.wait_or_abandon(h)
    }

    // ------------------------------------------------------------ progress

    /// Makes bounded progress on shared memory and the netmod; returns how many events were
    /// handled (0 when idle).
    #[inline]
    pub fn progress(&mut self) -> Result<usize> {
        let mut n = 0;
        if S::PRESENT {
            n += on_shm!(self, |cx| ShmP2p::<S>::progress(cx))?;
        }
        if self.net_in_use {
            n += on_net!(self, |cx| NetP2p::<N>::progress(cx))?;
        }
        if n != 0 {
            self.flush_replies()?;
        }
        if !self.schedules.is_empty() {
            n += self.advance_schedules();
        }
        Ok(n)
    }

    /// Readies the device for a thread that sleeps until it has work (the asynchronous
    /// progress thread), right after a [`Device::progress`] that found nothing: the
    /// descriptors to wait on go onto `out` (see [`AmTransport::arm_wakeup`]). Shared memory
    /// without on-node peers, and no shared memory at all, count as armed: nothing arrives
    /// there that a call of this rank did not put there.
    pub fn arm_wakeup(&mut self, out: &mut Vec<crate::transport::WaitFd>) -> Arm {
        if self.core.am.iter().any(|a| !a.outbox.is_empty()) {
            return Arm::Busy;
        }
        let shm = if S::PRESENT {
            self.shm.arm_wakeup(out)
        } else {
            Arm::Armed
        };
        if shm == Arm::Busy {
            return Arm::Busy;
        }
        shm.and(self.net.arm_wakeup(out))
    }

    /// Tells the transports whether a progress thread drives them between the program's calls
    /// (see [`AmTransport::background_progress`]).
    pub fn background_progress(&mut self, on: bool) {
        if S::PRESENT {
            self.shm.background_progress(on);
        }
        self.net.background_progress(on);
    }

    /// Drives progress until no transport holds output for a live peer any more. A process
    /// calls it before it exits (finalize), or the last pieces of a message it already counts
    /// as sent could die with it. Returns early, with an error, if that takes longer than
    /// `limit` (a peer that stopped receiving).
    pub fn flush(&mut self, limit: std::time::Duration) -> Result<()> {
        let start = std::time::Instant::now();
        let mut idle = 0u32;
        loop {
            if !self.has_queued_output() {
                return Ok(());
            }
            if start.elapsed() > limit {
                return Err(Error::new(
                    ErrorKind::Pending,
                    format!("output still queued after {limit:?}: a peer stopped receiving"),
                ));
            }
            idle = if self.progress()? == 0 { idle + 1 } else { 0 };
            self.pause(idle, None);
        }
    }

    /// Whether a transport still holds output for a live peer (or a close under way):
    /// [`Device::flush`] drives progress until it is false.
    pub fn has_queued_output(&self) -> bool {
        (S::PRESENT && self.shm.has_queued_output())
            || self.net.has_queued_output()
            || self.core.am.iter().any(|a| !a.outbox.is_empty())
    }

    /// Starts closing the transports' connections in order (see
    /// [`AmTransport::close_connections`]) without waiting: the goodbyes go out as progress
    /// runs, and [`Device::has_queued_output`] stays true until they have. A process with
    /// several devices (VCIs) starts every one's close before it drives any, since a peer's
    /// close may wait for this process to answer on a device it would otherwise have left.
    pub fn close_connections(&mut self) {
        self.net.close_connections();
        if S::PRESENT {
            self.shm.close_connections();
        }
    }

    /// Leaves the job: flushes every transport (see [`Device::flush`]), then closes the
    /// netmod's connections in order, so peers learn that this process left (requests still
    /// waiting on it fail rather than wait) instead of seeing it vanish; `limit` bounds each
    /// of the two waits.
    pub fn finalize(&mut self, limit: std::time::Duration) -> Result<()> {
        self.flush(limit)?;
        self.close_connections();
        self.flush(limit)
    }

    /// Sends replies that engines queued for a route other than the one they were driving.
    #[inline(always)]
    fn flush_replies(&mut self) -> Result<()> {
        if S::PRESENT {
            while let Some(p) = self.core.am[Route::Shm.index()].outbox.pop_front() {
                send_ctrl(&mut self.shm, &p)?;
            }
        }
        while let Some(p) = self.core.am[Route::Net.index()].outbox.pop_front() {
            send_ctrl(&mut self.net, &p)?;
        }
        Ok(())
    }
}

/// How many progress calls [`Device::fail_if_peer_gone`] makes at most to take in what a
/// departed peer sent before it went, stopping as soon as the request completes; this path runs
/// only once a peer is gone.
const DRAIN_POLLS: usize = 1024;

/// After how many idle polls in a row a waiting loop gives up its core ([`backoff`]); see
/// [`set_yield_after`].
static YIELD_AFTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(YIELD_SOON);

/// [`set_yield_after`] for ranks that share CPUs: 64 idle polls, not Nemesis's 1000. Measured
/// interleaved on a 2-core host with ranks sharing cores, 1024 was no better at best and worse
/// in the median (0.84x message rate, 0.77x 64 KiB bandwidth), since a rank that does not give
/// up the core can starve a peer sharing it.
pub const YIELD_SOON: u32 = 64;

/// [`set_yield_after`] for ranks that crowd their CPUs, more than two a CPU: yield on the
/// first idle poll, as Open MPI's progress loop does when oversubscribed
/// (`mpi_yield_when_idle`). Every CPU then holds ranks that could run, and the one waited for
/// is one of them more often than not. Measured on this project's 2-core host at 8 ranks,
/// interleaved: osu_allreduce 8 B 21-23 µs yielding at once against 42-50 after 64 idle polls
/// (Open MPI 21-27); HPCG, miniFE and miniAMR the same or better (3 rounds).
pub const YIELD_AT_ONCE: u32 = 0;

/// [`set_yield_after`] for ranks that each have a CPU: about half a millisecond of polling.
/// Yielding sooner hurts when another busy program shares the node: Linux's fair scheduler
/// (EEVDF since 6.6) pushes a yielder's deadline back, so a rank that yields during the
/// microsecond waits of a streamed message hands its time to that program, and the message,
/// which both ranks must copy at once, crawls. Measured on this project's 2-core host with one
/// spinning process beside two ranks: osu_bw at 1-4 MiB read 2.8-3.4 GB/s yielding after 64
/// polls and 10-10.6 never yielding. Yielding at all keeps a job that shares the node with
/// other jobs (a test suite running several at once) from spinning away whole time slices.
pub const YIELD_LATE: u32 = 1 << 14;

/// Sets after how many idle polls in a row every waiting loop of this process yields its core
/// (`u32::MAX`: never). The facade sets it at start-up ([`YIELD_AT_ONCE`] when the node has
/// more than two ranks a CPU, [`YIELD_SOON`] when it has more ranks than CPUs, as MPICH and
/// Open MPI yield only when oversubscribed, else [`YIELD_LATE`]; `CH4_YIELD` overrides).
pub fn set_yield_after(polls: u32) {
    YIELD_AFTER.store(polls, std::sync::atomic::Ordering::Relaxed);
}

/// Whether waiting loops yield on their first idle poll ([`YIELD_AT_ONCE`]): the node's ranks
/// crowd its CPUs. Every rank of a node decides it alike (from the node's ranks and CPUs, or
/// the same `CH4_YIELD`), so the collectives' schedules may choose an algorithm by it.
pub fn yields_at_once() -> bool {
    YIELD_AFTER.load(std::sync::atomic::Ordering::Relaxed) == YIELD_AT_ONCE
}

/// Every how many idle polls a waiting loop asks whether the peer it waits for shares this
/// rank's CPU, and gives way if so (0: never); see [`set_cpu_mate_check`].
static CPU_MATE_CHECK: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// [`set_cpu_mate_check`] when ranks outnumber CPUs, two a CPU at most (with more, the facade
/// does not check: every CPU is crowded, see its `cpu_mate_check`): every idle poll. Two
/// ranks that talk and share one CPU can only take turns, and each poll before the yield
/// delays the other.
/// Measured on this project's 2-core host with 4 ranks, the two of each pair pinned to one CPU:
/// osu_multi_lat 8 B 2.3-3.3 µs polling 64 times first, 1.3 µs yielding at once; with the two
/// of each pair on different CPUs, yielding at once whatever the peer's CPU made it 1.3-1.5 µs
/// instead of 0.15-0.65, which is why the rule asks where the peer is. Moving off the CPU
/// (at most every 10 ms, yielding in between) did better than only yielding: unpinned, 10
/// interleaved rounds, osu_multi_lat 0 B read 1.0-1.3 µs in 5 rounds when only yielding and
/// at most 0.20 µs in all when moving; message rate at 8 B the same (medians 44 and 43.5 M/s).
pub const CPU_MATE_EVERY_POLL: u32 = 1;

/// [`set_cpu_mate_check`] when each rank may have a CPU: every 16th idle poll. Ranks bound to
/// their own cores never share one and pay a CPU lookup per 16 idle polls. Unbound ranks that
/// the scheduler puts on one CPU (another program holding the other) would otherwise poll
/// [`YIELD_LATE`] times before the other could run; instead the one that notices moves to
/// another CPU. Measured on this project's 2-core host, two unbound ranks and one spinning
/// process, 6 interleaved rounds: osu_bw at 64 KiB fell to 0.6-1.0 GB/s in half the rounds
/// before, and yielding to the peer instead of moving kept it at 7.4-30 GB/s but made 8 B
/// latency 0.9 µs instead of 0.6 (the two then took turns on one CPU).
pub const CPU_MATE_SOMETIMES: u32 = 16;

/// Sets every how many idle polls in a row ([`CPU_MATE_EVERY_POLL`], [`CPU_MATE_SOMETIMES`];
/// 0: never) every waiting loop of this process asks whether the on-node peer it waits for
/// last ran on this rank's CPU, and if so gives way at once ([`Device::pause`]). The facade sets
/// it at start-up with [`set_yield_after`]; `CH4_YIELD=soon` or `never` turn it off.
pub fn set_cpu_mate_check(every: u32) {
    CPU_MATE_CHECK.store(every, std::sync::atomic::Ordering::Relaxed);
}

/// The most loads a blocking receive's watch for its message ([`Shm::watch_for_arrival`])
/// makes between two progress polls; with the stores between them (`shm`'s `Consumer::watch`)
/// about 100 ns on this project's host, which bounds the delay it adds to everything else.
const WATCH_LOADS: usize = 32;

/// For how many idle polls in a row a waiting loop spins without a pause instruction
/// ([`backoff`]); see [`set_tight_spin`].
static TIGHT_SPIN: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// [`set_tight_spin`] for ranks that each have a CPU: 1024 idle polls, 15-20 µs on this
/// project's 2-core host (AMD EPYC), where one idle poll took 13-21 ns and 40 ns with a pause.
/// A `pause` there takes 23 ns (60 TSC ticks), and a message that lands while a waiting rank
/// sits in one waits for it to end: the host's cross-core line ping-pong floor is 46 ns
/// one-way. Spinning without it, 8 interleaved rounds in the host's fast mode: osu_latency
/// 0-64 B 0.068-0.083 µs against 0.085-0.100 with a pause at every idle poll; osu_mbw_mr
/// unchanged (6 rounds). Past the tight phase a waiting rank pauses again: a longer wait is not
/// latency-bound, and a pausing spin leaves an SMT sibling its share of the core. MPICH's and
/// Open MPI's progress loops spin without pausing.
pub const TIGHT_SPIN_OWN_CPU: u32 = 1024;

/// Sets for how many idle polls in a row every waiting loop of this process spins without a
/// pause instruction before it pauses at every poll (0: pause from the first); yielding
/// ([`set_yield_after`]) comes first. The facade sets it at start-up: [`TIGHT_SPIN_OWN_CPU`]
/// (at most the polls before yielding) when each rank may have a CPU, 0 when ranks outnumber
/// CPUs, where the rank waited for may need this very core.
pub fn set_tight_spin(polls: u32) {
    TIGHT_SPIN.store(polls, std::sync::atomic::Ordering::Relaxed);
}

/// Gives the other ranks' threads the core now and then while waiting, without sleeping on a
/// busy path; `idle` counts the polls in a row that found nothing. The first polls of a wait
/// spin tight ([`set_tight_spin`]), the next ones pause, and past [`set_yield_after`] each
/// yields. Every waiting loop of the device and of the facade uses it through
/// [`Device::pause`].
#[inline(always)]
pub fn backoff(idle: u32) {
    if idle > YIELD_AFTER.load(std::sync::atomic::Ordering::Relaxed) {
        std::thread::yield_now();
    } else if idle > TIGHT_SPIN.load(std::sync::atomic::Ordering::Relaxed) {
        std::hint::spin_loop();
    }
}

#[cold]
fn stale_request() -> Error {
    Error::new(
        ErrorKind::Request,
        "request handle is stale: already completed and freed, or never made",
    )
}

#[cold]
fn bad_tag(tag: Tag, tag_ub: Tag, wildcard_ok: bool) -> Error {
    let allowed = if wildcard_ok {
        format!("0..={tag_ub} or ANY_TAG")
    } else {
        format!("0..={tag_ub}")
    };
    Error::new(ErrorKind::Tag, format!("tag {tag} is not in {allowed}"))
}

fn proc_null_status() -> Status {
    Status::ok(PROC_NULL, ANY_TAG, 0)
}

/// Turns an error status into an error that names it.
#[inline(always)]
pub fn status_result(st: Status) -> Result<Status> {
    match st.error {
        None => Ok(st),
        Some(kind) => Err(status_error(kind, &st)),
    }
}

#[cold]
fn status_error(kind: ErrorKind, st: &Status) -> Error {
    Error::with_status(
        kind,
        format!(
            "{} (source {}, tag {}, {} bytes delivered)",
            kind.describe(),
            st.source,
            st.tag,
            st.bytes
        ),
        *st,
    )
}

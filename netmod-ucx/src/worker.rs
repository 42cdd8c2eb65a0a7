//! The UCX layer: one UCP context and worker of a rank, its endpoints to the other processes,
//! and the `extern "C"` callbacks — what any UCP user writes once, knowing nothing of ch4.
//!
//! - [`Worker::open`] reads UCX's configuration the way UCX programs do (`UCX_TLS`,
//!   `UCX_NET_DEVICES`, ... from the environment), creates a context with the tag API and a
//!   worker in serialized mode (the device that owns the netmod makes every call, one at a
//!   time, from whichever thread has it).
//! - The worker's address is the business card; [`Worker::learn_from`] keeps where to find a
//!   process's address (the process manager, asked on first contact: a rank holds no address
//!   of a peer it never reaches), and an endpoint to a process is created on first contact
//!   ([`Worker::ep`]) in a table whose pages exist only where endpoints do, with
//!   an error handler so that a peer that dies fails its operations instead of hanging them.
//!   By default the endpoint asks for no guarantee (`UCP_ERR_HANDLING_MODE_NONE`, as MPICH's
//!   ch4:ucx and Open MPI's pml ucx do): UCX 1.13's tcp transport still reports a dead peer to
//!   the handler, and the launcher reports it anyway. [`ErrMode::Peer`] asks UCX for the
//!   guarantee (`UCP_ERR_HANDLING_MODE_PEER`), which costs large messages dearly over tcp
//!   (UCX switches to a slower rendezvous and adds a keepalive lane: 4 MiB latency 1.8x here).
//!   UCX 1.13's shared-memory transports cannot detect a failed peer and refuse endpoints that
//!   ask for it; there the endpoint is created without.
//! - Completions: every operation's callback receives a pointer to its [`Completion`] (a slot
//!   of the engine's `OpContexts`, whose address never moves) as user data, writes what it was
//!   told there and appends the slot's index to the worker's list of completions
//!   ([`Worker::take_completed`]). Callbacks may run inside the call that posts or cancels an
//!   operation, as well as inside `ucp_worker_progress`; they never call back into UCX or into
//!   the engine, which applies the list after each call.
//! - A contiguous standard send takes no slot before it is posted: short ones, the common
//!   case, complete inside the call. Only when UCX keeps it (returns a request) does it get
//!   one, whose index goes into the space UCX reserves in each of its requests for the
//!   application (`ucp_params_t::request_size`, as MPICH's ch4:ucx and Open MPI's pml ucx keep
//!   their own request there); its callback, [`sent_slotless`], records the request, and the
//!   engine reads the index back ([`Worker::take_slotless`], [`request_op`]).

use std::cell::Cell;
use std::ffi::{c_void, CString};
use std::ptr::{null, null_mut};

use ch4_core::native::OpIndex;

use crate::paged::Paged;
use ch4_core::{Error, ErrorKind, Gpid, Result};
use ucx_sys::*;

/// Where a callback leaves what UCX reported about one operation: the context of an
/// `OpContexts` slot.
pub struct Completion {
    /// The operation's slot, and the worker's list of completed slots (set when posting).
    index: Cell<OpIndex>,
    sink: Cell<*const Cell<Vec<OpIndex>>>,
    /// The status the callback reported.
    pub status: Cell<ucs_status_t>,
    /// For a receive: the matched message's tag and length.
    pub tag: Cell<ucp_tag_t>,
    pub length: Cell<usize>,
}

impl Default for Completion {
    fn default() -> Self {
        Completion {
            index: Cell::new(0),
            sink: Cell::new(null()),
            status: Cell::new(UCS_OK),
            tag: Cell::new(0),
            length: Cell::new(0),
        }
    }
}

impl Completion {
    /// Readies the slot of operation `index` for its callback.
    pub fn arm(&self, index: OpIndex, worker: &Worker) {
        self.index.set(index);
        self.sink.set(&*worker.completed);
        self.status.set(UCS_INPROGRESS);
        self.tag.set(0);
        self.length.set(0);
    }

    /// Records a completion and queues the slot on its worker's list.
    fn record(&self, status: ucs_status_t) {
        self.status.set(status);
        let sink = self.sink.get();
        // SAFETY: `sink` is the list of the worker that posted this operation (`arm`), boxed
        // so that its address is fixed, and alive as long as the worker, which outlives its
        // operations' callbacks (none run after `ucp_worker_destroy`).
        if let Some(list) = unsafe { sink.as_ref() } {
            let mut v = list.take();
            v.push(self.index.get());
            list.set(v);
        }
    }
}

/// A send's callback (`ucp_send_nbx_callback_t`).
pub unsafe extern "C" fn sent(_request: *mut c_void, status: ucs_status_t, user: *mut c_void) {
    // SAFETY: `user` is the operation's `Completion` slot (fixed address, freed only after
    // the operation completed, which is this call), and it is only touched through `Cell`s.
    if let Some(c) = unsafe { user.cast::<Completion>().as_ref() } {
        c.record(status);
    }
}

/// A tagged receive's callback (`ucp_tag_recv_nbx_callback_t`).
pub unsafe extern "C" fn received(
    _request: *mut c_void,
    status: ucs_status_t,
    info: *const ucp_tag_recv_info_t,
    user: *mut c_void,
) {
    // SAFETY: as in `sent`.
    let Some(c) = (unsafe { user.cast::<Completion>().as_ref() }) else {
        return;
    };
    // SAFETY: UCX passes a valid `info` (or null) for the duration of the callback.
    if let Some(info) = unsafe { info.as_ref() } {
        c.tag.set(info.sender_tag);
        c.length.set(info.length);
    }
    c.record(status);
}

/// The callback of a send posted without a slot (`ucp_send_nbx_callback_t`): `user` is the
/// worker's list of such completions, to which the request and its status are appended.
pub unsafe extern "C" fn sent_slotless(
    request: *mut c_void,
    status: ucs_status_t,
    user: *mut c_void,
) {
    // SAFETY: `user` is the worker's boxed list (`Worker::slotless_sink`), alive as long as
    // the worker, which outlives its requests' callbacks; touched only through the `Cell`.
    if let Some(list) = unsafe { user.cast::<Cell<Vec<SlotlessDone>>>().as_ref() } {
        let mut v = list.take();
        v.push(SlotlessDone { request, status });
        list.set(v);
    }
}

/// A slotless send that UCX reported complete: its request and the status.
#[derive(Clone, Copy)]
pub struct SlotlessDone {
    /// UCX's request (its reserved space holds the operation's index, see [`set_request_op`]).
    pub request: *mut c_void,
    /// What the callback was told.
    pub status: ucs_status_t,
}

/// The bytes this netmod reserves in every UCX request (`ucp_params_t::request_size`): the
/// index of the operation the request serves, for requests of sends posted without a slot.
const REQUEST_RESERVED: usize = std::mem::size_of::<u64>();

/// Writes operation `i`'s index into `request`'s reserved space.
///
/// # Safety
/// `request` is a live request returned by a non-blocking call of a worker of this netmod's
/// context (so it has [`REQUEST_RESERVED`] writable bytes at its address).
pub unsafe fn set_request_op(request: *mut c_void, i: OpIndex) {
    // SAFETY: the caller's contract; UCX hands the reserved space to the application at the
    // returned pointer (MPICH's ch4:ucx and Open MPI's pml ucx store their request there).
    unsafe { request.cast::<u64>().write_unaligned(u64::from(i)) }
}

/// The operation index [`set_request_op`] wrote into `request`.
///
/// # Safety
/// As for [`set_request_op`], and the index was written before (it was, if the request was
/// returned by the call that posted it: the engine writes it before any other UCX call).
pub unsafe fn request_op(request: *mut c_void) -> OpIndex {
    // SAFETY: the caller's contract.
    let raw = unsafe { request.cast::<u64>().read_unaligned() };
    OpIndex::try_from(raw).unwrap_or(OpIndex::MAX)
}

/// What an endpoint's error handler needs: whose endpoint it is and where failures go.
struct EpRecord {
    peer: Gpid,
    /// Whether the endpoint was made with peer-failure handling, which a forced close needs.
    forceable: bool,
    failures: *const Cell<Vec<(Gpid, ucs_status_t)>>,
    /// Set by the handler: the endpoint is unusable and is closed without a flush.
    failed: Cell<bool>,
}

/// An endpoint's error handler (`ucp_err_handler_cb_t`): the peer failed (or its connection
/// broke); recorded for the netmod.
unsafe extern "C" fn ep_failed(arg: *mut c_void, _ep: ucp_ep_h, status: ucs_status_t) {
    // SAFETY: `arg` is the endpoint's boxed `EpRecord`, kept until the worker is destroyed.
    let Some(r) = (unsafe { arg.cast::<EpRecord>().as_ref() }) else {
        return;
    };
    r.failed.set(true);
    // SAFETY: `failures` is the worker's boxed list, alive as long as its endpoints.
    if let Some(list) = unsafe { r.failures.as_ref() } {
        let mut v = list.take();
        v.push((r.peer, status));
        list.set(v);
    }
}

/// Closes `peer`'s endpoint if it has one (`force`: at once, `UCP_EP_CLOSE_FLAG_FORCE`, only
/// for an endpoint made with peer-failure handling or whose error handler ran; else after a
/// flush), clearing its slot; a close UCX has not finished goes to `closing`. Whether there was
/// an endpoint.
fn close_endpoint(
    eps: &mut Paged<Ep>,
    closing: &mut Vec<ucs_status_ptr_t>,
    peer: Gpid,
    force: bool,
) -> bool {
    let Ep(ep) = eps.get(peer);
    if ep.is_null() {
        return false;
    }
    let param = ucp_request_param_t {
        op_attr_mask: UCP_OP_ATTR_FIELD_FLAGS,
        flags: if force { UCP_EP_CLOSE_FLAG_FORCE } else { 0 },
        ..Default::default()
    };
    // SAFETY: a live endpoint, closed once (its slot is cleared below); the callers force only
    // an endpoint made with peer-failure handling or one whose error handler ran.
    let r = unsafe { ucp_ep_close_nbx(ep, &param) };
    if let Some(slot) = eps.get_mut(peer) {
        *slot = Ep::default();
    }
    if ucs_ptr_is_ptr(r) {
        closing.push(r);
    }
    true
}

/// An error for a failed UCX call.
pub fn ucx_error(kind: ErrorKind, what: &str, status: ucs_status_t) -> Error {
    Error::new(kind, format!("{what}: {}", status_string(status)))
}

fn check(what: &str, status: ucs_status_t) -> Result<()> {
    if status == UCS_OK {
        Ok(())
    } else {
        Err(ucx_error(ErrorKind::Transport, what, status))
    }
}

/// Whether a `UCX_TLS` list names a transport that can detect a failed peer: UCX 1.13's
/// shared-memory transports (`posix`, `sysv`, `cma`, `sm`, `shm`, `self`) cannot, and refuse
/// endpoints that ask for it (UCX logs an error for each refusal). With only those, endpoints
/// go without from the start; with any other (`tcp`, an `all`, an InfiniBand one), they ask,
/// and fall back once if refused.
fn can_detect_failed_peers(tls: &str) -> bool {
    const SHARED_MEMORY: [&str; 6] = ["posix", "sysv", "cma", "sm", "shm", "self"];
    tls.split(',')
        .map(|t| t.trim().trim_start_matches('^'))
        .any(|t| !t.is_empty() && !SHARED_MEMORY.contains(&t))
}

/// How much failure reporting endpoints ask of UCX (`ucp_err_handling_mode_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrMode {
    /// `UCP_ERR_HANDLING_MODE_NONE`: no guarantee, no cost; the error handler is still set
    /// and called where the transport reports a failure (UCX 1.13's tcp does).
    None,
    /// `UCP_ERR_HANDLING_MODE_PEER`: UCX guarantees that a failed peer is reported (keepalive),
    /// where every transport in use can tell; others make endpoints without.
    Peer,
}

impl ErrMode {
    /// The mode named by `CH4_UCX_ERR_MODE` (`none` when unset); a value that is neither
    /// `none` nor `peer` is an error naming the variable.
    pub fn from_env() -> Result<ErrMode> {
        match ch4_core::env::raw(crate::ERR_MODE_VAR)? {
            None => Ok(ErrMode::None),
            Some(v) => ErrMode::parse(&v)
                .ok_or_else(|| ch4_core::env::bad(crate::ERR_MODE_VAR, &v, "none or peer")),
        }
    }

    /// `none` or `peer`, in any case.
    pub fn parse(v: &str) -> Option<ErrMode> {
        match v.trim().to_ascii_lowercase().as_str() {
            "none" => Some(ErrMode::None),
            "peer" => Some(ErrMode::Peer),
            _ => None,
        }
    }

    /// The name `CH4_UCX_ERR_MODE` takes.
    pub fn name(self) -> &'static str {
        match self {
            ErrMode::None => "none",
            ErrMode::Peer => "peer",
        }
    }
}

/// One rank's UCP context, worker and endpoints.
pub struct Worker {
    context: ucp_context_h,
    worker: ucp_worker_h,
    /// Endpoints by process, null until first contact; pages only where endpoints are.
    eps: Paged<Ep>,
    /// Where the processes' worker addresses come from, once learned.
    addresses: Addresses,
    /// The endpoints' error-handler arguments, boxed: UCX keeps their addresses, which a
    /// `Vec` of records would move as it grows.
    #[allow(clippy::vec_box)]
    records: Vec<Box<EpRecord>>,
    /// Slots whose operation completed, in order, for the engine to apply.
    completed: Box<Cell<Vec<OpIndex>>>,
    /// Slotless sends that UCX kept and has since completed (see [`sent_slotless`]).
    slotless: Box<Cell<Vec<SlotlessDone>>>,
    /// Peers whose endpoint reported an error, with the status.
    failures: Box<Cell<Vec<(Gpid, ucs_status_t)>>>,
    /// Whether endpoints are created with peer-failure handling (asked for with
    /// [`ErrMode::Peer`], and every transport in use supports it).
    pub peer_errors: bool,
    /// The number of processes in the job.
    processes: u32,
    /// Endpoint closes UCX had not finished when they were begun (by [`Worker::begin_close`]
    /// or [`Worker::close_failed`]), freed by [`Worker::release_closes`].
    closing: Vec<ucs_status_ptr_t>,
    /// When finalize began its closes ([`Worker::begin_close`]): it drives every VCI's worker
    /// until they are done, for a limited time from here.
    closing_since: Option<std::time::Instant>,
}

/// Where a worker finds a process's address.
enum Addresses {
    /// Not learned yet.
    None,
    /// Every process's, in process order (ranks as threads, which share them).
    Known(Vec<Vec<u8>>),
    /// Asked for on first contact (processes: from the process manager).
    Lazy(ch4_core::bootstrap::CardSource),
}

/// An endpoint, as a table entry: null (none made) by default.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Ep(ucp_ep_h);

impl Default for Ep {
    fn default() -> Ep {
        Ep(null_mut())
    }
}

// SAFETY: the worker is created in `UCS_THREAD_MODE_SERIALIZED`: UCX allows calls from any
// thread as long as no two run at once. All of them go through `&mut self` of the one netmod
// (owned by one device), and the raw pointers in the boxed records point into this value.
unsafe impl Send for Worker {}

impl Worker {
    /// Opens UCP for `processes` peers with the tag API, configured from the environment
    /// (`UCX_*`, as every UCX program) and then `settings` (UCX's variables without their
    /// `UCX_` prefix: `("TLS", "tcp")`), its endpoints made with error handling `mode`.
    pub fn open(processes: u32, settings: &[(&str, &str)], mode: ErrMode) -> Result<Worker> {
        let mut config = null_mut();
        // SAFETY: null prefix and file: UCX's defaults and `UCX_*` environment variables.
        check("ucp_config_read", unsafe {
            ucp_config_read(null(), null(), &mut config)
        })?;
        for (name, value) in settings {
            let (Ok(n), Ok(v)) = (CString::new(*name), CString::new(*value)) else {
                // SAFETY: the configuration is live and released once.
                unsafe { ucp_config_release(config) };
                return Err(Error::new(ErrorKind::Arg, "a UCX setting with a NUL byte"));
            };
            // SAFETY: `config` is live; the strings are NUL-terminated and outlive the call.
            let modified = unsafe { ucp_config_modify(config, n.as_ptr(), v.as_ptr()) };
            if modified != UCS_OK {
                // SAFETY: as above.
                unsafe { ucp_config_release(config) };
                return Err(ucx_error(
                    ErrorKind::Arg,
                    &format!("UCX setting {name}={value}"),
                    modified,
                ));
            }
        }
        let name = CString::new("ch4").unwrap_or_default();
        let params = ucp_params_t {
            field_mask: (UCP_PARAM_FIELD_FEATURES
                | UCP_PARAM_FIELD_REQUEST_SIZE
                | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS
                | UCP_PARAM_FIELD_NAME) as u64,
            features: UCP_FEATURE_TAG as u64,
            request_size: REQUEST_RESERVED,
            estimated_num_eps: processes as usize,
            name: name.as_ptr(),
            ..Default::default()
        };
        let mut context = null_mut();
        // SAFETY: `params` sets every field its mask names; `config` is live.
        let opened = unsafe { ucp_init(&params, config, &mut context) };
        // SAFETY: the configuration is not needed once the context exists (or failed).
        unsafe { ucp_config_release(config) };
        check("ucp_init", opened)?;
        let wp = ucp_worker_params_t {
            field_mask: UCP_WORKER_PARAM_FIELD_THREAD_MODE as u64,
            thread_mode: UCS_THREAD_MODE_SERIALIZED,
            ..Default::default()
        };
        let mut worker = null_mut();
        // SAFETY: the context is live; `wp` sets the one field its mask names.
        let created = unsafe { ucp_worker_create(context, &wp, &mut worker) };
        if let Err(e) = check("ucp_worker_create", created) {
            // SAFETY: the context has no workers.
            unsafe { ucp_cleanup(context) };
            return Err(e);
        }
        // UCX_TLS as UCX reads it: the settings' value, else the environment's.
        let tls = settings
            .iter()
            .find(|(n, _)| *n == "TLS")
            .map(|(_, v)| v.to_string())
            .or_else(|| std::env::var("UCX_TLS").ok());
        Ok(Worker {
            context,
            worker,
            eps: Paged::new(processes),
            addresses: Addresses::None,
            records: Vec::new(),
            completed: Box::default(),
            slotless: Box::default(),
            failures: Box::default(),
            peer_errors: mode == ErrMode::Peer
                && tls.as_deref().map_or(true, can_detect_failed_peers),
            processes,
            closing: Vec::new(),
            closing_since: None,
        })
    }

    /// The raw worker, for the data path.
    #[inline(always)]
    pub fn raw(&self) -> ucp_worker_h {
        self.worker
    }

    /// This worker's address: the business card.
    pub fn address(&self) -> Result<Vec<u8>> {
        let (mut addr, mut len) = (null_mut(), 0usize);
        // SAFETY: the worker is live; the out-pointers are writable.
        check("ucp_worker_get_address", unsafe {
            ucp_worker_get_address(self.worker, &mut addr, &mut len)
        })?;
        // SAFETY: UCX returned `len` readable bytes at `addr`.
        let card = unsafe { std::slice::from_raw_parts(addr.cast::<u8>(), len) }.to_vec();
        // SAFETY: `addr` came from ucp_worker_get_address of this worker, released once.
        unsafe { ucp_worker_release_address(self.worker, addr) };
        Ok(card)
    }

    /// Keeps every process's address (in process order) for endpoints made later.
    pub fn learn(&mut self, addresses: &[Vec<u8>]) {
        self.addresses = Addresses::Known(addresses.to_vec());
    }

    /// Keeps `source`, asked for a process's address when its endpoint is made.
    pub fn learn_from(&mut self, source: ch4_core::bootstrap::CardSource) {
        self.addresses = Addresses::Lazy(source);
    }

    /// The endpoint to process `dest`, created on first contact.
    #[inline(always)]
    pub fn ep(&mut self, dest: Gpid) -> Result<ucp_ep_h> {
        let Ep(ep) = self.eps.get(dest);
        if ep.is_null() {
            return self.connect(dest);
        }
        Ok(ep)
    }

    #[cold]
    fn connect(&mut self, dest: Gpid) -> Result<ucp_ep_h> {
        let no_such = || {
            Error::new(
                ErrorKind::Rank,
                format!("process {dest} has no UCX address: the job has no such process"),
            )
        };
        if dest >= self.processes {
            return Err(no_such());
        }
        let fetched;
        let addr: &[u8] = match &mut self.addresses {
            Addresses::None => return Err(no_such()),
            Addresses::Known(all) => all.get(dest as usize).ok_or_else(no_such)?,
            Addresses::Lazy(source) => {
                fetched = source(dest)?;
                &fetched
            }
        };
        let mut record = Box::new(EpRecord {
            peer: dest,
            forceable: false,
            failures: &*self.failures,
            failed: Cell::new(false),
        });
        let arg = (&raw const *record).cast_mut().cast::<c_void>();
        let mut ep = null_mut();
        let mut status = UCS_ERR_UNSUPPORTED;
        for peer_errors in [self.peer_errors, false] {
            let params = ucp_ep_params_t {
                field_mask: (UCP_EP_PARAM_FIELD_REMOTE_ADDRESS
                    | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE
                    | UCP_EP_PARAM_FIELD_ERR_HANDLER) as u64,
                address: addr.as_ptr().cast(),
                err_mode: if peer_errors {
                    UCP_ERR_HANDLING_MODE_PEER
                } else {
                    UCP_ERR_HANDLING_MODE_NONE
                },
                err_handler: ucp_err_handler_t {
                    cb: Some(ep_failed),
                    arg,
                },
                ..Default::default()
            };
            // SAFETY: the worker is live; `params` sets what its mask names; the address is a
            // peer's worker address (UCX reads it during the call); `arg` is boxed and kept in
            // `records` for as long as the worker.
            status = unsafe { ucp_ep_create(self.worker, &params, &mut ep) };
            if status == UCS_OK {
                if !peer_errors && self.peer_errors {
                    // The transports in use cannot tell a dead peer (UCX 1.13's shared
                    // memory): every later endpoint goes without, failures come from the
                    // launcher.
                    tracing::info!("UCX's transports here cannot detect failed peers");
                    self.peer_errors = false;
                }
                break;
            }
            if !peer_errors {
                break;
            }
        }
        check("ucp_ep_create", status)?;
        record.forceable = self.peer_errors;
        self.records.push(record);
        if let Some(slot) = self.eps.get_mut(dest) {
            *slot = Ep(ep);
        }
        Ok(ep)
    }

    /// One step of UCX progress (callbacks run inside it); how many events it handled.
    #[inline(always)]
    pub fn progress(&self) -> usize {
        // SAFETY: the worker is live and only this netmod calls it (serialized mode).
        unsafe { ucp_worker_progress(self.worker) as usize }
    }

    /// The slots whose operations completed since the last call, in order.
    #[inline(always)]
    pub fn take_completed(&self) -> Vec<OpIndex> {
        self.completed.take()
    }

    /// Swaps the list of completed slots with `spare` (empty, its capacity kept): the engine
    /// applies the completions from `spare`, and the callbacks append to a list that already
    /// has room, so a completion costs no allocation.
    #[inline(always)]
    pub fn swap_completed(&self, spare: &mut Vec<OpIndex>) {
        spare.clear();
        let mut v = self.completed.take();
        std::mem::swap(&mut v, spare);
        self.completed.set(v);
    }

    /// The user data of a slotless send: where [`sent_slotless`] records its completion.
    #[inline(always)]
    pub fn slotless_sink(&self) -> *mut c_void {
        (&raw const *self.slotless).cast_mut().cast()
    }

    /// The slotless sends completed since the last call, swapped with `spare` as in
    /// [`Worker::swap_completed`].
    #[inline(always)]
    pub fn take_slotless(&self, spare: &mut Vec<SlotlessDone>) {
        spare.clear();
        let mut v = self.slotless.take();
        std::mem::swap(&mut v, spare);
        self.slotless.set(v);
    }

    /// Queues operation `i` as completed with `status` although no callback ran (UCX finished
    /// it inside the call that posted it), for the engine to apply with the others.
    pub fn requeue(&self, i: OpIndex, status: ucs_status_t, slot: &Completion) {
        slot.index.set(i);
        slot.sink.set(&*self.completed);
        slot.record(status);
    }

    /// Peers whose endpoints reported errors since the last call.
    pub fn take_failures(&self) -> Vec<(Gpid, ucs_status_t)> {
        self.failures.take()
    }

    /// Closes every endpoint, flushing what was sent on it first — bounded by `limit`, after
    /// which UCX is left to finish; endpoints to peers that are `gone` are closed at once
    /// where that is allowed: a forced close needs peer-failure handling on both sides
    /// (`UCP_EP_CLOSE_FLAG_FORCE` in ucp.h: undefined behaviour otherwise), so an endpoint made
    /// without it is flushed — unless its error handler ran: its connection is broken, nothing
    /// can reach the other side, and it is released at once.
    pub fn close_endpoints(&mut self, limit: std::time::Duration, gone: impl Fn(Gpid) -> bool) {
        self.begin_close(gone);
        let start = std::time::Instant::now();
        while self.closing_in_flight() && start.elapsed() < limit {
            self.progress();
        }
        self.release_closes();
    }

    /// Starts closing every endpoint as [`Worker::close_endpoints`] does, without waiting:
    /// the closes complete as this worker progresses. Finalize begins them on every VCI's
    /// worker before it drives any: a peer's close waits for this rank to answer on the same
    /// VCI, and a rank that closed its VCIs one after another no longer drove the first while
    /// it waited on the second (the peer's flush then ran out its time: seen with 3 VCIs at 8
    /// ranks over tcp).
    pub fn begin_close(&mut self, gone: impl Fn(Gpid) -> bool) {
        // One record per endpoint made (an endpoint is made only where none is).
        for record in &self.records {
            // An endpoint whose handler reported an error can no longer flush: ucp.h says
            // such an endpoint is to be released (a flush fails, and UCX logs it as an error).
            let force = record.failed.get() || (record.forceable && gone(record.peer));
            close_endpoint(&mut self.eps, &mut self.closing, record.peer, force);
        }
        // Finalize's clock starts here (closes forced earlier do not start it).
        self.closing_since = (!self.closing.is_empty()).then(std::time::Instant::now);
    }

    /// Closes at once (forced) the endpoints of the peers that are `failed`, where the
    /// endpoint was made with peer-failure handling (a forced close is undefined behaviour
    /// otherwise): UCX then ends what it still held for them — a rendezvous receive it had
    /// matched to a message of the dead peer, which `ucp_request_cancel` does not take back —
    /// with an error, instead of leaving it to the device's cancel limit. A later send to such
    /// a peer makes a new endpoint, which fails in turn. Returns how many it closed.
    pub fn close_failed(&mut self, failed: impl Fn(Gpid) -> bool) -> usize {
        let mut closed = 0;
        for record in &self.records {
            if record.forceable
                && failed(record.peer)
                && close_endpoint(&mut self.eps, &mut self.closing, record.peer, true)
            {
                closed += 1;
            }
        }
        closed
    }

    /// Whether an endpoint close begun by [`Worker::begin_close`] is still under way.
    pub fn closing_in_flight(&self) -> bool {
        self.closing.iter().any(|&r| {
            // SAFETY: `r` is a live close request until `release_closes` frees it.
            let status = unsafe { ucp_request_check_status(r) };
            status == UCS_INPROGRESS
        })
    }

    /// When the endpoint closes began, while any are held.
    pub fn closing_since(&self) -> Option<std::time::Instant> {
        self.closing_since
    }

    /// Frees the close requests, warning about those still under way (peers that stopped
    /// reading): UCX finishes them itself, at the latest when the worker is destroyed.
    pub fn release_closes(&mut self) {
        let unfinished = self
            .closing
            .iter()
            // SAFETY: as in `closing_in_flight`.
            .filter(|&&r| unsafe { ucp_request_check_status(r) } == UCS_INPROGRESS)
            .count();
        if unfinished > 0 {
            tracing::warn!(
                endpoints = unfinished,
                "UCX endpoints still flushing to peers that stopped reading; left to UCX"
            );
        }
        for r in self.closing.drain(..) {
            // SAFETY: a close request, freed once: UCX releases it when it completes (at the
            // latest when the worker is destroyed), and an unreleased one would fail the
            // worker's destruction.
            unsafe { ucp_request_free(r) };
        }
        self.closing_since = None;
    }
}

impl Worker {
    /// Receives and drops the credit messages (`crate::credit`) that arrived after this rank
    /// let go of its receives for them: peers give credit back until they close, so a few
    /// usually do. UCX would report each at destroy ("unexpected tag-receive descriptor ...
    /// was not matched", one warning a message: about 70 in a run of the UCX test suites).
    /// Messages of the program's own are left, and UCX's warning for them tells the truth.
    /// Returns how many it dropped.
    fn drop_late_credit(&mut self) -> usize {
        // A bound, in case peers still send while this runs.
        let mut dropped = 0;
        for _ in 0..4096 {
            let mut info = ucp_tag_recv_info_t::default();
            // SAFETY: the worker is live; `info` is writable.
            let msg = unsafe {
                ucp_tag_probe_nb(
                    self.worker,
                    crate::tag::CREDIT,
                    crate::tag::CREDIT_MASK,
                    1,
                    &mut info,
                )
            };
            if msg.is_null() {
                break;
            }
            dropped += 1;
            let param = ucp_request_param_t::default();
            // SAFETY: `msg` was taken out of matching by the probe above and is received once.
            // A credit message is 4 bytes; received with a count of 0 it is truncated, and UCX
            // checks the length before it copies anything (`ucp_request_recv_data_unpack`
            // reports the truncation and writes no data), so the buffer may be null and no
            // buffer has to outlive a request still in progress when it is freed below.
            let request = unsafe { ucp_tag_msg_recv_nbx(self.worker, null_mut(), 0, msg, &param) };
            if request.is_null() || ucs_ptr_is_err(request) {
                continue;
            }
            for _ in 0..1000 {
                // SAFETY: `request` is this worker's live receive request, freed only below.
                if unsafe { ucp_request_check_status(request) } != UCS_INPROGRESS {
                    break;
                }
                // SAFETY: the worker is live.
                unsafe { ucp_worker_progress(self.worker) };
            }
            // SAFETY: as above; UCX releases a request still in progress once it completes,
            // with no callback (there is none).
            unsafe { ucp_request_free(request) };
        }
        dropped
    }
}

impl Drop for Worker {
    /// Closes what finalize did not (a netmod dropped without finalize, or after an error):
    /// endpoints made with peer-failure handling at once, the others with a flush of at most
    /// 200 ms.
    fn drop(&mut self) {
        self.close_endpoints(std::time::Duration::from_millis(200), |_| true);
        self.drop_late_credit();
        // SAFETY: the worker and context are live, destroyed once, the worker first.
        unsafe {
            ucp_worker_destroy(self.worker);
            ucp_cleanup(self.context);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{can_detect_failed_peers, ErrMode, Worker};
    use crate::tag;
    use std::ptr::null_mut;
    use ucx_sys::*;

    /// Two workers of a job of two over UCX's tcp on loopback, endpoints asking for `mode`,
    /// each knowing both addresses; `None` (with a note) where UCX's tcp is unavailable.
    fn tcp_pair(mode: ErrMode) -> Option<(Worker, Worker)> {
        let settings = [("TLS", "tcp"), ("NET_DEVICES", "lo")];
        let (Ok(mut w0), Ok(mut w1)) = (
            Worker::open(2, &settings, mode),
            Worker::open(2, &settings, mode),
        ) else {
            eprintln!("note: UCX's tcp transport unavailable here, test skipped");
            return None;
        };
        let cards = vec![w0.address().unwrap(), w1.address().unwrap()];
        w0.learn(&cards);
        w1.learn(&cards);
        Some((w0, w1))
    }

    /// Sends `payload` with `bits` from `from` to process `to` and drives both workers until
    /// UCX is done with it.
    fn send(from: &mut Worker, to: &Worker, dest: u32, bits: u64, payload: &[u8]) {
        let ep = from.ep(dest).unwrap();
        let param = ucp_request_param_t::default();
        // SAFETY: a live endpoint of `from`; `payload` outlives the send, which completes
        // before this returns.
        let request =
            unsafe { ucp_tag_send_nbx(ep, payload.as_ptr().cast(), payload.len(), bits, &param) };
        assert!(!ucs_ptr_is_err(request));
        if !request.is_null() {
            // SAFETY: `request` is `from`'s live send request, freed once below.
            while unsafe { ucp_request_check_status(request) } == UCS_INPROGRESS {
                from.progress();
                to.progress();
            }
            // SAFETY: as above.
            unsafe { ucp_request_free(request) };
        }
    }

    /// Credit that arrived after the receives for it were let go is dropped before the worker
    /// closes, and nothing else is: a message of the program's own stays for UCX to report.
    #[test]
    fn late_credit_is_dropped_and_nothing_else() {
        let Some((mut w0, mut w1)) = tcp_pair(ErrMode::None) else {
            return;
        };
        for _ in 0..6 {
            // As the engine sends credit: the number of messages, 4 bytes.
            send(&mut w1, &w0, 0, tag::credit_tag(1), &7u32.to_le_bytes());
        }
        let user = tag::send_tag(&ch4_core::Envelope {
            context: 0,
            source: 1,
            tag: 5,
        })
        .unwrap();
        send(&mut w1, &w0, 0, user, &[]);
        for _ in 0..1000 {
            w0.progress();
            w1.progress();
        }
        assert_eq!(w0.drop_late_credit(), 6, "every credit message");
        assert_eq!(w0.drop_late_credit(), 0, "once");
        let mut info = ucp_tag_recv_info_t::default();
        // SAFETY: a live worker; `info` is writable; the message is taken out (remove = 1)
        // and received below, so that UCX does not report it at destroy.
        let msg = unsafe { ucp_tag_probe_nb(w0.raw(), user, tag::EXACT, 1, &mut info) };
        assert!(!msg.is_null(), "the program's own message is still there");
        let param = ucp_request_param_t::default();
        // SAFETY: `msg` came from the probe above and is received once; it is empty.
        let request = unsafe { ucp_tag_msg_recv_nbx(w0.raw(), null_mut(), 0, msg, &param) };
        if !request.is_null() && !ucs_ptr_is_err(request) {
            // SAFETY: `w0`'s live receive request, freed once.
            while unsafe { ucp_request_check_status(request) } == UCS_INPROGRESS {
                w0.progress();
            }
            // SAFETY: as above.
            unsafe { ucp_request_free(request) };
        }
    }

    /// A rendezvous receive UCX has matched to a peer that then stops (it never progresses
    /// again, as a killed process) is not ended by UCX while the endpoint lives; closing the
    /// failed peer's endpoint (forced, peer-failure mode) ends it with an error, so the device
    /// need not wait out its cancel limit and destroy the worker.
    #[test]
    fn closing_a_failed_peers_endpoint_ends_its_matched_rendezvous() {
        let Some((mut w0, mut w1)) = tcp_pair(ErrMode::Peer) else {
            return;
        };
        // Rank 0 has an endpoint to rank 1 (as the killed-rank test's rank 0 does).
        w0.ep(1).unwrap();
        let big = vec![7u8; 8 << 20];
        let mut into = vec![0u8; 8 << 20];
        let param = ucp_request_param_t::default();
        let ep = w1.ep(0).unwrap();
        // SAFETY: a live endpoint of `w1`; `big` outlives the request, freed below.
        let sending = unsafe { ucp_tag_send_nbx(ep, big.as_ptr().cast(), big.len(), 9, &param) };
        assert!(ucs_ptr_is_ptr(sending), "an 8 MiB send goes by rendezvous");
        // SAFETY: `into` outlives the request, freed below; no callback.
        let receiving = unsafe {
            ucp_tag_recv_nbx(
                w0.raw(),
                into.as_mut_ptr().cast(),
                into.len(),
                9,
                !0,
                &param,
            )
        };
        assert!(ucs_ptr_is_ptr(receiving));
        // Let the request-to-send arrive and match — the first bytes of the data landing show
        // it did (twenty rounds of progress were not always enough on a loaded host, and an
        // unmatched receive belongs to no endpoint) — then rank 1 stops for good.
        let started = std::time::Instant::now();
        // SAFETY: `into` is alive; UCX writes it only inside the progress calls of this thread.
        while unsafe { std::ptr::read_volatile(into.as_ptr()) } != 7 {
            w1.progress();
            w0.progress();
            assert!(
                started.elapsed() < std::time::Duration::from_secs(5),
                "rank 1's data never began to arrive"
            );
        }
        let started = std::time::Instant::now();
        while started.elapsed() < std::time::Duration::from_millis(200) {
            w0.progress();
        }
        // SAFETY: `receiving` is `w0`'s live receive request.
        let before = unsafe { ucp_request_check_status(receiving) };
        assert_eq!(
            before, UCS_INPROGRESS,
            "UCX ends nothing while the endpoint lives"
        );
        assert_eq!(w0.close_failed(|g| g == 1), 1);
        let started = std::time::Instant::now();
        // SAFETY: as above.
        while unsafe { ucp_request_check_status(receiving) } == UCS_INPROGRESS {
            w0.progress();
            assert!(
                started.elapsed() < std::time::Duration::from_secs(5),
                "the receive outlived its peer's endpoint"
            );
        }
        // SAFETY: as above.
        let after = unsafe { ucp_request_check_status(receiving) };
        assert_ne!(after, UCS_OK, "ended with an error, not as if delivered");
        // SAFETY: both requests are live and freed once; `w1` is dropped after, which ends
        // its send.
        unsafe {
            ucp_request_free(receiving);
            ucp_request_free(sending);
        }
        w0.release_closes();
    }

    #[test]
    fn the_error_mode_is_none_or_peer() {
        assert_eq!(ErrMode::parse("none"), Some(ErrMode::None));
        assert_eq!(ErrMode::parse(" PEER "), Some(ErrMode::Peer));
        assert_eq!(ErrMode::parse("yes"), None);
        assert_eq!(ErrMode::parse(""), None);
        assert_eq!(ErrMode::parse(ErrMode::Peer.name()), Some(ErrMode::Peer));
    }

    #[test]
    fn only_shared_memory_transports_go_without_failure_detection() {
        assert!(!can_detect_failed_peers("posix,sysv,cma"));
        assert!(!can_detect_failed_peers("sm,self"));
        assert!(can_detect_failed_peers("tcp"));
        assert!(can_detect_failed_peers("posix,tcp"));
        assert!(can_detect_failed_peers("all"));
        assert!(can_detect_failed_peers("rc,sm"));
    }
}

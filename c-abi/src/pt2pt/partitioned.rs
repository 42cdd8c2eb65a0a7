//! Partitioned communication, the standard's chapter "Partitioned Point-to-Point
//! Communication" (MPI 4.1, chapter 4): `MPI_Psend_init`, `MPI_Precv_init`, `MPI_Pready`,
//! `MPI_Pready_range`, `MPI_Pready_list` and `MPI_Parrived`.
//!
//! A partitioned request is a persistent request of the library's (`abi::Req::Partitioned`):
//! each `MPI_Start` begins a round, and `MPI_Wait`/`MPI_Test` (and every function over sets of
//! requests) end it, the request staying, inactive, until `MPI_Request_free`.
//!
//! The design: one message per round, sent when the last partition is marked ready. MPI 4.1
//! lets an implementation move the data at any time after a partition is ready (section 4.1:
//! the partitions are a promise about the buffer, not a wire format), so waiting for the last
//! one is correct; what it gives up is moving early partitions while later ones are computed.
//! What it gains: a send and a receive may cut the same buffer into different partition counts
//! (MPI 4.1 allows it: only the type signatures of the whole buffers must match), and a round
//! needs one tag, not one per partition. Tags are the scarce resource here: a partitioned
//! message must never match the program's point-to-point receives, so it travels on the
//! communicator's collective context, whose only public path in the device is a schedule
//! (`ch4_core::schedule`), and whose tags are all taken except the few below the schedules'
//! range that the blocking collectives leave free ([`TAG_BASE`] ..). The receive side posts its
//! receive at `MPI_Start`, as a schedule that receives the message and then delivers it into
//! the program's buffer, so `MPI_Parrived` is true for a partition exactly when that schedule
//! has finished, that is, once the data is in place.
//!
//! Matching: MPI matches partitioned sends and receives by communicator, peer and tag in the
//! order of their initialization calls (section 4.2.1). The n-th `MPI_Psend_init` from A to B
//! with tag t and the n-th `MPI_Precv_init` at B from A with tag t fold (t, n) into the same
//! wire tag, and the device's non-overtaking order pairs their rounds. Two requests between the
//! same two processes whose (t, n) fold to the same wire tag are told apart only by the order
//! their rounds' messages leave, as the device's `MPI_Comm_create_group` tells apart creations
//! whose tags fold together.

use std::collections::HashMap;
use std::ffi::{c_int, c_void};

use ch4_core::schedule::Schedule;
use ch4_core::{ErrorKind, Status, Tag};

use crate::abi::{self, Handle, Req};
use crate::buffers::{rbuf_big, sbuf_big};
use crate::call::{call, null_arg, on_device, put};
use crate::requests::{decode, INACTIVE};
use crate::state::{DevReq, State};

/// The first wire tag of partitioned rounds on a collective context: above the blocking
/// collectives' fixed tags (1 to 10, `ch4_core::coll`), below the schedules' range (1024 up).
const TAG_BASE: Tag = 64;
/// How many wire tags the rounds fold into (a schedule may use up to `PHASES` tags from its
/// own; ours use the first only, so the range ends at 959 + 63, below 1024).
const TAG_SPAN: u64 = 896;

/// One partitioned request.
pub(crate) struct Partitioned {
    /// A send (`MPI_Psend_init`) or a receive (`MPI_Precv_init`).
    send: bool,
    /// The buffer's address (the program keeps it valid while the request exists).
    buf: usize,
    /// The partition count.
    partitions: usize,
    /// The elements of the whole buffer (partitions × count).
    total: i64,
    /// The datatype handle.
    datatype: Handle,
    /// The destination or source (C's numbering).
    peer: c_int,
    /// The program's tag.
    tag: c_int,
    /// The communicator handle.
    comm: Handle,
    /// The wire tag of its rounds on the communicator's collective context.
    wire_tag: Tag,
    /// Which partitions are ready in this round (a send's), and how many.
    ready: Vec<bool>,
    readied: usize,
    /// Whether a round is under way (`MPI_Start` to the completion that ends it).
    active: bool,
    /// The schedule moving this round's message, once it started, and its VCI.
    round: Option<DevReq>,
}

/// The partitioned requests of the process.
#[derive(Default)]
pub(crate) struct Partitions {
    /// By index (`abi::partitioned_out`), `None` once freed.
    reqs: Vec<Option<Partitioned>>,
    /// How many requests were initialized per (communicator, peer, tag, send): the n of the
    /// matching rule above.
    inits: HashMap<(Handle, c_int, c_int, bool), u64>,
}

#[cold]
fn freed() -> ch4::Error {
    ch4::Error::new(ErrorKind::Request, "a partitioned request that was freed")
}

#[cold]
fn arg(what: String) -> ch4::Error {
    ch4::Error::new(ErrorKind::Arg, what)
}

/// Runs `f` on partitioned request `i`.
fn with<R>(st: &State, i: usize, f: impl FnOnce(&mut Partitioned) -> R) -> ch4::Result<R> {
    st.partitioned
        .lock()
        .reqs
        .get_mut(i)
        .and_then(Option::as_mut)
        .map(f)
        .ok_or_else(freed)
}

/// Makes a partitioned request.
///
/// # Safety
/// `request` is null or writable.
#[allow(clippy::too_many_arguments)]
unsafe fn init(
    func: &'static str,
    send: bool,
    buf: usize,
    partitions: c_int,
    count: i64,
    datatype: Handle,
    peer: c_int,
    tag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    call(comm, func, |st| {
        if request.is_null() {
            return Err(null_arg("the request"));
        }
        let c = st.comm(comm)?;
        let parts = usize::try_from(partitions)
            .map_err(|_| arg(format!("partition count {partitions} is negative")))?;
        if count < 0 {
            return Err(ch4::Error::new(
                ErrorKind::Count,
                format!("count {count} is negative"),
            ));
        }
        let total = i64::try_from(parts)
            .ok()
            .and_then(|p| p.checked_mul(count))
            .ok_or_else(|| {
                ch4::Error::new(
                    ErrorKind::Count,
                    "partitions × count is more elements than an MPI_Count holds",
                )
            })?;
        if peer == abi::ANY_SOURCE {
            return Err(ch4::Error::new(
                ErrorKind::Rank,
                "partitioned communication takes no MPI_ANY_SOURCE (MPI 4.1, section 4.2.2)",
            ));
        }
        let size = st.device(c.vci)?.size(c.id)?;
        if peer != abi::PROC_NULL && !(0..size).contains(&peer) {
            return Err(ch4::Error::new(
                ErrorKind::Rank,
                format!("rank {peer} is outside the communicator (of size {size})"),
            ));
        }
        let tag_ub = st.device(c.vci)?.tag_ub();
        if !(0..=tag_ub).contains(&tag) {
            return Err(ch4::Error::new(
                ErrorKind::Tag,
                format!("tag {tag} is outside 0..={tag_ub} (no MPI_ANY_TAG here)"),
            ));
        }
        // The buffer made once now, so that a count beyond what the device's buffers take,
        // or a datatype not committed, fails here rather than at a start.
        // SAFETY: the buffer is only described, not read or written.
        unsafe {
            if send {
                sbuf_big(st, buf as *const c_void, total, datatype).map(drop)?;
            } else {
                rbuf_big(st, buf as *mut c_void, total, datatype).map(drop)?;
            }
        }
        let mut t = st.partitioned.lock();
        let n = t.inits.entry((comm, peer, tag, send)).or_insert(0);
        let fold = (tag as u64).wrapping_mul(7919).wrapping_add(*n) % TAG_SPAN;
        *n += 1;
        let p = Partitioned {
            send,
            buf,
            partitions: parts,
            total,
            datatype,
            peer,
            tag,
            comm,
            wire_tag: TAG_BASE + fold as Tag,
            ready: vec![false; parts],
            readied: 0,
            active: false,
            round: None,
        };
        let i = match t.reqs.iter().position(Option::is_none) {
            Some(i) => {
                t.reqs[i] = Some(p);
                i
            }
            None => {
                t.reqs.push(Some(p));
                t.reqs.len() - 1
            }
        };
        // SAFETY: checked non-null; the caller's contract.
        unsafe { request.write(abi::partitioned_out(i)) };
        Ok(())
    })
}

/// `MPI_Psend_init`: a partitioned send of `partitions` partitions of `count` elements each.
///
/// # Safety
/// `buf` holds `partitions × count` elements of `datatype`, readable while a round is under
/// way; `request` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Psend_init(
    buf: *const c_void,
    partitions: c_int,
    count: i64,
    datatype: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
    _info: Handle,
    request: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        init(
            "MPI_Psend_init",
            true,
            buf as usize,
            partitions,
            count,
            datatype,
            dest,
            tag,
            comm,
            request,
        )
    }
}

/// `MPI_Precv_init`: a partitioned receive of `partitions` partitions of `count` elements.
///
/// # Safety
/// `buf` has room for `partitions × count` elements of `datatype`, the request's alone while
/// a round is under way; `request` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Precv_init(
    buf: *mut c_void,
    partitions: c_int,
    count: i64,
    datatype: Handle,
    source: c_int,
    tag: c_int,
    comm: Handle,
    _info: Handle,
    request: *mut Handle,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        init(
            "MPI_Precv_init",
            false,
            buf as usize,
            partitions,
            count,
            datatype,
            source,
            tag,
            comm,
            request,
        )
    }
}

/// What a round's schedule needs, copied out of the table so that no table lock is held while
/// the device works.
struct Launch {
    send: bool,
    buf: usize,
    total: i64,
    datatype: Handle,
    peer: c_int,
    comm: Handle,
    wire_tag: Tag,
}

impl Launch {
    fn of(p: &Partitioned) -> Launch {
        Launch {
            send: p.send,
            buf: p.buf,
            total: p.total,
            datatype: p.datatype,
            peer: p.peer,
            comm: p.comm,
            wire_tag: p.wire_tag,
        }
    }

    /// Starts the round's schedule: the whole buffer's message (a send, once every partition
    /// is ready), or its receive and delivery into the program's buffer (a receive, at
    /// `MPI_Start`).
    fn start(&self, st: &State) -> ch4::Result<DevReq> {
        let c = st.comm(self.comm)?;
        let mut s = Schedule::new(c.id);
        if self.send {
            // SAFETY: the program promised (MPI_Psend_init) that the buffer holds the elements
            // while the round is under way; they are copied into the schedule here.
            let data =
                unsafe { sbuf_big(st, self.buf as *const c_void, self.total, self.datatype) }?
                    .to_vec()?;
            let from = s.buffer(data);
            s.send(self.peer, from);
        } else {
            // SAFETY: the program promised (MPI_Precv_init) that the buffer is the request's
            // alone while the round is under way, which lasts until the schedule ends.
            let out = unsafe { rbuf_big(st, self.buf as *mut c_void, self.total, self.datatype) }?;
            let into = s.scratch(out.capacity());
            let out = s.output(out);
            s.recv(self.peer, into);
            s.deliver(into, out, 0);
        }
        let h = st.device(c.vci)?.start_schedule(s, Some(self.wire_tag))?;
        Ok(DevReq::new(h, c.vci))
    }
}

/// `MPI_Start` of partitioned request `i`: a new round (a receive posts its message's
/// receive now; a send waits for its partitions).
pub(crate) fn start(st: &State, i: usize) -> ch4::Result<()> {
    let launch = with(st, i, |p| {
        if p.active {
            return Err(ch4::Error::new(
                ErrorKind::Request,
                "the partitioned request is already active",
            ));
        }
        p.active = true;
        p.round = None;
        p.ready.iter_mut().for_each(|r| *r = false);
        p.readied = 0;
        Ok((!p.send || p.partitions == 0).then(|| Launch::of(p)))
    })??;
    if let Some(l) = launch {
        launched(st, i, l.start(st))?;
    }
    Ok(())
}

/// Records the schedule of request `i`'s round, or ends the round if it could not start.
fn launched(st: &State, i: usize, r: ch4::Result<DevReq>) -> ch4::Result<()> {
    match r {
        Ok(h) => with(st, i, |p| p.round = Some(h)),
        Err(e) => {
            with(st, i, |p| p.active = false)?;
            Err(e)
        }
    }
}

/// The send request behind handle `request`, for `MPI_Pready`.
fn send_request(request: Handle) -> ch4::Result<usize> {
    match decode(request)? {
        Req::Partitioned(i) => Ok(i),
        _ => Err(ch4::Error::new(
            ErrorKind::Request,
            "not a partitioned request (MPI_Psend_init)",
        )),
    }
}

/// Marks `partitions` of send request `request` ready; the round's message leaves with the
/// last one.
fn pready(
    st: &State,
    request: Handle,
    partitions: &mut dyn Iterator<Item = c_int>,
) -> ch4::Result<()> {
    let i = send_request(request)?;
    let launch = with(st, i, |p| {
        if !p.send {
            return Err(ch4::Error::new(
                ErrorKind::Request,
                "MPI_Pready on a partitioned receive",
            ));
        }
        if !p.active {
            return Err(ch4::Error::new(
                ErrorKind::Request,
                "MPI_Pready on an inactive partitioned request (MPI_Start it first)",
            ));
        }
        for k in partitions {
            let slot = usize::try_from(k)
                .ok()
                .and_then(|k| p.ready.get_mut(k))
                .ok_or_else(|| {
                    arg(format!(
                        "partition {k} is outside 0..{} of the request",
                        p.partitions
                    ))
                })?;
            if *slot {
                return Err(arg(format!("partition {k} is already ready in this round")));
            }
            *slot = true;
            p.readied += 1;
        }
        Ok((p.readied == p.partitions && p.round.is_none()).then(|| Launch::of(p)))
    })??;
    if let Some(l) = launch {
        launched(st, i, l.start(st))?;
    }
    Ok(())
}

/// `MPI_Pready`.
#[no_mangle]
pub extern "C" fn MPI_Pready(partition: c_int, request: Handle) -> c_int {
    call(abi::COMM_WORLD, "MPI_Pready", |st| {
        pready(st, request, &mut std::iter::once(partition))
    })
}

/// `MPI_Pready_range`: partitions `partition_low` to `partition_high`, both included.
#[no_mangle]
pub extern "C" fn MPI_Pready_range(
    partition_low: c_int,
    partition_high: c_int,
    request: Handle,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Pready_range", |st| {
        if partition_low > partition_high {
            return Err(arg(format!(
                "the range {partition_low}..={partition_high} is empty"
            )));
        }
        pready(st, request, &mut (partition_low..=partition_high))
    })
}

/// `MPI_Pready_list`.
///
/// # Safety
/// `array_of_partitions` has `length` ints.
#[no_mangle]
pub unsafe extern "C" fn MPI_Pready_list(
    length: c_int,
    array_of_partitions: *const c_int,
    request: Handle,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Pready_list", |st| {
        let n = crate::datatype::elements(length)?;
        if n == 0 {
            return Ok(());
        }
        if array_of_partitions.is_null() {
            return Err(null_arg("the array of partitions"));
        }
        // SAFETY: the caller's contract: `n` ints.
        let list = unsafe { std::slice::from_raw_parts(array_of_partitions, n) };
        pready(st, request, &mut list.iter().copied())
    })
}

/// `MPI_Parrived`: whether partition `partition` of a partitioned receive is in place. With
/// one message per round, every partition arrives when the round's message has been
/// delivered; on an inactive request (its round completed) the answer is true.
///
/// # Safety
/// `flag` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Parrived(
    request: Handle,
    partition: c_int,
    flag: *mut c_int,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Parrived", |st| {
        if flag.is_null() {
            return Err(null_arg("the flag"));
        }
        let Req::Partitioned(i) = decode(request)? else {
            return Err(ch4::Error::new(
                ErrorKind::Request,
                "not a partitioned request (MPI_Precv_init)",
            ));
        };
        let (active, round) = with(st, i, |p| {
            if p.send {
                return Err(ch4::Error::new(
                    ErrorKind::Request,
                    "MPI_Parrived on a partitioned send",
                ));
            }
            if usize::try_from(partition).map_or(true, |k| k >= p.partitions) {
                return Err(arg(format!(
                    "partition {partition} is outside 0..{} of the request",
                    p.partitions
                )));
            }
            Ok((p.active, p.round))
        })??;
        let arrived = match (active, round) {
            (false, _) => true,
            (true, None) => false,
            (true, Some(r)) => {
                let mut dev = st.device(r.vci())?;
                dev.progress()?;
                dev.is_done(r.handle())?
            }
        };
        // SAFETY: checked non-null; the caller's contract.
        unsafe { put(flag, c_int::from(arrived)) };
        Ok(())
    })
}

/// Whether partitioned request `i` is active (a round under way).
pub(crate) fn active(st: &State, i: usize) -> ch4::Result<bool> {
    with(st, i, |p| p.active)
}

/// The status a round of request `i` completes with: the peer, the program's tag, the whole
/// buffer's bytes, and the schedule's error if it had one.
fn round_status(st: &State, i: usize, s: &Status) -> ch4::Result<Status> {
    let (peer, tag, buf, total, dt, send) = with(st, i, |p| {
        (p.peer, p.tag, p.buf, p.total, p.datatype, p.send)
    })?;
    // SAFETY: the buffer is only described, not read or written.
    let bytes = unsafe {
        if send {
            sbuf_big(st, buf as *const c_void, total, dt)?.packed_len()
        } else {
            rbuf_big(st, buf as *mut c_void, total, dt)?.capacity()
        }
    };
    Ok(Status {
        source: peer,
        tag,
        bytes: if peer == abi::PROC_NULL { 0 } else { bytes },
        cancelled: false,
        error: s.error,
    })
}

/// Completes the round of partitioned request `i` (`blocking`: waits; else only if it is
/// done): its status, `None` while it runs, the empty status for an inactive request.
pub(crate) fn complete(st: &State, i: usize, blocking: bool) -> ch4::Result<Option<Status>> {
    let mut idle = 0u32;
    loop {
        let (active, round, send) = with(st, i, |p| (p.active, p.round, p.send))?;
        if !active {
            return Ok(Some(INACTIVE));
        }
        let Some(r) = round else {
            // A send whose partitions are not all ready yet.
            if !blocking {
                st.progress()?;
                return Ok(None);
            }
            if st.single() && send {
                return Err(ch4::Error::new(
                    ErrorKind::Request,
                    "a wait on a partitioned send some of whose partitions are not ready \
                     (MPI_Pready) can never complete",
                ));
            }
            idle = if st.progress()? == 0 { idle + 1 } else { 0 };
            st.pause(idle)?;
            continue;
        };
        let done = if blocking {
            Some(on_device!(st, r.vci(), |b| b.wait_status(r.handle()))?)
        } else {
            st.device(r.vci())?.test_status(r.handle())?
        };
        let Some(s) = done else {
            return Ok(None);
        };
        let status = round_status(st, i, &s)?;
        with(st, i, |p| {
            p.active = false;
            p.round = None;
        })?;
        return Ok(Some(status));
    }
}

/// Where the round of request `i` stands without completing it: `None` when inactive, else
/// its status once complete.
pub(crate) fn peek(st: &State, i: usize) -> ch4::Result<Option<Option<Status>>> {
    let (active, round) = with(st, i, |p| (p.active, p.round))?;
    if !active {
        return Ok(None);
    }
    let Some(r) = round else {
        return Ok(Some(None));
    };
    let dev = st.device(r.vci())?;
    if !dev.is_done(r.handle())? {
        return Ok(Some(None));
    }
    let s = dev.peek_status(r.handle()).unwrap_or(INACTIVE);
    drop(dev);
    Ok(Some(Some(round_status(st, i, &s)?)))
}

/// `MPI_Request_free` of partitioned request `i`: a round under way completes in the
/// background.
pub(crate) fn free(st: &State, i: usize) -> ch4::Result<()> {
    let p = st
        .partitioned
        .lock()
        .reqs
        .get_mut(i)
        .and_then(Option::take)
        .ok_or_else(freed)?;
    if let Some(r) = p.round {
        st.detach(r);
    }
    Ok(())
}

/// A partitioned round cannot be cancelled here: `MPI_Cancel` fails on it.
pub(crate) fn cancel(_st: &State, _i: usize) -> ch4::Result<()> {
    Err(ch4::Error::new(
        ErrorKind::Request,
        "a partitioned request cannot be cancelled",
    ))
}

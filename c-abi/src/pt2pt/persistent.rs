//! Persistent requests, the standard's "Persistent Communication Requests": `MPI_Send_init`,
//! `MPI_Ssend_init`, `MPI_Rsend_init`, `MPI_Bsend_init`, `MPI_Recv_init` (each with its `_c`
//! form), `MPI_Start` and `MPI_Startall` (which also start partitioned requests).
//!
//! A persistent request is the library's, not the device's: it records the call's arguments in
//! the process's table (`state::Persistent`), and each `MPI_Start` posts a fresh device
//! operation from them. Its handle stays valid, inactive, after it completes until
//! `MPI_Request_free`; the completion functions (`requests`) tell it by its handle's kind.

use std::ffi::{c_int, c_void};

use ch4_core::{ErrorKind, SendMode};

use crate::abi::{self, rank_in, tag_in, Handle, Req};
use crate::buffers::{rbuf_big, sbuf_big};
use crate::call::{call, null_arg};
use crate::datatype;
use crate::derived;
use crate::requests::decode;
use crate::state::{Persistent, State};

/// Makes a persistent request.
///
/// # Safety
/// `request` is writable.
unsafe fn persistent_init(
    comm: Handle,
    func: &'static str,
    p: Persistent,
    request: *mut Handle,
) -> c_int {
    call(comm, func, |st| {
        if request.is_null() {
            return Err(null_arg("the request"));
        }
        let vci = st.comm(comm)?.vci;
        let d = derived::desc(st, p.datatype)?;
        if p.count < 0 || !d.committed {
            return Err(ch4::Error::new(
                ErrorKind::Arg,
                "a negative count or an uncommitted datatype",
            ));
        }
        let i = st.add_persistent(Persistent { vci, ..p });
        // SAFETY: checked non-null; the caller's contract.
        unsafe { request.write(abi::persistent_out(i)) };
        Ok(())
    })
}

macro_rules! send_init {
    ($name:ident, $name_c:ident, $mode:expr, $buffered:expr) => {
        #[doc = concat!("`", stringify!($name), "`: a persistent send, started by `MPI_Start`.")]
        ///
        /// # Safety
        /// `buf` holds `count` elements of `datatype` whenever the request is active;
        /// `request` is writable.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            buf: *const c_void,
            count: c_int,
            datatype: Handle,
            dest: c_int,
            tag: c_int,
            comm: Handle,
            request: *mut Handle,
        ) -> c_int {
            let p = send(buf, i64::from(count), datatype, dest, tag, comm, $mode, $buffered);
            // SAFETY: the caller's contract.
            unsafe { persistent_init(comm, stringify!($name), p, request) }
        }

        #[doc = concat!("`", stringify!($name_c), "`: `", stringify!($name), "` of an `MPI_Count` of elements.")]
        ///
        /// # Safety
        #[doc = concat!("As `", stringify!($name), "`.")]
        #[no_mangle]
        pub unsafe extern "C" fn $name_c(
            buf: *const c_void,
            count: i64,
            datatype: Handle,
            dest: c_int,
            tag: c_int,
            comm: Handle,
            request: *mut Handle,
        ) -> c_int {
            let p = send(buf, count, datatype, dest, tag, comm, $mode, $buffered);
            // SAFETY: the caller's contract.
            unsafe { persistent_init(comm, stringify!($name_c), p, request) }
        }
    };
}

/// The record of a persistent send.
fn send(
    buf: *const c_void,
    count: i64,
    datatype: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
    mode: SendMode,
    buffered: bool,
) -> Persistent {
    Persistent {
        send: Some(mode),
        buffered,
        buf: buf as usize,
        count,
        datatype,
        peer: dest,
        tag,
        comm,
        vci: 0,
        active: None,
        collective: None,
    }
}

send_init!(MPI_Send_init, MPI_Send_init_c, SendMode::Standard, false);
send_init!(
    MPI_Ssend_init,
    MPI_Ssend_init_c,
    SendMode::Synchronous,
    false
);
send_init!(MPI_Rsend_init, MPI_Rsend_init_c, SendMode::Ready, false);
// A persistent buffered send: each start is an `MPI_Ibsend` of the data then in the buffer.
send_init!(MPI_Bsend_init, MPI_Bsend_init_c, SendMode::Standard, true);

/// The record of a persistent receive.
fn recv(
    buf: *mut c_void,
    count: i64,
    datatype: Handle,
    source: c_int,
    tag: c_int,
    comm: Handle,
) -> Persistent {
    Persistent {
        send: None,
        buffered: false,
        buf: buf as usize,
        count,
        datatype,
        peer: source,
        tag,
        comm,
        vci: 0,
        active: None,
        collective: None,
    }
}

/// `MPI_Recv_init`: a persistent receive, started by `MPI_Start`.
///
/// # Safety
/// `buf` has room for `count` elements of `datatype` and is the request's alone whenever it
/// is active; `request` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Recv_init(
    buf: *mut c_void,
    count: c_int,
    datatype: Handle,
    source: c_int,
    tag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    let p = recv(buf, i64::from(count), datatype, source, tag, comm);
    // SAFETY: the caller's contract.
    unsafe { persistent_init(comm, "MPI_Recv_init", p, request) }
}

/// `MPI_Recv_init_c`: `MPI_Recv_init` of an `MPI_Count` of elements.
///
/// # Safety
/// As `MPI_Recv_init`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Recv_init_c(
    buf: *mut c_void,
    count: i64,
    datatype: Handle,
    source: c_int,
    tag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    let p = recv(buf, count, datatype, source, tag, comm);
    // SAFETY: the caller's contract.
    unsafe { persistent_init(comm, "MPI_Recv_init_c", p, request) }
}

/// Starts persistent request `c`.
fn start(st: &State, c: Handle) -> ch4::Result<()> {
    let i = match decode(c)? {
        Req::Persistent(i) => i,
        Req::Partitioned(i) => return super::partitioned::start(st, i),
        _ => {
            return Err(ch4::Error::new(
                ErrorKind::Request,
                "only a persistent request can be started",
            ))
        }
    };
    let (active, send, buffered, buf, count, dt, peer, tag, comm, collective) = st
        .with_persistent(i, |p| {
            (
                p.active.is_some(),
                p.send,
                p.buffered,
                p.buf,
                p.count,
                p.datatype,
                p.peer,
                p.tag,
                p.comm,
                p.collective.clone(),
            )
        })?;
    if active {
        return Err(ch4::Error::new(
            ErrorKind::Request,
            "the persistent request is already active",
        ));
    }
    if let Some((plan, tag)) = collective {
        let h = crate::collectives::nonblocking::start_persistent(st, comm, &plan, tag)?;
        st.with_persistent(i, |p| p.active = Some(h))?;
        return Ok(());
    }
    let c = st.comm(comm)?;
    let id = c.id;
    let h = if buffered {
        // SAFETY: the program promised (MPI_Bsend_init) that the buffer holds the elements;
        // they are copied before this returns.
        let bytes = unsafe { sbuf_big(st, buf as *const c_void, count, dt) }?.to_vec()?;
        super::buffered::bsend(st, &bytes, peer, tag, comm)?
    } else if let Some(mode) = send {
        // SAFETY: the program promised (MPI_Send_init) that the buffer holds the elements and
        // stays untouched while the request is active, which lasts until it completes.
        let sbuf = unsafe { sbuf_big(st, buf as *const c_void, count, dt) }?;
        st.device(c.vci)?
            .isend(id, rank_in(peer), tag_in(tag), sbuf, mode)?
    } else {
        // SAFETY: as above, for a receive buffer (MPI_Recv_init).
        let rbuf = unsafe { rbuf_big(st, buf as *mut c_void, count, dt) }?;
        st.device(c.vci)?
            .irecv(id, rank_in(peer), tag_in(tag), rbuf)?
    };
    st.with_persistent(i, |p| p.active = Some(h))?;
    Ok(())
}

/// `MPI_Start`.
///
/// # Safety
/// `request` is readable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Start(request: *mut Handle) -> c_int {
    call(abi::COMM_WORLD, "MPI_Start", |st| {
        if request.is_null() {
            return Err(null_arg("the request"));
        }
        // SAFETY: the caller's contract.
        start(st, unsafe { request.read() })
    })
}

/// `MPI_Startall`.
///
/// # Safety
/// `array_of_requests` has `count` readable handles.
#[no_mangle]
pub unsafe extern "C" fn MPI_Startall(count: c_int, array_of_requests: *mut Handle) -> c_int {
    call(abi::COMM_WORLD, "MPI_Startall", |st| {
        let n = datatype::elements(count)?;
        if n == 0 {
            return Ok(());
        }
        if array_of_requests.is_null() {
            return Err(null_arg("the array of requests"));
        }
        // SAFETY: the caller's contract: `n` handles.
        let reqs = unsafe { std::slice::from_raw_parts(array_of_requests, n) };
        reqs.iter().try_for_each(|&c| start(st, c))
    })
}

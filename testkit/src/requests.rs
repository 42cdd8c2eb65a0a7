//! Posting requests from a test without tying the test's buffers to the device's lifetime.

use std::sync::Mutex;

use ch4_core::buffer::{RecvBuf, SendBuf};
use ch4_core::transport::{Netmod, Shm};
use ch4_core::{Device, Rank, ReqHandle, SendMode, Tag};

/// Posts a receive of up to `cap` bytes from `src` with `tag` on the world communicator into
/// a buffer leaked for the rest of the test, and returns the request and that buffer (read it
/// only once the request completed). Leaking keeps a test free of lifetimes a network's
/// asynchronous writes would otherwise need; a test leaks a few kilobytes.
///
/// # Panics
///
/// If the device refuses the receive (a test's failure).
#[allow(unsafe_code)]
pub fn irecv_leaked<N: Netmod, S: Shm>(
    d: &mut Device<N, S>,
    src: Rank,
    tag: Tag,
    cap: usize,
) -> (ReqHandle, &'static mut [u8]) {
    let buf = leaked_buffer(cap);
    let ptr: *mut [u8] = buf;
    // SAFETY: the buffer is leaked, so it outlives every request; the device writes it only
    // through the request, and the caller reads it only after the request completed.
    let rbuf = unsafe { RecvBuf::borrowed(&mut *ptr) };
    let world = d.world();
    let h = d.irecv(world, src, tag, rbuf).expect("irecv");
    // SAFETY: as above: the one view the test holds, read after completion.
    (h, unsafe { &mut *ptr })
}

/// The addresses of the buffers [`leaked_buffer`] made: reachable from this static, they are
/// not what LeakSanitizer reports at exit (`scripts/asan.sh`), which is then left with the
/// library's leaks, if any.
static LEAKED: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// A zeroed buffer of `cap` bytes that lives for the rest of the test, for a request the test
/// may leave pending or read only after completion (see [`irecv_leaked`]).
pub fn leaked_buffer(cap: usize) -> &'static mut [u8] {
    let buf: &'static mut [u8] = Box::leak(vec![0u8; cap].into_boxed_slice());
    LEAKED
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(buf.as_ptr() as usize);
    buf
}

/// Sends `data` (owned by the request) to `dest` with `tag` on the world communicator.
///
/// # Panics
///
/// If the device refuses the send (a test's failure).
pub fn isend_owned<N: Netmod, S: Shm>(
    d: &mut Device<N, S>,
    dest: Rank,
    tag: Tag,
    data: Vec<u8>,
    mode: SendMode,
) -> ReqHandle {
    let world = d.world();
    d.isend(world, dest, tag, SendBuf::owned(data), mode)
        .expect("isend")
}

//! Nonblocking operations that own their buffer, the shape io_uring users know: the buffer
//! moves into the request and comes back when the operation completes.
//!
//! No scope is needed, because nothing is borrowed: the request keeps the buffer, so the
//! network may read or write it for as long as it likes. What happens to the buffer when the
//! request is not completed by its owner:
//!
//! - dropped while pending: a receive is cancelled if it has not matched yet; otherwise (and for
//!   a send) the operation goes on without its owner, as after MPI_Request_free, and the rank
//!   keeps the buffer until the device reports the operation complete, then frees it;
//! - `mem::forget`: the buffer leaks, and so does the rank's device (the request holds a
//!   reference to it); nothing is freed while the network may touch it.

use ch4_core::blocking::{Blocking, Shared};
use ch4_core::buffer::{RecvBuf, SendBuf};
use ch4_core::datatype::{as_bytes, as_bytes_mut, Pod};
use ch4_core::transport::{Netmod, Shm};
use ch4_core::{Device, Error, ErrorKind, ReqHandle, Result, Status};

use crate::{Detached, RankState, SelectedNetmod, SelectedShm, Single, ThreadLevel};

/// A pending operation that owns its buffer; [`OwnedRequest::wait`] hands the buffer back with
/// the outcome. Made by [`Communicator::isend_owned`](crate::Communicator::isend_owned),
/// [`Communicator::irecv_owned`](crate::Communicator::irecv_owned) and
/// [`Message::irecv_owned`](crate::Message::irecv_owned). See the module documentation for
/// what dropping or forgetting one does.
///
/// ```
/// ch4::threads::Threads::new(2).run(|ctx| {
///     let world = ctx.world();
///     let peer = 1 - world.rank();
///     // No scope and no borrow: both buffers travel with their requests.
///     let recv = world.irecv_owned(vec![0u32; 4], peer, 0)?;
///     let send = world.isend_owned(vec![world.rank() as u32; 4], peer, 0)?;
///     let (got, status) = recv.wait();
///     assert_eq!((got, status?.bytes), (vec![peer as u32; 4], 16));
///     let (_sent, status) = send.wait();
///     status.map(drop)
/// })?;
/// # Ok::<(), ch4::Error>(())
/// ```
#[must_use = "an owned request should be waited for to get its buffer and outcome back"]
pub struct OwnedRequest<
    T: Pod + Send,
    N: Netmod = SelectedNetmod,
    S: Shm = SelectedShm,
    L: ThreadLevel = Single,
> {
    rank: L::Shared<RankState<N, S, L>>,
    /// The VCI whose device holds the request.
    vci: usize,
    handle: ReqHandle,
    /// `Some` until handed back by `wait`.
    buf: Option<Vec<T>>,
    receive: bool,
}

impl<T: Pod + Send, N: Netmod, S: Shm, L: ThreadLevel> OwnedRequest<T, N, S, L> {
    /// Starts a send of `buf` with `start`, which hands the device a send buffer over it.
    pub(crate) fn start_send(
        rank: L::Shared<RankState<N, S, L>>,
        vci: usize,
        buf: Vec<T>,
        start: impl FnOnce(&mut Device<N, S>, SendBuf) -> Result<ReqHandle>,
    ) -> Result<OwnedRequest<T, N, S, L>> {
        rank.reap_detached();
        // SAFETY: the bytes live in `buf`'s heap allocation, which the request owns and never
        // touches, resizes or frees while the device may read it: `wait` hands it back only
        // once the operation is complete or released, `Drop` keeps it with the rank until the
        // device has let go of it, and `mem::forget` leaks it. Moving the request moves the
        // vector's pointer, not the allocation.
        let sbuf = unsafe { SendBuf::borrowed(as_bytes(&buf)) };
        let handle = start(&mut *rank.device(vci)?, sbuf)?;
        Ok(OwnedRequest {
            rank,
            vci,
            handle,
            buf: Some(buf),
            receive: false,
        })
    }

    /// Starts a receive into `buf` with `start`, which hands the device a receive buffer over
    /// it.
    pub(crate) fn start_recv(
        rank: L::Shared<RankState<N, S, L>>,
        vci: usize,
        mut buf: Vec<T>,
        start: impl FnOnce(&mut Device<N, S>, RecvBuf) -> Result<ReqHandle>,
    ) -> Result<OwnedRequest<T, N, S, L>> {
        rank.reap_detached();
        // SAFETY: as in `start_send`: the allocation stays with the request, untouched, until
        // the device is done writing it.
        let rbuf = unsafe { RecvBuf::borrowed(as_bytes_mut(&mut buf)) };
        let handle = start(&mut *rank.device(vci)?, rbuf)?;
        Ok(OwnedRequest {
            rank,
            vci,
            handle,
            buf: Some(buf),
            receive: true,
        })
    }

    /// Blocks until the operation completes and hands the buffer back with the outcome: the
    /// status, or the error the operation completed with (a truncated receive's buffer holds
    /// what fitted, and the error's [`Error::status`](crate::Error::status) the source, tag and byte count).
    ///
    /// Called from inside a reduction operator, where the device is busy, the buffer cannot be
    /// taken from it: the rank keeps it until the operation completes, and an empty vector
    /// comes back with the error.
    pub fn wait(mut self) -> (Vec<T>, Result<Status>) {
        self.finish()
    }

    /// [`OwnedRequest::wait`] on a request not consumed (a future's last poll): hands the
    /// buffer over; the request then has none, and its drop does nothing.
    fn finish(&mut self) -> (Vec<T>, Result<Status>) {
        let buf = self.buf.take().unwrap_or_default();
        let mut dev = match self.rank.device(self.vci) {
            Ok(dev) => dev,
            Err(e) => {
                if self.rank.is_finalized() {
                    // A finalized device never runs again: nothing will touch the buffer.
                    return (buf, Err(e));
                }
                self.keep_with_rank(buf);
                return (Vec::new(), Err(e));
            }
        };
        if L::YIELDS {
            // Other threads call meanwhile: the wait lets go of the device between polls.
            drop(dev);
            let outcome = Shared(&self.rank.vci(self.vci)).wait_or_abandon(self.handle);
            return (buf, outcome);
        }
        let outcome = take_outcome(&mut *dev, self.handle);
        (buf, outcome)
    }

    /// Makes one round of progress; `Ok(true)` once the operation has completed (then
    /// [`OwnedRequest::wait`] returns at once).
    pub fn test(&mut self) -> Result<bool> {
        advance(&mut *self.rank.device(self.vci)?, self.handle)
    }

    /// Asks to cancel the operation (MPI_Cancel); still wait for it: its status's `cancelled`
    /// says whether the cancel took effect.
    pub fn cancel(&self) -> Result<()> {
        self.rank.device(self.vci)?.cancel(self.handle)
    }

    /// Whether this is a receive (else a send).
    pub fn is_receive(&self) -> bool {
        self.receive
    }

    /// Keeps `buf` with the rank until the device reports this request complete.
    fn keep_with_rank(&self, buf: Vec<T>) {
        match self.rank.detached() {
            Some(mut detached) => detached.push(Detached {
                vci: self.vci,
                handle: self.handle,
                _buffer: Box::new(buf),
            }),
            // Unreachable (the list is only held while it is reaped, which drops no request,
            // and at the threaded levels it waits for another thread's hold to end); leaking
            // is the safe way out.
            None => std::mem::forget(buf),
        }
    }
}

/// One round of progress for request `h` unless it is complete: whether it is now (a peer
/// found gone when nothing moved fails the request, as a wait's idle poll does).
#[inline(always)]
fn advance<N: Netmod, S: Shm>(dev: &mut Device<N, S>, h: ReqHandle) -> Result<bool> {
    if dev.is_done(h)? {
        return Ok(true);
    }
    if dev.progress()? == 0 {
        dev.fail_if_peer_gone(h);
    }
    dev.is_done(h)
}

/// The outcome of request `h`, complete or waited for on `dev`; the request is gone afterwards.
#[inline(always)]
fn take_outcome<N: Netmod, S: Shm>(dev: &mut Device<N, S>, h: ReqHandle) -> Result<Status> {
    match dev.wait(h) {
        Ok(st) => Ok(st),
        Err(e) => {
            // Completed with an error, the request is already gone; anything else must not
            // keep a reference to the buffer handed back.
            dev.release(h);
            Err(e)
        }
    }
}

/// Pinning promises nothing here: the request refers to no part of itself (its buffer lives
/// on the heap, and the device points into that), so a pinned one may move.
impl<T: Pod + Send, N: Netmod, S: Shm, L: ThreadLevel> Unpin for OwnedRequest<T, N, S, L> {}

/// An owned request is a future of what [`OwnedRequest::wait`] returns: the buffer and the
/// outcome. Any executor runs it (the library depends on none).
///
/// - With the rank's progress thread running ([`crate::progress`]), a poll that finds the
///   request incomplete leaves the task's waker with the rank and returns: the thread wakes the
///   task when the request completes, and nobody polls meanwhile.
/// - Without it, each poll makes one round of progress on the request's VCI (the budget of
///   [`OwnedRequest::test`]), and an incomplete request asks to be polled again at once
///   (`wake_by_ref`): the executor's loop is the progress loop, and other tasks run between
///   rounds.
///
/// Cancel safety: dropping the future is dropping the request — a receive not yet matched is
/// cancelled, and whatever the network still holds keeps its buffer with the rank until it
/// lets go (see `Drop`). Polling again after it returned its buffer gives an empty vector and
/// a `Request` error.
impl<T: Pod + Send, N: Netmod, S: Shm, L: ThreadLevel> std::future::Future
    for OwnedRequest<T, N, S, L>
{
    type Output = (Vec<T>, Result<Status>);

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        use std::task::Poll;
        let this = self.get_mut();
        if this.buf.is_none() {
            return Poll::Ready((
                Vec::new(),
                Err(Error::new(
                    ErrorKind::Request,
                    "the request was polled after it completed",
                )),
            ));
        }
        let Ok(mut dev) = this.rank.device(this.vci) else {
            // Finalized, or called from inside a reduction operator: `finish` reports it the
            // way `wait` does, keeping the buffer with the rank if the device may still use it.
            return Poll::Ready(this.finish());
        };
        // The common case first, under the one lock: a request already complete (an eager
        // receive whose message was there) is taken as `wait` takes it.
        let threaded = this.rank.progress.is_on();
        let done = if threaded {
            dev.is_done(this.handle)
        } else {
            advance(&mut *dev, this.handle)
        };
        match done {
            Ok(true) => {
                let outcome = take_outcome(&mut *dev, this.handle);
                drop(dev);
                this.rank.progress.unregister(this.vci, this.handle);
                let buf = this.buf.take().unwrap_or_default();
                Poll::Ready((buf, outcome))
            }
            Ok(false) if threaded => {
                drop(dev);
                this.rank
                    .progress
                    .register(this.vci, this.handle, cx.waker());
                // The thread may have completed the request between the look above and the
                // registration, and looked for wakers before there was one: look again.
                match this
                    .rank
                    .device(this.vci)
                    .and_then(|d| d.is_done(this.handle))
                {
                    Ok(false) => Poll::Pending,
                    _ => {
                        this.rank.progress.unregister(this.vci, this.handle);
                        Poll::Ready(this.finish())
                    }
                }
            }
            Ok(false) => {
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            // An error `finish` reports the way `wait` does.
            Err(_) => {
                drop(dev);
                this.rank.progress.unregister(this.vci, this.handle);
                Poll::Ready(this.finish())
            }
        }
    }
}

impl<T: Pod + Send, N: Netmod, S: Shm, L: ThreadLevel> Drop for OwnedRequest<T, N, S, L> {
    /// A pending receive is cancelled if it has not matched; whatever is still in flight goes
    /// on without its owner, its buffer kept by the rank until the device lets go of it.
    fn drop(&mut self) {
        let Some(buf) = self.buf.take() else {
            return;
        };
        self.rank.progress.unregister(self.vci, self.handle);
        let done = match self.rank.device(self.vci) {
            Ok(mut dev) => {
                if self.receive {
                    let _ = dev.cancel(self.handle);
                }
                // Complete (its outcome is given up with the request) or no longer known to
                // the device: nothing refers to the buffer.
                !matches!(dev.take_completed(self.handle), Ok(None))
            }
            // A finalized device never runs again; a busy one might.
            Err(_) => self.rank.is_finalized(),
        };
        if !done {
            self.keep_with_rank(buf);
        }
    }
}

impl<T: Pod + Send, N: Netmod, S: Shm, L: ThreadLevel> std::fmt::Debug
    for OwnedRequest<T, N, S, L>
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnedRequest")
            .field("handle", &self.handle)
            .field("receive", &self.receive)
            .field("elements", &self.buf.as_ref().map_or(0, Vec::len))
            .finish()
    }
}

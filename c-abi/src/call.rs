//! What every MPI function does around its body: enter the process's state (where the thread
//! rule is checked), run blocking device work on the communicator's VCI, report a failure through the communicator's error handler, write results
//! through the pointers the C program passed, and name a null argument.
//!
//! Every chapter's module uses them, so they live apart from all of them. The ones the hot
//! functions (send, receive, wait) go through are `#[inline(always)]`, so that each of those
//! compiles to one function with its arguments in registers; the errors are built out of line
//! (`#[cold]`), off the path of a call that succeeds.

use std::ffi::{c_char, c_int};

use ch4_core::ErrorKind;

use crate::abi::{class, Handle};
use crate::errors;
use crate::state::{self, State};

/// Runs `f` on the state; its error goes to communicator `comm`'s handler as `func`'s.
#[inline(always)]
pub(crate) fn call(
    comm: Handle,
    func: &'static str,
    f: impl FnOnce(&State) -> ch4::Result<()>,
) -> c_int {
    let st = match state::enter() {
        Ok(st) => st,
        Err(code) => return code,
    };
    match f(&st) {
        Ok(()) => class::SUCCESS,
        Err(e) => errors::fail(&st, comm, func, &e),
    }
}

/// Runs a blocking device operation `$body` on VCI `$vci` of the state `$st`, with `$b` a
/// [`ch4_core::blocking::Blocking`]: below `MPI_THREAD_MULTIPLE` the one device, held for the
/// whole call as it always was; at it, the VCI shared, let go between polls so that the other
/// threads of the rank (which may be the ones this wait needs) get in. Steps that do not wait
/// run through `$b.visit`. The body is compiled for both; the rank's level picks one. The body
/// is a `ch4::Result`: at `MPI_THREAD_MULTIPLE` it runs in a closure (`on_shared`), where a
/// `?` ends the body, not the function around it.
macro_rules! on_device {
    ($st:expr, $vci:expr, |$b:ident| $body:expr) => {{
        match &$st.rank {
            $crate::state::Rank::Single(u) => {
                let mut dev = u.0.context().device()?;
                let $b: &mut $crate::state::Device = &mut dev;
                $body
            }
            $crate::state::Rank::Multiple(u) => $crate::call::on_shared(u, $vci, |$b| $body),
        }
    }};
}
pub(crate) use on_device;

/// [`on_device`] in a body compiled once per level, `$mt` its constant (`false`: below
/// `MPI_THREAD_MULTIPLE`), so that each copy holds one path only. The hot functions (send,
/// receive, wait) dispatch on the level once, at their top ([`State::single`]): their
/// single-threaded copy is then the code it was before levels existed.
macro_rules! on_device_at {
    ($mt:expr, $st:expr, $vci:expr, |$b:ident| $body:expr) => {{
        match (&$st.rank, $mt) {
            ($crate::state::Rank::Single(u), false) => {
                let mut dev = u.0.context().device()?;
                let $b: &mut $crate::state::Device = &mut dev;
                $body
            }
            ($crate::state::Rank::Multiple(u), true) => {
                $crate::call::on_shared(u, $vci, move |$b| $body)
            }
            _ => return Err($crate::call::wrong_copy()),
        }
    }};
}
pub(crate) use on_device_at;

/// The shape of the hot functions (send, receive, wait): the owner of a single-threaded rank
/// enters with one compare and runs `$body::<false>` (the single-threaded copy); every other
/// caller goes out of line to [`hot_any`], which enters as [`call`] does and runs the copy of
/// the rank's level. Use it inside `unsafe` when the body is an `unsafe fn`: the closure of the
/// out-of-line path is inside that block too.
macro_rules! hot_call {
    ($func:expr, $comm:expr, $body:ident($($arg:expr),* $(,)?)) => {{
        match $crate::state::enter_owner() {
            Some(st) => {
                let r = $body::<false>(&st, $($arg),*);
                $crate::call::finish_call(&st, $comm, $func, r)
            }
            None => $crate::call::hot_any($func, $comm, move |st| {
                if st.single() {
                    $body::<false>(st, $($arg),*)
                } else {
                    $body::<true>(st, $($arg),*)
                }
            }),
        }
    }};
}
pub(crate) use hot_call;

/// The out-of-line path of [`hot_call`]: any thread at `MPI_THREAD_MULTIPLE` or `SERIALIZED`,
/// or a call to refuse.
#[inline(never)]
pub(crate) fn hot_any(
    func: &'static str,
    comm: Handle,
    body: impl FnOnce(&State) -> ch4::Result<()>,
) -> c_int {
    let st = match state::enter() {
        Ok(st) => st,
        Err(code) => return code,
    };
    let r = body(&st);
    finish_call(&st, comm, func, r)
}

/// A body compiled for one level ran on a rank of the other (a bug of the library's).
#[cold]
pub(crate) fn wrong_copy() -> ch4::Error {
    ch4::Error::new(
        ch4_core::ErrorKind::Internal,
        "a call ran the code of another thread level",
    )
}

/// The device of VCI `vci` of a rank at `MPI_THREAD_MULTIPLE`, shared, for the body of
/// [`on_device`]. Out of line, so that the single-threaded path of a hot function (`MPI_Isend`)
/// carries none of this path's code: inlined, it made those functions save and restore more
/// registers, a few instructions a call.
#[inline(never)]
pub(crate) fn on_shared<R>(
    u: &ch4::process::Universe<ch4::Multiple>,
    vci: usize,
    body: impl FnOnce(&mut ch4_core::blocking::Shared<'_, crate::state::VciLock<'_>>) -> R,
) -> R {
    let lock = u.context().vci_lock(vci);
    body(&mut ch4_core::blocking::Shared(&lock))
}

/// Ends a call whose body ran on the entered state: success, or the error through
/// communicator `comm`'s handler. The hot functions (send, receive, wait) use it with a body
/// that is an `#[inline(always)]` function rather than a closure, so that the whole call is
/// one function with its arguments in registers.
#[inline(always)]
pub(crate) fn finish_call(
    st: &State,
    comm: Handle,
    func: &'static str,
    r: ch4::Result<()>,
) -> c_int {
    match r {
        Ok(()) => class::SUCCESS,
        Err(e) => errors::fail(st, comm, func, &e),
    }
}

/// Writes `value` through `out` unless it is null.
///
/// # Safety
/// `out` is null or valid for one write of `T`.
#[inline(always)]
pub(crate) unsafe fn put<T>(out: *mut T, value: T) {
    if !out.is_null() {
        // SAFETY: the caller's contract.
        unsafe { out.write(value) };
    }
}

#[cold]
pub(crate) fn null_arg(what: &str) -> ch4::Error {
    ch4::Error::new(ErrorKind::Arg, format!("{what} is a null pointer"))
}

/// Copies `s` into the C buffer `out` of `cap` bytes (NUL-terminated, cut to fit) and its
/// length into `len`.
///
/// # Safety
/// `out` is valid for `cap` bytes of writes, `len` for one write (either may be null).
pub(crate) unsafe fn put_string(s: &str, out: *mut c_char, cap: usize, len: *mut c_int) {
    let n = s.len().min(cap.saturating_sub(1));
    if !out.is_null() && cap > 0 {
        // SAFETY: the caller's contract: `cap` bytes at `out`, of which we write `n + 1`.
        unsafe {
            std::ptr::copy_nonoverlapping(s.as_ptr(), out.cast::<u8>(), n);
            out.add(n).write(0);
        }
    }
    // SAFETY: the caller's contract.
    unsafe { put(len, n as c_int) };
}

//! What every MPI function does around its body: enter the process's state (where the thread
//! rule is checked), report a failure through the communicator's error handler, write results
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
    f: impl FnOnce(&mut State) -> ch4::Result<()>,
) -> c_int {
    let mut st = match state::enter() {
        Ok(st) => st,
        Err(code) => return code,
    };
    match f(&mut st) {
        Ok(()) => class::SUCCESS,
        Err(e) => errors::fail(&mut st, comm, func, &e),
    }
}

/// Ends a call whose body ran on the entered state: success, or the error through
/// communicator `comm`'s handler. The hot functions (send, receive, wait) use it with a body
/// that is an `#[inline(always)]` function rather than a closure, so that the whole call is
/// one function with its arguments in registers.
#[inline(always)]
pub(crate) fn finish_call(
    st: &mut State,
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

//! Error codes and error handlers.
//!
//! Every failure becomes an error code of its own, kept with its class and the full message
//! (which function, what went wrong: the device's message), so `MPI_Error_string` tells the
//! program what happened, not just the class. Codes are numbered from `FIRST_CODE` and reused
//! after `MPI_ERR_LASTCODE` (the oldest message is then gone). The classes are the standard
//! ABI's numbers. An error on a communicator whose handler is `MPI_ERRORS_ARE_FATAL` (the
//! default) prints the message and ends the whole job through the launcher.
//!
//! The standard's error functions live here too, next to the table they read: `MPI_Error_string`
//! and `MPI_Error_class` (its "Error Codes and Classes") and the communicator's handler,
//! `MPI_Comm_set_errhandler`, `MPI_Comm_get_errhandler` and `MPI_Errhandler_free` (its "Error
//! Handling"), both sections of the chapter "MPI Environmental Management".

use std::ffi::{c_char, c_int};
use std::sync::Mutex;

use ch4_core::ErrorKind;

use crate::abi::{self, class, Handle};
use crate::call::{call, put, put_string};
use crate::state::State;

/// The first code handed out for a particular failure (above every class of the ABI,
/// `MPI_T`'s included).
const FIRST_CODE: c_int = 0x2000;
const CODES: usize = (class::LASTCODE - FIRST_CODE + 1) as usize;

struct Table {
    next: usize,
    entries: Vec<(c_int, String)>,
}

static TABLE: Mutex<Table> = Mutex::new(Table {
    next: 0,
    entries: Vec::new(),
});

fn table() -> std::sync::MutexGuard<'static, Table> {
    TABLE.lock().unwrap_or_else(|p| p.into_inner())
}

/// A new code of class `class` whose string is `message`.
pub(crate) fn register(class: c_int, message: String) -> c_int {
    let mut t = table();
    let i = t.next % CODES;
    t.next = t.next.wrapping_add(1);
    if t.entries.len() <= i {
        t.entries.push((class, message));
    } else {
        t.entries[i] = (class, message);
    }
    FIRST_CODE + i as c_int
}

/// The class of a device error.
pub(crate) fn class_of(kind: ErrorKind) -> c_int {
    match kind {
        ErrorKind::Buffer => class::BUFFER,
        ErrorKind::Count => class::COUNT,
        ErrorKind::Tag => class::TAG,
        ErrorKind::Comm => class::COMM,
        ErrorKind::Rank => class::RANK,
        ErrorKind::Request => class::REQUEST,
        ErrorKind::Arg => class::ARG,
        ErrorKind::Truncate => class::TRUNCATE,
        ErrorKind::Internal => class::INTERN,
        ErrorKind::InStatus => class::IN_STATUS,
        ErrorKind::Pending => class::PENDING,
        ErrorKind::Exhausted => class::NO_MEM,
        ErrorKind::PeerFailed => class::PROC_ABORTED,
        _ => class::OTHER,
    }
}

/// The class of `code` (a class is its own), `None` for a code never handed out.
pub(crate) fn class_of_code(code: c_int) -> Option<c_int> {
    if (0..=62).contains(&code) {
        return Some(code);
    }
    let i = usize::try_from(code.checked_sub(FIRST_CODE)?).ok()?;
    table().entries.get(i).map(|e| e.0)
}

/// The string of `code`.
pub(crate) fn string_of(code: c_int) -> Option<String> {
    if let Some(s) = class_string(code) {
        return Some(s.to_string());
    }
    let i = usize::try_from(code.checked_sub(FIRST_CODE)?).ok()?;
    table().entries.get(i).map(|e| e.1.clone())
}

fn class_string(code: c_int) -> Option<&'static str> {
    Some(match code {
        0 => "MPI_SUCCESS: no error",
        1 => "MPI_ERR_BUFFER: invalid buffer pointer",
        2 => "MPI_ERR_COUNT: invalid count argument",
        3 => "MPI_ERR_TYPE: invalid datatype",
        4 => "MPI_ERR_TAG: invalid tag",
        5 => "MPI_ERR_COMM: invalid communicator",
        6 => "MPI_ERR_RANK: invalid rank",
        7 => "MPI_ERR_REQUEST: invalid request",
        8 => "MPI_ERR_ROOT: invalid root",
        9 => "MPI_ERR_GROUP: invalid group",
        10 => "MPI_ERR_OP: invalid operation",
        11 => "MPI_ERR_TOPOLOGY: invalid topology",
        12 => "MPI_ERR_DIMS: invalid dimension argument",
        13 => "MPI_ERR_ARG: invalid argument",
        14 => "MPI_ERR_UNKNOWN: unknown error",
        15 => "MPI_ERR_TRUNCATE: message truncated",
        16 => "MPI_ERR_OTHER: other error",
        17 => "MPI_ERR_INTERN: internal error",
        18 => "MPI_ERR_PENDING: pending request",
        19 => "MPI_ERR_IN_STATUS: error code is in status",
        39 => "MPI_ERR_NO_MEM: out of memory",
        55 => "MPI_ERR_UNSUPPORTED_OPERATION: unsupported operation",
        58 => "MPI_ERR_PROC_ABORTED: a peer process aborted or failed",
        c if (20..=62).contains(&c) => "an MPI error class of the standard (see the MPI standard)",
        _ => return None,
    })
}

/// The code of an error the library raises before it can consult a handler (MPI not
/// running, another thread): printed, then returned.
#[cold]
pub(crate) fn refuse(func: &str, why: &str) -> c_int {
    eprintln!("ch4 MPI: {func}: {why}");
    register(class::OTHER, format!("{func}: {why}"))
}

/// Reports `e`, raised by `func` on communicator `comm`: ends the job if the communicator's
/// handler is fatal, else returns the error's code.
#[cold]
#[inline(never)]
pub(crate) fn fail(st: &State, comm: Handle, func: &str, e: &ch4::Error) -> c_int {
    fail_with(st, comm, class_of(e.kind()), format!("{func}: {e}"))
}

/// Reports an error of class `class` with `message` on communicator `comm`, as [`fail`].
#[cold]
#[inline(never)]
pub(crate) fn fail_with(st: &State, comm: Handle, class: c_int, message: String) -> c_int {
    let code = register(class, message.clone());
    if st.fatal(comm) {
        eprintln!("ch4 MPI: {message} (MPI_ERRORS_ARE_FATAL: ending the job)");
        st.abort(code, &message);
    }
    code
}

/// Reports that `func`, which the library exports, is not implemented (class
/// `MPI_ERR_UNSUPPORTED_OPERATION`, the string naming it), through `MPI_COMM_WORLD`'s handler.
#[cold]
pub(crate) fn not_implemented(func: &str) -> c_int {
    let message = format!("{func} is not implemented by ch4's MPI library");
    match crate::state::with(|st| {
        fail_with(
            st,
            crate::abi::COMM_WORLD,
            class::UNSUPPORTED_OPERATION,
            message.clone(),
        )
    }) {
        Ok(code) | Err(code) => code,
    }
}

// ------------------------------------------------------------------ the error functions

/// `MPI_Error_string`: what happened (the failing function and the device's message).
///
/// # Safety
/// `string` has `MPI_MAX_ERROR_STRING` bytes; `resultlen` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Error_string(
    errorcode: c_int,
    string: *mut c_char,
    resultlen: *mut c_int,
) -> c_int {
    let Some(text) = string_of(errorcode) else {
        // SAFETY: the caller's contract.
        unsafe { put_string("", string, abi::MAX_ERROR_STRING, resultlen) };
        return class::ARG;
    };
    // SAFETY: the caller's contract.
    unsafe { put_string(&text, string, abi::MAX_ERROR_STRING, resultlen) };
    class::SUCCESS
}

/// `MPI_Error_class`.
///
/// # Safety
/// `errorclass` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Error_class(errorcode: c_int, errorclass: *mut c_int) -> c_int {
    match class_of_code(errorcode) {
        Some(c) => {
            // SAFETY: the caller's contract.
            unsafe { put(errorclass, c) };
            class::SUCCESS
        }
        None => class::ARG,
    }
}

/// `MPI_Comm_set_errhandler`: `MPI_ERRORS_ARE_FATAL`, `MPI_ERRORS_ABORT` or
/// `MPI_ERRORS_RETURN` (handlers of the program's own are not supported yet).
#[no_mangle]
pub extern "C" fn MPI_Comm_set_errhandler(comm: Handle, errhandler: Handle) -> c_int {
    call(comm, "MPI_Comm_set_errhandler", |st| {
        let fatal = match errhandler {
            abi::ERRORS_ARE_FATAL | abi::ERRORS_ABORT => true,
            abi::ERRORS_RETURN => false,
            h => {
                return Err(ch4::Error::new(
                    ErrorKind::Arg,
                    format!("error handler {h:#x}: only the predefined handlers are supported"),
                ))
            }
        };
        st.with_slot(comm, |s| s.fatal = fatal)?;
        Ok(())
    })
}

/// `MPI_Comm_get_errhandler`.
///
/// # Safety
/// `errhandler` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_get_errhandler(comm: Handle, errhandler: *mut Handle) -> c_int {
    call(comm, "MPI_Comm_get_errhandler", |st| {
        let h = if st.with_slot(comm, |s| s.fatal)? {
            abi::ERRORS_ARE_FATAL
        } else {
            abi::ERRORS_RETURN
        };
        // SAFETY: the caller's contract.
        unsafe { put(errhandler, h) };
        Ok(())
    })
}

/// `MPI_Errhandler_free`: the predefined handlers are never freed; the handle becomes null.
///
/// # Safety
/// `errhandler` is valid for a read and a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Errhandler_free(errhandler: *mut Handle) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { put(errhandler, abi::ERRHANDLER_NULL) };
    class::SUCCESS
}

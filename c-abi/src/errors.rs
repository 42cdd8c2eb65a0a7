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
//!
//! The program's own error handlers (MPI 4.1 section 9.3, `MPI_Comm_create_errhandler`,
//! `MPI_Comm_call_errhandler`) are function pointers in a table of their own; a communicator
//! that has one is not fatal in its slot, and a table beside it names the handler, so that an
//! error on it calls the program's function (with the gate let go: `state::callback`) before
//! its code is returned. New communicators inherit it (`inherit`). The program's own error
//! classes, codes and strings (section 9.5, `MPI_Add_error_class` and its kin, and their
//! `MPI_Remove_` forms) are numbered above `MPI_ERR_LASTCODE`, as the standard's
//! `MPI_LASTUSEDCODE` rule asks, in a third table; the attribute `MPI_LASTUSEDCODE` reads the
//! highest of them in use ([`LAST_USED`]).

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{c_char, c_int, CStr};
use std::sync::atomic::{AtomicI32, Ordering};
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
        ErrorKind::Type => class::TYPE,
        ErrorKind::Root => class::ROOT,
        ErrorKind::Op => class::OP,
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
    if code > class::LASTCODE {
        return added().map.get(&code).map(|a| a.class);
    }
    let i = usize::try_from(code.checked_sub(FIRST_CODE)?).ok()?;
    table().entries.get(i).map(|e| e.0)
}

/// The string of `code`.
pub(crate) fn string_of(code: c_int) -> Option<String> {
    if let Some(s) = class_string(code) {
        return Some(s.to_string());
    }
    if code > class::LASTCODE {
        return added()
            .map
            .get(&code)
            .map(|a| a.string.clone().unwrap_or_default());
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
        36 => "MPI_ERR_KEYVAL: invalid attribute key",
        39 => "MPI_ERR_NO_MEM: out of memory",
        55 => "MPI_ERR_UNSUPPORTED_OPERATION: unsupported operation",
        58 => "MPI_ERR_PROC_ABORTED: a peer process aborted or failed",
        61 => "MPI_ERR_ERRHANDLER: invalid error handler",
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
    let comm = on_comm(st, comm);
    if let Some(f) = handler_of(comm) {
        call_handler(f, comm, code);
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

/// `MPI_Comm_set_errhandler`: `MPI_ERRORS_ARE_FATAL`, `MPI_ERRORS_ABORT`,
/// `MPI_ERRORS_RETURN`, or one of the program's (`MPI_Comm_create_errhandler`).
#[no_mangle]
pub extern "C" fn MPI_Comm_set_errhandler(comm: Handle, errhandler: Handle) -> c_int {
    call_classed(comm, "MPI_Comm_set_errhandler", |st| {
        let (fatal, user) = match errhandler {
            abi::ERRORS_ARE_FATAL | abi::ERRORS_ABORT => (true, None),
            abi::ERRORS_RETURN => (false, None),
            h => match handler_index(h) {
                Some(i) => (false, Some(i)),
                None => {
                    return Err(Failure::new(
                        ERR_ERRHANDLER,
                        format!("{h:#x} is not an error handler of this process"),
                    ))
                }
            },
        };
        st.with_slot(comm, |s| s.fatal = fatal)?;
        let mut t = handlers();
        match user {
            Some(i) => t.of_comm.insert(comm, i),
            None => t.of_comm.remove(&comm),
        };
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
        let fatal = st.with_slot(comm, |s| s.fatal)?;
        let user = handlers().of_comm.get(&comm).copied();
        let h = match (fatal, user) {
            (true, _) => abi::ERRORS_ARE_FATAL,
            (false, Some(i)) => abi::indexed(ERRHANDLER_BIT, i),
            (false, None) => abi::ERRORS_RETURN,
        };
        // SAFETY: the caller's contract.
        unsafe { put(errhandler, h) };
        Ok(())
    })
}

/// `MPI_Errhandler_free`: the handle becomes null. The predefined handlers are never freed,
/// and neither is a handler of the program's: communicators may still use it (the standard
/// frees it when the last one is gone), and it is one function pointer.
///
/// # Safety
/// `errhandler` is valid for a read and a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Errhandler_free(errhandler: *mut Handle) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { put(errhandler, abi::ERRHANDLER_NULL) };
    class::SUCCESS
}

// ------------------------------------------------------------------ classes of this module's errors

/// `MPI_ERR_TYPE`: a handle that names no datatype.
pub(crate) const ERR_TYPE: c_int = 3;
/// `MPI_ERR_KEYVAL`: an attribute key that is not one of this kind's, or a predefined one
/// where the program's is needed.
pub(crate) const ERR_KEYVAL: c_int = 36;
/// `MPI_ERR_ERRHANDLER`: a handle that names no error handler.
pub(crate) const ERR_ERRHANDLER: c_int = 61;

/// An error with the class it must be reported as: the classes `ch4::Error`'s kinds do not
/// carry (`MPI_ERR_KEYVAL`, `MPI_ERR_ERRHANDLER`, an attribute callback's own class).
#[derive(Debug)]
pub(crate) struct Failure {
    /// The error class.
    pub class: c_int,
    /// What happened.
    pub message: String,
}

impl Failure {
    /// A failure of class `class`.
    pub fn new(class: c_int, message: impl Into<String>) -> Failure {
        Failure {
            class,
            message: message.into(),
        }
    }
}

impl From<ch4::Error> for Failure {
    fn from(e: ch4::Error) -> Failure {
        Failure::new(class_of(e.kind()), e.to_string())
    }
}

/// [`call`] for a body whose errors carry their class ([`Failure`]).
pub(crate) fn call_classed(
    comm: Handle,
    func: &'static str,
    f: impl FnOnce(&State) -> Result<(), Failure>,
) -> c_int {
    let mut failed = None;
    let code = call(comm, func, |st| {
        if let Err(e) = f(st) {
            failed = Some(fail_with(
                st,
                comm,
                e.class,
                format!("{func}: {}", e.message),
            ));
        }
        Ok(())
    });
    failed.unwrap_or(code)
}

// ------------------------------------------------------------------ the program's error handlers

/// The C type of a communicator's error handler (the ABI's `MPI_Comm_errhandler_function`).
type CommErrhandlerFn = unsafe extern "C" fn(*mut Handle, *mut c_int, ...);

/// The handle bit of the program's error handlers (see `abi::indexed`).
const ERRHANDLER_BIT: u64 = 1 << 57;

/// The program's error handlers, by index, and which communicator uses which.
struct Handlers {
    fns: Vec<CommErrhandlerFn>,
    of_comm: BTreeMap<Handle, usize>,
}

static HANDLERS: Mutex<Handlers> = Mutex::new(Handlers {
    fns: Vec::new(),
    of_comm: BTreeMap::new(),
});

fn handlers() -> std::sync::MutexGuard<'static, Handlers> {
    HANDLERS.lock().unwrap_or_else(|p| p.into_inner())
}

/// The index of the program's error handler `h`.
fn handler_index(h: Handle) -> Option<usize> {
    abi::index_of(h, ERRHANDLER_BIT).filter(|&i| i < handlers().fns.len())
}

/// The communicator an error on `comm` is reported on: `comm`, or `MPI_COMM_WORLD` when it
/// names none (as `State::fatal` decides).
fn on_comm(st: &State, comm: Handle) -> Handle {
    if st.with_slot(comm, |_| ()).is_ok() {
        comm
    } else {
        abi::COMM_WORLD
    }
}

/// The program's handler of communicator `comm`, if it has one.
fn handler_of(comm: Handle) -> Option<CommErrhandlerFn> {
    let t = handlers();
    t.of_comm.get(&comm).and_then(|&i| t.fns.get(i).copied())
}

/// Calls the program's handler `f` for `code` on `comm`, outside the gate (the handler may
/// call MPI). No lock is held: the error is reported after the call's body.
fn call_handler(f: CommErrhandlerFn, comm: Handle, code: c_int) {
    let (mut comm, mut code) = (comm, code);
    crate::state::callback(|| {
        // SAFETY: `f` is the program's handler, given to MPI_Comm_create_errhandler with the
        // ABI's type; it gets pointers to two live locals, as the standard's binding says
        // (MPICH passes nothing in the variadic part either way that a handler may rely on).
        unsafe { f(&mut comm, &mut code) }
    });
}

/// Gives communicator `child`, just made from `parent`, its parent's handler of the
/// program's (MPI 4.1 section 9.3: a new communicator inherits its parent's handler; the
/// predefined ones travel in the slot's `fatal`).
pub(crate) fn inherit(parent: Handle, child: Handle) {
    if child == abi::COMM_NULL {
        return;
    }
    let mut t = handlers();
    if let Some(&i) = t.of_comm.get(&parent) {
        t.of_comm.insert(child, i);
    }
}

/// [`inherit`] after a constructor (`MPI_Comm_split`, `MPI_Comm_create`, ...) ended with
/// `code`: passes `code` on.
///
/// # Safety
/// `newcomm` is valid for a read if `code` is `MPI_SUCCESS`.
pub(crate) unsafe fn inherit_after(code: c_int, parent: Handle, newcomm: *const Handle) -> c_int {
    if code == class::SUCCESS && !newcomm.is_null() {
        // SAFETY: the call succeeded, so `newcomm` was valid and holds the new handle.
        inherit(parent, unsafe { newcomm.read() });
    }
    code
}

/// Forgets the handler of communicator `comm`, which is being freed (its handle is reused).
pub(crate) fn forget_comm(comm: Handle) {
    handlers().of_comm.remove(&comm);
}

/// `MPI_Comm_create_errhandler`: a handle for the program's function.
///
/// # Safety
/// `function` is null or a function of the ABI's `MPI_Comm_errhandler_function` type;
/// `errhandler` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_create_errhandler(
    function: Option<CommErrhandlerFn>,
    errhandler: *mut Handle,
) -> c_int {
    call(abi::COMM_WORLD, "MPI_Comm_create_errhandler", |_| {
        let Some(f) = function else {
            return Err(crate::call::null_arg("the error handler function"));
        };
        if errhandler.is_null() {
            return Err(crate::call::null_arg("the error handler"));
        }
        let mut t = handlers();
        t.fns.push(f);
        let h = abi::indexed(ERRHANDLER_BIT, t.fns.len() - 1);
        // SAFETY: the caller's contract.
        unsafe { errhandler.write(h) };
        Ok(())
    })
}

/// `MPI_Comm_call_errhandler`: runs `comm`'s handler on `errorcode` as an error of MPI's
/// would. Fatal handlers end the job; the program's own is called; the call itself succeeds
/// (under `MPI_ERRORS_RETURN` too, as MPICH's `call_errhandler` in
/// `src/mpi/errhan/errhan_impl.c` has it: the handler returned, so the call did its work).
#[no_mangle]
pub extern "C" fn MPI_Comm_call_errhandler(comm: Handle, errorcode: c_int) -> c_int {
    call(comm, "MPI_Comm_call_errhandler", |st| {
        let fatal = st.with_slot(comm, |s| s.fatal)?;
        if fatal {
            let text = string_of(errorcode).unwrap_or_else(|| format!("error code {errorcode}"));
            let message = format!("MPI_Comm_call_errhandler: {text}");
            eprintln!("ch4 MPI: {message} (MPI_ERRORS_ARE_FATAL: ending the job)");
            st.abort(errorcode, &message);
        }
        if let Some(f) = handler_of(comm) {
            call_handler(f, comm, errorcode);
        }
        Ok(())
    })
}

// ------------------------------------------------------------------ the program's error classes

/// A class or code the program added, and its string.
struct Added {
    /// Its class (a class's is itself).
    class: c_int,
    /// Whether it is a class (`MPI_Add_error_class`) rather than a code.
    is_class: bool,
    /// `MPI_Add_error_string`'s text.
    string: Option<String>,
    /// For a class: how many codes the program added to it and has not removed.
    codes: usize,
}

/// The program's classes and codes by number, with the numbers freed by `MPI_Remove_` to be
/// handed out again (a program that adds and removes in a loop, as MPICH's `adderr` does ten
/// thousand times, stays in a small range).
struct AddedCodes {
    map: BTreeMap<c_int, Added>,
    freed: BTreeSet<c_int>,
}

static ADDED: Mutex<AddedCodes> = Mutex::new(AddedCodes {
    map: BTreeMap::new(),
    freed: BTreeSet::new(),
});

/// The value of the attribute `MPI_LASTUSEDCODE`: the highest class or code the program added
/// and has not removed, `MPI_ERR_LASTCODE` while there is none. The attribute is returned as
/// the address of this value, which is why it is a static.
pub(crate) static LAST_USED: AtomicI32 = AtomicI32::new(class::LASTCODE);

fn added() -> std::sync::MutexGuard<'static, AddedCodes> {
    ADDED.lock().unwrap_or_else(|p| p.into_inner())
}

impl AddedCodes {
    /// A number for `a`: the lowest freed one, else one above every number in use.
    fn add(&mut self, make: impl FnOnce(c_int) -> Added) -> Result<c_int, Failure> {
        let n = match self.freed.pop_first() {
            Some(n) => n,
            None => {
                let top = self
                    .map
                    .last_key_value()
                    .map_or(class::LASTCODE, |(&k, _)| k);
                top.checked_add(1).ok_or_else(|| {
                    Failure::new(class::NO_MEM, "no error code is left to hand out")
                })?
            }
        };
        self.map.insert(n, make(n));
        self.publish();
        Ok(n)
    }

    /// Takes `n` out and frees its number.
    fn remove(&mut self, n: c_int) {
        if self.map.remove(&n).is_some() {
            self.freed.insert(n);
        }
        // Numbers above the highest in use need no free list: they are handed out in order.
        let top = self
            .map
            .last_key_value()
            .map_or(class::LASTCODE, |(&k, _)| k);
        drop(self.freed.split_off(&top));
        self.publish();
    }

    /// Updates `MPI_LASTUSEDCODE`.
    fn publish(&self) {
        let top = self
            .map
            .last_key_value()
            .map_or(class::LASTCODE, |(&k, _)| k);
        LAST_USED.store(top, Ordering::Relaxed);
    }
}

/// Runs a body of the error-class functions (errors through `MPI_COMM_WORLD`'s handler).
fn added_call(func: &'static str, f: impl FnOnce(&mut AddedCodes) -> Result<(), Failure>) -> c_int {
    call_classed(abi::COMM_WORLD, func, |_| f(&mut added()))
}

/// `MPI_Add_error_class`: a new class, above `MPI_ERR_LASTCODE`.
///
/// # Safety
/// `errorclass` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Add_error_class(errorclass: *mut c_int) -> c_int {
    added_call("MPI_Add_error_class", |t| {
        if errorclass.is_null() {
            return Err(crate::call::null_arg("the error class").into());
        }
        let n = t.add(|n| Added {
            class: n,
            is_class: true,
            string: None,
            codes: 0,
        })?;
        // SAFETY: the caller's contract.
        unsafe { errorclass.write(n) };
        Ok(())
    })
}

/// `MPI_Add_error_code`: a new code of `errorclass` (a predefined class or one the program
/// added).
///
/// # Safety
/// `errorcode` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Add_error_code(errorclass: c_int, errorcode: *mut c_int) -> c_int {
    added_call("MPI_Add_error_code", |t| {
        if errorcode.is_null() {
            return Err(crate::call::null_arg("the error code").into());
        }
        let known =
            (0..=62).contains(&errorclass) || t.map.get(&errorclass).is_some_and(|a| a.is_class);
        if !known {
            return Err(Failure::new(
                class::ARG,
                format!("{errorclass} is not an error class"),
            ));
        }
        let n = t.add(|_| Added {
            class: errorclass,
            is_class: false,
            string: None,
            codes: 0,
        })?;
        if let Some(c) = t.map.get_mut(&errorclass) {
            c.codes += 1;
        }
        // SAFETY: the caller's contract.
        unsafe { errorcode.write(n) };
        Ok(())
    })
}

/// `MPI_Add_error_string`: the string `MPI_Error_string` gives for a class or code the program
/// added (a predefined one's cannot be changed: MPI 4.1 section 9.5).
///
/// # Safety
/// `string` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn MPI_Add_error_string(errorcode: c_int, string: *const c_char) -> c_int {
    added_call("MPI_Add_error_string", |t| {
        if string.is_null() {
            return Err(crate::call::null_arg("the string").into());
        }
        // SAFETY: the caller's contract.
        let text = unsafe { CStr::from_ptr(string) }
            .to_string_lossy()
            .into_owned();
        if text.len() >= abi::MAX_ERROR_STRING {
            return Err(Failure::new(
                class::ARG,
                format!(
                    "a string of {} bytes: MPI_MAX_ERROR_STRING is {}, its NUL included",
                    text.len(),
                    abi::MAX_ERROR_STRING
                ),
            ));
        }
        match t.map.get_mut(&errorcode) {
            Some(a) => {
                a.string = Some(text);
                Ok(())
            }
            None => Err(not_added(errorcode)),
        }
    })
}

/// `MPI_Remove_error_class`: its codes must have been removed first.
#[no_mangle]
pub extern "C" fn MPI_Remove_error_class(errorclass: c_int) -> c_int {
    added_call("MPI_Remove_error_class", |t| {
        if !t.map.get(&errorclass).is_some_and(|a| a.is_class) {
            return Err(not_added(errorclass));
        }
        let codes = t.map.get(&errorclass).map_or(0, |a| a.codes);
        if codes > 0 {
            return Err(Failure::new(
                class::ARG,
                format!("error class {errorclass} still has {codes} codes (remove them first)"),
            ));
        }
        t.remove(errorclass);
        Ok(())
    })
}

/// `MPI_Remove_error_code`: its string must have been removed first.
#[no_mangle]
pub extern "C" fn MPI_Remove_error_code(errorcode: c_int) -> c_int {
    added_call("MPI_Remove_error_code", |t| {
        match t.map.get(&errorcode) {
            Some(a) if !a.is_class && a.string.is_none() => {
                let class = a.class;
                if let Some(c) = t.map.get_mut(&class) {
                    c.codes = c.codes.saturating_sub(1);
                }
            }
            Some(a) if !a.is_class => {
                return Err(Failure::new(
                    class::ARG,
                    format!("error code {errorcode} still has a string (remove it first)"),
                ))
            }
            _ => return Err(not_added(errorcode)),
        }
        t.remove(errorcode);
        Ok(())
    })
}

/// `MPI_Remove_error_string`.
#[no_mangle]
pub extern "C" fn MPI_Remove_error_string(errorcode: c_int) -> c_int {
    added_call("MPI_Remove_error_string", |t| {
        match t.map.get_mut(&errorcode).and_then(|a| a.string.take()) {
            Some(_) => Ok(()),
            None => Err(Failure::new(
                class::ARG,
                format!("error code {errorcode} has no string the program added"),
            )),
        }
    })
}

#[cold]
fn not_added(code: c_int) -> Failure {
    Failure::new(
        class::ARG,
        format!("{code} is not an error class or code the program added"),
    )
}

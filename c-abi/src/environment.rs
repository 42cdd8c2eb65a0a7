//! Start-up and environment, from the standard's chapters "MPI Environmental Management" and
//! "Process Initialization, Creation, and Management": `MPI_Init`, `MPI_Init_thread`,
//! `MPI_Finalize`, `MPI_Initialized`, `MPI_Finalized`, the thread queries, `MPI_Abort`, the
//! versions, the processor name, `MPI_Wtime`, `MPI_Wtick` and `MPI_Pcontrol`.
//!
//! These are the calls that stand outside the process's state or before it: `MPI_Init` makes
//! it, `MPI_Finalize` takes it out, and the queries answer before, during and after MPI, so
//! none of them goes through `call` (which needs a running MPI). The thread level is the
//! one the program asks for; `state` keeps to its rule on every call.

use std::ffi::{c_char, c_double, c_int};

use crate::abi::{self, class, Handle};
use crate::call::{put, put_string};
use crate::errors;
use crate::state::{self, Phase, Rank};

/// `MPI_Init`: joins the job (`ch4run`, Hydra or alone).
///
/// # Safety
/// The arguments are ignored (they may be null).
#[no_mangle]
pub unsafe extern "C" fn MPI_Init(_argc: *mut c_int, _argv: *mut *mut *mut c_char) -> c_int {
    match init("MPI_Init", abi::THREAD_SINGLE) {
        Ok(_) => class::SUCCESS,
        Err(code) => code,
    }
}

/// `MPI_Init_thread`: as `MPI_Init`, at the level `required` asks for, which is the level
/// provided: at `MPI_THREAD_MULTIPLE` the rank has VCIs (`CH4_NUM_VCIS`, 4 unless set) and
/// every thread calls at once; at `SERIALIZED` any thread calls, one at a time; at `FUNNELED`
/// and `SINGLE` only the thread that initialized MPI. A call that breaks the level's rule fails
/// with an error instead of racing.
///
/// # Safety
/// `provided` is null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Init_thread(
    _argc: *mut c_int,
    _argv: *mut *mut *mut c_char,
    required: c_int,
    provided: *mut c_int,
) -> c_int {
    match init("MPI_Init_thread", required) {
        Ok(level) => {
            // SAFETY: the caller's contract.
            unsafe { put(provided, level) };
            class::SUCCESS
        }
        Err(code) => code,
    }
}

/// Joins the job at thread level `required`; the level provided.
fn init(func: &str, required: c_int) -> Result<c_int, c_int> {
    if state::phase() != Phase::Before {
        return Err(errors::refuse(func, "MPI was already initialized"));
    }
    match state::install(required) {
        Ok(level) => Ok(level),
        Err(e) => {
            // No job to abort through yet: MPI_ERRORS_ARE_FATAL ends this process.
            eprintln!("ch4 MPI: {func}: {e}");
            std::process::exit(1);
        }
    }
}

/// `MPI_Finalize`: deletes the attributes of `MPI_COMM_SELF` and `MPI_COMM_WORLD` (their
/// delete functions run), completes requests freed while active, then leaves the job in order.
#[no_mangle]
pub extern "C" fn MPI_Finalize() -> c_int {
    // MPI_COMM_SELF's attributes go first, while MPI still runs (MPI 4.1 section 11.2.4).
    if state::phase() == Phase::Running {
        let _ = crate::attributes::at_finalize();
    }
    let st = match state::leave() {
        Ok(st) => st,
        Err(code) => return code,
    };
    let detached = std::mem::take(&mut *st.detached.lock());
    for r in detached {
        let _ = st
            .device(r.vci())
            .and_then(|mut dev| dev.wait_status(r.handle()));
    }
    let left = match &st.rank {
        Rank::Single(u) => u.0.finalize_shared(),
        Rank::Multiple(u) => u.finalize_shared(),
    };
    match left {
        Ok(()) => class::SUCCESS,
        Err(e) => {
            eprintln!("ch4 MPI: MPI_Finalize: {e}");
            errors::register(errors::class_of(e.kind()), format!("MPI_Finalize: {e}"))
        }
    }
}

/// `MPI_Initialized`.
///
/// # Safety
/// `flag` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Initialized(flag: *mut c_int) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { put(flag, c_int::from(state::phase() != Phase::Before)) };
    class::SUCCESS
}

/// `MPI_Finalized`.
///
/// # Safety
/// `flag` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Finalized(flag: *mut c_int) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { put(flag, c_int::from(state::phase() == Phase::After)) };
    class::SUCCESS
}

/// `MPI_Query_thread`: the level `MPI_Init_thread` provided (`MPI_THREAD_SINGLE` after
/// `MPI_Init`).
///
/// # Safety
/// `provided` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Query_thread(provided: *mut c_int) -> c_int {
    match state::with(|st| st.level) {
        Ok(level) => {
            // SAFETY: the caller's contract.
            unsafe { put(provided, level) };
            class::SUCCESS
        }
        Err(code) => code,
    }
}

/// `MPI_Is_thread_main`: whether the caller is the thread that initialized MPI.
///
/// # Safety
/// `flag` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Is_thread_main(flag: *mut c_int) -> c_int {
    let main = state::on_main_thread();
    // SAFETY: the caller's contract.
    unsafe { put(flag, c_int::from(main)) };
    class::SUCCESS
}

/// `MPI_Abort`: ends every process of the job with `errorcode`.
#[no_mangle]
pub extern "C" fn MPI_Abort(_comm: Handle, errorcode: c_int) -> c_int {
    let _ = state::with(|st| st.abort(errorcode, &format!("MPI_Abort({errorcode}) called")));
    eprintln!("ch4 MPI: MPI_Abort({errorcode}) called");
    std::process::exit(errorcode)
}

/// `MPI_Get_version`: 5.0.
///
/// # Safety
/// The pointers are valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Get_version(version: *mut c_int, subversion: *mut c_int) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        put(version, 5);
        put(subversion, 0);
    }
    class::SUCCESS
}

/// `MPI_Get_library_version`.
///
/// # Safety
/// `version` has `MPI_MAX_LIBRARY_VERSION_STRING` bytes; `resultlen` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Get_library_version(
    version: *mut c_char,
    resultlen: *mut c_int,
) -> c_int {
    let text = format!(
        "ch4 {} (MPI standard ABI {}.{}, MPI {}.{}; network: {})",
        env!("CARGO_PKG_VERSION"),
        1,
        0,
        5,
        0,
        <ch4::SelectedNetmod as ch4_core::AmTransport>::NAME
    );
    // SAFETY: the caller's contract.
    unsafe { put_string(&text, version, abi::MAX_LIBRARY_VERSION_STRING, resultlen) };
    class::SUCCESS
}

/// `MPI_Get_processor_name`: the host name.
///
/// # Safety
/// `name` has `MPI_MAX_PROCESSOR_NAME` bytes; `resultlen` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Get_processor_name(name: *mut c_char, resultlen: *mut c_int) -> c_int {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is writable for its length; gethostname NUL-terminates within it or
    // truncates.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len() - 1) } == 0;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let host = if ok {
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        "localhost".to_string()
    };
    // SAFETY: the caller's contract.
    unsafe { put_string(&host, name, abi::MAX_PROCESSOR_NAME, resultlen) };
    class::SUCCESS
}

/// `MPI_Wtime`: seconds on the monotonic clock.
#[no_mangle]
pub extern "C" fn MPI_Wtime() -> c_double {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is writable; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// `MPI_Wtick`: the monotonic clock's resolution.
#[no_mangle]
pub extern "C" fn MPI_Wtick() -> c_double {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is writable.
    unsafe { libc::clock_getres(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9).max(1e-9)
}

/// `MPI_Pcontrol` (the standard's "Profiling Interface"): the level is for a profiling
/// library interposed in front of this one; ch4 itself has nothing to switch, so the call
/// succeeds and does nothing, as the standard allows. The C declaration is variadic; the
/// extra arguments, which a profiler might read, are the caller's to clean up on every C
/// calling convention ch4 builds for, so ignoring them is sound.
#[no_mangle]
pub extern "C" fn MPI_Pcontrol(_level: c_int) -> c_int {
    class::SUCCESS
}

//! Info objects, the standard's chapter "The Info Object" (MPI 4.1, chapter 10):
//! `MPI_Info_create`, `_set`, `_delete`, `_get_string` (and the deprecated `_get` and
//! `_get_valuelen`), `_get_nkeys`, `_get_nthkey`, `_dup`, `_free`, `_create_env` and the
//! predefined `MPI_INFO_ENV`; and the hints of a communicator (`MPI_Comm_dup_with_info`,
//! `MPI_Comm_set_info`, `MPI_Comm_get_info`), the one place the library reads an info.
//!
//! An info is an ordered list of key-value strings. The table lives here, in a `static` behind
//! its own lock, not in `state`: since MPI 4.0 the info functions may be called before
//! `MPI_Init` and after `MPI_Finalize` (a session's info is made before any initialization;
//! chapter "Process Initialization, Creation, and Management"), when there is no state, and at
//! `MPI_THREAD_MULTIPLE` any thread may call at once. The lock is held for one lookup, copy or
//! edit, never across a call into the device.
//!
//! Handles. `MPI_INFO_NULL` (0x130) and `MPI_INFO_ENV` (0x131) are the ABI's. An info the
//! program makes is `1 << 58 | generation << 32 | index`, with index its slot in the table
//! and generation the slot's count of frees (26 bits), so that a freed handle is refused even
//! after its slot is reused. Each kind of handle the library makes owns one high bit, so none
//! equals another: device requests 63, persistent requests 62, matched-probe messages 61
//! (`abi`), derived datatypes 60 (`derived`), groups 59 (`groups`), infos 58; communicators
//! are `COMM_BASE` plus an index, far below all of them. A handle is an info only when bit 58
//! is its highest bit set.
//!
//! Keys and values are kept as the bytes the program gave (not necessarily UTF-8), with the
//! spaces at either end dropped (see [`trimmed`]). The one hint the library acts on is
//! `ch4_vci`: `MPI_Comm_dup_with_info` with it places the new communicator on that VCI of the rank
//! (`MPI_THREAD_MULTIPLE`; every member must name the same one, which is checked), as
//! `Communicator::dup_on_vci` does in Rust. Other keys are kept and ignored, as the standard
//! allows.

use std::ffi::{c_char, c_int, CStr};
use std::sync::{Mutex, MutexGuard, OnceLock};

use crate::abi::{self, class, Handle};
use crate::call::{call, null_arg, on_device};
use crate::errors;
use crate::state::{self, Phase};

/// The key the library reads: the VCI of a communicator being made.
pub(crate) const VCI_KEY: &str = "ch4_vci";

/// The bit no other kind of handle uses (see the module's "Handles").
const INFO_BIT: u64 = 1 << 58;
/// A handle's slot index: 32 bits, more infos than a process can hold.
const INDEX_MASK: u64 = 0xffff_ffff;
/// Where a handle's generation starts: above the index.
const GEN_SHIFT: u32 = 32;
/// A generation's bits: the ones between the index and [`INFO_BIT`].
const GEN_MASK: u32 = (1 << (58 - GEN_SHIFT)) - 1;

/// One info's pairs, in the order their keys were first set (`MPI_Info_get_nthkey`'s order).
type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// A slot of the table: its generation outlives the info in it, so that a stale handle to a
/// reused slot does not name the new info.
struct Slot {
    generation: u32,
    pairs: Option<Pairs>,
}

/// Every info the program holds, by slot.
struct Table {
    slots: Vec<Slot>,
    /// The empty slots, reused before the table grows.
    free: Vec<usize>,
}

static TABLE: Mutex<Table> = Mutex::new(Table {
    slots: Vec::new(),
    free: Vec::new(),
});

/// The table, locked. None of this module's code panics with the lock held; were one to, the
/// table is still whole (every edit is one assignment), so the poison is ignored rather than
/// turning every later info call into a panic across the C boundary.
fn table() -> MutexGuard<'static, Table> {
    TABLE.lock().unwrap_or_else(|p| p.into_inner())
}

/// What an info handle names.
#[derive(Clone, Copy)]
enum Target {
    /// `MPI_INFO_ENV`, which lives outside the table (it is never freed).
    Env,
    /// An info of the table, valid while its slot's generation is this one.
    User { index: usize, generation: u32 },
}

/// Decodes handle `h`; `MPI_INFO_NULL` and anything not an info are `MPI_ERR_INFO`, the class
/// the standard gives an invalid info argument.
fn target(h: Handle) -> Result<Target, InfoError> {
    let raw = h as u64;
    match h {
        abi::INFO_ENV => Ok(Target::Env),
        _ if raw >> 58 == 1 => Ok(Target::User {
            index: (raw & INDEX_MASK) as usize,
            generation: (raw >> GEN_SHIFT) as u32 & GEN_MASK,
        }),
        abi::INFO_NULL => Err(InfoError::new(class::INFO, "the info is MPI_INFO_NULL")),
        _ => Err(bad_info(h)),
    }
}

/// An error of any class, the info classes (`MPI_ERR_INFO`, `_INFO_KEY`, `_INFO_VALUE`,
/// `_INFO_NOKEY`) among them: `ch4_core::ErrorKind` has none of those, so these functions
/// carry the ABI's class themselves.
struct InfoError {
    class: c_int,
    message: String,
}

impl InfoError {
    /// An error of `class`; the function's name is added where it is reported.
    fn new(class: c_int, message: impl Into<String>) -> InfoError {
        InfoError {
            class,
            message: message.into(),
        }
    }
}

/// A handle that names no info of this process.
#[cold]
fn bad_info(h: Handle) -> InfoError {
    InfoError::new(
        class::INFO,
        format!("{h:#x} is not an info of this process (freed, or never made)"),
    )
}

/// A change to `MPI_INFO_ENV`, which describes how the process was started and so is not the
/// program's to change.
#[cold]
fn env_is_fixed() -> InfoError {
    InfoError::new(
        class::INFO,
        "MPI_INFO_ENV is predefined: it cannot be changed or freed (MPI_Info_dup makes a copy \
         that can)",
    )
}

/// A null pointer where the function needs one: `MPI_ERR_ARG`, as `call::null_arg` reports it
/// for every other function.
#[cold]
fn null(what: &str) -> InfoError {
    InfoError::new(class::ARG, format!("{what} is a null pointer"))
}

/// A new info holding `pairs`.
fn insert(pairs: Pairs) -> Result<Handle, InfoError> {
    let mut t = table();
    let index = match t.free.pop() {
        Some(i) => i,
        None => {
            if t.slots.len() as u64 > INDEX_MASK {
                return Err(InfoError::new(class::NO_MEM, "no room for another info"));
            }
            t.slots.push(Slot {
                generation: 0,
                pairs: None,
            });
            t.slots.len() - 1
        }
    };
    let slot = &mut t.slots[index];
    slot.pairs = Some(pairs);
    Ok((INFO_BIT | u64::from(slot.generation) << GEN_SHIFT | index as u64) as Handle)
}

/// Runs `f` on the pairs of info `h`, read-only: `MPI_INFO_ENV`'s too.
fn read<R>(h: Handle, f: impl FnOnce(&Pairs) -> R) -> Result<R, InfoError> {
    match target(h)? {
        Target::Env => Ok(f(env())),
        Target::User { index, generation } => {
            let t = table();
            match t.slots.get(index) {
                Some(Slot {
                    generation: g,
                    pairs: Some(pairs),
                }) if *g == generation => Ok(f(pairs)),
                _ => Err(bad_info(h)),
            }
        }
    }
}

/// Runs `f` on the pairs of info `h`, to change them: `MPI_INFO_ENV` is the library's and
/// stays as it was made.
fn write<R>(h: Handle, f: impl FnOnce(&mut Pairs) -> R) -> Result<R, InfoError> {
    match target(h)? {
        Target::Env => Err(env_is_fixed()),
        Target::User { index, generation } => {
            let mut t = table();
            match t.slots.get_mut(index) {
                Some(Slot {
                    generation: g,
                    pairs: Some(pairs),
                }) if *g == generation => Ok(f(pairs)),
                _ => Err(bad_info(h)),
            }
        }
    }
}

/// Frees info `h`: its slot's generation moves on, so `h` names nothing from now on, even
/// once the slot holds another info.
fn remove(h: Handle) -> Result<(), InfoError> {
    let Target::User { index, generation } = target(h)? else {
        return Err(env_is_fixed());
    };
    let mut t = table();
    match t.slots.get_mut(index) {
        Some(slot) if slot.generation == generation && slot.pairs.is_some() => {
            slot.pairs = None;
            slot.generation = slot.generation.wrapping_add(1) & GEN_MASK;
        }
        _ => return Err(bad_info(h)),
    }
    t.free.push(index);
    Ok(())
}

/// The value of `key` (already trimmed) in `pairs`.
fn find<'a>(pairs: &'a Pairs, key: &[u8]) -> Option<&'a [u8]> {
    pairs
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_slice())
}

/// `s` without the spaces at either end. The standard strips them in Fortran, whose strings
/// come padded with blanks ("The Info Object": "In Fortran, leading and trailing spaces are
/// stripped from both"); we strip them in C too, so that a key means the same from either
/// language and `" ch4_vci "` is still the hint. Spaces only: a tab is part of the string.
fn trimmed(s: &[u8]) -> &[u8] {
    let start = s.iter().position(|&c| c != b' ').unwrap_or(s.len());
    let end = s.iter().rposition(|&c| c != b' ').map_or(start, |e| e + 1);
    &s[start..end]
}

/// A key from C, trimmed: 1 to `MPI_MAX_INFO_KEY - 1` bytes, else `MPI_ERR_INFO_KEY`.
///
/// # Safety
/// `key` is null or a NUL-terminated string.
unsafe fn key_in(key: *const c_char) -> Result<Vec<u8>, InfoError> {
    if key.is_null() {
        return Err(null("the key"));
    }
    // SAFETY: the caller's contract: a NUL-terminated string.
    let k = trimmed(unsafe { CStr::from_ptr(key) }.to_bytes());
    if k.is_empty() || k.len() >= abi::MAX_INFO_KEY {
        return Err(InfoError::new(
            class::INFO_KEY,
            format!(
                "an info key has 1 to {} characters (spaces at either end not counted), not {}",
                abi::MAX_INFO_KEY - 1,
                k.len()
            ),
        ));
    }
    Ok(k.to_vec())
}

/// A value from C, trimmed: at most `MPI_MAX_INFO_VAL - 1` bytes, else `MPI_ERR_INFO_VALUE`.
/// An empty value is kept: the standard bounds only the length (MPICH accepts it too).
///
/// # Safety
/// `value` is null or a NUL-terminated string.
unsafe fn value_in(value: *const c_char) -> Result<Vec<u8>, InfoError> {
    if value.is_null() {
        return Err(null("the value"));
    }
    // SAFETY: the caller's contract: a NUL-terminated string.
    let v = trimmed(unsafe { CStr::from_ptr(value) }.to_bytes());
    if v.len() >= abi::MAX_INFO_VAL {
        return Err(InfoError::new(
            class::INFO_VALUE,
            format!(
                "an info value has at most {} characters, not {}",
                abi::MAX_INFO_VAL - 1,
                v.len()
            ),
        ));
    }
    Ok(v.to_vec())
}

/// Copies `s` into the C buffer `out` of `cap` bytes, cut to `cap - 1` and NUL-terminated;
/// nothing when `cap` is 0 (`MPI_Info_get_string`'s length query).
///
/// # Safety
/// `out` is valid for `cap` bytes of writes.
unsafe fn copy_out(s: &[u8], out: *mut c_char, cap: usize) {
    if cap == 0 {
        return;
    }
    let n = s.len().min(cap - 1);
    // SAFETY: the caller's contract: `cap` bytes at `out`, of which we write `n + 1 <= cap`;
    // `s` is our own buffer, so they do not overlap.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), out.cast::<u8>(), n);
        out.add(n).write(0);
    }
}

/// Runs an info function's body. While MPI runs it goes through [`call`], as every function
/// does (the thread rule of the rank's level, errors through `MPI_COMM_WORLD`'s handler, with
/// the info classes kept). Before `MPI_Init` and after `MPI_Finalize` there is no state and no
/// handler, and the standard still allows these calls: the body runs alone and an error is
/// returned as a code of its own (its string names the function).
fn info_call(func: &'static str, body: impl FnOnce() -> Result<(), InfoError>) -> c_int {
    if state::phase() != Phase::Running {
        return match body() {
            Ok(()) => class::SUCCESS,
            Err(e) => errors::register(e.class, format!("{func}: {}", e.message)),
        };
    }
    let mut code = class::SUCCESS;
    let entered = call(abi::COMM_WORLD, func, |st| {
        if let Err(e) = body() {
            code = errors::fail_with(
                st,
                abi::COMM_WORLD,
                e.class,
                format!("{func}: {}", e.message),
            );
        }
        Ok(())
    });
    if entered == class::SUCCESS {
        code
    } else {
        entered
    }
}

/// The value of `key` in info `h` (`MPI_INFO_NULL`: none), for the functions that take hints.
/// A handle that is no info is `ErrorKind::Arg` (the caller's error goes through its own
/// communicator's handler, as the rest of its arguments' do).
pub(crate) fn value(h: Handle, key: &str) -> ch4::Result<Option<String>> {
    if h == abi::INFO_NULL {
        return Ok(None);
    }
    read(h, |pairs| {
        find(pairs, key.as_bytes()).map(|v| String::from_utf8_lossy(v).into_owned())
    })
    .map_err(|e| ch4::Error::new(ch4_core::ErrorKind::Arg, e.message))
}

/// Sets `key` to `value` in info `h` (what the library writes back into a program's info,
/// as `MPI_Comm_split_type` with `MPI_COMM_TYPE_HW_UNGUIDED` does).
pub(crate) fn set(h: Handle, key: &str, value: &str) -> ch4::Result<()> {
    let (k, v) = (key.as_bytes().to_vec(), value.as_bytes().to_vec());
    write(h, |pairs| {
        match pairs.iter_mut().find(|(old, _)| *old == k) {
            Some((_, old)) => *old = v,
            None => pairs.push((k, v)),
        }
    })
    .map_err(|e| ch4::Error::new(ch4_core::ErrorKind::Arg, e.message))
}

// ------------------------------------------------------------------ MPI_INFO_ENV

/// `MPI_INFO_ENV`, made at its first use and the same from then on.
fn env() -> &'static Pairs {
    static ENV: OnceLock<Pairs> = OnceLock::new();
    ENV.get_or_init(|| environment(&own_args()))
}

/// The process's command line: the arguments Rust's runtime captured when the library was
/// loaded, or `/proc/self/cmdline` where it did not.
fn own_args() -> Vec<Vec<u8>> {
    use std::os::unix::ffi::OsStringExt;
    let args: Vec<Vec<u8>> = std::env::args_os().map(OsStringExt::into_vec).collect();
    if !args.is_empty() {
        return args;
    }
    let line = std::fs::read("/proc/self/cmdline").unwrap_or_default();
    match line.strip_suffix(&[0]) {
        Some(l) => l.split(|&c| c == 0).map(<[u8]>::to_vec).collect(),
        None => Vec::new(),
    }
}

/// The keys the standard lists for `MPI_INFO_ENV` (chapter "Process Initialization, Creation,
/// and Management") that the library knows, in the standard's order, for a process started
/// with `args`: `command`, `argv`, `maxprocs` (the job's size, from the launcher's
/// `PMI_SIZE`), `host`, `arch` and `wdir`. `soft` and `file` are `mpiexec` requests no ch4
/// launcher takes, and `thread_level` is the level asked of the launcher, which neither
/// ch4run nor Hydra's options carry to us (the level `MPI_Init_thread` gave is
/// `MPI_Query_thread`'s answer), so they are left out, as the standard allows. A value longer
/// than an info value may be is cut to fit; an empty one is left out.
fn environment(args: &[Vec<u8>]) -> Pairs {
    let mut pairs = Pairs::new();
    let mut add = |key: &str, v: Vec<u8>| {
        let v = trimmed(&v);
        if !v.is_empty() {
            let v = &v[..v.len().min(abi::MAX_INFO_VAL - 1)];
            pairs.push((key.as_bytes().to_vec(), v.to_vec()));
        }
    };
    if let Some((command, rest)) = args.split_first() {
        add("command", command.clone());
        add("argv", rest.join(&b' '));
    }
    if let Some(n) = std::env::var("PMI_SIZE")
        .ok()
        .filter(|n| n.parse::<u32>().is_ok())
    {
        add("maxprocs", n.into_bytes());
    }
    add("host", hostname());
    add("arch", std::env::consts::ARCH.as_bytes().to_vec());
    if let Ok(dir) = std::env::current_dir() {
        use std::os::unix::ffi::OsStringExt;
        add("wdir", dir.into_os_string().into_vec());
    }
    pairs
}

/// `host`: the name `MPI_Get_processor_name` reports too (empty, so left out, if unknown).
fn hostname() -> Vec<u8> {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is writable for its length; gethostname writes at most `len` bytes of it,
    // and the last byte stays 0 whatever it truncates.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len() - 1) } == 0;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    if ok {
        buf[..end].to_vec()
    } else {
        Vec::new()
    }
}

// ------------------------------------------------------------------ the info functions

/// `MPI_Info_create`: an empty info.
///
/// # Safety
/// `info` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Info_create(info: *mut Handle) -> c_int {
    info_call("MPI_Info_create", || {
        if info.is_null() {
            return Err(null("the info"));
        }
        let h = insert(Pairs::new())?;
        // SAFETY: checked non-null; the caller's contract.
        unsafe { info.write(h) };
        Ok(())
    })
}

/// `MPI_Info_create_env` (MPI 4.0): an info made as `MPI_INFO_ENV` is, from `argc` and
/// `argv` when the program gives them (it may call this before `MPI_Init`, to hand the info
/// to a session), else from the process's own command line.
///
/// # Safety
/// `argv` is null or has `argc` NUL-terminated strings; `info` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Info_create_env(
    argc: c_int,
    argv: *const *const c_char,
    info: *mut Handle,
) -> c_int {
    info_call("MPI_Info_create_env", || {
        if info.is_null() {
            return Err(null("the info"));
        }
        let n = usize::try_from(argc)
            .map_err(|_| InfoError::new(class::ARG, format!("argc is {argc}")))?;
        let pairs = if argv.is_null() || n == 0 {
            env().clone()
        } else {
            let mut args = Vec::with_capacity(n);
            for i in 0..n {
                // SAFETY: the caller's contract: `argc` entries at `argv`.
                let a = unsafe { argv.add(i).read() };
                if a.is_null() {
                    break;
                }
                // SAFETY: the caller's contract: each entry is a NUL-terminated string.
                args.push(unsafe { CStr::from_ptr(a) }.to_bytes().to_vec());
            }
            environment(&args)
        };
        let h = insert(pairs)?;
        // SAFETY: checked non-null; the caller's contract.
        unsafe { info.write(h) };
        Ok(())
    })
}

/// `MPI_Info_dup`: a new info with the same pairs in the same order (of `MPI_INFO_ENV` too,
/// which is how a program gets a copy it may change).
///
/// # Safety
/// `newinfo` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Info_dup(info: Handle, newinfo: *mut Handle) -> c_int {
    info_call("MPI_Info_dup", || {
        if newinfo.is_null() {
            return Err(null("the new info"));
        }
        let h = insert(read(info, Pairs::clone)?)?;
        // SAFETY: checked non-null; the caller's contract.
        unsafe { newinfo.write(h) };
        Ok(())
    })
}

/// `MPI_Info_free`: the handle becomes `MPI_INFO_NULL`.
///
/// # Safety
/// `info` is valid for a read and a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Info_free(info: *mut Handle) -> c_int {
    info_call("MPI_Info_free", || {
        if info.is_null() {
            return Err(null("the info"));
        }
        // SAFETY: checked non-null; the caller's contract.
        remove(unsafe { info.read() })?;
        // SAFETY: checked non-null; the caller's contract.
        unsafe { info.write(abi::INFO_NULL) };
        Ok(())
    })
}

/// `MPI_Info_set`: adds the pair at the end, or replaces the key's value where it is (the key
/// keeps its place in `MPI_Info_get_nthkey`'s order).
///
/// # Safety
/// `key` and `value` are NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn MPI_Info_set(
    info: Handle,
    key: *const c_char,
    value: *const c_char,
) -> c_int {
    info_call("MPI_Info_set", || {
        // SAFETY: the caller's contract.
        let (k, v) = unsafe { (key_in(key)?, value_in(value)?) };
        write(info, |pairs| {
            match pairs.iter_mut().find(|(old, _)| *old == k) {
                Some((_, old)) => *old = v,
                None => pairs.push((k, v)),
            }
        })
    })
}

/// `MPI_Info_delete`: `MPI_ERR_INFO_NOKEY` when the key is not there.
///
/// # Safety
/// `key` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn MPI_Info_delete(info: Handle, key: *const c_char) -> c_int {
    info_call("MPI_Info_delete", || {
        // SAFETY: the caller's contract.
        let k = unsafe { key_in(key) }?;
        let found = write(info, |pairs| {
            let at = pairs.iter().position(|(old, _)| *old == k);
            at.map(|i| pairs.remove(i)).is_some()
        })?;
        if found {
            Ok(())
        } else {
            Err(InfoError::new(
                class::INFO_NOKEY,
                format!("the info has no key {:?}", String::from_utf8_lossy(&k)),
            ))
        }
    })
}

/// The value of `key` in `info`, copied out of the table (the lock is not held while it is
/// written to the program's buffer).
///
/// # Safety
/// `key` is a NUL-terminated string.
unsafe fn lookup(info: Handle, key: *const c_char) -> Result<Option<Vec<u8>>, InfoError> {
    // SAFETY: the caller's contract.
    let k = unsafe { key_in(key) }?;
    read(info, |pairs| find(pairs, &k).map(<[u8]>::to_vec))
}

/// `MPI_Info_get_string` (MPI 4.0): `*buflen` in is the buffer's size; the value is cut to
/// `*buflen - 1` characters and NUL-terminated, and `*buflen` out is its whole length plus
/// one, so that a call with `*buflen` 0 asks the size to allocate. When the key is not there,
/// `*flag` is false and the rest left alone.
///
/// # Safety
/// `key` is a NUL-terminated string; `buflen` and `flag` are valid for reads and writes;
/// `value` has `*buflen` bytes (or `*buflen` is 0).
#[no_mangle]
pub unsafe extern "C" fn MPI_Info_get_string(
    info: Handle,
    key: *const c_char,
    buflen: *mut c_int,
    value: *mut c_char,
    flag: *mut c_int,
) -> c_int {
    info_call("MPI_Info_get_string", || {
        if buflen.is_null() || flag.is_null() {
            return Err(null("buflen or flag"));
        }
        // SAFETY: the caller's contract.
        let found = unsafe { lookup(info, key) }?;
        // SAFETY: checked non-null; the caller's contract.
        let cap = usize::try_from(unsafe { buflen.read() }).unwrap_or(0);
        if found.is_some() && cap > 0 && value.is_null() {
            return Err(null("the value buffer"));
        }
        // SAFETY: checked non-null; the caller's contract: `cap` bytes at `value`.
        unsafe {
            flag.write(c_int::from(found.is_some()));
            if let Some(v) = found {
                copy_out(&v, value, cap);
                buflen.write(v.len() as c_int + 1);
            }
        }
        Ok(())
    })
}

/// `MPI_Info_get` (deprecated by MPI 4.0 for `MPI_Info_get_string`, still exported for the
/// programs that call it): the value cut to `valuelen` characters, the buffer having
/// `valuelen + 1` bytes for the NUL.
///
/// # Safety
/// `key` is a NUL-terminated string; `value` has `valuelen + 1` bytes; `flag` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Info_get(
    info: Handle,
    key: *const c_char,
    valuelen: c_int,
    value: *mut c_char,
    flag: *mut c_int,
) -> c_int {
    info_call("MPI_Info_get", || {
        let cap = usize::try_from(valuelen)
            .map_err(|_| InfoError::new(class::ARG, format!("valuelen is {valuelen}")))?
            + 1;
        if flag.is_null() {
            return Err(null("flag"));
        }
        // SAFETY: the caller's contract.
        let found = unsafe { lookup(info, key) }?;
        if found.is_some() && value.is_null() {
            return Err(null("the value buffer"));
        }
        // SAFETY: checked non-null; the caller's contract: `valuelen + 1` bytes at `value`.
        unsafe {
            flag.write(c_int::from(found.is_some()));
            if let Some(v) = found {
                copy_out(&v, value, cap);
            }
        }
        Ok(())
    })
}

/// `MPI_Info_get_valuelen` (deprecated by MPI 4.0, still exported): the value's length
/// without its NUL.
///
/// # Safety
/// `key` is a NUL-terminated string; `valuelen` and `flag` are writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Info_get_valuelen(
    info: Handle,
    key: *const c_char,
    valuelen: *mut c_int,
    flag: *mut c_int,
) -> c_int {
    info_call("MPI_Info_get_valuelen", || {
        if valuelen.is_null() || flag.is_null() {
            return Err(null("valuelen or flag"));
        }
        // SAFETY: the caller's contract.
        let found = unsafe { lookup(info, key) }?;
        // SAFETY: checked non-null; the caller's contract.
        unsafe {
            flag.write(c_int::from(found.is_some()));
            if let Some(v) = found {
                valuelen.write(v.len() as c_int);
            }
        }
        Ok(())
    })
}

/// `MPI_Info_get_nkeys`.
///
/// # Safety
/// `nkeys` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Info_get_nkeys(info: Handle, nkeys: *mut c_int) -> c_int {
    info_call("MPI_Info_get_nkeys", || {
        if nkeys.is_null() {
            return Err(null("nkeys"));
        }
        let n = read(info, Vec::len)?;
        // SAFETY: checked non-null; the caller's contract.
        unsafe { nkeys.write(n as c_int) };
        Ok(())
    })
}

/// `MPI_Info_get_nthkey`: keys in the order they were first set; `n` outside 0 to
/// `nkeys - 1` is `MPI_ERR_ARG`.
///
/// # Safety
/// `key` has `MPI_MAX_INFO_KEY` bytes.
#[no_mangle]
pub unsafe extern "C" fn MPI_Info_get_nthkey(info: Handle, n: c_int, key: *mut c_char) -> c_int {
    info_call("MPI_Info_get_nthkey", || {
        if key.is_null() {
            return Err(null("the key buffer"));
        }
        let (k, nkeys) = read(info, |pairs| {
            let k = usize::try_from(n).ok().and_then(|i| pairs.get(i));
            (k.map(|(k, _)| k.clone()), pairs.len())
        })?;
        let Some(k) = k else {
            return Err(InfoError::new(
                class::ARG,
                format!("key number {n} of an info of {nkeys} keys (0 to nkeys - 1)"),
            ));
        };
        // SAFETY: checked non-null; the caller's contract: MPI_MAX_INFO_KEY bytes, which every
        // key fits with its NUL.
        unsafe { copy_out(&k, key, abi::MAX_INFO_KEY) };
        Ok(())
    })
}

// ------------------------------------------------------------------ a communicator's hints

/// `MPI_Comm_dup_with_info`: `MPI_Comm_dup`, placing the new communicator on the VCI its
/// `ch4_vci` hint names, if any (every member must name the same; at levels below
/// `MPI_THREAD_MULTIPLE` the rank has VCI 0 only).
///
/// # Safety
/// `newcomm` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_dup_with_info(
    comm: Handle,
    info: Handle,
    newcomm: *mut Handle,
) -> c_int {
    let code = call(comm, "MPI_Comm_dup_with_info", |st| {
        if newcomm.is_null() {
            return Err(null_arg("the new communicator"));
        }
        let target = match value(info, VCI_KEY)? {
            None => None,
            Some(v) => Some(v.parse().ok().filter(|&n| n < st.vcis()).ok_or_else(|| {
                ch4::Error::new(
                    ch4_core::ErrorKind::Arg,
                    format!(
                        "{VCI_KEY}={v:?}: this rank's VCIs are 0 to {} (CH4_NUM_VCIS at \
                         MPI_THREAD_MULTIPLE)",
                        st.vcis() - 1
                    ),
                )
            })?),
        };
        let (c, fatal) = crate::comm::parent(st, comm)?;
        if crate::intercomm::remote_size(st, c)?.is_some() {
            // An intercommunicator's VCI is bound by its groups' context ids.
            let h = crate::intercomm::dup(st, c, fatal)?;
            // SAFETY: checked non-null; the caller's contract.
            unsafe { newcomm.write(h) };
            return Ok(());
        }
        // Every member checks that all named the same VCI, or none (u64::MAX), before the
        // communicator is agreed on: members that disagree all fail, none hangs.
        let named = target.map_or(u64::MAX, |v: usize| v as u64);
        let new = on_device!(st, c.vci, |b| {
            ch4_core::coll::agree(b, c.id, "ch4_vci hint", named)
                .and_then(|()| ch4_core::coll::new_dup(b, c.id))
        })?;
        let new = match target {
            Some(vci) => crate::state::CommRef {
                id: st.device(vci)?.adopt_comm(new)?,
                vci,
            },
            None => st.adopt_comm(new)?,
        };
        let h = st.add_comm(new.id, new.vci, fatal);
        // SAFETY: checked non-null; the caller's contract.
        unsafe { newcomm.write(h) };
        Ok(())
    });
    // SAFETY: the caller's contract.
    unsafe { crate::attributes::after_comm_dup(code, comm, newcomm) }
}

/// `MPI_Comm_set_info`: the hints are accepted and none changes a communicator already made
/// (its VCI stays), as the standard allows.
#[no_mangle]
pub extern "C" fn MPI_Comm_set_info(comm: Handle, info: Handle) -> c_int {
    call(comm, "MPI_Comm_set_info", |st| {
        st.comm(comm)?;
        value(info, VCI_KEY).map(drop)
    })
}

/// `MPI_Comm_get_info`: a new info with the hints in use, `ch4_vci` the communicator's VCI.
///
/// # Safety
/// `info_used` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_get_info(comm: Handle, info_used: *mut Handle) -> c_int {
    call(comm, "MPI_Comm_get_info", |st| {
        if info_used.is_null() {
            return Err(null_arg("the info"));
        }
        let vci = st.comm(comm)?.vci;
        let h = insert(vec![(
            VCI_KEY.as_bytes().to_vec(),
            vci.to_string().into_bytes(),
        )])
        .map_err(|e| ch4::Error::new(ch4_core::ErrorKind::Exhausted, e.message))?;
        // SAFETY: checked non-null; the caller's contract.
        unsafe { info_used.write(h) };
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_handles_are_no_other_kind_of_handle() {
        let h = insert(Pairs::new()).ok().unwrap();
        assert_eq!((h as u64) >> 58, 1);
        for other in [
            abi::INFO_NULL,
            abi::INFO_ENV,
            abi::COMM_WORLD,
            abi::GROUP_EMPTY,
        ] {
            assert_ne!(h, other);
        }
        assert!(abi::req_in(h).is_err());
        assert!(abi::message_in(h).is_none());
        remove(h).ok().unwrap();
    }

    #[test]
    fn a_freed_handle_stays_refused_when_its_slot_is_reused() {
        let a = insert(Pairs::new()).ok().unwrap();
        remove(a).ok().unwrap();
        let b = insert(Pairs::new()).ok().unwrap();
        assert_ne!(a, b);
        assert!(read(a, Vec::len).is_err());
        assert!(remove(a).is_err());
        assert_eq!(read(b, Vec::len).ok(), Some(0));
        remove(b).ok().unwrap();
    }

    #[test]
    fn only_spaces_at_either_end_are_dropped() {
        assert_eq!(trimmed(b"  a b  "), b"a b");
        assert_eq!(trimmed(b"   "), b"");
        assert_eq!(trimmed(b"\ta\t"), b"\ta\t");
    }

    #[test]
    fn the_environment_names_the_command_and_its_arguments() {
        let args = [b"/bin/prog".to_vec(), b"-x".to_vec(), b"1".to_vec()];
        let env = environment(&args);
        assert_eq!(find(&env, b"command"), Some(&b"/bin/prog"[..]));
        assert_eq!(find(&env, b"argv"), Some(&b"-x 1"[..]));
        assert_eq!(find(&env, b"arch"), Some(std::env::consts::ARCH.as_bytes()));
        let alone = environment(&args[..1]);
        assert_eq!(find(&alone, b"argv"), None);
    }
}

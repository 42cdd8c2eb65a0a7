//! Info objects, the standard's chapter "The Info Object": `MPI_Info_create`, `_set`,
//! `_get_string` (and the older `_get`, `_get_valuelen`), `_delete`, `_get_nkeys`,
//! `_get_nthkey`, `_dup`, `_free`, and the hints of a communicator (`MPI_Comm_dup_with_info`,
//! `MPI_Comm_set_info`, `MPI_Comm_get_info`).
//!
//! An info is an ordered list of key-value strings, kept in a table of this module behind its
//! own lock (any thread may call at `MPI_THREAD_MULTIPLE`); its handle is its index with bit 58
//! set, a range no other kind of handle uses. The one hint the library acts on is `ch4_vci`:
//! `MPI_Comm_dup_with_info` with it places the new communicator on that VCI of the rank
//! (`MPI_THREAD_MULTIPLE`; every member must name the same one, which is checked), as
//! `Communicator::dup_on_vci` does in Rust. Other keys are kept and ignored, as the standard
//! allows.

use std::ffi::{c_char, c_int, CStr};
use std::sync::{Mutex, MutexGuard};

use crate::abi::{self, class, Handle};
use crate::call::{call, null_arg, on_device, put, put_string};
use crate::errors;
use crate::state::State;

/// The key the library reads: the VCI of a communicator being made.
pub(crate) const VCI_KEY: &str = "ch4_vci";

const INFO_BIT: u64 = 1 << 58;

/// One info: its pairs in the order they were first set.
type Info = Vec<(String, String)>;

/// Every info by index, `None` once freed.
static INFOS: Mutex<Vec<Option<Info>>> = Mutex::new(Vec::new());

fn infos() -> MutexGuard<'static, Vec<Option<Info>>> {
    // A panic while it was held (none of this module's code panics) leaves it as it was.
    INFOS.lock().unwrap_or_else(|p| p.into_inner())
}

fn info_out(i: usize) -> Handle {
    (i as u64 | INFO_BIT) as Handle
}

fn info_index(h: Handle) -> Option<usize> {
    let raw = h as u64;
    (raw & INFO_BIT != 0 && raw >> 59 == 0).then_some((raw & !INFO_BIT) as usize)
}

/// An error of one of the info classes (`MPI_ERR_INFO`, `_INFO_KEY`, `_INFO_VALUE`,
/// `_INFO_NOKEY`), which the device's error kinds do not name.
struct InfoError(c_int, String);

fn bad_info(h: Handle) -> InfoError {
    InfoError(
        class::INFO,
        format!("{h:#x} is not an info of this process (freed, or never made)"),
    )
}

/// Runs `f` on info `h`'s pairs.
fn with_info<R>(h: Handle, f: impl FnOnce(&mut Info) -> R) -> Result<R, InfoError> {
    let mut all = infos();
    match info_index(h)
        .and_then(|i| all.get_mut(i))
        .and_then(Option::as_mut)
    {
        Some(info) => Ok(f(info)),
        None => Err(bad_info(h)),
    }
}

/// A key from C: its spaces at either end dropped (MPI 4.1, 10.1), at most
/// `MPI_MAX_INFO_KEY - 1` characters and not empty.
///
/// # Safety
/// `key` is null or a NUL-terminated string.
unsafe fn key_in(key: *const c_char) -> Result<String, InfoError> {
    if key.is_null() {
        return Err(InfoError(
            class::INFO_KEY,
            "the key is a null pointer".into(),
        ));
    }
    // SAFETY: the caller's contract.
    let k = unsafe { CStr::from_ptr(key) }
        .to_string_lossy()
        .trim()
        .to_string();
    if k.is_empty() || k.len() >= abi::MAX_INFO_KEY {
        return Err(InfoError(
            class::INFO_KEY,
            format!(
                "an info key has 1 to {} characters, not {}",
                abi::MAX_INFO_KEY - 1,
                k.len()
            ),
        ));
    }
    Ok(k)
}

/// Runs an info function: its own error classes are reported as such through
/// `MPI_COMM_WORLD`'s handler, the others as every function's.
fn info_call(func: &'static str, f: impl FnOnce(&State) -> Result<(), InfoError>) -> c_int {
    let mut failed = None;
    let code = call(abi::COMM_WORLD, func, |st| {
        if let Err(e) = f(st) {
            failed = Some(e);
        }
        Ok(())
    });
    match failed {
        None => code,
        Some(InfoError(class, message)) => {
            match crate::state::with(|st| {
                errors::fail_with(st, abi::COMM_WORLD, class, format!("{func}: {message}"))
            }) {
                Ok(code) | Err(code) => code,
            }
        }
    }
}

/// The value of `key` in info `h` (`MPI_INFO_NULL`: none), for the functions that read hints.
pub(crate) fn value(h: Handle, key: &str) -> ch4::Result<Option<String>> {
    if h == abi::INFO_NULL {
        return Ok(None);
    }
    with_info(h, |info| {
        info.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
    })
    .map_err(|InfoError(_, m)| ch4::Error::new(ch4_core::ErrorKind::Arg, m))
}

/// `MPI_Info_create`: an empty info.
///
/// # Safety
/// `info` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Info_create(info: *mut Handle) -> c_int {
    info_call("MPI_Info_create", |_| {
        if info.is_null() {
            return Err(InfoError(class::ARG, "the info is a null pointer".into()));
        }
        let mut all = infos();
        let i = match all.iter().position(Option::is_none) {
            Some(i) => {
                all[i] = Some(Vec::new());
                i
            }
            None => {
                all.push(Some(Vec::new()));
                all.len() - 1
            }
        };
        // SAFETY: checked non-null; the caller's contract.
        unsafe { info.write(info_out(i)) };
        Ok(())
    })
}

/// `MPI_Info_dup`: a new info with the same pairs in the same order.
///
/// # Safety
/// `newinfo` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Info_dup(info: Handle, newinfo: *mut Handle) -> c_int {
    info_call("MPI_Info_dup", |_| {
        if newinfo.is_null() {
            return Err(InfoError(
                class::ARG,
                "the new info is a null pointer".into(),
            ));
        }
        let copy = with_info(info, |pairs| pairs.clone())?;
        let mut all = infos();
        all.push(Some(copy));
        let h = info_out(all.len() - 1);
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
    info_call("MPI_Info_free", |_| {
        if info.is_null() {
            return Err(InfoError(class::ARG, "the info is a null pointer".into()));
        }
        // SAFETY: the caller's contract.
        let h = unsafe { info.read() };
        let freed = info_index(h).and_then(|i| infos().get_mut(i).and_then(Option::take));
        if freed.is_none() {
            return Err(bad_info(h));
        }
        // SAFETY: checked non-null; the caller's contract.
        unsafe { info.write(abi::INFO_NULL) };
        Ok(())
    })
}

/// `MPI_Info_set`: adds the pair, or replaces the key's value where it is.
///
/// # Safety
/// `key` and `value` are NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn MPI_Info_set(
    info: Handle,
    key: *const c_char,
    value: *const c_char,
) -> c_int {
    info_call("MPI_Info_set", |_| {
        // SAFETY: the caller's contract.
        let k = unsafe { key_in(key) }?;
        if value.is_null() {
            return Err(InfoError(
                class::INFO_VALUE,
                "the value is a null pointer".into(),
            ));
        }
        // SAFETY: the caller's contract.
        let v = unsafe { CStr::from_ptr(value) }
            .to_string_lossy()
            .trim()
            .to_string();
        if v.is_empty() || v.len() >= abi::MAX_INFO_VAL {
            return Err(InfoError(
                class::INFO_VALUE,
                format!(
                    "an info value has 1 to {} characters, not {}",
                    abi::MAX_INFO_VAL - 1,
                    v.len()
                ),
            ));
        }
        with_info(info, |pairs| {
            match pairs.iter_mut().find(|(old, _)| *old == k) {
                Some((_, old)) => *old = v,
                None => pairs.push((k, v)),
            }
        })
    })
}

/// `MPI_Info_delete`.
///
/// # Safety
/// `key` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn MPI_Info_delete(info: Handle, key: *const c_char) -> c_int {
    info_call("MPI_Info_delete", |_| {
        // SAFETY: the caller's contract.
        let k = unsafe { key_in(key) }?;
        let found = with_info(info, |pairs| {
            let before = pairs.len();
            pairs.retain(|(old, _)| *old != k);
            pairs.len() != before
        })?;
        if found {
            Ok(())
        } else {
            Err(InfoError(
                class::INFO_NOKEY,
                format!("the info has no key {k:?}"),
            ))
        }
    })
}

/// `MPI_Info_get_string` (MPI 4.0): the value cut to `*buflen - 1` characters; `*buflen`
/// becomes its whole length plus one.
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
    info_call("MPI_Info_get_string", |_| {
        if buflen.is_null() || flag.is_null() {
            return Err(InfoError(
                class::ARG,
                "buflen or flag is a null pointer".into(),
            ));
        }
        // SAFETY: the caller's contract.
        let k = unsafe { key_in(key) }?;
        let found = with_info(info, |pairs| {
            pairs
                .iter()
                .find(|(old, _)| *old == k)
                .map(|(_, v)| v.clone())
        })?;
        // SAFETY: checked non-null; the caller's contract.
        unsafe {
            flag.write(c_int::from(found.is_some()));
            if let Some(v) = found {
                let cap = usize::try_from(buflen.read()).unwrap_or(0);
                put_string(&v, value, cap, std::ptr::null_mut());
                buflen.write(v.len() as c_int + 1);
            }
        }
        Ok(())
    })
}

/// `MPI_Info_get` (deprecated in MPI 4.0, still exported): the value cut to `valuelen`
/// characters.
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
    let mut len = valuelen.saturating_add(1);
    // SAFETY: the caller's contract, as MPI_Info_get_string's with a buffer of valuelen + 1.
    unsafe { MPI_Info_get_string(info, key, &mut len, value, flag) }
}

/// `MPI_Info_get_valuelen` (deprecated in MPI 4.0, still exported).
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
    info_call("MPI_Info_get_valuelen", |_| {
        // SAFETY: the caller's contract.
        let k = unsafe { key_in(key) }?;
        let len = with_info(info, |pairs| {
            pairs
                .iter()
                .find(|(old, _)| *old == k)
                .map(|(_, v)| v.len())
        })?;
        // SAFETY: the caller's contract.
        unsafe {
            put(flag, c_int::from(len.is_some()));
            if let Some(n) = len {
                put(valuelen, n as c_int);
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
    info_call("MPI_Info_get_nkeys", |_| {
        let n = with_info(info, |pairs| pairs.len())?;
        // SAFETY: the caller's contract.
        unsafe { put(nkeys, n as c_int) };
        Ok(())
    })
}

/// `MPI_Info_get_nthkey`: keys in the order they were first set.
///
/// # Safety
/// `key` has `MPI_MAX_INFO_KEY` bytes.
#[no_mangle]
pub unsafe extern "C" fn MPI_Info_get_nthkey(info: Handle, n: c_int, key: *mut c_char) -> c_int {
    info_call("MPI_Info_get_nthkey", |_| {
        let k = with_info(info, |pairs| {
            usize::try_from(n)
                .ok()
                .and_then(|i| pairs.get(i))
                .map(|(k, _)| k.clone())
        })?;
        let Some(k) = k else {
            return Err(InfoError(
                class::ARG,
                format!("the info has no key number {n}"),
            ));
        };
        // SAFETY: the caller's contract.
        unsafe { put_string(&k, key, abi::MAX_INFO_KEY, std::ptr::null_mut()) };
        Ok(())
    })
}

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
    call(comm, "MPI_Comm_dup_with_info", |st| {
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
    })
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
        let mut all = infos();
        all.push(Some(vec![(VCI_KEY.to_string(), vci.to_string())]));
        let h = info_out(all.len() - 1);
        // SAFETY: checked non-null; the caller's contract.
        unsafe { info_used.write(h) };
        Ok(())
    })
}

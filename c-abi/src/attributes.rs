//! Caching, from the standard's chapter "Groups, Contexts, Communicators, and Caching" (MPI
//! 4.1 sections 7.7 and 7.8): attribute keys (`MPI_Comm_create_keyval`,
//! `MPI_Type_create_keyval` and their deprecated forerunners `MPI_Keyval_create`,
//! `MPI_Attr_put`, ...), the attributes a program caches on communicators and datatypes, the
//! predefined attributes of a communicator (`MPI_TAG_UB`, `MPI_LASTUSEDCODE`, ...), and the
//! names of communicators (`MPI_Comm_set_name`, `MPI_Comm_get_name`).
//!
//! An attribute is a pointer-sized value under a key; the key carries the program's copy and
//! delete functions. They are called where the standard says: the copy function of each
//! attribute when its object is duplicated (`MPI_Comm_dup`, `MPI_Comm_dup_with_info`,
//! `MPI_Type_dup`), the delete function when an attribute is deleted, overwritten, or its
//! object freed, and at `MPI_Finalize` on `MPI_COMM_SELF`'s attributes, last set first (MPI
//! 4.1 section 11.2.4), then on `MPI_COMM_WORLD`'s, as MPICH does. A callback may call MPI
//! (MPICH's tests read and delete attributes from inside delete functions), so none runs with
//! a lock of this module held, and each runs with the gate let go (`state::callback`); a
//! callback's failure fails the call, with the class of the code it returned, and leaves the
//! attribute where it was.
//!
//! A key lives while the program holds it or an attribute uses it: `MPI_Comm_free_keyval`
//! takes the program's hold, and the key itself goes when the last attribute under it is
//! deleted (MPI 4.1 section 7.7.2; freeing it again meanwhile does nothing, as in MPICH, whose
//! `keyval_double_free` tests free a key from its own delete function). Keys are numbered from
//! [`FIRST_KEYVAL`] up and never reused.
//!
//! The tables (keys, attributes by object, names) are one map behind one lock, apart from the
//! handle tables of `state`, so that the modules that make and free communicators and
//! datatypes only call the hooks at the end of this file ([`after_comm_dup`],
//! [`before_comm_free`], [`forget_comm`], [`after_type_dup`], [`before_type_free`],
//! [`at_finalize`]).

use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::{Mutex, MutexGuard, OnceLock};

use crate::abi::{self, class, Handle};
use crate::call::{null_arg, put, put_string};
use crate::errors::{self, call_classed, Failure, ERR_KEYVAL, ERR_TYPE};
use crate::state::{self, State};

/// `MPI_KEYVAL_INVALID`.
const KEYVAL_INVALID: c_int = 0;
/// The first key handed to the program: above the predefined keys (501-507 for
/// communicators, 601-605 for windows).
const FIRST_KEYVAL: c_int = 0x1_0000;

/// The predefined communicator keys (MPI 4.1 section 9.1.2).
const TAG_UB: c_int = 501;
const IO: c_int = 502;
const HOST: c_int = 503;
const WTIME_IS_GLOBAL: c_int = 504;
const APPNUM: c_int = 505;
const LASTUSEDCODE: c_int = 506;
const UNIVERSE_SIZE: c_int = 507;

/// The objects attributes are cached on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Kind {
    /// Communicators (`MPI_Comm_create_keyval`, `MPI_Keyval_create`).
    Comm,
    /// Datatypes (`MPI_Type_create_keyval`).
    Type,
}

impl Kind {
    /// The object's name in messages.
    fn what(self) -> &'static str {
        match self {
            Kind::Comm => "communicator",
            Kind::Type => "datatype",
        }
    }
}

/// A copy function of the ABI (`MPI_Comm_copy_attr_function`, `MPI_Type_copy_attr_function`:
/// the object is a handle either way).
type CopyFn =
    unsafe extern "C" fn(Handle, c_int, *mut c_void, *mut c_void, *mut c_void, *mut c_int) -> c_int;

/// A delete function of the ABI (`MPI_Comm_delete_attr_function`,
/// `MPI_Type_delete_attr_function`).
type DeleteFn = unsafe extern "C" fn(Handle, c_int, *mut c_void, *mut c_void) -> c_int;

/// What duplicating an object does with an attribute.
#[derive(Clone, Copy)]
enum Copy {
    /// `MPI_COMM_NULL_COPY_FN` (the ABI's 0): the copy has no such attribute.
    Null,
    /// `MPI_COMM_DUP_FN` (the ABI's 1): the copy has the same value.
    Dup,
    /// The program's function decides.
    Program(CopyFn),
}

/// An attribute key.
struct Keyval {
    /// What it may be cached on.
    kind: Kind,
    copy: Copy,
    /// `None`: `MPI_COMM_NULL_DELETE_FN` (the ABI's 0).
    delete: Option<DeleteFn>,
    /// The `extra_state` given when it was made, passed to its functions.
    extra: usize,
    /// Whether the program freed it (it lives on while attributes use it).
    freed: bool,
    /// The attributes under it.
    uses: usize,
}

/// One cached attribute.
#[derive(Clone, Copy)]
struct Attr {
    keyval: c_int,
    value: usize,
}

/// The keys, the attributes by object (each object's in the order they were first set) and
/// the communicators' names.
struct Cache {
    keyvals: BTreeMap<c_int, Keyval>,
    attrs: BTreeMap<(Kind, Handle), Vec<Attr>>,
    names: BTreeMap<Handle, String>,
    next: c_int,
}

static CACHE: Mutex<Cache> = Mutex::new(Cache {
    keyvals: BTreeMap::new(),
    attrs: BTreeMap::new(),
    names: BTreeMap::new(),
    next: FIRST_KEYVAL,
});

fn cache() -> MutexGuard<'static, Cache> {
    CACHE.lock().unwrap_or_else(|p| p.into_inner())
}

impl Cache {
    /// Key `keyval` of `kind`, for a call that may use a key the program freed (get, delete)
    /// or only a held one (set).
    fn keyval(&mut self, kind: Kind, keyval: c_int, held: bool) -> Result<&mut Keyval, Failure> {
        match self.keyvals.get_mut(&keyval) {
            Some(k) if k.kind == kind && !(held && k.freed) => Ok(k),
            Some(k) if k.kind != kind => Err(Failure::new(
                ERR_KEYVAL,
                format!(
                    "attribute key {keyval} is a {}'s, not a {}'s",
                    k.kind.what(),
                    kind.what()
                ),
            )),
            Some(_) => Err(Failure::new(
                ERR_KEYVAL,
                format!("attribute key {keyval} was freed"),
            )),
            None => Err(bad_keyval(keyval)),
        }
    }

    /// The attribute under `keyval` on `obj`.
    fn find(&self, kind: Kind, obj: Handle, keyval: c_int) -> Option<Attr> {
        self.attrs
            .get(&(kind, obj))?
            .iter()
            .find(|a| a.keyval == keyval)
            .copied()
    }

    /// Sets `value` under `keyval` on `obj`: in place if it is there, last otherwise.
    fn store(&mut self, kind: Kind, obj: Handle, keyval: c_int, value: usize) {
        let list = self.attrs.entry((kind, obj)).or_default();
        match list.iter_mut().find(|a| a.keyval == keyval) {
            Some(a) => a.value = value,
            None => {
                list.push(Attr { keyval, value });
                if let Some(k) = self.keyvals.get_mut(&keyval) {
                    k.uses += 1;
                }
            }
        }
    }

    /// Takes the attribute under `keyval` off `obj`; the key goes with its last use once the
    /// program has freed it.
    fn unstore(&mut self, kind: Kind, obj: Handle, keyval: c_int) {
        let Some(list) = self.attrs.get_mut(&(kind, obj)) else {
            return;
        };
        let Some(i) = list.iter().position(|a| a.keyval == keyval) else {
            return;
        };
        list.remove(i);
        if list.is_empty() {
            self.attrs.remove(&(kind, obj));
        }
        self.release(keyval);
    }

    /// One use of `keyval` fewer.
    fn release(&mut self, keyval: c_int) {
        if let Some(k) = self.keyvals.get_mut(&keyval) {
            k.uses = k.uses.saturating_sub(1);
            if k.freed && k.uses == 0 {
                self.keyvals.remove(&keyval);
            }
        }
    }
}

#[cold]
fn bad_keyval(keyval: c_int) -> Failure {
    Failure::new(
        ERR_KEYVAL,
        format!("{keyval} is not an attribute key of this process"),
    )
}

#[cold]
fn predefined_key(keyval: c_int) -> Failure {
    Failure::new(
        ERR_KEYVAL,
        format!("attribute key {keyval} is predefined: it cannot be set, deleted or freed"),
    )
}

/// Whether `keyval` is one of the predefined keys (of communicators or windows).
fn is_predefined(keyval: c_int) -> bool {
    (TAG_UB..=UNIVERSE_SIZE).contains(&keyval) || (601..=605).contains(&keyval)
}

/// Checks that `obj` is a live object of `kind`.
fn check_object(st: &State, kind: Kind, obj: Handle) -> Result<(), Failure> {
    match kind {
        Kind::Comm => st.with_slot(obj, |_| ()).map_err(Failure::from),
        Kind::Type => crate::derived::desc(st, obj)
            .map(drop)
            .map_err(|e| Failure::new(ERR_TYPE, e.to_string())),
    }
}

/// The failure of a callback that returned `rc`: its class (`MPI_ERR_OTHER` for a code MPI
/// never handed out).
#[cold]
fn callback_failed(what: &str, keyval: c_int, rc: c_int) -> Failure {
    let class = errors::class_of_code(rc)
        .filter(|&c| c != class::SUCCESS)
        .unwrap_or(class::OTHER);
    Failure::new(
        class,
        format!("the {what} function of attribute key {keyval} returned error code {rc}"),
    )
}

/// Runs the delete function of `keyval` on `value`, cached on `obj`, with no lock held.
fn run_delete(
    delete: Option<DeleteFn>,
    extra: usize,
    obj: Handle,
    keyval: c_int,
    value: usize,
) -> Result<(), Failure> {
    let Some(f) = delete else {
        return Ok(());
    };
    let rc = state::callback(|| {
        // SAFETY: `f` is the program's delete function, given with the ABI's type; the
        // value and the extra state are the pointers the program gave, handed back.
        unsafe { f(obj, keyval, value as *mut c_void, extra as *mut c_void) }
    });
    if rc == class::SUCCESS {
        Ok(())
    } else {
        Err(callback_failed("delete", keyval, rc))
    }
}

/// The delete function and extra state of `keyval`, and the attribute under it on `obj`.
fn deletion(kind: Kind, obj: Handle, keyval: c_int) -> Option<(Option<DeleteFn>, usize, Attr)> {
    let mut c = cache();
    let a = c.find(kind, obj, keyval)?;
    let k = c.keyval(kind, keyval, false).ok()?;
    Some((k.delete, k.extra, a))
}

// ------------------------------------------------------------------ the operations

/// Makes a key of `kind`.
///
/// # Safety
/// `copy` is null, 1 or a copy function of the ABI's type for `kind`; `delete` null or a
/// delete function of that type; `keyval` is valid for a write.
unsafe fn create_keyval(
    kind: Kind,
    func: &'static str,
    copy: *const c_void,
    delete: *const c_void,
    keyval: *mut c_int,
    extra: *mut c_void,
) -> c_int {
    call_classed(abi::COMM_WORLD, func, |_| {
        if keyval.is_null() {
            return Err(null_arg("the key").into());
        }
        let copy = match copy as usize {
            0 => Copy::Null,
            1 => Copy::Dup,
            // SAFETY: the caller's contract: any other value is a function of the ABI's
            // copy type (a function pointer and a data pointer have one size here).
            _ => Copy::Program(unsafe { std::mem::transmute::<*const c_void, CopyFn>(copy) }),
        };
        let delete = (!delete.is_null()).then(|| {
            // SAFETY: as for `copy`: non-null, a function of the ABI's delete type.
            unsafe { std::mem::transmute::<*const c_void, DeleteFn>(delete) }
        });
        let mut c = cache();
        let n = c.next;
        c.next = n
            .checked_add(1)
            .ok_or_else(|| Failure::new(class::NO_MEM, "no attribute key is left"))?;
        c.keyvals.insert(
            n,
            Keyval {
                kind,
                copy,
                delete,
                extra: extra as usize,
                freed: false,
                uses: 0,
            },
        );
        // SAFETY: checked non-null; the caller's contract.
        unsafe { keyval.write(n) };
        Ok(())
    })
}

/// Frees the program's hold on a key of `kind`; `*keyval` becomes `MPI_KEYVAL_INVALID`.
///
/// # Safety
/// `keyval` is valid for a read and a write.
unsafe fn free_keyval(kind: Kind, func: &'static str, keyval: *mut c_int) -> c_int {
    call_classed(abi::COMM_WORLD, func, |_| {
        if keyval.is_null() {
            return Err(null_arg("the key").into());
        }
        // SAFETY: the caller's contract.
        let n = unsafe { keyval.read() };
        if is_predefined(n) {
            return Err(predefined_key(n));
        }
        let mut c = cache();
        let k = c.keyval(kind, n, false)?;
        // A key freed already and still in use: nothing more to free (MPICH's
        // `MPIR_free_keyval` does the same).
        if !k.freed {
            k.freed = true;
            if k.uses == 0 {
                c.keyvals.remove(&n);
            }
        }
        // SAFETY: the caller's contract.
        unsafe { keyval.write(KEYVAL_INVALID) };
        Ok(())
    })
}

/// Sets attribute `keyval` of `obj` to `value`, deleting the value it had first (a failing
/// delete function leaves the old value).
fn set_attr(
    st: &State,
    kind: Kind,
    obj: Handle,
    keyval: c_int,
    value: usize,
) -> Result<(), Failure> {
    check_object(st, kind, obj)?;
    if is_predefined(keyval) {
        return Err(predefined_key(keyval));
    }
    let old = {
        let mut c = cache();
        let k = c.keyval(kind, keyval, true)?;
        let (delete, extra) = (k.delete, k.extra);
        match c.find(kind, obj, keyval) {
            Some(a) => Some((delete, extra, a.value)),
            None => {
                c.store(kind, obj, keyval, value);
                None
            }
        }
    };
    if let Some((delete, extra, old)) = old {
        run_delete(delete, extra, obj, keyval, old)?;
        cache().store(kind, obj, keyval, value);
    }
    Ok(())
}

/// The value of attribute `keyval` on `obj`, if it has one.
fn get_attr(st: &State, kind: Kind, obj: Handle, keyval: c_int) -> Result<Option<usize>, Failure> {
    check_object(st, kind, obj)?;
    if kind == Kind::Comm && is_predefined(keyval) {
        return predefined(st, obj, keyval);
    }
    let mut c = cache();
    c.keyval(kind, keyval, false)?;
    Ok(c.find(kind, obj, keyval).map(|a| a.value))
}

/// Deletes attribute `keyval` from `obj` (nothing if it has none); a failing delete function
/// leaves it.
fn delete_attr(st: &State, kind: Kind, obj: Handle, keyval: c_int) -> Result<(), Failure> {
    check_object(st, kind, obj)?;
    if is_predefined(keyval) {
        return Err(predefined_key(keyval));
    }
    cache().keyval(kind, keyval, false)?;
    if let Some((delete, extra, a)) = deletion(kind, obj, keyval) {
        run_delete(delete, extra, obj, keyval, a.value)?;
        cache().unstore(kind, obj, keyval);
    }
    Ok(())
}

/// Deletes every attribute of `obj`, the last set first; the first failing delete function
/// stops it, leaving that attribute and those set before it.
fn delete_all(kind: Kind, obj: Handle) -> Result<(), Failure> {
    loop {
        let last = {
            let mut c = cache();
            let Some(a) = c.attrs.get(&(kind, obj)).and_then(|l| l.last()).copied() else {
                return Ok(());
            };
            match c.keyval(kind, a.keyval, false) {
                Ok(k) => (k.delete, k.extra, a),
                // A key that is gone has no function to call.
                Err(_) => (None, 0, a),
            }
        };
        let (delete, extra, a) = last;
        run_delete(delete, extra, obj, a.keyval, a.value)?;
        cache().unstore(kind, obj, a.keyval);
    }
}

/// Gives `new`, a copy of `old`, the attributes the copy functions pass on, in `old`'s order.
fn copy_all(kind: Kind, old: Handle, new: Handle) -> Result<(), Failure> {
    let list: Vec<(Attr, Copy, usize)> = {
        let mut c = cache();
        let attrs = c.attrs.get(&(kind, old)).cloned().unwrap_or_default();
        attrs
            .into_iter()
            .filter_map(|a| {
                let k = c.keyval(kind, a.keyval, false).ok()?;
                Some((a, k.copy, k.extra))
            })
            .collect()
    };
    for (a, copy, extra) in list {
        let value = match copy {
            Copy::Null => continue,
            Copy::Dup => a.value,
            Copy::Program(f) => {
                let (mut out, mut flag): (usize, c_int) = (0, 0);
                let rc = state::callback(|| {
                    // SAFETY: `f` is the program's copy function with the ABI's type; it
                    // writes a pointer-sized value through `out` and an int through `flag`,
                    // both live locals.
                    unsafe {
                        f(
                            old,
                            a.keyval,
                            extra as *mut c_void,
                            a.value as *mut c_void,
                            (&mut out as *mut usize).cast(),
                            &mut flag,
                        )
                    }
                });
                if rc != class::SUCCESS {
                    return Err(callback_failed("copy", a.keyval, rc));
                }
                if flag == 0 {
                    continue;
                }
                out
            }
        };
        cache().store(kind, new, a.keyval, value);
    }
    Ok(())
}

// ------------------------------------------------------------------ predefined attributes

/// The values behind the predefined keys, at fixed addresses (an attribute is returned as a
/// pointer to its value).
static TAG_UB_VALUE: OnceLock<c_int> = OnceLock::new();
static UNIVERSE_SIZE_VALUE: OnceLock<c_int> = OnceLock::new();
/// `MPI_HOST`: no process is the host (`MPI_PROC_NULL`).
static HOST_VALUE: c_int = abi::PROC_NULL;
/// `MPI_IO`: every process can do I/O (`MPI_ANY_SOURCE`).
static IO_VALUE: c_int = abi::ANY_SOURCE;
/// `MPI_WTIME_IS_GLOBAL`: the clocks are not synchronized.
static WTIME_IS_GLOBAL_VALUE: c_int = 0;

/// The predefined attribute `keyval` (the same for every communicator): `MPI_TAG_UB` (the
/// largest tag the job's networks carry), `MPI_HOST`, `MPI_IO`, `MPI_WTIME_IS_GLOBAL`,
/// `MPI_UNIVERSE_SIZE` (the job's processes: ch4 starts no others), `MPI_LASTUSEDCODE`;
/// `MPI_APPNUM` is not set (the launcher runs one program) and the window keys never are on a
/// communicator.
fn predefined(st: &State, comm: Handle, keyval: c_int) -> Result<Option<usize>, Failure> {
    let c = st.comm(comm)?;
    let value: Option<*const c_int> = match keyval {
        TAG_UB => {
            let ub = st.device(c.vci)?.tag_ub();
            Some(TAG_UB_VALUE.get_or_init(|| ub))
        }
        HOST => Some(&HOST_VALUE),
        IO => Some(&IO_VALUE),
        WTIME_IS_GLOBAL => Some(&WTIME_IS_GLOBAL_VALUE),
        UNIVERSE_SIZE => {
            let n = st.device(0)?.size(st.world)?;
            Some(UNIVERSE_SIZE_VALUE.get_or_init(|| n))
        }
        LASTUSEDCODE => Some(errors::LAST_USED.as_ptr().cast_const()),
        APPNUM => None,
        _ => None,
    };
    Ok(value.map(|p| p as usize))
}

// ------------------------------------------------------------------ the C functions

/// Writes an attribute's value and whether there is one, as the get functions return them.
///
/// # Safety
/// `attribute_val` is valid for a write of a pointer; `flag` of an int.
unsafe fn put_value(value: Option<usize>, attribute_val: *mut c_void, flag: *mut c_int) {
    // SAFETY: the caller's contract (C passes the address of a pointer as void*).
    unsafe {
        put(flag, c_int::from(value.is_some()));
        if let Some(v) = value {
            put(attribute_val.cast::<usize>(), v);
        }
    }
}

/// `MPI_Comm_create_keyval`.
///
/// # Safety
/// The functions are null, `MPI_COMM_DUP_FN` or of the ABI's types; `comm_keyval` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_create_keyval(
    comm_copy_attr_fn: *const c_void,
    comm_delete_attr_fn: *const c_void,
    comm_keyval: *mut c_int,
    extra_state: *mut c_void,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        create_keyval(
            Kind::Comm,
            "MPI_Comm_create_keyval",
            comm_copy_attr_fn,
            comm_delete_attr_fn,
            comm_keyval,
            extra_state,
        )
    }
}

/// `MPI_Keyval_create` (deprecated since MPI-2.0): `MPI_Comm_create_keyval`.
///
/// # Safety
/// As `MPI_Comm_create_keyval`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Keyval_create(
    copy_fn: *const c_void,
    delete_fn: *const c_void,
    keyval: *mut c_int,
    extra_state: *mut c_void,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        create_keyval(
            Kind::Comm,
            "MPI_Keyval_create",
            copy_fn,
            delete_fn,
            keyval,
            extra_state,
        )
    }
}

/// `MPI_Comm_free_keyval`.
///
/// # Safety
/// `comm_keyval` is readable and writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_free_keyval(comm_keyval: *mut c_int) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { free_keyval(Kind::Comm, "MPI_Comm_free_keyval", comm_keyval) }
}

/// `MPI_Keyval_free` (deprecated since MPI-2.0): `MPI_Comm_free_keyval`.
///
/// # Safety
/// `keyval` is readable and writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Keyval_free(keyval: *mut c_int) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { free_keyval(Kind::Comm, "MPI_Keyval_free", keyval) }
}

/// `MPI_Comm_set_attr`.
#[no_mangle]
pub extern "C" fn MPI_Comm_set_attr(
    comm: Handle,
    comm_keyval: c_int,
    attribute_val: *mut c_void,
) -> c_int {
    call_classed(comm, "MPI_Comm_set_attr", |st| {
        set_attr(st, Kind::Comm, comm, comm_keyval, attribute_val as usize)
    })
}

/// `MPI_Attr_put` (deprecated since MPI-2.0): `MPI_Comm_set_attr`.
#[no_mangle]
pub extern "C" fn MPI_Attr_put(comm: Handle, keyval: c_int, attribute_val: *mut c_void) -> c_int {
    call_classed(comm, "MPI_Attr_put", |st| {
        set_attr(st, Kind::Comm, comm, keyval, attribute_val as usize)
    })
}

/// `MPI_Comm_get_attr`: the program's attributes and the predefined ones.
///
/// # Safety
/// `attribute_val` is valid for a write of a pointer; `flag` of an int.
#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_get_attr(
    comm: Handle,
    comm_keyval: c_int,
    attribute_val: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    call_classed(comm, "MPI_Comm_get_attr", |st| {
        let value = get_attr(st, Kind::Comm, comm, comm_keyval)?;
        // SAFETY: the caller's contract.
        unsafe { put_value(value, attribute_val, flag) };
        Ok(())
    })
}

/// `MPI_Attr_get` (deprecated since MPI-2.0): `MPI_Comm_get_attr`.
///
/// # Safety
/// As `MPI_Comm_get_attr`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Attr_get(
    comm: Handle,
    keyval: c_int,
    attribute_val: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    call_classed(comm, "MPI_Attr_get", |st| {
        let value = get_attr(st, Kind::Comm, comm, keyval)?;
        // SAFETY: the caller's contract.
        unsafe { put_value(value, attribute_val, flag) };
        Ok(())
    })
}

/// `MPI_Comm_delete_attr`.
#[no_mangle]
pub extern "C" fn MPI_Comm_delete_attr(comm: Handle, comm_keyval: c_int) -> c_int {
    call_classed(comm, "MPI_Comm_delete_attr", |st| {
        delete_attr(st, Kind::Comm, comm, comm_keyval)
    })
}

/// `MPI_Attr_delete` (deprecated since MPI-2.0): `MPI_Comm_delete_attr`.
#[no_mangle]
pub extern "C" fn MPI_Attr_delete(comm: Handle, keyval: c_int) -> c_int {
    call_classed(comm, "MPI_Attr_delete", |st| {
        delete_attr(st, Kind::Comm, comm, keyval)
    })
}

/// `MPI_Type_create_keyval`.
///
/// # Safety
/// The functions are null, `MPI_TYPE_DUP_FN` or of the ABI's types; `type_keyval` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_create_keyval(
    type_copy_attr_fn: *const c_void,
    type_delete_attr_fn: *const c_void,
    type_keyval: *mut c_int,
    extra_state: *mut c_void,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        create_keyval(
            Kind::Type,
            "MPI_Type_create_keyval",
            type_copy_attr_fn,
            type_delete_attr_fn,
            type_keyval,
            extra_state,
        )
    }
}

/// `MPI_Type_free_keyval`.
///
/// # Safety
/// `type_keyval` is readable and writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_free_keyval(type_keyval: *mut c_int) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { free_keyval(Kind::Type, "MPI_Type_free_keyval", type_keyval) }
}

/// `MPI_Type_set_attr` (on predefined datatypes too).
#[no_mangle]
pub extern "C" fn MPI_Type_set_attr(
    datatype: Handle,
    type_keyval: c_int,
    attribute_val: *mut c_void,
) -> c_int {
    call_classed(abi::COMM_WORLD, "MPI_Type_set_attr", |st| {
        set_attr(
            st,
            Kind::Type,
            datatype,
            type_keyval,
            attribute_val as usize,
        )
    })
}

/// `MPI_Type_get_attr`.
///
/// # Safety
/// `attribute_val` is valid for a write of a pointer; `flag` of an int.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_get_attr(
    datatype: Handle,
    type_keyval: c_int,
    attribute_val: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    call_classed(abi::COMM_WORLD, "MPI_Type_get_attr", |st| {
        let value = get_attr(st, Kind::Type, datatype, type_keyval)?;
        // SAFETY: the caller's contract.
        unsafe { put_value(value, attribute_val, flag) };
        Ok(())
    })
}

/// `MPI_Type_delete_attr`.
#[no_mangle]
pub extern "C" fn MPI_Type_delete_attr(datatype: Handle, type_keyval: c_int) -> c_int {
    call_classed(abi::COMM_WORLD, "MPI_Type_delete_attr", |st| {
        delete_attr(st, Kind::Type, datatype, type_keyval)
    })
}

// ------------------------------------------------------------------ names

/// `MPI_Comm_set_name`: names longer than `MPI_MAX_OBJECT_NAME - 1` bytes are cut (MPI 4.1
/// section 7.8).
///
/// # Safety
/// `comm_name` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_set_name(comm: Handle, comm_name: *const c_char) -> c_int {
    call_classed(comm, "MPI_Comm_set_name", |st| {
        check_object(st, Kind::Comm, comm)?;
        if comm_name.is_null() {
            return Err(null_arg("the name").into());
        }
        // SAFETY: the caller's contract.
        let mut name = unsafe { CStr::from_ptr(comm_name) }
            .to_string_lossy()
            .into_owned();
        let mut end = name.len().min(abi::MAX_OBJECT_NAME - 1);
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        name.truncate(end);
        cache().names.insert(comm, name);
        Ok(())
    })
}

/// `MPI_Comm_get_name`: the name set last; `MPI_COMM_WORLD`, `MPI_COMM_SELF` and
/// `MPI_COMM_NULL` are named so until renamed (MPI 4.1 section 7.8), others have an empty name.
///
/// # Safety
/// `comm_name` has `MPI_MAX_OBJECT_NAME` bytes; `resultlen` is writable.
#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_get_name(
    comm: Handle,
    comm_name: *mut c_char,
    resultlen: *mut c_int,
) -> c_int {
    call_classed(comm, "MPI_Comm_get_name", |st| {
        if comm != abi::COMM_NULL {
            check_object(st, Kind::Comm, comm)?;
        }
        if comm_name.is_null() {
            return Err(null_arg("the name").into());
        }
        let name = match (cache().names.get(&comm), comm) {
            (Some(n), _) => n.clone(),
            (None, abi::COMM_WORLD) => "MPI_COMM_WORLD".to_string(),
            (None, abi::COMM_SELF) => "MPI_COMM_SELF".to_string(),
            (None, abi::COMM_NULL) => "MPI_COMM_NULL".to_string(),
            (None, _) => String::new(),
        };
        // SAFETY: the caller's contract.
        unsafe { put_string(&name, comm_name, abi::MAX_OBJECT_NAME, resultlen) };
        Ok(())
    })
}

// ------------------------------------------------------------------ hooks of other modules

/// After `MPI_Comm_dup` (or `MPI_Comm_dup_with_info`) ended with `code`: a new communicator
/// `*newcomm` takes `old`'s error handler and the attributes the copy functions pass on. A copy
/// function that fails frees the new communicator (its attributes copied so far deleted),
/// leaves `MPI_COMM_NULL` in `*newcomm`, and fails the call.
///
/// # Safety
/// `newcomm` is null or valid for a read and a write if `code` is `MPI_SUCCESS`.
pub(crate) unsafe fn after_comm_dup(code: c_int, old: Handle, newcomm: *mut Handle) -> c_int {
    if code != class::SUCCESS || newcomm.is_null() {
        return code;
    }
    // SAFETY: the call succeeded, so `newcomm` was valid and holds the new handle.
    let mut new = unsafe { newcomm.read() };
    errors::inherit(old, new);
    let copied = call_classed(old, "MPI_Comm_dup", |_| copy_all(Kind::Comm, old, new));
    if copied != class::SUCCESS {
        // SAFETY: `new` is a local handle.
        unsafe { crate::comm::MPI_Comm_free(&mut new) };
        // SAFETY: as above.
        unsafe { newcomm.write(abi::COMM_NULL) };
    }
    copied
}

/// Before `MPI_Comm_free` frees `comm`: its attributes are deleted, the last set first; a
/// delete function that fails fails the call, and the communicator stays. A handle that names
/// no communicator of the program's is left to `MPI_Comm_free` to report.
pub(crate) fn before_comm_free(comm: Handle) -> c_int {
    if comm < abi::COMM_BASE
        || state::phase() != state::Phase::Running
        || !cache().attrs.contains_key(&(Kind::Comm, comm))
    {
        return class::SUCCESS;
    }
    call_classed(comm, "MPI_Comm_free", |st| {
        check_object(st, Kind::Comm, comm)?;
        delete_all(Kind::Comm, comm)
    })
}

/// Once `MPI_Comm_free` freed `comm`: its name, error handler and any attribute left go, as
/// its handle will name another communicator.
pub(crate) fn forget_comm(comm: Handle) {
    errors::forget_comm(comm);
    let mut c = cache();
    c.names.remove(&comm);
    let left = c.attrs.remove(&(Kind::Comm, comm)).unwrap_or_default();
    for a in left {
        c.release(a.keyval);
    }
}

/// After `MPI_Type_dup` ended with `code`: the new datatype `*newtype` takes the attributes
/// the copy functions pass on; a failing one frees it, leaves `MPI_DATATYPE_NULL` and fails the
/// call.
///
/// # Safety
/// `newtype` is null or valid for a read and a write if `code` is `MPI_SUCCESS`.
pub(crate) unsafe fn after_type_dup(code: c_int, old: Handle, newtype: *mut Handle) -> c_int {
    if code != class::SUCCESS || newtype.is_null() {
        return code;
    }
    // SAFETY: the call succeeded, so `newtype` was valid and holds the new handle.
    let mut new = unsafe { newtype.read() };
    let copied = call_classed(abi::COMM_WORLD, "MPI_Type_dup", |_| {
        copy_all(Kind::Type, old, new)
    });
    if copied != class::SUCCESS {
        // SAFETY: `new` is a local handle.
        unsafe { crate::derived::constructors::MPI_Type_free(&mut new) };
        // SAFETY: as above.
        unsafe { newtype.write(abi::DATATYPE_NULL) };
    }
    copied
}

/// Before `MPI_Type_free` frees `*datatype`: its attributes are deleted (a failing delete
/// function fails the call and the datatype stays). A handle that names no datatype the
/// program made is left to `MPI_Type_free` to report.
///
/// # Safety
/// `datatype` is null or valid for a read.
pub(crate) unsafe fn before_type_free(datatype: *const Handle) -> c_int {
    if datatype.is_null() {
        return class::SUCCESS;
    }
    // SAFETY: the caller's contract.
    let h = unsafe { datatype.read() };
    // Predefined handles are all below 1024 (the ABI's rule): they cannot be freed.
    if h < 1024 || !cache().attrs.contains_key(&(Kind::Type, h)) {
        return class::SUCCESS;
    }
    let code = call_classed(abi::COMM_WORLD, "MPI_Type_free", |st| {
        check_object(st, Kind::Type, h)?;
        delete_all(Kind::Type, h)
    });
    if code == class::SUCCESS {
        // What the delete functions left (none, unless one set an attribute again).
        let mut c = cache();
        for a in c.attrs.remove(&(Kind::Type, h)).unwrap_or_default() {
            c.release(a.keyval);
        }
    }
    code
}

/// At the start of `MPI_Finalize`, while MPI still runs: `MPI_COMM_SELF`'s attributes are
/// deleted, the last set first (MPI 4.1 section 11.2.4), then `MPI_COMM_WORLD`'s.
pub(crate) fn at_finalize() -> c_int {
    let code = call_classed(abi::COMM_SELF, "MPI_Finalize", |_| {
        delete_all(Kind::Comm, abi::COMM_SELF)
    });
    if code != class::SUCCESS {
        return code;
    }
    call_classed(abi::COMM_WORLD, "MPI_Finalize", |_| {
        delete_all(Kind::Comm, abi::COMM_WORLD)
    })
}

//! The client: one per process, from `PMIx_Init` to `PMIx_Finalize`.

use std::ffi::{c_char, CStr, CString};
use std::ptr::{null, null_mut};

use pmix_sys::*;

use crate::{events, Error, PeerEvent};

/// This process's connection to its PMIx server, from [`Client::init`] until
/// [`Client::finalize`] (or drop, which finalizes too).
///
/// The key-value store works as PMIx's: [`Client::put`] stores a value under this rank,
/// [`Client::fence`] publishes every rank's values to every rank (a collective of the whole
/// job), and [`Client::get`] reads a value of a given rank.
pub struct Client {
    /// The namespace (job) and rank PMIx_Init gave.
    me: pmix_proc_t,
    size: u32,
    finalized: bool,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("namespace", &self.namespace())
            .field("rank", &self.me.rank)
            .field("size", &self.size)
            .finish()
    }
}

/// `status` as a result: PMIx's success is 0 (some calls return a positive reference).
fn check(what: impl FnOnce() -> String, status: pmix_status_t) -> Result<(), Error> {
    if status >= 0 {
        Ok(())
    } else {
        Err(Error::new(what(), status))
    }
}

/// A key as PMIx takes it: NUL-terminated, and not one of PMIx's own (`pmix*`), which a
/// server treats as attributes, not as the program's data.
fn user_key(key: &str) -> Result<CString, Error> {
    if key.starts_with("pmix") {
        return Err(Error::new(
            format!("key {key:?}: keys starting with \"pmix\" are PMIx's attributes"),
            0,
        ));
    }
    if key.len() >= PMIX_MAX_KEYLEN as usize {
        return Err(Error::new(
            format!("key {key:?}: longer than PMIx's {PMIX_MAX_KEYLEN} bytes"),
            0,
        ));
    }
    CString::new(key).map_err(|_| Error::new(format!("key {key:?} holds a NUL byte"), 0))
}

/// A boolean attribute, set to true, for an info array.
fn flag(name: &'static [u8]) -> pmix_info_t {
    let mut info = pmix_info_t::default();
    let name = pmix_sys::key(name).to_bytes();
    for (dst, &b) in info.key.iter_mut().zip(name) {
        *dst = b as c_char;
    }
    info.value.type_ = PMIX_BOOL as pmix_data_type_t;
    // SAFETY: writing the union's bool member, the one the type above names; a plain value.
    unsafe { *info.value.data.flag.as_mut() = true };
    info
}

/// A value PMIx_Get returned, freed when dropped.
struct Got(*mut pmix_value_t);

impl Drop for Got {
    fn drop(&mut self) {
        // SAFETY: the value was allocated by PMIx_Get and handed to us; freed once.
        unsafe { pmix_value_release(self.0) };
    }
}

impl Got {
    fn value(&self) -> &pmix_value_t {
        // SAFETY: PMIx_Get succeeded, so the pointer is a live value, owned by `self`.
        unsafe { &*self.0 }
    }

    /// An unsigned integer value of any width.
    fn unsigned(&self) -> Option<u64> {
        let v = self.value();
        // SAFETY: each arm reads the union member that the value's type names.
        unsafe {
            match v.type_ as u32 {
                PMIX_UINT8 => Some(u64::from(*v.data.uint8.as_ref())),
                PMIX_UINT16 => Some(u64::from(*v.data.uint16.as_ref())),
                PMIX_UINT32 => Some(u64::from(*v.data.uint32.as_ref())),
                PMIX_UINT64 => Some(*v.data.uint64.as_ref()),
                PMIX_PROC_RANK => Some(u64::from(*v.data.rank.as_ref())),
                _ => None,
            }
        }
    }

    /// A string or byte-object value's bytes.
    fn bytes(&self) -> Option<Vec<u8>> {
        let v = self.value();
        // SAFETY: each arm reads the member the type names; PMIx's strings are NUL-terminated
        // and its byte objects point at `size` bytes (or are null and empty).
        unsafe {
            match v.type_ as u32 {
                PMIX_STRING => {
                    let s = *v.data.string.as_ref();
                    (!s.is_null()).then(|| CStr::from_ptr(s).to_bytes().to_vec())
                }
                PMIX_BYTE_OBJECT => {
                    let bo = v.data.bo.as_ref();
                    if bo.bytes.is_null() || bo.size == 0 {
                        Some(Vec::new())
                    } else {
                        Some(std::slice::from_raw_parts(bo.bytes.cast::<u8>(), bo.size).to_vec())
                    }
                }
                _ => None,
            }
        }
    }
}

impl Client {
    /// Joins the job: `PMIx_Init` connects to the server named in the environment (see
    /// [`crate::launched`]) and gives the namespace and rank; the job's size is read from the
    /// namespace's `PMIX_JOB_SIZE`.
    pub fn init() -> Result<Client, Error> {
        let mut me = pmix_proc_t::default();
        // SAFETY: `me` is writable; no info array. PMIx_Init may be called more than once in a
        // process (the library counts).
        let rc = unsafe { PMIx_Init(&mut me, null_mut(), 0) };
        check(
            || {
                if crate::launched() {
                    "PMIx_Init".to_string()
                } else {
                    "PMIx_Init: this process was not started by a PMIx launcher \
                     (PMIX_NAMESPACE and PMIX_RANK are not set)"
                        .to_string()
                }
            },
            rc,
        )?;
        let mut client = Client {
            me,
            size: 0,
            finalized: false,
        };
        let size = client
            .job_attribute(PMIX_JOB_SIZE)?
            .and_then(|v| v.unsigned())
            .ok_or_else(|| Error::new("the PMIx server gave no job size (PMIX_JOB_SIZE)", 0))?;
        client.size = u32::try_from(size)
            .map_err(|_| Error::new(format!("job size {size} does not fit a rank"), 0))?;
        if client.me.rank >= client.size {
            return Err(Error::new(
                format!(
                    "PMIx gave rank {} in a job of {}",
                    client.me.rank, client.size
                ),
                0,
            ));
        }
        Ok(client)
    }

    /// This process's rank in its job.
    pub fn rank(&self) -> u32 {
        self.me.rank
    }

    /// The number of processes in the job.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// The job's namespace: its name at the server, unique among the jobs the server runs.
    pub fn namespace(&self) -> String {
        let bytes: Vec<u8> = self
            .me
            .nspace
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    fn proc_of(&self, rank: pmix_rank_t) -> pmix_proc_t {
        pmix_proc_t {
            nspace: self.me.nspace,
            rank,
        }
    }

    /// A value the server holds for `proc` under attribute `name`, if it has one (asked with
    /// `PMIX_OPTIONAL`: from what the client already has, without waiting for a rank to put it).
    fn attribute(&self, proc_: pmix_proc_t, name: &CStr) -> Result<Option<Got>, Error> {
        let optional = flag(PMIX_OPTIONAL);
        let mut val: *mut pmix_value_t = null_mut();
        // SAFETY: valid proc, NUL-terminated key, one info, writable out pointer.
        let rc = unsafe { PMIx_Get(&proc_, name.as_ptr(), &optional, 1, &mut val) };
        if rc == PMIX_ERR_NOT_FOUND || rc == PMIX_ERR_PROC_ENTRY_NOT_FOUND {
            return Ok(None);
        }
        check(
            || format!("PMIx_Get of {name:?} for rank {}", proc_.rank),
            rc,
        )?;
        if val.is_null() {
            return Ok(None);
        }
        Ok(Some(Got(val)))
    }

    /// A job-wide attribute (of the namespace's wildcard rank).
    fn job_attribute(&self, name: &'static [u8]) -> Result<Option<Got>, Error> {
        self.attribute(self.proc_of(PMIX_RANK_WILDCARD), pmix_sys::key(name))
    }

    /// Stores `value` under `key` for this rank, to be published to every rank at the next
    /// [`Client::fence`]. PMIx copies the bytes; values have no size limit of PMI-1's kind.
    pub fn put(&mut self, key: &str, value: &[u8]) -> Result<(), Error> {
        let name = user_key(key)?;
        let mut v = pmix_value_t {
            type_: PMIX_BYTE_OBJECT as pmix_data_type_t,
            ..Default::default()
        };
        // SAFETY: writing the byte-object member the type names. The pointer is to our bytes,
        // only read: PMIx_Put copies the value before returning.
        unsafe {
            *v.data.bo.as_mut() = pmix_byte_object_t {
                bytes: value.as_ptr().cast::<c_char>().cast_mut(),
                size: value.len(),
            };
        }
        // SAFETY: a valid key and value; the value (and the bytes it points at) outlive the call.
        let rc = unsafe { PMIx_Put(PMIX_GLOBAL as pmix_scope_t, name.as_ptr(), &mut v) };
        check(|| format!("PMIx_Put of {key:?}"), rc)
    }

    /// Publishes what this rank put (`PMIx_Commit`) and waits until every rank of the job has
    /// done the same (`PMIx_Fence` over the namespace, collecting the data, so that every later
    /// [`Client::get`] is answered from the client's own copy).
    pub fn fence(&mut self) -> Result<(), Error> {
        // SAFETY: no arguments.
        check(|| "PMIx_Commit".to_string(), unsafe { PMIx_Commit() })?;
        let collect = flag(PMIX_COLLECT_DATA);
        // SAFETY: a null proc array means every process of our namespace; one info.
        let rc = unsafe { PMIx_Fence(null(), 0, &collect, 1) };
        check(|| "PMIx_Fence".to_string(), rc)
    }

    /// The value `rank` put under `key` and published by a fence, or `None` if it put none.
    pub fn get(&mut self, rank: u32, key: &str) -> Result<Option<Vec<u8>>, Error> {
        if rank >= self.size {
            return Err(Error::new(
                format!("rank {rank} is not in this job of {}", self.size),
                0,
            ));
        }
        let name = user_key(key)?;
        let Some(got) = self.attribute(self.proc_of(rank), &name)? else {
            return Ok(None);
        };
        got.bytes().map(Some).ok_or_else(|| {
            Error::new(
                format!(
                    "rank {rank}'s {key:?} is of PMIx type {}, not bytes",
                    got.value().type_
                ),
                0,
            )
        })
    }

    /// The node of every rank, numbered from 0 in the order nodes first appear: from each
    /// rank's `PMIX_NODEID`, else its `PMIX_HOSTNAME`; `None` if the server gives neither.
    pub fn node_ids(&mut self) -> Result<Option<Vec<u32>>, Error> {
        let mut ids = Vec::with_capacity(self.size as usize);
        let mut seen: Vec<u64> = Vec::new();
        for r in 0..self.size {
            let Some(node) = self
                .attribute(self.proc_of(r), pmix_sys::key(PMIX_NODEID))?
                .and_then(|v| v.unsigned())
            else {
                return self.node_ids_by_hostname();
            };
            ids.push(number(&mut seen, node));
        }
        Ok(Some(ids))
    }

    fn node_ids_by_hostname(&mut self) -> Result<Option<Vec<u32>>, Error> {
        let mut ids = Vec::with_capacity(self.size as usize);
        let mut seen: Vec<Vec<u8>> = Vec::new();
        for r in 0..self.size {
            let Some(host) = self
                .attribute(self.proc_of(r), pmix_sys::key(PMIX_HOSTNAME))?
                .and_then(|v| v.bytes())
            else {
                return Ok(None);
            };
            ids.push(number(&mut seen, host));
        }
        Ok(Some(ids))
    }

    /// This rank's index among the ranks of its node (`PMIX_LOCAL_RANK`), if the server says.
    pub fn local_rank(&mut self) -> Result<Option<u32>, Error> {
        Ok(self
            .attribute(self.me, pmix_sys::key(PMIX_LOCAL_RANK))?
            .and_then(|v| v.unsigned())
            .and_then(|v| u32::try_from(v).ok()))
    }

    /// Asks the server to tell this process when other ranks of the job end (a PMIx event
    /// handler for aborted and terminated processes), for [`Client::poll_peer_events`].
    /// `Ok(false)` when the server takes no such registration.
    pub fn watch_failures(&mut self) -> Result<bool, Error> {
        events::register(&self.me)
    }

    /// What the server has said, since the last call, about ranks that ended.
    pub fn poll_peer_events(&mut self) -> Vec<PeerEvent> {
        events::take()
    }

    /// Asks the server to end the whole job with `code` (`PMIx_Abort`), then exits with it.
    pub fn abort(&mut self, code: i32, message: &str) -> ! {
        let msg = CString::new(message.replace('\0', " ")).unwrap_or_default();
        // SAFETY: a valid message; a null proc array means the whole namespace. PMIx_Abort
        // normally does not return (the server kills the job); exiting covers the case where
        // it does.
        unsafe { PMIx_Abort(code, msg.as_ptr(), null_mut(), 0) };
        std::process::exit(code)
    }

    /// Leaves the job (`PMIx_Finalize`): the server counts this process as ended in order.
    pub fn finalize(mut self) -> Result<(), Error> {
        self.finalize_once()
    }

    fn finalize_once(&mut self) -> Result<(), Error> {
        if std::mem::replace(&mut self.finalized, true) {
            return Ok(());
        }
        events::unregister();
        // SAFETY: initialized by `init`, finalized once (the flag above); no info.
        let rc = unsafe { PMIx_Finalize(null(), 0) };
        check(|| "PMIx_Finalize".to_string(), rc)
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.finalize_once();
    }
}

/// `key`'s index in `seen`, added at the end if new.
fn number<T: PartialEq>(seen: &mut Vec<T>, key: T) -> u32 {
    match seen.iter().position(|k| *k == key) {
        Some(i) => i as u32,
        None => {
            seen.push(key);
            (seen.len() - 1) as u32
        }
    }
}

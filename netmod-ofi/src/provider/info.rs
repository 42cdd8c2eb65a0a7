//! Provider selection: which libfabric provider, fabric and domain the endpoint opens, and the
//! attributes (inject size, tag bits, iov limit, mode bits) the engine designs around.
//!
//! [`select`] asks `fi_getinfo` for what the engine cannot do without ([`Hints::caps`], a
//! reliable datagram endpoint, send-after-send order), takes the first answer (libfabric lists
//! the best first) and then, for that provider and domain only, adds each of
//! [`Hints::optional_caps`] that it also offers, so that an optional capability never makes it
//! choose a worse provider. When nothing qualifies, the error says which requirement no
//! provider meets, found by asking again with the requirements one at a time.

use std::ffi::{c_char, CStr, CString};
use std::fmt;
use std::ptr::{null, null_mut, NonNull};

use ch4_core::{Error, ErrorKind, Result};
use libfabric_sys::{
    fi_allocinfo, fi_dupinfo, fi_ep_type, fi_freeinfo, fi_getinfo, fi_info, API_VERSION, FI_ATOMIC,
    FI_AV_TABLE, FI_CONTEXT, FI_CONTEXT2, FI_DIRECTED_RECV, FI_ENODATA, FI_EP_DGRAM, FI_EP_MSG,
    FI_EP_RDM, FI_EP_UNSPEC, FI_FORMAT_UNSPEC, FI_MAJOR, FI_MINOR, FI_MSG, FI_ORDER_SAS, FI_RMA,
    FI_SOURCE, FI_TAGGED, FI_THREAD_DOMAIN, FI_VERSION, FI_VERSION_LT,
};

use super::fi_error;

/// What the endpoint must (and would like to) offer. [`Hints::default`] is what the engine
/// needs; [`Hints::from_env`] adds the provider named by `FI_PROVIDER`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hints {
    /// The provider to use, as libfabric names it (`"tcp"` finds `tcp;ofi_rxm`, `"shm"`), or
    /// `None` for libfabric's first choice. `sockets` is skipped unless named here (or in
    /// `FI_PROVIDER`): it is libfabric's slow reference provider.
    pub provider: Option<String>,
    /// Required capabilities: `FI_TAGGED | FI_MSG`.
    pub caps: u64,
    /// Capabilities taken if the chosen provider offers them: `FI_RMA | FI_DIRECTED_RECV`.
    pub optional_caps: u64,
    /// The endpoint type: `FI_EP_RDM` (reliable, unconnected).
    pub ep_type: fi_ep_type,
    /// Required message ordering (of both sends and receives): `FI_ORDER_SAS`, so that two
    /// messages from one sender match receives in the order they were sent, as MPI requires.
    pub msg_order: u64,
    /// The longest message to hand the provider in one operation, when it is less than the
    /// provider's `max_msg_size` (`None`: the provider's). Not a libfabric hint: the netmod
    /// sends longer messages by RMA read, and this forces that path for testing, or caps a
    /// provider whose advertised limit is wrong. [`Hints::from_env`] reads it from
    /// `CH4_OFI_MAX_MSG_SIZE`.
    pub max_msg_size: Option<usize>,
    /// Whether a message sent by RMA read sends its descriptor in a message of its own ahead
    /// of its stub, as one longer than a stub can describe (1 GiB) must, instead of in the
    /// stub. Not a libfabric hint: for testing that path. Off by default.
    pub separate_descriptors: bool,
}

/// The variable that turns directed receives off (`off`, `0`): without `FI_DIRECTED_RECV` in
/// [`Hints::optional_caps`] every receive accepts any address (see
/// `OfiNetmod::source_address`).
pub const DIRECTED_RECV_VAR: &str = "CH4_OFI_DIRECTED_RECV";

/// The variable that sets [`Hints::max_msg_size`].
pub const MAX_MSG_SIZE_VAR: &str = "CH4_OFI_MAX_MSG_SIZE";

/// The smallest [`Hints::max_msg_size`] accepted: a message must hold what every protocol of
/// the netmod sends in one piece.
pub const MIN_MAX_MSG_SIZE: usize = 64;

impl Default for Hints {
    fn default() -> Self {
        Hints {
            provider: None,
            caps: FI_TAGGED | FI_MSG,
            optional_caps: FI_RMA | FI_DIRECTED_RECV,
            ep_type: FI_EP_RDM,
            msg_order: FI_ORDER_SAS,
            max_msg_size: None,
            separate_descriptors: false,
        }
    }
}

impl Hints {
    /// The default hints with `provider` from `FI_PROVIDER` when that names one provider.
    ///
    /// libfabric applies `FI_PROVIDER` itself in any case (it filters `fi_getinfo`'s answers);
    /// a list (`tcp,shm`) or an exclusion (`^udp`) is left to it alone.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Arg`] when `CH4_OFI_MAX_MSG_SIZE` is set to anything but a number of
    /// bytes of at least [`MIN_MAX_MSG_SIZE`].
    pub fn from_env() -> Result<Hints> {
        let provider = std::env::var("FI_PROVIDER")
            .ok()
            .filter(|p| !p.is_empty() && !p.contains(',') && !p.starts_with('^'));
        let max_msg_size = match std::env::var(MAX_MSG_SIZE_VAR) {
            Err(_) => None,
            Ok(v) => match v.trim().parse::<usize>() {
                Ok(n) if n >= MIN_MAX_MSG_SIZE => Some(n),
                _ => {
                    return Err(Error::new(
                        ErrorKind::Arg,
                        format!(
                            "{MAX_MSG_SIZE_VAR}={v:?}: expected a number of bytes, at least \
                             {MIN_MAX_MSG_SIZE}"
                        ),
                    ))
                }
            },
        };
        let mut hints = Hints {
            provider,
            max_msg_size,
            ..Hints::default()
        };
        if ch4_core::env::switch(DIRECTED_RECV_VAR)? == Some(false) {
            hints.optional_caps &= !FI_DIRECTED_RECV;
        }
        Ok(hints)
    }

    /// The default hints for provider `name`.
    pub fn for_provider(name: &str) -> Hints {
        Hints {
            provider: Some(name.to_owned()),
            ..Hints::default()
        }
    }

    /// Whether the user asked for `sockets` by name, here or in `FI_PROVIDER`.
    fn sockets_named(&self) -> bool {
        let env = std::env::var("FI_PROVIDER").unwrap_or_default();
        self.provider
            .as_deref()
            .is_some_and(|p| p.contains("sockets"))
            || (!env.starts_with('^') && env.contains("sockets"))
    }
}

/// The provider, fabric and domain chosen by [`select`], with their attributes: an owned copy
/// of one `fi_info` (freed on drop).
pub struct Info {
    /// From `fi_dupinfo`; its attribute structs are all present (checked by `Info::dup`).
    ptr: NonNull<fi_info>,
}

// SAFETY: `Info` owns its fi_info exclusively (a private copy from fi_dupinfo); libfabric keeps
// no reference to it and it is only read through `&self`, so it may move between threads and
// be read from several.
unsafe impl Send for Info {}
// SAFETY: as above: shared access only reads.
unsafe impl Sync for Info {}

impl Info {
    /// An owned copy of `info`, with every attribute struct present.
    ///
    /// # Safety
    ///
    /// `info` points to a live `fi_info` from `fi_getinfo`.
    unsafe fn dup(info: *const fi_info) -> Result<Info> {
        // SAFETY: `info` is live (caller); fi_dupinfo deep-copies it.
        let ptr = NonNull::new(unsafe { fi_dupinfo(info) })
            .ok_or_else(|| Error::new(ErrorKind::Exhausted, "fi_dupinfo: out of memory"))?;
        let info = Info { ptr };
        // SAFETY: `ptr` is the fresh copy, owned by `info`.
        let raw = unsafe { ptr.as_ref() };
        if raw.tx_attr.is_null()
            || raw.rx_attr.is_null()
            || raw.ep_attr.is_null()
            || raw.domain_attr.is_null()
            || raw.fabric_attr.is_null()
        {
            return Err(Error::new(
                ErrorKind::Internal,
                "fi_getinfo returned an fi_info without its attribute structs",
            ));
        }
        Ok(info)
    }

    fn raw(&self) -> &fi_info {
        // SAFETY: `ptr` is owned by `self` and alive until drop; nothing mutates it while
        // `self` is borrowed (the only mutable use is `as_mut_ptr`, handed to libfabric calls
        // that read it).
        unsafe { self.ptr.as_ref() }
    }

    fn tx(&self) -> &libfabric_sys::fi_tx_attr {
        // SAFETY: checked non-null in `dup`; owned with the fi_info.
        unsafe { &*self.raw().tx_attr }
    }

    fn rx(&self) -> &libfabric_sys::fi_rx_attr {
        // SAFETY: checked non-null in `dup`; owned with the fi_info.
        unsafe { &*self.raw().rx_attr }
    }

    fn ep(&self) -> &libfabric_sys::fi_ep_attr {
        // SAFETY: checked non-null in `dup`; owned with the fi_info.
        unsafe { &*self.raw().ep_attr }
    }

    fn domain(&self) -> &libfabric_sys::fi_domain_attr {
        // SAFETY: checked non-null in `dup`; owned with the fi_info.
        unsafe { &*self.raw().domain_attr }
    }

    fn fabric(&self) -> &libfabric_sys::fi_fabric_attr {
        // SAFETY: checked non-null in `dup`; owned with the fi_info.
        unsafe { &*self.raw().fabric_attr }
    }

    /// The provider's name as libfabric gives it: `tcp;ofi_rxm` (a utility provider over a
    /// core one), `shm`.
    pub fn provider(&self) -> &str {
        cstr(self.fabric().prov_name)
    }

    /// The provider's version (major, minor): libfabric 1.17's own providers say (117, 0).
    pub fn provider_version(&self) -> (u32, u32) {
        let v = self.fabric().prov_version;
        (FI_MAJOR(v), FI_MINOR(v))
    }

    /// The fabric's name (an IP network for tcp, `shm`).
    pub fn fabric_name(&self) -> &str {
        cstr(self.fabric().name)
    }

    /// The domain's name (a NIC: `eth0`, `lo`; `shm`).
    pub fn domain_name(&self) -> &str {
        cstr(self.domain().name)
    }

    /// The capabilities granted (the required ones and the optional ones offered).
    pub fn caps(&self) -> u64 {
        self.raw().caps
    }

    /// Whether one-sided reads and writes (`FI_RMA`) are available.
    pub fn rma(&self) -> bool {
        self.caps() & FI_RMA != 0
    }

    /// Whether receives can name their source (`FI_DIRECTED_RECV`); without it a receive's
    /// `src` is ignored and the engine must match the source in the tag.
    pub fn directed_recv(&self) -> bool {
        self.caps() & FI_DIRECTED_RECV != 0
    }

    /// Whether completions can report their source address (`FI_SOURCE`).
    pub fn source(&self) -> bool {
        self.caps() & FI_SOURCE != 0
    }

    /// The largest message [`Endpoint::tinject`](super::Endpoint::tinject) sends (copied at
    /// once, no completion).
    pub fn inject_size(&self) -> usize {
        self.tx().inject_size
    }

    /// The largest message of one send.
    pub fn max_msg_size(&self) -> usize {
        self.ep().max_msg_size
    }

    /// The most iovecs one vectored send takes (`tx_attr->iov_limit`).
    pub fn iov_limit(&self) -> usize {
        self.tx().iov_limit
    }

    /// The most iovecs one vectored receive takes (`rx_attr->iov_limit`).
    pub fn rx_iov_limit(&self) -> usize {
        self.rx().iov_limit
    }

    /// The transmit queue's depth (`tx_attr->size`): sends that may be outstanding.
    pub fn tx_size(&self) -> usize {
        self.tx().size
    }

    /// The receive queue's depth (`rx_attr->size`): receives that may be posted.
    pub fn rx_size(&self) -> usize {
        self.rx().size
    }

    /// The provider's `mem_tag_format`: the tag bits it matches, as fields of alternating
    /// ones and zeros after any leading ignored (zero) bits.
    pub fn mem_tag_format(&self) -> u64 {
        self.ep().mem_tag_format
    }

    /// How many tag bits the provider matches: 64 minus the leading ignored bits of
    /// [`mem_tag_format`](Info::mem_tag_format) (0 if it is 0).
    pub fn tag_bits(&self) -> u32 {
        tag_bits_of(self.mem_tag_format())
    }

    /// The mode bits the provider requires of us (`info->mode`): with `FI_CONTEXT` or
    /// `FI_CONTEXT2`, every operation's context must point to a writable `fi_context` /
    /// `fi_context2` (this layer always passes an `fi_context2`, which serves both).
    pub fn mode(&self) -> u64 {
        self.raw().mode
    }

    /// Whether the provider uses operation contexts as scratch space
    /// (`FI_CONTEXT | FI_CONTEXT2` in [`mode`](Info::mode)).
    pub fn needs_context(&self) -> bool {
        self.mode() & (FI_CONTEXT | FI_CONTEXT2) != 0
    }

    /// The message orderings guaranteed (`tx_attr->msg_order`); includes `FI_ORDER_SAS`.
    pub fn msg_order(&self) -> u64 {
        self.tx().msg_order
    }

    /// The address format (`FI_SOCKADDR_IN`, `FI_ADDR_STR`, ...).
    pub fn addr_format(&self) -> u32 {
        self.raw().addr_format
    }

    /// The length of this endpoint's address as `fi_getinfo` gave it (`src_addrlen`); the
    /// name of an open endpoint ([`Endpoint::name`](super::Endpoint::name)) is what peers
    /// insert. For `FI_ADDR_STR` names it is the string buffer's length.
    pub fn addr_len(&self) -> usize {
        self.raw().src_addrlen
    }

    /// The bytes of remote CQ data a send may carry (`domain_attr->cq_data_size`).
    pub fn cq_data_size(&self) -> usize {
        self.domain().cq_data_size
    }

    /// The memory registration modes the domain requires (`FI_MR_*` bits); the data path
    /// passes no descriptors, which every domain without `FI_MR_LOCAL` accepts.
    pub fn mr_mode(&self) -> i32 {
        self.domain().mr_mode
    }

    /// Bytes of a memory region's key (`mr_key_size`; 8 on this machine's providers): the keys
    /// this netmod chooses must fit in them.
    pub fn mr_key_size(&self) -> usize {
        self.domain().mr_key_size
    }

    /// Whether `FI_PEEK`, `FI_CLAIM` and `FI_DISCARD` receives do what fi_tagged(3) says.
    ///
    /// False for shm before 1.19: its receive path ignores those flags (a peek is an ordinary
    /// receive that consumes the message), and it reports nothing to tell. shm matches through
    /// libfabric's util_srx, which honors them, from 1.19 on.
    pub fn peek(&self) -> bool {
        !(self.provider() == "shm" && FI_VERSION_LT(self.fabric().prov_version, FI_VERSION(119, 0)))
    }

    /// The underlying `fi_info`, for calls this layer does not wrap. It stays owned by `self`.
    pub fn as_ptr(&self) -> *const fi_info {
        self.ptr.as_ptr()
    }

    /// The same, mutable, for the libfabric calls that take `struct fi_info *` (and only
    /// read it).
    pub(crate) fn as_mut_ptr(&self) -> *mut fi_info {
        self.ptr.as_ptr()
    }
}

impl Clone for Info {
    fn clone(&self) -> Self {
        // SAFETY: `self` holds a live fi_info.
        unsafe { Info::dup(self.as_ptr()) }.expect("fi_dupinfo of a checked fi_info")
    }
}

impl Drop for Info {
    fn drop(&mut self) {
        // SAFETY: the fi_info came from fi_dupinfo, is owned by `self` and freed once.
        unsafe { fi_freeinfo(self.ptr.as_ptr()) }
    }
}

impl fmt::Debug for Info {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (major, minor) = self.provider_version();
        f.debug_struct("Info")
            .field(
                "provider",
                &format_args!("{} {major}.{minor}", self.provider()),
            )
            .field("fabric", &self.fabric_name())
            .field("domain", &self.domain_name())
            .field("caps", &format_args!("{}", names(self.caps(), CAP_NAMES)))
            .field("mode", &format_args!("{}", names(self.mode(), MODE_NAMES)))
            .field("inject_size", &self.inject_size())
            .field("max_msg_size", &self.max_msg_size())
            .field("iov_limit", &self.iov_limit())
            .field("rx_iov_limit", &self.rx_iov_limit())
            .field("tx_size", &self.tx_size())
            .field("rx_size", &self.rx_size())
            .field(
                "mem_tag_format",
                &format_args!("{:#018x}", self.mem_tag_format()),
            )
            .field("tag_bits", &self.tag_bits())
            .field("msg_order", &format_args!("{:#x}", self.msg_order()))
            .field("addr_format", &self.addr_format())
            .field("addr_len", &self.addr_len())
            .field("cq_data_size", &self.cq_data_size())
            .field("mr_mode", &format_args!("{:#x}", self.mr_mode()))
            .field("threading", &self.domain().threading)
            .field("data_progress", &self.domain().data_progress)
            .field("peek", &self.peek())
            .finish()
    }
}

/// Tag bits matched under `mem_tag_format` (see [`Info::tag_bits`]).
fn tag_bits_of(format: u64) -> u32 {
    if format == 0 {
        0
    } else {
        64 - format.leading_zeros()
    }
}

/// A C string of an fi_info as `&str` ("" if null or not UTF-8).
fn cstr<'a>(p: *const c_char) -> &'a str {
    if p.is_null() {
        return "";
    }
    // SAFETY: libfabric's names are NUL-terminated strings owned by the fi_info they are read
    // from, which the caller borrows for `'a`.
    unsafe { CStr::from_ptr(p) }.to_str().unwrap_or("")
}

/// Names for the capability bits an error or a debug print may mention.
const CAP_NAMES: &[(u64, &str)] = &[
    (FI_MSG, "FI_MSG"),
    (FI_RMA, "FI_RMA"),
    (FI_TAGGED, "FI_TAGGED"),
    (FI_ATOMIC, "FI_ATOMIC"),
    (FI_DIRECTED_RECV, "FI_DIRECTED_RECV"),
    (FI_SOURCE, "FI_SOURCE"),
];

/// Names for the mode bits the data path cares about.
const MODE_NAMES: &[(u64, &str)] = &[(FI_CONTEXT, "FI_CONTEXT"), (FI_CONTEXT2, "FI_CONTEXT2")];

/// `bits` as `A | B | 0x..` (the named ones, then the rest in hex), or `0`.
fn names(bits: u64, table: &[(u64, &str)]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut rest = bits;
    for &(bit, name) in table {
        if bits & bit != 0 {
            parts.push(name.to_owned());
            rest &= !bit;
        }
    }
    if rest != 0 {
        parts.push(format!("{rest:#x}"));
    }
    if parts.is_empty() {
        "0".to_owned()
    } else {
        parts.join(" | ")
    }
}

fn ep_type_name(t: fi_ep_type) -> String {
    match t {
        FI_EP_RDM => "FI_EP_RDM".to_owned(),
        FI_EP_MSG => "FI_EP_MSG".to_owned(),
        FI_EP_DGRAM => "FI_EP_DGRAM".to_owned(),
        t => format!("endpoint type {t}"),
    }
}

/// The answer of one `fi_getinfo` call, freed on drop.
struct InfoList(NonNull<fi_info>);

impl InfoList {
    /// Every entry, in libfabric's order of preference.
    fn iter(&self) -> impl Iterator<Item = &fi_info> + '_ {
        let mut next: *const fi_info = self.0.as_ptr();
        std::iter::from_fn(move || {
            // SAFETY: `next` is null or an entry of the list, which lives as long as `self`.
            let info = unsafe { next.as_ref()? };
            next = info.next;
            Some(info)
        })
    }
}

impl Drop for InfoList {
    fn drop(&mut self) {
        // SAFETY: the list came from fi_getinfo and is freed once, with all its entries.
        unsafe { fi_freeinfo(self.0.as_ptr()) }
    }
}

/// One `fi_getinfo` question.
#[derive(Clone, Copy)]
struct Query<'a> {
    caps: u64,
    ep_type: fi_ep_type,
    msg_order: u64,
    provider: Option<&'a CStr>,
    fabric: Option<&'a CStr>,
    domain: Option<&'a CStr>,
    addr_format: u32,
}

/// Asks `fi_getinfo` (API version [`API_VERSION`], the layout of our structs) for `q`, with
/// the attributes every query shares: `FI_CONTEXT | FI_CONTEXT2` supported, an `FI_AV_TABLE`
/// AV, `FI_THREAD_DOMAIN` (an [`Endpoint`](super::Endpoint) is used by one thread at a time),
/// no memory registration modes handled (descriptors are never passed). `None` for "no
/// provider offers this" (`-FI_ENODATA`).
fn getinfo(q: &Query<'_>) -> Result<Option<InfoList>> {
    super::workarounds::apply();
    // SAFETY: fi_allocinfo returns a zeroed fi_info with all attribute structs, freed below;
    // the strings put in it are malloc'd copies (strdup) because fi_freeinfo frees them.
    // fi_getinfo only reads the hints and returns a list we own.
    unsafe {
        let hints = fi_allocinfo();
        if hints.is_null() {
            return Err(Error::new(
                ErrorKind::Exhausted,
                "fi_allocinfo: out of memory",
            ));
        }
        let h = &mut *hints;
        h.caps = q.caps;
        h.mode = FI_CONTEXT | FI_CONTEXT2;
        h.addr_format = q.addr_format;
        (*h.ep_attr).type_ = q.ep_type;
        (*h.tx_attr).msg_order = q.msg_order;
        (*h.rx_attr).msg_order = q.msg_order;
        (*h.domain_attr).av_type = FI_AV_TABLE;
        (*h.domain_attr).threading = FI_THREAD_DOMAIN;
        if let Some(p) = q.provider {
            (*h.fabric_attr).prov_name = libc::strdup(p.as_ptr());
        }
        if let Some(f) = q.fabric {
            (*h.fabric_attr).name = libc::strdup(f.as_ptr());
        }
        if let Some(d) = q.domain {
            (*h.domain_attr).name = libc::strdup(d.as_ptr());
        }
        let mut out = null_mut();
        let ret = fi_getinfo(API_VERSION, null(), null(), 0, hints, &mut out);
        fi_freeinfo(hints);
        match ret {
            0 => Ok(NonNull::new(out).map(InfoList)),
            r if r == -FI_ENODATA => Ok(None),
            r => Err(fi_error("fi_getinfo", r as isize)),
        }
    }
}

/// Chooses the provider, fabric and domain for `hints` (see the module docs).
///
/// # Errors
///
/// [`ErrorKind::Transport`] when no provider offers what `hints` require, naming the missing
/// requirement (or the missing provider); [`ErrorKind::Arg`] for a provider name containing a
/// NUL byte; whatever `fi_getinfo` fails with otherwise.
pub fn select(hints: &Hints) -> Result<Info> {
    let provider = match hints.provider.as_deref().map(CString::new).transpose() {
        Ok(p) => p,
        Err(_) => {
            return Err(Error::new(
                ErrorKind::Arg,
                "provider name contains a NUL byte",
            ))
        }
    };
    let sockets_ok = hints.sockets_named();
    let base = Query {
        caps: hints.caps,
        ep_type: hints.ep_type,
        msg_order: hints.msg_order,
        provider: provider.as_deref(),
        fabric: None,
        domain: None,
        addr_format: FI_FORMAT_UNSPEC as u32,
    };
    let Some(list) = getinfo(&base)? else {
        return Err(diagnose(hints, &base));
    };
    let usable = |i: &&fi_info| sockets_ok || !cstr(fabric_attr(i).prov_name).contains("sockets");
    let Some(first) = list.iter().find(usable) else {
        return Err(Error::new(
            ErrorKind::Transport,
            "only the sockets provider offers the capabilities needed, and it is skipped \
             (libfabric's slow reference provider) unless FI_PROVIDER names it",
        ));
    };
    // SAFETY: `first` is an entry of the live list.
    let mut info = unsafe { Info::dup(first) }?;
    drop(list);

    // The optional capabilities, each only if the chosen provider and domain offer it too.
    let mut caps = hints.caps;
    let mut bits = hints.optional_caps & !hints.caps;
    while bits != 0 {
        let bit = bits & bits.wrapping_neg();
        bits &= !bit;
        let prov = CString::new(info.provider()).expect("a C string has no NUL");
        let fabric = CString::new(info.fabric_name()).expect("a C string has no NUL");
        let domain = CString::new(info.domain_name()).expect("a C string has no NUL");
        let q = Query {
            caps: caps | bit,
            provider: Some(&prov),
            fabric: Some(&fabric),
            domain: Some(&domain),
            addr_format: info.addr_format(),
            ..base
        };
        let Some(list) = getinfo(&q)? else { continue };
        let same = list.iter().find(|i| {
            i.caps & bit != 0
                && cstr(fabric_attr(i).prov_name) == info.provider()
                && cstr(fabric_attr(i).name) == info.fabric_name()
                && cstr(domain_attr(i).name) == info.domain_name()
                && i.addr_format == info.addr_format()
        });
        if let Some(i) = same {
            // SAFETY: `i` is an entry of the live list.
            info = unsafe { Info::dup(i) }?;
            caps |= bit;
        }
    }
    Ok(info)
}

fn fabric_attr(i: &fi_info) -> &libfabric_sys::fi_fabric_attr {
    // SAFETY: every entry of an fi_getinfo answer has its attribute structs.
    unsafe { &*i.fabric_attr }
}

fn domain_attr(i: &fi_info) -> &libfabric_sys::fi_domain_attr {
    // SAFETY: every entry of an fi_getinfo answer has its attribute structs.
    unsafe { &*i.domain_attr }
}

/// The error for hints nothing satisfies: which provider is missing, or which requirements
/// (asked one at a time on top of the endpoint type) no provider meets.
#[cold]
fn diagnose(hints: &Hints, base: &Query<'_>) -> Error {
    let named = hints
        .provider
        .as_deref()
        .map(|p| format!("libfabric provider {p:?}"));
    let offers = |q: &Query<'_>| matches!(getinfo(q), Ok(Some(_)));
    let fail = |detail: String| Error::new(ErrorKind::Transport, detail);
    let bare = Query {
        caps: 0,
        ep_type: FI_EP_UNSPEC,
        msg_order: 0,
        ..*base
    };
    if let Some(n) = &named {
        if !offers(&bare) {
            return fail(format!(
                "{n} is not available on this machine (`fi_info -l` lists those that are)"
            ));
        }
    }
    let ep = Query {
        ep_type: hints.ep_type,
        ..bare
    };
    let ep_name = ep_type_name(hints.ep_type);
    if !offers(&ep) {
        return fail(match &named {
            Some(n) => format!("{n} offers no {ep_name} endpoint"),
            None => format!("no libfabric provider offers {ep_name} endpoints"),
        });
    }
    // Each requirement alone on top of the endpoint type.
    let mut missing = Vec::new();
    for bit in (0..64).map(|i| 1u64 << i) {
        if hints.caps & bit != 0 && !offers(&Query { caps: bit, ..ep }) {
            missing.push(names(bit, CAP_NAMES));
        }
        if hints.msg_order & bit != 0
            && !offers(&Query {
                msg_order: bit,
                ..ep
            })
        {
            missing.push(order_name(bit));
        }
    }
    let wanted = format!(
        "{ep_name} endpoints with {} and {} ordering",
        names(hints.caps, CAP_NAMES),
        order_name(hints.msg_order)
    );
    let why = if missing.is_empty() {
        "each is offered, but not all by one endpoint".to_owned()
    } else {
        format!("missing: {}", missing.join(", "))
    };
    fail(match &named {
        Some(n) => format!("{n} does not offer {wanted} ({why})"),
        None => format!("no libfabric provider offers {wanted} ({why})"),
    })
}

fn order_name(order: u64) -> String {
    if order == FI_ORDER_SAS {
        "FI_ORDER_SAS".to_owned()
    } else {
        format!("msg_order {order:#x}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_bits_skip_the_ignored_prefix() {
        assert_eq!(tag_bits_of(0xaaaa_aaaa_aaaa_aaaa), 64);
        assert_eq!(tag_bits_of(0x0000_ffff_ffff_ffff), 48);
        assert_eq!(tag_bits_of(0x0fff_0000_ffff_ffff), 60);
        assert_eq!(tag_bits_of(1), 1);
        assert_eq!(tag_bits_of(0), 0);
    }

    #[test]
    fn bit_names() {
        assert_eq!(names(FI_TAGGED | FI_MSG, CAP_NAMES), "FI_MSG | FI_TAGGED");
        assert_eq!(
            names(FI_RMA | (1 << 40), CAP_NAMES),
            "FI_RMA | 0x10000000000"
        );
        assert_eq!(names(0, CAP_NAMES), "0");
    }

    #[test]
    fn default_hints_are_the_engines_needs() {
        let h = Hints::default();
        assert_eq!(h.caps, FI_TAGGED | FI_MSG);
        assert_eq!(h.ep_type, FI_EP_RDM);
        assert_eq!(h.msg_order, FI_ORDER_SAS);
        assert_eq!(Hints::for_provider("shm").provider.as_deref(), Some("shm"));
    }
}

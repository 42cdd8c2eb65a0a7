//! One tagged RDM endpoint with everything it needs (fabric, domain, AV, CQ), its addressing,
//! and the data path: posting tagged sends and receives, cancel, and reading completions.

use std::cell::{Cell, RefCell};
use std::ffi::c_void;
use std::ptr::{addr_of_mut, null_mut};

use ch4_core::{Error, ErrorKind, Result};
use libfabric_sys::{
    errstr, fi_addr_t, fi_av_attr, fi_av_insert, fi_av_open, fi_cancel, fi_close, fi_context2,
    fi_cq_attr, fi_cq_err_entry, fi_cq_open, fi_cq_read, fi_cq_readerr, fi_cq_strerror,
    fi_cq_tagged_entry, fi_domain, fi_enable, fi_endpoint, fi_ep_bind, fi_fabric, fi_getname,
    fi_mr_bind, fi_mr_enable, fi_mr_key, fi_mr_reg, fi_msg_tagged, fi_read, fi_tinject,
    fi_tinjectdata, fi_trecv, fi_trecvmsg, fi_tsend, fi_tsenddata, fi_tsendmsg, fi_tsendv, fid_av,
    fid_cq, fid_domain, fid_ep, fid_fabric, fid_mr, iovec, FI_ADDR_NOTAVAIL, FI_ADDR_STR,
    FI_ADDR_UNSPEC, FI_AV_TABLE, FI_CLAIM, FI_CQ_FORMAT_TAGGED, FI_DISCARD, FI_EAGAIN, FI_EAVAIL,
    FI_ECANCELED, FI_ENOENT, FI_ENOMSG, FI_ETOOSMALL, FI_ETRUNC, FI_MR_ENDPOINT, FI_MR_LOCAL,
    FI_MR_PROV_KEY, FI_MR_VIRT_ADDR, FI_PEEK, FI_RECV, FI_REMOTE_READ, FI_TRANSMIT, FI_WAIT_NONE,
};

use super::error::kind_of;
use super::{fi_error, Info};

/// The outcome of posting an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "Posted::Again means nothing was posted: poll, then post again"]
pub enum Posted {
    /// Posted (for an inject: sent; its buffer may be reused).
    Done,
    /// The provider is out of resources for now (`-FI_EAGAIN`) and posted nothing. libfabric
    /// requires reading the CQ ([`Endpoint::poll`]), which drives progress and frees them,
    /// before trying again; the engine queues the operation and retries after polling.
    Again,
    /// A peek found no matching message and said so at once (`-FI_ENOMSG` from the call, as
    /// libfabric 2's tcp provider answers; 1.17's providers answer through the CQ): nothing
    /// was posted and no completion follows.
    NoMessage,
}

/// What [`Endpoint::poll`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Completions {
    /// This many completions were written to the front of the entries (0: none yet).
    Read(usize),
    /// The next completion is an error: an operation that ended without success.
    Failed(CqError),
}

/// 64 bits from the kernel's generator for [`Endpoint::key_for`]; none is an error rather
/// than keys a stranger could guess.
fn random_seed() -> Result<u64> {
    let mut b = [0u8; 8];
    // SAFETY: getrandom writes at most `b.len()` bytes into `b`, a valid, writable array of
    // this frame; flags 0 (the urandom pool).
    let got = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if got != b.len() as isize {
        return Err(Error::new(
            ErrorKind::Transport,
            format!(
                "no random numbers for memory region keys: getrandom: {}",
                std::io::Error::last_os_error()
            ),
        ));
    }
    Ok(u64::from_le_bytes(b))
}

/// An operation that completed with an error (`fi_cq_readerr`'s entry).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqError {
    /// The context the operation was posted with.
    pub op_context: *mut fi_context2,
    /// The error, a positive libfabric code: `FI_ETRUNC` (a receive too small),
    /// `FI_ECANCELED` (canceled by [`Endpoint::cancel`]), others. Normalized to be positive:
    /// shm 1.17 reports -`FI_ETRUNC`.
    pub err: i32,
    /// The provider's own error number, for [`Endpoint::completion_error`]'s message.
    pub prov_errno: i32,
    /// The completion flags (`FI_RECV | FI_TAGGED`, `FI_SEND`, ...).
    pub flags: u64,
    /// The bytes transferred, as the provider reports them (0 for a truncated receive in both
    /// `tcp;ofi_rxm` and shm of libfabric 1.17).
    pub len: usize,
    /// For `FI_ETRUNC`, the bytes that did not fit, as the provider reports them (0 in both
    /// `tcp;ofi_rxm` and shm of libfabric 1.17: do not rely on it).
    pub olen: usize,
    /// The message's tag, for a receive.
    pub tag: u64,
    /// The message's remote CQ data, for a receive (a truncated one too).
    pub data: u64,
}

impl CqError {
    /// Whether this is a truncated receive (`FI_ETRUNC`).
    pub fn is_truncation(&self) -> bool {
        self.err == FI_ETRUNC
    }

    /// Whether the operation was canceled (`FI_ECANCELED`).
    pub fn is_canceled(&self) -> bool {
        self.err == FI_ECANCELED
    }
}

/// A tagged RDM endpoint with its own fabric, domain, AV (`FI_AV_TABLE`) and tagged CQ
/// (bound for sends and receives), closed in reverse order on drop.
///
/// Every call takes `&self`: an `Endpoint` is `Send` but not `Sync`, so calls on it are never
/// concurrent, which is what the domain's `FI_THREAD_DOMAIN` asks.
pub struct Endpoint {
    fabric: *mut fid_fabric,
    domain: *mut fid_domain,
    av: *mut fid_av,
    cq: *mut fid_cq,
    ep: *mut fid_ep,
    /// Addresses inserted so far: the valid `fi_addr_t`s are `0..av_len`.
    av_len: u64,
    /// `info.inject_size()`, `iov_limit()`, `rx_iov_limit()`, `peek()`, copied for the data
    /// path.
    inject_size: usize,
    iov_limit: usize,
    rx_iov_limit: usize,
    peek: bool,
    /// The memory regions registered for peers to read ([`Endpoint::register`]), by slot (a
    /// null slot is free). The endpoint owns them so that they are closed after the endpoint
    /// (which ends every read of them) and before the domain they belong to.
    regions: RefCell<Vec<*mut fid_mr>>,
    /// How many regions this endpoint has asked keys for: the next key is made from it, where
    /// the application chooses keys (no `FI_MR_PROV_KEY`; see [`Endpoint::key_for`]).
    next_key: Cell<u64>,
    /// 64 random bits drawn when the endpoint opens, from which every key is made: keys must
    /// be unique in the domain, as libfabric requires, and must not be guessable — a process
    /// that reaches this endpoint (any host, for `tcp;ofi_rxm`) and names a registered
    /// region's key can read it, and the providers check nothing else.
    key_seed: u64,
    info: Info,
}

/// A buffer registered for peers to read with [`Endpoint::read`]: what a peer needs to name it
/// (`addr`, `key`), and the endpoint's slot that [`Endpoint::deregister`] frees.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a region stays registered (readable by peers) until Endpoint::deregister"]
pub struct Region {
    slot: usize,
    /// The key a peer reads it with.
    pub key: u64,
    /// Where a peer's read starts for the region's first byte: its virtual address where the
    /// domain uses `FI_MR_VIRT_ADDR`, else 0 (offsets into the region).
    pub addr: u64,
}

// SAFETY: the endpoint's objects belong to it alone, and libfabric allows an object to be used
// from any thread so long as calls are serialized as the domain's threading level
// (FI_THREAD_DOMAIN) requires. `Endpoint` is not `Sync` (raw pointers), so its `&self` calls
// all come from the one thread that holds it at a time.
unsafe impl Send for Endpoint {}

impl Endpoint {
    /// Opens the fabric, domain, AV (sized for `av_size` addresses: a hint), CQ and endpoint
    /// that `info` describes, binds AV and CQ to the endpoint and enables it.
    ///
    /// # Errors
    ///
    /// The first libfabric call that fails, by name; whatever was opened is closed.
    pub fn open(info: Info, av_size: usize) -> Result<Endpoint> {
        let mut me = Endpoint {
            fabric: null_mut(),
            domain: null_mut(),
            av: null_mut(),
            cq: null_mut(),
            ep: null_mut(),
            av_len: 0,
            inject_size: info.inject_size(),
            iov_limit: info.iov_limit(),
            rx_iov_limit: info.rx_iov_limit(),
            peek: info.peek(),
            regions: RefCell::new(Vec::new()),
            next_key: Cell::new(0),
            key_seed: random_seed()?,
            info,
        };
        let fi = me.info.as_mut_ptr();
        let mut av_attr = fi_av_attr {
            type_: FI_AV_TABLE,
            count: av_size,
            ..fi_av_attr::default()
        };
        let mut cq_attr = fi_cq_attr {
            format: FI_CQ_FORMAT_TAGGED,
            wait_obj: FI_WAIT_NONE,
            ..fi_cq_attr::default()
        };
        // SAFETY: `fi` is the fi_info owned by `me.info`, with all its attribute structs
        // (checked when it was made). Each object is opened from the live one before it and
        // stored in `me` at once, so that `me`'s drop closes what was opened if a later call
        // fails; the attribute structs live on this frame for the calls that read them.
        unsafe {
            ok(
                "fi_fabric",
                fi_fabric((*fi).fabric_attr, &mut me.fabric, null_mut()),
            )?;
            ok(
                "fi_domain",
                fi_domain(me.fabric, fi, &mut me.domain, null_mut()),
            )?;
            ok(
                "fi_av_open",
                fi_av_open(me.domain, &mut av_attr, &mut me.av, null_mut()),
            )?;
            ok(
                "fi_cq_open",
                fi_cq_open(me.domain, &mut cq_attr, &mut me.cq, null_mut()),
            )?;
            ok(
                "fi_endpoint",
                fi_endpoint(me.domain, fi, &mut me.ep, null_mut()),
            )?;
            ok(
                "fi_ep_bind(av)",
                fi_ep_bind(me.ep, addr_of_mut!((*me.av).fid), 0),
            )?;
            let cq = addr_of_mut!((*me.cq).fid);
            ok(
                "fi_ep_bind(cq)",
                fi_ep_bind(me.ep, cq, FI_TRANSMIT | FI_RECV),
            )?;
            ok("fi_enable", fi_enable(me.ep))?;
        }
        Ok(me)
    }

    /// The provider, fabric and domain this endpoint was opened with.
    pub fn info(&self) -> &Info {
        &self.info
    }

    /// This endpoint's address (`fi_getname`): the "business card" every other process
    /// inserts with [`insert_addresses`](Endpoint::insert_addresses).
    pub fn name(&self) -> Result<Vec<u8>> {
        let mut name = vec![0u8; self.info.addr_len().max(64)];
        loop {
            let mut len = name.len();
            // SAFETY: the endpoint is live and `&(*ep).fid` is its own fid (fi_getname's
            // container_of); `name` is writable for `len` bytes and `len` lives on this frame.
            let r = unsafe {
                fi_getname(
                    addr_of_mut!((*self.ep).fid),
                    name.as_mut_ptr().cast(),
                    &mut len,
                )
            };
            if r == -FI_ETOOSMALL && len > name.len() {
                name.resize(len, 0);
                continue;
            }
            ok("fi_getname", r)?;
            name.truncate(len);
            return Ok(name);
        }
    }

    /// Whether `name` (another process's business card) is a name of this endpoint's format
    /// that [`insert_addresses`](Endpoint::insert_addresses) can take: as long as this
    /// endpoint's own for a fixed-length format, one NUL-terminated string for `FI_ADDR_STR`.
    pub fn is_name(&self, name: &[u8]) -> Result<bool> {
        if self.info.addr_format() == FI_ADDR_STR as u32 {
            return Ok(name.iter().position(|&b| b == 0) == Some(name.len().wrapping_sub(1)));
        }
        Ok(name.len() == self.name()?.len())
    }

    /// Inserts `count` addresses, concatenated in `names` in process order, into the AV and
    /// returns their `fi_addr_t`s, checking that the AV numbered them in order from
    /// [`av_len`](Endpoint::av_len): inserting every process's name at once, in process order,
    /// makes a process's `fi_addr_t` its number.
    ///
    /// Names of fixed-length formats (sockaddrs) are as long as this endpoint's own
    /// ([`name`](Endpoint::name)): the provider reads that many bytes for each, whatever
    /// `names` holds, so shorter names would be read past their end. `FI_ADDR_STR` names
    /// (shm's) are NUL-terminated strings, back to back.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Arg`] if `names` does not split into `count` names; the error of
    /// `fi_av_insert`; [`ErrorKind::Transport`] if it inserted fewer (some names invalid);
    /// [`ErrorKind::Internal`] if the numbering is not consecutive.
    pub fn insert_addresses(&mut self, names: &[u8], count: usize) -> Result<Vec<fi_addr_t>> {
        if count == 0 {
            return Ok(Vec::new());
        }
        let splits = if self.info.addr_format() == FI_ADDR_STR as u32 {
            names.last() == Some(&0) && names.iter().filter(|&&b| b == 0).count() == count
        } else {
            let own = self.name()?.len();
            own != 0 && count.checked_mul(own) == Some(names.len())
        };
        if !splits {
            return Err(Error::new(
                ErrorKind::Arg,
                format!(
                    "{} bytes of names do not split into {count} addresses",
                    names.len()
                ),
            ));
        }
        let mut addrs = vec![FI_ADDR_NOTAVAIL; count];
        // SAFETY: the AV is live; `names` holds `count` names of its format (checked above as
        // far as lengths go; the provider parses them) and `addrs` is writable for `count`
        // entries; no context or flags (a synchronous insert).
        let n = unsafe {
            fi_av_insert(
                self.av,
                names.as_ptr().cast(),
                count,
                addrs.as_mut_ptr(),
                0,
                null_mut(),
            )
        };
        if n < 0 {
            return Err(fi_error("fi_av_insert", n as isize));
        }
        if n as usize != count {
            return Err(Error::new(
                ErrorKind::Transport,
                format!("fi_av_insert: inserted {n} of {count} addresses"),
            ));
        }
        if let Some((i, (&got, want))) = addrs
            .iter()
            .zip(self.av_len..)
            .enumerate()
            .find(|(_, (&a, want))| a != *want)
        {
            // The first mismatch only: a job's table can hold a million addresses.
            return Err(Error::new(
                ErrorKind::Internal,
                format!(
                    "fi_av_insert (FI_AV_TABLE) numbered address {i} of {count} as {got}, not \
                     {want} (two ranks with the same address?)"
                ),
            ));
        }
        self.av_len += count as u64;
        Ok(addrs)
    }

    /// The addresses inserted so far: the valid destinations are `0..av_len`.
    pub fn av_len(&self) -> usize {
        self.av_len as usize
    }

    /// Sends `buf` (at most [`Info::inject_size`] bytes) to `dest` with `tag`; libfabric copies
    /// it before returning and writes no completion.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Count`] if `buf` exceeds the inject size, [`ErrorKind::Rank`] if `dest` is
    /// not an inserted address (both checked here: providers only assert them), or the
    /// provider's error.
    #[inline]
    pub fn tinject(&self, buf: &[u8], dest: fi_addr_t, tag: u64) -> Result<Posted> {
        if buf.len() > self.inject_size {
            return Err(self.too_long("fi_tinject", buf.len(), self.inject_size));
        }
        self.check_dest("fi_tinject", dest)?;
        // SAFETY: the endpoint is live; `buf` is readable for its length during the call,
        // which copies it (an inject); `dest` is in the AV (checked).
        let r = unsafe { fi_tinject(self.ep, buf.as_ptr().cast(), buf.len(), dest, tag) };
        posted("fi_tinject", r)
    }

    /// [`tinject`](Endpoint::tinject) with `data` delivered in the receiver's completion
    /// (remote CQ data, at most [`Info::cq_data_size`] bytes of it).
    ///
    /// # Errors
    ///
    /// As for [`tinject`](Endpoint::tinject).
    #[inline]
    pub fn tinjectdata(&self, buf: &[u8], data: u64, dest: fi_addr_t, tag: u64) -> Result<Posted> {
        if buf.len() > self.inject_size {
            return Err(self.too_long("fi_tinjectdata", buf.len(), self.inject_size));
        }
        self.check_dest("fi_tinjectdata", dest)?;
        // SAFETY: as for `tinject`: the endpoint is live, `buf` readable during the call,
        // which copies it, and `dest` in the AV.
        let r = unsafe { fi_tinjectdata(self.ep, buf.as_ptr().cast(), buf.len(), data, dest, tag) };
        posted("fi_tinjectdata", r)
    }

    /// [`tsend`](Endpoint::tsend) with `data` delivered in the receiver's completion.
    ///
    /// # Safety
    ///
    /// As for [`tsend`](Endpoint::tsend).
    ///
    /// # Errors
    ///
    /// As for [`tsend`](Endpoint::tsend).
    #[inline]
    #[allow(clippy::too_many_arguments)] // fi_tsenddata's own arguments, one for one
    pub unsafe fn tsenddata(
        &self,
        buf: *const u8,
        len: usize,
        desc: *mut c_void,
        data: u64,
        dest: fi_addr_t,
        tag: u64,
        ctx: *mut fi_context2,
    ) -> Result<Posted> {
        self.check_dest("fi_tsenddata", dest)?;
        // SAFETY: the endpoint is live and `dest` in the AV; buffer, descriptor and context
        // meet the caller's contract (tsend's).
        let r =
            unsafe { fi_tsenddata(self.ep, buf.cast(), len, desc, data, dest, tag, ctx.cast()) };
        posted("fi_tsenddata", r)
    }

    /// Posts a send of `len` bytes at `buf` to `dest` with `tag`; its completion (with
    /// `op_context == ctx`) comes from [`poll`](Endpoint::poll).
    ///
    /// # Safety
    ///
    /// Until that completion is read (or the endpoint is dropped, which discards it):
    /// `buf[..len]` stays allocated and unchanged, and `ctx` points to an `fi_context2` that
    /// stays allocated, does not move and is not otherwise used (the provider writes it).
    /// `desc` is the buffer's memory descriptor, or null (this layer's domains need none).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Rank`] if `dest` is not an inserted address, or the provider's error.
    #[inline]
    pub unsafe fn tsend(
        &self,
        buf: *const u8,
        len: usize,
        desc: *mut c_void,
        dest: fi_addr_t,
        tag: u64,
        ctx: *mut fi_context2,
    ) -> Result<Posted> {
        self.check_dest("fi_tsend", dest)?;
        // SAFETY: the endpoint is live and `dest` in the AV; buffer, descriptor and context
        // meet the caller's contract above.
        let r = unsafe { fi_tsend(self.ep, buf.cast(), len, desc, dest, tag, ctx.cast()) };
        posted("fi_tsend", r)
    }

    /// Posts a send of the `count` buffers of `iov`, as one message, to `dest` with `tag`.
    ///
    /// # Safety
    ///
    /// `iov[..count]` is readable during the call; the buffers it describes, and `ctx`, meet
    /// [`tsend`](Endpoint::tsend)'s contract.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Count`] if `count` exceeds [`Info::iov_limit`], [`ErrorKind::Rank`] if
    /// `dest` is not an inserted address, or the provider's error.
    #[inline]
    pub unsafe fn tsendv(
        &self,
        iov: *const iovec,
        count: usize,
        dest: fi_addr_t,
        tag: u64,
        ctx: *mut fi_context2,
    ) -> Result<Posted> {
        if count > self.iov_limit {
            return Err(self.too_long("fi_tsendv (iovecs)", count, self.iov_limit));
        }
        self.check_dest("fi_tsendv", dest)?;
        // SAFETY: the endpoint is live and `dest` in the AV; iovecs and context meet the
        // caller's contract above; no descriptors.
        let r = unsafe { fi_tsendv(self.ep, iov, null_mut(), count, dest, tag, ctx.cast()) };
        posted("fi_tsendv", r)
    }

    /// Posts the send that `msg` describes (a gather list, remote CQ data) with operation
    /// `flags` (`FI_REMOTE_CQ_DATA` to deliver `msg.data`; `FI_COMPLETION`).
    ///
    /// # Safety
    ///
    /// `msg` and its iovec array are readable during the call; the buffers it describes and
    /// its context meet [`tsend`](Endpoint::tsend)'s contract.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Count`] for more iovecs than [`Info::iov_limit`], [`ErrorKind::Rank`] if
    /// `msg.addr` is not an inserted address, or the provider's error.
    #[inline]
    pub unsafe fn tsendmsg(&self, msg: &fi_msg_tagged, flags: u64) -> Result<Posted> {
        if msg.iov_count > self.iov_limit {
            return Err(self.too_long("fi_tsendmsg (iovecs)", msg.iov_count, self.iov_limit));
        }
        self.check_dest("fi_tsendmsg", msg.addr)?;
        // SAFETY: the endpoint is live and the destination in the AV; the message and what it
        // points to meet the caller's contract above; no descriptors.
        let r = unsafe { fi_tsendmsg(self.ep, msg, flags) };
        posted("fi_tsendmsg", r)
    }

    /// Posts a receive into `len` bytes at `buf` of a message from `src` (or any source:
    /// `FI_ADDR_UNSPEC`) whose tag equals `tag` in the bits not set in `ignore`. Its completion
    /// (`op_context == ctx`; the message's tag and length) comes from [`poll`](Endpoint::poll);
    /// a longer message completes it with an `FI_ETRUNC` [`CqError`].
    ///
    /// Without [`Info::directed_recv`], providers ignore `src`.
    ///
    /// # Safety
    ///
    /// Until that completion is read (or the endpoint is dropped, which discards it):
    /// `buf[..len]` stays allocated and is neither read nor written by anyone else (the
    /// provider writes it at any time), and `ctx` meets [`tsend`](Endpoint::tsend)'s contract.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Rank`] if `src` is neither `FI_ADDR_UNSPEC` nor an inserted address, or
    /// the provider's error.
    #[inline]
    pub unsafe fn trecv(
        &self,
        buf: *mut u8,
        len: usize,
        src: fi_addr_t,
        tag: u64,
        ignore: u64,
        ctx: *mut fi_context2,
    ) -> Result<Posted> {
        self.check_src("fi_trecv", src)?;
        // SAFETY: the endpoint is live and `src` valid; buffer and context meet the caller's
        // contract above; no descriptor.
        let r = unsafe {
            fi_trecv(
                self.ep,
                buf.cast(),
                len,
                null_mut(),
                src,
                tag,
                ignore,
                ctx.cast(),
            )
        };
        posted("fi_trecv", r)
    }

    /// Posts the receive that `msg` describes with operation `flags`:
    ///
    /// - `FI_PEEK`: completes (no data moved) with the tag and length of a matching message
    ///   that has arrived, or with an `FI_ENOMSG` error; `| FI_CLAIM` also reserves it for a
    ///   later `FI_CLAIM` receive that passes the same context.
    /// - `FI_CLAIM`: receives the message a claiming peek with context `msg.context` reserved.
    /// - `FI_DISCARD` (with `FI_PEEK` or `FI_CLAIM`): drops the message instead.
    /// - `FI_COMPLETION`: writes a completion even under selective completion.
    ///
    /// # Safety
    ///
    /// `msg` and its iovec array are readable during the call; its buffers (none for a peek
    /// or a discard) meet [`trecv`](Endpoint::trecv)'s contract, and its context
    /// [`tsend`](Endpoint::tsend)'s — until the peek's completion is read and, after a
    /// claiming peek, until the claim's.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Transport`] for `FI_PEEK`, `FI_CLAIM` or `FI_DISCARD` where the provider
    /// ignores them ([`Info::peek`]); [`ErrorKind::Count`] for more iovecs than
    /// [`Info::rx_iov_limit`]; [`ErrorKind::Rank`] for an invalid source; the provider's error.
    #[inline]
    pub unsafe fn trecvmsg(&self, msg: &fi_msg_tagged, flags: u64) -> Result<Posted> {
        if flags & (FI_PEEK | FI_CLAIM | FI_DISCARD) != 0 && !self.peek {
            return Err(self.no_peek());
        }
        if msg.iov_count > self.rx_iov_limit {
            return Err(self.too_long("fi_trecvmsg (iovecs)", msg.iov_count, self.rx_iov_limit));
        }
        self.check_src("fi_trecvmsg", msg.addr)?;
        // SAFETY: the endpoint is live and the source valid; the message and what it points
        // to meet the caller's contract above.
        let r = unsafe { fi_trecvmsg(self.ep, msg, flags) };
        if flags & FI_PEEK != 0 && r == -(FI_ENOMSG as isize) {
            return Ok(Posted::NoMessage);
        }
        posted("fi_trecvmsg", r)
    }

    /// Why this endpoint cannot lend memory to peers' reads, if it cannot: no `FI_RMA`, or a
    /// domain that wants local descriptors for every buffer (`FI_MR_LOCAL`), which this layer
    /// does not pass.
    pub fn rma_unusable(&self) -> Option<String> {
        if !self.info.rma() {
            return Some(format!("{} offers no FI_RMA", self.info.provider()));
        }
        if self.info.mr_mode() & FI_MR_LOCAL != 0 {
            return Some(format!(
                "{} needs registered local buffers (FI_MR_LOCAL)",
                self.info.provider()
            ));
        }
        None
    }

    /// The key of the `n`th region this endpoint registers, where keys are the application's
    /// to choose: SplitMix64's finalizer (a bijection of 64-bit words) of the random seed plus
    /// `n`, so keys never repeat until 2^64 regions and none can be told from the others
    /// without the seed; cut to the domain's key size when that is under 8 bytes.
    fn key_for(&self, n: u64) -> u64 {
        let mut z = self
            .key_seed
            .wrapping_add(n.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        match self.info.mr_key_size() {
            size @ 1..=7 => z & ((1u64 << (8 * size)) - 1),
            _ => z,
        }
    }

    /// Registers `buf[..len]` for peers to read (`FI_REMOTE_READ`), bound to this endpoint
    /// where the domain asks for that (`FI_MR_ENDPOINT`).
    ///
    /// # Safety
    ///
    /// `buf[..len]` stays allocated and unchanged until [`deregister`](Endpoint::deregister)
    /// of the returned region, or until the endpoint is dropped: a peer may read it at any time
    /// until then.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Transport`] where [`rma_unusable`](Endpoint::rma_unusable) says why, or the
    /// provider's error.
    pub unsafe fn register(&self, buf: *const u8, len: usize) -> Result<Region> {
        if let Some(why) = self.rma_unusable() {
            return Err(Error::new(ErrorKind::Transport, why));
        }
        let mode = self.info.mr_mode();
        let mut mr: *mut fid_mr = null_mut();
        let mut requested;
        // A key already in use (possible only when the domain's keys are shorter than 8
        // bytes) is answered -FI_ENOKEY: take the next one.
        let mut tries = 0;
        loop {
            requested = self.key_for(self.next_key.get());
            self.next_key.set(self.next_key.get().wrapping_add(1));
            // SAFETY: the domain is live; `buf[..len]` stays allocated until the region is
            // closed (caller); `mr` is writable. A region is closed by `deregister` or by
            // drop, once.
            let r = unsafe {
                fi_mr_reg(
                    self.domain,
                    buf.cast(),
                    len,
                    FI_REMOTE_READ,
                    0,
                    requested,
                    0,
                    &mut mr,
                    null_mut(),
                )
            };
            tries += 1;
            if r == -libfabric_sys::FI_ENOKEY && mode & FI_MR_PROV_KEY == 0 && tries < 8 {
                continue;
            }
            ok("fi_mr_reg", r)?;
            break;
        }
        // SAFETY: `mr` is the live region just registered; it is closed here if binding it
        // fails, else by `deregister` or by drop, once.
        unsafe {
            let bound = if mode & FI_MR_ENDPOINT != 0 {
                ok(
                    "fi_mr_bind",
                    fi_mr_bind(mr, addr_of_mut!((*self.ep).fid), 0),
                )
                .and_then(|()| ok("fi_mr_enable", fi_mr_enable(mr)))
            } else {
                Ok(())
            };
            if let Err(e) = bound {
                fi_close(addr_of_mut!((*mr).fid));
                return Err(e);
            }
        }
        let key = if mode & FI_MR_PROV_KEY != 0 {
            // SAFETY: `mr` is the live region just registered.
            unsafe { fi_mr_key(mr) }
        } else {
            requested
        };
        let mut regions = self.regions.borrow_mut();
        let slot = match regions.iter().position(|r| r.is_null()) {
            Some(i) => {
                regions[i] = mr;
                i
            }
            None => {
                regions.push(mr);
                regions.len() - 1
            }
        };
        Ok(Region {
            slot,
            key,
            addr: if mode & FI_MR_VIRT_ADDR != 0 {
                buf as u64
            } else {
                0
            },
        })
    }

    /// Closes a region: peers can no longer read it (a read already under way fails).
    pub fn deregister(&self, region: Region) {
        let mut regions = self.regions.borrow_mut();
        if let Some(mr) = regions.get_mut(region.slot) {
            if !mr.is_null() {
                // SAFETY: a live region of this endpoint's domain, closed once (its slot is
                // cleared).
                unsafe { fi_close(addr_of_mut!((**mr).fid)) };
                *mr = null_mut();
            }
        }
    }

    /// Regions registered and not yet closed.
    pub fn regions(&self) -> usize {
        self.regions
            .borrow()
            .iter()
            .filter(|r| !r.is_null())
            .count()
    }

    /// Posts a read of `len` bytes from peer `src`'s region `key`, starting at `addr` (as the
    /// peer's [`Region`] says), into `buf`; its completion (`op_context == ctx`) comes from
    /// [`poll`](Endpoint::poll).
    ///
    /// # Safety
    ///
    /// `buf[..len]` and `ctx` meet [`trecv`](Endpoint::trecv)'s contract (the provider writes
    /// the buffer until the completion is read).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Count`] past [`Info::max_msg_size`], [`ErrorKind::Rank`] if `src` is not an
    /// inserted address, or the provider's error.
    #[inline]
    pub unsafe fn read(
        &self,
        buf: *mut u8,
        len: usize,
        src: fi_addr_t,
        addr: u64,
        key: u64,
        ctx: *mut fi_context2,
    ) -> Result<Posted> {
        if len > self.info.max_msg_size() {
            return Err(self.too_long("fi_read", len, self.info.max_msg_size()));
        }
        self.check_dest("fi_read", src)?;
        // SAFETY: the endpoint is live and `src` in the AV; buffer and context meet the
        // caller's contract; no descriptor (no FI_MR_LOCAL: `rma_unusable`).
        let r = unsafe {
            fi_read(
                self.ep,
                buf.cast(),
                len,
                null_mut(),
                src,
                addr,
                key,
                ctx.cast(),
            )
        };
        posted("fi_read", r)
    }

    /// Asks the provider to cancel the operation posted with `ctx`. If it is canceled, its
    /// completion is a [`CqError`] with `FI_ECANCELED`; if it already completed (or is not
    /// found), nothing happens, so a canceled operation must still be waited for.
    ///
    /// # Safety
    ///
    /// `ctx` is the context of an operation posted on this endpoint, or a pointer never passed
    /// to one (providers compare it with their operations' contexts).
    ///
    /// # Errors
    ///
    /// The provider's error (not "not found").
    pub unsafe fn cancel(&self, ctx: *mut fi_context2) -> Result<()> {
        // SAFETY: the endpoint is live and `&(*ep).fid` its own fid (fi_cancel's
        // container_of); `ctx` is only compared (caller).
        let r = unsafe { fi_cancel(addr_of_mut!((*self.ep).fid), ctx.cast()) };
        if r == 0 || r == -(FI_ENOENT as isize) {
            Ok(())
        } else {
            Err(fi_error("fi_cancel", r))
        }
    }

    /// Reads up to `entries.len()` completions (`fi_cq_read`), which also drives the
    /// provider's progress (both providers of this machine progress data only inside calls).
    ///
    /// Completions come in any order; each names its operation by `op_context`. An error
    /// completion is returned alone, as [`Completions::Failed`], when it is next in the queue.
    /// Injects have none.
    ///
    /// # Errors
    ///
    /// The CQ failed (not an operation: those are [`Completions::Failed`]).
    #[inline]
    pub fn poll(&self, entries: &mut [fi_cq_tagged_entry]) -> Result<Completions> {
        // SAFETY: the CQ is live and of the tagged format; `entries` is writable for its
        // length in entries of that format.
        let n = unsafe { fi_cq_read(self.cq, entries.as_mut_ptr().cast(), entries.len()) };
        if n >= 0 {
            return Ok(Completions::Read(n as usize));
        }
        if n == -(FI_EAGAIN as isize) {
            return Ok(Completions::Read(0));
        }
        self.poll_failed(n)
    }

    /// `poll`'s path for a negative return: an error completion to read, or a failing CQ.
    #[cold]
    #[inline(never)]
    fn poll_failed(&self, n: isize) -> Result<Completions> {
        if n != -(FI_EAVAIL as isize) {
            return Err(fi_error("fi_cq_read", n));
        }
        // A zeroed entry has err_data_size 0: the provider then points err_data at its own
        // buffer rather than writing through it.
        let mut e = fi_cq_err_entry::default();
        // SAFETY: the CQ is live and `e` a writable error entry.
        let r = unsafe { fi_cq_readerr(self.cq, &mut e, 0) };
        if r == -(FI_EAGAIN as isize) {
            return Ok(Completions::Read(0));
        }
        if r != 1 {
            return Err(fi_error("fi_cq_readerr", r));
        }
        Ok(Completions::Failed(CqError {
            op_context: e.op_context.cast(),
            err: e.err.wrapping_abs(),
            prov_errno: e.prov_errno,
            flags: e.flags,
            len: e.len,
            olen: e.olen,
            tag: e.tag,
            data: e.data,
        }))
    }

    /// The error a failed operation reports: its kind from the code (`FI_ETRUNC`:
    /// [`ErrorKind::Truncate`], connection errors: [`ErrorKind::PeerFailed`], others:
    /// [`ErrorKind::Transport`]), with libfabric's and the provider's messages. (A canceled
    /// operation is no error in MPI; the engine handles it before asking this.)
    #[cold]
    pub fn completion_error(&self, e: &CqError) -> Error {
        // SAFETY: the CQ is live; no error data (null) and no output buffer (null, 0): the
        // provider returns a pointer to a static or CQ-owned string, read at once.
        let prov =
            unsafe { fi_cq_strerror(self.cq, e.prov_errno, std::ptr::null(), null_mut(), 0) };
        let prov = if prov.is_null() {
            String::new()
        } else {
            // SAFETY: non-null and NUL-terminated, valid until the next call on the CQ.
            let s = unsafe { std::ffi::CStr::from_ptr(prov) }.to_string_lossy();
            format!("; provider: {s} ({})", e.prov_errno)
        };
        Error::new(
            kind_of(e.err),
            format!(
                "{} completion failed: {} (-{}){prov}; tag {:#x}",
                if e.flags & FI_RECV != 0 {
                    "receive"
                } else {
                    "send"
                },
                errstr(e.err),
                e.err,
                e.tag
            ),
        )
    }

    /// The raw endpoint, for calls this layer does not wrap. It stays owned by `self`.
    pub fn raw_ep(&self) -> *mut fid_ep {
        self.ep
    }

    /// The raw completion queue (for `fi_cq_readfrom` and the like). It stays owned by `self`.
    pub fn raw_cq(&self) -> *mut fid_cq {
        self.cq
    }

    /// The raw domain (for memory registration, later). It stays owned by `self`.
    pub fn raw_domain(&self) -> *mut fid_domain {
        self.domain
    }

    #[inline(always)]
    fn check_dest(&self, call: &'static str, dest: fi_addr_t) -> Result<()> {
        if dest < self.av_len {
            Ok(())
        } else {
            Err(self.bad_addr(call, dest))
        }
    }

    #[inline(always)]
    fn check_src(&self, call: &'static str, src: fi_addr_t) -> Result<()> {
        if src < self.av_len || src == FI_ADDR_UNSPEC {
            Ok(())
        } else {
            Err(self.bad_addr(call, src))
        }
    }

    #[cold]
    #[inline(never)]
    fn bad_addr(&self, call: &str, addr: fi_addr_t) -> Error {
        Error::new(
            ErrorKind::Rank,
            format!(
                "{call}: fi_addr {addr} is not in the AV (0..{})",
                self.av_len
            ),
        )
    }

    #[cold]
    #[inline(never)]
    fn too_long(&self, call: &str, len: usize, limit: usize) -> Error {
        Error::new(
            ErrorKind::Count,
            format!(
                "{call}: {len} is more than {} allows ({limit})",
                self.info.provider()
            ),
        )
    }

    #[cold]
    #[inline(never)]
    fn no_peek(&self) -> Error {
        let (major, minor) = self.info.provider_version();
        Error::new(
            ErrorKind::Transport,
            format!(
                "fi_trecvmsg: {} {major}.{minor} ignores FI_PEEK, FI_CLAIM and FI_DISCARD \
                 (a peek would consume the message)",
                self.info.provider()
            ),
        )
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        // SAFETY: each object was opened by `open` and is closed once, in reverse order of
        // dependence: the endpoint before the regions peers read through it and the AV and CQ
        // bound to it, those before the domain,
        // the domain before the fabric. Null ones (an open that failed midway) are skipped.
        // Closing the endpoint discards its outstanding operations; the provider no longer
        // touches their buffers or contexts afterwards. fi_close's result is ignored: there
        // is nothing to do about a failed close in drop.
        unsafe {
            if !self.ep.is_null() {
                fi_close(addr_of_mut!((*self.ep).fid));
            }
            for &mr in self.regions.get_mut().iter() {
                if !mr.is_null() {
                    fi_close(addr_of_mut!((*mr).fid));
                }
            }
            if !self.av.is_null() {
                fi_close(addr_of_mut!((*self.av).fid));
            }
            if !self.cq.is_null() {
                fi_close(addr_of_mut!((*self.cq).fid));
            }
            if !self.domain.is_null() {
                fi_close(addr_of_mut!((*self.domain).fid));
            }
            if !self.fabric.is_null() {
                fi_close(addr_of_mut!((*self.fabric).fid));
            }
        }
    }
}

/// `Ok` for a successful (non-negative) libfabric return, else its error.
fn ok(call: &'static str, r: i32) -> Result<()> {
    if r >= 0 {
        Ok(())
    } else {
        Err(fi_error(call, r as isize))
    }
}

/// A data-path return as [`Posted`]: 0 is done, `-FI_EAGAIN` is again, anything else fails.
#[inline(always)]
fn posted(call: &'static str, r: isize) -> Result<Posted> {
    if r == 0 {
        Ok(Posted::Done)
    } else if r == -(FI_EAGAIN as isize) {
        Ok(Posted::Again)
    } else {
        Err(fi_error(call, r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn posted_maps_returns() {
        assert_eq!(posted("x", 0).unwrap(), Posted::Done);
        assert_eq!(posted("x", -(FI_EAGAIN as isize)).unwrap(), Posted::Again);
        let e = posted("fi_tsend", -(FI_ECANCELED as isize)).unwrap_err();
        assert!(e.detail().starts_with("fi_tsend: "), "{}", e.detail());
    }
}

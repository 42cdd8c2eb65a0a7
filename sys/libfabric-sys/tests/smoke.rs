//! The proof that the bindings work: the raw API, as a C program would use it, over the real
//! providers of this machine.
//!
//! For each of `tcp;ofi_rxm` and `shm`: one fabric, domain, AV (`FI_AV_TABLE`) and tagged CQ,
//! two RDM endpoints in this process with each other's names inserted, then tagged traffic
//! (inject, a 1 MiB send), a truncated receive (`FI_ETRUNC`), a canceled receive
//! (`FI_ECANCELED`) and, where the provider has them, `FI_PEEK` / `FI_CLAIM`. A provider that
//! is not on the machine is skipped with a note on stderr (the test passes); every wait on the
//! CQ gives up after 10 s with a message naming what it waited for.

use core::ffi::CStr;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::ffi::CString;
use std::mem::zeroed;
use std::ptr::{addr_of_mut, null, null_mut};
use std::time::{Duration, Instant};

use libfabric_sys::*;

/// How long any test waits for a completion before failing.
const LIMIT: Duration = Duration::from_secs(10);

/// The objects of one test: two endpoints sharing a domain, an AV and a CQ.
struct Rig {
    prov: &'static str,
    info: *mut fi_info,
    fabric: *mut fid_fabric,
    domain: *mut fid_domain,
    av: *mut fid_av,
    cq: *mut fid_cq,
    ep: [*mut fid_ep; 2],
    addr: [fi_addr_t; 2],
    /// Completions read while retrying a call that said `-FI_EAGAIN`, handed out by `next`
    /// before the CQ is read again.
    backlog: RefCell<VecDeque<Completion>>,
}

/// One completion: `Err` is an error completion, read with `fi_cq_readerr`.
type Completion = Result<fi_cq_tagged_entry, fi_cq_err_entry>;

/// Panics with the call's name and libfabric's message unless `ret` is 0 (or positive).
#[track_caller]
fn check(what: &str, ret: isize) {
    if ret < 0 {
        panic!("{what}: {} ({ret})", errstr(ret as i32));
    }
}

impl Rig {
    /// Opens everything for provider `prov` (as libfabric names it, `tcp;ofi_rxm`), or `None`
    /// if this machine has no such provider offering tagged RDM endpoints.
    fn open(prov: &'static str) -> Option<Rig> {
        let c_prov = CString::new(prov).unwrap();
        // SAFETY: fi_allocinfo returns a fresh fi_info with all attribute structs allocated;
        // the fields written are those structs' own, and `prov_name` gets a malloc'd copy
        // because fi_freeinfo frees it. fi_getinfo only reads the hints.
        let info = unsafe {
            let hints = fi_allocinfo();
            assert!(!hints.is_null(), "fi_allocinfo");
            (*hints).caps = FI_TAGGED | FI_MSG;
            (*hints).mode = FI_CONTEXT | FI_CONTEXT2;
            (*(*hints).ep_attr).type_ = FI_EP_RDM;
            (*(*hints).domain_attr).av_type = FI_AV_TABLE;
            (*(*hints).fabric_attr).prov_name = libc::strdup(c_prov.as_ptr());
            let mut info = null_mut();
            let ret = fi_getinfo(API_VERSION, null(), null(), 0, hints, &mut info);
            fi_freeinfo(hints);
            if ret == -FI_ENODATA {
                eprintln!("SKIP: provider {prov} offers no tagged RDM endpoint on this machine");
                return None;
            }
            check("fi_getinfo", ret as isize);
            info
        };
        let mut rig = Rig {
            prov,
            info,
            fabric: null_mut(),
            domain: null_mut(),
            av: null_mut(),
            cq: null_mut(),
            ep: [null_mut(); 2],
            addr: [FI_ADDR_NOTAVAIL; 2],
            backlog: RefCell::new(VecDeque::new()),
        };
        // SAFETY: `info` is the first fi_info fi_getinfo returned, alive until Drop; every
        // object is opened from the one before it, and its pointer is stored in `rig` at once
        // so that Drop closes whatever was opened if a later call panics. The attribute
        // structs live on this frame for the calls that read them.
        unsafe {
            let name = CStr::from_ptr((*(*info).fabric_attr).prov_name);
            assert_eq!(
                name.to_str().unwrap(),
                prov,
                "fi_getinfo gave another provider"
            );
            check(
                "fi_fabric",
                fi_fabric((*info).fabric_attr, &mut rig.fabric, null_mut()) as isize,
            );
            check(
                "fi_domain",
                fi_domain(rig.fabric, info, &mut rig.domain, null_mut()) as isize,
            );
            let mut av_attr: fi_av_attr = zeroed();
            av_attr.type_ = FI_AV_TABLE;
            av_attr.count = 2;
            check(
                "fi_av_open",
                fi_av_open(rig.domain, &mut av_attr, &mut rig.av, null_mut()) as isize,
            );
            let mut cq_attr: fi_cq_attr = zeroed();
            cq_attr.format = FI_CQ_FORMAT_TAGGED;
            cq_attr.wait_obj = FI_WAIT_NONE;
            check(
                "fi_cq_open",
                fi_cq_open(rig.domain, &mut cq_attr, &mut rig.cq, null_mut()) as isize,
            );
            for i in 0..2 {
                check(
                    "fi_endpoint",
                    fi_endpoint(rig.domain, info, &mut rig.ep[i], null_mut()) as isize,
                );
                let ep = rig.ep[i];
                check(
                    "fi_ep_bind(av)",
                    fi_ep_bind(ep, addr_of_mut!((*rig.av).fid), 0) as isize,
                );
                check(
                    "fi_ep_bind(cq)",
                    fi_ep_bind(ep, addr_of_mut!((*rig.cq).fid), FI_TRANSMIT | FI_RECV) as isize,
                );
                check("fi_enable", fi_enable(ep) as isize);
            }
            // Both names, concatenated, inserted in one call: FI_AV_TABLE numbers them 0, 1.
            let mut names = Vec::new();
            for &ep in &rig.ep {
                let mut buf = [0u8; 256];
                let mut len = buf.len();
                check(
                    "fi_getname",
                    fi_getname(addr_of_mut!((*ep).fid), buf.as_mut_ptr().cast(), &mut len) as isize,
                );
                names.push(buf[..len].to_vec());
            }
            assert_eq!(
                names[0].len(),
                names[1].len(),
                "names of one provider differ in length"
            );
            let all = names.concat();
            let n = fi_av_insert(
                rig.av,
                all.as_ptr().cast(),
                2,
                rig.addr.as_mut_ptr(),
                0,
                null_mut(),
            );
            assert_eq!(n, 2, "fi_av_insert: {}", errstr(n));
            assert_eq!(rig.addr, [0, 1], "FI_AV_TABLE numbers addresses in order");
        }
        Some(rig)
    }

    /// Reads at most one completion from the CQ (which also drives the provider's progress):
    /// `None` if there is none yet.
    fn read_cq(&self) -> Option<Completion> {
        // SAFETY: an all-zero fi_cq_tagged_entry is valid (null pointers, zero numbers).
        let mut entry: fi_cq_tagged_entry = unsafe { zeroed() };
        // SAFETY: the CQ is live and of the tagged format; `entry` is one writable entry.
        let n = unsafe { fi_cq_read(self.cq, addr_of_mut!(entry).cast(), 1) };
        if n == 1 {
            return Some(Ok(entry));
        }
        if n == -(FI_EAVAIL as isize) {
            // SAFETY: as above; a zeroed error entry has err_data_size 0, so the provider
            // points err_data at its own buffer instead of writing through it.
            let mut err: fi_cq_err_entry = unsafe { zeroed() };
            // SAFETY: the CQ is live and `err` is one writable error entry.
            let r = unsafe { fi_cq_readerr(self.cq, &mut err, 0) };
            assert_eq!(r, 1, "fi_cq_readerr: {}", errstr(r as i32));
            return Some(Err(err));
        }
        assert_eq!(n, -(FI_EAGAIN as isize), "fi_cq_read: {}", errstr(n as i32));
        None
    }

    /// The next completion, spinning on the CQ for up to [`LIMIT`].
    fn next(&self, what: &str) -> Completion {
        if let Some(c) = self.backlog.borrow_mut().pop_front() {
            return c;
        }
        let start = Instant::now();
        loop {
            if let Some(c) = self.read_cq() {
                return c;
            }
            assert!(
                start.elapsed() < LIMIT,
                "{}: no completion for {what} after {LIMIT:?}",
                self.prov
            );
            std::thread::yield_now();
        }
    }

    /// Makes `call` (a libfabric data-transfer call) until it does not say `-FI_EAGAIN`,
    /// reading the CQ in between as libfabric requires (the completions read are kept for
    /// `next`); panics on any other error or after [`LIMIT`].
    fn retry(&self, what: &str, mut call: impl FnMut() -> isize) {
        let start = Instant::now();
        loop {
            let r = call();
            if r != -(FI_EAGAIN as isize) {
                check(what, r);
                return;
            }
            assert!(
                start.elapsed() < LIMIT,
                "{}: {what}: -FI_EAGAIN for {LIMIT:?}",
                self.prov
            );
            if let Some(c) = self.read_cq() {
                self.backlog.borrow_mut().push_back(c);
            }
        }
    }

    /// Reads completions until one for each of `ctxs` has arrived (in any order), failing on
    /// an error completion or one for another context.
    fn expect(&self, what: &str, ctxs: &[*mut fi_context2]) -> Vec<fi_cq_tagged_entry> {
        let mut got: Vec<Option<fi_cq_tagged_entry>> = vec![None; ctxs.len()];
        while got.iter().any(Option::is_none) {
            let e = match self.next(what) {
                Ok(e) => e,
                Err(e) => panic!("{}: {what}: error completion {}", self.prov, errstr(e.err)),
            };
            let i = ctxs
                .iter()
                .position(|&c| c.cast() == e.op_context)
                .unwrap_or_else(|| panic!("{what}: completion for an unknown context"));
            assert!(got[i].is_none(), "{what}: two completions for one context");
            got[i] = Some(e);
        }
        got.into_iter().map(Option::unwrap).collect()
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        // SAFETY: each object was opened by `open` and is closed once, endpoints before the
        // AV and CQ bound to them, those before the domain, the domain before the fabric;
        // null ones (a failed open) are skipped. No operation is pending: every test reads
        // its completions before dropping the rig.
        unsafe {
            for &ep in &self.ep {
                if !ep.is_null() {
                    fi_close(addr_of_mut!((*ep).fid));
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
            fi_freeinfo(self.info);
        }
    }
}

/// A context for one operation: boxed so that it does not move until its completion is read.
fn ctx() -> Box<fi_context2> {
    Box::new(fi_context2::default())
}

/// Posts a tagged receive from any source on endpoint `ep` of the rig.
///
/// # Safety
///
/// `buf[..len]` stays alive and untouched, and `ctx` does not move, until the completion.
unsafe fn trecv(rig: &Rig, ep: usize, buf: &mut [u8], tag: u64, ctx: *mut fi_context2) {
    let (ptr, len) = (buf.as_mut_ptr(), buf.len());
    rig.retry("fi_trecv", || {
        // SAFETY: the endpoint is live; buffer and context are the caller's (above).
        unsafe {
            fi_trecv(
                rig.ep[ep],
                ptr.cast(),
                len,
                null_mut(),
                FI_ADDR_UNSPEC,
                tag,
                0,
                ctx.cast(),
            )
        }
    });
}

/// Sends `buf` from endpoint 0 to endpoint 1 with `tag`.
///
/// # Safety
///
/// `buf` stays alive and unchanged, and `ctx` does not move, until the completion.
unsafe fn tsend(rig: &Rig, buf: &[u8], tag: u64, ctx: *mut fi_context2) {
    rig.retry("fi_tsend", || {
        // SAFETY: the endpoint is live; buffer and context are the caller's (above).
        unsafe {
            fi_tsend(
                rig.ep[0],
                buf.as_ptr().cast(),
                buf.len(),
                null_mut(),
                rig.addr[1],
                tag,
                ctx.cast(),
            )
        }
    });
}

/// Frees the contexts of operations whose completions were read.
///
/// # Safety
///
/// Each came from `Box::into_raw` and its operation has completed.
unsafe fn free(ctxs: &[*mut fi_context2]) {
    for &c in ctxs {
        // SAFETY: the caller's.
        drop(unsafe { Box::from_raw(c) });
    }
}

fn tagged_traffic(prov: &'static str) {
    let Some(rig) = Rig::open(prov) else { return };
    // SAFETY: tx_attr is allocated in every fi_info from fi_getinfo.
    let inject_size = unsafe { (*(*rig.info).tx_attr).inject_size };
    let small: Vec<u8> = (0..inject_size.min(32) as u8).collect();
    let big: Vec<u8> = (0..1u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let mut small_in = vec![0u8; small.len()];
    let mut big_in = vec![0u8; big.len()];
    let [rc1, rc2, sc] = [ctx(), ctx(), ctx()].map(Box::into_raw);
    // SAFETY: the buffers and contexts live until the completions are read below (`expect`),
    // and nothing else touches them meanwhile.
    unsafe {
        trecv(&rig, 1, &mut small_in, 0x11, rc1);
        trecv(&rig, 1, &mut big_in, 0x22, rc2);
    }
    rig.retry("fi_tinject", || {
        // SAFETY: fi_tinject copies the buffer before returning; `small` is readable.
        unsafe {
            fi_tinject(
                rig.ep[0],
                small.as_ptr().cast(),
                small.len(),
                rig.addr[1],
                0x11,
            )
        }
    });
    // SAFETY: as above.
    unsafe { tsend(&rig, &big, 0x22, sc) };
    let done = rig.expect("small and 1 MiB messages", &[rc1, rc2, sc]);
    assert_eq!((done[0].tag, done[0].len), (0x11, small.len()));
    assert_ne!(done[0].flags & FI_RECV, 0);
    assert_eq!((done[1].tag, done[1].len), (0x22, big.len()));
    assert_ne!(done[2].flags & FI_SEND, 0);
    assert_eq!(small_in, small, "{prov}: injected message");
    assert!(big_in == big, "{prov}: 1 MiB message differs");
    // SAFETY: all three operations completed.
    unsafe { free(&[rc1, rc2, sc]) };
}

fn truncation(prov: &'static str) {
    let Some(rig) = Rig::open(prov) else { return };
    let msg = [7u8; 100];
    let mut into = [0u8; 40];
    let [rc, sc] = [ctx(), ctx()].map(Box::into_raw);
    // SAFETY: `into`, `msg` and both contexts outlive the completions read below.
    unsafe {
        trecv(&rig, 1, &mut into, 5, rc);
        tsend(&rig, &msg, 5, sc);
    }
    let (mut recv_err, mut send_done) = (None, false);
    while recv_err.is_none() || !send_done {
        match rig.next("truncated receive") {
            Ok(e) if e.op_context == sc.cast() => send_done = true,
            Ok(_) => panic!("{prov}: the truncated receive completed without an error"),
            Err(e) => {
                assert_eq!(e.op_context, rc.cast(), "error for another operation");
                recv_err = Some(e);
            }
        }
    }
    let e = recv_err.unwrap();
    // fi_cq(3) says `err` is a positive code and `olen` the bytes that did not fit. In
    // libfabric 1.17 shm gives -FI_ETRUNC, neither provider fills `len` or `olen`, and
    // tcp;ofi_rxm leaves the buffer untouched (shm fills it): only the code and tag are sure.
    assert_eq!(e.err.abs(), FI_ETRUNC, "{prov}: {}", errstr(e.err));
    assert_eq!(e.tag, 5);
    assert!(
        e.olen == 0 || e.olen == msg.len() - into.len(),
        "{prov}: olen {}",
        e.olen
    );
    assert!(
        into == [0; 40] || into == [7; 40],
        "{prov}: truncated receive wrote other bytes"
    );
    eprintln!(
        "{prov}: truncation: err {}, len {}, olen {}, bytes that fit {}",
        e.err,
        e.len,
        e.olen,
        if into[0] == 7 {
            "delivered"
        } else {
            "not delivered"
        }
    );
    // SAFETY: both operations completed.
    unsafe { free(&[rc, sc]) };
}

fn cancel(prov: &'static str) {
    let Some(rig) = Rig::open(prov) else { return };
    let mut into = [0u8; 64];
    let rc = Box::into_raw(ctx());
    // SAFETY: `into` and `rc` outlive the receive's (error) completion read below.
    unsafe { trecv(&rig, 1, &mut into, 0xdead, rc) };
    // SAFETY: the endpoint is live and the fid is its own; `rc` names the posted receive.
    let r = unsafe { fi_cancel(addr_of_mut!((*rig.ep[1]).fid), rc.cast()) };
    check("fi_cancel", r);
    match rig.next("canceled receive") {
        Ok(_) => panic!("{prov}: canceled receive completed normally"),
        Err(e) => {
            assert_eq!(e.op_context, rc.cast());
            assert_eq!(e.err, FI_ECANCELED, "{prov}: {}", errstr(e.err));
        }
    }
    // SAFETY: the receive completed (canceled).
    unsafe { free(&[rc]) };
}

/// Posts `fi_trecvmsg` with `flags` on endpoint 1, retrying on `-FI_EAGAIN`; `Err(code)` if
/// the provider refuses the call.
///
/// # Safety
///
/// As [`trecv`] (no buffer when `iov` is `None`).
unsafe fn trecvmsg(
    rig: &Rig,
    iov: Option<&iovec>,
    tag: u64,
    ctx: *mut fi_context2,
    flags: u64,
) -> Result<(), isize> {
    let msg = fi_msg_tagged {
        msg_iov: iov.map_or(null(), |v| v as *const iovec),
        desc: null_mut(),
        iov_count: usize::from(iov.is_some()),
        addr: FI_ADDR_UNSPEC,
        tag,
        ignore: 0,
        context: ctx.cast(),
        data: 0,
    };
    let start = Instant::now();
    loop {
        // SAFETY: the endpoint is live; `msg` lives on this frame for the call, its buffer
        // and context are the caller's.
        let r = unsafe { fi_trecvmsg(rig.ep[1], &msg, flags) };
        if r != -(FI_EAGAIN as isize) {
            return if r == 0 { Ok(()) } else { Err(r) };
        }
        assert!(
            start.elapsed() < LIMIT,
            "fi_trecvmsg: -FI_EAGAIN for {LIMIT:?}"
        );
        if let Some(c) = rig.read_cq() {
            rig.backlog.borrow_mut().push_back(c);
        }
    }
}

fn peek_claim(prov: &'static str) {
    let Some(rig) = Rig::open(prov) else { return };
    // SAFETY: fabric_attr is allocated in every fi_info from fi_getinfo.
    let version = unsafe { (*(*rig.info).fabric_attr).prov_version };
    if prov == "shm" && FI_VERSION_LT(version, FI_VERSION(119, 0)) {
        // Its receive path ignores both flags (prov/shm/src/smr_msg.c, smr_generic_recv):
        // a peek is a plain receive that takes the message, and the claim then waits forever.
        // shm matches through util_srx, which handles them, from 1.19 on.
        eprintln!(
            "SKIP: shm {}: FI_PEEK and FI_CLAIM are ignored before 1.19",
            FI_MAJOR(version)
        );
        return;
    }
    let msg: Vec<u8> = (100..150).collect();
    let [sc, pc] = [ctx(), ctx()].map(Box::into_raw);
    // SAFETY: `msg` and `sc` outlive the send's completion.
    unsafe { tsend(&rig, &msg, 9, sc) };
    rig.expect("send to be peeked", &[sc]);
    // Peek until the message has arrived (FI_ENOMSG until then: progress is manual) and
    // claim it; then receive the claimed message with the same context.
    let start = Instant::now();
    let peeked = loop {
        // SAFETY: no buffer; `pc` outlives the peek's completion and the claim.
        if let Err(r) = unsafe { trecvmsg(&rig, None, 9, pc, FI_PEEK | FI_CLAIM) } {
            eprintln!(
                "SKIP: {prov}: FI_PEEK | FI_CLAIM refused: {} ({r})",
                errstr(r as i32)
            );
            // SAFETY: nothing is posted with `pc`; `sc` completed.
            unsafe { free(&[sc, pc]) };
            return;
        }
        match rig.next("peek") {
            Ok(e) => break e,
            Err(e) if e.err == FI_ENOMSG => {
                assert!(
                    start.elapsed() < LIMIT,
                    "{prov}: peek never found the message"
                );
            }
            Err(e) => panic!("{prov}: peek: {} {e:?}", errstr(e.err)),
        }
    };
    assert_eq!(peeked.op_context, pc.cast());
    assert_eq!(
        (peeked.tag, peeked.len),
        (9, msg.len()),
        "{prov}: peek reports the message"
    );
    let mut into = vec![0u8; 64];
    let iov = iovec {
        iov_base: into.as_mut_ptr().cast(),
        iov_len: into.len(),
    };
    // SAFETY: `into` and `pc` outlive the claim's completion.
    if let Err(r) = unsafe { trecvmsg(&rig, Some(&iov), 9, pc, FI_CLAIM) } {
        panic!(
            "{prov}: FI_CLAIM after a claiming peek: {}",
            errstr(r as i32)
        );
    }
    let got = rig.expect("claimed receive", &[pc]);
    assert_eq!(got[0].len, msg.len());
    assert_eq!(&into[..msg.len()], &msg[..], "{prov}: claimed message");
    // SAFETY: every operation completed.
    unsafe { free(&[sc, pc]) };
}

macro_rules! provider_tests {
    ($module:ident, $prov:literal) => {
        mod $module {
            #[test]
            fn tagged_traffic() {
                super::tagged_traffic($prov);
            }
            #[test]
            fn truncation() {
                super::truncation($prov);
            }
            #[test]
            fn cancel() {
                super::cancel($prov);
            }
            #[test]
            fn peek_claim() {
                super::peek_claim($prov);
            }
        }
    };
}

provider_tests!(tcp, "tcp;ofi_rxm");
provider_tests!(shm, "shm");

//! Single-copy transfers between processes of one node through Linux cross-memory attach
//! (`process_vm_readv`): the large-message path (LMT Get).
//!
//! The two-copy path (sender copies into a ring, receiver copies out) moves every byte through
//! the shared segment and the caches twice; CMA has the kernel copy straight from the sender's
//! pages into the receiver's buffer. The kernel allows it only where `ptrace` would be allowed
//! (same user, or `CAP_SYS_PTRACE`; Yama's `ptrace_scope` and seccomp may forbid it even then),
//! so the first refusal switches CMA off for the rest of the run and large messages are
//! streamed through the rings instead.
//!
//! The remote address comes from a peer's request-to-send. A wrong one cannot corrupt anything
//! here: the kernel checks it against the peer's mappings and answers `EFAULT`.

use ch4_core::{Error, ErrorKind};

/// When a receiver reads an offered buffer rather than have it streamed (`CH4_SHM_CMA`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadWhen {
    /// By the size rules below, always (`CH4_SHM_CMA=on`).
    Always,
    /// By the size rules only while the host has more ranks than CPUs (`auto`, the default).
    /// A read moves a message with two handoffs between the ranks (request-to-send with the
    /// address, done) where streaming takes three or more (request, clear-to-send, pieces), and
    /// on a crowded host a handoff may wait for a context switch: osu_multi_lat at 64 KiB with
    /// four ranks on this project's 2 cores, host in its slow mode, 10.2 µs read against 14.6
    /// streamed. With a CPU for every rank the two cores copying at once win at every size:
    /// osu_latency 64 / 128 / 256 KiB 0.74 / 0.65 / 0.57x the read's time in the slow mode,
    /// 0.29-0.34x in the fast one, 0.57-0.70x with a busy process on one rank's core, and
    /// osu_bibw at 512 KiB-4 MiB 1.03-1.24x the both-ways read's bandwidth (10 interleaved
    /// rounds).
    Crowded,
}

/// Whether single-copy reads are used, and from which message size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmaConfig {
    /// Off when `CH4_SHM_CMA=0` (or `off`), or after the kernel refused a read.
    pub enabled: bool,
    /// When reads are chosen over streaming.
    pub read_when: ReadWhen,
    /// Rendezvous messages of at least this many bytes are offered for a single-copy read.
    pub threshold: usize,
    /// ... and, for a lone message, of at most this many: longer ones stream faster through
    /// the rings, the sender copying in while the receiver copies out (unless the receiver is
    /// sending large messages itself: [`BOTH_WAYS_MIN`]).
    pub max: usize,
}

/// Default for [`CmaConfig::threshold`] (`CH4_SHM_CMA_THRESHOLD` overrides it): every
/// rendezvous message (they start at the eager limit, 32 KiB).
pub const DEFAULT_THRESHOLD: usize = 0;

/// Default for [`CmaConfig::max`] (`CH4_SHM_CMA_MAX` overrides it), by measurement on the
/// project's earlier 2-core host (osu_latency, 5 interleaved runs, medians, single copy /
/// streamed): 64 KiB 0.72, 128 KiB 0.85, 256 KiB 0.88, 512 KiB 1.03, 1 MiB 1.21, 4 MiB 1.87.
/// Past a few hundred KiB the streamed pipeline wins: sender and receiver copy at the same
/// time, while a cross-memory read is one core copying, pinning the sender's pages as it goes.
/// On today's host streaming wins below it too, unless ranks outnumber CPUs ([`ReadWhen`]).
pub const DEFAULT_MAX: usize = 256 << 10;

/// From this size a message is read rather than streamed while the receiving rank is itself
/// sending large messages (`AmTransport::read_pays` with `both_ways`). Streaming in both
/// directions makes each side copy every byte twice (into its outgoing ring, out of its
/// incoming one); reading, once. Measured on this project's 2-core host (osu_bibw, windows of
/// 64, 3 interleaved rounds, GB/s streamed / read): 128 KiB 22.7-27.6 / 21.5-24.2, 256 KiB
/// 20.3-27.0 / 22.5-23.3, 512 KiB-4 MiB 18.4-20.8 / 20.4-22.5: reading wins from 512 KiB.
pub const BOTH_WAYS_MIN: usize = 512 << 10;

impl CmaConfig {
    /// From `CH4_SHM_CMA` (`auto` unless set: see [`ReadWhen`]; `on`, or `off`),
    /// `CH4_SHM_CMA_THRESHOLD` and `CH4_SHM_CMA_MAX` (bytes); a value that does not parse is an
    /// error.
    pub fn from_env() -> ch4_core::Result<CmaConfig> {
        let (enabled, read_when) = read_setting(ch4_core::env::raw(READ_VAR)?.as_deref())?;
        let bytes = |name: &str, default: usize| -> ch4_core::Result<usize> {
            Ok(ch4_core::env::bytes(name)?.unwrap_or(default))
        };
        Ok(CmaConfig {
            enabled: enabled && cfg!(target_os = "linux"),
            read_when,
            threshold: bytes("CH4_SHM_CMA_THRESHOLD", DEFAULT_THRESHOLD)?,
            max: bytes("CH4_SHM_CMA_MAX", DEFAULT_MAX)?,
        })
    }
}

/// The variable that switches single-copy reads.
const READ_VAR: &str = "CH4_SHM_CMA";

/// `CH4_SHM_CMA`'s value (unset: `auto`) as (reads possible, when they are chosen).
fn read_setting(value: Option<&str>) -> ch4_core::Result<(bool, ReadWhen)> {
    let Some(v) = value else {
        return Ok((true, ReadWhen::Crowded));
    };
    if v.trim().eq_ignore_ascii_case("auto") {
        return Ok((true, ReadWhen::Crowded));
    }
    match ch4_core::env::parse_switch(v) {
        Some(on) => Ok((on, ReadWhen::Always)),
        None => Err(ch4_core::env::bad(
            READ_VAR,
            v,
            "auto, on or off (1/0, yes/no, true/false)",
        )),
    }
}

/// Why a read did not copy everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadFailure {
    /// The kernel forbids reading that process (EPERM, ENOSYS): stop trying.
    Forbidden,
    /// The process does not exist any more.
    Gone,
    /// Anything else (a bad address, a short read): stream this message instead.
    Failed,
}

/// Copies `into.len()` bytes from address `addr` of process `pid` into `into`.
#[cfg(target_os = "linux")]
pub fn read(pid: u32, addr: u64, into: &mut [u8]) -> std::result::Result<(), ReadFailure> {
    let mut done = 0usize;
    while done < into.len() {
        let rest = &mut into[done..];
        let local = libc::iovec {
            iov_base: rest.as_mut_ptr().cast(),
            iov_len: rest.len(),
        };
        let remote = libc::iovec {
            iov_base: (addr as usize).wrapping_add(done) as *mut libc::c_void,
            iov_len: rest.len(),
        };
        // SAFETY: `local` describes `rest`, memory we hold exclusively (`&mut`) for the call, so
        // the kernel's writes into it alias nothing. `remote` names memory in another address
        // space (or ours, when ranks are threads) that the kernel validates against that
        // process's mappings: a bad address yields EFAULT, never a write or read outside the
        // two ranges. One iovec each, flags 0, as the syscall requires.
        let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
        if n < 0 {
            let errno = std::io::Error::last_os_error().raw_os_error();
            return Err(match errno {
                Some(libc::EPERM) | Some(libc::ENOSYS) | Some(libc::EACCES) => {
                    ReadFailure::Forbidden
                }
                Some(libc::ESRCH) => ReadFailure::Gone,
                _ => ReadFailure::Failed,
            });
        }
        if n == 0 {
            return Err(ReadFailure::Failed);
        }
        done += n as usize;
    }
    Ok(())
}

/// CMA exists only on Linux.
#[cfg(not(target_os = "linux"))]
pub fn read(_pid: u32, _addr: u64, _into: &mut [u8]) -> std::result::Result<(), ReadFailure> {
    Err(ReadFailure::Forbidden)
}

/// The error a receive gets when the sender vanished before its data was read.
pub(crate) fn gone(pid: u32) -> Error {
    Error::new(
        ErrorKind::PeerFailed,
        format!("process {pid} exited before its message was read"),
    )
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn reads_are_chosen_on_a_crowded_host_by_default_and_always_when_switched_on() {
        assert_eq!(read_setting(None).unwrap(), (true, ReadWhen::Crowded));
        assert_eq!(
            read_setting(Some(" Auto ")).unwrap(),
            (true, ReadWhen::Crowded)
        );
        assert_eq!(read_setting(Some("on")).unwrap(), (true, ReadWhen::Always));
        assert_eq!(read_setting(Some("1")).unwrap(), (true, ReadWhen::Always));
        assert!(!read_setting(Some("off")).unwrap().0);
        let e = read_setting(Some("maybe")).unwrap_err();
        assert!(e.to_string().contains("CH4_SHM_CMA"), "{e}");
    }

    #[test]
    fn reads_own_memory_and_refuses_bad_addresses() {
        let src: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let mut dst = vec![0u8; src.len()];
        read(std::process::id(), src.as_ptr() as u64, &mut dst).unwrap();
        assert_eq!(dst, src);
        // Address 8 is never mapped: the kernel says EFAULT and nothing is written.
        let mut dst = vec![7u8; 64];
        assert_eq!(
            read(std::process::id(), 8, &mut dst),
            Err(ReadFailure::Failed)
        );
        assert!(dst.iter().all(|&b| b == 7));
    }

    #[test]
    fn a_vanished_process_is_gone() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let mut dst = [0u8; 8];
        assert_eq!(read(pid, 4096, &mut dst), Err(ReadFailure::Gone));
    }
}

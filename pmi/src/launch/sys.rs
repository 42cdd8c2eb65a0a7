//! The operating-system edge of the launcher: every `unsafe` call it makes lives here.
//!
//! std's `Command` does the fork and exec; what it lacks is process-group signalling, reaping
//! any child (including orphaned grandchildren adopted as subreaper), async-signal handling,
//! a parent-death signal for the children, and a way to wait for stdin without committing to a
//! blocking read. Those are thin `libc` calls, each wrapped so the rest of the launcher is safe
//! code. The process-wide settings ([`SignalHandlers`], [`Subreaper`]) are guards that put the
//! previous setting back when dropped, so an embedding program gets its process back as it was.

use std::io;
use std::os::fd::RawFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

/// The signals the launcher catches and forwards to the ranks.
const FORWARDED: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// The last SIGINT / SIGTERM / SIGHUP received and not yet handled, or 0.
static PENDING_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    // Only an atomic store: the one thing that is async-signal-safe and enough for a poll loop.
    PENDING_SIGNAL.store(sig, Ordering::SeqCst);
}

/// SIGINT, SIGTERM and SIGHUP routed to [`take_signal`] instead of their previous disposition,
/// so they can be forwarded to the ranks (which live in their own process groups and so do not
/// get the terminal's Ctrl-C themselves). Dropping it reinstates the previous dispositions.
pub struct SignalHandlers {
    /// The actions replaced, in the order of [`FORWARDED`].
    previous: Vec<(libc::c_int, libc::sigaction)>,
}

impl SignalHandlers {
    /// Installs the handlers, discarding any signal left pending by an earlier job.
    pub fn install() -> io::Result<SignalHandlers> {
        let mut installed = SignalHandlers {
            previous: Vec::with_capacity(FORWARDED.len()),
        };
        PENDING_SIGNAL.store(0, Ordering::SeqCst);
        for sig in FORWARDED {
            // SAFETY: an all-zero sigaction is a valid "no flags, empty mask" value; we then
            // set the handler to a function with the signature the kernel calls.
            let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
            action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            // SAFETY: `action.sa_mask` is a valid sigset_t owned by this frame.
            unsafe { libc::sigemptyset(&mut action.sa_mask) };
            // SAFETY: as above, all-zero is a valid sigaction; the kernel overwrites it.
            let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: `action` is fully initialised and `old` is writable, both outliving the
            // call. The handler only performs an atomic store, which is async-signal-safe.
            if unsafe { libc::sigaction(sig, &action, &mut old) } != 0 {
                // Dropping `installed` restores the signals already changed.
                return Err(io::Error::last_os_error());
            }
            installed.previous.push((sig, old));
        }
        Ok(installed)
    }
}

impl Drop for SignalHandlers {
    fn drop(&mut self) {
        for (sig, old) in self.previous.drain(..).rev() {
            // SAFETY: `old` is the action the kernel returned for `sig`, unchanged, so it is a
            // valid action to reinstate; the previous action is not requested.
            unsafe { libc::sigaction(sig, &old, std::ptr::null_mut()) };
        }
    }
}

/// The signal received since the last call, if any.
pub fn take_signal() -> Option<i32> {
    match PENDING_SIGNAL.swap(0, Ordering::SeqCst) {
        0 => None,
        sig => Some(sig),
    }
}

/// This process made the reaper of any process its ranks orphan, so a rank's children that
/// outlive it are re-parented to us (and reaped by [`reap_any`]) rather than left to init.
/// Dropping it puts back the previous setting.
pub struct Subreaper {
    was: libc::c_int,
}

impl Subreaper {
    /// Makes this process a child subreaper.
    pub fn become_one() -> io::Result<Subreaper> {
        let mut was: libc::c_int = 0;
        // SAFETY: PR_GET_CHILD_SUBREAPER writes one int through the pointer, which points to a
        // live, writable c_int of this frame.
        if unsafe { libc::prctl(libc::PR_GET_CHILD_SUBREAPER, &mut was as *mut libc::c_int) } != 0 {
            return Err(io::Error::last_os_error());
        }
        set_subreaper(1)?;
        Ok(Subreaper { was })
    }
}

impl Drop for Subreaper {
    fn drop(&mut self) {
        let _ = set_subreaper(libc::c_ulong::from(self.was != 0));
    }
}

fn set_subreaper(on: libc::c_ulong) -> io::Result<()> {
    // SAFETY: prctl(PR_SET_CHILD_SUBREAPER, 0 or 1) takes integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, on) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sends `sig` to every process in the process group `pgid` (a rank and anything it started).
/// A group that no longer exists is not an error.
pub fn kill_group(pgid: i32, sig: i32) -> io::Result<()> {
    if pgid <= 1 {
        // Never signal "every process" (-1) or our own group (0) by accident.
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    // SAFETY: killpg takes integer arguments only; pgid > 1 names one specific group.
    if unsafe { libc::killpg(pgid, sig) } != 0 {
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::ESRCH) {
            return Err(err);
        }
    }
    Ok(())
}

/// What [`reap_any`] found.
pub enum Reaped {
    /// A child exited: its pid and status.
    Exited(i32, ExitStatus),
    /// Children exist, none has exited yet.
    Running,
    /// There are no children left at all (ranks or adopted orphans).
    NoChildren,
}

/// Reaps one exited child, if any has exited, without blocking.
pub fn reap_any() -> Reaped {
    let mut status: libc::c_int = 0;
    loop {
        // SAFETY: `status` is a valid, writable c_int for the duration of the call.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid > 0 {
            return Reaped::Exited(pid, ExitStatus::from_raw(status));
        }
        if pid == 0 {
            return Reaped::Running;
        }
        match io::Error::last_os_error().raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::ECHILD) => return Reaped::NoChildren,
            // No other error is possible with these arguments; treat it as "nothing to reap".
            _ => return Reaped::Running,
        }
    }
}

/// Whether reading our stdin would stop the launcher with SIGTTIN: it is a terminal and we are not
/// in its foreground process group (started with `&`).
pub fn stdin_is_background_tty() -> bool {
    // SAFETY: isatty, tcgetpgrp and getpgrp take integer arguments and touch no memory of ours.
    unsafe { libc::isatty(0) == 1 && libc::tcgetpgrp(0) != libc::getpgrp() }
}

/// The CPUs this process may run on, in ascending order (empty if the kernel will not say).
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: an all-zero cpu_set_t is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a writable cpu_set_t of the size passed; pid 0 means this thread.
    let r = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if r != 0 {
        return Vec::new();
    }
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: CPU_ISSET reads bit `c` of `set`, and `c` < CPU_SETSIZE.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect()
}

/// Prepares a rank's `Command`: own process group, killed with SIGKILL if the launcher dies
/// (even by SIGKILL, when no cleanup code runs), `pmi_fd` inherited across exec, and bound to
/// `cpu` when one is given (best effort: a CPU that went away leaves the rank unbound).
///
/// Call from the thread that stays alive for the job's lifetime (the one running the job):
/// Linux sends the parent-death signal when the *thread* that forked exits.
pub fn prepare_rank(cmd: &mut Command, pmi_fd: Option<RawFd>, cpu: Option<usize>) {
    cmd.process_group(0);
    // Built here, before the fork: the child must not allocate or compute much.
    let affinity = cpu.filter(|&c| c < libc::CPU_SETSIZE as usize).map(|c| {
        // SAFETY: an all-zero cpu_set_t is a valid empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: sets bit `c` of `set`; `c` < CPU_SETSIZE was checked above.
        unsafe { libc::CPU_SET(c, &mut set) };
        set
    });
    // SAFETY: getpid takes no arguments and cannot fail.
    let parent = unsafe { libc::getpid() };
    let hook = move || -> io::Result<()> {
        // SAFETY: prctl(PR_SET_PDEATHSIG, SIGKILL) takes integers only and is async-signal-safe
        // in practice (a plain syscall), as required between fork and exec.
        if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // If the launcher died before the prctl took effect, no signal will come: bail out now.
        // SAFETY: getppid is async-signal-safe and takes no arguments.
        if unsafe { libc::getppid() } != parent {
            // A raw errno: the child must not allocate, and std reports only the errno.
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        if let Some(set) = &affinity {
            // Best effort; the result is deliberately ignored (the rank then runs unbound).
            // SAFETY: sched_setaffinity on this process with a cpu_set_t of the size passed;
            // a plain, async-signal-safe system call.
            unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set) };
        }
        if let Some(fd) = pmi_fd {
            // The socket was created close-on-exec (so no other rank inherits it); clear the
            // flag for this rank only.
            // SAFETY: fcntl(F_SETFD) on a descriptor number, async-signal-safe, no memory.
            if unsafe { libc::fcntl(fd, libc::F_SETFD, 0) } != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    };
    // SAFETY: the hook runs in the forked child before exec. It allocates nothing, takes no
    // locks and only makes async-signal-safe system calls (prctl, getppid, sched_setaffinity,
    // fcntl), which is what `pre_exec` requires.
    unsafe { cmd.pre_exec(hook) };
}

/// Waits up to `timeout` for `fd` to become readable (or reach end of file, or fail): `true`
/// when a read would not block, `false` on timeout.
pub fn wait_readable(fd: RawFd, timeout: Duration) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: `pfd` is one valid, writable pollfd of this frame and the count passed is 1.
    match unsafe { libc::poll(&mut pfd, 1, ms) } {
        0 => Ok(false),
        n if n > 0 => Ok(true),
        _ => {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                Ok(false)
            } else {
                Err(err)
            }
        }
    }
}

/// The conventional name of a signal, for messages.
pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        _ => "unknown signal",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_names() {
        assert_eq!(signal_name(9), "SIGKILL");
        assert_eq!(signal_name(15), "SIGTERM");
        assert_eq!(signal_name(1000), "unknown signal");
    }

    /// The handler currently installed for `sig`.
    fn handler_of(sig: libc::c_int) -> libc::sighandler_t {
        // SAFETY: all-zero is a valid sigaction; the kernel overwrites it.
        let mut cur: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: only queries: no new action, `cur` is writable and outlives the call.
        let rc = unsafe { libc::sigaction(sig, std::ptr::null(), &mut cur) };
        assert_eq!(rc, 0);
        cur.sa_sigaction
    }

    #[test]
    fn signal_handlers_are_restored_on_drop() {
        let before: Vec<_> = FORWARDED.iter().map(|&s| handler_of(s)).collect();
        let handlers = SignalHandlers::install().unwrap();
        let ours = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        assert!(FORWARDED.iter().all(|&s| handler_of(s) == ours));
        PENDING_SIGNAL.store(libc::SIGHUP, Ordering::SeqCst);
        assert_eq!(take_signal(), Some(libc::SIGHUP));
        assert_eq!(take_signal(), None);
        drop(handlers);
        let after: Vec<_> = FORWARDED.iter().map(|&s| handler_of(s)).collect();
        assert_eq!(before, after);
    }

    #[test]
    fn subreaper_is_restored_on_drop() {
        let get = || {
            let mut v: libc::c_int = -1;
            // SAFETY: writes one int to a live, writable c_int.
            let rc =
                unsafe { libc::prctl(libc::PR_GET_CHILD_SUBREAPER, &mut v as *mut libc::c_int) };
            assert_eq!(rc, 0);
            v
        };
        let before = get();
        let guard = Subreaper::become_one().unwrap();
        assert_eq!(get(), 1);
        drop(guard);
        assert_eq!(get(), before);
    }

    #[test]
    fn refuses_to_signal_everyone() {
        assert!(kill_group(0, 0).is_err());
        assert!(kill_group(1, 0).is_err());
        assert!(kill_group(-1, 0).is_err());
    }
}

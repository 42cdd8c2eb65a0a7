//! Every `CH4_*` setting, in one list, and what a rank runs with.
//!
//! Each crate declares the variables it reads (`shm::SETTINGS`, `netmod_tcp::SETTINGS`, this
//! module's [`FACADE`]); [`all`] gathers them. Process mode and ranks as threads read them the
//! same way, through `ch4_core::env`'s strict readers, and check the whole environment before a
//! rank starts: a value that does not parse, or a `CH4_*` variable that is no setting (a typo),
//! is a start-up error that names it. [`Summary`] is the table of values in force
//! (`Context::settings`); `CH4_DEBUG_SUMMARY=1` prints it from rank 0 at start-up, like
//! MPICH's `MPIR_CVAR_DEBUG_SUMMARY`.

use std::fmt;

use ch4_core::env::{self, Setting};
use ch4_core::transport::{Netmod, Shm};
use ch4_core::Result;

use crate::level::Level;

/// The settings the facade itself reads (process and thread modes, launching, logging).
pub const FACADE: &[Setting] = &[
    Setting {
        name: "CH4_NODE_SIZE",
        default: "from the launcher",
        meaning: "treat every k consecutive ranks as one node (shared memory within, the netmod \
                  between), so the network path runs on one host; processes and threads alike",
    },
    Setting {
        name: "CH4_NP",
        default: "the program's choice",
        meaning: "ranks a self-launching program (process::init_or_launch) starts; not thread \
                  jobs, whose size the program gives",
    },
    Setting {
        name: "CH4_BIND",
        default: "core when there are enough CPUs",
        meaning: "how a self-launched job pins its ranks: core or none (ch4run: --bind-to); \
                  processes only",
    },
    Setting {
        name: "CH4_YIELD",
        default: "auto",
        meaning: "when a waiting rank gives its core up: auto (at once while the peer it \
                  waits for shares its CPU, moving to another CPU at most every 10 ms; \
                  checked every poll when this host has more ranks than CPUs and every 16th \
                  otherwise; else after 64 idle polls when this host has more ranks than CPUs, \
                  after 16384 otherwise), soon (64) or never. Ranks that each have a CPU spin \
                  their first 1024 idle polls (at most until they yield) without a pause \
                  instruction. Every rank of the host counts, however CH4_NODE_SIZE splits it; \
                  the summary (CH4_DEBUG_SUMMARY) shows what auto chose and why",
    },
    Setting {
        name: "CH4_ASYNC_PROGRESS",
        default: "off",
        meaning: "a progress thread per rank that moves transfers while the program computes \
                  and wakes awaited requests (ch4::progress); needs the multiple thread level",
    },
    Setting {
        name: "CH4_NUM_VCIS",
        default: "4 at the multiple thread level, else 1",
        meaning: "VCIs (virtual communication interfaces: independent devices, each with its \
                  own lock, queues and transports) of a rank at MPI_THREAD_MULTIPLE, at most \
                  64; communicators are spread over them by context id. Below the multiple \
                  level a rank has one",
    },
    Setting {
        name: "CH4_SELF_LAUNCHED",
        default: "unset",
        meaning: "set by the embedded launcher in the ranks it starts (not for users)",
    },
    Setting {
        name: "CH4_LOG",
        default: "unset (warn with ch4::log::init)",
        meaning: "event filter for ch4's tracing events on standard error (warn, debug, \
                  netmod_tcp=debug,...)",
    },
    Setting {
        name: "CH4_DEBUG_SUMMARY",
        default: "off",
        meaning: "rank 0 prints the settings in force at start-up",
    },
];

/// Every setting of this build: the facade's, the shared-memory layer's and the netmod's.
pub fn all() -> impl Iterator<Item = &'static Setting> + Clone {
    // Every netmod built in (a program may run ranks over any of them), the choice among them
    // first, then in `auto`'s order.
    #[cfg(feature = "ofi")]
    let ofi: &[Setting] = netmod_ofi::SETTINGS;
    #[cfg(not(feature = "ofi"))]
    let ofi: &[Setting] = &[];
    #[cfg(feature = "ucx")]
    let ucx: &[Setting] = netmod_ucx::SETTINGS;
    #[cfg(not(feature = "ucx"))]
    let ucx: &[Setting] = &[];
    #[cfg(feature = "tcp")]
    let tcp: &[Setting] = netmod_tcp::SETTINGS;
    #[cfg(not(feature = "tcp"))]
    let tcp: &[Setting] = &[];
    #[cfg(feature = "tcp")]
    let rails: &[Setting] = netmod_rails::SETTINGS;
    #[cfg(not(feature = "tcp"))]
    let rails: &[Setting] = &[];
    #[cfg(any(feature = "tcp", feature = "ofi", feature = "ucx"))]
    let any: &[Setting] = netmod_any::SETTINGS;
    #[cfg(not(any(feature = "tcp", feature = "ofi", feature = "ucx")))]
    let any: &[Setting] = &[];
    FACADE
        .iter()
        .chain(ch4_core::core::SETTINGS)
        .chain(shm::SETTINGS)
        .chain(any)
        .chain(ofi)
        .chain(ucx)
        .chain(tcp)
        .chain(rails)
}

/// Checks the environment before a rank starts: no unknown `CH4_*` variable, and every
/// facade-level setting parses (the device and the transports check their own when they are
/// made).
pub(crate) fn check_environment() -> Result<()> {
    env::check_known(all())?;
    env::count("CH4_NODE_SIZE")?;
    env::count("CH4_NP")?;
    env::switch("CH4_DEBUG_SUMMARY")?;
    env::switch(crate::progress::ASYNC_PROGRESS_VAR)?;
    yield_choice()?;
    // A netmod this build lacks is refused here, also in a build of one netmod.
    #[cfg(any(feature = "tcp", feature = "ofi", feature = "ucx"))]
    netmod_any::requested()?;
    if let Some(v) = env::raw(crate::log::LOG_VAR)? {
        crate::log::check_filter(&v).map_err(|why| {
            env::bad(crate::log::LOG_VAR, &v, &format!("an event filter ({why})"))
        })?;
    }
    Ok(())
}

/// `CH4_YIELD`: the idle polls before a waiting loop yields, `None` for `auto`.
fn yield_choice() -> Result<Option<u32>> {
    use ch4_core::device::YIELD_SOON;
    match env::raw("CH4_YIELD")?.as_deref() {
        None | Some("auto") => Ok(None),
        Some("soon") => Ok(Some(YIELD_SOON)),
        Some("never") => Ok(Some(u32::MAX)),
        Some(v) => Err(env::bad("CH4_YIELD", v, "auto, soon or never")),
    }
}

/// Sets after how many idle polls this process's waiting loops yield their core
/// (`ch4_core::device::set_yield_after`): by `CH4_YIELD`, or with `auto` soon when the `ranks`
/// that share this node's CPUs are more than the CPUs, and late otherwise; and how often they
/// look for a peer on their own CPU (`ch4_core::device::set_cpu_mate_check`).
pub(crate) fn apply_idle_policy(ranks: usize) -> Result<()> {
    let cpus = node_cpus();
    let choice = yield_choice()?;
    let polls = yield_after(choice, ranks, cpus);
    *IDLE_POLICY.lock().unwrap_or_else(|p| p.into_inner()) = Some(IdlePolicy {
        yield_after: polls,
        ranks,
        cpus,
    });
    let cpu_mate_every = cpu_mate_check(choice, ranks, cpus);
    let tight = tight_spin(ranks, cpus, polls);
    ch4_core::device::set_yield_after(polls);
    ch4_core::device::set_cpu_mate_check(cpu_mate_every);
    ch4_core::device::set_tight_spin(tight);
    tracing::debug!(
        ranks,
        cpus,
        yield_after = polls,
        cpu_mate_every,
        tight_spin = tight,
        "idle policy"
    );
    Ok(())
}

/// How many threads of one rank may wait at once before this host is crowded (a rank's
/// `RankState::crowded`): the CPUs shared evenly among the host's `ranks`, none when the
/// ranks alone outnumber them; unbounded when `CH4_YIELD` chose for every wait.
pub(crate) fn long_waits_uncrowded(ranks: usize) -> Result<u32> {
    if yield_choice()?.is_some() {
        return Ok(u32::MAX);
    }
    Ok(u32::try_from(node_cpus() / ranks.max(1)).unwrap_or(u32::MAX))
}

/// Whether `threads` that may communicate outnumber this host's CPUs.
pub(crate) fn outnumber_cpus(threads: usize) -> bool {
    threads > node_cpus()
}

/// The idle policy this process set at start-up, for the summary's `CH4_YIELD` line.
#[derive(Debug, Clone, Copy)]
struct IdlePolicy {
    yield_after: u32,
    /// The ranks that share this host's CPUs.
    ranks: usize,
    cpus: usize,
}

static IDLE_POLICY: std::sync::Mutex<Option<IdlePolicy>> = std::sync::Mutex::new(None);

/// The facade's settings as this process runs with them, where the value in force says more
/// than the variable: `CH4_YIELD`'s choice, what it came to, and why (a job whose waiting loops
/// spin or yield unexpectedly shows it in the summary). Set at start-up; empty before.
fn facade_in_force() -> Vec<(&'static str, String)> {
    let Some(p) = *IDLE_POLICY.lock().unwrap_or_else(|p| p.into_inner()) else {
        return Vec::new();
    };
    let choice = env::raw("CH4_YIELD").ok().flatten();
    let after = match p.yield_after {
        u32::MAX => "never yield".to_string(),
        0 => "yield at once".to_string(),
        n => format!("yield after {n} idle polls"),
    };
    vec![(
        "CH4_YIELD",
        format!(
            "{}: {after} ({} ranks on this host's {} CPUs)",
            choice.as_deref().unwrap_or("auto"),
            p.ranks,
            p.cpus
        ),
    )]
}

/// Every how many idle polls waiting loops ask whether their peer shares their CPU (0: never):
/// every poll when `ranks` outnumber the `cpus` by up to two a CPU, now and then when each
/// may have one; never when more than two share a CPU, or when a `choice` (`CH4_YIELD=soon`
/// or `never`) was made. With two ranks a CPU (OSU's multi-pair programs at 4 ranks on 2
/// cores) the rank waited for is either on this CPU, and giving way lets it run, or on the
/// other, and spinning catches its answer. With more, every CPU is crowded: a peer shares this
/// one at almost every check, and moving to another CPU (`Shm::move_off_cpu`) lands among as
/// many ranks with a cold cache. Measured on this project's 2-core host with three proxy
/// applications at 8 ranks (`scripts/apps-vs-peers.sh`'s problems), 6 interleaved rounds,
/// checking every poll against not checking at all: miniAMR 15.4-19.3 s against 14.1-17.9,
/// miniFE's CG 1.32-1.61 s against 1.02-1.38, HPCG 2.29-2.81 GFLOP/s against 2.68-2.96; the
/// check lost every round on miniFE and HPCG and all but one on miniAMR.
fn cpu_mate_check(choice: Option<u32>, ranks: usize, cpus: usize) -> u32 {
    use ch4_core::device::{CPU_MATE_EVERY_POLL, CPU_MATE_SOMETIMES};
    match choice {
        Some(_) => 0,
        None if ranks > 2 * cpus => 0,
        None if ranks > cpus => CPU_MATE_EVERY_POLL,
        None => CPU_MATE_SOMETIMES,
    }
}

/// The idle polls a waiting loop spins without pausing: none when `ranks` outnumber `cpus`
/// (the rank waited for may need this core, and those loops yield after a few polls anyway),
/// else enough to cover a latency-bound wait, but never past `yield_after`: `CH4_YIELD=soon`
/// still yields after its 64 polls.
fn tight_spin(ranks: usize, cpus: usize, yield_after: u32) -> u32 {
    if ranks > cpus {
        0
    } else {
        ch4_core::device::TIGHT_SPIN_OWN_CPU.min(yield_after)
    }
}

/// The idle polls before yielding: `choice` (`CH4_YIELD`) if given, else at once when more
/// than two `ranks` share each of the `cpus`, soon when they outnumber them by less, late when
/// they do not.
fn yield_after(choice: Option<u32>, ranks: usize, cpus: usize) -> u32 {
    use ch4_core::device::{YIELD_AT_ONCE, YIELD_LATE, YIELD_SOON};
    choice.unwrap_or(if ranks > 2 * cpus {
        YIELD_AT_ONCE
    } else if ranks > cpus {
        YIELD_SOON
    } else {
        YIELD_LATE
    })
}

/// The CPUs this node's ranks can run on: the ones this process may use, or, when a launcher
/// bound it to a single one (one rank per core), the node's online CPUs.
fn node_cpus() -> usize {
    let mine = std::thread::available_parallelism().map_or(1, |n| n.get());
    if mine > 1 {
        return mine;
    }
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|list| cpu_list_len(list.trim()))
        .unwrap_or(1)
        .max(1)
}

/// The number of CPUs in a kernel CPU list (`0-3,6,8-9`); `None` if it does not parse.
fn cpu_list_len(list: &str) -> Option<usize> {
    list.split(',').try_fold(0usize, |n, part| {
        let count = match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
                b.checked_sub(a)? + 1
            }
            None => {
                part.parse::<usize>().ok()?;
                1
            }
        };
        n.checked_add(count)
    })
}

/// Prints the summary to standard error when `CH4_DEBUG_SUMMARY` is on.
pub(crate) fn print_summary_if_asked<N: Netmod, S: Shm, L: crate::ThreadLevel>(
    ctx: &crate::Context<N, S, L>,
) {
    if env::switch("CH4_DEBUG_SUMMARY").ok().flatten() == Some(true) {
        if let Ok(summary) = ctx.settings() {
            eprint!("{summary}");
        }
    }
}

/// One setting as a rank runs with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InForce {
    /// The environment variable.
    pub name: &'static str,
    /// The value the rank uses: as its transport reports it, or for settings no transport
    /// reports, the environment's value or the default.
    pub value: String,
    /// What the environment says, if the variable is set.
    pub environment: Option<String>,
    /// What the setting changes.
    pub meaning: &'static str,
}

/// The settings of one rank (see [`crate::Context::settings`]); `Display` prints them as a
/// table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// One entry per setting of this build, in [`all`]'s order.
    pub entries: Vec<InForce>,
}

/// VCIs of a rank at the multiple level when `CH4_NUM_VCIS` does not say.
pub const DEFAULT_VCIS: usize = 4;

/// The most VCIs a rank may have.
pub const MAX_VCIS: usize = 64;

/// How many VCIs a rank at `level` has: `CH4_NUM_VCIS` (or [`DEFAULT_VCIS`]) at the multiple
/// level, one below it (a value set for a lower level is not an error: the same environment
/// serves programs at every level).
pub(crate) fn num_vcis(level: Level) -> Result<usize> {
    if level < Level::Multiple {
        return Ok(1);
    }
    let n = env::count("CH4_NUM_VCIS")?.map_or(DEFAULT_VCIS, |n| n as usize);
    if n > MAX_VCIS {
        return Err(ch4_core::Error::new(
            ch4_core::ErrorKind::Arg,
            format!("CH4_NUM_VCIS={n}: a rank has at most {MAX_VCIS} VCIs"),
        ));
    }
    Ok(n)
}

impl Summary {
    /// Records the rank's thread level and VCIs in the `CH4_NUM_VCIS` entry.
    pub(crate) fn note_threads(&mut self, level: Level, vcis: usize) {
        if let Some(e) = self.entries.iter_mut().find(|e| e.name == "CH4_NUM_VCIS") {
            e.value = format!("{vcis} ({level})");
        }
    }

    pub(crate) fn of<N: Netmod, S: Shm>(dev: &ch4_core::Device<N, S>) -> Summary {
        let mut reported = dev.settings();
        reported.extend(facade_in_force());
        let entries = all()
            .map(|s| {
                let environment = env::raw(s.name).ok().flatten();
                let value = reported
                    .iter()
                    .find(|(name, _)| *name == s.name)
                    .map(|(_, v)| v.clone())
                    .or_else(|| environment.clone())
                    .unwrap_or_else(|| s.default.to_string());
                InForce {
                    name: s.name,
                    value,
                    environment,
                    meaning: s.meaning,
                }
            })
            .collect();
        Summary { entries }
    }

    /// The entry of `name`, if this build has that setting.
    pub fn get(&self, name: &str) -> Option<&InForce> {
        self.entries.iter().find(|e| e.name == name)
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let width = self.entries.iter().map(|e| e.name.len()).max().unwrap_or(0);
        let vwidth = self
            .entries
            .iter()
            .map(|e| e.value.len())
            .max()
            .unwrap_or(0);
        writeln!(f, "# ch4 settings in force")?;
        for e in &self.entries {
            let origin = match &e.environment {
                Some(v) if *v == e.value => " (environment)".to_string(),
                Some(v) => format!(" (environment: {v})"),
                None => String::new(),
            };
            writeln!(f, "{:width$}  {:vwidth$}{origin}", e.name, e.value)?;
        }
        Ok(())
    }
}

/// The README's settings table lists exactly the settings of this build, so the two cannot
/// drift apart.
#[cfg(test)]
mod tests {
    #[test]
    fn ranks_look_for_a_cpu_mate_at_every_poll_only_when_they_outnumber_the_cpus() {
        use ch4_core::device::{CPU_MATE_EVERY_POLL, CPU_MATE_SOMETIMES};
        assert_eq!(super::cpu_mate_check(None, 4, 2), CPU_MATE_EVERY_POLL);
        assert_eq!(super::cpu_mate_check(None, 3, 2), CPU_MATE_EVERY_POLL);
        // More than two a CPU: every CPU is crowded, and nothing is gained by looking.
        assert_eq!(super::cpu_mate_check(None, 5, 2), 0);
        assert_eq!(super::cpu_mate_check(None, 8, 2), 0);
        assert_eq!(super::cpu_mate_check(None, 2, 2), CPU_MATE_SOMETIMES);
        assert_eq!(super::cpu_mate_check(Some(64), 4, 2), 0);
        assert_eq!(super::cpu_mate_check(Some(u32::MAX), 2, 2), 0);
    }

    #[test]
    fn ranks_spin_without_pausing_only_when_each_may_have_a_cpu() {
        use ch4_core::device::{TIGHT_SPIN_OWN_CPU, YIELD_LATE, YIELD_SOON};
        assert_eq!(super::tight_spin(2, 2, YIELD_LATE), TIGHT_SPIN_OWN_CPU);
        assert_eq!(super::tight_spin(1, 8, u32::MAX), TIGHT_SPIN_OWN_CPU);
        assert_eq!(super::tight_spin(4, 2, YIELD_SOON), 0);
        assert_eq!(
            super::tight_spin(2, 2, YIELD_SOON),
            YIELD_SOON,
            "soon still yields soon"
        );
    }

    #[test]
    fn ranks_yield_soon_only_when_they_outnumber_the_cpus() {
        use ch4_core::device::{YIELD_AT_ONCE, YIELD_LATE, YIELD_SOON};
        assert_eq!(super::yield_after(None, 2, 2), YIELD_LATE);
        assert_eq!(super::yield_after(None, 4, 2), YIELD_SOON);
        assert_eq!(super::yield_after(None, 8, 2), YIELD_AT_ONCE);
        assert_eq!(super::yield_after(Some(YIELD_SOON), 8, 2), YIELD_SOON);
        assert_eq!(super::yield_after(None, 1, 1), YIELD_LATE);
        assert_eq!(super::yield_after(Some(u32::MAX), 4, 2), u32::MAX);
        assert_eq!(super::yield_after(Some(YIELD_SOON), 2, 8), YIELD_SOON);
    }

    #[test]
    fn kernel_cpu_lists_are_counted() {
        assert_eq!(super::cpu_list_len("0-1"), Some(2));
        assert_eq!(super::cpu_list_len("0"), Some(1));
        assert_eq!(super::cpu_list_len("0-3,6,8-9"), Some(7));
        assert_eq!(super::cpu_list_len("3-1"), None);
        assert_eq!(super::cpu_list_len("a"), None);
        assert_eq!(super::cpu_list_len(""), None);
    }

    #[test]
    fn the_readme_lists_every_setting() {
        let readme = include_str!("../README.md");
        for s in super::all() {
            assert!(
                readme.contains(&format!("| `{}`", s.name)),
                "{} is missing from the README's settings table",
                s.name
            );
        }
    }
}

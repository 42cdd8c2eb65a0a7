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
    // Every netmod built in (a program may run ranks over any of them), the selected one
    // (`SelectedNetmod`: ofi, then ucx, then tcp) first.
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
    FACADE
        .iter()
        .chain(ch4_core::core::SETTINGS)
        .chain(shm::SETTINGS)
        .chain(ofi)
        .chain(ucx)
        .chain(tcp)
}

/// Checks the environment before a rank starts: no unknown `CH4_*` variable, and every
/// facade-level setting parses (the device and the transports check their own when they are
/// made).
pub(crate) fn check_environment() -> Result<()> {
    env::check_known(all())?;
    env::count("CH4_NODE_SIZE")?;
    env::count("CH4_NP")?;
    env::switch("CH4_DEBUG_SUMMARY")?;
    if let Some(v) = env::raw(crate::log::LOG_VAR)? {
        crate::log::check_filter(&v).map_err(|why| {
            env::bad(crate::log::LOG_VAR, &v, &format!("an event filter ({why})"))
        })?;
    }
    Ok(())
}

/// Prints the summary to standard error when `CH4_DEBUG_SUMMARY` is on.
pub(crate) fn print_summary_if_asked<N: Netmod, S: Shm>(ctx: &crate::Context<N, S>) {
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

impl Summary {
    pub(crate) fn of<N: Netmod, S: Shm>(dev: &ch4_core::Device<N, S>) -> Summary {
        let reported = dev.settings();
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

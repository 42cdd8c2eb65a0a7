//! Seeing ch4's events.
//!
//! ch4 reports what happens off the fast path — connections made and lost, peers that failed,
//! rendezvous, settings it had to adjust — as [`tracing`](https://docs.rs/tracing) events under
//! targets named after its crates (`ch4_core`, `am_fallback`, `shm`, `netmod_tcp`, ...). A
//! program that installs a `tracing` subscriber sees them like its own. One that does not has
//! two ways:
//!
//! - call [`init`] at start (the examples and benchmarks do): events go to standard error,
//!   filtered by `CH4_LOG` (`tracing`'s filter syntax: `warn`, `debug`,
//!   `netmod_tcp=debug,warn`; default `warn`);
//! - or just set `CH4_LOG`: [`crate::process::init`] and [`crate::threads::Threads::run`]
//!   then install that subscriber themselves if none is installed yet (without `CH4_LOG` they
//!   leave the choice to the program, since a process has one global subscriber).
//!
//! Release builds compile out events below `warn` (the `tracing` feature
//! `release_max_level_warn`), so the hot path pays nothing for them.

/// The environment variable with the event filter.
pub const LOG_VAR: &str = "CH4_LOG";

/// Sends ch4's events (and every other `tracing` event) to standard error, filtered by
/// `CH4_LOG` (default `warn`). Returns `false`, changing nothing, when the program already
/// installed a subscriber or `CH4_LOG` does not parse as a filter (then
/// [`crate::process::init`] reports it).
pub fn init() -> bool {
    let filter = match std::env::var(LOG_VAR) {
        Ok(v) => match tracing_subscriber::EnvFilter::try_new(v.trim()) {
            Ok(f) => f,
            Err(_) => return false,
        },
        Err(_) => tracing_subscriber::EnvFilter::new("warn"),
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init()
        .is_ok()
}

/// [`init`], if `CH4_LOG` is set.
pub(crate) fn init_if_asked() {
    if std::env::var_os(LOG_VAR).is_some() {
        init();
    }
}

/// Whether `value` is a valid `CH4_LOG` filter; the error says why not.
pub(crate) fn check_filter(value: &str) -> Result<(), String> {
    tracing_subscriber::EnvFilter::try_new(value.trim())
        .map(drop)
        .map_err(|e| e.to_string())
}

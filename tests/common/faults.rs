//! The semantics suite through the test kit's seeded fault wrapper (`testkit::Faulty`, after
//! smoltcp's `FaultInjector`), stacked on the real transports of ranks as threads: TCP between
//! nodes, the shared-memory rings within one.
//!
//! Each route runs a case once per seed. The seeds are `0..FAULT_SEEDS` (default 1, what CI
//! runs), or the one `FAULT_SEED` names, to replay a failure. (Not `CH4_*` names: the library
//! refuses `CH4_*` variables it does not know, and these are the suite's, not the library's.)
//!
//! - even seeds: `Faulty<T>`, an ordered wrapper that holds a fifth of the arrivals for a few
//!   polls and every later one from the same sender behind them (a slow path);
//! - odd seeds: `Unordered<T>`, which declares the transport unordered (`AM_ORDERED = false`:
//!   the AM fallback numbers its packets) and delays a tenth of the arrivals alone and lets
//!   later ones overtake a fifth of them.
//!
//! TCP cannot lose or duplicate a byte of a live connection, nor can the rings, so the suite
//! runs without drops, duplicates or corruption: those are tested against the AM fallback alone
//! (`testkit/tests/faults.rs`), and the faults real networks have — a connection dropped or
//! reset, a peer killed, a rail lost — against real connections and processes
//! (`netmod-tcp/tests/faults.rs`, `tests/process.rs`, `tests/rails.rs`).
//!
//! Every case is bounded: a run that does not end within [`LIMIT`] fails the test naming its
//! seed (the stuck ranks are left behind; the test process ends with the suite). The wrappers'
//! decisions replay from the seed; the ranks are threads, so which message a decision meets
//! may differ from one run to the next.

use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use ch4_core::transport::AmTransport;
use testkit::{FaultConfig, FaultControl, FaultStats, Faulty, Unordered};

/// The longest one case may run before it counts as hung. The cases take well under a second
/// each unloaded (the largest, `ten_thousand_requests` and `lanes`, 1-9 s); the margin is for a
/// loaded host: with six busy loops beside them they took 12-20 s, and at a load average of 65
/// (five builds sharing two cores) over 60.
pub const LIMIT: Duration = Duration::from_secs(120);

/// The ordered wrapper's settings: a fifth of the arrivals held for three polls. A poll that
/// only holds reports no work, as a real transport's would, so that waiting ranks yield their
/// CPU as they do over the transport alone.
pub const ORDERED: FaultConfig = FaultConfig::NONE.with_delay(20, 3).reporting_held(false);

/// The unordered wrapper's settings: a tenth held for three polls, a fifth overtaken.
pub const UNORDERED: FaultConfig = FaultConfig::NONE
    .with_delay(10, 3)
    .with_reorder(20)
    .reporting_held(false);

/// The seeds to run: `FAULT_SEED=s` alone, else `0..FAULT_SEEDS` (default `0..1`).
pub fn seeds() -> Vec<u64> {
    testkit::fault_seeds(1)
}

/// The seed of rank `rank`'s wrapper on VCI `vci` in the run of `seed`: every wrapper draws
/// its own faults.
pub fn wrapper_seed(seed: u64, rank: u32, vci: usize) -> u64 {
    seed.wrapping_mul(1_000_003)
        .wrapping_add(u64::from(rank) * 64 + vci as u64)
}

/// One run of a case: its seed, and the switches of every wrapper it made, so that the run can
/// show afterwards that the faults really happened.
#[derive(Clone)]
pub struct Run {
    /// The run's seed.
    pub seed: u64,
    controls: Arc<Mutex<Vec<FaultControl>>>,
}

impl Run {
    /// `T` in the ordered wrapper, with [`ORDERED`].
    pub fn ordered<T: AmTransport>(&self, t: T, rank: u32, vci: usize) -> Faulty<T> {
        let t = Faulty::with_config(t, wrapper_seed(self.seed, rank, vci), ORDERED);
        self.keep(t.control());
        t
    }

    /// `T` in the unordered wrapper, with [`UNORDERED`].
    pub fn unordered<T: AmTransport>(&self, t: T, rank: u32, vci: usize) -> Unordered<T> {
        let t = Unordered::with_config(t, wrapper_seed(self.seed, rank, vci), UNORDERED);
        self.keep(t.control());
        t
    }

    fn keep(&self, control: FaultControl) {
        self.controls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(control);
    }

    /// What all the run's wrappers did, added up.
    pub fn stats(&self) -> FaultStats {
        let controls = self.controls.lock().unwrap_or_else(|p| p.into_inner());
        controls
            .iter()
            .map(FaultControl::stats)
            .fold(FaultStats::default(), |a, b| FaultStats {
                arrived: a.arrived + b.arrived,
                delivered: a.delivered + b.delivered,
                dropped: a.dropped + b.dropped,
                duplicated: a.duplicated + b.duplicated,
                delayed: a.delayed + b.delayed,
                reordered: a.reordered + b.reordered,
                overtaken: a.overtaken + b.overtaken,
                corrupted: a.corrupted + b.corrupted,
                discarded: a.discarded + b.discarded,
            })
    }
}

/// Runs `job(run)` for every seed of [`seeds`], each on a thread of its own bounded by
/// [`LIMIT`]: a job that errs, panics or hangs fails the test with `what` and its seed, and how
/// to replay it. A run of a hundred arrivals or more must have met faults (delays; on odd
/// seeds, overtaking), so that a passing case does not pass for want of them.
pub fn each_seed<F>(what: &str, job: F)
where
    F: Fn(Run) -> ch4::Result<()> + Send + Sync + Clone + 'static,
{
    for seed in seeds() {
        let replay = format!("{what}, seed {seed} (replay: FAULT_SEED={seed})");
        let (tx, rx) = mpsc::channel();
        let job = job.clone();
        let run = Run {
            seed,
            controls: Arc::default(),
        };
        let run_in = run.clone();
        let started = Instant::now();
        let runner = std::thread::Builder::new()
            .name(format!("faults-seed-{seed}"))
            .spawn(move || {
                let outcome =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(run_in)));
                let _ = tx.send(outcome);
            })
            .expect("spawn the job's thread");
        match rx.recv_timeout(LIMIT) {
            Ok(Ok(Ok(()))) => {
                let _ = runner.join();
            }
            Ok(Ok(Err(e))) => panic!("{replay}: failed: {e}"),
            Ok(Err(panic)) => {
                let msg = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                panic!("{replay}: panicked: {msg}")
            }
            Err(_) => {
                // Whether the wrappers still hold arrivals (then they did not let go) or have
                // delivered all they took (then the engine has them and did not finish).
                let st = run.stats();
                let held = (st.arrived + st.duplicated)
                    .saturating_sub(st.delivered + st.dropped + st.discarded);
                panic!(
                    "{replay}: hung ({:.1?} without an end; the ranks are left behind); \
                     {held} arrivals still held by the wrappers: {st:?}",
                    started.elapsed()
                )
            }
        }
        let stats = run.stats();
        eprintln!("{replay}: {:.1?}, {stats:?}", started.elapsed());
        if stats.arrived >= 100 {
            assert!(
                stats.delayed > 0,
                "{replay}: nothing was delayed: {stats:?}"
            );
            assert!(
                seed % 2 == 0 || stats.overtaken > 0,
                "{replay}: nothing was overtaken: {stats:?}"
            );
        }
    }
}

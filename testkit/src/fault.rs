//! A seeded fault-injecting wrapper around any transport: what a lossy, slow, buggy or dying
//! network does to active messages, replayable from one number.
//!
//! After smoltcp's `FaultInjector` (`src/phy/fault_injector.rs`): a wrapper device stacked over
//! any device, with chances in percent and its own small generator seeded by the test, so a
//! failure a seed finds replays from that seed. [`Faulty`] does the same for an
//! [`AmTransport`]: it drops, duplicates, delays, reorders and corrupts what the wrapped
//! transport delivers, and can declare a peer killed.
//!
//! Faults apply on the receiving side, in `am_poll`, where the wrapper can hold messages back:
//! every arrival takes exactly seven numbers from the generator, whatever the settings, so the
//! fate of the n-th arrival depends only on the seed and n — turning one fault on does not
//! reshuffle the others. Given the same inner delivery order (the in-memory [`crate::Pipe`]'s is
//! fixed) the same seed gives the same run.
//!
//! Order is part of the type: `AM_ORDERED` is an associated const, so a transport that may
//! reorder must say so in its type. `Faulty<T>` keeps `T`'s order — a delayed message holds back
//! every later one from the same sender, and asking it to reorder is refused — while
//! [`Unordered<T>`] (`Faulty<T, true>`) declares `AM_ORDERED = false`, delays a message alone
//! and may let later ones overtake it, and so drives the AM fallback's sequence numbers.
//! (`inproc::Shuffled`, re-exported by the kit, shuffles batches instead; it is the wrapper the
//! facade's thread mode uses.)

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard};

use ch4_core::transport::{AmSink, AmTransport, HandlerId, Netmod, PeerRead, PeerState, Shm};
use ch4_core::{Error, ErrorKind, Gpid, Result};

use crate::pipe::Frame;
use crate::rng::{chance, SplitMix64};

/// The most arrivals held at once; while this many wait, a poll pulls nothing new from the inner
/// transport (its own queue absorbs the rest), so memory stays bounded whatever the faults.
const HOLD_MAX: usize = 1024;

/// A message held back for reordering goes out after this many polls even if nothing arrived
/// to overtake it, so reordering never becomes loss.
const REORDER_WAIT: u64 = 4;

/// The fault settings of a [`Faulty`] transport. Chances are in percent (smoltcp's
/// `drop_chance` and `corrupt_chance`): what a test reads and writes naturally, and coarse
/// enough that a chance of 1 still shows up in a few hundred messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultConfig {
    /// Chance that an arrival vanishes: a lossy link, which the AM fallback does not expect of
    /// its transports — a receive then waits for ever, and the harness's bound says so.
    pub drop_pct: u8,
    /// Chance that an arrival is delivered twice in a row: a retransmission bug. On an ordered
    /// transport the engine takes the copy for a new message; on an unordered one its sequence
    /// number is stale and the copy is a protocol error.
    pub duplicate_pct: u8,
    /// Chance that an arrival is held for [`FaultConfig::delay_polls`] polls: a slow path.
    pub delay_pct: u8,
    /// How many polls a delayed arrival is held: `delay_polls` polls pass without it, the next
    /// one delivers it.
    pub delay_polls: u64,
    /// Chance that an arrival is held until a later one has been delivered (or for a few
    /// polls, if none comes): messages overtaking each other. Only [`Unordered`] takes it.
    pub reorder_pct: u8,
    /// Chance that one bit of an arrival's header is flipped — one bit, as smoltcp does, being
    /// the likeliest error and the hardest to notice.
    pub corrupt_pct: u8,
    /// Which header bytes corruption may hit (clipped to each header's length; a header that
    /// ends before the range is left alone). Pointing it at one field (the length of a
    /// `MatchHeader` is bytes 32..40) makes a corruption the test can predict the effect of.
    pub corrupt_bytes: Range<usize>,
    /// Whether a poll that delivered nothing while arrivals are held reports one event anyway
    /// (the default), so that a caller polling until idle (`Harness::settle`) does not stop
    /// with messages still held. Off, it reports what it delivered, as a real transport with
    /// data still in flight does: a device's waiting loop then counts idle polls and yields
    /// its CPU as it would — with ranks as threads on fewer cores than ranks, a rank spinning
    /// on "work" it cannot do kept the rank it waited for off the CPU (a case of the suite took
    /// 15 s instead of 0.8).
    pub report_held: bool,
}

impl FaultConfig {
    /// No faults: the wrapper passes everything through untouched (an [`Unordered`] one then
    /// only declares that order is not promised).
    pub const NONE: FaultConfig = FaultConfig {
        drop_pct: 0,
        duplicate_pct: 0,
        delay_pct: 0,
        delay_polls: 4,
        reorder_pct: 0,
        corrupt_pct: 0,
        corrupt_bytes: 0..usize::MAX,
        report_held: true,
    };

    // Builders, so a test states only the fault it is about:
    // `FaultConfig::NONE.with_delay(20, 3)`; `const` so a test can name a setting once.

    /// These settings, dropping `pct` percent of arrivals.
    pub const fn with_drop(self, pct: u8) -> FaultConfig {
        FaultConfig {
            drop_pct: pct,
            ..self
        }
    }

    /// These settings, duplicating `pct` percent of arrivals.
    pub const fn with_duplicate(self, pct: u8) -> FaultConfig {
        FaultConfig {
            duplicate_pct: pct,
            ..self
        }
    }

    /// These settings, holding `pct` percent of arrivals for `polls` polls.
    pub const fn with_delay(self, pct: u8, polls: u64) -> FaultConfig {
        FaultConfig {
            delay_pct: pct,
            delay_polls: polls,
            ..self
        }
    }

    /// These settings, letting later arrivals overtake `pct` percent of them ([`Unordered`]
    /// only).
    pub const fn with_reorder(self, pct: u8) -> FaultConfig {
        FaultConfig {
            reorder_pct: pct,
            ..self
        }
    }

    /// These settings, with [`FaultConfig::report_held`] set to `on`.
    pub const fn reporting_held(self, on: bool) -> FaultConfig {
        FaultConfig {
            report_held: on,
            ..self
        }
    }

    /// These settings, flipping a bit among header bytes `bytes` of `pct` percent of arrivals.
    pub const fn with_corrupt(self, pct: u8, bytes: Range<usize>) -> FaultConfig {
        FaultConfig {
            corrupt_pct: pct,
            corrupt_bytes: bytes,
            ..self
        }
    }
}

impl Default for FaultConfig {
    fn default() -> FaultConfig {
        FaultConfig::NONE
    }
}

/// What a [`Faulty`] transport did so far. Tests assert on it so that a passing fault test is
/// not passing vacuously (the faults really happened), and compare it between two runs of one
/// seed to show the run replays.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// Messages pulled from the wrapped transport.
    pub arrived: u64,
    /// Messages handed to the sink, copies included.
    pub delivered: u64,
    /// Arrivals dropped.
    pub dropped: u64,
    /// Arrivals delivered twice.
    pub duplicated: u64,
    /// Arrivals held for `delay_polls` polls.
    pub delayed: u64,
    /// Arrivals held back for a later one to overtake.
    pub reordered: u64,
    /// Deliveries that passed an earlier arrival still held (from any sender): proof that
    /// delays and reordering really changed the order, so a test is not passing vacuously.
    pub overtaken: u64,
    /// Arrivals whose header had a bit flipped.
    pub corrupted: u64,
    /// Arrivals thrown away because their sender had been killed.
    pub discarded: u64,
}

/// What the wrapper and the test share: the settings, the killed peers and the counts.
#[derive(Debug)]
struct Shared {
    config: FaultConfig,
    unordered: bool,
    killed: Vec<Gpid>,
    stats: FaultStats,
}

impl Shared {
    fn is_killed(&self, gpid: Gpid) -> bool {
        self.killed.contains(&gpid)
    }
}

/// Locks the shared state. A test that panicked while holding it has failed already, so a
/// poisoned lock is taken over rather than panicking again.
fn lock(shared: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

/// Refuses settings that would break what the wrapper's type promises.
#[track_caller]
fn check(config: &FaultConfig, unordered: bool) {
    assert!(
        unordered || config.reorder_pct == 0,
        "reorder_pct on an ordered Faulty<T>: a transport whose AM_ORDERED is true must not \
         reorder; use testkit::Unordered<T> (Faulty<T, true>)"
    );
}

/// The test's handle on a [`Faulty`] transport that a device owns.
///
/// A device hands out only `&` references to its netmod, so the switches live behind a shared
/// handle: take it with [`Faulty::control`] — before or after the device is built — and turn
/// faults on and off, or kill a peer, between progress calls. It is an `Arc` with a lock, not
/// an `Rc`, so that a wrapped transport can go under a rank that is a thread of its own
/// (`ch4::threads::Threads::run_wrapped`) and the test can still reach it from outside.
#[derive(Debug, Clone)]
pub struct FaultControl {
    shared: Arc<Mutex<Shared>>,
}

impl FaultControl {
    /// Replaces the settings from the next poll on. Panics if `config` reorders and the
    /// wrapper is ordered (a test bug: see [`Unordered`]).
    #[track_caller]
    pub fn set(&self, config: FaultConfig) {
        let mut s = lock(&self.shared);
        check(&config, s.unordered);
        s.config = config;
    }

    /// The settings in force.
    pub fn config(&self) -> FaultConfig {
        lock(&self.shared).config.clone()
    }

    /// From now on `gpid` is dead to this transport, as if its process had been killed: its
    /// state reads [`PeerState::Failed`], sends to it fail with `PeerFailed`, and whatever it
    /// sent that was not delivered yet is thrown away (a reset connection loses its data).
    pub fn kill(&self, gpid: Gpid) {
        let mut s = lock(&self.shared);
        if !s.is_killed(gpid) {
            s.killed.push(gpid);
        }
    }

    /// What the wrapper did so far.
    pub fn stats(&self) -> FaultStats {
        lock(&self.shared).stats
    }
}

/// One arrival held by the wrapper.
#[derive(Debug, Clone)]
struct Held {
    frame: Frame,
    /// The first poll that may deliver it.
    ready_at: u64,
    /// Waiting for a later arrival to be delivered first (reordering).
    overtake: bool,
    /// The poll that pulled it in.
    since: u64,
}

/// Wraps a transport `T` and injects seeded faults into what it delivers; see the module
/// documentation. `UNORDERED` decides `AM_ORDERED` (false when set, else `T`'s) and whether
/// reordering is allowed: use the aliases `Faulty<T>` and [`Unordered<T>`].
///
/// It is a [`Netmod`] (and a [`Shm`]) whenever `T` is one running the AM fallback, so it goes
/// under a device anywhere the wrapped transport would.
///
/// A const parameter's default takes no part in type inference, so where nothing else names
/// the type, write `Faulty::<_>::new(..)` for the ordered wrapper and `Unordered::new(..)` for
/// the other.
pub struct Faulty<T, const UNORDERED: bool = false> {
    inner: T,
    rng: SplitMix64,
    shared: Arc<Mutex<Shared>>,
    /// Arrivals pulled from `inner` and not yet delivered, in arrival order.
    queue: VecDeque<Held>,
    /// Polls so far (the clock of delays).
    polls: u64,
}

/// A [`Faulty`] wrapper that declares its transport unordered (`AM_ORDERED = false`): it may
/// reorder, a delay holds back only the delayed message, and the AM fallback numbers its
/// packets. With [`FaultConfig::NONE`] it reorders nothing itself — the shape for a test that
/// reorders a [`crate::Wire`] by hand.
pub type Unordered<T> = Faulty<T, true>;

impl<T: AmTransport, const UNORDERED: bool> Faulty<T, UNORDERED> {
    /// Wraps `inner` with no faults yet (turn them on through [`Faulty::control`]); `seed`
    /// decides every fault the wrapper will make.
    pub fn new(inner: T, seed: u64) -> Self {
        Self::with_config(inner, seed, FaultConfig::NONE)
    }

    /// Wraps `inner` with `config` in force from the first poll. Panics if `config` reorders
    /// and the wrapper is ordered.
    #[track_caller]
    pub fn with_config(inner: T, seed: u64, config: FaultConfig) -> Self {
        check(&config, UNORDERED);
        Faulty {
            inner,
            rng: SplitMix64::new(seed),
            shared: Arc::new(Mutex::new(Shared {
                config,
                unordered: UNORDERED,
                killed: Vec::new(),
                stats: FaultStats::default(),
            })),
            queue: VecDeque::new(),
            polls: 0,
        }
    }

    /// The switches of this wrapper, for the test to keep (see [`FaultControl`]).
    pub fn control(&self) -> FaultControl {
        FaultControl {
            shared: self.shared.clone(),
        }
    }

    /// What the wrapper did so far (also through [`FaultControl::stats`]).
    pub fn stats(&self) -> FaultStats {
        lock(&self.shared).stats
    }

    /// The wrapped transport, for inspection.
    pub fn inner(&self) -> &T {
        &self.inner
    }

    /// How many arrivals are held right now (delayed, reordered, or behind a delayed one).
    pub fn held(&self) -> usize {
        self.queue.len()
    }

    fn killed(&self, gpid: Gpid) -> bool {
        lock(&self.shared).is_killed(gpid)
    }
}

#[cold]
fn killed_error(gpid: Gpid) -> Error {
    Error::new(
        ErrorKind::PeerFailed,
        format!("process {gpid} was killed by the fault injector"),
    )
}

/// Takes the inner transport's arrivals and decides each one's fate.
struct Collect<'a> {
    queue: &'a mut VecDeque<Held>,
    rng: &'a mut SplitMix64,
    shared: &'a mut Shared,
    now: u64,
}

impl AmSink for Collect<'_> {
    fn deliver(
        &mut self,
        src: Gpid,
        handler: HandlerId,
        header: &[u8],
        payload: &[u8],
    ) -> Result<()> {
        // Always seven draws, so one arrival's fate never depends on the settings of another.
        let [drop, duplicate, corrupt, delay, reorder, at, bit]: [u64; 7] =
            std::array::from_fn(|_| self.rng.next_u64());
        let Shared {
            config,
            unordered,
            killed,
            stats,
        } = &mut *self.shared;
        stats.arrived += 1;
        if killed.contains(&src) {
            stats.discarded += 1;
            return Ok(());
        }
        if chance(drop, config.drop_pct) {
            stats.dropped += 1;
            return Ok(());
        }
        let mut frame = Frame::new(src, handler, header, payload);
        if chance(corrupt, config.corrupt_pct) {
            let end = config.corrupt_bytes.end.min(frame.header.len());
            let start = config.corrupt_bytes.start.min(end);
            if start < end {
                let i = start + (at % (end - start) as u64) as usize;
                frame.header[i] ^= 1 << (bit % 8);
                stats.corrupted += 1;
            }
        }
        let mut ready_at = self.now;
        if config.delay_polls > 0 && chance(delay, config.delay_pct) {
            ready_at += config.delay_polls;
            stats.delayed += 1;
        }
        let overtake = *unordered && chance(reorder, config.reorder_pct);
        if overtake {
            stats.reordered += 1;
        }
        let held = Held {
            frame,
            ready_at,
            overtake,
            since: self.now,
        };
        if chance(duplicate, config.duplicate_pct) {
            stats.duplicated += 1;
            self.queue.push_back(held.clone());
        }
        self.queue.push_back(held);
        Ok(())
    }
}

impl<T: AmTransport, const UNORDERED: bool> AmTransport for Faulty<T, UNORDERED> {
    const AM_ORDERED: bool = T::AM_ORDERED && !UNORDERED;
    const NAME: &'static str = "faulty";

    fn eager_limit(&self) -> usize {
        self.inner.eager_limit()
    }

    fn am_max_payload(&self) -> usize {
        self.inner.am_max_payload()
    }

    fn am_send(
        &mut self,
        dest: Gpid,
        handler: HandlerId,
        header: &[u8],
        payload: &[&[u8]],
    ) -> Result<()> {
        if self.killed(dest) {
            return Err(killed_error(dest));
        }
        self.inner.am_send(dest, handler, header, payload)
    }

    /// Pulls up to `budget` arrivals (deciding their fates), then delivers up to `budget` of
    /// the held ones that are due, oldest first; on an ordered wrapper nothing passes an
    /// earlier message from the same sender. While it holds anything it reports at least one
    /// event (unless [`FaultConfig::report_held`] is off), so a caller that polls until idle
    /// (as with `inproc::Shuffled`) does not stop with messages still held; a sink's error
    /// ends the poll, the message counted as delivered, never offered twice.
    fn am_poll<K: AmSink>(&mut self, sink: &mut K, budget: usize) -> Result<usize> {
        self.polls += 1;
        let now = self.polls;
        let room = HOLD_MAX.saturating_sub(self.queue.len());
        {
            let mut shared = lock(&self.shared);
            let mut collect = Collect {
                queue: &mut self.queue,
                rng: &mut self.rng,
                shared: &mut shared,
                now,
            };
            // Called even with no room, so the inner transport can finish its sends.
            self.inner.am_poll(&mut collect, budget.min(room))?;
        }
        let mut delivered = 0;
        // Ordered: senders with an earlier message still held, which later ones must not pass.
        let mut blocked: Vec<Gpid> = Vec::new();
        // Looked up once a poll: the queue may hold a thousand arrivals.
        let killed = lock(&self.shared).killed.clone();
        // How deep a poll looks for a deliverable arrival. A delayed message holds back its
        // sender's later ones, so the queue can grow to `HOLD_MAX` while the first is held;
        // scanning all of it at every poll made a run of ten thousand messages take minutes.
        // What lies deeper waits for a later poll: slower, never lost or misordered.
        let window = budget.saturating_mul(4).max(64);
        let mut i = 0;
        let mut looked = 0;
        while i < self.queue.len() && delivered < budget && looked < window && sink.wants_more() {
            looked += 1;
            let h = &self.queue[i];
            let src = h.frame.src;
            if killed.contains(&src) {
                self.queue.remove(i);
                lock(&self.shared).stats.discarded += 1;
                continue;
            }
            let due = h.ready_at <= now && (!h.overtake || h.since + REORDER_WAIT <= now);
            if !due || blocked.contains(&src) {
                if !UNORDERED && !blocked.contains(&src) {
                    blocked.push(src);
                }
                i += 1;
                continue;
            }
            let Some(h) = self.queue.remove(i) else {
                break;
            };
            if UNORDERED {
                // Everything held before it has now been overtaken.
                for earlier in self.queue.range_mut(..i) {
                    earlier.overtake = false;
                }
            }
            delivered += 1;
            let mut shared = lock(&self.shared);
            shared.stats.delivered += 1;
            shared.stats.overtaken += u64::from(i > 0);
            drop(shared);
            let f = &h.frame;
            sink.deliver(f.src, f.handler, &f.header, &f.payload)?;
        }
        let report_held = lock(&self.shared).config.report_held;
        Ok(
            if report_held && delivered == 0 && budget > 0 && !self.queue.is_empty() {
                1
            } else {
                delivered
            },
        )
    }

    /// Failed once killed; else the inner transport's verdict, except that a peer whose
    /// messages are still held here is alive until they are out — as they would have been
    /// delivered without the wrapper.
    fn peer_state(&self, gpid: Gpid) -> PeerState {
        if self.killed(gpid) {
            PeerState::Failed
        } else if self.queue.iter().any(|h| h.frame.src == gpid) {
            PeerState::Alive
        } else {
            self.inner.peer_state(gpid)
        }
    }

    fn settings(&self) -> Vec<(&'static str, String)> {
        self.inner.settings()
    }

    fn has_queued_output(&self) -> bool {
        self.inner.has_queued_output()
    }

    fn close_connections(&mut self) {
        self.inner.close_connections()
    }

    fn can_send_now(&mut self, dest: Gpid, bytes: usize) -> bool {
        self.inner.can_send_now(dest, bytes)
    }

    // The rest of the route's shape is the wrapped transport's, so that a suite run through
    // the wrapper takes the paths it takes without it (first pieces with the request-to-send,
    // its piece sizes, single-copy reads), only with the faults added.

    fn can_stream_now(&mut self, dest: Gpid, bytes: usize) -> bool {
        self.inner.can_stream_now(dest, bytes)
    }

    fn stream_piece(&self, crowded: bool) -> usize {
        self.inner.stream_piece(crowded)
    }

    fn first_piece(&self) -> usize {
        self.inner.first_piece()
    }

    fn background_progress(&mut self, on: bool) {
        self.inner.background_progress(on)
    }

    fn read_pays(&self, bytes: usize, both_ways: bool) -> bool {
        self.inner.read_pays(bytes, both_ways)
    }

    fn offers_peer_read(&self, dest: Gpid, bytes: usize) -> bool {
        self.inner.offers_peer_read(dest, bytes)
    }

    fn read_peer(&mut self, src: Gpid, addr: u64, into: &mut [u8]) -> Result<PeerRead> {
        if self.killed(src) {
            return Err(killed_error(src));
        }
        self.inner.read_peer(src, addr, into)
    }
}

/// Any netmod that runs the AM fallback can be made faulty; the engine then sees the faults.
/// (A natively matching netmod cannot: its engine talks to its own transport type.)
impl<T, const UNORDERED: bool> Netmod for Faulty<T, UNORDERED>
where
    T: Netmod<P2p = am_fallback::Am>,
{
    type P2p = am_fallback::Am;
}

/// A faulty shared-memory layer, for failure paths of the shm route.
impl<T, const UNORDERED: bool> Shm for Faulty<T, UNORDERED>
where
    T: Shm<P2p = am_fallback::Am>,
{
    type P2p = am_fallback::Am;
    const PRESENT: bool = T::PRESENT;

    fn is_local(&self, gpid: Gpid) -> bool {
        self.inner.is_local(gpid)
    }

    fn peer_shares_cpu(&mut self, peer: Option<Gpid>) -> bool {
        self.inner.peer_shares_cpu(peer)
    }

    fn move_off_cpu(&mut self) -> bool {
        self.inner.move_off_cpu()
    }
}

//! A fault-injecting wrapper that makes any transport deliver active messages out of order.
//!
//! The in-process transports keep order, so the AM fallback's reorder path (per-source sequence
//! numbers, packets held until their turn) would never run in tests. [`Shuffled`] declares
//! `AM_ORDERED = false` and then earns it: each poll drains a batch of arrivals from the inner
//! transport, and hands them on in a pseudo-random order, holding some back for later polls.
//! Nothing is dropped or duplicated, and nothing waits forever: a message held for a few polls
//! goes out before any other.
//!
//! The order comes from a small xorshift generator seeded at construction, so a run is
//! repeatable up to the thread timing that decides which messages share a batch.

use ch4_core::transport::{AmSink, AmTransport, HandlerId, Netmod, PeerState};
use ch4_core::{Gpid, Result};

/// The most arrivals held back at once; while this many wait, a poll pulls nothing new from the
/// inner transport (its own queue absorbs the rest), so memory stays bounded.
const HOLD_MAX: usize = 128;

/// A message held for this many polls goes out before any other, so every message is delivered
/// as long as the owner keeps polling.
const MAX_AGE: u64 = 8;

/// How many emptied message buffers are kept for reuse.
const SPARE_MAX: usize = 2 * HOLD_MAX;

/// One arrival, copied out of the inner transport because its bytes are only lent for the call.
#[derive(Default)]
struct Held {
    src: Gpid,
    handler: HandlerId,
    header: Vec<u8>,
    payload: Vec<u8>,
    /// The poll that pulled it in (for the age limit).
    since: u64,
    /// Its position in the inner transport's delivery order (to count overtakes).
    arrival: u64,
}

/// Wraps a transport `T` and delivers its active messages in a shuffled order, so the layers
/// above must not rely on per-peer ordering: a test harness for unordered transports.
///
/// Sends, thresholds and failure detection go straight to `T`; only delivery is reordered.
pub struct Shuffled<T> {
    inner: T,
    /// xorshift64 state; never zero.
    rng: u64,
    /// Arrivals pulled from `inner` and not yet delivered, in no particular order.
    held: Vec<Held>,
    /// Emptied buffers, reused for later arrivals.
    spare: Vec<Held>,
    /// Polls so far.
    polls: u64,
    /// Messages pulled from `inner` so far.
    arrivals: u64,
    /// The highest arrival number delivered so far, plus one (0: none yet).
    high_water: u64,
    /// Deliveries that came out before a message the inner transport delivered earlier.
    overtaken: u64,
}

impl<T: AmTransport> Shuffled<T> {
    /// Wraps `inner`; `seed` picks the shuffle (equal seeds and equal arrival batches give
    /// equal orders, so failures can be replayed).
    pub fn new(inner: T, seed: u64) -> Shuffled<T> {
        let mut rng = splitmix64(seed);
        if rng == 0 {
            rng = 0x9E37_79B9_7F4A_7C15;
        }
        Shuffled {
            inner,
            rng,
            held: Vec::new(),
            spare: Vec::new(),
            polls: 0,
            arrivals: 0,
            high_water: 0,
            overtaken: 0,
        }
    }

    /// The wrapped transport, for inspection.
    pub fn inner(&self) -> &T {
        &self.inner
    }

    /// How many arrived messages are being held back right now; tests use it to see that the
    /// wrapper really delays messages.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// How many messages were delivered ahead of one that arrived before them; tests use it to
    /// check that reordering actually happened, so a passing test is not passing vacuously.
    pub fn overtaken(&self) -> u64 {
        self.overtaken
    }

    /// The next pseudo-random number (xorshift64).
    fn next_random(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x
    }

    /// A pseudo-random number in `0..n`; `n` must be positive.
    fn below(&mut self, n: usize) -> usize {
        (self.next_random() % n.max(1) as u64) as usize
    }

    /// Picks the next held message to deliver: an overdue one if any, else a random one.
    fn pick(&mut self) -> usize {
        let now = self.polls;
        match self
            .held
            .iter()
            .position(|m| m.since.saturating_add(MAX_AGE) <= now)
        {
            Some(i) => i,
            None => self.below(self.held.len()),
        }
    }
}

/// The SplitMix64 finalizer: spreads small seeds (rank numbers) over the whole state space.
fn splitmix64(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Copies the inner transport's arrivals into owned [`Held`] messages.
struct Collect<'a> {
    held: &'a mut Vec<Held>,
    spare: &'a mut Vec<Held>,
    now: u64,
    arrivals: &'a mut u64,
}

impl AmSink for Collect<'_> {
    fn deliver(
        &mut self,
        src: Gpid,
        handler: HandlerId,
        header: &[u8],
        payload: &[u8],
    ) -> Result<()> {
        let mut m = self.spare.pop().unwrap_or_default();
        m.src = src;
        m.handler = handler;
        m.header.clear();
        m.header.extend_from_slice(header);
        m.payload.clear();
        m.payload.extend_from_slice(payload);
        m.since = self.now;
        m.arrival = *self.arrivals;
        *self.arrivals += 1;
        self.held.push(m);
        Ok(())
    }
}

impl<T: AmTransport> AmTransport for Shuffled<T> {
    const AM_ORDERED: bool = false;
    const NAME: &'static str = "shuffled";

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
        self.inner.am_send(dest, handler, header, payload)
    }

    /// Pulls up to `budget` new arrivals, then delivers a random number (at least one, at most
    /// `budget`) of the held messages in random order. Never reports idle while it holds
    /// anything, so a caller that waits for progress to go quiet keeps polling until all is out.
    fn am_poll<K: AmSink>(&mut self, sink: &mut K, budget: usize) -> Result<usize> {
        self.polls += 1;
        let room = HOLD_MAX.saturating_sub(self.held.len());
        let mut collect = Collect {
            held: &mut self.held,
            spare: &mut self.spare,
            now: self.polls,
            arrivals: &mut self.arrivals,
        };
        // Called even with nothing to pull, so the inner transport can finish its sends.
        self.inner.am_poll(&mut collect, budget.min(room))?;
        if self.held.is_empty() || budget == 0 {
            return Ok(0);
        }
        let count = 1 + self.below(self.held.len().min(budget));
        for _ in 0..count {
            let i = self.pick();
            let m = self.held.swap_remove(i);
            if m.arrival < self.high_water {
                self.overtaken += 1;
            }
            self.high_water = self.high_water.max(m.arrival + 1);
            let delivered = sink.deliver(m.src, m.handler, &m.header, &m.payload);
            if self.spare.len() < SPARE_MAX {
                self.spare.push(m);
            }
            delivered?;
        }
        Ok(count)
    }

    /// The inner transport's verdict, except that a peer whose messages are still held here is
    /// not yet reported failed: those messages must be delivered first, as they would have been
    /// without the wrapper.
    fn peer_state(&self, gpid: Gpid) -> PeerState {
        if self.held.iter().any(|m| m.src == gpid) {
            PeerState::Alive
        } else {
            self.inner.peer_state(gpid)
        }
    }

    fn has_queued_output(&self) -> bool {
        self.inner.has_queued_output()
    }

    fn close_connections(&mut self) {
        self.inner.close_connections()
    }
}

/// Any netmod that runs the active-message engine can be shuffled; the engine then numbers its
/// messages and restores their order. (A natively matching netmod cannot: its engine talks to
/// its own transport type.)
impl<T> Netmod for Shuffled<T>
where
    T: Netmod<P2p = am_fallback::Am>,
{
    type P2p = am_fallback::Am;
}

#[cfg(test)]
mod tests {
    use super::*;
    use ch4_core::Error;

    /// An ordered in-memory transport: a queue of messages to deliver.
    #[derive(Default)]
    struct Queue {
        q: std::collections::VecDeque<(Gpid, HandlerId, Vec<u8>, Vec<u8>)>,
    }

    impl AmTransport for Queue {
        const AM_ORDERED: bool = true;
        const NAME: &'static str = "queue";
        fn eager_limit(&self) -> usize {
            64
        }
        fn am_max_payload(&self) -> usize {
            100
        }
        fn am_send(&mut self, dest: Gpid, h: HandlerId, hdr: &[u8], p: &[&[u8]]) -> Result<()> {
            self.q.push_back((dest, h, hdr.to_vec(), p.concat()));
            Ok(())
        }
        fn am_poll<K: AmSink>(&mut self, sink: &mut K, budget: usize) -> Result<usize> {
            let mut n = 0;
            while n < budget {
                let Some((src, h, hdr, p)) = self.q.pop_front() else {
                    break;
                };
                sink.deliver(src, h, &hdr, &p)?;
                n += 1;
            }
            Ok(n)
        }
    }

    struct Record(Vec<(Gpid, HandlerId, Vec<u8>, Vec<u8>)>);

    impl AmSink for Record {
        fn deliver(&mut self, src: Gpid, h: HandlerId, hdr: &[u8], p: &[u8]) -> Result<()> {
            self.0.push((src, h, hdr.to_vec(), p.to_vec()));
            Ok(())
        }
    }

    /// Sends `n` numbered messages, polls until all are out; returns the delivered numbers.
    fn run(n: u32, seed: u64, budget: usize, trickle: bool) -> (Vec<u32>, u64) {
        let mut t = Shuffled::new(Queue::default(), seed);
        let mut rec = Record(Vec::new());
        let mut sent = 0;
        let mut polls = 0;
        while rec.0.len() < n as usize {
            // Trickle: a few sends between polls, so held messages mix with new ones.
            let batch = if trickle { 3 } else { n };
            for _ in 0..batch {
                if sent < n {
                    let hdr = sent.to_le_bytes();
                    t.am_send(sent % 3, 7, &hdr, &[&hdr[..1], &hdr[1..]])
                        .unwrap();
                    sent += 1;
                }
            }
            t.am_poll(&mut rec, budget).unwrap();
            polls += 1;
            assert!(polls < 100_000, "messages never delivered");
        }
        assert_eq!(t.held(), 0);
        assert_eq!(t.am_poll(&mut rec, budget).unwrap(), 0);
        let got = rec
            .0
            .iter()
            .map(|(src, h, hdr, p)| {
                let v = u32::from_le_bytes(hdr[..4].try_into().unwrap());
                assert_eq!((*src, *h), (v % 3, 7));
                assert_eq!(p, hdr, "payload reassembled from its slices");
                v
            })
            .collect();
        (got, t.overtaken())
    }

    #[test]
    fn delivers_a_permutation_out_of_order() {
        for (seed, budget, trickle) in [(0, 64, false), (1, 5, true), (42, 1, false), (9, 64, true)]
        {
            let (got, overtaken) = run(500, seed, budget, trickle);
            let mut sorted = got.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..500).collect::<Vec<_>>(), "lost or duplicated");
            if budget > 1 {
                assert_ne!(got, sorted, "seed {seed}: nothing was reordered");
                assert!(overtaken > 0);
            }
        }
    }

    #[test]
    fn same_seed_same_order() {
        assert_eq!(run(300, 5, 16, true), run(300, 5, 16, true));
        assert_ne!(run(300, 5, 16, true).0, run(300, 6, 16, true).0);
    }

    #[test]
    fn respects_budget_and_never_idles_while_holding() {
        let mut t = Shuffled::new(Queue::default(), 3);
        for i in 0..50u8 {
            t.am_send(0, 1, &[i], &[]).unwrap();
        }
        let mut rec = Record(Vec::new());
        assert_eq!(t.am_poll(&mut rec, 0).unwrap(), 0);
        while rec.0.len() < 50 {
            let before = rec.0.len();
            let n = t.am_poll(&mut rec, 4).unwrap();
            assert!((1..=4).contains(&n));
            assert_eq!(rec.0.len(), before + n);
        }
    }

    #[test]
    fn sink_errors_propagate_without_duplicates() {
        struct Fussy(u32);
        impl AmSink for Fussy {
            fn deliver(&mut self, _: Gpid, _: HandlerId, _: &[u8], _: &[u8]) -> Result<()> {
                self.0 += 1;
                if self.0 == 3 {
                    Err(Error::new(ch4_core::ErrorKind::Protocol, "bad packet"))
                } else {
                    Ok(())
                }
            }
        }
        let mut t = Shuffled::new(Queue::default(), 11);
        for i in 0..10u8 {
            t.am_send(0, 1, &[i], &[]).unwrap();
        }
        let mut sink = Fussy(0);
        let mut ok = 0;
        let mut failed = 0;
        while sink.0 < 10 {
            match t.am_poll(&mut sink, 64) {
                Ok(n) => ok += n,
                Err(_) => failed += 1,
            }
        }
        assert_eq!(failed, 1);
        assert_eq!(sink.0, 10, "every message offered exactly once");
        assert_eq!(t.held(), 0);
        assert!(ok <= 9);
    }

    #[test]
    fn held_messages_hide_a_dead_peer() {
        struct Dead(Queue);
        impl AmTransport for Dead {
            const AM_ORDERED: bool = true;
            const NAME: &'static str = "dead";
            fn eager_limit(&self) -> usize {
                0
            }
            fn am_max_payload(&self) -> usize {
                1
            }
            fn am_send(&mut self, d: Gpid, h: HandlerId, hd: &[u8], p: &[&[u8]]) -> Result<()> {
                self.0.am_send(d, h, hd, p)
            }
            fn am_poll<K: AmSink>(&mut self, sink: &mut K, budget: usize) -> Result<usize> {
                self.0.am_poll(sink, budget)
            }
            fn peer_state(&self, _: Gpid) -> PeerState {
                PeerState::Failed
            }
        }
        let mut t = Shuffled::new(Dead(Queue::default()), 0);
        for i in 0..40u8 {
            t.am_send(2, 1, &[i], &[]).unwrap();
        }
        let mut rec = Record(Vec::new());
        t.am_poll(&mut rec, 64).unwrap();
        if t.held() > 0 {
            assert!(!t.peer_failed(2));
        }
        assert!(t.peer_failed(1));
        while t.held() > 0 {
            t.am_poll(&mut rec, 64).unwrap();
        }
        assert!(t.peer_failed(2));
    }
}

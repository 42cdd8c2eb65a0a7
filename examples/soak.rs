//! The soak: millions of messages of random sizes, tags and wildcards among all ranks, from
//! several threads per rank at `MPI_THREAD_MULTIPLE`, each checked for order and content, while
//! every rank samples its resident memory. Exit code 0 means nothing was lost, duplicated,
//! reordered or corrupted and memory stayed flat after warm-up; anything else prints what was
//! wrong and exits nonzero.
//!
//! ```text
//! ch4run -n 4 target/release/examples/soak -- [-m messages] [-t threads] [-b batch]
//!     [--max-size bytes] [--seed s] [--rss-every-ms ms] [--warmup-pct p] [--stall-secs s]
//!     [--rss-slack-kib k] [--rss-slack-pct p] [--label name]
//! ```
//!
//! Started alone it launches itself as 4 ranks (`CH4_NP` overrides). `CH4_NODE_SIZE=1` makes
//! every rank its own node, so every message crosses the netmod; `CH4_NUM_VCIS` sets the VCIs.
//! `scripts/soak.sh` runs it on every route and prints one table.
//!
//! # Traffic
//!
//! Thread `t` of every rank owns communicator `t` (a dup of the world placed on VCI `t mod
//! VCIs`, so with more threads than VCIs some threads share one) and runs rounds on it. In a
//! round it starts `batch` nonblocking sends (a few synchronous) — one to every rank, itself
//! included, then random destinations — and receives, one at a time, every message the round
//! sends to it. Who sends what is a pure function of (seed, thread, sender, round), so every
//! receiver derives what each sender sends it: destination, tag, size and a sequence number per
//! (sender, receiver, communicator). The payload is a function of those (its first 8 bytes are
//! the sequence number when it has 8), so every byte is checked.
//!
//! Each receive targets a random message of the round still to come and asks for it by a random
//! pattern that matches it: exact, `(src, ANY_TAG)`, `(ANY_SOURCE, tag)` or `(ANY_SOURCE,
//! ANY_TAG)`, received directly or through a matched probe. A wildcard may legitimately take
//! another message; MPI's non-overtaking rule (MPI 4.1 §3.5: two messages of one sender that
//! both match a receive are received in the order sent) still fixes which one per sender: the
//! earliest message of the actual sender, not yet received, that the pattern matches. That is
//! what is checked, so wildcards check order too. Tags carry the round's parity and every
//! sender sends to every rank each round, so no rank is more than one round ahead of another
//! and a tag-specific receive never meets another round's message; `(src, ANY_TAG)` meets its
//! sender's earliest; only `(ANY_SOURCE, ANY_TAG)` may take a message of the next round, which
//! the receiver knows too (it keeps one round ahead of every sender's schedule).
//!
//! At the end every rank's sent and received counts per peer are summed across the job (lost =
//! sent but never received), each communicator is probed for anything left over (a message
//! delivered twice), and the resident-memory samples (`VmRSS` of `/proc/self/status`, every
//! `--rss-every-ms` on a watchdog thread) give three figures per rank: after warm-up (the first
//! sample once `--warmup-pct` of the rounds are done), the largest of the last quarter, and at
//! the end. Growth beyond `--rss-slack-kib` and `--rss-slack-pct` of the warm value fails the
//! run. The same thread ends the job with what each thread was waiting for if no message
//! arrives for `--stall-secs` (a lost message shows as such a stall).

use std::collections::VecDeque;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ch4::{
    Communicator, Context, Error, ErrorKind, Multiple, Netmod, Rank, Result, Shm, Tag, ANY_SOURCE,
    ANY_TAG,
};

/// What a run does.
#[derive(Clone, Debug)]
struct Options {
    messages: u64,
    threads: usize,
    batch: usize,
    max_size: usize,
    seed: u64,
    rss_every: Duration,
    warmup_pct: u64,
    stall: Duration,
    rss_slack_kib: u64,
    rss_slack_pct: f64,
    label: Option<String>,
    /// A fault the run makes on purpose, to show that the checks catch it.
    fault: Option<Fault>,
}

/// `--break`: rank 0's thread 0 spoils its second round, so that a test can see the soak fail.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Fault {
    /// One byte of a message is flipped.
    Corrupt,
    /// Two messages to one receiver with one tag are sent in each other's place.
    Reorder,
    /// A message is not sent at all (its receiver stalls).
    Drop,
}

fn usage() -> &'static str {
    "usage: soak [-m messages] [-t threads] [-b batch] [--max-size bytes] [--seed s] \
     [--rss-every-ms ms] [--warmup-pct p] [--stall-secs s] [--rss-slack-kib k] \
     [--rss-slack-pct p] [--label name] [--break corrupt|reorder|drop]"
}

/// A count written as digits or as `1e7`.
fn count(v: &str) -> std::result::Result<u64, String> {
    if let Ok(n) = v.parse::<u64>() {
        return Ok(n);
    }
    match v.parse::<f64>() {
        Ok(f) if (0.0..1.8e19).contains(&f) && f.fract() == 0.0 => Ok(f as u64),
        _ => Err(format!("not a count: {v}\n{}", usage())),
    }
}

fn parse() -> std::result::Result<Options, String> {
    let mut o = Options {
        messages: 1_000_000,
        threads: 4,
        batch: 64,
        max_size: 1 << 20,
        seed: 1,
        rss_every: Duration::from_millis(1000),
        warmup_pct: 20,
        stall: Duration::from_secs(120),
        rss_slack_kib: 16 << 10,
        rss_slack_pct: 10.0,
        label: None,
        fault: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || {
            args.next()
                .ok_or_else(|| format!("{a} needs a value\n{}", usage()))
        };
        match a.as_str() {
            "-m" => o.messages = count(&value()?)?,
            "-t" => o.threads = count(&value()?)? as usize,
            "-b" => o.batch = count(&value()?)? as usize,
            "--max-size" => o.max_size = count(&value()?)? as usize,
            "--seed" => o.seed = count(&value()?)?,
            "--rss-every-ms" => o.rss_every = Duration::from_millis(count(&value()?)?.max(1)),
            "--warmup-pct" => o.warmup_pct = count(&value()?)?.min(90),
            "--stall-secs" => o.stall = Duration::from_secs(count(&value()?)?.max(1)),
            "--rss-slack-kib" => o.rss_slack_kib = count(&value()?)?,
            "--rss-slack-pct" => {
                let v = value()?;
                o.rss_slack_pct = v
                    .parse::<f64>()
                    .ok()
                    .filter(|p| p.is_finite() && *p >= 0.0)
                    .ok_or_else(|| format!("not a percentage: {v}\n{}", usage()))?;
            }
            "--label" => o.label = Some(value()?),
            "--break" => {
                o.fault = Some(match value()?.as_str() {
                    "corrupt" => Fault::Corrupt,
                    "reorder" => Fault::Reorder,
                    "drop" => Fault::Drop,
                    other => return Err(format!("--break: corrupt, reorder or drop, not {other}")),
                })
            }
            "-h" | "--help" => return Err(usage().to_string()),
            other => return Err(format!("unknown option {other}\n{}", usage())),
        }
    }
    if o.threads == 0 || o.threads > 64 {
        return Err(format!("-t: 1 to 64 threads, not {}", o.threads));
    }
    if o.max_size > 1 << 30 {
        return Err(format!("--max-size: at most 1 GiB, not {}", o.max_size));
    }
    Ok(o)
}

// ------------------------------------------------------------------------------ the schedule

/// SplitMix64: a tiny deterministic generator, so senders and receivers derive the same stream.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        let mut r = Rng(seed);
        r.next();
        r
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A value in `0..n` (`n` > 0).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// A value in `lo..=hi`.
    fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
}

/// Mixes a few numbers into one well-spread key.
fn mix(parts: &[u64]) -> u64 {
    let mut h = 0x243F_6A88_85A3_08D3u64;
    for &p in parts {
        h = Rng::new(h ^ p).next();
    }
    h
}

/// One message of a sender's round.
#[derive(Clone, Copy, Debug)]
struct Planned {
    dest: Rank,
    tag: Tag,
    size: usize,
    synchronous: bool,
}

/// What the job agrees on: the schedule's inputs.
#[derive(Clone, Copy)]
struct Plan {
    seed: u64,
    ranks: Rank,
    batch: usize,
    max_size: usize,
    /// A round's payload bytes per sender stay within this (so the sender's buffer is fixed).
    budget: usize,
    tag_ub: Tag,
}

/// Tags of a round: small ones mostly, now and then one near the top; the low bit is the
/// round's parity.
fn tag_of(r: &mut Rng, round: u64, tag_ub: Tag) -> Tag {
    let x = if r.below(32) == 0 {
        ((tag_ub - 1) / 2 - r.below(4) as Tag).max(0)
    } else {
        r.below(8) as Tag
    };
    2 * x + (round & 1) as Tag
}

/// Sizes skewed to small: 0 B now and then, mostly up to 64 B, some across the eager limits
/// (32 KiB for shared memory, 64 KiB for TCP), a few up to the largest.
fn size_of(r: &mut Rng, max: usize) -> usize {
    let max = max as u64;
    let pick = r.below(1000);
    let s = match pick {
        0..=19 => 0,
        20..=599 => r.between(1, 64),
        600..=849 => r.between(65, 2048),
        850..=949 => r.between(2049, 32 << 10),
        950..=997 => r.between((32 << 10) + 1, 128 << 10),
        _ => r.between((128 << 10) + 1, max.max((128 << 10) + 1)),
    };
    s.min(max) as usize
}

impl Plan {
    /// Sender `src`'s round `round` on communicator `t`, into `out`.
    fn round(&self, t: usize, src: Rank, round: u64, out: &mut Vec<Planned>) {
        out.clear();
        let mut r = Rng::new(mix(&[self.seed, t as u64, src as u64, round, 1]));
        let mut dests: Vec<Rank> = (0..self.ranks).collect();
        while dests.len() < self.batch.max(self.ranks as usize) {
            dests.push(r.below(self.ranks as u64) as Rank);
        }
        // Fisher-Yates, so the fixed one-to-every-rank messages fall anywhere in the round.
        for i in (1..dests.len()).rev() {
            dests.swap(i, r.below(i as u64 + 1) as usize);
        }
        let mut used = 0usize;
        for dest in dests {
            let tag = tag_of(&mut r, round, self.tag_ub);
            let mut size = size_of(&mut r, self.max_size);
            if used + size > self.budget {
                size %= 65;
            }
            used += size;
            let synchronous = r.below(50) == 0;
            out.push(Planned {
                dest,
                tag,
                size,
                synchronous,
            });
        }
    }
}

/// The payload's key: every byte of a message follows from its sender, thread, receiver and
/// sequence number.
fn key(seed: u64, src: Rank, t: usize, dest: Rank, seq: u64) -> u64 {
    mix(&[seed, src as u64, t as u64, dest as u64, seq, 2])
}

const STEP: u64 = 0x9E37_79B9_7F4A_7C15;

/// Writes message `seq`'s bytes: the sequence number first (8 bytes and up), then words of a
/// sequence that starts at `key`; shorter messages are `key`'s low bytes.
fn fill(buf: &mut [u8], key: u64, seq: u64) {
    if buf.len() < 8 {
        let k = key.to_le_bytes();
        buf.copy_from_slice(&k[..buf.len()]);
        return;
    }
    buf[..8].copy_from_slice(&seq.to_le_bytes());
    let mut w = key;
    let mut chunks = buf[8..].chunks_exact_mut(8);
    for c in &mut chunks {
        c.copy_from_slice(&w.to_le_bytes());
        w = w.wrapping_add(STEP);
    }
    let rest = chunks.into_remainder();
    let n = rest.len();
    rest.copy_from_slice(&w.to_le_bytes()[..n]);
}

/// Whether `buf` holds exactly what [`fill`] writes.
fn holds(buf: &[u8], key: u64, seq: u64) -> bool {
    if buf.len() < 8 {
        return buf == &key.to_le_bytes()[..buf.len()];
    }
    if buf[..8] != seq.to_le_bytes() {
        return false;
    }
    let mut w = key;
    let mut chunks = buf[8..].chunks_exact(8);
    let mut same = true;
    for c in &mut chunks {
        same &= u64::from_le_bytes(c.try_into().unwrap_or([0; 8])) == w;
        w = w.wrapping_add(STEP);
    }
    let rest = chunks.remainder();
    same && rest == &w.to_le_bytes()[..rest.len()]
}

// ------------------------------------------------------------------------ shared counters

/// What one thread is doing, for the watchdog's report.
#[derive(Default)]
struct ThreadState {
    round: AtomicU64,
    /// 0 sending, 1 receiving, 2 waiting for its sends, 3 done.
    phase: AtomicU64,
    want_src: AtomicI64,
    want_tag: AtomicI64,
    target_src: AtomicI64,
    target_seq: AtomicI64,
}

/// One rank's counters, shared by its threads and the watchdog.
struct Counters {
    received: AtomicU64,
    rounds_done: AtomicU64,
    misordered: AtomicU64,
    corrupt: AtomicU64,
    extra: AtomicU64,
    bytes: AtomicU64,
    sent_to: Vec<AtomicU64>,
    received_from: Vec<AtomicU64>,
    threads: Vec<ThreadState>,
    done: AtomicBool,
    /// The first few problems, printed at the end.
    problems: Mutex<Vec<String>>,
}

impl Counters {
    fn problem(&self, what: String) {
        if let Ok(mut p) = self.problems.lock() {
            if p.len() < 20 {
                eprintln!("soak: {what}");
                p.push(what);
            }
        }
    }
}

// -------------------------------------------------------------------------- the receiver

/// A message a receiver expects from one sender.
#[derive(Clone, Copy, Debug)]
struct Expect {
    round: u64,
    tag: Tag,
    size: usize,
    seq: u64,
    received: bool,
}

/// A receiving thread's view of what each sender still owes it.
struct Inbox {
    /// Per sender, in the order sent; received ones are dropped from the front.
    from: Vec<VecDeque<Expect>>,
    next_seq: Vec<u64>,
    /// Rounds of every sender's schedule already added.
    rounds_known: u64,
    /// Messages of the current round not yet received.
    remaining: usize,
}

impl Inbox {
    /// Adds every sender's round `round` to what is expected.
    fn learn_round(
        &mut self,
        plan: &Plan,
        t: usize,
        me: Rank,
        round: u64,
        scratch: &mut Vec<Planned>,
    ) {
        for src in 0..plan.ranks {
            plan.round(t, src, round, scratch);
            for m in scratch.iter().filter(|m| m.dest == me) {
                let seq = self.next_seq[src as usize];
                self.next_seq[src as usize] += 1;
                self.from[src as usize].push_back(Expect {
                    round,
                    tag: m.tag,
                    size: m.size,
                    seq,
                    received: false,
                });
            }
        }
        self.rounds_known = round + 1;
    }

    /// The `n`-th message of round `round` not yet received: (sender, tag).
    fn nth_waiting(&self, round: u64, mut n: usize) -> Option<(Rank, Tag, u64)> {
        for (src, q) in self.from.iter().enumerate() {
            for e in q.iter().filter(|e| e.round == round && !e.received) {
                if n == 0 {
                    return Some((src as Rank, e.tag, e.seq));
                }
                n -= 1;
            }
        }
        None
    }

    fn mark(&mut self, src: usize, i: usize, round: u64) {
        let e = &mut self.from[src][i];
        e.received = true;
        if e.round == round {
            self.remaining -= 1;
        }
        while self.from[src].front().is_some_and(|e| e.received) {
            self.from[src].pop_front();
        }
    }
}

/// One thread's rounds on its communicator.
#[allow(clippy::too_many_arguments)]
fn run_thread<N: Netmod + Send, S: Shm + Send>(
    ctx: &Context<N, S, Multiple>,
    comm: &Communicator<N, S, Multiple>,
    t: usize,
    plan: &Plan,
    rounds: u64,
    c: &Counters,
    fault: Option<Fault>,
) -> Result<()> {
    let me = comm.rank();
    let ranks = plan.ranks as usize;
    let st = &c.threads[t];
    // A message that would pass the budget is cut to under 65 bytes: room for those too.
    let mut arena = vec![0u8; plan.budget + 64 * (plan.batch + ranks)];
    let mut recv_buf = vec![0u8; plan.max_size.max(8)];
    // Touch every page now, so the buffers count in the warm figure, not as growth.
    arena.iter_mut().step_by(4096).for_each(|b| *b = 1);
    recv_buf.iter_mut().step_by(4096).for_each(|b| *b = 1);
    let mut mine = Vec::with_capacity(plan.batch + ranks);
    let mut scratch = Vec::with_capacity(plan.batch + ranks);
    let mut send_seq = vec![0u64; ranks];
    let mut inbox = Inbox {
        from: (0..ranks).map(|_| VecDeque::new()).collect(),
        next_seq: vec![0; ranks],
        rounds_known: 0,
        remaining: 0,
    };
    let mut choose = Rng::new(mix(&[plan.seed, t as u64, me as u64, 3]));
    let mut spans = Vec::with_capacity(plan.batch + ranks);
    for round in 0..rounds {
        st.round.store(round, Relaxed);
        st.phase.store(0, Relaxed);
        // This round's sends, their bytes laid out one after another in the arena.
        plan.round(t, me, round, &mut mine);
        spans.clear();
        let mut off = 0;
        for m in &mine {
            let d = m.dest as usize;
            let seq = send_seq[d];
            send_seq[d] += 1;
            fill(
                &mut arena[off..off + m.size],
                key(plan.seed, me, t, m.dest, seq),
                seq,
            );
            spans.push((off, m.size));
            off += m.size;
            c.sent_to[d].fetch_add(1, Relaxed);
        }
        let mut skip = usize::MAX;
        if me == 0 && t == 0 && round == 1 {
            skip = spoil(fault, &mine, &mut spans, &mut arena);
        }
        // Every sender's schedule one round ahead: a (ANY_SOURCE, ANY_TAG) receive may take a
        // message of the next round.
        while inbox.rounds_known <= (round + 1).min(rounds - 1) {
            let r = inbox.rounds_known;
            inbox.learn_round(plan, t, me, r, &mut scratch);
        }
        inbox.remaining = inbox
            .from
            .iter()
            .flat_map(|q| q.iter())
            .filter(|e| e.round == round && !e.received)
            .count();
        let arena_ref: &[u8] = &arena;
        ctx.scope(|s| -> Result<()> {
            let mut reqs = Vec::with_capacity(mine.len());
            for (i, (m, &(off, len))) in mine.iter().zip(&spans).enumerate() {
                if i == skip {
                    continue;
                }
                let buf = &arena_ref[off..off + len];
                reqs.push(if m.synchronous {
                    comm.issend(s, buf, m.dest, m.tag)?
                } else {
                    comm.isend(s, buf, m.dest, m.tag)?
                });
            }
            st.phase.store(1, Relaxed);
            while inbox.remaining > 0 {
                let n = choose.below(inbox.remaining as u64) as usize;
                let Some((src, tag, seq)) = inbox.nth_waiting(round, n) else {
                    break;
                };
                let how = choose.below(10);
                let want_src = if how < 6 { src } else { ANY_SOURCE };
                let want_tag = if how % 3 != 2 { tag } else { ANY_TAG };
                st.want_src.store(want_src as i64, Relaxed);
                st.want_tag.store(want_tag as i64, Relaxed);
                st.target_src.store(src as i64, Relaxed);
                st.target_seq.store(seq as i64, Relaxed);
                let status = if choose.below(10) == 0 {
                    let (msg, _) = comm.mprobe(want_src, want_tag)?;
                    msg.recv(&mut recv_buf)?
                } else {
                    comm.recv(&mut recv_buf, want_src, want_tag)?
                };
                check(
                    c, plan, t, me, round, &mut inbox, want_src, want_tag, &status, &recv_buf,
                );
            }
            st.phase.store(2, Relaxed);
            s.wait_all(reqs).map(drop)
        })?;
        c.rounds_done.fetch_add(1, Relaxed);
    }
    st.phase.store(3, Relaxed);
    Ok(())
}

/// Makes `fault` in a filled round (`--break`); returns the index of a message not to send.
fn spoil(
    fault: Option<Fault>,
    mine: &[Planned],
    spans: &mut [(usize, usize)],
    arena: &mut [u8],
) -> usize {
    match fault {
        Some(Fault::Corrupt) => {
            if let Some(&(off, len)) = spans.iter().find(|(_, len)| *len > 8) {
                arena[off + len - 1] ^= 0x5a;
            }
        }
        Some(Fault::Reorder) => {
            // Two messages to one receiver with one tag, of different sizes or numbers: the
            // receiver's matching receive must see the first first.
            for i in 0..mine.len() {
                let j = (i + 1..mine.len()).find(|&j| {
                    mine[j].dest == mine[i].dest
                        && mine[j].tag == mine[i].tag
                        && mine[i].size + mine[j].size > 0
                });
                if let Some(j) = j {
                    spans.swap(i, j);
                    return usize::MAX;
                }
            }
        }
        Some(Fault::Drop) => {
            return mine.iter().position(|m| m.dest != 0).unwrap_or(usize::MAX);
        }
        None => {}
    }
    usize::MAX
}

/// Checks one received message against the non-overtaking rule and its bytes, and marks it.
#[allow(clippy::too_many_arguments)]
fn check(
    c: &Counters,
    plan: &Plan,
    t: usize,
    me: Rank,
    round: u64,
    inbox: &mut Inbox,
    want_src: Rank,
    want_tag: Tag,
    st: &ch4::Status,
    buf: &[u8],
) {
    c.received.fetch_add(1, Relaxed);
    c.bytes.fetch_add(st.bytes as u64, Relaxed);
    let where_ = || {
        format!(
            "rank {me} thread {t} round {round}: receive ({want_src}, {want_tag}) got source {} tag {} {} B",
            st.source, st.tag, st.bytes
        )
    };
    if st.source < 0
        || st.source >= plan.ranks
        || (want_src != ANY_SOURCE && st.source != want_src)
        || (want_tag != ANY_TAG && st.tag != want_tag)
    {
        c.corrupt.fetch_add(1, Relaxed);
        c.problem(format!("{}: does not match the receive", where_()));
        return;
    }
    let src = st.source as usize;
    c.received_from[src].fetch_add(1, Relaxed);
    let data = &buf[..st.bytes.min(buf.len())];
    let carried =
        (st.bytes >= 8).then(|| u64::from_le_bytes(data[..8].try_into().unwrap_or([0; 8])));
    let same = |e: &Expect| {
        !e.received && e.tag == st.tag && e.size == st.bytes && carried.map_or(true, |q| q == e.seq)
    };
    let q = &inbox.from[src];
    // MPI's rule: the earliest message of this sender not yet received that the receive matches.
    let expected = q
        .iter()
        .position(|e| !e.received && (want_tag == ANY_TAG || e.tag == want_tag));
    match expected {
        Some(i) if same(&q[i]) => {
            let e = q[i];
            if !holds(data, key(plan.seed, st.source, t, me, e.seq), e.seq) {
                c.corrupt.fetch_add(1, Relaxed);
                c.problem(format!(
                    "{}: bytes of message {} are wrong",
                    where_(),
                    e.seq
                ));
            }
            inbox.mark(src, i, round);
        }
        _ => {
            let want = expected.map(|i| q[i]);
            // Which message came instead: one still owed whose bytes it has.
            let found = q.iter().position(|e| {
                same(e) && holds(data, key(plan.seed, st.source, t, me, e.seq), e.seq)
            });
            match found {
                Some(i) => {
                    c.misordered.fetch_add(1, Relaxed);
                    c.problem(format!(
                        "{}: message {} (round {}) overtook {want:?}",
                        where_(),
                        q[i].seq,
                        q[i].round
                    ));
                    inbox.mark(src, i, round);
                }
                None => {
                    c.corrupt.fetch_add(1, Relaxed);
                    c.problem(format!(
                        "{}: no message owed looks like it (sequence {carried:?}); expected {want:?}",
                        where_()
                    ));
                }
            }
        }
    }
}

// ----------------------------------------------------------------- memory and the watchdog

/// This process's resident memory in KiB (`VmRSS`), or 0 where /proc says nothing.
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// One resident-memory sample: the share of rounds done (per mille) and KiB.
#[derive(Clone, Copy, Debug)]
struct Sample {
    done_permille: u64,
    kib: u64,
}

/// Samples memory until the threads are done, and ends the job if nothing arrives for the
/// stall time (printing what every thread waited for).
fn watch(c: &Counters, o: &Options, total_rounds: u64, me: Rank) -> Vec<Sample> {
    let mut samples = Vec::new();
    let permille = || c.rounds_done.load(Relaxed) * 1000 / total_rounds.max(1);
    let mut last_sample = Instant::now();
    let mut warm_taken = false;
    let mut last_received = u64::MAX;
    let mut last_change = Instant::now();
    let mut last_progress = Instant::now();
    samples.push(Sample {
        done_permille: 0,
        kib: rss_kib(),
    });
    while !c.done.load(Relaxed) {
        std::thread::sleep(Duration::from_millis(10));
        let p = permille();
        let crossed = !warm_taken && p >= o.warmup_pct * 10;
        if crossed || last_sample.elapsed() >= o.rss_every {
            warm_taken |= crossed;
            samples.push(Sample {
                done_permille: p,
                kib: rss_kib(),
            });
            last_sample = Instant::now();
        }
        let r = c.received.load(Relaxed);
        if me == 0 && last_progress.elapsed() >= Duration::from_secs(60) {
            last_progress = Instant::now();
            eprintln!(
                "soak: rank 0: {:.1}% of its rounds done, {r} messages received, RSS {} KiB",
                p as f64 / 10.0,
                samples.last().map_or(0, |s| s.kib)
            );
        }
        if r != last_received {
            last_received = r;
            last_change = Instant::now();
        } else if last_change.elapsed() >= o.stall {
            eprintln!(
                "soak: rank {me}: no message for {} s ({r} received, {} misordered, {} corrupt); threads:",
                o.stall.as_secs(),
                c.misordered.load(Relaxed),
                c.corrupt.load(Relaxed)
            );
            for (t, s) in c.threads.iter().enumerate() {
                eprintln!(
                    "  thread {t}: round {} phase {} ({}), receive ({}, {}) aiming at message {} of {}",
                    s.round.load(Relaxed),
                    s.phase.load(Relaxed),
                    ["sending", "receiving", "waiting for its sends", "done"]
                        [s.phase.load(Relaxed).min(3) as usize],
                    s.want_src.load(Relaxed),
                    s.want_tag.load(Relaxed),
                    s.target_seq.load(Relaxed),
                    s.target_src.load(Relaxed),
                );
            }
            eprintln!("soak: FAIL: stalled (a lost message or a hang)");
            std::process::exit(3);
        }
    }
    samples.push(Sample {
        done_permille: 1000,
        kib: rss_kib(),
    });
    samples
}

/// (after warm-up, largest of the last quarter, at the end) in KiB.
fn rss_figures(samples: &[Sample], warmup_pct: u64) -> [u64; 3] {
    let end = samples.last().map_or(0, |s| s.kib);
    let warm = samples
        .iter()
        .find(|s| s.done_permille >= warmup_pct * 10)
        .map_or(end, |s| s.kib);
    let last_quarter = samples
        .iter()
        .filter(|s| s.done_permille >= 750)
        .map(|s| s.kib)
        .max()
        .unwrap_or(end);
    [warm, last_quarter, end]
}

// ------------------------------------------------------------------------------ the run

/// `T`'s name without module paths (`AnyNetmod<TcpNetmod>`), for the report's first line.
fn short_type_name<T>() -> String {
    let full = std::any::type_name::<T>();
    let mut out = String::new();
    for (i, part) in full.split(['<', '>', ',']).enumerate() {
        if i > 0 {
            // The separator that preceded this part.
            let at = full
                .match_indices(['<', '>', ','])
                .nth(i - 1)
                .map_or("", |(_, sep)| sep);
            out.push_str(at);
        }
        let part = part.trim();
        out.push_str(part.rsplit("::").next().unwrap_or(part));
    }
    out
}

/// Everything a rank reports, summed or gathered across the job.
fn body<N: Netmod + Send, S: Shm + Send>(
    ctx: &Context<N, S, Multiple>,
    o: &Options,
) -> Result<bool> {
    let world = ctx.world();
    let (me, ranks) = (world.rank(), world.size());
    let vcis = ctx.vcis();
    let plan = Plan {
        seed: o.seed,
        ranks,
        batch: o.batch.max(ranks as usize),
        max_size: o.max_size,
        budget: (4usize << 20).max(2 * o.max_size).max(o.batch * (8 << 10)),
        tag_ub: ctx.tag_ub()?,
    };
    let per_round = (plan.batch * ranks as usize * o.threads) as u64;
    let rounds = o.messages.div_ceil(per_round).max(1);
    let comms = (0..o.threads)
        .map(|t| world.dup_on_vci(t % vcis))
        .collect::<Result<Vec<_>>>()?;
    let c = Counters {
        received: AtomicU64::new(0),
        rounds_done: AtomicU64::new(0),
        misordered: AtomicU64::new(0),
        corrupt: AtomicU64::new(0),
        extra: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
        sent_to: (0..ranks).map(|_| AtomicU64::new(0)).collect(),
        received_from: (0..ranks).map(|_| AtomicU64::new(0)).collect(),
        threads: (0..o.threads).map(|_| ThreadState::default()).collect(),
        done: AtomicBool::new(false),
        problems: Mutex::new(Vec::new()),
    };
    let label = o.label.clone().unwrap_or_else(|| short_type_name::<N>());
    if me == 0 {
        println!(
            "soak: {label}: {ranks} ranks x {} threads ({vcis} VCIs), {} rounds of {} messages a thread, sizes 0 B-{} B, seed {}",
            o.threads, rounds, plan.batch, o.max_size, o.seed
        );
    }
    world.barrier()?;
    let start = Instant::now();
    let (outcome, samples) = std::thread::scope(|s| {
        let watchdog = s.spawn(|| watch(&c, o, rounds * o.threads as u64, me));
        let workers: Vec<_> = comms
            .iter()
            .enumerate()
            .map(|(t, comm)| {
                let (c, plan) = (&c, &plan);
                s.spawn(move || run_thread(ctx, comm, t, plan, rounds, c, o.fault))
            })
            .collect();
        let outcome: Result<()> = workers.into_iter().try_for_each(|w| {
            w.join()
                .unwrap_or_else(|_| Err(Error::new(ErrorKind::Internal, "a soak thread panicked")))
        });
        c.done.store(true, Relaxed);
        let samples = watchdog.join().unwrap_or_default();
        (outcome, samples)
    });
    outcome?;
    let elapsed = start.elapsed().as_secs_f64();
    world.barrier()?;
    // Anything still there was delivered twice (or sent by nobody).
    for comm in &comms {
        let until = Instant::now() + Duration::from_millis(50);
        while Instant::now() < until {
            match comm.iprobe(ANY_SOURCE, ANY_TAG)? {
                Some(st) => {
                    c.extra.fetch_add(1, Relaxed);
                    c.problem(format!(
                        "rank {me}: a message left over after the end: source {} tag {} {} B",
                        st.source, st.tag, st.bytes
                    ));
                    let mut sink = vec![0u8; st.bytes];
                    comm.recv(&mut sink, st.source, st.tag)?;
                }
                None => std::thread::yield_now(),
            }
        }
    }
    world.barrier()?;

    // Totals: sent[s][d] against received[d][s], summed over the job.
    let n = ranks as usize;
    let mut sent = vec![0u64; n * n];
    let mut got = vec![0u64; n * n];
    for p in 0..n {
        sent[me as usize * n + p] = c.sent_to[p].load(Relaxed);
        got[p * n + me as usize] = c.received_from[p].load(Relaxed);
    }
    let (mut sent_all, mut got_all) = (vec![0u64; n * n], vec![0u64; n * n]);
    world.allreduce(&sent, &mut sent_all, ch4::op::sum)?;
    world.allreduce(&got, &mut got_all, ch4::op::sum)?;
    let lost: u64 = sent_all
        .iter()
        .zip(&got_all)
        .map(|(s, g)| s.saturating_sub(*g))
        .sum();
    let too_many: u64 = sent_all
        .iter()
        .zip(&got_all)
        .map(|(s, g)| g.saturating_sub(*s))
        .sum();
    let mine = [
        c.misordered.load(Relaxed),
        c.corrupt.load(Relaxed),
        c.extra.load(Relaxed),
        c.bytes.load(Relaxed),
    ];
    let mut all = [0u64; 4];
    world.allreduce(&mine, &mut all, ch4::op::sum)?;
    let [misordered, corrupt, extra, bytes] = all;
    let extra = extra + too_many;
    let mut time = [0f64];
    world.allreduce(&[elapsed], &mut time, ch4::op::max)?;
    let rss = rss_figures(&samples, o.warmup_pct);
    let mut rss_all = vec![0u64; 3 * n];
    world.allgather(&rss, &mut rss_all)?;
    let messages: u64 = sent_all.iter().sum();

    // The verdict (every rank computes the same one).
    let mut wrong = Vec::new();
    for (what, v) in [
        ("lost", lost),
        ("misordered", misordered),
        ("corrupt", corrupt),
        ("extra", extra),
    ] {
        if v > 0 {
            wrong.push(format!("{v} {what}"));
        }
    }
    let mut worst_growth = (0i64, 0f64);
    for r in 0..n {
        let [warm, last_quarter, end] = [rss_all[3 * r], rss_all[3 * r + 1], rss_all[3 * r + 2]];
        let growth = last_quarter.max(end) as i64 - warm as i64;
        let pct = 100.0 * growth as f64 / warm.max(1) as f64;
        if growth > worst_growth.0 {
            worst_growth = (growth, pct);
        }
        if growth > o.rss_slack_kib as i64 && pct > o.rss_slack_pct {
            wrong.push(format!(
                "rank {r} grew {growth} KiB ({pct:.1}%) after warm-up"
            ));
        }
        if me == 0 {
            println!(
                "soak: rank {r}: RSS {warm} KiB after warm-up, {last_quarter} KiB largest of the last quarter, {end} KiB at the end: {growth:+} KiB ({pct:+.1}%)"
            );
        }
    }
    let max_of = |k: usize| (0..n).map(|r| rss_all[3 * r + k]).max().unwrap_or(0);
    if me == 0 {
        println!(
            "soak: result: netmod={label} ranks={ranks} threads={} vcis={vcis} messages={messages} bytes={bytes} time_s={:.2} msgs_per_s={:.0} lost={lost} misordered={misordered} corrupt={corrupt} extra={extra} rss_warm_kib={} rss_end_kib={} rss_lastq_kib={} growth_kib={} growth_pct={:.1} verdict={}",
            o.threads,
            time[0],
            messages as f64 / time[0].max(1e-9),
            max_of(0),
            max_of(2),
            max_of(1),
            worst_growth.0,
            worst_growth.1,
            if wrong.is_empty() { "ok".to_string() } else { format!("FAIL({})", wrong.join(", ")) }
        );
    }
    if !wrong.is_empty() && me == 0 {
        eprintln!("soak: FAIL: {}", wrong.join(", "));
    }
    for comm in comms {
        comm.free()?;
    }
    Ok(wrong.is_empty())
}

fn main() -> ExitCode {
    ch4::log::init();
    let o = match parse() {
        Ok(o) => o,
        Err(msg) => {
            eprintln!("{msg}");
            return ExitCode::from(2);
        }
    };
    let run = || -> Result<bool> {
        let universe = ch4::process::init_or_launch_at(4, Multiple)?;
        let ok = body(universe.context(), &o)?;
        universe.finalize()?;
        Ok(ok)
    };
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("soak: {e}");
            ExitCode::FAILURE
        }
    }
}

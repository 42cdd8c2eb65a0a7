//! What the OSU-style programs share: OSU's options and output format, the benchmark loops, and
//! the small point-to-point interface they are written against ([`Pt2Pt`]), so that the very
//! same loops measure ch4 and — built with `--features peer-mpi` — the system's MPI through the
//! `mpi` crate (rsmpi). Each program is a few lines of `main` around one loop from here.
//!
//! The loops follow the OSU micro-benchmarks (v5-v7): a barrier before each size, `-x` warm-up
//! iterations that are not timed, messages above 8 KiB timed over a tenth of the iterations.
//! One difference is forced by safe Rust: a window of pending receives needs distinct buffers
//! (OSU lets all 64 receives of a window write one buffer), so receivers cycle through `-W`
//! buffers; the C peers in `scripts/peers/` do the same.

#![allow(dead_code)] // each program uses part of this module

use std::time::Instant;

#[cfg(not(feature = "peer-mpi"))]
mod ch4_backend;
#[cfg(feature = "peer-mpi")]
mod mpi_backend;

#[cfg(not(feature = "peer-mpi"))]
use ch4_backend::launch;
#[cfg(not(feature = "peer-mpi"))]
#[allow(unused_imports)] // the flood program's; the OSU programs use `launch`
pub use ch4_backend::run_job;
#[cfg(feature = "peer-mpi")]
use mpi_backend::launch;
#[cfg(feature = "peer-mpi")]
#[allow(unused_imports)] // the flood program's; the OSU programs use `launch`
pub use mpi_backend::run_job;

/// A whole program run on every rank over either backend (the flood bench), written once
/// against [`Pt2Pt`].
pub trait Job: Sync {
    /// Runs this rank's part.
    fn run<C: Pt2Pt>(&self, c: &C) -> BenchResult<()>;
}

/// Errors of either backend.
pub type BenchError = Box<dyn std::error::Error + Send + Sync>;
/// Results of the benchmark loops.
pub type BenchResult<T> = Result<T, BenchError>;

/// The point-to-point operations the OSU loops use; implemented by ch4's communicator and by
/// rsmpi's. Buffers are bytes; tags small integers.
pub trait Pt2Pt {
    /// This process's rank.
    fn rank(&self) -> usize;
    /// Ranks in the job.
    fn size(&self) -> usize;
    /// MPI_Barrier.
    fn barrier(&self) -> BenchResult<()>;
    /// Blocking standard send.
    fn send(&self, buf: &[u8], dest: usize, tag: i32) -> BenchResult<()>;
    /// Blocking receive of exactly `buf.len()` bytes at most.
    fn recv(&self, buf: &mut [u8], src: usize, tag: i32) -> BenchResult<()>;
    /// Blocking receive from any source with any tag; returns (source, tag).
    fn recv_any(&self, buf: &mut [u8]) -> BenchResult<(usize, i32)>;
    /// OSU's send window: `count` nonblocking sends of `buf` to `dest`, then wait for all.
    fn send_window(&self, buf: &[u8], count: usize, dest: usize, tag: i32) -> BenchResult<()>;
    /// A nonblocking send of each of `msgs` to `dest`, message `i` with tag `tags[i]`, then
    /// wait for all.
    fn send_each(&self, msgs: &[Vec<u8>], dest: usize, tags: &[i32]) -> BenchResult<()>;
    /// OSU's receive window: one nonblocking receive of `len` bytes into each of `bufs`, then
    /// wait for all.
    fn recv_window(
        &self,
        bufs: &mut [PageBuf],
        len: usize,
        src: usize,
        tag: i32,
    ) -> BenchResult<()>;
    /// Both windows at once (bibw): the receives posted first, then the sends, then all waited.
    fn exchange_window(
        &self,
        sbuf: &[u8],
        rbufs: &mut [PageBuf],
        len: usize,
        peer: usize,
        tag: i32,
    ) -> BenchResult<()>;
    /// Sum of `x` over all ranks, at every rank.
    fn sum(&self, x: f64) -> BenchResult<f64>;
}

/// A buffer that starts on a page boundary, as OSU allocates its buffers (`posix_memalign`
/// with the page size): where a buffer starts within its page changes copy speed (measured
/// here: osu_bw at 64 KiB read 11-13 or 16-26 GB/s from one build to the next, following only
/// where the allocator happened to place the window's buffers), so every program and every
/// implementation measured gets the same placement.
pub struct PageBuf {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl PageBuf {
    const PAGE: usize = 4096;

    /// `len` bytes of `fill`, page-aligned.
    pub fn new(len: usize, fill: u8) -> PageBuf {
        let storage = vec![fill; len + Self::PAGE];
        let start = storage.as_ptr().align_offset(Self::PAGE).min(Self::PAGE);
        PageBuf {
            storage,
            start,
            len,
        }
    }
}

impl std::ops::Deref for PageBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.storage[self.start..self.start + self.len]
    }
}

impl std::ops::DerefMut for PageBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + self.len]
    }
}

/// OSU's command-line options.
#[derive(Debug, Clone)]
pub struct Options {
    /// Smallest message size (`-m min:max`).
    pub min: usize,
    /// Largest message size.
    pub max: usize,
    /// Timed iterations for messages up to 8 KiB (`-i`); a tenth above.
    pub iterations: usize,
    /// Untimed warm-up iterations (`-x`); a tenth above 8 KiB.
    pub warmup: usize,
    /// Messages in flight per window (`-W`), for the bandwidth and rate tests.
    pub window: usize,
    /// Run the ranks as threads of one process (ch4 only).
    pub threads: bool,
    /// Start the ranks at MPI_THREAD_MULTIPLE, with their VCIs (`CH4_NUM_VCIS`), though one
    /// thread communicates: what the multiple level's locks cost (`--multiple`).
    pub multiple: bool,
}

/// Above this size OSU times a tenth of the iterations.
pub const LARGE_MESSAGE: usize = 8192;

/// Which OSU test a program runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// osu_latency.
    Latency,
    /// osu_multi_lat.
    MultiLatency,
    /// osu_bw.
    Bandwidth,
    /// osu_bibw.
    Bidirectional,
    /// osu_mbw_mr.
    MessageRate,
}

/// Runs test `kind` over `c`: one static dispatch, then the loop monomorphized for `C`.
/// `row` gets every size's values as soon as they are measured (meaningful at rank 0, which
/// prints them), as OSU prints its rows: a run stopped part-way (a hung library, a time limit)
/// still leaves the sizes it finished.
pub fn measure<C: Pt2Pt>(
    kind: Kind,
    c: &C,
    o: &Options,
    row: &mut impl FnMut(usize, &[f64]),
) -> BenchResult<()> {
    match kind {
        Kind::Latency => latency(c, o, row),
        Kind::MultiLatency => multi_latency(c, o, row),
        Kind::Bandwidth => bandwidth(c, o, row),
        Kind::Bidirectional => bidirectional(c, o, row),
        Kind::MessageRate => message_rate(c, o, row),
    }
}

impl Spec {
    /// The program that runs `kind`, with OSU's names and defaults.
    pub const fn of(kind: Kind) -> Spec {
        let latency = Options {
            min: 0,
            max: 1 << 22,
            iterations: 10_000,
            warmup: 1_000,
            window: 64,
            threads: false,
            multiple: false,
        };
        let windowed = Options {
            min: 1,
            iterations: 100,
            warmup: 10,
            ..latency
        };
        let (name, title, columns, defaults) = match kind {
            Kind::Latency => (
                "osu_latency",
                "OSU MPI Latency Test",
                "Size          Latency (us)",
                latency,
            ),
            Kind::MultiLatency => (
                "osu_multi_lat",
                "OSU MPI Multi Latency Test",
                "Size          Latency (us)",
                latency,
            ),
            Kind::Bandwidth => (
                "osu_bw",
                "OSU MPI Bandwidth Test",
                "Size      Bandwidth (MB/s)",
                windowed,
            ),
            Kind::Bidirectional => (
                "osu_bibw",
                "OSU MPI Bi-Directional Bandwidth Test",
                "Size      Bandwidth (MB/s)",
                windowed,
            ),
            Kind::MessageRate => (
                "osu_mbw_mr",
                "OSU MPI Multiple Bandwidth / Message Rate Test",
                "Size                  MB/s        Messages/s",
                windowed,
            ),
        };
        Spec {
            kind,
            ranks: 2,
            name,
            title,
            columns,
            defaults,
            windowed: !matches!(kind, Kind::Latency | Kind::MultiLatency),
        }
    }
}

/// What one program is: its name, OSU's title and column header, and its defaults.
pub struct Spec {
    /// The test.
    pub kind: Kind,
    /// Ranks to start when self-launching.
    pub ranks: u32,
    /// The program's name, for usage lines.
    pub name: &'static str,
    /// OSU's title line, without the leading `# ` (e.g. "OSU MPI Latency Test").
    pub title: &'static str,
    /// OSU's column header line, without the leading `# `.
    pub columns: &'static str,
    /// Default options.
    pub defaults: Options,
    /// Whether `-W` applies.
    pub windowed: bool,
}

/// Parses OSU's options from the process arguments; `Err` carries the usage or the problem.
pub fn parse_args(spec: &Spec) -> Result<Options, String> {
    parse(spec, std::env::args().skip(1))
}

fn parse(spec: &Spec, args: impl IntoIterator<Item = String>) -> Result<Options, String> {
    let usage = format!(
        "usage: {} [-m [min:]max] [-i iterations] [-x warmup]{} [--threads] [--multiple]",
        spec.name,
        if spec.windowed { " [-W window]" } else { "" }
    );
    let mut o = spec.defaults.clone();
    let mut args = args.into_iter();
    while let Some(a) = args.next() {
        let mut value = || {
            args.next()
                .ok_or_else(|| format!("{a} needs a value\n{usage}"))
        };
        let number = |v: String| {
            v.parse::<usize>()
                .map_err(|_| format!("{a}: not a number: {v}\n{usage}"))
        };
        match a.as_str() {
            "-m" => {
                let v = value()?;
                let (lo, hi) = match v.split_once(':') {
                    Some((lo, hi)) => (number(lo.to_string())?, number(hi.to_string())?),
                    None => (spec.defaults.min, number(v)?),
                };
                o.min = lo;
                o.max = hi;
            }
            "-i" => o.iterations = number(value()?)?.max(1),
            "-x" => o.warmup = number(value()?)?,
            "-W" if spec.windowed => o.window = number(value()?)?.max(1),
            "--threads" => o.threads = true,
            "--multiple" => o.multiple = true,
            "-h" | "--help" => return Err(usage),
            other => return Err(format!("unknown option {other}\n{usage}")),
        }
    }
    if o.min > o.max {
        return Err(format!("-m: min {} above max {}\n{usage}", o.min, o.max));
    }
    Ok(o)
}

/// OSU's sizes: 0 if asked for, then powers of two from `min` up to `max`.
pub fn sizes(min: usize, max: usize) -> Vec<usize> {
    let mut v = Vec::new();
    if min == 0 {
        v.push(0);
    }
    let mut s = min.max(1);
    while s <= max {
        v.push(s);
        s = s.saturating_mul(2);
    }
    v
}

/// (timed iterations, warm-up) for one size.
fn counts(o: &Options, size: usize) -> (usize, usize) {
    if size > LARGE_MESSAGE {
        ((o.iterations / 10).max(1), o.warmup / 10)
    } else {
        (o.iterations, o.warmup)
    }
}

/// Prints OSU's header lines, naming the implementation measured; the rows follow as they are
/// measured ([`print_row`]).
pub fn print_header(spec: &Spec, o: &Options, implementation: &str, ranks: usize) {
    println!("# {} ({implementation})", spec.title);
    match spec.kind {
        Kind::MessageRate => println!("# [ pairs: {} ] [ window size: {} ]", ranks / 2, o.window),
        Kind::Bandwidth | Kind::Bidirectional => println!("# [ window size: {} ]", o.window),
        Kind::MultiLatency => println!("# [ pairs: {} ]", ranks / 2),
        Kind::Latency => {}
    }
    println!("# {}", spec.columns);
}

/// The whole program: parses OSU's options, starts or joins the job, measures and prints at
/// rank 0. Exit code 2 for bad options, 1 for a failed run.
pub fn main(spec: &Spec) -> std::process::ExitCode {
    // ch4's warnings (and, with CH4_LOG=debug, more) on standard error.
    ch4::log::init();
    let o = match parse_args(spec) {
        Ok(o) => o,
        Err(msg) => {
            eprintln!("{msg}");
            return std::process::ExitCode::from(2);
        }
    };
    match launch(spec, &o) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{}: {e}", spec.name);
            std::process::ExitCode::FAILURE
        }
    }
}

/// One row as OSU prints it: the size left-aligned in 10 columns, values right-aligned in 18
/// with two decimals — or `OSU_FLOAT_PRECISION` decimals (OSU's `FLOAT_PRECISION` build
/// option, here read at run time), for comparisons finer than 10 ns.
pub fn print_row(size: usize, values: &[f64]) {
    let digits: usize = std::env::var("OSU_FLOAT_PRECISION")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .map_or(2, |d: usize| d.min(9));
    let mut line = format!("{size:<10}");
    for v in values {
        line.push_str(&format!("{v:>18.digits$}"));
    }
    println!("{line}");
}

/// Ping-pong with `peer` for every size, first sending if `first`; hands each size's one-way
/// µs to `done`.
fn pingpong(
    c: &impl Pt2Pt,
    o: &Options,
    peer: usize,
    first: bool,
    mut done: impl FnMut(usize, f64) -> BenchResult<()>,
) -> BenchResult<()> {
    let mut sbuf = PageBuf::new(o.max, b'a');
    let mut rbuf = PageBuf::new(o.max, b'b');
    for size in sizes(o.min, o.max) {
        let (iters, warm) = counts(o, size);
        c.barrier()?;
        let mut start = Instant::now();
        for i in 0..iters + warm {
            if i == warm {
                start = Instant::now();
            }
            if first {
                c.send(&sbuf[..size], peer, 1)?;
                c.recv(&mut rbuf[..size], peer, 1)?;
            } else {
                c.recv(&mut rbuf[..size], peer, 1)?;
                c.send(&sbuf[..size], peer, 1)?;
            }
        }
        done(
            size,
            start.elapsed().as_secs_f64() * 1e6 / (2.0 * iters as f64),
        )?;
        std::mem::swap(&mut sbuf, &mut rbuf);
    }
    Ok(())
}

/// osu_latency: ranks 0 and 1 ping-pong; one-way latency in µs per size.
pub fn latency(
    c: &impl Pt2Pt,
    o: &Options,
    row: &mut impl FnMut(usize, &[f64]),
) -> BenchResult<()> {
    if c.size() != 2 {
        return Err("osu_latency needs exactly two ranks".into());
    }
    let me = c.rank();
    pingpong(c, o, 1 - me, me == 0, |size, us| {
        row(size, &[us]);
        Ok(())
    })
}

/// osu_multi_lat: ranks `i` and `i + n/2` ping-pong, all pairs at once; the average one-way
/// latency over the pairs, in µs.
pub fn multi_latency(
    c: &impl Pt2Pt,
    o: &Options,
    row: &mut impl FnMut(usize, &[f64]),
) -> BenchResult<()> {
    let n = c.size();
    if n < 2 || n % 2 != 0 {
        return Err(format!("osu_multi_lat needs an even number of ranks, not {n}").into());
    }
    let me = c.rank();
    let pairs = n / 2;
    let first = me < pairs;
    let peer = if first { me + pairs } else { me - pairs };
    pingpong(c, o, peer, first, |size, us| {
        let total = c.sum(if first { us } else { 0.0 })?;
        row(size, &[total / pairs as f64]);
        Ok(())
    })
}

/// The sending half of a windowed test: `iters + warm` windows of sends, each followed by the
/// receiver's 4-byte ack; returns the seconds the timed windows took.
fn timed_sends(
    c: &impl Pt2Pt,
    sbuf: &[u8],
    window: usize,
    dest: usize,
    (iters, warm): (usize, usize),
) -> BenchResult<f64> {
    let mut ack = [0u8; 4];
    let mut start = Instant::now();
    for i in 0..iters + warm {
        if i == warm {
            start = Instant::now();
        }
        c.send_window(sbuf, window, dest, 100)?;
        c.recv(&mut ack, dest, 101)?;
    }
    Ok(start.elapsed().as_secs_f64())
}

/// The receiving half: windows of receives, each acknowledged.
fn acked_receives(
    c: &impl Pt2Pt,
    rbufs: &mut [PageBuf],
    size: usize,
    src: usize,
    (iters, warm): (usize, usize),
) -> BenchResult<()> {
    for _ in 0..iters + warm {
        c.recv_window(rbufs, size, src, 100)?;
        c.send(&[0u8; 4], src, 101)?;
    }
    Ok(())
}

/// osu_bw: rank 0 sends windows to rank 1, which acknowledges each; MB/s (10^6 bytes/s, as
/// OSU prints it) at rank 0.
pub fn bandwidth(
    c: &impl Pt2Pt,
    o: &Options,
    row: &mut impl FnMut(usize, &[f64]),
) -> BenchResult<()> {
    if c.size() != 2 {
        return Err("osu_bw needs exactly two ranks".into());
    }
    let sbuf = PageBuf::new(o.max, b'a');
    let mut rbufs: Vec<PageBuf> = (0..o.window).map(|_| PageBuf::new(o.max, 0)).collect();
    for size in sizes(o.min.max(1), o.max) {
        let n = counts(o, size);
        c.barrier()?;
        if c.rank() == 0 {
            let secs = timed_sends(c, &sbuf[..size], o.window, 1, n)?;
            let bytes = (size * o.window * n.0) as f64;
            row(size, &[bytes / 1e6 / secs]);
        } else {
            acked_receives(c, &mut rbufs, size, 0, n)?;
        }
    }
    Ok(())
}

/// osu_bibw: both ranks send a window to each other at once; MB/s both ways together.
pub fn bidirectional(
    c: &impl Pt2Pt,
    o: &Options,
    row: &mut impl FnMut(usize, &[f64]),
) -> BenchResult<()> {
    if c.size() != 2 {
        return Err("osu_bibw needs exactly two ranks".into());
    }
    let peer = 1 - c.rank();
    let sbuf = PageBuf::new(o.max, b'a');
    let mut rbufs: Vec<PageBuf> = (0..o.window).map(|_| PageBuf::new(o.max, 0)).collect();
    for size in sizes(o.min.max(1), o.max) {
        let (iters, warm) = counts(o, size);
        c.barrier()?;
        let mut start = Instant::now();
        for i in 0..iters + warm {
            if i == warm {
                start = Instant::now();
            }
            c.exchange_window(&sbuf[..size], &mut rbufs, size, peer, 100)?;
        }
        let secs = start.elapsed().as_secs_f64();
        let bytes = (2 * size * o.window * iters) as f64;
        row(size, &[bytes / 1e6 / secs]);
    }
    Ok(())
}

/// osu_mbw_mr: the first half of the ranks each stream windows to a partner in the second half;
/// aggregate MB/s and messages per second over all pairs, at rank 0.
pub fn message_rate(
    c: &impl Pt2Pt,
    o: &Options,
    row: &mut impl FnMut(usize, &[f64]),
) -> BenchResult<()> {
    let n = c.size();
    if n < 2 || n % 2 != 0 {
        return Err(format!("osu_mbw_mr needs an even number of ranks, not {n}").into());
    }
    let me = c.rank();
    let pairs = n / 2;
    let sbuf = PageBuf::new(o.max, b'a');
    let mut rbufs: Vec<PageBuf> = (0..o.window).map(|_| PageBuf::new(o.max, 0)).collect();
    for size in sizes(o.min.max(1), o.max) {
        let counts = counts(o, size);
        c.barrier()?;
        let rate = if me < pairs {
            let secs = timed_sends(c, &sbuf[..size], o.window, me + pairs, counts)?;
            (o.window * counts.0) as f64 / secs
        } else {
            acked_receives(c, &mut rbufs, size, me - pairs, counts)?;
            0.0
        };
        let total = c.sum(rate)?;
        row(size, &[total * size as f64 / 1e6, total]);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> Spec {
        Spec {
            kind: Kind::Bandwidth,
            ranks: 2,
            name: "t",
            title: "T",
            columns: "Size",
            defaults: Options {
                min: 0,
                max: 1 << 22,
                iterations: 100,
                warmup: 10,
                window: 64,
                threads: false,
                multiple: false,
            },
            windowed: true,
        }
    }

    fn args(a: &str) -> Vec<String> {
        a.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn options_follow_osu() {
        let o = parse(&spec(), args("-m 8:4096 -i 7 -x 2 -W 16")).unwrap();
        assert_eq!(
            (o.min, o.max, o.iterations, o.warmup, o.window),
            (8, 4096, 7, 2, 16)
        );
        let o = parse(&spec(), args("-m 64")).unwrap();
        assert_eq!((o.min, o.max), (0, 64), "-m max keeps the default minimum");
        assert!(parse(&spec(), args("-m 9:8")).is_err());
        assert!(parse(&spec(), args("-i x"))
            .unwrap_err()
            .contains("not a number"));
        assert!(parse(&spec(), args("--bogus"))
            .unwrap_err()
            .contains("usage"));
        assert!(parse(&spec(), args("-i"))
            .unwrap_err()
            .contains("needs a value"));
    }

    #[test]
    fn sizes_are_zero_then_powers_of_two() {
        assert_eq!(sizes(0, 8), vec![0, 1, 2, 4, 8]);
        assert_eq!(sizes(3, 20), vec![3, 6, 12]);
        assert_eq!(sizes(16, 8), Vec::<usize>::new());
    }
}

//! Axis geometry and tick labels, computed without plotters so they can be unit-tested.
//!
//! Both axes are drawn by plotters as plain linear `f64` axes over *transformed* values with
//! explicit tick positions: x is `log2(size)`, y is `log10(value)` on a log chart and the
//! value itself otherwise. Doing the transform here instead of using plotters' log
//! coordinates gives exact control over where ticks go and how they read ("4K", not
//! "4096.0"), and lets message size 0 — which has no logarithm — sit at a chosen place.

/// What a benchmark measures, which decides the y scale, its unit and which way is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Time per message in µs (`latency`, `multi_lat`): log y axis, lower is better.
    Latency,
    /// MB/s (`bw`, `bibw`): linear y axis, higher is better.
    Bandwidth,
    /// Messages per second (`mbw_mr`): linear y axis, higher is better.
    MessageRate,
    /// An application's time in seconds (a name ending in `_seconds`): lower is better.
    Seconds,
    /// An application's floating-point rate (a name ending in `_gflops`): higher is better.
    Gflops,
    /// The part of a nonblocking operation a computation hid, in % (a name ending in
    /// `_overlap`): higher is better.
    Overlap,
    /// Anything else: linear y axis, no claim about which way is better.
    Other,
}

impl Kind {
    /// Guess the kind from the bench name: exact OSU names first, then substrings, so a
    /// renamed variant such as `latency_mt` still gets a sensible axis.
    pub fn of(bench: &str) -> Kind {
        match bench {
            "latency" | "multi_lat" => Kind::Latency,
            "bw" | "bibw" => Kind::Bandwidth,
            "mbw_mr" => Kind::MessageRate,
            _ if bench.ends_with("_seconds") => Kind::Seconds,
            _ if bench.ends_with("_gflops") => Kind::Gflops,
            _ if bench.ends_with("_overlap") => Kind::Overlap,
            _ if bench.contains("lat") => Kind::Latency,
            _ if bench.contains("mr") || bench.contains("rate") => Kind::MessageRate,
            _ if bench.contains("bw") => Kind::Bandwidth,
            _ => Kind::Other,
        }
    }

    /// The y axis description, with unit and the direction that is better.
    pub fn y_desc(self, log: bool) -> String {
        let scale = if log { ", log scale" } else { "" };
        match self {
            Kind::Latency => format!("latency (µs{scale}) — lower is better"),
            Kind::Bandwidth => format!("bandwidth (MB/s{scale}) — higher is better"),
            Kind::MessageRate => format!("message rate (messages/s{scale}) — higher is better"),
            Kind::Seconds => format!("time (s{scale}) — lower is better"),
            Kind::Gflops => format!("GFLOP/s{scale} — higher is better"),
            Kind::Overlap => format!("overlap (%{scale}) — higher is better"),
            Kind::Other => format!("value{}", if log { " (log scale)" } else { "" }),
        }
    }

    /// Unit and better direction in a few words, for the table heading.
    pub fn unit_desc(self) -> &'static str {
        match self {
            Kind::Latency => "µs, lower is better",
            Kind::Bandwidth => "MB/s, higher is better",
            Kind::MessageRate => "messages/s, higher is better",
            Kind::Seconds => "s, lower is better",
            Kind::Gflops => "GFLOP/s, higher is better",
            Kind::Overlap => "%, higher is better",
            Kind::Other => "value",
        }
    }

    /// Whether this kind prefers a log y axis (latency spans decades: 0.2 µs to 1000 µs).
    pub fn wants_log(self) -> bool {
        self == Kind::Latency
    }

    /// What a ch4/other ratio below 1 means, for the table footer.
    pub fn ratio_note(self) -> &'static str {
        match self {
            Kind::Latency | Kind::Seconds => "ratio < 1: ch4 is faster",
            Kind::Bandwidth | Kind::MessageRate | Kind::Gflops => "ratio > 1: ch4 is faster",
            Kind::Overlap => "ratio > 1: ch4 hides more",
            Kind::Other => "",
        }
    }
}

/// The message-size axis: log2 scale, ticks at powers of two.
///
/// Size 0 has no logarithm. It is plotted one log2 step to the left of the smallest
/// non-zero size rounded down to a power of two (so at the position of 1/2 B when the
/// smallest other size is 1 B) and labelled "0". The line from it to the next point is kept:
/// reading "0" on the axis is unambiguous, and a gap would hide the 0-byte measurement.
#[derive(Debug, Clone, PartialEq)]
pub struct XAxis {
    /// Where size 0 is drawn, if the data has size 0.
    pub zero_pos: Option<f64>,
    /// Left end of the axis, in log2 units.
    pub lo: f64,
    /// Right end of the axis, in log2 units.
    pub hi: f64,
    /// Labelled tick positions.
    pub ticks: Vec<f64>,
    /// Unlabelled grid positions (every power of two).
    pub light: Vec<f64>,
}

/// At most this many labelled ticks per axis, so labels never touch at 1000 px width.
const MAX_X_TICKS: usize = 13;

impl XAxis {
    /// Lay out the axis for these sizes (any order, duplicates allowed; empty gives 1 B..1 KB).
    pub fn new(sizes: &[u64]) -> XAxis {
        let nonzero = sizes.iter().copied().filter(|&s| s > 0);
        let min_log = nonzero.clone().map(log2).reduce(f64::min);
        let max_log = nonzero.map(log2).reduce(f64::max);
        let has_zero = sizes.contains(&0);
        let (first, last) = match (min_log, max_log) {
            (Some(a), Some(b)) => (a.floor(), b.ceil()),
            _ if has_zero => (1.0, 1.0),
            _ => (0.0, 10.0),
        };
        let zero_pos = has_zero.then_some(first - 1.0);
        let start = zero_pos.unwrap_or(first);
        let lo = start - 0.5;
        let hi = last + 0.5;

        // Integer log2 positions of the non-zero part; label every `step`-th, aligned to
        // multiples of `step` so labels are 1, 4, 16, ... rather than 2, 8, 32, ...
        let first_i = first as i64;
        let last_i = last as i64;
        let budget = MAX_X_TICKS - usize::from(has_zero);
        let count = (last_i - first_i + 1).max(1) as usize;
        let step = count.div_ceil(budget).max(1) as i64;
        let mut ticks: Vec<f64> = Vec::new();
        ticks.extend(zero_pos);
        ticks.extend(
            (first_i..=last_i)
                .filter(|p| p.rem_euclid(step) == 0)
                .map(|p| p as f64),
        );
        let mut light: Vec<f64> = (first_i..=last_i).map(|p| p as f64).collect();
        light.extend(zero_pos);
        XAxis {
            zero_pos,
            lo,
            hi,
            ticks,
            light,
        }
    }

    /// Where a size is drawn on this axis.
    pub fn pos(&self, size: u64) -> f64 {
        if size == 0 {
            self.zero_pos.unwrap_or(self.lo)
        } else {
            log2(size)
        }
    }

    /// The tick label at axis position `pos` ("0", "512", "4K", "1M").
    pub fn label(&self, pos: f64) -> String {
        if self.zero_pos == Some(pos) {
            return "0".to_string();
        }
        let bytes = pos.exp2();
        if bytes.is_finite() && bytes >= 0.0 && bytes < u64::MAX as f64 {
            size_label(bytes.round() as u64)
        } else {
            String::new()
        }
    }
}

fn log2(size: u64) -> f64 {
    (size as f64).log2()
}

/// A byte count in the short binary-prefix form OSU users read: `0`, `512`, `4K`, `1M`.
///
/// Only exact multiples are abbreviated; an odd size such as 1500 is printed in full so the
/// table never rounds a size.
pub fn size_label(bytes: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")];
    for (unit, suffix) in UNITS {
        if bytes >= unit && bytes % unit == 0 {
            return format!("{}{suffix}", bytes / unit);
        }
    }
    bytes.to_string()
}

/// The value axis: linear from 0, or log10 with 1-2-5 or decade ticks.
#[derive(Debug, Clone, PartialEq)]
pub struct YAxis {
    /// True when positions are `log10(value)`.
    pub log: bool,
    /// Bottom of the axis (a position, i.e. log10 units on a log axis).
    pub lo: f64,
    /// Top of the axis (a position).
    pub hi: f64,
    /// Labelled tick positions.
    pub ticks: Vec<f64>,
    /// Unlabelled grid positions.
    pub light: Vec<f64>,
    /// Divisor and suffix shared by all labels of a linear axis (`1000, "k"` when the top
    /// tick is at least ten thousand), so one axis never mixes "8000" with "10k".
    unit: (f64, &'static str),
}

impl YAxis {
    /// Lay out the axis for values between `min` and `max` (whisker ends included).
    ///
    /// A log axis is used only when asked for *and* every value is positive: a zero latency
    /// is nonsense but should still be drawn, so the chart falls back to linear rather than
    /// failing.
    pub fn new(min: f64, max: f64, want_log: bool) -> YAxis {
        if want_log && min > 0.0 && max.is_finite() {
            Self::log(min, max)
        } else {
            Self::linear(max)
        }
    }

    fn linear(max: f64) -> YAxis {
        let top = if max > 0.0 && max.is_finite() {
            max
        } else {
            1.0
        };
        let step = nice_step(top / 8.0);
        let hi = top * 1.08;
        let n = (hi / step).floor() as usize;
        let ticks: Vec<f64> = (0..=n).map(|i| i as f64 * step).collect();
        let light: Vec<f64> = (0..=2 * n + 1)
            .map(|i| i as f64 * step / 2.0)
            .filter(|&v| v <= hi)
            .collect();
        let top_tick = n as f64 * step;
        let unit = if top_tick >= 1e9 {
            (1e9, "G")
        } else if top_tick >= 1e6 {
            (1e6, "M")
        } else if top_tick >= 1e4 {
            (1e3, "k")
        } else {
            (1.0, "")
        };
        YAxis {
            log: false,
            lo: 0.0,
            hi,
            ticks,
            light,
            unit,
        }
    }

    fn log(min: f64, max: f64) -> YAxis {
        let (a, b) = (min.log10(), max.max(min).log10());
        let pad = ((b - a) * 0.06).max(0.04);
        let (lo, hi) = (a - pad, b + pad);
        let span = hi - lo;
        // Labels per decade by how many decades there are: a 650 px chart has room for
        // 1-2-5 up to about five decades, which keeps a label near the sub-µs small-message
        // latencies that matter most.
        let mults: &[f64] = if span <= 1.2 {
            &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]
        } else if span <= 2.5 {
            &[1.0, 2.0, 3.0, 5.0]
        } else if span <= 5.0 {
            &[1.0, 2.0, 5.0]
        } else if span <= 8.0 {
            &[1.0, 3.0]
        } else {
            &[1.0]
        };
        let decades = (lo.floor() as i32)..=(hi.ceil() as i32);
        let in_range = |p: &f64| *p >= lo && *p <= hi;
        let at = |d: i32, m: f64| (m * 10f64.powi(d)).log10();
        let ticks_for = |mults: &[f64]| -> Vec<f64> {
            decades
                .clone()
                .flat_map(|d| mults.iter().map(move |&m| at(d, m)))
                .filter(in_range)
                .collect()
        };
        let mut ticks = ticks_for(mults);
        if ticks.len() < 2 {
            ticks = ticks_for(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]);
        }
        if ticks.len() < 2 {
            // A range inside one 1..9 step (all values within a few percent): label the ends.
            ticks = vec![a, b];
            ticks.dedup();
        }
        let light: Vec<f64> = decades
            .flat_map(|d| (1..=9).map(move |m| at(d, f64::from(m))))
            .filter(in_range)
            .collect();
        YAxis {
            log: true,
            lo,
            hi,
            ticks,
            light,
            unit: (1.0, ""),
        }
    }

    /// Where a value is drawn on this axis.
    pub fn pos(&self, value: f64) -> f64 {
        if self.log {
            value.log10()
        } else {
            value
        }
    }

    /// The tick label at axis position `pos`.
    pub fn label(&self, pos: f64) -> String {
        if self.log {
            value_label(10f64.powf(pos))
        } else if pos == 0.0 {
            "0".to_string()
        } else {
            let (div, suffix) = self.unit;
            format!("{}{suffix}", sig3(pos / div))
        }
    }
}

/// A value as a short label: three significant digits, `k`/`M`/`G` from ten thousand up
/// (`0.25`, `1.5`, `120`, `8000`, `12k`, `3.2M`).
pub fn value_label(value: f64) -> String {
    let abs = value.abs();
    let (scaled, suffix) = if abs >= 1e9 {
        (value / 1e9, "G")
    } else if abs >= 1e6 {
        (value / 1e6, "M")
    } else if abs >= 1e4 {
        (value / 1e3, "k")
    } else {
        (value, "")
    };
    format!("{}{suffix}", sig3(scaled))
}

/// Three significant digits, trailing zeros dropped.
pub fn sig3(value: f64) -> String {
    if value == 0.0 || !value.is_finite() {
        return if value == 0.0 {
            "0".to_string()
        } else {
            value.to_string()
        };
    }
    let digits = value.abs().log10().floor() as i32;
    let decimals = (2 - digits).clamp(0, 9) as usize;
    trim_number(value, decimals)
}

fn trim_number(value: f64, decimals: usize) -> String {
    let s = format!("{value:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// A round step (1, 2 or 5 times a power of ten) at least `raw`.
fn nice_step(raw: f64) -> f64 {
    if raw <= 0.0 || !raw.is_finite() {
        return 1.0;
    }
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|&s| s >= raw * (1.0 - 1e-9))
        .unwrap_or(10.0 * mag)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_from_names() {
        assert_eq!(Kind::of("latency"), Kind::Latency);
        assert_eq!(Kind::of("multi_lat"), Kind::Latency);
        assert_eq!(Kind::of("bw"), Kind::Bandwidth);
        assert_eq!(Kind::of("iallreduce_overlap"), Kind::Overlap);
        assert_eq!(Kind::of("iallreduce_latency"), Kind::Latency);
        assert_eq!(Kind::of("bibw"), Kind::Bandwidth);
        assert_eq!(Kind::of("mbw_mr"), Kind::MessageRate);
        assert_eq!(Kind::of("put_latency"), Kind::Latency);
        assert_eq!(Kind::of("allreduce"), Kind::Other);
        assert_eq!(Kind::of("miniamr_seconds"), Kind::Seconds);
        assert_eq!(Kind::of("hpcg_gflops"), Kind::Gflops);
        assert!(Kind::Seconds.ratio_note().contains("< 1: ch4 is faster"));
        assert!(Kind::Gflops.ratio_note().contains("> 1: ch4 is faster"));
        assert!(Kind::of("latency").y_desc(true).contains("lower is better"));
        assert!(Kind::of("bw").y_desc(false).contains("higher is better"));
        assert!(Kind::of("mbw_mr").y_desc(false).contains("messages/s"));
    }

    #[test]
    fn size_labels() {
        let got: Vec<String> = [0, 1, 512, 1024, 4096, 1536, 1 << 20, 4 << 20, 1 << 30]
            .into_iter()
            .map(size_label)
            .collect();
        assert_eq!(got, ["0", "1", "512", "1K", "4K", "1536", "1M", "4M", "1G"]);
    }

    #[test]
    fn x_axis_with_zero_and_osu_range() {
        let sizes: Vec<u64> = std::iter::once(0).chain((0..=22).map(|p| 1 << p)).collect();
        let x = XAxis::new(&sizes);
        assert_eq!(x.zero_pos, Some(-1.0));
        assert_eq!(x.pos(0), -1.0);
        assert_eq!(x.pos(1), 0.0);
        assert_eq!(x.pos(1024), 10.0);
        assert!(x.lo < -1.0 && x.hi > 22.0);
        assert!(x.ticks.len() <= MAX_X_TICKS, "{:?}", x.ticks);
        let labels: Vec<String> = x.ticks.iter().map(|&p| x.label(p)).collect();
        assert_eq!(
            labels,
            ["0", "1", "4", "16", "64", "256", "1K", "4K", "16K", "64K", "256K", "1M", "4M"]
        );
        assert_eq!(x.light.len(), 24, "a grid line at every size");
    }

    #[test]
    fn x_axis_small_range_labels_every_power() {
        let x = XAxis::new(&[8, 16, 32, 64]);
        assert_eq!(x.zero_pos, None);
        let labels: Vec<String> = x.ticks.iter().map(|&p| x.label(p)).collect();
        assert_eq!(labels, ["8", "16", "32", "64"]);
    }

    #[test]
    fn x_axis_zero_next_to_larger_sizes_and_degenerate_inputs() {
        let x = XAxis::new(&[0, 1024, 4096]);
        assert_eq!(x.zero_pos, Some(9.0));
        assert_eq!(x.label(9.0), "0");
        let x = XAxis::new(&[0]);
        assert!(x.lo < x.pos(0) && x.pos(0) < x.hi);
        let x = XAxis::new(&[]);
        assert!(x.lo < x.hi && !x.ticks.is_empty());
        let x = XAxis::new(&[3000]);
        assert!(x.lo < x.pos(3000) && x.pos(3000) < x.hi);
    }

    #[test]
    fn y_log_axis_covers_data_with_sensible_ticks() {
        let y = YAxis::new(0.2, 900.0, true);
        assert!(y.log);
        assert!(y.lo < y.pos(0.2) && y.pos(900.0) < y.hi);
        let labels: Vec<String> = y.ticks.iter().map(|&p| y.label(p)).collect();
        assert_eq!(
            labels,
            ["0.2", "0.5", "1", "2", "5", "10", "20", "50", "100", "200", "500", "1000"]
        );

        let y = YAxis::new(0.1, 1e5, true);
        let labels: Vec<String> = y.ticks.iter().map(|&p| y.label(p)).collect();
        assert_eq!(
            labels,
            [
                "0.1", "0.3", "1", "3", "10", "30", "100", "300", "1000", "3000", "10k", "30k",
                "100k"
            ]
        );

        let y = YAxis::new(0.01, 1e9, true);
        let labels: Vec<String> = y.ticks.iter().map(|&p| y.label(p)).collect();
        assert_eq!(labels.len(), 12, "decades only: {labels:?}");

        let y = YAxis::new(0.2, 30.0, true);
        let labels: Vec<String> = y.ticks.iter().map(|&p| y.label(p)).collect();
        assert_eq!(
            labels,
            ["0.2", "0.3", "0.5", "1", "2", "3", "5", "10", "20", "30"]
        );

        let y = YAxis::new(0.2, 300.0, true);
        let labels: Vec<String> = y.ticks.iter().map(|&p| y.label(p)).collect();
        assert_eq!(
            labels,
            ["0.2", "0.5", "1", "2", "5", "10", "20", "50", "100", "200"]
        );

        let y = YAxis::new(0.25, 0.6, true);
        let labels: Vec<String> = y.ticks.iter().map(|&p| y.label(p)).collect();
        assert_eq!(labels, ["0.3", "0.4", "0.5", "0.6"]);

        let y = YAxis::new(1.01, 1.02, true);
        assert!(y.ticks.len() >= 2, "{:?}", y.ticks);
        let y = YAxis::new(5.0, 5.0, true);
        assert!(!y.ticks.is_empty() && y.lo < y.pos(5.0) && y.pos(5.0) < y.hi);
    }

    #[test]
    fn y_log_falls_back_to_linear_on_zero() {
        let y = YAxis::new(0.0, 10.0, true);
        assert!(!y.log);
        assert_eq!(y.pos(0.0), 0.0);
    }

    #[test]
    fn y_linear_axis_round_ticks() {
        let y = YAxis::new(0.0, 11_800.0, false);
        assert_eq!(y.lo, 0.0);
        assert!(y.hi > 11_800.0);
        let labels: Vec<String> = y.ticks.iter().map(|&p| y.label(p)).collect();
        assert_eq!(labels, ["0", "2k", "4k", "6k", "8k", "10k", "12k"]);
        let y = YAxis::new(0.0, 5_000.0, false);
        let labels: Vec<String> = y.ticks.iter().map(|&p| y.label(p)).collect();
        assert_eq!(labels, ["0", "1000", "2000", "3000", "4000", "5000"]);
        let y = YAxis::new(0.0, 2.6e6, false);
        let labels: Vec<String> = y.ticks.iter().map(|&p| y.label(p)).collect();
        assert_eq!(labels, ["0", "0.5M", "1M", "1.5M", "2M", "2.5M"]);
        let y = YAxis::new(0.0, 14_000.0, false);
        let labels: Vec<String> = y.ticks.iter().map(|&p| y.label(p)).collect();
        assert_eq!(labels, ["0", "2k", "4k", "6k", "8k", "10k", "12k", "14k"]);
        let y = YAxis::new(0.0, 0.0, false);
        assert!(y.hi > 0.0 && y.ticks.len() >= 2);
    }

    #[test]
    fn value_labels() {
        assert_eq!(value_label(0.0), "0");
        assert_eq!(value_label(0.25), "0.25");
        assert_eq!(value_label(0.1234), "0.123");
        assert_eq!(value_label(1.0), "1");
        assert_eq!(value_label(12.34), "12.3");
        assert_eq!(value_label(8000.0), "8000");
        assert_eq!(value_label(12_500.0), "12.5k");
        assert_eq!(value_label(3_210_000.0), "3.21M");
    }
}

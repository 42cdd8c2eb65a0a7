//! The input side: parse the benchmark TSV and reduce repeated rounds to median, min and max.
//!
//! The benchmark script runs every implementation several times, interleaved, so that a
//! noisy neighbour or a frequency change hits all of them alike. One round is not
//! trustworthy on its own; the chart shows the median (robust to one bad round) and the
//! min–max spread, which is what a reader needs to judge whether a gap between two lines is
//! real. This module knows nothing of plotting.

use std::collections::BTreeMap;
use std::fmt;

/// The header line the file must start with (after comments and blank lines), so that a
/// file with reordered or missing columns is rejected instead of silently misread.
pub const HEADER: &str = "bench\timpl\tsize\tvalue";

/// A line of the input that could not be understood.
///
/// Carries the 1-based line number so the person who produced the file can find it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// 1-based line number in the input (comments and blank lines count).
    pub line: usize,
    /// What was wrong with the line.
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for ParseError {}

/// Median, minimum and maximum of the rounds measured for one (bench, impl, size).
///
/// The median is what the line is drawn through; min and max are the whisker ends.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stats {
    /// Middle value; the mean of the two middle values for an even count.
    pub median: f64,
    /// Smallest value over the rounds.
    pub min: f64,
    /// Largest value over the rounds.
    pub max: f64,
    /// How many rounds went into these numbers.
    pub rounds: usize,
}

/// Reduce the values of several rounds to [`Stats`]; `None` for no values.
///
/// Takes finite values (the parser rejects the others); the order of `values` does not
/// matter.
pub fn summarize(values: &[f64]) -> Option<Stats> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let median = if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    };
    Some(Stats {
        median,
        min: sorted[0],
        max: sorted[n - 1],
        rounds: n,
    })
}

/// One measured point of one implementation: a message size and its statistics.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// Message size in bytes.
    pub size: u64,
    /// Statistics over the rounds at this size.
    pub stats: Stats,
}

/// All points of one implementation in one benchmark, in increasing size order.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Implementation name as written in the file (`ch4`, `mpich`, ...).
    pub impl_name: String,
    /// Points sorted by size, one per distinct size.
    pub points: Vec<Point>,
}

impl Series {
    /// The statistics at `size`, if this implementation was measured there.
    pub fn at(&self, size: u64) -> Option<&Stats> {
        self.points
            .binary_search_by_key(&size, |p| p.size)
            .ok()
            .map(|i| &self.points[i].stats)
    }
}

/// Everything measured for one benchmark: one chart and one table.
#[derive(Debug, Clone, PartialEq)]
pub struct Bench {
    /// Benchmark name as written in the file (`latency`, `bw`, ...); also the file stem.
    pub name: String,
    /// One series per implementation, `ch4` first, then `mpich`, `openmpi`, then the rest
    /// alphabetically, so charts and tables always list them in the same order.
    pub series: Vec<Series>,
}

impl Bench {
    /// Every distinct size measured by any implementation, increasing.
    pub fn sizes(&self) -> Vec<u64> {
        let mut sizes: Vec<u64> = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.size))
            .collect();
        sizes.sort_unstable();
        sizes.dedup();
        sizes
    }

    /// The smallest and largest round count over all points, for the "median of N rounds"
    /// caption (a missed round must not be hidden).
    pub fn rounds_range(&self) -> (usize, usize) {
        let counts = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.stats.rounds));
        let min = counts.clone().min().unwrap_or(0);
        let max = counts.max().unwrap_or(0);
        (min, max)
    }
}

/// Raw samples grouped by bench, implementation and size, as read from the file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Dataset {
    samples: BTreeMap<String, BTreeMap<String, BTreeMap<u64, Vec<f64>>>>,
}

impl Dataset {
    /// True when the file had a header but no data lines.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// Every implementation name in the whole file, in display order (see [`impl_order`]).
    ///
    /// Colors are assigned over this list so an implementation keeps its color on every
    /// chart of one run, even on a chart where some other implementation is missing.
    pub fn impl_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .samples
            .values()
            .flat_map(|impls| impls.keys().cloned())
            .collect();
        names.sort_by(|a, b| impl_order(a, b));
        names.dedup();
        names
    }

    /// The benchmarks with their statistics, in the order of [`bench_order`].
    pub fn benches(&self) -> Vec<Bench> {
        let mut benches: Vec<Bench> = self
            .samples
            .iter()
            .map(|(name, impls)| {
                let mut series: Vec<Series> = impls
                    .iter()
                    .map(|(impl_name, sizes)| Series {
                        impl_name: impl_name.clone(),
                        points: sizes
                            .iter()
                            .filter_map(|(&size, values)| {
                                summarize(values).map(|stats| Point { size, stats })
                            })
                            .collect(),
                    })
                    .collect();
                series.sort_by(|a, b| impl_order(&a.impl_name, &b.impl_name));
                Bench {
                    name: name.clone(),
                    series,
                }
            })
            .collect();
        benches.sort_by(|a, b| bench_order(&a.name, &b.name));
        benches
    }
}

/// Display order of implementations: `ch4` first (it is what the charts are about), then
/// the well-known `mpich` and `openmpi`, then everything else alphabetically.
pub fn impl_order(a: &str, b: &str) -> std::cmp::Ordering {
    fn rank(name: &str) -> usize {
        match name {
            "ch4" => 0,
            "mpich" => 1,
            "openmpi" => 2,
            _ => 3,
        }
    }
    rank(a).cmp(&rank(b)).then_with(|| a.cmp(b))
}

/// Display order of benchmarks: the order of the OSU suite's own listing for the known
/// ones, then the rest alphabetically.
pub fn bench_order(a: &str, b: &str) -> std::cmp::Ordering {
    fn rank(name: &str) -> usize {
        match name {
            "latency" => 0,
            "bw" => 1,
            "bibw" => 2,
            "mbw_mr" => 3,
            "multi_lat" => 4,
            _ => 5,
        }
    }
    rank(a).cmp(&rank(b)).then_with(|| a.cmp(b))
}

/// Parse the whole TSV text.
///
/// Blank lines and lines starting with `#` are skipped anywhere. The first other line must
/// be [`HEADER`]; every following line must have exactly four tab-separated fields. A
/// trailing `\r` (a file edited on Windows) and spaces around fields are tolerated. The
/// bench name becomes a file name, so it is limited to ASCII letters, digits, `_`, `-` and
/// `.` and may not start with `.`.
pub fn parse(text: &str) -> Result<Dataset, ParseError> {
    let mut dataset = Dataset::default();
    let mut seen_header = false;
    for (index, raw) in text.lines().enumerate() {
        let line_no = index + 1;
        let line = raw.trim_end_matches('\r');
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let err = |message: String| ParseError {
            line: line_no,
            message,
        };
        if !seen_header {
            let fields: Vec<&str> = line.split('\t').map(str::trim).collect();
            if fields != ["bench", "impl", "size", "value"] {
                return Err(err(format!(
                    "expected the header `bench<TAB>impl<TAB>size<TAB>value`, found `{trimmed}`"
                )));
            }
            seen_header = true;
            continue;
        }
        let fields: Vec<&str> = line.split('\t').map(str::trim).collect();
        let [bench, imp, size, value] = fields[..] else {
            return Err(err(format!(
                "expected 4 tab-separated fields (bench, impl, size, value), found {}",
                fields.len()
            )));
        };
        check_bench_name(bench).map_err(err)?;
        if imp.is_empty() {
            return Err(err("empty impl field".to_string()));
        }
        let size: u64 = size.parse().map_err(|_| {
            err(format!(
                "size `{size}` is not a non-negative integer number of bytes"
            ))
        })?;
        let value: f64 = value
            .parse()
            .map_err(|_| err(format!("value `{value}` is not a number")))?;
        if !value.is_finite() || value < 0.0 {
            return Err(err(format!("value `{value}` must be a finite number >= 0")));
        }
        dataset
            .samples
            .entry(bench.to_string())
            .or_default()
            .entry(imp.to_string())
            .or_default()
            .entry(size)
            .or_default()
            .push(value);
    }
    if !seen_header {
        return Err(ParseError {
            line: text.lines().count().max(1),
            message: "no header line `bench<TAB>impl<TAB>size<TAB>value` found".to_string(),
        });
    }
    Ok(dataset)
}

/// Reject bench names that would make a bad or dangerous output file name.
fn check_bench_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("empty bench field".to_string());
    }
    if name.starts_with('.')
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    {
        return Err(format!(
            "bench name `{name}` is not usable as a file name \
             (use ASCII letters, digits, `_`, `-`, `.`, not starting with `.`)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "\
# produced by scripts/osu.sh
bench\timpl\tsize\tvalue
latency\tch4\t0\t0.30
latency\tmpich\t0\t0.50

latency\tch4\t0\t0.20
latency\tch4\t0\t0.40
latency\tch4\t8\t0.35
# a comment in the middle
latency\tmpich\t0\t0.70
bw\topenmpi\t1024\t5000.5
bw\tch4\t1024\t6000\r
bw\tzzz\t1024\t1
bw\taaa\t1024\t2
";

    #[test]
    fn parses_good_input_and_groups_rounds() {
        let ds = parse(GOOD).unwrap();
        let benches = ds.benches();
        let names: Vec<&str> = benches.iter().map(|b| b.name.as_str()).collect();
        assert_eq!(names, ["latency", "bw"], "known benches in OSU order");

        let lat = &benches[0];
        let impls: Vec<&str> = lat.series.iter().map(|s| s.impl_name.as_str()).collect();
        assert_eq!(impls, ["ch4", "mpich"]);
        let ch4_0 = lat.series[0].at(0).unwrap();
        assert_eq!(ch4_0.rounds, 3);
        assert!((ch4_0.median - 0.30).abs() < 1e-12);
        assert!((ch4_0.min - 0.20).abs() < 1e-12);
        assert!((ch4_0.max - 0.40).abs() < 1e-12);
        assert_eq!(lat.series[0].at(8).unwrap().rounds, 1);
        assert!(lat.series[0].at(16).is_none());
        assert!((lat.series[1].at(0).unwrap().median - 0.60).abs() < 1e-12);
        assert_eq!(lat.sizes(), [0, 8]);
        assert_eq!(lat.rounds_range(), (1, 3));

        let bw = &benches[1];
        let impls: Vec<&str> = bw.series.iter().map(|s| s.impl_name.as_str()).collect();
        assert_eq!(impls, ["ch4", "openmpi", "aaa", "zzz"]);
        assert!((bw.series[0].at(1024).unwrap().median - 6000.0).abs() < 1e-12);

        assert_eq!(ds.impl_names(), ["ch4", "mpich", "openmpi", "aaa", "zzz"]);
    }

    #[test]
    fn header_only_is_empty_not_an_error() {
        let ds = parse("# nothing yet\nbench\timpl\tsize\tvalue\n").unwrap();
        assert!(ds.is_empty());
        assert!(ds.benches().is_empty());
    }

    #[test]
    fn missing_or_wrong_header_is_an_error() {
        let e = parse("").unwrap_err();
        assert!(e.message.contains("no header"), "{e}");
        let e = parse("# c\nbench\tsize\timpl\tvalue\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.message.contains("expected the header"), "{e}");
        let e = parse("latency\tch4\t1\t2\n").unwrap_err();
        assert_eq!(e.line, 1);
    }

    #[test]
    fn malformed_lines_name_their_line_number() {
        let cases: &[(&str, &str)] = &[
            ("latency\tch4\t1", "4 tab-separated fields"),
            ("latency\tch4\t1\t2\t3", "found 5"),
            ("latency ch4 1 2", "found 1"),
            ("latency\tch4\t-1\t2", "size `-1`"),
            ("latency\tch4\t1.5\t2", "size `1.5`"),
            ("latency\tch4\t8\tfast", "value `fast` is not a number"),
            ("latency\tch4\t8\tNaN", "finite"),
            ("latency\tch4\t8\tinf", "finite"),
            ("latency\tch4\t8\t-0.5", ">= 0"),
            ("\tch4\t8\t1", "empty bench"),
            ("latency\t\t8\t1", "empty impl"),
            ("../etc/passwd\tch4\t8\t1", "file name"),
            (".hidden\tch4\t8\t1", "file name"),
        ];
        for (bad, expected) in cases {
            let text = format!("bench\timpl\tsize\tvalue\nlatency\tch4\t1\t2\n\n{bad}\n");
            let e = parse(&text).unwrap_err();
            assert_eq!(e.line, 4, "wrong line for {bad:?}: {e}");
            assert!(e.message.contains(expected), "{bad:?}: {e}");
            assert!(e.to_string().starts_with("line 4: "), "{e}");
        }
    }

    #[test]
    fn median_min_max_odd_and_even() {
        assert_eq!(summarize(&[]), None);
        let s = summarize(&[5.0]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.rounds), (5.0, 5.0, 5.0, 1));
        let s = summarize(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.rounds), (2.0, 1.0, 3.0, 3));
        let s = summarize(&[4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.rounds), (2.5, 1.0, 4.0, 4));
        // One outlier round moves the max, not the median.
        let s = summarize(&[1.0, 1.1, 0.9, 1.0, 50.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (1.0, 0.9, 50.0));
    }
}

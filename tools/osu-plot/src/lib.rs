//! osu-plot: turn OSU-style benchmark results (ch4 against other MPI implementations) into
//! PNG charts and text tables.
//!
//! This is a developer tool beside the ch4 crates, not part of the MPI library: the
//! benchmark script writes one TSV file; `osu-plot DATA.tsv OUTDIR` writes
//! `OUTDIR/<bench>.png` for every benchmark in it and prints a table per benchmark.
//!
//! # Input
//!
//! Tab-separated text whose first line (after `#` comments and blank lines, which are
//! skipped anywhere) is exactly `bench<TAB>impl<TAB>size<TAB>value`:
//!
//! * `bench`: `latency`, `bw`, `bibw`, `mbw_mr`, `multi_lat` or any other name (each gets its
//!   own chart; the name picks the y axis, see [`axis::Kind`]).
//! * `impl`: the implementation, e.g. `ch4`, `mpich`, `openmpi`.
//! * `size`: message size in bytes, an integer, may be 0.
//! * `value`: µs for latencies, MB/s for bandwidths, messages/s for `mbw_mr`.
//!
//! The same (bench, impl, size) normally appears once per round; the chart shows the median
//! and the min–max spread. A malformed line is an error naming its line number.
//!
//! # Charts
//!
//! One PNG per benchmark, 1000x650 by default: x is the message size on a log2 axis, with
//! size 0 drawn one step left of the smallest other size and labelled "0" (see
//! [`axis::XAxis`]); y is the median over rounds, log10 for latencies and linear from 0
//! otherwise, its label saying which way is better. Each implementation is a line with
//! markers and a min–max whisker per point; ch4 is listed first and drawn on top.
//!
//! # Layering
//!
//! * [`data`]: parsing and statistics, no drawing.
//! * [`axis`]: axis ranges, tick positions and labels, no drawing.
//! * [`style`]: names, colors and markers per implementation.
//! * [`table`]: the text table.
//! * [`font`] and [`render`]: plotters, the only parts that draw.
//! * [`run`]: all of the above for one input file; the binary is a thin argument parser.
//!
//! # Fonts
//!
//! plotters is built with `default-features = false` and its `ab_glyph` feature: text is
//! rasterized in pure Rust from a TTF registered at run time, so nothing needs fontconfig or
//! freetype at build time. The font comes from `--font`, `$OSU_PLOT_FONT`, or
//! [`font::DEFAULT_FONT`] (Debian `fonts-dejavu-core`).

#![deny(unsafe_code)]

pub mod axis;
pub mod data;
pub mod font;
pub mod render;
pub mod style;
pub mod table;

use std::fmt;
use std::path::{Path, PathBuf};

pub use render::{RenderOptions, XQuantity};

/// Everything that can go wrong between reading the data and writing the last chart.
#[derive(Debug)]
pub enum Error {
    /// The data file or output directory could not be read or written.
    Io {
        /// The file or directory concerned.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The data file is malformed.
    Parse {
        /// The data file.
        path: PathBuf,
        /// Which line and why.
        source: data::ParseError,
    },
    /// The data file has a header but no measurements.
    NoData {
        /// The data file.
        path: PathBuf,
    },
    /// The font could not be loaded.
    Font {
        /// The font file tried.
        path: PathBuf,
        /// Why it failed and what to do about it.
        reason: String,
    },
    /// plotters failed to draw or save a chart.
    Render {
        /// The PNG being written.
        path: PathBuf,
        /// The step that failed and plotters' message.
        reason: String,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { path, source } => write!(f, "{}: {source}", path.display()),
            Error::Parse { path, source } => write!(f, "{}: {source}", path.display()),
            Error::NoData { path } => {
                write!(f, "{}: no measurements after the header", path.display())
            }
            Error::Font { path, reason } => write!(f, "font {}: {reason}", path.display()),
            Error::Render { path, reason } => {
                write!(f, "cannot render {}: {reason}", path.display())
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            Error::Parse { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// What [`run`] produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The PNG files written, one per benchmark, in benchmark order.
    pub charts: Vec<PathBuf>,
    /// The tables of all benchmarks, ready to print.
    pub tables: String,
}

/// Read `data`, write one chart per benchmark into `out_dir` (created if missing) and
/// return the tables.
///
/// The font at `font_path` is registered first, so a missing font fails before any file is
/// written.
pub fn run(
    data: &Path,
    out_dir: &Path,
    font_path: &Path,
    opts: &RenderOptions,
) -> Result<Report, Error> {
    let text = std::fs::read_to_string(data).map_err(|source| Error::Io {
        path: data.to_path_buf(),
        source,
    })?;
    let dataset = data::parse(&text).map_err(|source| Error::Parse {
        path: data.to_path_buf(),
        source,
    })?;
    if dataset.is_empty() {
        return Err(Error::NoData {
            path: data.to_path_buf(),
        });
    }
    font::register(font_path)?;
    std::fs::create_dir_all(out_dir).map_err(|source| Error::Io {
        path: out_dir.to_path_buf(),
        source,
    })?;
    let styles = style::assign(&dataset.impl_names());
    let mut report = Report {
        charts: Vec::new(),
        tables: String::new(),
    };
    for bench in dataset.benches() {
        let path = out_dir.join(format!("{}.png", bench.name));
        render::render_bench(&bench, &styles, &path, opts)?;
        report.charts.push(path);
        if !report.tables.is_empty() {
            report.tables.push('\n');
        }
        report.tables.push_str(&table::format_table(&bench, opts.x));
    }
    Ok(report)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::path::PathBuf;

    /// A fresh, empty directory under the system temp dir, unique per test and process.
    pub(crate) fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("osu-plot-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// The font the end-to-end tests draw with; they fail, saying why, if it is missing.
    fn test_font() -> PathBuf {
        let path = font::resolve(None, std::env::var_os(font::FONT_ENV));
        assert!(
            path.exists(),
            "end-to-end tests need a TTF at {} (apt-get install fonts-dejavu-core, or set {})",
            path.display(),
            font::FONT_ENV
        );
        path
    }

    /// Width and height from a PNG's IHDR chunk, after checking the signature.
    fn png_dimensions(bytes: &[u8]) -> (u32, u32) {
        const SIGNATURE: [u8; 8] = [0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1a, b'\n'];
        assert!(bytes.len() > 24, "PNG too short: {} bytes", bytes.len());
        assert_eq!(bytes[..8], SIGNATURE, "not a PNG signature");
        assert_eq!(&bytes[8..12], &13u32.to_be_bytes(), "IHDR length");
        assert_eq!(&bytes[12..16], b"IHDR", "first chunk must be IHDR");
        let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        (be(&bytes[16..20]), be(&bytes[20..24]))
    }

    /// A deterministic OSU-like dataset: 5 rounds, 3 implementations, sizes 0..4 MiB.
    pub(crate) fn synthetic_tsv() -> String {
        let mut s = String::from("# synthetic data for osu-plot tests\nbench\timpl\tsize\tvalue\n");
        let impls = [("ch4", 1.0), ("mpich", 1.25), ("openmpi", 1.4)];
        let sizes = std::iter::once(0u64).chain((0..=22).map(|p| 1u64 << p));
        for size in sizes {
            for round in 0..5u32 {
                // Jitter in [-4%, +4%], deterministic.
                let jitter = 1.0 + (f64::from((round * 7 + (size % 13) as u32) % 9) - 4.0) / 100.0;
                for (name, factor) in impls {
                    let sz = size as f64;
                    let lat = (0.18 + sz / 12_000.0) * factor * jitter;
                    let bw = sz / (0.35 * factor + sz / 11_000.0) * jitter;
                    let mr = 1e6 * 9.0 / (1.0 + sz / 8_000.0) / factor * jitter;
                    for (bench, v) in [
                        ("latency", lat),
                        ("bw", bw),
                        ("bibw", 1.8 * bw),
                        ("mbw_mr", mr),
                        ("multi_lat", 1.3 * lat),
                    ] {
                        if (bench == "bw" || bench == "bibw" || bench == "mbw_mr") && size == 0 {
                            continue;
                        }
                        s.push_str(&format!("{bench}\t{name}\t{size}\t{v:.4}\n"));
                    }
                }
            }
        }
        s
    }

    #[test]
    fn end_to_end_writes_pngs_of_the_right_size() {
        let font = test_font();
        let dir = temp_dir("e2e");
        let data = dir.join("data.tsv");
        std::fs::write(&data, synthetic_tsv()).unwrap();
        let out = dir.join("charts");
        let opts = RenderOptions {
            setup: Some("shm, 2 processes".to_string()),
            ..RenderOptions::default()
        };
        let report = run(&data, &out, &font, &opts).unwrap();

        let names: Vec<String> = report
            .charts
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "latency.png",
                "bw.png",
                "bibw.png",
                "mbw_mr.png",
                "multi_lat.png"
            ]
        );
        for chart in &report.charts {
            let bytes = std::fs::read(chart).unwrap();
            assert_eq!(png_dimensions(&bytes), (1000, 650), "{}", chart.display());
            assert!(bytes.len() > 10_000, "{} looks empty", chart.display());
        }
        assert_eq!(report.tables.matches("== ").count(), 5);
        assert!(report.tables.contains("ch4/mpich"));
        assert!(report.tables.contains("median of 5 rounds"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn custom_size_and_unknown_bench() {
        let font = test_font();
        let dir = temp_dir("custom");
        let data = dir.join("d.tsv");
        std::fs::write(
            &data,
            "bench\timpl\tsize\tvalue\nallreduce\tfoo\t8\t3\nallreduce\tfoo\t8\t5\nallreduce\tbar\t16\t0\n",
        )
        .unwrap();
        let opts = RenderOptions {
            width: 640,
            height: 480,
            setup: None,
            ..RenderOptions::default()
        };
        let report = run(&data, &dir, &font, &opts).unwrap();
        assert_eq!(report.charts, [dir.join("allreduce.png")]);
        let bytes = std::fs::read(&report.charts[0]).unwrap();
        assert_eq!(png_dimensions(&bytes), (640, 480));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn errors_name_the_problem() {
        let dir = temp_dir("errors");
        let font = PathBuf::from(font::DEFAULT_FONT);
        let opts = RenderOptions::default();

        let missing = dir.join("missing.tsv");
        let e = run(&missing, &dir, &font, &opts).unwrap_err();
        assert!(matches!(e, Error::Io { .. }), "{e}");
        assert!(e.to_string().contains("missing.tsv"), "{e}");

        let bad = dir.join("bad.tsv");
        std::fs::write(&bad, "bench\timpl\tsize\tvalue\nlatency\tch4\tx\t1\n").unwrap();
        let e = run(&bad, &dir, &font, &opts).unwrap_err();
        assert!(e.to_string().contains("bad.tsv: line 2: size `x`"), "{e}");

        let empty = dir.join("empty.tsv");
        std::fs::write(&empty, "bench\timpl\tsize\tvalue\n").unwrap();
        let e = run(&empty, &dir, &font, &opts).unwrap_err();
        assert!(matches!(e, Error::NoData { .. }), "{e}");

        let good = dir.join("good.tsv");
        std::fs::write(&good, "bench\timpl\tsize\tvalue\nlatency\tch4\t1\t1\n").unwrap();
        let e = run(&good, &dir, Path::new("/nonexistent/x.ttf"), &opts).unwrap_err();
        assert!(e.to_string().contains("fonts-dejavu-core"), "{e}");
        assert!(
            !dir.join("latency.png").exists(),
            "nothing written without a font"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

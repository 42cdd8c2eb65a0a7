//! Drawing one benchmark as a PNG with plotters.
//!
//! Per implementation: a min–max whisker at every size (the spread over rounds), a line
//! through the medians, and a marker per point. ch4 is drawn first so it heads the legend,
//! and drawn again at the end, unlabelled, so its line is on top where lines cross.

use crate::axis::{Kind, XAxis, YAxis};
use crate::data::Bench;
use crate::font::FAMILY;
use crate::style::{ImplStyle, Marker};
use crate::Error;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::coord::types::RangedCoordf64;
use plotters::element::{Drawable, PointCollection};
use plotters::prelude::*;
use plotters_backend::{BackendCoord, DrawingErrorKind};
use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;

/// What the chart needs beyond the data.
#[derive(Debug, Clone)]
pub struct RenderOptions {
    /// Image width in pixels.
    pub width: u32,
    /// Image height in pixels.
    pub height: u32,
    /// How the benchmark was run, shown in parentheses in the title (`shm, 2 processes`);
    /// `None` leaves the parentheses out. The data file does not say, so the caller must.
    pub setup: Option<String>,
    /// What the data's `size` column counts: message sizes (the OSU programs) or ranks (an
    /// application run at several job sizes), for the x axis, the table and the title.
    pub x: XQuantity,
}

/// What the x axis counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum XQuantity {
    /// Message size in bytes; the bench is an OSU program (`osu_` in the title).
    #[default]
    MessageSize,
    /// Ranks of the job; the bench is an application's figure, named as it is.
    Ranks,
}

impl XQuantity {
    /// The axis description.
    pub fn desc(self) -> &'static str {
        match self {
            XQuantity::MessageSize => "message size (bytes, log2 scale)",
            XQuantity::Ranks => "ranks (processes, log2 scale)",
        }
    }

    /// The table's first column.
    pub fn column(self) -> &'static str {
        match self {
            XQuantity::MessageSize => "size",
            XQuantity::Ranks => "ranks",
        }
    }
}

impl Default for RenderOptions {
    fn default() -> Self {
        RenderOptions {
            width: 1000,
            height: 650,
            setup: None,
            x: XQuantity::MessageSize,
        }
    }
}

/// The chart title: "ch4 vs MPICH vs Open MPI — osu_latency (shm, 2 processes), median of 5
/// rounds". A varying round count is shown as a range so a missed round is visible.
pub fn title(
    bench: &Bench,
    styles: &BTreeMap<String, ImplStyle>,
    setup: Option<&str>,
    x: XQuantity,
) -> String {
    let impls: Vec<&str> = bench
        .series
        .iter()
        .map(|s| {
            styles
                .get(&s.impl_name)
                .map_or(s.impl_name.as_str(), |st| st.label.as_str())
        })
        .collect();
    let osu = if bench.name.starts_with("osu_") || x == XQuantity::Ranks {
        bench.name.clone()
    } else {
        format!("osu_{}", bench.name)
    };
    let setup = setup
        .filter(|s| !s.is_empty())
        .map_or(String::new(), |s| format!(" ({s})"));
    let (lo, hi) = bench.rounds_range();
    let rounds = match (lo, hi) {
        (1, 1) => "1 round".to_string(),
        (l, h) if l == h => format!("median of {l} rounds"),
        (l, h) => format!("median of {l}–{h} rounds"),
    };
    format!("{} — {osu}{setup}, {rounds}", impls.join(" vs "))
}

/// A linear `f64` axis whose grid lines are exactly the ones [`XAxis`]/[`YAxis`] computed.
///
/// plotters' own `with_key_points` wrapper would do, except that it loses the default
/// value formatting the mesh requires even when a label formatter is supplied.
struct Ticked {
    inner: RangedCoordf64,
    bold: Vec<f64>,
    light: Vec<f64>,
}

impl Ticked {
    fn new(lo: f64, hi: f64, bold: &[f64], light: &[f64]) -> Ticked {
        Ticked {
            inner: (lo..hi).into(),
            bold: bold.to_vec(),
            light: light.to_vec(),
        }
    }
}

impl Ranged for Ticked {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.inner.map(value, limit)
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            self.light.clone()
        } else {
            self.bold.clone()
        }
    }

    fn range(&self) -> Range<f64> {
        self.inner.range()
    }
}

type Chart<'a, 'b> = ChartContext<'a, BitMapBackend<'b>, Cartesian2d<Ticked, Ticked>>;

/// Render `bench` to the PNG file `path`, replacing it if present.
///
/// `styles` must hold a style for every implementation of the bench (see
/// [`crate::style::assign`]); a font must have been registered ([`crate::font::register`]).
pub fn render_bench(
    bench: &Bench,
    styles: &BTreeMap<String, ImplStyle>,
    path: &Path,
    opts: &RenderOptions,
) -> Result<(), Error> {
    let fail = |what: &str, e: &dyn std::fmt::Display| Error::Render {
        path: path.to_path_buf(),
        reason: format!("{what}: {e}"),
    };
    if opts.width < 200 || opts.height < 150 {
        return Err(fail("image size", &"must be at least 200x150 pixels"));
    }
    for s in &bench.series {
        if !styles.contains_key(&s.impl_name) {
            return Err(fail("no style for implementation", &s.impl_name));
        }
    }
    let kind = Kind::of(&bench.name);
    let xa = XAxis::new(&bench.sizes());
    let stats = bench.series.iter().flat_map(|s| s.points.iter());
    let ymin = stats
        .clone()
        .map(|p| p.stats.min)
        .fold(f64::INFINITY, f64::min);
    let ymax = stats.map(|p| p.stats.max).fold(0.0, f64::max);
    let ya = YAxis::new(ymin, ymax, kind.wants_log());

    let root = BitMapBackend::new(path, (opts.width, opts.height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail("fill", &e))?;

    // Shrink the title until it fits; long implementation lists must not be clipped.
    let title = title(bench, styles, opts.setup.as_deref(), opts.x);
    let mut title_px = 22.0;
    while title_px > 12.0 {
        let (w, _) = root
            .estimate_text_size(&title, &TextStyle::from((FAMILY, title_px).into_font()))
            .map_err(|e| fail("measure title", &e))?;
        if w + 40 <= opts.width {
            break;
        }
        title_px -= 1.0;
    }

    let x_range = Ticked::new(xa.lo, xa.hi, &xa.ticks, &xa.light);
    let y_range = Ticked::new(ya.lo, ya.hi, &ya.ticks, &ya.light);
    let mut chart = ChartBuilder::on(&root)
        .caption(&title, (FAMILY, title_px).into_font())
        .margin(16)
        .margin_right(28)
        .x_label_area_size(52)
        .y_label_area_size(78)
        .build_cartesian_2d(x_range, y_range)
        .map_err(|e| fail("build chart", &e))?;

    let x_label = |p: &f64| xa.label(*p);
    let y_label = |p: &f64| ya.label(*p);
    chart
        .configure_mesh()
        .x_desc(opts.x.desc())
        .y_desc(kind.y_desc(ya.log))
        .x_label_formatter(&x_label)
        .y_label_formatter(&y_label)
        .label_style((FAMILY, 15))
        .axis_desc_style((FAMILY, 17))
        .bold_line_style(RGBColor(205, 205, 205))
        .light_line_style(RGBColor(238, 238, 238))
        .axis_style(RGBColor(90, 90, 90))
        .draw()
        .map_err(|e| fail("draw axes", &e))?;

    // Whiskers of different implementations at one size would hide each other; shift each
    // implementation's whiskers a few pixels sideways (the medians stay in place).
    let n = bench.series.len() as f64;
    for (i, series) in bench.series.iter().enumerate() {
        let dodge = (i as f64 - (n - 1.0) / 2.0) * WHISKER_DODGE;
        let look = &styles[&series.impl_name];
        draw_series(&mut chart, series, look, &xa, &ya, Some(dodge))
            .map_err(|e| fail("draw series", &e))?;
    }
    if let Some(ch4) = bench.series.iter().find(|s| s.impl_name == "ch4") {
        draw_series(&mut chart, ch4, &styles["ch4"], &xa, &ya, None)
            .map_err(|e| fail("draw series", &e))?;
    }

    chart
        .configure_series_labels()
        .position(legend_position(bench, &xa, &ya))
        .margin(14)
        .legend_area_size(34)
        .label_font((FAMILY, 16))
        .background_style(WHITE.mix(0.92))
        .border_style(RGBColor(160, 160, 160))
        .draw()
        .map_err(|e| fail("draw legend", &e))?;

    root.present().map_err(|e| fail("write PNG", &e))?;
    Ok(())
}

/// Sideways shift between the whiskers of neighbouring implementations, in log2 units
/// (about 3 px per implementation on a 1000 px chart of 0 B..4 MiB).
const WHISKER_DODGE: f64 = 0.09;

/// Line and markers of one implementation. `whiskers: Some(dodge)` also draws the min–max
/// whiskers shifted by `dodge` and adds the legend entry; `None` redraws the line only.
fn draw_series<'a, 'b: 'a>(
    chart: &mut Chart<'a, 'b>,
    series: &crate::data::Series,
    style: &ImplStyle,
    xa: &XAxis,
    ya: &YAxis,
    whiskers: Option<f64>,
) -> Result<(), DrawingAreaErrorKind<<BitMapBackend<'b> as DrawingBackend>::ErrorType>> {
    let (r, g, b) = style.rgb;
    let color = RGBColor(r, g, b);
    let points: Vec<(f64, f64)> = series
        .points
        .iter()
        .map(|p| (xa.pos(p.size), ya.pos(p.stats.median)))
        .collect();

    if let Some(dodge) = whiskers {
        let whisker_color = color.mix(0.8);
        chart.draw_series(
            series
                .points
                .iter()
                .filter(|p| p.stats.min < p.stats.max)
                .map(|p| {
                    let x = xa.pos(p.size) + dodge;
                    Whisker {
                        ends: [(x, ya.pos(p.stats.min)), (x, ya.pos(p.stats.max))],
                        color: whisker_color,
                    }
                }),
        )?;
    }

    let line = chart.draw_series(LineSeries::new(
        points.iter().copied(),
        color.stroke_width(style.width),
    ))?;
    if whiskers.is_some() {
        let (marker, width) = (style.marker, style.width);
        line.label(style.label.clone()).legend(move |(x, y)| {
            EmptyElement::at((x, y))
                + PathElement::new(vec![(0, 0), (24, 0)], color.stroke_width(width))
                + MarkerDot::new((12, 0), marker, color)
        });
    }
    chart.draw_series(
        points
            .iter()
            .map(|&at| MarkerDot::new(at, style.marker, color)),
    )?;
    Ok(())
}

/// A vertical min–max bar with short caps, the spread of one point over the rounds.
///
/// plotters' `ErrorBar` would also draw a circle at the median, which shows beside the
/// marker once whiskers are shifted sideways.
struct Whisker {
    ends: [(f64, f64); 2],
    color: RGBAColor,
}

impl<'a> PointCollection<'a, (f64, f64)> for &'a Whisker {
    type Point = &'a (f64, f64);
    type IntoIter = &'a [(f64, f64)];

    fn point_iter(self) -> Self::IntoIter {
        &self.ends
    }
}

impl<DB: DrawingBackend> Drawable<DB> for Whisker {
    fn draw<I: Iterator<Item = BackendCoord>>(
        &self,
        mut points: I,
        backend: &mut DB,
        _: (u32, u32),
    ) -> Result<(), DrawingErrorKind<DB::ErrorType>> {
        let (Some(low), Some(high)) = (points.next(), points.next()) else {
            return Ok(());
        };
        let style = self.color.stroke_width(1);
        backend.draw_line(low, high, &style)?;
        for (x, y) in [low, high] {
            backend.draw_line((x - 4, y), (x + 4, y), &style)?;
        }
        Ok(())
    }
}

/// One marker at one point: a plotters element so any shape is the same type, which a
/// single `draw_series` call needs.
struct MarkerDot<C> {
    at: C,
    marker: Marker,
    color: RGBColor,
}

impl<C> MarkerDot<C> {
    fn new(at: C, marker: Marker, color: RGBColor) -> Self {
        MarkerDot { at, marker, color }
    }
}

impl<'a, C: 'a> PointCollection<'a, C> for &'a MarkerDot<C> {
    type Point = &'a C;
    type IntoIter = std::iter::Once<&'a C>;

    fn point_iter(self) -> Self::IntoIter {
        std::iter::once(&self.at)
    }
}

impl<C, DB: DrawingBackend> Drawable<DB> for MarkerDot<C> {
    fn draw<I: Iterator<Item = BackendCoord>>(
        &self,
        mut points: I,
        backend: &mut DB,
        _: (u32, u32),
    ) -> Result<(), DrawingErrorKind<DB::ErrorType>> {
        let Some((x, y)) = points.next() else {
            return Ok(());
        };
        let fill = self.color.filled();
        let stroke = self.color.stroke_width(2);
        match self.marker {
            Marker::Circle => backend.draw_circle((x, y), 5, &fill, true),
            Marker::Ring => backend.draw_circle((x, y), 5, &stroke, false),
            Marker::Triangle => {
                backend.fill_polygon([(x, y - 6), (x - 6, y + 5), (x + 6, y + 5)], &fill)
            }
            Marker::Square => backend.draw_rect((x - 4, y - 4), (x + 4, y + 4), &fill, true),
            Marker::Diamond => {
                backend.fill_polygon([(x, y - 6), (x + 6, y), (x, y + 6), (x - 6, y)], &fill)
            }
            Marker::Cross => {
                backend.draw_line((x - 5, y - 5), (x + 5, y + 5), &stroke)?;
                backend.draw_line((x - 5, y + 5), (x + 5, y - 5), &stroke)
            }
        }
    }
}

/// The legend corner covering the fewest data points (medians and whisker ends), so the
/// legend does not hide data: upper left for latency and bandwidth (small values at small
/// sizes), upper right for message rate (which falls with size).
pub fn legend_position(bench: &Bench, xa: &XAxis, ya: &YAxis) -> SeriesLabelPosition {
    let norm = |x: f64, y: f64| ((x - xa.lo) / (xa.hi - xa.lo), (y - ya.lo) / (ya.hi - ya.lo));
    let pts: Vec<(f64, f64)> = bench
        .series
        .iter()
        .flat_map(|s| s.points.iter())
        .flat_map(|p| {
            let x = xa.pos(p.size);
            [p.stats.min, p.stats.median, p.stats.max].map(|v| norm(x, ya.pos(v)))
        })
        .collect();
    // Legend box size as a fraction of the plot: about 35% wide, 8% tall per entry.
    let w = 0.35;
    let h = (0.08 * bench.series.len() as f64 + 0.04).min(0.6);
    let corners = [
        (SeriesLabelPosition::UpperLeft, (0.0, w), (1.0 - h, 1.0)),
        (
            SeriesLabelPosition::UpperRight,
            (1.0 - w, 1.0),
            (1.0 - h, 1.0),
        ),
        (SeriesLabelPosition::LowerRight, (1.0 - w, 1.0), (0.0, h)),
        (SeriesLabelPosition::LowerLeft, (0.0, w), (0.0, h)),
    ];
    corners
        .into_iter()
        .min_by_key(|(_, (x0, x1), (y0, y1))| {
            pts.iter()
                .filter(|(x, y)| x >= x0 && x <= x1 && y >= y0 && y <= y1)
                .count()
        })
        .map_or(SeriesLabelPosition::UpperLeft, |(pos, _, _)| pos)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::parse;
    use crate::style::assign;

    fn bench(text: &str) -> Bench {
        let ds = parse(&format!("bench\timpl\tsize\tvalue\n{text}")).unwrap();
        ds.benches().remove(0)
    }

    #[test]
    fn title_names_impls_setup_and_rounds() {
        let b = bench("latency\tmpich\t1\t2\nlatency\tch4\t1\t1\nlatency\tch4\t1\t1\n");
        let styles = assign(&["ch4".to_string(), "mpich".to_string()]);
        assert_eq!(
            title(
                &b,
                &styles,
                Some("shm, 2 processes"),
                XQuantity::MessageSize
            ),
            "ch4 vs MPICH — osu_latency (shm, 2 processes), median of 1–2 rounds"
        );
        let b = bench("osu_bw\topenmpi\t1\t2\nosu_bw\topenmpi\t1\t3\n");
        let styles = assign(&["openmpi".to_string()]);
        assert_eq!(
            title(&b, &styles, Some(""), XQuantity::MessageSize),
            "Open MPI — osu_bw, median of 2 rounds"
        );
        // An application's figure at several job sizes keeps its own name.
        let b = bench(
            "hpcg_gflops	ch4	8	6.1
",
        );
        let styles = assign(&["ch4".to_string()]);
        assert_eq!(
            title(&b, &styles, None, XQuantity::Ranks),
            "ch4 — hpcg_gflops, 1 round"
        );
    }

    #[test]
    fn legend_goes_where_the_data_is_not() {
        // Rising curve (latency, bandwidth): the upper left is empty.
        let rising: String = (0..20)
            .map(|p| format!("lat\tch4\t{}\t{}\n", 1u64 << p, 1.0 + f64::from(p) * 10.0))
            .collect();
        let b = bench(&rising);
        let xa = XAxis::new(&b.sizes());
        let ya = YAxis::new(1.0, 191.0, false);
        assert!(matches!(
            legend_position(&b, &xa, &ya),
            SeriesLabelPosition::UpperLeft
        ));
        // Falling curve (message rate): the upper right is empty.
        let falling: String = (0..20)
            .map(|p| format!("mr\tch4\t{}\t{}\n", 1u64 << p, 200.0 - f64::from(p) * 10.0))
            .collect();
        let b = bench(&falling);
        let ya = YAxis::new(10.0, 200.0, false);
        assert!(matches!(
            legend_position(&b, &xa, &ya),
            SeriesLabelPosition::UpperRight
        ));
    }

    #[test]
    fn tiny_image_is_an_error_not_a_panic() {
        let b = bench("latency\tch4\t1\t1\n");
        let styles = assign(&["ch4".to_string()]);
        let opts = RenderOptions {
            width: 10,
            height: 10,
            setup: None,
            ..RenderOptions::default()
        };
        let e = render_bench(&b, &styles, Path::new("/nonexistent/x.png"), &opts).unwrap_err();
        assert!(e.to_string().contains("at least"), "{e}");
        let e = render_bench(
            &b,
            &BTreeMap::new(),
            Path::new("/x.png"),
            &RenderOptions::default(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("no style"), "{e}");
    }
}

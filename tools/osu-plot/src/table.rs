//! The text table printed next to each chart: medians per implementation and ch4's ratio to
//! each other implementation, so exact numbers can be quoted without reading pixels.

use crate::axis::{sig3, size_label, Kind};
use crate::data::Bench;
use crate::render::XQuantity;
use std::fmt::Write as _;

/// Format the table for one benchmark.
///
/// Columns: size, the median of every implementation, then `ch4/<other>` for every other
/// implementation when one is named `ch4`. A missing measurement is `-`. Columns carry the
/// implementation names as written in the data (no spaces), so the table splits on
/// whitespace.
pub fn format_table(bench: &Bench, x: XQuantity) -> String {
    let kind = Kind::of(&bench.name);
    let ch4 = bench.series.iter().position(|s| s.impl_name == "ch4");
    let mut header: Vec<String> = vec![x.column().to_string()];
    header.extend(bench.series.iter().map(|s| s.impl_name.clone()));
    if let Some(c) = ch4 {
        header.extend(
            bench
                .series
                .iter()
                .enumerate()
                .filter(|&(i, _)| i != c)
                .map(|(_, s)| format!("ch4/{}", s.impl_name)),
        );
    }

    let mut rows: Vec<Vec<String>> = Vec::new();
    for size in bench.sizes() {
        let medians: Vec<Option<f64>> = bench
            .series
            .iter()
            .map(|s| s.at(size).map(|st| st.median))
            .collect();
        let mut row = vec![size_label(size)];
        row.extend(medians.iter().map(|m| m.map_or("-".to_string(), sig3)));
        if let Some(c) = ch4 {
            for (i, other) in medians.iter().enumerate() {
                if i == c {
                    continue;
                }
                row.push(match (medians[c], other) {
                    (Some(a), Some(b)) if *b > 0.0 => format!("{:.2}", a / b),
                    _ => "-".to_string(),
                });
            }
        }
        rows.push(row);
    }

    let widths: Vec<usize> = (0..header.len())
        .map(|col| {
            rows.iter()
                .map(|r| r[col].chars().count())
                .chain(std::iter::once(header[col].chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let (lo, hi) = bench.rounds_range();
    let rounds = if lo == hi {
        format!("{lo}")
    } else {
        format!("{lo}-{hi}")
    };
    let mut out = format!(
        "== {}: {}, median of {rounds} rounds ==\n",
        bench.name,
        kind.unit_desc()
    );
    for row in std::iter::once(&header).chain(rows.iter()) {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, &w)| format!("{cell:>w$}"))
            .collect();
        let _ = writeln!(out, "{}", cells.join("  ").trim_end());
    }
    if ch4.is_some() && bench.series.len() > 1 && !kind.ratio_note().is_empty() {
        let _ = writeln!(out, "({})", kind.ratio_note());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::parse;

    #[test]
    fn table_has_medians_ratios_and_dashes() {
        let text = "bench\timpl\tsize\tvalue\n\
            latency\tch4\t0\t0.2\nlatency\tch4\t0\t0.4\nlatency\tch4\t0\t0.3\n\
            latency\tmpich\t0\t0.6\nlatency\tmpich\t0\t0.6\nlatency\tmpich\t0\t0.6\n\
            latency\topenmpi\t1024\t2\n";
        let bench = &parse(text).unwrap().benches()[0];
        let t = format_table(bench, XQuantity::MessageSize);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            lines[0],
            "== latency: µs, lower is better, median of 1-3 rounds =="
        );
        let header: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(
            header,
            [
                "size",
                "ch4",
                "mpich",
                "openmpi",
                "ch4/mpich",
                "ch4/openmpi"
            ]
        );
        let row0: Vec<&str> = lines[2].split_whitespace().collect();
        assert_eq!(row0, ["0", "0.3", "0.6", "-", "0.50", "-"]);
        let row1: Vec<&str> = lines[3].split_whitespace().collect();
        assert_eq!(row1, ["1K", "-", "-", "2", "-", "-"]);
        assert!(lines[4].contains("ch4 is faster"));
    }

    #[test]
    fn ranks_head_the_first_column_of_an_applications_table() {
        let text = "bench\timpl\tsize\tvalue\nminife_cg_seconds\tch4\t8\t2.0\nminife_cg_seconds\topenmpi\t8\t2.5\n";
        let t = format_table(&parse(text).unwrap().benches()[0], XQuantity::Ranks);
        let head = t.lines().nth(1).unwrap();
        assert!(head.trim_start().starts_with("ranks"), "{t}");
        assert!(
            t.contains("0.80") && t.contains("ratio < 1: ch4 is faster"),
            "{t}"
        );
    }

    #[test]
    fn no_ratio_columns_without_ch4() {
        let text = "bench\timpl\tsize\tvalue\nbw\tmpich\t8\t100\nbw\topenmpi\t8\t50\n";
        let t = format_table(&parse(text).unwrap().benches()[0], XQuantity::MessageSize);
        assert!(!t.contains("ch4/"), "{t}");
        assert!(!t.contains("faster"), "{t}");
    }
}

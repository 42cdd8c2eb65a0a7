//! The OSU-style programs (`benches/osu/`) as a user runs them: under `ch4run`, with OSU's
//! options, printing OSU's format. Tiny sizes and iteration counts: these check the programs,
//! not the performance.

mod common;

use common::jobs::{built, succeeded};
use std::process::Command;

/// Runs `program args…` as `ranks` processes under ch4run; returns (header lines, rows).
fn run(program: &str, ranks: u32, args: &[&str]) -> (Vec<String>, Vec<Vec<f64>>) {
    let dir = built();
    let out = Command::new(dir.join("ch4run"))
        .args(["-n", &ranks.to_string()])
        .arg(dir.join("examples").join(program))
        .args(args)
        .output()
        .expect("ch4run starts");
    let stdout = succeeded(out);
    let headers = stdout
        .lines()
        .filter(|l| l.starts_with('#'))
        .map(String::from)
        .collect();
    let rows = stdout
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            l.split_whitespace()
                .map(|v| {
                    v.parse::<f64>()
                        .unwrap_or_else(|_| panic!("not a number in {l:?}"))
                })
                .collect()
        })
        .collect();
    (headers, rows)
}

/// Every row has the size first and positive, finite values after it; sizes are as asked.
fn check_rows(rows: &[Vec<f64>], sizes: &[f64], values: usize) {
    let got: Vec<f64> = rows.iter().map(|r| r[0]).collect();
    assert_eq!(got, sizes);
    for r in rows {
        assert_eq!(r.len(), 1 + values, "{r:?}");
        assert!(r[1..].iter().all(|v| v.is_finite() && *v > 0.0), "{r:?}");
    }
}

#[test]
fn latency_prints_osu_format_for_every_size() {
    let (h, rows) = run("osu_latency", 2, &["-m", "0:64", "-i", "50", "-x", "5"]);
    assert!(h[0].starts_with("# OSU MPI Latency Test (ch4"), "{h:?}");
    assert_eq!(h.last().unwrap(), "# Size          Latency (us)");
    check_rows(&rows, &[0., 1., 2., 4., 8., 16., 32., 64.], 1);
}

#[test]
fn bandwidth_bidirectional_and_message_rate_run_their_windows() {
    let args = ["-m", "1024:4096", "-i", "4", "-x", "1", "-W", "8"];
    let (h, rows) = run("osu_bw", 2, &args);
    assert!(h[0].starts_with("# OSU MPI Bandwidth Test"), "{h:?}");
    assert_eq!(h[1], "# [ window size: 8 ]");
    check_rows(&rows, &[1024., 2048., 4096.], 1);
    let (h, rows) = run("osu_bibw", 2, &args);
    assert!(
        h[0].starts_with("# OSU MPI Bi-Directional Bandwidth Test"),
        "{h:?}"
    );
    check_rows(&rows, &[1024., 2048., 4096.], 1);
    let (h, rows) = run("osu_mbw_mr", 4, &args);
    assert_eq!(h[1], "# [ pairs: 2 ] [ window size: 8 ]");
    check_rows(&rows, &[1024., 2048., 4096.], 2);
    for r in &rows {
        // MB/s = messages/s × size / 10^6, both printed with two decimals: a slow run (2.57
        // MB/s on a loaded host) is off by up to the last digit's half, more than 0.1% of it.
        let expected = r[2] * r[0] / 1e6;
        let slack = (expected * 1e-3).max(0.005 + r[0] * 0.005 / 1e6);
        assert!((r[1] - expected).abs() <= slack, "{r:?}");
    }
}

#[test]
fn multi_latency_pairs_all_ranks() {
    let (h, rows) = run("osu_multi_lat", 4, &["-m", "0:8", "-i", "20", "-x", "2"]);
    assert_eq!(h[1], "# [ pairs: 2 ]");
    check_rows(&rows, &[0., 1., 2., 4., 8.], 1);
}

#[test]
fn bad_options_and_rank_counts_are_errors_not_panics() {
    let dir = built();
    let out = Command::new(dir.join("examples/osu_latency"))
        .args(["-W", "8"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("usage: osu_latency"));
    let out = Command::new(dir.join("ch4run"))
        .args(["-n", "3"])
        .arg(dir.join("examples/osu_multi_lat"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("even number of ranks"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

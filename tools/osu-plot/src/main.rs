//! `osu-plot DATA.tsv OUTDIR`: the command-line front of the `osu_plot` library.
//!
//! Parses arguments by hand (four options do not justify an argument-parsing dependency),
//! prints the tables to stdout and the written file names to stderr, so stdout can be
//! redirected into a report as is.

use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "\
usage: osu-plot [OPTIONS] DATA.tsv OUTDIR

Writes OUTDIR/<bench>.png for every benchmark in DATA.tsv and prints a table per benchmark.

DATA.tsv: tab-separated, header `bench<TAB>impl<TAB>size<TAB>value`, one line per
measurement and round; `#` comments and blank lines are ignored.

options:
  --font PATH      TrueType font for all text (default: $OSU_PLOT_FONT, else
                   /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf from fonts-dejavu-core)
  --setup TEXT     how the benchmark ran, shown in the title (default: \"shm, 2 processes\";
                   an empty TEXT leaves it out)
  --size WxH       image size in pixels (default: 1000x650)
  --x ranks        the size column counts ranks (an application's figure at several job
                   sizes), not message bytes
  -h, --help       print this help";

/// Parsed command line.
#[derive(Debug)]
struct Args {
    data: PathBuf,
    out_dir: PathBuf,
    font: Option<PathBuf>,
    opts: osu_plot::RenderOptions,
}

fn parse_args(mut args: impl Iterator<Item = std::ffi::OsString>) -> Result<Option<Args>, String> {
    let mut positional: Vec<PathBuf> = Vec::new();
    let mut font = None;
    let mut opts = osu_plot::RenderOptions {
        setup: Some("shm, 2 processes".to_string()),
        ..Default::default()
    };
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.to_str() {
            Some("-h" | "--help") => return Ok(None),
            Some("--font") => font = Some(PathBuf::from(value("--font")?)),
            Some("--setup") => {
                let v = value("--setup")?;
                let v = v
                    .into_string()
                    .map_err(|_| "--setup must be valid UTF-8".to_string())?;
                opts.setup = (!v.is_empty()).then_some(v);
            }
            Some("--size") => {
                let v = value("--size")?;
                let (w, h) = v
                    .to_str()
                    .and_then(|s| s.split_once('x'))
                    .and_then(|(w, h)| Some((w.parse().ok()?, h.parse().ok()?)))
                    .ok_or_else(|| format!("--size wants WxH, e.g. 1000x650, got {v:?}"))?;
                opts.width = w;
                opts.height = h;
            }
            Some("--x") => {
                let v = value("--x")?;
                opts.x = match v.to_str() {
                    Some("ranks") => osu_plot::XQuantity::Ranks,
                    Some("size") => osu_plot::XQuantity::MessageSize,
                    _ => return Err(format!("--x takes ranks or size, got {v:?}")),
                };
            }
            Some(s) if s.starts_with('-') && s.len() > 1 => {
                return Err(format!("unknown option {s}"));
            }
            _ => positional.push(PathBuf::from(arg)),
        }
    }
    let [data, out_dir] = <[PathBuf; 2]>::try_from(positional)
        .map_err(|p| format!("expected DATA.tsv and OUTDIR, got {} argument(s)", p.len()))?;
    Ok(Some(Args {
        data,
        out_dir,
        font,
        opts,
    }))
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args_os().skip(1)) {
        Ok(Some(args)) => args,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(msg) => {
            eprintln!("osu-plot: {msg}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let font = osu_plot::font::resolve(args.font, std::env::var_os(osu_plot::font::FONT_ENV));
    match osu_plot::run(&args.data, &args.out_dir, &font, &args.opts) {
        Ok(report) => {
            print!("{}", report.tables);
            for chart in &report.charts {
                eprintln!("wrote {}", chart.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("osu-plot: error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Option<Args>, String> {
        parse_args(args.iter().map(std::ffi::OsString::from))
    }

    #[test]
    fn positional_and_defaults() {
        let a = parse(&["d.tsv", "out"]).unwrap().unwrap();
        assert_eq!(a.data, PathBuf::from("d.tsv"));
        assert_eq!(a.out_dir, PathBuf::from("out"));
        assert_eq!(a.font, None);
        assert_eq!(a.opts.setup.as_deref(), Some("shm, 2 processes"));
        assert_eq!((a.opts.width, a.opts.height), (1000, 650));
    }

    #[test]
    fn options() {
        let a = parse(&[
            "--font", "f.ttf", "d.tsv", "--setup", "", "--size", "800x500", "o",
        ])
        .unwrap()
        .unwrap();
        assert_eq!(a.font, Some(PathBuf::from("f.ttf")));
        assert_eq!(a.opts.setup, None);
        assert_eq!((a.opts.width, a.opts.height), (800, 500));
        assert!(parse(&["-h"]).unwrap().is_none());
    }

    #[test]
    fn usage_errors() {
        assert!(parse(&[]).unwrap_err().contains("got 0"));
        assert!(parse(&["a", "b", "c"]).unwrap_err().contains("got 3"));
        assert!(parse(&["--font"]).unwrap_err().contains("needs a value"));
        assert!(parse(&["--size", "big", "a", "b"])
            .unwrap_err()
            .contains("WxH"));
        assert!(parse(&["--bogus", "a", "b"])
            .unwrap_err()
            .contains("unknown option"));
    }
}

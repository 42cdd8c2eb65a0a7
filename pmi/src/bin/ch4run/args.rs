//! Command-line parsing for ch4run, kept apart from the process handling so it can be tested.

use std::ffi::{OsStr, OsString};
use std::time::Duration;

use pmi::launch::{Bind, LaunchOptions, DEFAULT_GRACE, MAX_RANKS};

/// The outcome of parsing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// Run a job.
    Run(LaunchOptions),
    /// Print usage and exit successfully.
    Help,
}

/// The usage text.
pub const USAGE: &str = "\
usage: ch4run -n N [options] [--] program [args...]

Starts N copies of program on this host as ranks 0..N-1 of one job and serves them PMI-1
(the protocol MPICH's mpiexec speaks), so the same binaries also run under mpiexec.hydra.

options:
  -n, -np, --np N     number of ranks (1..=4096)
  -e, --env KEY=VAL   set KEY=VAL in every rank's environment (repeatable)
  -l, --prefix-output prefix every line of output with \"[rank] \"
  --pmi-port          serve PMI over TCP (PMI_PORT/PMI_ID) instead of inherited sockets
  --grace-ms MS       time ranks get between SIGTERM and SIGKILL on teardown (default 500)
  --bind-to core|none pin rank i to the i-th usable CPU when there are enough (default none)
  -h, --help          show this help

When a rank fails (non-zero exit, killed by a signal, or PMI abort), the other ranks are
terminated and ch4run exits non-zero naming the rank. SIGINT and SIGTERM are forwarded to
every rank.";

/// Parses the arguments after the program name.
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Parsed, String> {
    let mut args = args.into_iter();
    let mut ranks = None;
    let mut env = Vec::new();
    let mut prefix_output = false;
    let mut pmi_port = false;
    let mut grace = DEFAULT_GRACE;
    let mut bind = Bind::None;
    let program = loop {
        let Some(arg) = args.next() else {
            return Err("no program given".into());
        };
        let Some(s) = arg.to_str() else {
            // Not UTF-8, so not one of our options: the program.
            break arg;
        };
        let (opt, inline) = match s.split_once('=') {
            Some((o, v)) if o.starts_with("--") => (o, Some(OsString::from(v))),
            _ => (s, None),
        };
        let mut value = |name: &str| -> Result<OsString, String> {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match opt {
            "-h" | "--help" => return Ok(Parsed::Help),
            "-n" | "-np" | "--np" => {
                let v = value(opt)?;
                ranks = Some(parse_ranks(&v)?);
            }
            "-e" | "--env" => {
                let v = value(opt)?;
                env.push(parse_env(&v)?);
            }
            "-l" | "--prefix-output" => prefix_output = true,
            "--pmi-port" => pmi_port = true,
            "--grace-ms" => {
                let v = value(opt)?;
                let ms = v
                    .to_str()
                    .and_then(|v| v.parse::<u64>().ok())
                    .ok_or_else(|| format!("--grace-ms: {v:?} is not a number of milliseconds"))?;
                grace = Duration::from_millis(ms);
            }
            "--bind-to" => {
                let v = value(opt)?;
                bind = v
                    .to_str()
                    .ok_or_else(|| format!("--bind-to: {v:?} is not core or none"))?
                    .parse()
                    .map_err(|e| format!("--bind-to: {e}"))?;
            }
            "--" => match args.next() {
                Some(p) => break p,
                None => return Err("no program given after --".into()),
            },
            _ if s.starts_with('-') && s.len() > 1 => {
                return Err(format!("unknown option {s}"));
            }
            _ => break arg,
        }
    };
    let ranks = ranks.ok_or("-n N is required")?;
    Ok(Parsed::Run(LaunchOptions {
        ranks,
        env,
        prefix_output,
        pmi_port,
        grace,
        program,
        args: args.collect(),
        bind,
    }))
}

fn parse_ranks(v: &OsStr) -> Result<u32, String> {
    match v.to_str().and_then(|v| v.parse::<u32>().ok()) {
        Some(n) if (1..=MAX_RANKS).contains(&n) => Ok(n),
        _ => Err(format!("-n: {v:?} is not a rank count in 1..={MAX_RANKS}")),
    }
}

fn parse_env(v: &OsStr) -> Result<(OsString, OsString), String> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = v.as_bytes();
    match bytes.iter().position(|&b| b == b'=') {
        Some(eq) if eq > 0 => Ok((
            OsStr::from_bytes(&bytes[..eq]).to_owned(),
            OsStr::from_bytes(&bytes[eq + 1..]).to_owned(),
        )),
        _ => Err(format!("-e: {v:?} is not of the form KEY=VALUE")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Parsed, String> {
        parse(args.iter().map(OsString::from))
    }

    fn run(args: &[&str]) -> LaunchOptions {
        match p(args) {
            Ok(Parsed::Run(o)) => o,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn basic() {
        let o = run(&["-n", "4", "prog", "-x", "--", "y"]);
        assert_eq!(o.ranks, 4);
        assert_eq!(o.program, "prog");
        assert_eq!(o.args, ["-x", "--", "y"]);
        assert!(!o.prefix_output && !o.pmi_port);
        assert_eq!(o.grace, DEFAULT_GRACE);
        assert_eq!(o.bind, Bind::None);
        assert_eq!(run(&["-n", "2", "--bind-to", "core", "p"]).bind, Bind::Core);
        assert!(p(&["-n", "2", "--bind-to", "socket", "p"])
            .unwrap_err()
            .contains("socket"));
    }

    #[test]
    fn all_options() {
        let o = run(&[
            "-np",
            "2",
            "-e",
            "A=1",
            "--env=B=x=y",
            "-l",
            "--pmi-port",
            "--grace-ms",
            "50",
            "--",
            "-prog",
            "a",
        ]);
        assert_eq!(o.ranks, 2);
        assert_eq!(
            o.env,
            [("A".into(), "1".into()), ("B".into(), "x=y".into())]
        );
        assert!(o.prefix_output && o.pmi_port);
        assert_eq!(o.grace, Duration::from_millis(50));
        assert_eq!(o.program, "-prog");
        assert_eq!(o.args, ["a"]);
        assert_eq!(run(&["--np=3", "p"]).ranks, 3);
        assert!(run(&["-n", "1", "--prefix-output", "p"]).prefix_output);
    }

    #[test]
    fn errors() {
        assert!(p(&[]).is_err());
        assert!(p(&["prog"]).unwrap_err().contains("-n"));
        assert!(p(&["-n"]).is_err());
        assert!(p(&["-n", "0", "p"]).is_err());
        assert!(p(&["-n", "4097", "p"]).is_err());
        assert!(p(&["-n", "x", "p"]).is_err());
        assert!(p(&["-n", "2", "-e", "=v", "p"]).is_err());
        assert!(p(&["-n", "2", "-e", "novalue", "p"]).is_err());
        assert!(p(&["-n", "2", "--bogus", "p"])
            .unwrap_err()
            .contains("--bogus"));
        assert!(p(&["-n", "2", "--"]).is_err());
        assert_eq!(p(&["-h"]), Ok(Parsed::Help));
    }
}

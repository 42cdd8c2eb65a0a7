//! self_launching_hello: a PMI program that is its own launcher.
//!
//! Started alone (`cargo run -p pmi --example self_launching_hello`) it re-runs itself as 3
//! ranks through [`pmi::launch::self_launch`] and exits with the job's code; under `ch4run` or
//! Hydra's `mpiexec` it runs as whatever rank it was given, like any PMI program. Every rank
//! initializes, publishes a card, fences, reads its right neighbour's card, finalizes and prints
//! one line:
//!
//! ```text
//! rank 1 of 3: rank 2 says hello-from-2 (launched by: self)
//! ```
//!
//! `--fail RANK CODE` makes rank RANK exit with CODE right after init, to show that a failing
//! rank's code becomes the job's.

use std::process::ExitCode;

use pmi::launch::{self_launch, SELF_LAUNCHED_VAR};
use pmi::Client;

/// Ranks started when there is no launcher.
const RANKS: u32 = 3;

fn main() -> ExitCode {
    // First thing: without a launcher this does not return; it serves the 3 ranks and exits.
    if let Err(e) = self_launch(RANKS) {
        eprintln!("self_launching_hello: cannot launch the job: {e}");
        return ExitCode::FAILURE;
    }
    let fail = match parse_fail() {
        Ok(f) => f,
        Err(e) => {
            eprintln!("self_launching_hello: {e}");
            return ExitCode::from(2);
        }
    };
    match rank_main(fail) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("self_launching_hello: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `--fail RANK CODE`, if given.
fn parse_fail() -> Result<Option<(u32, u8)>, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [] => Ok(None),
        [flag, rank, code] if flag == "--fail" => {
            let rank = rank
                .parse()
                .map_err(|_| format!("{rank:?} is not a rank"))?;
            let code = code
                .parse()
                .map_err(|_| format!("{code:?} is not an exit code"))?;
            Ok(Some((rank, code)))
        }
        _ => Err("usage: self_launching_hello [--fail RANK CODE]".into()),
    }
}

/// What one rank does.
fn rank_main(fail: Option<(u32, u8)>) -> Result<(), String> {
    let mut pmi = Client::from_env().map_err(|e| format!("connect: {e}"))?;
    pmi.init().map_err(|e| format!("init: {e}"))?;
    let (rank, size) = (pmi.rank(), pmi.size());
    if let Some((r, code)) = fail {
        if r == rank {
            eprintln!("rank {rank}: exiting with code {code} as asked");
            std::process::exit(i32::from(code));
        }
    }
    pmi.put(&format!("card{rank}"), &format!("hello-from-{rank}"))
        .map_err(|e| format!("put: {e}"))?;
    pmi.barrier().map_err(|e| format!("barrier: {e}"))?;
    let right = (rank + 1) % size;
    let card = pmi
        .get(&format!("card{right}"))
        .map_err(|e| format!("get: {e}"))?
        .ok_or_else(|| format!("rank {rank}: rank {right} published no card"))?;
    pmi.finalize().map_err(|e| format!("finalize: {e}"))?;
    let under_pmi = std::env::var_os("PMI_FD").is_some() || std::env::var_os("PMI_PORT").is_some();
    let launcher = match (under_pmi, std::env::var_os(SELF_LAUNCHED_VAR).is_some()) {
        (true, true) => "self",
        (true, false) => "a launcher",
        (false, _) => "nobody (singleton)",
    };
    println!("rank {rank} of {size}: rank {right} says {card} (launched by: {launcher})");
    Ok(())
}

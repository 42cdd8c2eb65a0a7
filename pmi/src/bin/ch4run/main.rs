//! ch4run: the embedded one-host launcher of ch4.
//!
//! `ch4run -n N prog args` starts N processes as ranks 0..N-1 of one job, serves each the
//! PMI-1 protocol over a socketpair (`PMI_FD`, with `PMI_RANK` / `PMI_SIZE`, as Hydra does),
//! publishes `PMI_process_mapping` = `(vector,(0,1,N))`, forwards their output, and owns their
//! lifetime: the first rank to fail (non-zero exit, death by signal, PMI abort) ends the job,
//! within a second, with a message naming the rank and how it failed. Users who outgrow one
//! host run the same binaries under MPICH's `mpiexec.hydra`.
//!
//! This binary is only the command line: the launcher itself is [`pmi::launch`], so programs
//! can embed it ([`pmi::launch::self_launch`]). Exit codes: the job's (see
//! [`pmi::launch::run`]), 1 when the launcher itself fails, 2 for a usage error.

mod args;

use std::io::{self, Write};

use args::Parsed;

fn main() {
    let code = match args::parse(std::env::args_os().skip(1)) {
        Ok(Parsed::Help) => {
            let _ = writeln!(io::stdout(), "{}", args::USAGE);
            0
        }
        Ok(Parsed::Run(opts)) => match pmi::launch::run(&opts) {
            Ok(code) => code,
            Err(e) => {
                // Not eprintln!: a closed stderr must not turn a failure into a panic.
                let _ = writeln!(io::stderr(), "ch4run: {e}");
                1
            }
        },
        Err(msg) => {
            let _ = writeln!(io::stderr(), "ch4run: {msg}\n\n{}", args::USAGE);
            2
        }
    };
    std::process::exit(code);
}

//! pmi_hello: a small PMI-1 program for exercising launchers (ch4run, Hydra's mpiexec).
//!
//! Every rank initializes, publishes a text card and a binary card, fences, reads every other
//! rank's cards and checks them, checks `PMI_process_mapping`, prints one line, fences again
//! and finalizes. Options make one rank misbehave, to test how the launcher reacts:
//!
//! ```text
//! pmi_hello [--print-pid] [--exit RANK CODE] [--kill RANK] [--abort RANK CODE]
//!           [--leave RANK] [--hang] [--expect-size N] [--child-sees-pmi-fd]
//! ```
//!
//! * `--exit R C`: rank R exits with code C before the first fence (the others wait in it).
//! * `--kill R`: rank R sends itself SIGKILL before the first fence.
//! * `--abort R C`: rank R calls PMI abort with code C.
//! * `--leave R`: rank R exits 0 without finalize before the first fence.
//! * `--hang`: every rank sleeps for a minute after init (for signal tests).
//! * `--print-pid`: print `pid RANK PID` right after init.
//! * `--child-sees-pmi-fd`: after init, start `sh` and print whether it inherited the
//!   `PMI_FD` socket (`child has the PMI socket` / `child has no PMI socket`).
//!
//! Failures are reported on stderr with exit code 1; nothing here panics on a PMI error.

use std::process::ExitCode;
use std::time::Duration;

use pmi::Client;

#[derive(Default)]
struct Opts {
    print_pid: bool,
    exit: Option<(u32, u8)>,
    kill: Option<u32>,
    abort: Option<(u32, i32)>,
    leave: Option<u32>,
    hang: bool,
    expect_size: Option<u32>,
    child_sees_pmi_fd: bool,
}

fn parse() -> Result<Opts, String> {
    let mut o = Opts::default();
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    let val = |i: &mut usize, what: &str| -> Result<i64, String> {
        *i += 1;
        argv.get(*i)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("{what} needs a number"))
    };
    while i < argv.len() {
        match argv[i].as_str() {
            "--print-pid" => o.print_pid = true,
            "--hang" => o.hang = true,
            "--child-sees-pmi-fd" => o.child_sees_pmi_fd = true,
            "--exit" => {
                let r = val(&mut i, "--exit RANK")?;
                let c = val(&mut i, "--exit CODE")?;
                o.exit = Some((
                    to_u32(r)?,
                    u8::try_from(c).map_err(|_| "code out of range")?,
                ));
            }
            "--kill" => o.kill = Some(to_u32(val(&mut i, "--kill RANK")?)?),
            "--abort" => {
                let r = val(&mut i, "--abort RANK")?;
                let c = val(&mut i, "--abort CODE")?;
                o.abort = Some((
                    to_u32(r)?,
                    i32::try_from(c).map_err(|_| "code out of range")?,
                ));
            }
            "--leave" => o.leave = Some(to_u32(val(&mut i, "--leave RANK")?)?),
            "--expect-size" => o.expect_size = Some(to_u32(val(&mut i, "--expect-size N")?)?),
            other => return Err(format!("unknown option {other}")),
        }
        i += 1;
    }
    Ok(o)
}

fn to_u32(v: i64) -> Result<u32, String> {
    u32::try_from(v).map_err(|_| format!("{v} is not a rank"))
}

fn main() -> ExitCode {
    let opts = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("pmi_hello: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pmi_hello: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(opts: &Opts) -> Result<(), String> {
    let mut pmi = Client::from_env().map_err(|e| format!("connect: {e}"))?;
    pmi.init().map_err(|e| format!("init: {e}"))?;
    let (rank, size) = (pmi.rank(), pmi.size());
    if opts.print_pid {
        println!("pid {rank} {}", std::process::id());
    }
    if let Some(n) = opts.expect_size {
        if n != size {
            return Err(format!("rank {rank}: size is {size}, expected {n}"));
        }
    }
    if opts.hang {
        std::thread::sleep(Duration::from_secs(60));
    }
    if opts.child_sees_pmi_fd {
        let out = std::process::Command::new("sh")
            .args(["-c", "test -e /proc/self/fd/$PMI_FD && echo has || echo no"])
            .output()
            .map_err(|e| format!("sh: {e}"))?;
        let has = String::from_utf8_lossy(&out.stdout).trim() == "has";
        println!("child has {} PMI socket", if has { "the" } else { "no" });
    }
    if opts.exit.is_some_and(|(r, _)| r == rank) {
        let code = opts.exit.map_or(1, |(_, c)| c);
        eprintln!("rank {rank}: exiting with code {code} as asked");
        std::process::exit(i32::from(code));
    }
    if opts.kill == Some(rank) {
        eprintln!("rank {rank}: killing myself with SIGKILL as asked");
        // SAFETY: kill(getpid(), SIGKILL) takes integer arguments only; it ends this process.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    }
    if let Some((r, code)) = opts.abort {
        if r == rank {
            pmi.abort(code, "pmi_hello was asked to abort");
        }
    }
    if opts.leave == Some(rank) {
        eprintln!("rank {rank}: leaving without finalize as asked");
        std::process::exit(0);
    }

    let kvs = pmi.get_my_kvsname().map_err(|e| e.to_string())?.to_owned();
    let card = |r: u32| format!("hello-from-{r}=ok");
    let bin = |r: u32| vec![r as u8, (r >> 8) as u8, 0, 255, b' ', b'\n'];
    pmi.put(&format!("card{rank}"), &card(rank))
        .map_err(|e| format!("put: {e}"))?;
    pmi.put_bytes(&format!("bin{rank}"), &bin(rank))
        .map_err(|e| format!("put_bytes: {e}"))?;
    pmi.barrier().map_err(|e| format!("barrier: {e}"))?;
    for peer in 0..size {
        let got = pmi
            .get(&format!("card{peer}"))
            .map_err(|e| format!("get: {e}"))?;
        if got.as_deref() != Some(card(peer).as_str()) {
            return Err(format!("rank {rank}: card of rank {peer} is {got:?}"));
        }
        let got = pmi
            .get_bytes(&format!("bin{peer}"))
            .map_err(|e| format!("get_bytes: {e}"))?;
        if got != Some(bin(peer)) {
            return Err(format!(
                "rank {rank}: binary card of rank {peer} is {got:?}"
            ));
        }
    }
    if pmi.get("no-such-key").map_err(|e| e.to_string())?.is_some() {
        return Err("a key nobody put has a value".into());
    }
    let nodes = pmi
        .node_ids()
        .map_err(|e| format!("process mapping: {e}"))?;
    let local = nodes.as_ref().map_or(0, |n| {
        n.iter()
            .filter(|&&id| Some(&id) == n.get(rank as usize))
            .count()
    });
    let universe = pmi.get_universe_size().map_err(|e| e.to_string())?;
    let appnum = pmi.get_appnum().map_err(|e| e.to_string())?;
    println!(
        "rank {rank} of {size}: ok (kvs {kvs}, {local} rank(s) on this node, universe {universe:?}, appnum {appnum})"
    );
    pmi.barrier().map_err(|e| format!("barrier: {e}"))?;
    pmi.finalize().map_err(|e| format!("finalize: {e}"))
}

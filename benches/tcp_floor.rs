//! The floor for the TCP netmod: a raw TCP socket ping-pong and stream between two processes
//! over loopback, TCP_NODELAY, the OSU loop shapes, OSU's output format. Nothing of ch4 is
//! involved; this is what the kernel gives. The sockets are nonblocking and both sides spin on
//! them, as an MPI progress engine does (blocking reads add a sleep and a wake-up per message:
//! ~10 µs instead of ~6 here).
//!
//! `cargo bench --bench tcp_floor -- [latency|bw] [-m [min:]max] [-i iterations]`
//! (the program starts its peer process itself). Compare with
//! `CH4_NODE_SIZE=1 target/release/examples/osu_latency` (every rank its own node: TCP).

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::Instant;

fn sizes(min: usize, max: usize) -> Vec<usize> {
    let mut v = Vec::new();
    if min == 0 {
        v.push(0);
    }
    let mut s = min.max(1);
    while s <= max {
        v.push(s);
        s *= 2;
    }
    v
}

/// Messages per acknowledged window: OSU's 64, fewer for huge messages (64 MiB at most).
fn window(size: usize) -> usize {
    64.min((1 << 26) / size.max(1)).max(1)
}

/// Buffer bytes a run needs.
fn capacity(o: &Opts) -> usize {
    if o.bw {
        sizes(o.min, o.max)
            .into_iter()
            .map(|s| s * window(s))
            .max()
            .unwrap_or(4)
            .max(4)
    } else {
        o.max.max(4)
    }
}

/// Reads exactly `buf.len()` bytes from a nonblocking socket, spinning.
fn read_spin(s: &mut TcpStream, buf: &mut [u8]) -> std::io::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Writes all of `buf` to a nonblocking socket, spinning.
fn write_spin(s: &mut TcpStream, buf: &[u8]) -> std::io::Result<()> {
    let mut put = 0;
    while put < buf.len() {
        match s.write(&buf[put..]) {
            Ok(n) => put += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

struct Opts {
    bw: bool,
    min: usize,
    max: usize,
    iters: usize,
}

fn opts() -> Opts {
    // `cargo test` runs benches without `--bench`: then a quick smoke run, not the sweep.
    let smoke = !std::env::args().any(|a| a == "--bench") && std::env::args().len() == 1;
    let mut o = Opts {
        bw: false,
        min: 0,
        max: if smoke { 1024 } else { 1 << 22 },
        iters: if smoke { 100 } else { 10_000 },
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "bw" => o.bw = true,
            "-m" => {
                let v = args.next().unwrap_or_default();
                let (lo, hi) = v.split_once(':').unwrap_or(("0", &v));
                o.min = lo.parse().unwrap_or(o.min);
                o.max = hi.parse().unwrap_or(o.max);
            }
            "-i" => o.iters = args.next().and_then(|v| v.parse().ok()).unwrap_or(o.iters),
            _ => {}
        }
    }
    // Zero bytes would move nothing over a socket: start at 1.
    o.min = o.min.max(1);
    o
}

/// The peer: echoes (latency) or sinks windows and acknowledges (bw).
fn serve(port: u16, o: &Opts) -> std::io::Result<()> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_nodelay(true)?;
    s.set_nonblocking(true)?;
    let mut buf = vec![0u8; capacity(o)];
    for size in sizes(o.min, o.max) {
        let iters = if size > 8192 {
            o.iters / 10 + 1
        } else {
            o.iters
        };
        if o.bw {
            for _ in 0..iters {
                read_spin(&mut s, &mut buf[..size * window(size)])?;
                write_spin(&mut s, &[1u8; 4])?;
            }
        } else {
            for _ in 0..iters {
                read_spin(&mut s, &mut buf[..size])?;
                write_spin(&mut s, &buf[..size])?;
            }
        }
    }
    Ok(())
}

fn main() -> std::io::Result<()> {
    let o = opts();
    if let Some(port) = std::env::var("TCP_FLOOR_PORT")
        .ok()
        .and_then(|p| p.parse().ok())
    {
        return serve(port, &o);
    }
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    let mut peer = Command::new(std::env::current_exe()?)
        .args(std::env::args().skip(1))
        .env("TCP_FLOOR_PORT", port.to_string())
        .stdout(Stdio::null())
        .spawn()?;
    let (mut s, _) = listener.accept()?;
    s.set_nodelay(true)?;
    s.set_nonblocking(true)?;
    let sbuf = vec![b'a'; capacity(&o)];
    let mut rbuf = vec![0u8; capacity(&o)];
    if o.bw {
        println!("# raw TCP stream over loopback (window 64, acked)");
        println!("# Size      Bandwidth (MB/s)");
    } else {
        println!("# raw TCP ping-pong over loopback");
        println!("# Size          Latency (us)");
    }
    for size in sizes(o.min, o.max) {
        let iters = if size > 8192 {
            o.iters / 10 + 1
        } else {
            o.iters
        };
        let start = Instant::now();
        if o.bw {
            let window = window(size);
            for _ in 0..iters {
                write_spin(&mut s, &sbuf[..size * window])?;
                read_spin(&mut s, &mut rbuf[..4])?;
            }
            let secs = start.elapsed().as_secs_f64();
            println!(
                "{size:<10}{:>18.2}",
                (size * window * iters) as f64 / 1e6 / secs
            );
        } else {
            for _ in 0..iters {
                write_spin(&mut s, &sbuf[..size])?;
                read_spin(&mut s, &mut rbuf[..size])?;
            }
            let us = start.elapsed().as_secs_f64() * 1e6 / (2.0 * iters as f64);
            println!("{size:<10}{us:>18.2}");
        }
    }
    peer.wait()?;
    Ok(())
}

//! Stress for the on-node path: every rank streams messages of random sizes (on both sides of
//! the eager limit, up to several rendezvous pieces) to its right neighbour through a window of
//! nonblocking sends, while receiving from its left neighbour with ANY_TAG and checking that every
//! message arrives in order, whole and with the right bytes. Then everybody fans in to rank 0
//! with ANY_SOURCE. Exit code 0 means nothing was lost, duplicated, reordered or corrupted.
//!
//! `ch4run -n 4 target/release/examples/shm_stress -- [-m messages] [--max-size bytes] [--seed s]`
//! `--hold` makes every rank print `ready <rank> <pid>` and then keep exchanging messages until
//! killed — the test suite uses it to kill -9 a rank mid-traffic. `--undumpable` marks each rank
//! process non-dumpable first, so that without `CAP_SYS_PTRACE` the kernel refuses cross-memory
//! reads between them (as Yama or a hardened kernel would) and the shared-memory layer must fall
//! back to streaming. Each rank ends by printing whether single-copy reads were still on and how
//! many of its messages went through cells rather than rings.

use ch4::{Result, ANY_SOURCE, ANY_TAG};

/// A tiny deterministic generator (SplitMix64), so sender and receiver derive the same stream.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// Size, tag and first byte of message `seq` from `rank`.
fn message(seed: u64, rank: i32, seq: u64, max: usize) -> (usize, i32, u8) {
    let mut r = Rng(seed ^ ((rank as u64) << 40) ^ seq.wrapping_mul(0x2545_F491_4F6C_DD1D));
    let pick = r.next();
    // Mostly small, some around the eager limit, a few large.
    let size = match pick % 10 {
        0..=5 => (r.next() % 256) as usize,
        6..=8 => (r.next() % (40 << 10)) as usize,
        _ => (r.next() as usize) % (max + 1),
    };
    (size.min(max), (r.next() % 4) as i32, r.next() as u8)
}

fn fill(buf: &mut [u8], first: u8) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = first.wrapping_add(i as u8);
    }
}

struct Options {
    messages: u64,
    max_size: usize,
    seed: u64,
    hold: bool,
    undumpable: bool,
}

fn options() -> Options {
    let mut o = Options {
        messages: 100_000,
        max_size: 1 << 20,
        seed: 1,
        hold: false,
        undumpable: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut num = || args.next().and_then(|v| v.parse::<u64>().ok());
        match a.as_str() {
            "-m" => o.messages = num().unwrap_or(o.messages),
            "--max-size" => o.max_size = num().map(|v| v as usize).unwrap_or(o.max_size),
            "--seed" => o.seed = num().unwrap_or(o.seed),
            "--hold" => o.hold = true,
            "--undumpable" => o.undumpable = true,
            _ => {}
        }
    }
    o
}

fn main() -> Result<()> {
    // ch4's warnings (and, with CH4_LOG=debug, more) on standard error.
    ch4::log::init();
    let o = options();
    if o.undumpable {
        // SAFETY: prctl(PR_SET_DUMPABLE, 0) only changes this process's dumpable flag; the
        // remaining arguments are unused by this option and passed as 0.
        let r = unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
        if r != 0 {
            eprintln!(
                "prctl(PR_SET_DUMPABLE): {}",
                std::io::Error::last_os_error()
            );
            std::process::exit(2);
        }
    }
    let universe = ch4::process::init()?;
    let world = universe.world();
    let ctx = universe.context();
    let (rank, size) = (world.rank(), world.size());
    let right = (rank + 1) % size;
    let left = (rank + size - 1) % size;
    if o.hold {
        println!("ready {rank} {}", std::process::id());
    }

    const WINDOW: usize = 16;
    let mut send_bufs: Vec<Vec<u8>> = (0..WINDOW).map(|_| vec![0u8; o.max_size]).collect();
    let mut recv_buf = vec![0u8; o.max_size];
    let mut sent = 0u64;
    let mut received = 0u64;
    let mut bytes = 0u64;
    while o.hold || sent < o.messages || received < o.messages {
        // Fill a window of sends, then receive a window's worth from the left.
        let batch = WINDOW.min((o.messages.saturating_sub(sent)) as usize);
        let batch = if o.hold { WINDOW } else { batch };
        for (k, buf) in send_bufs.iter_mut().enumerate().take(batch) {
            let (len, _, first) = message(o.seed, rank, sent + k as u64, o.max_size);
            fill(&mut buf[..len], first);
        }
        let recv_now = if o.hold {
            WINDOW as u64
        } else {
            (WINDOW as u64).min(o.messages - received)
        };
        let base = sent;
        ctx.scope(|s| {
            let mut reqs = Vec::with_capacity(batch);
            for (k, buf) in send_bufs.iter().enumerate().take(batch) {
                let (len, tag, _) = message(o.seed, rank, base + k as u64, o.max_size);
                reqs.push(world.isend(s, &buf[..len], right, tag)?);
            }
            for _ in 0..recv_now {
                let st = world.recv(&mut recv_buf, left, ANY_TAG)?;
                let (len, tag, first) = message(o.seed, left, received, o.max_size);
                if st.bytes != len || st.tag != tag {
                    eprintln!(
                        "rank {rank}: message {received} from {left}: got {} bytes tag {}, want {len} tag {tag}",
                        st.bytes, st.tag
                    );
                    std::process::exit(1);
                }
                let mut want = vec![0u8; len];
                fill(&mut want, first);
                if recv_buf[..len] != want[..] {
                    eprintln!("rank {rank}: message {received} from {left}: corrupted bytes");
                    std::process::exit(1);
                }
                received += 1;
                bytes += len as u64;
            }
            s.wait_all(reqs).map(drop)
        })?;
        sent += batch as u64;
    }

    // Fan-in: every rank sends numbered messages to rank 0, which receives with ANY_SOURCE and
    // checks per-sender order.
    let fan = 1000u64.min(o.messages);
    if rank == 0 {
        let mut next = vec![0u64; size as usize];
        for _ in 0..fan * (size as u64 - 1) {
            let mut v = [0u64; 2];
            let st = world.recv(&mut v, ANY_SOURCE, 7)?;
            let src = st.source as usize;
            if v != [src as u64, next[src]] {
                eprintln!(
                    "fan-in: from {src} got {v:?}, want {:?}",
                    [src as u64, next[src]]
                );
                std::process::exit(1);
            }
            next[src] += 1;
        }
    } else {
        for i in 0..fan {
            world.send(&[rank as u64, i], 0, 7)?;
        }
    }
    world.barrier()?;
    let mut total = [0u64];
    world.reduce(0, &[bytes], &mut total, ch4::op::sum)?;
    let (single_copy, through_cells) = {
        let device = ctx.device()?;
        (device.shm().cma_enabled(), device.shm().cell_sends())
    };
    println!(
        "rank {rank}: single-copy reads {}, {through_cells} messages sent through cells",
        if single_copy { "on" } else { "off" },
    );
    if rank == 0 {
        println!(
            "shm_stress: {size} ranks, {} messages each way, {} bytes checked, all in order",
            o.messages, total[0]
        );
    }
    universe.finalize()
}

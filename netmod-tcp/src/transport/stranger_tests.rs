//! Who may connect to a rank's listener: only a rank of this job, with the job's key, a rank
//! number that names another rank of the job, and a connection that rank does not hold
//! already. Everyone else is refused or dropped, the job's own traffic goes on meanwhile, and
//! neither the refusals in the log nor the errors carry the key.

use std::io::{Read, Write};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::connect::{HelloMsg, ANSWER, ANSWER_MAGIC, DUPLICATE, HELLO, HELLO_PATIENCE, REFUSED};
use super::*;

/// Collects everything delivered.
#[derive(Default)]
struct Collect(Vec<(Gpid, Vec<u8>)>);

impl AmSink for Collect {
    fn deliver(&mut self, src: Gpid, _: HandlerId, hdr: &[u8], _: &[u8]) -> Result<()> {
        self.0.push((src, hdr.to_vec()));
        Ok(())
    }
}

/// `n` netmods on loopback that know each other's addresses.
fn job(n: u32, key: u64) -> Vec<TcpNetmod> {
    let mut ts: Vec<TcpNetmod> = (0..n)
        .map(|r| TcpNetmod::bind(r, n, key, "127.0.0.1:0".parse().unwrap()).unwrap())
        .collect();
    let addrs: Vec<SocketAddr> = ts.iter().map(TcpNetmod::local_addr).collect();
    for t in &mut ts {
        for (r, a) in addrs.iter().enumerate() {
            t.set_address(r as Gpid, *a).unwrap();
        }
    }
    ts
}

/// A raw connection to `addr` that has sent `hello` (or its first `len` bytes).
fn hello_to(
    addr: SocketAddr,
    key: u64,
    rank: u32,
    generation: u32,
    len: usize,
) -> std::net::TcpStream {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    let hello = HelloMsg {
        key,
        rank,
        generation,
        same_byte_order: true,
    }
    .encode();
    s.write_all(&hello[..len]).unwrap();
    s
}

/// Polls `t` until `s` has its answer (or is closed without one); the answer's code.
fn answer(t: &mut TcpNetmod, s: &mut std::net::TcpStream) -> Option<u32> {
    s.set_read_timeout(Some(Duration::from_millis(5))).unwrap();
    let mut got = Vec::new();
    let start = Instant::now();
    while got.len() < ANSWER {
        t.am_poll(&mut Collect::default(), 64).unwrap();
        let mut buf = [0u8; ANSWER];
        match s.read(&mut buf[..ANSWER - got.len()]) {
            Ok(0) => return None,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(_) => {}
        }
        assert!(start.elapsed() < Duration::from_secs(10), "no answer");
    }
    assert_eq!(&got[..4], &ANSWER_MAGIC);
    Some(u32::from_le_bytes(got[4..8].try_into().unwrap()))
}

/// Polls both until `done`, collecting what each receives.
fn poll_both(
    a: &mut TcpNetmod,
    got_a: &mut Collect,
    b: &mut TcpNetmod,
    got_b: &mut Collect,
    done: impl Fn(&Collect, &Collect) -> bool,
) {
    let start = Instant::now();
    while !done(got_a, got_b) {
        a.am_poll(got_a, 64).unwrap();
        b.am_poll(got_b, 64).unwrap();
        assert!(start.elapsed() < Duration::from_secs(10), "stuck");
    }
}

#[test]
fn the_key_with_a_rank_that_is_not_another_rank_of_the_job_is_refused() {
    let mut ts = job(2, 77);
    drop(ts.pop());
    let mut t0 = ts.pop().unwrap();
    let addr = t0.local_addr();
    // Rank 0 itself, ranks past the job's end, and rank 1 with a wrong key.
    for (key, rank) in [(77, 0), (77, 2), (77, u32::MAX), (78, 1), (!77, 1)] {
        let mut s = hello_to(addr, key, rank, 0, HELLO);
        assert_eq!(
            answer(&mut t0, &mut s),
            Some(REFUSED),
            "key {key} rank {rank}"
        );
    }
    assert!(!t0.is_connected(1) && !t0.peer_failed(1));
}

/// A connection claiming a rank that is connected already (whatever its generation) is not
/// adopted: what it sends is never delivered, and the real rank's connection goes on.
#[test]
fn a_second_connection_claiming_a_connected_rank_is_not_adopted() {
    let mut ts = job(2, 78);
    let mut t1 = ts.pop().unwrap();
    let mut t0 = ts.pop().unwrap();
    let (mut got0, mut got1) = (Collect::default(), Collect::default());
    t1.am_send(0, 3, b"real", &[]).unwrap();
    poll_both(&mut t0, &mut got0, &mut t1, &mut got1, |g, _| {
        g.0.len() == 1
    });
    let generation = t0.vcs[1].generation;
    for g in [0, generation, generation + 1] {
        let mut impostor = hello_to(t0.local_addr(), 78, 1, g, HELLO);
        let mut frame = frame::encode(3, 4, 0).to_vec();
        frame.extend_from_slice(b"fake");
        impostor.write_all(&frame).unwrap();
        assert_eq!(
            answer(&mut t0, &mut impostor),
            Some(DUPLICATE),
            "generation {g}"
        );
    }
    t1.am_send(0, 3, b"again", &[]).unwrap();
    poll_both(&mut t0, &mut got0, &mut t1, &mut got1, |g, _| {
        g.0.len() == 2
    });
    let bodies: Vec<&[u8]> = got0.0.iter().map(|m| &m.1[..]).collect();
    assert_eq!(bodies, vec![&b"real"[..], b"again"]);
    assert!(t0.is_connected(1) && !t0.peer_failed(1));
}

/// A stray process that connects and says nothing, or half a hello, blocks no one: the
/// ranks' messages flow meanwhile, and after [`HELLO_PATIENCE`] progress stops looking for
/// the strays' hellos at every poll.
#[test]
fn silent_and_half_said_hellos_stall_no_one() {
    let mut ts = job(2, 79);
    let addr = ts[0].local_addr();
    let _silent = std::net::TcpStream::connect(addr).unwrap();
    let _half = hello_to(addr, 79, 1, 0, HELLO - 1);
    let mut t1 = ts.pop().unwrap();
    let mut t0 = ts.pop().unwrap();
    let (mut got0, mut got1) = (Collect::default(), Collect::default());
    t1.am_send(0, 3, b"to 0", &[]).unwrap();
    t0.am_send(1, 3, b"to 1", &[]).unwrap();
    poll_both(&mut t0, &mut got0, &mut t1, &mut got1, |a, b| {
        a.0.len() == 1 && b.0.len() == 1
    });
    let start = Instant::now();
    while t0.incoming.iter().flatten().count() < 2 {
        t0.am_poll(&mut got0, 64).unwrap();
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "strays not accepted"
        );
    }
    // While they are new, every poll looks for their hellos (a rank's comes at once)...
    t0.polls = 1;
    assert!(!t0.epoll_can_wait(true));
    std::thread::sleep(HELLO_PATIENCE);
    t0.am_poll(&mut got0, 64).unwrap();
    // ...but not for ever: polls go back to reading the connections alone.
    t0.polls = 1;
    assert!(
        t0.epoll_can_wait(true),
        "strays keep every poll in epoll_wait"
    );
    // Their connections stay (a slow rank's hello would still be read), costing nothing.
    assert_eq!(t0.incoming.iter().flatten().count(), 2);
    t1.am_send(0, 3, b"more", &[]).unwrap();
    poll_both(&mut t0, &mut got0, &mut t1, &mut got1, |a, _| {
        a.0.len() == 2
    });
}

/// A flood of connections that say nothing takes at most a bounded number of descriptors: the
/// oldest are dropped, and a rank of the job still gets in.
#[test]
fn a_flood_of_silent_connections_is_bounded() {
    let mut ts = job(2, 80);
    let addr = ts[0].local_addr();
    let mut t1 = ts.pop().unwrap();
    let mut t0 = ts.pop().unwrap();
    let most = t0.max_incoming();
    let mut strays = Vec::new();
    for _ in 0..most + 20 {
        strays.push(std::net::TcpStream::connect(addr).unwrap());
        t0.am_poll(&mut Collect::default(), 64).unwrap();
    }
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(200) {
        t0.am_poll(&mut Collect::default(), 64).unwrap();
    }
    let waiting = t0.incoming.iter().flatten().count();
    assert!(waiting <= most, "{waiting} > {most}");
    let (mut got0, mut got1) = (Collect::default(), Collect::default());
    t1.am_send(0, 3, b"in", &[]).unwrap();
    poll_both(&mut t0, &mut got0, &mut t1, &mut got1, |a, _| {
        a.0.len() == 1
    });
}

/// A subscriber that keeps every event's text, to read what a refusal logs.
struct Captured(Arc<Mutex<String>>);

struct Text<'a>(&'a mut String);

impl tracing::field::Visit for Text<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!("{}={value:?} ", field.name()));
    }
}

impl tracing::Subscriber for Captured {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut text = self.0.lock().unwrap();
        event.record(&mut Text(&mut text));
        text.push('\n');
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Two jobs on one host, each with its own key: a rank of one pointed at a rank of the other is
/// refused there, fails its own connection with an error that says why, and the other job goes
/// on. Neither the refusing side's log nor the error names either key.
#[test]
fn a_rank_of_another_job_is_refused_and_no_key_is_logged() {
    let (key_a, key_b) = (0x5eed_1234_abcd_0042_u64, 0x0bad_cafe_f00d_0077_u64);
    let mut a = job(2, key_a);
    let mut b = job(2, key_b);
    let log = Arc::new(Mutex::new(String::new()));
    let captured = Captured(log.clone());
    tracing::subscriber::with_default(captured, || {
        // Job B's rank 1 is told that rank 0 lives where job A's rank 0 does.
        let (mut a1, mut a0) = (a.pop().unwrap(), a.pop().unwrap());
        let mut b1 = b.pop().unwrap();
        b1.set_address(0, a0.local_addr()).unwrap();
        b1.am_send(0, 3, b"from b", &[]).unwrap();
        let (mut got_a0, mut got_b1) = (Collect::default(), Collect::default());
        let start = Instant::now();
        while !b1.peer_failed(0) {
            a0.am_poll(&mut got_a0, 64).unwrap();
            let _ = b1.am_poll(&mut got_b1, 64);
            assert!(start.elapsed() < Duration::from_secs(10), "not refused");
        }
        assert!(got_a0.0.is_empty(), "job A delivered job B's message");
        let err = b1.am_send(0, 3, b"again", &[]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::PeerFailed);
        let text = err.to_string();
        assert!(text.contains("refused"), "{text}");
        for key in [key_a, key_b] {
            for shown in [key.to_string(), format!("{key:x}"), format!("{key:X}")] {
                assert!(!text.contains(&shown), "a key in the error: {text}");
            }
        }
        // Job A's own ranks still talk.
        let mut got_a1 = Collect::default();
        a1.am_send(0, 3, b"from a", &[]).unwrap();
        poll_both(&mut a0, &mut got_a0, &mut a1, &mut got_a1, |g, _| {
            g.0.len() == 1
        });
        assert_eq!(got_a0.0[0].1, b"from a");
    });
    let log = log.lock().unwrap();
    assert!(log.contains("refused"), "the refusal is logged: {log}");
    for key in [key_a, key_b] {
        for shown in [key.to_string(), format!("{key:x}"), format!("{key:X}")] {
            assert!(!log.contains(&shown), "a key in the log: {log}");
        }
    }
}

#[test]
fn keys_compare_equal_only_when_every_bit_does() {
    use super::connect::same_key;
    assert!(same_key(0, 0) && same_key(u64::MAX, u64::MAX) && same_key(42, 42));
    for bit in 0..64 {
        assert!(!same_key(
            0x5555_aaaa_0000_ffff,
            0x5555_aaaa_0000_ffff ^ (1 << bit)
        ));
    }
    let hello = HelloMsg {
        key: 0x1234_5678_9abc_def0,
        rank: 1,
        generation: 0,
        same_byte_order: true,
    };
    let shown = format!("{hello:?}");
    assert!(
        !shown.contains("123456789abcdef0")
            && !shown.contains(&0x1234_5678_9abc_def0_u64.to_string()),
        "{shown}"
    );
}

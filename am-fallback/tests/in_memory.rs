//! The AM fallback driven in memory: two devices in one thread over the test kit's `Pipe`, whose
//! wire the test can read and write. Nothing runs unless the test calls `progress`, so each
//! scenario is deterministic — and the test can inject the malformed packets a hostile or broken
//! peer might send.

use am_fallback::wire::{handler, CtsHeader, DataHeader, EagerHeader, MatchHeader, ReadableRts};
use ch4_core::buffer::{RecvBuf, SendBuf};
use ch4_core::core::DeviceConfig;
use ch4_core::pool::PoolConfig;
use ch4_core::request::msg_flags;
use ch4_core::transport::HandlerId;
use ch4_core::{ErrorKind, SendMode};
use testkit::{pipe_job, pipe_pair, Frame, PipeHarness, Unordered, Wire};

fn match_header(tag: i32, total: u64) -> MatchHeader {
    MatchHeader {
        context: 0,
        source: 1,
        tag,
        flags: 0,
        seq: 0,
        reserved: 0,
        sreq: 0,
        total,
    }
}

/// On an ordered transport a small message that nothing answers goes with the 16-byte header
/// and arrives whole (data, source, tag, length); a synchronous one, which the receiver must
/// acknowledge by request id, with the full header.
#[test]
fn standard_eager_sends_take_the_short_header_and_synchronous_ones_the_full_one() {
    let (wire, mut h) = pipe_pair(DeviceConfig::default()).unwrap();
    let (wa, wb) = (h[0].world(), h[1].world());
    let data: Vec<u8> = (0..32).collect();
    let s = h[0]
        .isend(wa, 1, 7, SendBuf::owned(data.clone()), SendMode::Standard)
        .unwrap();
    let y = h[0]
        .isend(
            wa,
            1,
            8,
            SendBuf::owned(data.clone()),
            SendMode::Synchronous,
        )
        .unwrap();
    assert_eq!(wire.handlers(1), [handler::EAGER_SHORT, handler::EAGER]);
    for tag in [7, 8] {
        let mut got = [0u8; 64];
        let r = h[1].irecv(wb, 0, tag, unsafe_free(&mut got)).unwrap();
        let st = h.wait(1, r).unwrap();
        assert_eq!((st.source, st.tag, st.bytes), (0, tag, 32));
        assert_eq!(got[..32], data[..]);
    }
    h.wait(0, s).unwrap();
    h.wait(0, y).unwrap();
}

/// After a protocol error the device still works: a normal message goes through.
fn still_works(wire: &Wire, h: &mut PipeHarness) {
    assert_eq!(wire.pending(0), 0, "the bad packet was not consumed");
    let w = h[1].world();
    h[1].send(w, 0, 9, b"ok", SendMode::Standard).unwrap();
    let mut buf = [0u8; 2];
    let w = h[0].world();
    let st = h[0].recv(w, 1, 9, &mut buf).unwrap();
    assert_eq!((st.bytes, &buf), (2, b"ok"));
}

#[test]
fn malformed_packets_are_protocol_errors_not_panics() {
    let (wire, mut h) = pipe_pair(DeviceConfig::default()).unwrap();
    let hdr = match_header(1, 10);
    let cases: Vec<(HandlerId, Vec<u8>, Vec<u8>)> = vec![
        (99, vec![], vec![]),                          // unknown handler
        (handler::EAGER, vec![1, 2, 3], vec![]),       // short header
        (handler::EAGER_SHORT, vec![1, 2, 3], vec![]), // shorter than the short header
        (
            handler::EAGER_SHORT,
            bytemuck::bytes_of(&EagerHeader {
                context: 0,
                source: 1,
                tag: 10,
                flags: msg_flags::SYNC,
            })
            .to_vec(),
            vec![0; 3],
        ), // synchronous, with no request id to acknowledge
        (
            handler::EAGER,
            bytemuck::bytes_of(&hdr).to_vec(),
            vec![0; 3],
        ), // length mismatch
        (handler::RTS, bytemuck::bytes_of(&hdr).to_vec(), vec![1]), // RTS with data
        (
            handler::DATA,
            bytemuck::bytes_of(&DataHeader {
                rreq: 12345,
                offset: 0,
            })
            .to_vec(),
            vec![1, 2],
        ), // data for a request that does not exist
        (
            handler::CTS,
            bytemuck::bytes_of(&CtsHeader {
                sreq: 7,
                rreq: 1,
                accept: 1,
            })
            .to_vec(),
            vec![],
        ), // clear-to-send for a send that does not exist
        (handler::SYNC_ACK, vec![0; 16], vec![]),      // ack for nobody
        (handler::CANCEL_ACK, vec![0; 5], vec![]),     // short ack
        (
            handler::RTS_GET,
            bytemuck::bytes_of(&ReadableRts { m: hdr, addr: 0 }).to_vec(),
            vec![],
        ), // single-copy offer of address 0
        (handler::RTS_GET, bytemuck::bytes_of(&hdr).to_vec(), vec![]), // offer without address
        (handler::GET_DONE, vec![0; 16], vec![]),      // read-done for nobody
    ];
    for (i, (id, header, payload)) in cases.into_iter().enumerate() {
        wire.inject(0, Frame::new(1, id, &header, &payload));
        let err = h[0]
            .progress()
            .expect_err(&format!("case {i} was accepted"));
        assert_eq!(err.kind(), ErrorKind::Protocol, "case {i}: {err}");
        still_works(&wire, &mut h);
    }
}

#[test]
fn data_beyond_the_accepted_length_is_refused() {
    let (wire, mut h) = pipe_pair(DeviceConfig::default()).unwrap();
    // A rendezvous receive of 8 bytes for a 100-byte message.
    let mut mem = vec![0u8; 8];
    let ptr: *mut [u8] = mem.as_mut_slice();
    // SAFETY: `mem` lives until the end of the test and is read only after the request is gone.
    let rbuf = unsafe { RecvBuf::borrowed(&mut *ptr) };
    let w = h[0].world();
    let r = h[0].irecv(w, 1, 3, rbuf).unwrap();
    let w = h[1].world();
    let s = h[1]
        .isend(w, 0, 3, SendBuf::owned(vec![7; 100]), SendMode::Standard)
        .unwrap();
    // RTS reaches a, which answers with a CTS accepting 8 bytes.
    h[0].progress().unwrap();
    let cts = wire.front(1).expect("a CTS");
    assert_eq!(cts.handler, handler::CTS);
    let c: CtsHeader = am_fallback::wire::parse(&cts.header).unwrap();
    assert_eq!(c.accept, 8, "the receiver accepts only what fits");
    // A forged DATA piece past the accepted length is refused, and nothing is written.
    wire.inject(
        0,
        Frame::new(
            1,
            handler::DATA,
            bytemuck::bytes_of(&DataHeader {
                rreq: c.rreq,
                offset: 4,
            }),
            &[9; 10],
        ),
    );
    assert_eq!(h[0].progress().unwrap_err().kind(), ErrorKind::Protocol);
    assert_eq!(mem[..], [0u8; 8][..]);
    // The real transfer then completes with a truncation error for the receiver only.
    h.drive_until_done(&[(0, r), (1, s)]).unwrap();
    assert!(h[1].wait(s).is_ok());
    let err = h[0].wait(r).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Truncate);
    assert_eq!(mem, vec![7u8; 8]);
}

#[test]
fn request_pool_exhaustion_is_an_error_then_recovers() {
    let config = DeviceConfig {
        requests: PoolConfig {
            min: 4,
            chunk: 4,
            max: 8,
        },
        ..DeviceConfig::default()
    };
    let (_wire, h) = pipe_pair(config).unwrap();
    let (mut a, mut b) = h.into_pair();
    let (wa, wb) = (a.world(), b.world());
    // Receives always need a request: eight fill b's pool.
    let mut reqs = Vec::new();
    for i in 0..8 {
        reqs.push(b.irecv(wb, 0, i, RecvBuf::owned(1)).unwrap());
    }
    let err = b.irecv(wb, 0, 8, RecvBuf::owned(1)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Exhausted);
    // Small sends, blocking or not, finish at once and need no request, so they still work.
    b.send(wb, 0, 9, &[2], SendMode::Standard).unwrap();
    let s = b
        .isend(wb, 0, 10, SendBuf::owned(vec![3]), SendMode::Standard)
        .unwrap();
    b.wait(s).unwrap();
    for i in 0..8 {
        a.send(wa, 1, i, &[i as u8], SendMode::Standard).unwrap();
    }
    for (i, r) in reqs.into_iter().enumerate() {
        assert_eq!(b.wait(r).unwrap().tag, i as i32);
    }
    // Freed requests are reusable.
    let r = b.irecv(wb, 0, 11, RecvBuf::owned(1)).unwrap();
    a.send(wa, 1, 11, &[11], SendMode::Standard).unwrap();
    b.wait(r).unwrap();
    for tag in [9, 10] {
        let mut x = [0u8];
        a.recv(wa, 1, tag, &mut x).unwrap();
    }
}

#[test]
fn unordered_delivery_is_reordered_by_sequence_number() {
    // Sent 0,1,2; delivered 2,0,1 by hand on a transport that declares itself unordered.
    let (wire, h) = pipe_job(2, DeviceConfig::default(), |p| Unordered::new(p, 0)).unwrap();
    let (mut a, mut b) = h.into_pair();
    let wb = b.world();
    for v in 0u8..3 {
        b.send(wb, 0, 5, &[v], SendMode::Standard).unwrap();
    }
    wire.with_inbox(0, |q| {
        let f2 = q.pop_back().unwrap();
        q.push_front(f2);
    });
    let wa = a.world();
    for v in 0u8..3 {
        let mut x = [9u8];
        a.recv(wa, 1, 5, &mut x).unwrap();
        assert_eq!(x[0], v, "non-overtaking broken on an unordered transport");
    }
    // A duplicated sequence number is a protocol error.
    b.send(wb, 0, 5, &[3], SendMode::Standard).unwrap();
    let dup = wire.front(0).unwrap();
    a.progress().unwrap();
    wire.inject(0, dup);
    assert_eq!(a.progress().unwrap_err().kind(), ErrorKind::Protocol);
}

#[test]
fn a_failed_send_leaves_no_gap_in_sequence_numbers() {
    // Regression: on an unordered transport the sequence number used to be taken before the
    // request pool could refuse the send, so the receiver waited forever for the missing number.
    let config = DeviceConfig {
        requests: PoolConfig {
            min: 4,
            chunk: 4,
            max: 8,
        },
        ..DeviceConfig::default()
    };
    let (_wire, mut h) = pipe_job(2, config, |p| Unordered::new(p, 0)).unwrap();
    let (a, b) = h.pair_mut(0, 1);
    let wa = a.world();
    // Synchronous sends keep their request until acknowledged: they fill the pool.
    let mut sends = Vec::new();
    loop {
        match a.isend(wa, 1, 0, SendBuf::owned(vec![1]), SendMode::Synchronous) {
            Ok(h) => sends.push(h),
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::Exhausted);
                break;
            }
        }
    }
    a.send(wa, 1, 1, &[2], SendMode::Standard).unwrap();
    let mut x = [0u8];
    // SAFETY: `x` outlives the request, which completes (or the test fails) before `x` is read.
    let rbuf = unsafe { RecvBuf::borrowed(&mut x) };
    let wb = b.world();
    let r = b.irecv(wb, 0, 1, rbuf).unwrap();
    let done = h.steps_until(1000, |d| d[1].is_done(r)).unwrap();
    assert!(
        done,
        "the message after the refused send never became matchable"
    );
    h[1].wait(r).unwrap();
    assert_eq!(x, [2]);
    // The synchronous sends complete once received.
    let (a, b) = h.pair_mut(0, 1);
    let mut y = [0u8];
    for _ in 0..sends.len() {
        b.recv(wb, 0, 0, &mut y).unwrap();
    }
    for s in sends {
        a.wait(s).unwrap();
    }
}

/// Eager flow control, step by step: a sender spends its credit at the receiver, sends the
/// rest by rendezvous (nothing of their data leaves the sender), the receiver gives credit back
/// as it consumes, and order holds across the switch.
#[test]
fn eager_credit_bounds_what_a_receiver_holds_and_comes_back() {
    use ch4_core::core::credit_cost;
    const LEN: usize = 16;
    let init = 10 * credit_cost(LEN) as usize; // ten messages' worth
    let config = DeviceConfig {
        eager_credit: init,
        ..DeviceConfig::default()
    };
    let (wire, mut h) = pipe_pair(config).unwrap();
    let (a, b) = h.pair_mut(0, 1);
    let (wa, wb) = (a.world(), b.world());
    // 50 nonblocking sends while b receives nothing: ten go eager, forty by rendezvous.
    let sends: Vec<_> = (0..50u8)
        .map(|i| {
            a.isend(
                wa,
                1,
                i32::from(i),
                SendBuf::owned(vec![i; LEN]),
                SendMode::Standard,
            )
            .unwrap()
        })
        .collect();
    let on_wire = wire.handlers(1);
    // A standard eager message needs no reply: the short header (the pipe is ordered).
    assert_eq!(on_wire[..10], [handler::EAGER_SHORT; 10]);
    assert_eq!(on_wire[10..], [handler::RTS; 40]);
    let held: usize = wire.with_inbox(1, |q| q.iter().map(|f| f.payload.len()).sum());
    assert_eq!(
        held,
        10 * LEN,
        "only the credit's worth of data left the sender"
    );
    // b takes them all in as unexpected messages: still only ten messages' data.
    while h[1].progress().unwrap() > 0 {}
    assert_eq!(h[1].unexpected_len(), 50);
    // b receives in send order; credit goes back once a quarter of it is consumed.
    for i in 0..50u8 {
        let mut got = [0u8; LEN];
        let r = h[1]
            .irecv(wb, 0, i32::from(i), unsafe_free(&mut got))
            .unwrap();
        if i == 2 {
            assert!(
                wire.handlers(0).contains(&handler::CREDIT),
                "three consumed messages are a quarter of the credit: it is given back"
            );
        }
        assert_eq!(h.wait(1, r).unwrap().bytes, LEN);
        assert_eq!(got, [i; LEN]);
    }
    for s in sends {
        h[0].wait(s).unwrap();
    }
    h.settle().unwrap();
    // All consumed and given back: ten eager messages fit again.
    for i in 0..10u8 {
        h[0].isend(wa, 1, 100, SendBuf::owned(vec![i; LEN]), SendMode::Standard)
            .unwrap();
    }
    let on_wire = wire.handlers(1);
    let eager = on_wire
        .iter()
        .filter(|&&h| h == handler::EAGER_SHORT)
        .count();
    assert!(
        eager >= 8,
        "credit came back (up to the unreturned quarter): {on_wire:?}"
    );
}

/// A receive buffer over `buf` for a test that waits for its request before `buf` goes.
fn unsafe_free(buf: &mut [u8]) -> RecvBuf {
    // SAFETY: every caller waits for the request before the buffer's borrow ends.
    unsafe { RecvBuf::borrowed(buf) }
}

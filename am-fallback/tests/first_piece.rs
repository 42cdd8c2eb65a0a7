//! A rendezvous message's first piece riding with its request-to-send (`RTS_DATA`), driven in
//! memory over the test kit's `Pipe`: what goes on the wire, where the piece lands (read in
//! place at the header, or copied after), and every way a receive can take it — posted ahead,
//! found waiting, truncated, probed, cancelled — with the eager credit the piece costs.

use am_fallback::wire::{handler, CtsHeader, DataHeader, MatchHeader};
use ch4_core::buffer::{RecvBuf, SendBuf};
use ch4_core::core::{credit_cost, DeviceConfig};
use ch4_core::{ErrorKind, SendMode};
use testkit::{pipe_job, Frame, Pipe, PipeHarness, Wire};

/// How the receiving pipe takes a payload in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reading {
    /// Delivered whole, the way of small frames.
    Whole,
    /// Read into the place the engine names, as TCP does with large payloads.
    InPlace,
    /// The engine asked where it goes, then given it whole after all (TCP with a noncontiguous
    /// buffer of tiny pieces).
    Declined,
}

const EVERY_READING: [Reading; 3] = [Reading::Whole, Reading::InPlace, Reading::Declined];

/// Eager limit 32, pieces of 40 bytes, the first of them sent with the request-to-send, read
/// the `reading` way.
fn job(reading: Reading, config: DeviceConfig) -> (Wire, PipeHarness) {
    pipe_job(2, config, |p: Pipe| {
        let p = p.with_first_piece(Pipe::MAX_PAYLOAD);
        match reading {
            Reading::Whole => p,
            Reading::InPlace => p.placing(),
            Reading::Declined => p.declining_places(),
        }
    })
    .unwrap()
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + 3) as u8).collect()
}

/// The offsets of the DATA pieces waiting for `dest`.
fn data_offsets(wire: &Wire, dest: u32) -> Vec<u64> {
    wire.with_inbox(dest, |q| {
        q.iter()
            .filter(|f| f.handler == handler::DATA)
            .map(|f| bytemuck::pod_read_unaligned::<DataHeader>(&f.header).offset)
            .collect()
    })
}

/// The `accept` of the CTS waiting for `dest`.
fn cts_accept(wire: &Wire, dest: u32) -> Option<u64> {
    wire.with_inbox(dest, |q| {
        q.iter()
            .find(|f| f.handler == handler::CTS)
            .map(|f| bytemuck::pod_read_unaligned::<CtsHeader>(&f.header).accept)
    })
}

/// Posted ahead: the request-to-send carries the first 40 bytes, the receiver answers at once,
/// and the sender streams only from offset 40 — whether the piece is read in place at the
/// header or copied once the frame is whole.
#[test]
fn a_posted_receive_takes_the_first_piece_and_asks_for_the_rest() {
    for reading in EVERY_READING {
        let placing = reading == Reading::InPlace;
        let (wire, mut h) = job(reading, DeviceConfig::default());
        let (wa, wb) = (h[0].world(), h[1].world());
        let data = pattern(100);
        let mut got = vec![0u8; 128];
        let r = h[1].irecv(wb, 0, 5, unsafe_free(&mut got)).unwrap();
        let s = h[0]
            .isend(wa, 1, 5, SendBuf::owned(data.clone()), SendMode::Standard)
            .unwrap();
        let first = wire.front(1).unwrap();
        assert_eq!(first.handler, handler::RTS_DATA);
        assert_eq!(first.payload, data[..40]);
        h[1].progress().unwrap();
        assert_eq!(cts_accept(&wire, 0), Some(100), "{reading:?}");
        assert_eq!(wire.placed(), u64::from(placing), "the piece went in place");
        h[0].progress().unwrap();
        assert_eq!(data_offsets(&wire, 1), [40, 80], "placing {placing}");
        let st = h.wait(1, r).unwrap();
        assert_eq!((st.source, st.tag, st.bytes), (0, 5, 100));
        assert_eq!(got[..100], data[..]);
        assert_eq!(
            wire.placed(),
            3 * u64::from(placing),
            "and the two DATA pieces"
        );
        h.wait(0, s).unwrap();
        h.settle().unwrap();
    }
}

/// Found waiting: the piece is kept with the request-to-send in the unexpected queue (a probe
/// sees the whole length), copied when the receive comes, and only the rest is streamed.
#[test]
fn an_unexpected_request_to_send_keeps_its_first_piece() {
    let (wire, mut h) = job(Reading::InPlace, DeviceConfig::default());
    let (wa, wb) = (h[0].world(), h[1].world());
    let data = pattern(100);
    let s = h[0]
        .isend(wa, 1, 6, SendBuf::owned(data.clone()), SendMode::Standard)
        .unwrap();
    h[1].progress().unwrap();
    assert_eq!(h[1].unexpected_len(), 1);
    assert_eq!(h[1].iprobe(wb, 0, 6).unwrap().map(|st| st.bytes), Some(100));
    assert_eq!(
        wire.pending(0),
        0,
        "no clear-to-send before a receive matches"
    );
    let mut got = vec![0u8; 100];
    let r = h[1].irecv(wb, 0, 6, unsafe_free(&mut got)).unwrap();
    h.settle().unwrap();
    assert_eq!(h.wait(1, r).unwrap().bytes, 100);
    assert_eq!(got, data);
    h.wait(0, s).unwrap();
}

/// A buffer smaller than the first piece gets what fits and a truncation error, and the sender
/// completes on the clear-to-send with nothing streamed; one between the piece and the whole
/// message gets the rest of what fits.
#[test]
fn truncation_within_and_beyond_the_first_piece() {
    for reading in EVERY_READING {
        let placing = reading == Reading::InPlace;
        for (cap, streamed) in [(20usize, vec![]), (60, vec![40u64])] {
            let (wire, mut h) = job(reading, DeviceConfig::default());
            let (wa, wb) = (h[0].world(), h[1].world());
            let data = pattern(100);
            let mut got = vec![0u8; cap];
            let r = h[1].irecv(wb, 0, 7, unsafe_free(&mut got)).unwrap();
            let s = h[0]
                .isend(wa, 1, 7, SendBuf::owned(data.clone()), SendMode::Standard)
                .unwrap();
            h[1].progress().unwrap();
            assert_eq!(cts_accept(&wire, 0), Some(cap as u64));
            // A buffer too small for the piece leaves it to be copied once whole.
            assert_eq!(wire.placed(), u64::from(placing && cap >= 40));
            h[0].progress().unwrap();
            assert_eq!(
                data_offsets(&wire, 1),
                streamed,
                "cap {cap}, placing {placing}"
            );
            let st = h.wait_status(1, r).unwrap();
            assert_eq!(st.error, Some(ErrorKind::Truncate));
            assert_eq!(st.bytes, cap);
            assert_eq!(got, data[..cap]);
            h.wait(0, s).unwrap();
            h.settle().unwrap();
        }
    }
}

/// A message only a little past the eager limit fits in its first piece: the request-to-send
/// carries all of it, no data follows, and the clear-to-send still completes the sender.
#[test]
fn a_message_that_fits_the_first_piece_is_one_frame_and_an_answer() {
    let (wire, mut h) = job(Reading::InPlace, DeviceConfig::default());
    let (wa, wb) = (h[0].world(), h[1].world());
    let data = pattern(36);
    let s = h[0]
        .isend(wa, 1, 8, SendBuf::owned(data.clone()), SendMode::Standard)
        .unwrap();
    assert_eq!(wire.handlers(1), [handler::RTS_DATA]);
    h.settle().unwrap();
    assert!(
        h[0].test(s).unwrap().is_none(),
        "all sent, but not yet answered"
    );
    let mut got = vec![0u8; 64];
    let r = h[1].irecv(wb, 0, 8, unsafe_free(&mut got)).unwrap();
    assert_eq!(h[1].test(r).unwrap().map(|st| st.bytes), Some(36));
    assert_eq!(got[..36], data[..]);
    assert_eq!(wire.handlers(0), [handler::CTS]);
    h.wait(0, s).unwrap();
}

/// A synchronous send with a first piece completes only once a receive has matched it.
#[test]
fn a_synchronous_send_with_a_first_piece_waits_for_its_match() {
    let (_wire, mut h) = job(Reading::InPlace, DeviceConfig::default());
    let (wa, wb) = (h[0].world(), h[1].world());
    let data = pattern(90);
    let s = h[0]
        .isend(
            wa,
            1,
            9,
            SendBuf::owned(data.clone()),
            SendMode::Synchronous,
        )
        .unwrap();
    h.settle().unwrap();
    assert!(h[0].test(s).unwrap().is_none(), "no receive yet");
    let mut got = vec![0u8; 90];
    let r = h[1].irecv(wb, 0, 9, unsafe_free(&mut got)).unwrap();
    h.wait(0, s).unwrap();
    assert_eq!(h.wait(1, r).unwrap().bytes, 90);
    assert_eq!(got, data);
}

/// A matched probe takes the request-to-send with its piece; the matched receive completes it.
#[test]
fn a_matched_probe_receives_a_first_piece_message() {
    let (_wire, mut h) = job(Reading::Whole, DeviceConfig::default());
    let (wa, wb) = (h[0].world(), h[1].world());
    let data = pattern(120);
    let s = h[0]
        .isend(wa, 1, 10, SendBuf::owned(data.clone()), SendMode::Standard)
        .unwrap();
    h.settle().unwrap();
    let (msg, st) = h[1].improbe(wb, 0, 10).unwrap().expect("waiting");
    assert_eq!(st.bytes, 120);
    let mut got = vec![0u8; 120];
    let r = h[1].imrecv(msg, unsafe_free(&mut got)).unwrap();
    assert_eq!(h.wait(1, r).unwrap().bytes, 120);
    assert_eq!(got, data);
    h.wait(0, s).unwrap();
}

/// Only a rendezvous send that goes alone takes a first piece: in a window, the sends after the
/// first go bare (their handshakes overlap anyway), and once the window's data has moved the
/// next lone send takes one again.
#[test]
fn only_a_lone_rendezvous_send_takes_a_first_piece() {
    let (wire, mut h) = job(Reading::InPlace, DeviceConfig::default());
    let (wa, wb) = (h[0].world(), h[1].world());
    let sends: Vec<_> = (0..3)
        .map(|i| {
            h[0].isend(wa, 1, i, SendBuf::owned(pattern(100)), SendMode::Standard)
                .unwrap()
        })
        .collect();
    assert_eq!(
        wire.handlers(1),
        [handler::RTS_DATA, handler::RTS, handler::RTS]
    );
    for i in 0..3 {
        let mut got = vec![0u8; 100];
        let r = h[1].irecv(wb, 0, i, unsafe_free(&mut got)).unwrap();
        assert_eq!(h.wait(1, r).unwrap().bytes, 100);
        assert_eq!(got, pattern(100));
    }
    for s in sends {
        h.wait(0, s).unwrap();
    }
    h.settle().unwrap();
    h[0].isend(wa, 1, 9, SendBuf::owned(pattern(100)), SendMode::Standard)
        .unwrap();
    assert_eq!(wire.handlers(1), [handler::RTS_DATA]);
}

/// The piece is paid for with eager credit: with the credit spent on eager messages the
/// receiver has not taken yet, a request-to-send goes bare (none of its data leaves the
/// sender). A first-piece send cancelled before any receive matched it gives its credit back
/// and no longer counts as a send in flight, so the next lone send takes a piece again.
#[test]
fn a_first_piece_needs_credit_and_a_cancel_gives_it_back() {
    let piece_cost = credit_cost(Pipe::MAX_PAYLOAD) as usize;
    let config = DeviceConfig {
        eager_credit: 2 * piece_cost,
        ..DeviceConfig::default()
    };
    let (wire, mut h) = job(Reading::InPlace, config);
    let (wa, wb) = (h[0].world(), h[1].world());
    // Two eager messages leave less credit than a piece costs.
    for i in 0..2 {
        h[0].isend(
            wa,
            1,
            i,
            SendBuf::owned(vec![i as u8; 16]),
            SendMode::Standard,
        )
        .unwrap();
    }
    let large = h[0]
        .isend(wa, 1, 2, SendBuf::owned(pattern(100)), SendMode::Standard)
        .unwrap();
    assert_eq!(
        wire.handlers(1),
        [handler::EAGER_SHORT, handler::EAGER_SHORT, handler::RTS]
    );
    for i in 0..3 {
        let mut got = vec![0u8; 100];
        let r = h[1].irecv(wb, 0, i, unsafe_free(&mut got)).unwrap();
        h.wait(1, r).unwrap();
    }
    h.wait(0, large).unwrap();
    h.settle().unwrap();
    // Consumed and given back: the piece rides again, and a cancel returns what it took.
    let cancelled = h[0]
        .isend(wa, 1, 3, SendBuf::owned(pattern(100)), SendMode::Standard)
        .unwrap();
    assert_eq!(wire.handlers(1), [handler::RTS_DATA]);
    h[1].progress().unwrap();
    h[0].cancel(cancelled).unwrap();
    assert!(h.wait_status(0, cancelled).unwrap().cancelled);
    h.settle().unwrap();
    assert_eq!(h[1].unexpected_len(), 0);
    let again = h[0]
        .isend(wa, 1, 4, SendBuf::owned(pattern(100)), SendMode::Standard)
        .unwrap();
    assert_eq!(wire.handlers(1), [handler::RTS_DATA]);
    let mut got = vec![0u8; 100];
    let r = h[1].irecv(wb, 0, 4, unsafe_free(&mut got)).unwrap();
    assert_eq!(h.wait(1, r).unwrap().bytes, 100);
    assert_eq!(got, pattern(100));
    h.wait(0, again).unwrap();
}

/// A request-to-send whose piece is empty, or longer than the message it announces, is a
/// protocol error — in place or copied — and the device still works after it.
#[test]
fn a_malformed_first_piece_is_a_protocol_error() {
    for reading in EVERY_READING {
        for (total, carried) in [(100u64, 0usize), (30, 31), (100, 101)] {
            let (wire, mut h) = job(reading, DeviceConfig::default());
            let wb = h[1].world();
            let mut got = vec![0u8; 200];
            let r = h[1].irecv(wb, 0, 11, unsafe_free(&mut got)).unwrap();
            let hdr = MatchHeader {
                context: 0,
                source: 0,
                tag: 11,
                flags: 0,
                seq: 0,
                reserved: 0,
                sreq: 1,
                total,
            };
            wire.inject(
                1,
                Frame::new(
                    0,
                    handler::RTS_DATA,
                    bytemuck::bytes_of(&hdr),
                    &vec![1u8; carried],
                ),
            );
            let e = h[1].progress().unwrap_err();
            assert_eq!(
                e.kind(),
                ErrorKind::Protocol,
                "{total}/{carried}, {reading:?}"
            );
            // The receive is still posted: a real message completes it.
            let wa = h[0].world();
            let s = h[0]
                .isend(wa, 1, 11, SendBuf::owned(pattern(100)), SendMode::Standard)
                .unwrap();
            assert_eq!(h.wait(1, r).unwrap().bytes, 100);
            assert_eq!(got[..100], pattern(100)[..]);
            h.wait(0, s).unwrap();
        }
    }
}

/// A receive with a layout (blocks of 25 bytes, 7 apart) takes the first piece in pieces of
/// its own, read into them or copied, and the gaps stay untouched.
#[test]
fn a_noncontiguous_receive_takes_the_first_piece_in_its_blocks() {
    use ch4_core::datatype::Layout;
    for reading in EVERY_READING {
        let (wire, mut h) = job(reading, DeviceConfig::default());
        let (wa, wb) = (h[0].world(), h[1].world());
        let data = pattern(100);
        let layout = Layout::vector::<u8>(4, 25, 32).unwrap();
        let mut buf = vec![0xEEu8; layout.extent_bytes()];
        // SAFETY: `buf` outlives the receive, which is waited for below.
        let recv = unsafe { RecvBuf::borrowed_with_layout(&mut buf, layout).unwrap() };
        let r = h[1].irecv(wb, 0, 12, recv).unwrap();
        let s = h[0]
            .isend(wa, 1, 12, SendBuf::owned(data.clone()), SendMode::Standard)
            .unwrap();
        h[1].progress().unwrap();
        // The first piece's 40 bytes span two blocks.
        let in_place = u64::from(reading == Reading::InPlace);
        assert_eq!(wire.placed(), in_place, "{reading:?}");
        assert_eq!(h.wait(1, r).unwrap().bytes, 100);
        h.wait(0, s).unwrap();
        for k in 0..4 {
            assert_eq!(
                buf[k * 32..k * 32 + 25],
                data[k * 25..(k + 1) * 25],
                "{reading:?}"
            );
            if k < 3 {
                assert!(buf[k * 32 + 25..(k + 1) * 32].iter().all(|&b| b == 0xEE));
            }
        }
    }
}

/// Rendezvous data streams in the transport's crowded piece size while several sends stream,
/// and in whole pieces once one streams alone; every message still arrives whole.
#[test]
fn several_sends_streaming_take_the_crowded_piece_size() {
    let (wire, mut h) = pipe_job(2, DeviceConfig::default(), |p: Pipe| {
        p.with_crowded_piece(10)
    })
    .unwrap();
    let (wa, wb) = (h[0].world(), h[1].world());
    let mut bufs = [vec![0u8; 120], vec![0u8; 60]];
    let recvs: Vec<_> = bufs
        .iter_mut()
        .enumerate()
        .map(|(i, b)| h[1].irecv(wb, 0, i as i32, unsafe_free(b)).unwrap())
        .collect();
    let sends: Vec<_> = [120usize, 60]
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            h[0].isend(
                wa,
                1,
                i as i32,
                SendBuf::owned(pattern(n)),
                SendMode::Standard,
            )
            .unwrap()
        })
        .collect();
    h[1].progress().unwrap(); // both requests-to-send: two clear-to-sends
                              // Both stream, a piece at a time each (a bounded number per progress call).
    for _ in 0..8 {
        h[0].progress().unwrap();
    }
    let lengths: Vec<usize> = wire.with_inbox(1, |q| {
        q.iter()
            .filter(|f| f.handler == handler::DATA)
            .map(|f| f.payload.len())
            .collect()
    });
    // Crowded while both stream (the 60-byte message's six pieces and as many of the other's),
    // then whole 40-byte pieces for the rest of the 120-byte one alone.
    assert_eq!(
        lengths,
        [10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 40, 20]
    );
    for r in recvs {
        h.wait(1, r).unwrap();
    }
    for s in sends {
        h.wait(0, s).unwrap();
    }
    assert_eq!(bufs[0], pattern(120));
    assert_eq!(bufs[1], pattern(60));
}

/// A receive buffer over `buf` for a test that waits for its request before `buf` goes.
fn unsafe_free(buf: &mut [u8]) -> RecvBuf {
    // SAFETY: every caller waits for the request before the buffer's borrow ends.
    unsafe { RecvBuf::borrowed(buf) }
}

//! The TCP netmod under a real device (MPI semantics from the AM fallback): large messages
//! stream in pieces read straight into the receive buffer, and a peer that dies fails the
//! receive that waits for it — within a second, not a hang — and so does one that finalized,
//! after its last messages.

use std::time::{Duration, Instant};

use ch4_core::buffer::{RecvBuf, SendBuf};
use ch4_core::core::DeviceConfig;
use ch4_core::datatype::Layout;
use ch4_core::{ErrorKind, SendMode};
use testkit::{tcp_job, Limit, TcpHarness};

/// A pair whose connection is open: rank 0 has sent rank 1 a message (within 10 s), and rank 1
/// received it. Later waits are bounded by 30 s.
fn connected_pair() -> TcpHarness {
    let mut h = tcp_job(2, 11, DeviceConfig::default(), |_, _| {}).unwrap();
    h.set_limit(Limit::time(Duration::from_secs(10)));
    h.pass(0, 1, 1, b"hello").unwrap();
    h.set_limit(Limit::time(Duration::from_secs(30)));
    h
}

#[test]
fn a_large_message_streams_through_the_sockets() {
    let msg: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let (got, placed) = receive_through(Layout::contiguous::<u8>(msg.len()).unwrap(), &msg);
    assert!(got == msg);
    // Rendezvous pieces went from the socket straight into `got`, not through the decoder.
    assert!(placed > 0);
}

#[test]
fn a_dead_peer_fails_the_waiting_receive_within_a_second() {
    let (a, mut b) = connected_pair().into_pair();
    let wb = b.world();
    let mut buf = [0u8; 5];
    // Rank 0 goes away (its sockets close) while rank 1 waits for a message from it.
    drop(a);
    let start = Instant::now();
    let err = b.recv(wb, 0, 2, &mut buf).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PeerFailed, "{err}");
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn a_peer_that_finalized_delivers_its_last_message_then_fails_receives_from_it() {
    let (mut a, mut b) = connected_pair().into_pair();
    let (wa, wb) = (a.world(), b.world());
    let mut buf = [0u8; 5];
    // Rank 0 sends a last eager message and leaves: finalize closes its connection in order.
    a.send(wa, 1, 3, b"bye", SendMode::Standard).unwrap();
    a.finalize(Duration::from_secs(10)).unwrap();
    drop(a);
    let st = b.recv(wb, 0, 3, &mut buf).unwrap();
    assert_eq!(&buf[..st.bytes], b"bye");
    let start = Instant::now();
    let err = b.recv(wb, 0, 2, &mut buf).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PeerFailed, "{err}");
    assert!(start.elapsed() < Duration::from_secs(1));
    // Sending to it says why.
    let err = b.send(wb, 0, 4, b"x", SendMode::Standard).unwrap_err();
    assert!(err.to_string().contains("left the job"), "{err}");
}

#[test]
fn every_large_payload_goes_straight_to_its_buffer_even_between_small_messages() {
    let mut h = connected_pair();
    let (a, b) = h.pair_mut(0, 1);
    let (wa, wb) = (a.world(), b.world());
    let large: Vec<u8> = (0..200_000u32).map(|i| (i % 253) as u8).collect();
    let small = [7u8; 100];
    let rounds = 10;
    let mut bigs = vec![vec![0u8; large.len()]; rounds];
    let mut smalls = vec![[0u8; 100]; rounds];
    let mut recvs = Vec::new();
    for (big, little) in bigs.iter_mut().zip(smalls.iter_mut()) {
        // SAFETY: the buffers outlive the requests, which are all waited for below.
        unsafe {
            recvs.push(b.irecv(wb, 0, 1, RecvBuf::borrowed(little)).unwrap());
            recvs.push(b.irecv(wb, 0, 2, RecvBuf::borrowed(big)).unwrap());
        }
    }
    let mut sends = Vec::new();
    for _ in 0..rounds {
        // SAFETY: `small` and `large` outlive the requests, waited for below.
        unsafe {
            sends.push(
                a.isend(wa, 1, 1, SendBuf::borrowed(&small), SendMode::Standard)
                    .unwrap(),
            );
            sends.push(
                a.isend(wa, 1, 2, SendBuf::borrowed(&large), SendMode::Standard)
                    .unwrap(),
            );
        }
    }
    // Every receive within 30 s in all (the harness's limit for this one wait).
    let waits: Vec<_> = recvs.iter().map(|&r| (1, r)).collect();
    h.drive_until_done(&waits).unwrap();
    for r in recvs {
        h[1].wait_status(r).unwrap();
    }
    for s in sends {
        h[0].wait(s).unwrap();
    }
    assert!(bigs.iter().all(|b| *b == large) && smalls.iter().all(|s| *s == small));
    assert_eq!(h[1].netmod().payloads_placed(), rounds as u64);
}

/// Receives `msg` into a buffer of `extent` bytes through `layout` (filled with 0xEE first);
/// returns the buffer and how many payloads went straight into place.
fn receive_through(layout: Layout, msg: &[u8]) -> (Vec<u8>, u64) {
    let mut h = connected_pair();
    let mut buf = vec![0xEEu8; layout.extent_bytes()];
    // SAFETY: `msg` and `buf` outlive the call, which completes both requests (within 30 s)
    // before it returns.
    let (send, recv) = unsafe {
        (
            SendBuf::borrowed(msg),
            RecvBuf::borrowed_with_layout(&mut buf, layout).unwrap(),
        )
    };
    let t = h.transfer(0, 1, 9, send, recv).unwrap();
    assert_eq!(t.send.error, None);
    assert_eq!(t.recv.bytes, msg.len());
    let placed = h[1].netmod().payloads_placed();
    (buf, placed)
}

#[test]
fn a_strided_receive_with_large_blocks_is_read_straight_into_its_blocks() {
    let (block, gap, count) = (48 * 1024, 100, 10);
    let layout = Layout::vector::<u8>(count, block, block + gap).unwrap();
    let msg: Vec<u8> = (0..block * count).map(|i| (i % 241) as u8).collect();
    let (buf, placed) = receive_through(layout, &msg);
    assert!(placed > 0, "the payload went through the decoder");
    for k in 0..count {
        let at = k * (block + gap);
        assert!(
            buf[at..at + block] == msg[k * block..(k + 1) * block],
            "block {k}"
        );
        if k + 1 < count {
            assert!(
                buf[at + block..at + block + gap].iter().all(|&b| b == 0xEE),
                "gap {k}"
            );
        }
    }
}

#[test]
fn a_strided_receive_with_tiny_blocks_is_copied_out_of_the_decoder() {
    // A column of 8-byte elements: one readv over thousands of tiny pieces would cost more
    // than the copy.
    let layout = Layout::vector::<u64>(16384, 1, 3).unwrap();
    let msg: Vec<u8> = (0..16384 * 8).map(|i| (i % 239) as u8).collect();
    let (buf, placed) = receive_through(layout, &msg);
    assert_eq!(placed, 0);
    for k in 0..16384 {
        assert!(
            buf[k * 24..k * 24 + 8] == msg[k * 8..k * 8 + 8],
            "element {k}"
        );
        if k + 1 < 16384 {
            assert!(buf[k * 24 + 8..k * 24 + 24].iter().all(|&b| b == 0xEE));
        }
    }
}

/// A 1 MiB message's first 512 KiB ride with its request-to-send: posted ahead, the piece and
/// the one streamed after it go straight into the buffer; found waiting, the piece comes out of
/// the unexpected queue and the rest streams; a buffer shorter than the piece, or between the
/// piece and the message, gets what fits and a truncation error. The sender completes each time.
#[test]
fn a_first_piece_rides_with_the_request_to_send_whatever_the_receive() {
    let msg: Vec<u8> = (0..1_048_576u32).map(|i| (i % 247) as u8).collect();
    // (buffer, posted before the message arrives, payloads read in place: at least, at most).
    // A piece larger than the decoder's read chunk (64 KiB) is always read in place when it
    // has one; the 12,288 bytes after the first piece of a 536,576-byte buffer are below the
    // size worth reading in place (16 KiB) and are copied out of the decoder.
    for (cap, posted, in_place) in [
        (msg.len(), true, 2..=2),
        (msg.len(), false, 1..=1),
        (100_000, true, 0..=0),
        (600_000, true, 2..=2),
        (536_576, true, 1..=1),
    ] {
        let mut h = connected_pair();
        let before = h[1].netmod().payloads_placed();
        let (wa, wb) = (h[0].world(), h[1].world());
        let mut buf = vec![0xEEu8; cap];
        // SAFETY: `msg` outlives the send, which is waited for below.
        let send = unsafe { SendBuf::borrowed(&msg) };
        // SAFETY: `buf` outlives the receive, which is waited for below.
        let recv = unsafe { RecvBuf::borrowed(&mut buf) };
        let mut recv = Some(recv);
        let r = if posted {
            recv.take().map(|b| h[1].irecv(wb, 0, 4, b).unwrap())
        } else {
            None
        };
        let s = h[0].isend(wa, 1, 4, send, SendMode::Standard).unwrap();
        let r = match (r, recv) {
            (Some(r), _) => r,
            (None, None) => unreachable!("a receive either posted or waiting"),
            (None, Some(recv)) => {
                h.drive_until("the request-to-send to wait unexpected", |d| {
                    Ok(d[1].unexpected_len() == 1)
                })
                .unwrap();
                h[1].irecv(wb, 0, 4, recv).unwrap()
            }
        };
        h.drive_until_done(&[(1, r), (0, s)]).unwrap();
        let st = h[1].wait_status(r).unwrap();
        assert_eq!(st.bytes, cap, "cap {cap}");
        let truncated = (cap < msg.len()).then_some(ErrorKind::Truncate);
        assert_eq!(st.error, truncated, "cap {cap}");
        assert!(buf == msg[..cap], "cap {cap}, posted {posted}");
        h[0].wait(s).unwrap();
        let placed = h[1].netmod().payloads_placed() - before;
        assert!(
            in_place.contains(&placed),
            "cap {cap}, posted {posted}: {placed}"
        );
    }
}

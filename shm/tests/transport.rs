//! The shared-memory transport under a device, two ranks as threads stepped from one thread by
//! the test kit: full rings, records waiting locally, rendezvous streamed or read with a single
//! copy, truncation, and a peer that left. (The failure tests that need the crate's private
//! items stay unit tests in `src/transport.rs`.)
// Under `--cfg loom` the crate has no segment or transport (scripts/loom.sh).
#![cfg(not(loom))]

use ch4_core::buffer::{RecvBuf, SendBuf};
use ch4_core::core::DeviceConfig;
use ch4_core::{ErrorKind, ReqHandle, SendMode, Status, ANY_TAG};
use shm::Geometry;
use testkit::{shm_job, ShmHarness};

/// Two ranks over 16 KiB rings with an eager limit of 1 KiB.
fn pair() -> ShmHarness {
    let (_seg, h) = shm_job(
        2,
        Geometry::with_ring(1 << 14),
        1024,
        DeviceConfig::default(),
    )
    .unwrap();
    h
}

/// Starts a nonblocking send of each of `msgs` from rank 0 to rank 1, message `i` with tag `i`.
///
/// # Safety
///
/// `msgs` must outlive the returned requests.
unsafe fn isend_all(h: &mut ShmHarness, msgs: &[Vec<u8>]) -> Vec<ReqHandle> {
    let w = h[0].world();
    msgs.iter()
        .enumerate()
        .map(|(i, m)| {
            // SAFETY: the caller keeps `msgs` alive until the requests complete.
            let buf = unsafe { SendBuf::borrowed(m) };
            h[0].isend(w, 1, i as i32, buf, SendMode::Standard).unwrap()
        })
        .collect()
}

#[test]
fn messages_eager_rendezvous_and_full_rings() {
    let mut h = pair();
    let wb = h[1].world();
    // 200 messages of up to 20 KB through a 16 KB ring: rings fill, records wait locally,
    // rendezvous data streams in pieces, and everything still arrives in order.
    let msgs: Vec<Vec<u8>> = (0..200u32)
        .map(|i| vec![i as u8; (i as usize * 97) % 20_000])
        .collect();
    // SAFETY: `msgs` outlives every request; each is waited for below.
    let sends = unsafe { isend_all(&mut h, &msgs) };
    for (i, m) in msgs.iter().enumerate() {
        let mut got = vec![0u8; 20_000];
        // SAFETY: `got` outlives the request, which completes before `got` is read.
        let r = h[1]
            .irecv(wb, 0, i as i32, unsafe { RecvBuf::borrowed(&mut got) })
            .unwrap();
        let st = h.wait(1, r).unwrap();
        assert_eq!(st.bytes, m.len());
        assert_eq!(&got[..m.len()], &m[..]);
    }
    for s in sends {
        h[0].wait(s).unwrap();
    }
}

#[test]
fn eager_messages_that_find_the_ring_full_go_by_rendezvous_and_keep_their_order() {
    let (_seg, mut h) = shm_job(
        2,
        Geometry::with_ring(1 << 16),
        16 << 10,
        DeviceConfig::default(),
    )
    .unwrap();
    let wb = h[1].world();
    // 80 eager-sized messages of 6000 bytes to a receiver that does not poll yet: about ten
    // fit the 64 KiB ring and 32 the sender's cells; the rest must not be copied aside but
    // sent as requests-to-send.
    let msgs: Vec<Vec<u8>> = (0..80u8).map(|i| vec![i; 6000]).collect();
    // SAFETY: `msgs` outlives every request; each is waited for below.
    let sends = unsafe { isend_all(&mut h, &msgs) };
    let went_rendezvous = h[0].live_requests();
    assert!(
        (30..48).contains(&went_rendezvous),
        "{went_rendezvous} of 80 sends kept a request (rendezvous)"
    );
    let mut got = vec![0u8; 6000];
    for (i, m) in msgs.iter().enumerate() {
        // SAFETY: `got` outlives the request, which completes before `got` is read.
        let r = h[1]
            .irecv(wb, 0, ANY_TAG, unsafe { RecvBuf::borrowed(&mut got) })
            .unwrap();
        let st = h.wait_status(1, r).unwrap();
        assert_eq!((st.tag, st.bytes), (i as i32, 6000));
        assert_eq!(&got, m);
    }
    for s in sends {
        h[0].wait(s).unwrap();
    }
    assert_eq!((h[0].live_requests(), h[1].live_requests()), (0, 0));
}

/// Sends `len` bytes from rank 0 to rank 1 into a receive of `cap` bytes (with 16 bytes of
/// 0xEE after it, to see that nothing is written past it); returns the receive's status, the
/// received bytes, and the pattern sent.
fn transfer(h: &mut ShmHarness, len: usize, cap: usize) -> (Status, Vec<u8>, Vec<u8>) {
    let msg: Vec<u8> = (0..len).map(|i| (i % 253) as u8).collect();
    let mut got = vec![0xEEu8; cap + 16];
    // SAFETY: `msg` and `got` outlive the call, which completes both requests before returning.
    let (send, recv) = unsafe { (SendBuf::borrowed(&msg), RecvBuf::borrowed(&mut got[..cap])) };
    let t = h.transfer(0, 1, 5, send, recv).unwrap();
    assert_eq!(t.send.error, None);
    (t.recv, got, msg)
}

#[test]
fn large_messages_by_single_copy_and_by_stream_when_the_receiver_declines() {
    for (sender, receiver) in [(true, true), (true, false), (false, true)] {
        let mut h = pair();
        h[0].shm_mut().set_cma(sender);
        h[1].shm_mut().set_cma(receiver);
        // Under the single-copy size cap (256 KiB), so the offer is really made.
        let (st, got, msg) = transfer(&mut h, 200_000, 200_000);
        assert_eq!(st.error, None, "cma sender {sender} receiver {receiver}");
        assert_eq!(st.bytes, msg.len());
        assert_eq!(&got[..msg.len()], &msg[..]);
        assert!(got[msg.len()..].iter().all(|&g| g == 0xEE));
        assert_eq!((h[0].live_requests(), h[1].live_requests()), (0, 0));
    }
}

#[test]
fn a_single_copy_read_truncates_at_the_receive_buffer() {
    let mut h = pair();
    h[0].shm_mut().set_cma(true);
    h[1].shm_mut().set_cma(true);
    let (st, got, msg) = transfer(&mut h, 100_000, 70_000);
    assert_eq!(st.error, Some(ErrorKind::Truncate));
    assert_eq!(st.bytes, 70_000);
    assert_eq!(&got[..70_000], &msg[..70_000]);
    assert!(
        got[70_000..].iter().all(|&g| g == 0xEE),
        "nothing past the buffer"
    );
}

#[test]
fn a_peer_that_left_cleanly_is_gone_too() {
    let (mut a, b) = pair().into_pair();
    drop(b); // its transport marks it gone
    let w = a.world();
    let err = a.recv(w, 1, 0, &mut [0u8; 1]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PeerFailed);
}

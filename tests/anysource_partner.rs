//! The ANY_SOURCE partner protocol, stepped by hand.
//!
//! Three devices live in this one thread: ranks 0 and 1 share a node (shm), rank 2 is on
//! another node behind the natively matching in-process netmod. Because nothing runs unless
//! the test calls `progress`, every interleaving of "shm matches first" and "the netmod matches
//! first" is forced deterministically — including the one where the netmod has matched but not
//! completed, so cancelling the partner fails and shm must leave its message for the next receive.

use ch4_core::buffer::SendBuf;
use ch4_core::core::DeviceConfig;
use ch4_core::{Device, ReqHandle, SendMode, Status, ANY_SOURCE, ANY_TAG};
use inproc::{FabricConfig, InprocNet, InprocShm, Native};
use testkit::{inproc_job, irecv_leaked, InprocHarness};

type Dev = Device<InprocNet<Native>, InprocShm>;

/// Ranks 0 and 1 on one node, rank 2 on another; tiny thresholds, so 300 bytes go by
/// rendezvous.
fn job() -> InprocHarness<Native> {
    let fabric = FabricConfig {
        ranks: 3,
        ranks_per_node: 2,
        eager_limit: 64,
        max_payload: 100,
    };
    inproc_job(fabric, DeviceConfig::default()).unwrap().1
}

/// Posts an ANY_SOURCE receive into a leaked buffer.
fn irecv_any(d: &mut Dev, cap: usize) -> (ReqHandle, &'static mut [u8]) {
    irecv_leaked(d, ANY_SOURCE, ANY_TAG, cap)
}

fn send(d: &mut Dev, dest: i32, tag: i32, data: &[u8]) -> ReqHandle {
    let world = d.world();
    d.isend(
        world,
        dest,
        tag,
        SendBuf::owned(data.to_vec()),
        SendMode::Standard,
    )
    .unwrap()
}

fn done(d: &mut Dev, h: ReqHandle) -> Option<Status> {
    d.test(h).unwrap()
}

#[test]
fn shm_matches_first_and_cancels_the_netmod_half() {
    let mut d = job();
    let (r, buf) = irecv_any(&mut d[0], 16);
    send(&mut d[1], 0, 1, b"from-shm");
    send(&mut d[2], 0, 2, b"from-net");
    let st = done(&mut d[0], r).expect("shm message should complete the receive");
    assert_eq!((st.source, st.tag, st.bytes), (1, 1, 8));
    assert_eq!(&buf[..8], b"from-shm");
    // The netmod's message was not swallowed by the cancelled partner.
    let (r2, buf2) = irecv_any(&mut d[0], 16);
    let st2 = d.wait(0, r2).unwrap();
    assert_eq!((st2.source, st2.tag), (2, 2));
    assert_eq!(&buf2[..8], b"from-net");
    assert_eq!(d[0].live_requests(), 0);
    assert_eq!(d[0].unexpected_len(), 0);
}

#[test]
fn netmod_matched_first_so_shm_leaves_its_message() {
    let mut d = job();
    let (r, buf) = irecv_any(&mut d[0], 16);
    send(&mut d[2], 0, 2, b"from-net");
    // The netmod matches the partner now; its completion comes through the NIC's completion
    // queue at a later progress call.
    assert!(d[0].progress().unwrap() >= 1);
    assert!(!d[0].is_done(r).unwrap());
    // Now an shm message arrives for the same wildcard receive: cancelling the netmod half
    // fails, so shm must not take the receive.
    send(&mut d[1], 0, 1, b"from-shm");
    let st = done(&mut d[0], r).expect("netmod completes the receive");
    assert_eq!((st.source, st.tag), (2, 2));
    assert_eq!(&buf[..8], b"from-net");
    assert_eq!(
        d[0].unexpected_len(),
        1,
        "shm message must wait for the next receive"
    );
    let (r2, buf2) = irecv_any(&mut d[0], 16);
    let st2 = done(&mut d[0], r2).expect("the queued shm message matches at once");
    assert_eq!((st2.source, st2.tag), (1, 1));
    assert_eq!(&buf2[..8], b"from-shm");
    assert_eq!(d[0].live_requests(), 0);
}

#[test]
fn rendezvous_over_shm_claims_the_receive_before_data_arrives() {
    let mut d = job();
    let (r, buf) = irecv_any(&mut d[0], 500);
    let big: Vec<u8> = (0..300).map(|i| i as u8).collect();
    let s = send(&mut d[1], 0, 7, &big); // RTS over shm
    assert!(d[0].progress().unwrap() > 0); // RTS matched: partner cancelled, CTS queued
    send(&mut d[2], 0, 8, b"late-net"); // must not complete the claimed receive

    // At most 100 rounds; the assertions below say which request did not complete.
    d.steps_until(100, |d| Ok(d[0].is_done(r)? && d[1].is_done(s)?))
        .unwrap();
    let st = done(&mut d[0], r).expect("rendezvous receive completes");
    let sent = done(&mut d[1], s);
    assert!(sent.is_some(), "rendezvous send completes");
    assert_eq!((st.source, st.tag, st.bytes), (1, 7, 300));
    assert_eq!(&buf[..300], &big[..]);
    let (r2, buf2) = irecv_any(&mut d[0], 16);
    let st2 = d.wait(0, r2).unwrap();
    assert_eq!((st2.source, &buf2[..8]), (2, &b"late-net"[..]));
}

#[test]
fn cancelling_a_partnered_receive_cancels_both_halves() {
    let mut d = job();
    let (r, _) = irecv_any(&mut d[0], 16);
    d[0].cancel(r).unwrap();
    let st = done(&mut d[0], r).expect("cancel completes the receive");
    assert!(st.cancelled);
    send(&mut d[1], 0, 1, b"a");
    send(&mut d[2], 0, 2, b"b");
    for _ in 0..4 {
        d[0].progress().unwrap();
    }
    // Neither message went to the cancelled receive: both are still there to be received.
    let world = d[0].world();
    assert!(d[0].iprobe(world, 1, 1).unwrap().is_some());
    assert!(d[0].iprobe(world, 2, 2).unwrap().is_some());
}

#[test]
fn many_interleavings_deliver_every_message_exactly_once() {
    // Alternate which side sends first and how often rank 0 progresses in between.
    let mut d = job();
    let mut got = Vec::new();
    for round in 0..60u8 {
        let (r, buf) = irecv_any(&mut d[0], 4);
        let order = round % 4;
        if order & 1 == 0 {
            send(&mut d[1], 0, 1, &[round]);
        } else {
            send(&mut d[2], 0, 2, &[round]);
        }
        if order & 2 != 0 {
            d[0].progress().unwrap();
        }
        if order & 1 == 0 {
            send(&mut d[2], 0, 2, &[round]);
        } else {
            send(&mut d[1], 0, 1, &[round]);
        }
        let st = d.wait(0, r).unwrap();
        got.push((st.source, buf[0]));
        // Receive the other message of the round with a second wildcard receive.
        let (r2, buf2) = irecv_any(&mut d[0], 4);
        let st2 = d.wait(0, r2).unwrap();
        got.push((st2.source, buf2[0]));
        assert_ne!(st.source, st2.source, "round {round}: same sender twice");
    }
    for src in [1, 2] {
        let seq: Vec<u8> = got.iter().filter(|g| g.0 == src).map(|g| g.1).collect();
        assert_eq!(
            seq,
            (0..60).collect::<Vec<u8>>(),
            "from {src}: lost, doubled or reordered"
        );
    }
    assert_eq!(d[0].live_requests(), 0);
    assert_eq!(d[0].unexpected_len(), 0);
}

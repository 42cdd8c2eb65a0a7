//! The native-engine contract of `ch4-core` (see ARCHITECTURE.md, "Natively matching
//! engines"), held against the asynchronous mock NIC of `inproc::InprocNet<Native>`:
//! completions that come later through a completion queue, cancels answered there, a transmit
//! queue that refuses posts, operation contexts that must not move while the request pool grows.

use std::time::Duration;

use ch4_core::buffer::SendBuf;
use ch4_core::core::DeviceConfig;
use ch4_core::{Device, ErrorKind, SendMode, ANY_SOURCE, ANY_TAG};
use inproc::native::{INJECT_LIMIT, NIC_TAG_UB, TX_DEPTH};
use inproc::{FabricConfig, InprocNet, InprocShm, Native};
use testkit::{inproc_job, irecv_leaked, isend_owned, InprocHarness};

type Dev = Device<InprocNet<Native>, InprocShm>;

/// Ranks 0 and 1 on nodes of their own (everything through the mock NIC); a small request pool
/// that must grow while operations are outstanding.
fn job(config: DeviceConfig) -> InprocHarness<Native> {
    let fabric = FabricConfig {
        ranks: 2,
        ranks_per_node: 1,
        eager_limit: 1024,
        max_payload: 4096,
    };
    inproc_job(fabric, config).unwrap().1
}

fn small_pool() -> DeviceConfig {
    let mut c = DeviceConfig::default();
    c.requests.min = 16;
    c.requests.chunk = 16;
    c
}

fn pattern(seq: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (seq * 31 + i * 7) as u8).collect()
}

#[test]
fn receives_posted_while_the_pool_grows_complete_into_their_own_buffers() {
    let mut d = job(small_pool());
    // Far more receives than the pool's first chunk: the pool moves its requests while the NIC
    // holds every one of these operations.
    let n = 200;
    let recvs: Vec<_> = (0..n)
        .map(|i| irecv_leaked(&mut d[1], 0, i as i32, 300))
        .collect();
    assert_eq!(d[1].netmod().engine().outstanding(), n);
    let sends: Vec<_> = (0..n)
        .map(|i| {
            isend_owned(
                &mut d[0],
                1,
                i as i32,
                pattern(i, 100 + i),
                SendMode::Standard,
            )
        })
        .collect();
    for (i, (h, buf)) in recvs.into_iter().enumerate() {
        let st = d.wait(1, h).unwrap();
        assert_eq!((st.tag, st.bytes), (i as i32, 100 + i));
        assert_eq!(&buf[..100 + i], &pattern(i, 100 + i)[..], "receive {i}");
    }
    for h in sends {
        d.wait(0, h).unwrap();
    }
    assert_eq!(d[1].netmod().engine().outstanding(), 0);
    assert_eq!(d[0].netmod().engine().outstanding(), 0);
}

#[test]
fn sends_the_nic_refuses_wait_in_order_and_all_arrive() {
    let mut d = job(small_pool());
    // Large sends fill the transmit queue (they leave only at the sender's progress); small
    // ones posted behind them must not overtake them.
    let mut sends = Vec::new();
    for i in 0..3 * TX_DEPTH {
        let len = if i % 3 == 0 { INJECT_LIMIT / 2 } else { 2000 };
        sends.push(isend_owned(
            &mut d[0],
            1,
            5,
            pattern(i, len),
            SendMode::Standard,
        ));
    }
    for i in 0..3 * TX_DEPTH {
        let len = if i % 3 == 0 { INJECT_LIMIT / 2 } else { 2000 };
        let (h, buf) = irecv_leaked(&mut d[1], 0, 5, 4096);
        let st = d.wait(1, h).unwrap();
        assert_eq!(st.bytes, len, "message {i} out of order");
        assert_eq!(&buf[..len], &pattern(i, len)[..]);
    }
    for h in sends {
        d.wait(0, h).unwrap();
    }
}

#[test]
fn a_cancel_is_answered_by_the_network_not_by_the_call() {
    let mut d = job(DeviceConfig::default());
    // Unmatched: the NIC reports it cancelled, through its completion queue.
    let (r, _) = irecv_leaked(&mut d[1], 0, 1, 16);
    d[1].cancel(r).unwrap();
    let st = d.wait_status(1, r).unwrap();
    assert!(st.cancelled);
    assert_eq!(d[1].netmod().engine().outstanding(), 0);
    // Matched, its data in flight: the cancel fails and the receive completes with the data.
    let (r, buf) = irecv_leaked(&mut d[1], 0, 2, 16);
    isend_owned(&mut d[0], 1, 2, b"in flight".to_vec(), SendMode::Standard);
    d[1].progress().unwrap(); // the NIC matches; the completion is reported later
    d[1].cancel(r).unwrap();
    let st = d.wait_status(1, r).unwrap();
    assert!(!st.cancelled, "a matched receive cannot be cancelled");
    assert_eq!(&buf[..9], b"in flight");
}

#[test]
fn releasing_a_matched_receive_waits_for_the_network_to_let_go() {
    let mut d = job(DeviceConfig::default());
    let (r, _) = irecv_leaked(&mut d[1], 0, 3, 4096);
    isend_owned(&mut d[0], 1, 3, pattern(3, 3000), SendMode::Standard);
    for _ in 0..3 {
        d[0].progress().unwrap(); // transmit
    }
    d[1].progress().unwrap(); // matched, data in flight
    d[1].release(r);
    assert_eq!(
        d[1].netmod().engine().outstanding(),
        0,
        "the request was freed while the network still held its buffer"
    );
    assert_eq!(d[1].live_requests(), 0);
}

#[test]
fn a_wedged_network_turns_a_cancel_into_an_error_and_is_closed() {
    let mut d = job(DeviceConfig {
        cancel_limit: Duration::from_millis(50),
        ..DeviceConfig::default()
    });
    let (r, _) = irecv_leaked(&mut d[1], 0, 4, 16);
    d[1].netmod_mut().engine_mut().set_stalled(true);
    let e = d[1].cancel(r).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Pending);
    assert!(d[1].netmod().engine().is_closed());
    // Closed: nothing holds the buffer any more, so the request can go.
    d[1].release(r);
    assert_eq!(d[1].live_requests(), 0);
}

#[test]
fn a_dropped_probed_message_releases_its_synchronous_sender() {
    let mut d = job(DeviceConfig::default());
    let s = isend_owned(&mut d[0], 1, 6, pattern(6, 500), SendMode::Synchronous);
    let w = d[1].world();
    let msg = loop {
        if let Some((m, _)) = d[1].improbe(w, 0, 6).unwrap() {
            break m;
        }
        d[0].progress().unwrap();
    };
    d[1].discard_message(msg).unwrap();
    d.wait(0, s)
        .expect("the synchronous send completes once its message is discarded");
}

#[test]
fn the_nic_tag_range_is_the_device_tag_range() {
    assert_eq!(Dev::TAG_UB, NIC_TAG_UB);
    let mut d = job(DeviceConfig::default());
    let w = d[0].world();
    let e = d[0]
        .isend(
            w,
            1,
            NIC_TAG_UB + 1,
            SendBuf::owned(vec![1]),
            SendMode::Standard,
        )
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Tag);
    assert!(!d[0].caps().detects_unmatched_ready);
    // ANY_SOURCE + ANY_TAG still work.
    let (r, buf) = irecv_leaked(&mut d[1], ANY_SOURCE, ANY_TAG, 8);
    isend_owned(
        &mut d[0],
        1,
        NIC_TAG_UB,
        b"top".to_vec(),
        SendMode::Standard,
    );
    let st = d.wait(1, r).unwrap();
    assert_eq!((st.tag, &buf[..3]), (NIC_TAG_UB, &b"top"[..]));
}

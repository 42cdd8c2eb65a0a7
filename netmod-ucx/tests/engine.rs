//! The UCX engine over this machine's UCX, with the devices of a job stepped from one thread,
//! over UCX's TCP transport (on the loopback device) and over its shared-memory transports:
//! MPI's matching rules, synchronous sends, probes, cancel, truncation, layouts, the
//! native-engine contract (buffers held until UCX lets go, pool growth with operations
//! outstanding), and eager credit.

use ch4_core::bootstrap::Bootstrap;
use ch4_core::buffer::SendBuf;
use ch4_core::core::DeviceConfig;
use ch4_core::{Device, ErrorKind, NoShm, SendMode, ANY_SOURCE, ANY_TAG};
use netmod_ucx::{tag, ErrMode, UcxNetmod};
use testkit::{irecv_leaked, isend_owned, Harness};

type Dev = Device<UcxNetmod, NoShm>;

/// The transports every test runs over (UCX's settings without the `UCX_` prefix), and the
/// error handling mode of the endpoints: tcp in both modes (they choose different rendezvous
/// protocols), shared memory in the one it supports.
const TRANSPORTS: [(&[(&str, &str)], ErrMode); 3] = [
    (&[("TLS", "tcp"), ("NET_DEVICES", "lo")], ErrMode::None),
    (&[("TLS", "tcp"), ("NET_DEVICES", "lo")], ErrMode::Peer),
    (&[("TLS", "posix,sysv,cma")], ErrMode::None),
];

/// A job of `ranks` devices over UCX configured with `settings`, every rank its own node;
/// `None` (with a note) when UCX cannot open that here.
fn job(
    settings: &[(&str, &str)],
    mode: ErrMode,
    ranks: u32,
    config: DeviceConfig,
) -> Option<Harness<UcxNetmod, NoShm>> {
    let nets: Vec<UcxNetmod> = match (0..ranks)
        .map(|r| UcxNetmod::open_in_mode(r, ranks, true, settings, mode))
        .collect::<ch4_core::Result<Vec<_>>>()
    {
        Ok(n) => n,
        Err(e) => {
            eprintln!("note: UCX with {settings:?} unavailable here, test skipped: {e}");
            return None;
        }
    };
    let cards: Vec<Vec<u8>> = nets.iter().map(|n| n.business_card().unwrap()).collect();
    let devs = nets
        .into_iter()
        .enumerate()
        .map(|(r, mut net)| {
            net.learn_cards(&cards).unwrap();
            Device::new(net, NoShm, r as u32, ranks, config).unwrap()
        })
        .collect();
    Some(Harness::new(devs))
}

fn each_transport(
    ranks: u32,
    config: DeviceConfig,
    mut body: impl FnMut(&str, &mut Harness<UcxNetmod, NoShm>),
) {
    for (t, mode) in TRANSPORTS {
        if let Some(mut h) = job(t, mode, ranks, config) {
            let name = format!("{} ({} errors)", t[0].1, mode.name());
            body(&name, &mut h);
        }
    }
}

fn pattern(seq: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (seq * 31 + i * 7) as u8).collect()
}

#[test]
fn messages_of_every_size_arrive_in_order() {
    each_transport(2, DeviceConfig::default(), |p, d| {
        let sizes = [0usize, 1, 8, 64, 65, 4096, 8193, 100_000, 4 << 20];
        let recvs: Vec<_> = sizes
            .iter()
            .map(|&n| irecv_leaked(&mut d[1], 0, 9, n + 1))
            .collect();
        let sends: Vec<_> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| isend_owned(&mut d[0], 1, 9, pattern(i, n), SendMode::Standard))
            .collect();
        for (i, ((h, buf), &n)) in recvs.into_iter().zip(&sizes).enumerate() {
            let st = d.wait(1, h).unwrap();
            assert_eq!((st.source, st.tag, st.bytes), (0, 9, n), "{p}: message {i}");
            assert_eq!(&buf[..n], &pattern(i, n)[..], "{p}: message {i}'s bytes");
        }
        for h in sends {
            d.wait(0, h).unwrap();
        }
        d.settle().unwrap();
        assert_eq!(d[0].netmod().outstanding(), 0, "{p}");
        assert_eq!(d[1].netmod().outstanding(), 0, "{p}");
    });
}

/// Flow control over UCX: nonblocking sends beyond the receiver's eager credit go as
/// synchronous sends (and are counted), in order. They stay incomplete until a receive has
/// taken them, so a sender's window cannot run ahead of its receiver; the receiver gives back
/// credit for the credited ones only, so afterwards exactly the credit's worth goes credited
/// again.
#[test]
fn nonblocking_sends_beyond_credit_go_synchronous_counted_and_in_order() {
    // 2 KiB of credit: a message's charge is a sixteenth (128 bytes) plus the core's 128 of
    // overhead, so 8 messages fit.
    let config = DeviceConfig {
        eager_credit: 2048,
        ..DeviceConfig::default()
    };
    each_transport(2, config, |p, d| {
        let mut sends: Vec<_> = (0..20)
            .map(|i| isend_owned(&mut d[0], 1, 4, pattern(i, 8), SendMode::Standard))
            .collect();
        assert_eq!(d[0].netmod().sends_without_credit(), 12, "{p}");
        // Nothing is received yet: the credited sends may complete, the others may not.
        for _ in 0..200 {
            d.step().unwrap();
        }
        for (i, h) in sends.iter_mut().enumerate() {
            let done = d[0].test(*h).unwrap().is_some();
            if done {
                *h = ch4_core::ReqHandle::DONE;
            }
            assert!(
                i < 8 || !done,
                "{p}: send {i}, without credit, completed before any receive"
            );
        }
        for i in 0..20 {
            let (h, buf) = irecv_leaked(&mut d[1], 0, 4, 8);
            let st = d.wait(1, h).unwrap();
            assert_eq!(
                (st.bytes, &buf[..8]),
                (8, &pattern(i, 8)[..]),
                "{p}: message {i}"
            );
        }
        for h in sends
            .into_iter()
            .filter(|h| *h != ch4_core::ReqHandle::DONE)
        {
            d.wait(0, h).unwrap();
        }
        d.settle().unwrap();
        // The 8 credited messages gave back 8 messages' credit, and the 12 others none.
        let more: Vec<_> = (0..9)
            .map(|i| isend_owned(&mut d[0], 1, 5, pattern(i, 8), SendMode::Standard))
            .collect();
        assert_eq!(
            d[0].netmod().sends_without_credit(),
            13,
            "{p}: the credit came back, exactly"
        );
        for i in 0..9 {
            let (r, buf) = irecv_leaked(&mut d[1], 0, 5, 8);
            d.wait(1, r).unwrap();
            assert_eq!(&buf[..8], &pattern(i, 8)[..], "{p}: message {i} after");
        }
        for h in more {
            d.wait(0, h).unwrap();
        }
    });
}

#[test]
fn wildcards_and_the_source_process() {
    each_transport(3, DeviceConfig::default(), |p, d| {
        let (any, buf) = irecv_leaked(&mut d[0], ANY_SOURCE, ANY_TAG, 16);
        isend_owned(&mut d[2], 0, 44, b"from two".to_vec(), SendMode::Standard);
        let st = d.wait(0, any).unwrap();
        assert_eq!(
            (st.source, st.tag, &buf[..8]),
            (2, 44, &b"from two"[..]),
            "{p}"
        );
        let w = d[1].world();
        let e = d[1]
            .isend(
                w,
                0,
                tag::TAG_UB + 1,
                SendBuf::owned(vec![1]),
                SendMode::Standard,
            )
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Tag, "{p}");
        assert_eq!(Dev::TAG_UB, tag::TAG_UB);
    });
}

#[test]
fn a_short_send_takes_no_slot_and_a_kept_one_holds_its_buffer_until_the_match() {
    each_transport(2, DeviceConfig::default(), |p, d| {
        // The first message waits for the connection: UCX keeps it.
        let (r0, _) = irecv_leaked(&mut d[1], 0, 2, 8);
        let first = isend_owned(&mut d[0], 1, 2, pattern(2, 8), SendMode::Standard);
        d.wait(1, r0).unwrap();
        d.wait(0, first).unwrap();
        d.settle().unwrap();
        let short = isend_owned(&mut d[0], 1, 3, pattern(0, 8), SendMode::Standard);
        assert!(
            d[0].is_done(short).unwrap(),
            "{p}: an 8-byte send is copied out at once"
        );
        assert_eq!(
            d[0].netmod().outstanding(),
            0,
            "{p}: ... and leaves no operation"
        );
        let len = 4 << 20;
        let long = isend_owned(&mut d[0], 1, 4, pattern(1, len), SendMode::Standard);
        for _ in 0..50 {
            d.step().unwrap();
        }
        assert!(
            !d[0].is_done(long).unwrap(),
            "{p}: a 4 MiB send done before its receive was posted"
        );
        assert_eq!(
            d[0].netmod().outstanding(),
            1,
            "{p}: the kept send's operation"
        );
        let (r8, b8) = irecv_leaked(&mut d[1], 0, 3, 8);
        let (r, buf) = irecv_leaked(&mut d[1], 0, 4, len);
        d.wait(1, r8).unwrap();
        let st = d.wait(1, r).unwrap();
        d.wait(0, long).unwrap();
        assert_eq!(&b8[..8], &pattern(0, 8)[..], "{p}");
        assert_eq!(
            (st.bytes, buf[..len] == pattern(1, len)[..]),
            (len, true),
            "{p}"
        );
        d.settle().unwrap();
        assert_eq!(d[0].netmod().outstanding(), 0, "{p}");
    });
}

#[test]
fn a_synchronous_send_completes_only_after_the_match() {
    each_transport(2, DeviceConfig::default(), |p, d| {
        for len in [8usize, 100_000] {
            let s = isend_owned(&mut d[0], 1, 5, pattern(1, len), SendMode::Synchronous);
            for _ in 0..50 {
                d.step().unwrap();
            }
            assert!(
                !d[0].is_done(s).unwrap(),
                "{p}: {len}-byte ssend done before its match"
            );
            let (r, buf) = irecv_leaked(&mut d[1], 0, 5, len);
            d.wait(1, r).unwrap();
            d.wait(0, s).unwrap();
            assert_eq!(&buf[..len], &pattern(1, len)[..], "{p}");
        }
    });
}

#[test]
fn truncation_is_the_receive_error_and_the_next_message_arrives() {
    each_transport(2, DeviceConfig::default(), |p, d| {
        for len in [50usize, 5000, 300_000] {
            let (r, _) = irecv_leaked(&mut d[1], 0, 3, 10);
            let s = isend_owned(&mut d[0], 1, 3, pattern(3, len), SendMode::Standard);
            let st = d.wait_status(1, r).unwrap();
            assert_eq!(st.error, Some(ErrorKind::Truncate), "{p}: {len}");
            d.wait(0, s).unwrap();
        }
        isend_owned(&mut d[0], 1, 4, b"whole".to_vec(), SendMode::Standard);
        let (r, buf) = irecv_leaked(&mut d[1], 0, 4, 16);
        d.wait(1, r).unwrap();
        assert_eq!(&buf[..5], b"whole", "{p}");
    });
}

#[test]
fn cancel_is_definite() {
    each_transport(2, DeviceConfig::default(), |p, d| {
        let (r, _) = irecv_leaked(&mut d[1], 0, 1, 16);
        d[1].cancel(r).unwrap();
        let st = d.wait_status(1, r).unwrap();
        assert!(st.cancelled, "{p}");
        assert_eq!(d[1].netmod().outstanding(), 0, "{p}");
        isend_owned(&mut d[0], 1, 1, b"after".to_vec(), SendMode::Standard);
        for _ in 0..100 {
            d.step().unwrap();
        }
        // Already there: the receive completes inside the call that posts it.
        let (r, buf) = irecv_leaked(&mut d[1], 0, 1, 16);
        let st = d.wait(1, r).unwrap();
        assert_eq!((st.source, st.tag, st.bytes), (0, 1, 5), "{p}");
        assert_eq!(&buf[..5], b"after", "{p}");
    });
}

#[test]
fn probes_and_matched_probes() {
    each_transport(2, DeviceConfig::default(), |p, d| {
        let w = d[1].world();
        let s = isend_owned(&mut d[0], 1, 7, pattern(7, 3000), SendMode::Synchronous);
        let st = loop {
            if let Some(st) = d[1].iprobe(w, 0, 7).unwrap() {
                break st;
            }
            d.step().unwrap();
        };
        assert_eq!((st.source, st.tag, st.bytes), (0, 7, 3000), "{p}");
        let (msg, st) = d[1]
            .improbe(w, ANY_SOURCE, 7)
            .unwrap()
            .expect("probed message");
        assert_eq!(st.bytes, 3000);
        let mut buf = vec![0u8; 3000];
        let st = d[1].mrecv(msg, &mut buf).unwrap();
        assert_eq!((st.bytes, &buf[..]), (3000, &pattern(7, 3000)[..]), "{p}");
        d.wait(0, s).unwrap();
        let s = isend_owned(&mut d[0], 1, 8, pattern(8, 100), SendMode::Synchronous);
        let msg = loop {
            if let Some((m, _)) = d[1].improbe(w, 0, 8).unwrap() {
                break m;
            }
            d.step().unwrap();
        };
        d[1].discard_message(msg).unwrap();
        d.wait(0, s).unwrap();
        assert!(
            d[1].iprobe(w, 0, 8).unwrap().is_none(),
            "{p}: the discarded message is gone"
        );
    });
}

#[test]
fn receives_posted_while_the_pool_grows_and_a_released_one() {
    let mut config = DeviceConfig::default();
    config.requests.min = 16;
    config.requests.chunk = 16;
    each_transport(2, config, |p, d| {
        let n = 300;
        let recvs: Vec<_> = (0..n)
            .map(|i| irecv_leaked(&mut d[1], 0, i as i32, 200))
            .collect();
        let (gone, _) = irecv_leaked(&mut d[1], 0, 9999, 64);
        d[1].release(gone);
        for i in 0..n {
            isend_owned(
                &mut d[0],
                1,
                i as i32,
                pattern(i, 100 + i % 100),
                SendMode::Standard,
            );
        }
        for (i, (h, buf)) in recvs.into_iter().enumerate() {
            let st = d.wait(1, h).unwrap();
            assert_eq!(
                &buf[..st.bytes],
                &pattern(i, 100 + i % 100)[..],
                "{p}: receive {i}"
            );
        }
        d.settle().unwrap();
        assert_eq!(d[1].netmod().outstanding(), 0, "{p}");
        assert_eq!(d[1].live_requests(), 0, "{p}");
    });
}

//! The OFI engine over a real libfabric provider (`tcp;ofi_rxm`), with
//! the devices of a job stepped from one thread: MPI's matching rules, synchronous sends,
//! probes, cancel, truncation, the native-engine contract (buffers held until the
//! provider lets go, pool growth with operations outstanding), and messages longer than the
//! provider's largest (RMA read), with that limit forced low.

use ch4_core::bootstrap::Bootstrap;
use ch4_core::buffer::{RecvBuf, SendBuf};
use ch4_core::core::DeviceConfig;
use ch4_core::{Device, ErrorKind, NoShm, PeerState, ReqHandle, SendMode, ANY_SOURCE, ANY_TAG};
use netmod_ofi::provider::Hints;
use netmod_ofi::{tag, OfiNetmod};
use std::sync::Arc;
use std::time::{Duration, Instant};
use testkit::{irecv_leaked, isend_owned, Harness};

type Dev = Device<OfiNetmod, NoShm>;

/// A job of `ranks` devices over `provider` (FI_PROVIDER's syntax), every rank its own node;
/// `None` (with a note) when the provider is missing here.
fn job(provider: &str, ranks: u32, config: DeviceConfig) -> Option<Harness<OfiNetmod, NoShm>> {
    // Named in the hints: libfabric reads FI_PROVIDER only once per process.
    job_with(&Hints::for_provider(provider), ranks, config)
}

/// [`job`] with the netmod opened with `hints`.
fn job_with(hints: &Hints, ranks: u32, config: DeviceConfig) -> Option<Harness<OfiNetmod, NoShm>> {
    let provider = hints.provider.as_deref().unwrap_or("(default)");
    let nets: Vec<OfiNetmod> = match (0..ranks)
        .map(|r| OfiNetmod::open_with(hints, r, ranks, true))
        .collect::<ch4_core::Result<Vec<_>>>()
    {
        Ok(n) => n,
        Err(e) => {
            eprintln!("note: provider {provider} unavailable here, test skipped: {e}");
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

/// The providers every test runs over: those of this machine's libfabric that can carry MPI
/// matching (1.17's shm cannot; see the test of its refusal).
const PROVIDERS: [&str; 1] = ["tcp;ofi_rxm"];

fn each_provider(
    ranks: u32,
    config: DeviceConfig,
    mut body: impl FnMut(&str, &mut Harness<OfiNetmod, NoShm>),
) {
    for p in PROVIDERS {
        if let Some(mut h) = job(p, ranks, config) {
            body(p, &mut h);
        }
    }
}

fn pattern(seq: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (seq * 31 + i * 7) as u8).collect()
}

#[test]
fn messages_of_every_size_arrive_in_order() {
    each_provider(2, DeviceConfig::default(), |p, d| {
        let sizes = [0usize, 1, 8, 64, 65, 4096, 4097, 100_000, 4 << 20];
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
        assert_eq!(d[0].netmod().outstanding(), 0, "{p}");
        assert_eq!(d[1].netmod().outstanding(), 0, "{p}");
    });
}

#[test]
fn wildcards_and_the_source_process() {
    each_provider(3, DeviceConfig::default(), |p, d| {
        let (any, buf) = irecv_leaked(&mut d[0], ANY_SOURCE, ANY_TAG, 16);
        isend_owned(&mut d[2], 0, 44, b"from two".to_vec(), SendMode::Standard);
        let st = d.wait(0, any).unwrap();
        assert_eq!(
            (st.source, st.tag, &buf[..8]),
            (2, 44, &b"from two"[..]),
            "{p}"
        );
        // Tags beyond the netmod's match bits are refused before they reach it.
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
fn a_synchronous_send_completes_only_after_the_match() {
    each_provider(2, DeviceConfig::default(), |p, d| {
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

/// A truncated receive completes with the truncation error. libfabric 1.17's `tcp;ofi_rxm`
/// stops delivering on an endpoint that truncated a message (libfabric issue 8274, fixed in
/// 1.18), so the engine then closes the endpoint: later operations fail with the reason rather
/// than hang.
#[test]
fn truncation_is_the_receive_error() {
    each_provider(2, DeviceConfig::default(), |p, d| {
        let (r, _) = irecv_leaked(&mut d[1], 0, 3, 10);
        let s = isend_owned(&mut d[0], 1, 3, pattern(3, 5000), SendMode::Standard);
        let st = d.wait_status(1, r).unwrap();
        assert_eq!(st.error, Some(ErrorKind::Truncate), "{p}");
        d.wait(0, s).unwrap();
        if d[1].netmod().provider().is_none() {
            let w = d[1].world();
            let e = d[1]
                .isend(w, 0, 1, SendBuf::owned(vec![0; 100]), SendMode::Standard)
                .unwrap_err();
            assert!(
                e.to_string().contains("truncated receive wedged"),
                "{p}: {e}"
            );
        }
    });
}

#[test]
fn cancel_is_definite() {
    each_provider(2, DeviceConfig::default(), |p, d| {
        let (r, _) = irecv_leaked(&mut d[1], 0, 1, 16);
        d[1].cancel(r).unwrap();
        let st = d.wait_status(1, r).unwrap();
        assert!(st.cancelled, "{p}");
        assert_eq!(d[1].netmod().outstanding(), 0, "{p}");
        // The message meant for it goes to the next receive.
        isend_owned(&mut d[0], 1, 1, b"after".to_vec(), SendMode::Standard);
        let (r, buf) = irecv_leaked(&mut d[1], 0, 1, 16);
        d.wait(1, r).unwrap();
        assert_eq!(&buf[..5], b"after", "{p}");
    });
}

#[test]
fn probes_and_matched_probes() {
    each_provider(2, DeviceConfig::default(), |p, d| {
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
        // A matched probe's message dropped unreceived: discarded, its sender released.
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
    each_provider(2, config, |p, d| {
        let n = 300;
        let recvs: Vec<_> = (0..n)
            .map(|i| irecv_leaked(&mut d[1], 0, i as i32, 200))
            .collect();
        let (gone, _) = irecv_leaked(&mut d[1], 0, 9999, 64);
        d[1].release(gone); // cancelled in the provider before the request goes
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

#[test]
fn unexpected_messages_match_wildcard_receives() {
    each_provider(2, DeviceConfig::default(), |p, d| {
        for mode in [SendMode::Standard, SendMode::Synchronous] {
            for len in [8usize, 5000] {
                let s = isend_owned(&mut d[1], 0, 5, pattern(len, len), mode);
                for _ in 0..50 {
                    d.step().unwrap();
                }
                let (r, buf) = irecv_leaked(&mut d[0], ANY_SOURCE, ANY_TAG, len);
                let st = d.wait(0, r).unwrap();
                assert_eq!((st.source, st.tag, st.bytes), (1, 5, len), "{p} {mode:?}");
                assert_eq!(&buf[..len], &pattern(len, len)[..], "{p} {mode:?}");
                d.wait(1, s).unwrap();
            }
        }
    });
}

#[test]
fn the_shm_provider_of_libfabric_1_17_is_refused_with_the_reason() {
    match OfiNetmod::open_with(&Hints::for_provider("shm"), 0, 2, true) {
        Ok(net) => {
            // A newer libfabric: accepted, and then it must pass the suite (not checked here).
            eprintln!("note: shm accepted: {:?}", net.provider());
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(
                msg.contains("not available") || msg.contains("wildcard"),
                "{msg}"
            );
        }
    }
}

/// The largest message forced on the provider by the large-message tests: everything longer
/// goes by RMA read.
const FORCED_MAX: usize = 64 * 1024;

/// [`each_provider`] with the provider's largest message forced down to [`FORCED_MAX`].
fn each_provider_limited(ranks: u32, mut body: impl FnMut(&str, &mut Harness<OfiNetmod, NoShm>)) {
    // Each descriptor in its stub, and each in a message of its own.
    for (p, separate_descriptors) in PROVIDERS.iter().flat_map(|p| [(*p, false), (*p, true)]) {
        let hints = Hints {
            max_msg_size: Some(FORCED_MAX),
            separate_descriptors,
            ..Hints::for_provider(p)
        };
        if let Some(mut h) = job_with(&hints, ranks, DeviceConfig::default()) {
            body(p, &mut h);
            h.settle().unwrap();
            for r in 0..h.len() {
                assert_eq!(
                    h[r].netmod().outstanding(),
                    0,
                    "{p}: rank {r} holds operations"
                );
                assert_eq!(
                    h[r].netmod().regions(),
                    0,
                    "{p}: rank {r} holds registrations"
                );
            }
        }
    }
}

#[test]
fn messages_past_the_largest_go_by_rma_read_in_order() {
    each_provider_limited(2, |p, d| {
        // Large and small messages mixed: from one sender they match in the order sent.
        let sizes = [
            FORCED_MAX,
            FORCED_MAX + 1,
            8,
            200_000,
            0,
            3 * FORCED_MAX,
            4 << 20,
            100,
        ];
        let recvs: Vec<_> = sizes
            .iter()
            .map(|&n| irecv_leaked(&mut d[1], 0, 4, n + 10))
            .collect();
        for mode in [SendMode::Standard, SendMode::Synchronous] {
            let sends: Vec<_> = sizes
                .iter()
                .enumerate()
                .map(|(i, &n)| isend_owned(&mut d[0], 1, 4, pattern(i, n), mode))
                .collect();
            if mode == SendMode::Standard {
                for (i, ((h, buf), &n)) in recvs.iter().zip(&sizes).enumerate() {
                    let st = d.wait(1, *h).unwrap();
                    assert_eq!((st.source, st.tag, st.bytes), (0, 4, n), "{p}: message {i}");
                    assert_eq!(&buf[..n], &pattern(i, n)[..], "{p}: message {i}'s bytes");
                }
            } else {
                // Unexpected this time: the stubs wait in the provider for their receives.
                for _ in 0..100 {
                    d.step().unwrap();
                }
                for (i, &n) in sizes.iter().enumerate() {
                    let (h, buf) = irecv_leaked(&mut d[1], ANY_SOURCE, ANY_TAG, n);
                    let st = d.wait(1, h).unwrap();
                    assert_eq!((st.source, st.tag, st.bytes), (0, 4, n), "{p}: ssend {i}");
                    assert_eq!(&buf[..n], &pattern(i, n)[..], "{p}: ssend {i}'s bytes");
                }
            }
            for s in sends {
                d.wait(0, s).unwrap();
            }
        }
    });
}

#[test]
fn a_large_send_completes_only_once_its_data_is_read() {
    each_provider_limited(2, |p, d| {
        let n = 1 << 20;
        let s = isend_owned(&mut d[0], 1, 6, pattern(6, n), SendMode::Standard);
        for _ in 0..100 {
            d.step().unwrap();
        }
        assert!(!d[0].is_done(s).unwrap(), "{p}: large send done unread");
        assert_eq!(d[0].netmod().regions(), 1, "{p}: its buffer is lent");
        let (r, buf) = irecv_leaked(&mut d[1], 0, 6, n);
        d.wait(1, r).unwrap();
        d.wait(0, s).unwrap();
        assert_eq!(&buf[..n], &pattern(6, n)[..], "{p}");
    });
}

#[test]
fn a_large_message_truncates_into_a_short_buffer() {
    each_provider_limited(2, |p, d| {
        let n = 1 << 20;
        for cap in [0usize, 10, 100_000] {
            let (r, buf) = irecv_leaked(&mut d[1], 0, 2, cap);
            let s = isend_owned(&mut d[0], 1, 2, pattern(2, n), SendMode::Standard);
            let st = d.wait_status(1, r).unwrap();
            assert_eq!(st.error, Some(ErrorKind::Truncate), "{p}: {cap}");
            assert_eq!(st.bytes, cap, "{p}: the buffer's worth is delivered");
            assert_eq!(&buf[..cap], &pattern(2, n)[..cap], "{p}: {cap}");
            d.wait(0, s).unwrap();
        }
        // The endpoint still works.
        let (r, buf) = irecv_leaked(&mut d[1], 0, 3, 300_000);
        let s = isend_owned(&mut d[0], 1, 3, pattern(3, 300_000), SendMode::Standard);
        assert_eq!(d.wait(1, r).unwrap().bytes, 300_000, "{p}");
        assert_eq!(&buf[..], &pattern(3, 300_000)[..], "{p}");
        d.wait(0, s).unwrap();
    });
}

#[test]
fn probes_see_a_large_message_whole() {
    each_provider_limited(2, |p, d| {
        let w = d[1].world();
        let n = 500_000;
        let s = isend_owned(&mut d[0], 1, 7, pattern(7, n), SendMode::Standard);
        let st = loop {
            if let Some(st) = d[1].iprobe(w, 0, 7).unwrap() {
                break st;
            }
            d.step().unwrap();
        };
        assert_eq!((st.source, st.tag, st.bytes), (0, 7, n), "{p}: iprobe");
        assert_eq!(
            d[1].iprobe(w, ANY_SOURCE, ANY_TAG)
                .unwrap()
                .map(|s| s.bytes),
            Some(n)
        );
        let (msg, st) = d[1].improbe(w, ANY_SOURCE, 7).unwrap().expect("probed");
        assert_eq!(st.bytes, n, "{p}: improbe");
        // Not the blocking mrecv: the read needs the sender's progress, and one thread steps
        // both here.
        let buf = testkit::leaked_buffer(n);
        let ptr: *mut [u8] = buf;
        // SAFETY: leaked, so it outlives the request; read only after it completed.
        let r = d[1]
            .imrecv(msg, unsafe { RecvBuf::borrowed(&mut *ptr) })
            .unwrap();
        assert_eq!(d.wait(1, r).unwrap().bytes, n, "{p}: imrecv");
        // SAFETY: the request completed: the device no longer writes the buffer.
        assert_eq!(unsafe { &*ptr }, &pattern(7, n)[..], "{p}: imrecv's bytes");
        d.wait(0, s).unwrap();
        // Dropped unreceived: its sender is let go, its region closed.
        let s = isend_owned(&mut d[0], 1, 8, pattern(8, n), SendMode::Standard);
        let msg = loop {
            if let Some((m, st)) = d[1].improbe(w, 0, 8).unwrap() {
                assert_eq!(st.bytes, n, "{p}");
                break m;
            }
            d.step().unwrap();
        };
        d[1].discard_message(msg).unwrap();
        d.wait(0, s).unwrap();
        assert!(d[1].iprobe(w, 0, 8).unwrap().is_none(), "{p}: discarded");
    });
}

#[test]
fn a_cancel_after_a_large_message_matched_answers_matched() {
    each_provider_limited(2, |p, d| {
        let n = 2 << 20;
        let (r, buf) = irecv_leaked(&mut d[1], 0, 9, n);
        let s = isend_owned(&mut d[0], 1, 9, pattern(9, n), SendMode::Standard);
        // Until the stub is in the receive answers "cancelled"; after, "matched": either is
        // right, and the data must then be whole.
        for _ in 0..20 {
            d.step().unwrap();
        }
        d[1].cancel(r).unwrap();
        let st = d.wait_status(1, r).unwrap();
        if st.cancelled {
            let (r2, buf2) = irecv_leaked(&mut d[1], 0, 9, n);
            d.wait(1, r2).unwrap();
            assert_eq!(&buf2[..n], &pattern(9, n)[..], "{p}");
        } else {
            assert_eq!(st.bytes, n, "{p}");
            assert_eq!(&buf[..n], &pattern(9, n)[..], "{p}");
        }
        d.wait(0, s).unwrap();
    });
}

#[test]
fn a_bad_forced_limit_is_refused() {
    std::env::set_var(netmod_ofi::provider::MAX_MSG_SIZE_VAR, "12");
    let e = Hints::from_env().unwrap_err();
    std::env::remove_var(netmod_ofi::provider::MAX_MSG_SIZE_VAR);
    assert_eq!(e.kind(), ErrorKind::Arg);
    assert!(e.to_string().contains("CH4_OFI_MAX_MSG_SIZE"), "{e}");
}

/// Eager credit: the first small sends within the receiver's credit are injected (done at
/// once); the next ones go whole as synchronous sends, which stay incomplete until a receive
/// has taken them, and a longer one leaves its data with the sender for the receiver to read.
/// Once the receiver has taken them, the credit of the credited ones is back and small sends
/// are injected again. (A credit this small charges a sixteenth of it per message, not a
/// provider buffer's 16 KiB, so a blocking send still finds room.)
#[test]
fn beyond_its_credit_a_sender_waits_for_the_match() {
    let credit = 4096;
    let config = DeviceConfig {
        eager_credit: credit,
        ..DeviceConfig::default()
    };
    let room = credit / (credit / 16 + ch4_core::core::CREDIT_OVERHEAD);
    assert!(room >= 8 && credit / 16 < netmod_ofi::credit::MESSAGE_CHARGE);
    each_provider(2, config, |p, d| {
        let n = 2 * room as i32 + 3;
        let mut sends: Vec<_> = (0..n)
            .map(|i| isend_owned(&mut d[0], 1, i, pattern(i as usize, 8), SendMode::Standard))
            .collect();
        let injected = sends.iter().filter(|h| **h == ReqHandle::DONE).count();
        assert_eq!(injected, room, "{p}: sends injected within the credit");
        assert_eq!(
            d[0].netmod().sends_without_credit(),
            (n as usize - room) as u64,
            "{p}: the others go whole, without credit"
        );
        assert_eq!(d[0].netmod().regions(), 0, "{p}: no buffer lent for a read");
        let long = 20 << 10;
        let big = isend_owned(&mut d[0], 1, n, pattern(7, long), SendMode::Standard);
        assert_eq!(d[0].netmod().regions(), 1, "{p}: a longer one is read");
        for _ in 0..100 {
            d.step().unwrap();
        }
        for (i, h) in sends.iter_mut().enumerate().skip(room) {
            assert!(
                d[0].test(*h).unwrap().is_none(),
                "{p}: send {i}, without credit, completed before any receive"
            );
        }
        for i in 0..n {
            let (r, buf) = irecv_leaked(&mut d[1], 0, i, 8);
            let st = d.wait(1, r).unwrap();
            assert_eq!((st.tag, st.bytes), (i, 8), "{p}");
            assert_eq!(&buf[..8], &pattern(i as usize, 8)[..], "{p}: message {i}");
        }
        let (r, buf) = irecv_leaked(&mut d[1], 0, n, long);
        assert_eq!(d.wait(1, r).unwrap().bytes, long, "{p}");
        assert_eq!(&buf[..long], &pattern(7, long)[..], "{p}: the long one");
        for h in sends.into_iter().chain([big]) {
            d.wait(0, h).unwrap();
        }
        for _ in 0..100 {
            d.step().unwrap();
        }
        // Given back a quarter of the credit at a time: at least half of it is back.
        for i in 0..room as i32 / 2 {
            let again = isend_owned(&mut d[0], 1, 100 + i, vec![1; 8], SendMode::Standard);
            assert_eq!(
                again,
                ReqHandle::DONE,
                "{p}: the credit came back (message {i})"
            );
        }
        for i in 0..room as i32 / 2 {
            let (r, _) = irecv_leaked(&mut d[1], 0, 100 + i, 8);
            d.wait(1, r).unwrap();
        }
        assert_eq!(d[0].netmod().outstanding(), 0, "{p}");
        assert_eq!(d[1].netmod().outstanding(), 0, "{p}");
    });
}

/// Tells `d` that process `dead` failed, as the launcher's watch would, and tests `h` until
/// it completes: its status, and how long that took.
fn fail_peer_and_test(
    d: &mut Dev,
    dead: u32,
    h: ReqHandle,
    what: &str,
) -> (ch4_core::Status, Duration) {
    d.netmod_mut().watch_peers(Arc::new(move |g| {
        if g == dead {
            PeerState::Failed
        } else {
            PeerState::Alive
        }
    }));
    let start = Instant::now();
    loop {
        if let Some(st) = d.test_status(h).unwrap() {
            return (st, start.elapsed());
        }
        assert!(start.elapsed().as_secs() < 20, "{what} hung");
    }
}

/// A message whose sender's endpoint closed (the process died) while the message waited
/// unexpected: its receive fails with `PeerFailed` at once, and the rank goes on with its other
/// peers. libfabric's rxm frees a connection when its peer shuts it down but keeps the
/// request-to-send of the peer's rendezvous messages in its unexpected queue; a receive matching
/// one then reads through the freed connection and the process dies of a segmentation fault
/// (`rxm_process_shutdown`, `rxm_handle_rndv`). So the engine must not leave messages longer
/// than rxm's eager buffers to rxm's rendezvous, and the failed receive must not wait for
/// reads the dead peer will never answer.
#[test]
fn a_message_whose_sender_died_unexpected_fails_its_receive() {
    for p in PROVIDERS {
        let Some(h) = job(p, 3, DeviceConfig::default()) else {
            continue;
        };
        let mut devs = h.into_devices();
        // Above rxm's eager limit (its buffer size), within the eager credit.
        let n = 4 * netmod_ofi::provider::rxm_eager_limit();
        isend_owned(&mut devs[0], 1, 7, pattern(7, n), SendMode::Standard);
        isend_owned(&mut devs[0], 1, 8, b"last".to_vec(), SendMode::Standard);
        // The small message follows the large one's header on the ordered endpoint: once it is
        // there, so is the header.
        let w = devs[1].world();
        let start = Instant::now();
        while devs[1].iprobe(w, 0, 8).unwrap().is_none() {
            devs[0].progress().unwrap();
            assert!(
                start.elapsed().as_secs() < 20,
                "{p}: the messages never came"
            );
        }
        drop(devs.remove(0)); // closes its endpoint, as a process's death does
        let mut d = Harness::new(devs);
        // Let the provider see the connection shut down.
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(300) {
            d.step().unwrap();
        }
        // The small message it sent last is still delivered.
        let (r, buf) = irecv_leaked(&mut d[0], 0, 8, 4);
        assert_eq!(d.wait(0, r).unwrap().bytes, 4, "{p}");
        assert_eq!(buf, b"last", "{p}");
        let (r, _) = irecv_leaked(&mut d[0], 0, 7, n);
        let (st, took) = fail_peer_and_test(&mut d[0], 0, r, "the receive");
        assert_eq!(st.error, Some(ErrorKind::PeerFailed), "{p}: {st:?}");
        assert!(
            took < Duration::from_secs(2),
            "{p}: the receive failed only after {took:?}"
        );
        assert_eq!(d[0].netmod().outstanding(), 0, "{p}");
        // The endpoint still carries the other peers' messages, short and long.
        for len in [8, n, 1 << 20] {
            let (r, buf) = irecv_leaked(&mut d[0], 2, 9, len);
            let s = isend_owned(&mut d[1], 1, 9, pattern(9, len), SendMode::Standard);
            d.wait(0, r).unwrap();
            d.wait(1, s).unwrap();
            assert_eq!(
                &buf[..],
                &pattern(9, len)[..],
                "{p}: {len} bytes from rank 2"
            );
        }
    }
}

/// A receive shorter than a large message's stub lands in a bounce buffer of the stub's size
/// (the stub carries what its read needs): a message that fits the bounce buffer but not the
/// receive is reported truncated with the receive's worth delivered, as the provider would.
#[test]
fn receives_shorter_than_a_stub_still_truncate() {
    each_provider(2, DeviceConfig::default(), |p, d| {
        for (cap, len) in [
            (0, 0),
            (0, 1),
            (10, 20),
            (10, 31),
            (31, 32),
            (16, 16),
            (31, 31),
            (10, 40),
        ] {
            let (r, buf) = irecv_leaked(&mut d[1], 0, 4, cap);
            let s = isend_owned(&mut d[0], 1, 4, pattern(4, len), SendMode::Standard);
            let st = d.wait_status(1, r).unwrap();
            let what = format!("{p}: {len} bytes into {cap}");
            if len > cap {
                assert_eq!(st.error, Some(ErrorKind::Truncate), "{what}");
            } else {
                assert_eq!((st.error, st.bytes), (None, len), "{what}");
            }
            if len <= 32 {
                assert_eq!(st.bytes, len.min(cap), "{what}");
            }
            assert_eq!(&buf[..st.bytes], &pattern(4, len)[..st.bytes], "{what}");
            d.wait(0, s).unwrap();
        }
    });
}

/// A large send whose receiver died before reading it fails with `PeerFailed` at once, and the
/// rank goes on with its other peers: the acknowledgement it waits for will never come, so its
/// receive for it is cancelled rather than waited for until the cancel limit closes the
/// endpoint.
#[test]
fn a_large_send_to_a_receiver_that_died_fails() {
    for p in PROVIDERS {
        let Some(h) = job(p, 3, DeviceConfig::default()) else {
            continue;
        };
        let mut devs = h.into_devices();
        let n = 4 * netmod_ofi::provider::rxm_eager_limit();
        let s = isend_owned(&mut devs[0], 1, 7, pattern(7, n), SendMode::Standard);
        let w = devs[1].world();
        let start = Instant::now();
        while devs[1].iprobe(w, 0, 7).unwrap().is_none() {
            devs[0].progress().unwrap();
            assert!(start.elapsed().as_secs() < 20, "{p}: the stub never came");
        }
        drop(devs.remove(1)); // the receiver dies with the stub unread
        let mut d = Harness::new(devs);
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(300) {
            d.step().unwrap();
        }
        let (st, took) = fail_peer_and_test(&mut d[0], 1, s, "the send");
        assert_eq!(st.error, Some(ErrorKind::PeerFailed), "{p}: {st:?}");
        assert!(
            took < Duration::from_secs(2),
            "{p}: the send failed only after {took:?}"
        );
        assert!(d[0].netmod().provider().is_some(), "{p}: endpoint closed");
        // A small send to the dead rank (rxm keeps trying to connect, so it waits in the
        // netmod's queue) holds up nothing behind it: rank 0 still reaches rank 2, with small
        // and large messages alike.
        let w = d[0].world();
        let _ = d[0].isend(
            w,
            1,
            10,
            SendBuf::owned(b"lost".to_vec()),
            SendMode::Standard,
        );
        for len in [8, n] {
            let (r, buf) = irecv_leaked(&mut d[1], 0, 9, len);
            let s = isend_owned(&mut d[0], 2, 9, pattern(9, len), SendMode::Standard);
            d.wait(1, r).unwrap();
            d.wait(0, s).unwrap();
            assert_eq!(&buf[..], &pattern(9, len)[..], "{p}: {len} bytes to rank 2");
        }
    }
}

/// A large receive whose read fails because its sender died waits for the peer watch and
/// fails with `PeerFailed`, as over the other netmods; if the watch never says so, it fails
/// with the read's own error after a bounded wait.
#[test]
fn a_read_cut_off_by_its_senders_death_fails_with_peer_failed() {
    for p in PROVIDERS {
        for watch_tells in [true, false] {
            let Some(h) = job(p, 2, DeviceConfig::default()) else {
                continue;
            };
            let mut devs = h.into_devices();
            let n = 4 << 20;
            isend_owned(&mut devs[0], 1, 7, pattern(7, n), SendMode::Standard);
            let (r, _) = irecv_leaked(&mut devs[1], 0, 7, n);
            // Only the receiver steps: its read goes out, and the sender, never stepping
            // again, does not answer it.
            let start = Instant::now();
            while start.elapsed() < Duration::from_millis(200) {
                devs[0].progress().unwrap_or(0);
                devs[1].progress().unwrap();
                if devs[1].netmod().outstanding() > 1 {
                    break; // the stub matched: a read is posted
                }
            }
            drop(devs.remove(0));
            let mut d = devs.remove(0);
            let dead = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let seen = dead.clone();
            d.netmod_mut().watch_peers(Arc::new(move |g| {
                if g == 0 && seen.load(std::sync::atomic::Ordering::Relaxed) {
                    PeerState::Failed
                } else {
                    PeerState::Alive
                }
            }));
            let start = Instant::now();
            let st = loop {
                if watch_tells && start.elapsed() > Duration::from_millis(100) {
                    dead.store(true, std::sync::atomic::Ordering::Relaxed);
                }
                if let Some(st) = d.test_status(r).unwrap() {
                    break st;
                }
                assert!(start.elapsed().as_secs() < 20, "{p}: the receive hung");
            };
            let took = start.elapsed();
            if watch_tells {
                assert_eq!(st.error, Some(ErrorKind::PeerFailed), "{p}: {st:?}");
                assert!(
                    took >= Duration::from_millis(100),
                    "{p}: failed before the watch said so"
                );
            } else {
                assert!(
                    st.error.is_some() && st.error != Some(ErrorKind::PeerFailed),
                    "{p}: {st:?}"
                );
                assert!(took < Duration::from_secs(5), "{p}: took {took:?}");
            }
            assert!(d.netmod().provider().is_some(), "{p}: endpoint closed");
        }
    }
}

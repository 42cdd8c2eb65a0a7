//! The harness and the job constructors: every transport's job passes messages through the
//! same helpers, the helpers keep their promises (statuses as values, nothing left behind), and
//! a wait that cannot end fails with what it waited for.

use std::time::Duration;

use ch4_core::buffer::{RecvBuf, SendBuf};
use ch4_core::core::DeviceConfig;
use ch4_core::transport::{AmTransport, Netmod};
use ch4_core::{ErrorKind, Shm};
use inproc::{AmOnly, FabricConfig, Native};
use shm::Geometry;
use testkit::{inproc_job, pipe_job, pipe_pair, shm_job, tcp_job, Harness, Limit, Pipe, Shuffled};

/// Passes a message around the ring of all ranks, then moves one of 0..=300 bytes from every
/// rank to the next with [`Harness::transfer`]: eager, rendezvous and several pieces on every
/// transport's small thresholds.
fn exercise<N: Netmod, S: Shm>(h: &mut Harness<N, S>) {
    let n = h.len();
    for from in 0..n {
        let st = h.pass(from, (from + 1) % n, 3, b"ring").unwrap();
        assert_eq!((st.source, st.bytes), (from as i32, 4));
    }
    for (from, len) in (0..n).zip([0, 20, 300, 150]) {
        let to = (from + 1) % n;
        let msg: Vec<u8> = (0..len).map(|i| i as u8).collect();
        let t = h
            .transfer(from, to, 4, SendBuf::owned(msg), RecvBuf::owned(len))
            .unwrap();
        assert_eq!((t.send.error, t.recv.error), (None, None));
        assert_eq!(
            (t.recv.source, t.recv.tag, t.recv.bytes),
            (from as i32, 4, len)
        );
    }
    for (i, d) in h.devices().iter().enumerate() {
        assert_eq!(d.gpid() as usize, i, "devices are indexed by process id");
        assert_eq!(d.live_requests(), 0, "a helper left a request behind");
    }
}

#[test]
fn every_constructor_gives_a_job_the_helpers_drive() {
    exercise(&mut pipe_pair(DeviceConfig::default()).unwrap().1);
    let (_, mut wide) = pipe_job(3, DeviceConfig::default(), |p| p.with_limits(256, 64)).unwrap();
    assert_eq!(wide[0].netmod().eager_limit(), 256);
    exercise(&mut wide);
    exercise(
        &mut pipe_job(2, DeviceConfig::default(), |p| Shuffled::new(p, 3))
            .unwrap()
            .1,
    );
    exercise(&mut tcp_job(3, 99, DeviceConfig::default(), |_, _| {}).unwrap());
    let fabric = FabricConfig {
        ranks: 4,
        ranks_per_node: 2,
        eager_limit: 64,
        max_payload: 100,
    };
    exercise(
        &mut inproc_job::<AmOnly>(fabric, DeviceConfig::default())
            .unwrap()
            .1,
    );
    exercise(
        &mut inproc_job::<Native>(fabric, DeviceConfig::default())
            .unwrap()
            .1,
    );
    let (seg, mut h) =
        shm_job(3, Geometry::with_ring(1 << 12), 64, DeviceConfig::default()).unwrap();
    assert_eq!(seg.ranks(), 3);
    exercise(&mut h);
}

#[test]
fn transfer_reports_a_truncation_as_a_status() {
    let (_, mut h) = pipe_pair(DeviceConfig::default()).unwrap();
    let t = h
        .transfer(0, 1, 1, SendBuf::owned(vec![7; 100]), RecvBuf::owned(10))
        .unwrap();
    assert_eq!(t.send.error, None);
    assert_eq!(
        (t.recv.error, t.recv.bytes),
        (Some(ErrorKind::Truncate), 10)
    );
    assert_eq!((h[0].live_requests(), h[1].live_requests()), (0, 0));
}

#[test]
fn pair_mut_gives_the_devices_in_the_order_asked() {
    let (_, mut h) = pipe_job(3, DeviceConfig::default(), |p| p).unwrap();
    let (a, b) = h.pair_mut(2, 0);
    assert_eq!((a.gpid(), b.gpid()), (2, 0));
    let (a, b) = h.pair_mut(1, 2);
    assert_eq!((a.gpid(), b.gpid()), (1, 2));
    let devs = h.into_devices();
    assert_eq!(devs.len(), 3);
}

#[test]
fn settle_steps_until_a_round_is_idle() {
    let (wire, mut h) = pipe_pair(DeviceConfig::default()).unwrap();
    let w = h[0].world();
    let s = h[0]
        .isend(
            w,
            1,
            2,
            SendBuf::owned(vec![1; 200]),
            ch4_core::SendMode::Standard,
        )
        .unwrap();
    let r = h[1].irecv(w, 0, 2, RecvBuf::owned(200)).unwrap();
    let steps = h.settle().unwrap();
    assert!(steps > 1);
    assert!(h[0].is_done(s).unwrap() && h[1].is_done(r).unwrap());
    assert_eq!((wire.pending(0), wire.pending(1)), (0, 0));
    assert_eq!(h.settle().unwrap(), 1, "already idle: one round to see it");
}

#[test]
fn steps_until_counts_rounds_and_drive_until_returns_the_steps_taken() {
    let (_, mut h) = pipe_pair(DeviceConfig::default()).unwrap();
    let mut rounds = 0;
    assert!(!h
        .steps_until(10, |_| {
            rounds += 1;
            Ok(false)
        })
        .unwrap());
    assert_eq!(
        rounds, 11,
        "checked before every step and once after the last"
    );
    let mut left = 3;
    let steps = h
        .drive_until("three rounds", |_| {
            left -= 1;
            Ok(left == 0)
        })
        .unwrap();
    assert_eq!(steps, 2);
}

#[test]
#[should_panic(expected = "gave up waiting for the impossible after 25 steps")]
fn a_wait_past_its_step_limit_fails_naming_what_it_awaited() {
    let (_, h) = pipe_pair(DeviceConfig::default()).unwrap();
    let mut h = h.with_limit(Limit::steps(25));
    let _ = h.drive_until("the impossible", |_| Ok(false));
}

#[test]
#[should_panic(expected = "gave up waiting for every device to go idle")]
fn a_wait_past_its_time_limit_fails_too() {
    // A job that never goes idle: a wrapper holding a message it will not deliver for ages
    // reports work at every poll, so `settle` can only stop at its time limit.
    let (_, h) = pipe_job(2, DeviceConfig::default(), |p| {
        testkit::Faulty::<_>::with_config(
            p,
            0,
            testkit::FaultConfig::NONE.with_delay(100, u64::MAX / 2),
        )
    })
    .unwrap();
    let mut h = h.with_limit(Limit::time(Duration::from_millis(50)));
    let w = h[0].world();
    h[0].send(w, 1, 1, b"held", ch4_core::SendMode::Standard)
        .unwrap();
    let _ = h.settle();
}

#[test]
fn build_stops_at_the_first_transport_that_fails() {
    let err = Harness::<Pipe, ch4_core::NoShm>::build(2, DeviceConfig::default(), |me| {
        if me == 1 {
            Err(ch4_core::Error::new(
                ErrorKind::Arg,
                "no transport for rank 1",
            ))
        } else {
            Ok((testkit::Wire::new(2).endpoint(me), ch4_core::NoShm))
        }
    })
    .err()
    .expect("the error of rank 1's transport");
    assert_eq!(err.kind(), ErrorKind::Arg);
}

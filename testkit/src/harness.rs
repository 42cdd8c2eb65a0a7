//! N devices stepped from one thread, with every wait bounded.
//!
//! After quinn-proto's `Pair` (`src/tests/util.rs`): the test owns every endpoint and nothing
//! runs unless it steps them — `step()` drives each once, `drive()` steps until a condition
//! holds — so a scenario replays exactly, and an interleaving can be forced by stepping one
//! device alone. Unlike `Pair::drive`, every wait here has a [`Limit`]: a request that never
//! completes fails the test with a message naming what was awaited, instead of hanging CI.
//!
//! The harness is generic over the netmod and the shm layer, so one set of helpers serves the
//! in-memory [`crate::Pipe`], TCP over loopback, the in-process fabric and shared memory alike
//! — including a crate's own unit tests, which compile a second copy of the crate and so cannot
//! use the kit's constructors that name its types, but can hand their devices to
//! [`Harness::new`] or [`Harness::build`].

use std::ops::{Index, IndexMut};
use std::time::{Duration, Instant};

use ch4_core::buffer::{RecvBuf, SendBuf};
use ch4_core::core::DeviceConfig;
use ch4_core::device::status_result;
use ch4_core::transport::{Netmod, Shm};
use ch4_core::{Device, Error, ErrorKind, Gpid, Rank, ReqHandle, Result, SendMode, Status, Tag};

/// How long a harness waits before it declares a hang: whichever of the two bounds comes
/// first. Steps make a deterministic (in-memory) hang fail the same way every run; time bounds
/// transports whose progress depends on the kernel (sockets), where a step count means little.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    /// The most steps one wait may take.
    pub steps: u64,
    /// The most wall time one wait may take.
    pub time: Duration,
}

impl Limit {
    /// The default: a million steps (well beyond any test's needs, about a second of a hung
    /// in-memory pair) or a minute.
    pub const DEFAULT: Limit = Limit {
        steps: 1_000_000,
        time: Duration::from_secs(60),
    };

    /// At most `steps` steps, however long they take: for asserting that something happens
    /// within a number of progress rounds.
    pub const fn steps(steps: u64) -> Limit {
        Limit {
            steps,
            time: Duration::MAX,
        }
    }

    /// At most `time`, however many steps: for transports driven by the kernel.
    pub const fn time(time: Duration) -> Limit {
        Limit {
            steps: u64::MAX,
            time,
        }
    }
}

impl Default for Limit {
    fn default() -> Limit {
        Limit::DEFAULT
    }
}

/// Counts the steps of one wait against its limit.
struct Bound {
    start: Instant,
    steps: u64,
    limit: Limit,
}

impl Bound {
    fn new(limit: Limit) -> Bound {
        Bound {
            start: Instant::now(),
            steps: 0,
            limit,
        }
    }

    /// Allows one more step, or fails the test naming what it waited for.
    #[track_caller]
    fn step(&mut self, what: &dyn Fn() -> String) {
        let elapsed = self.start.elapsed();
        if self.steps >= self.limit.steps || elapsed >= self.limit.time {
            panic!(
                "harness: gave up waiting for {} after {} steps and {elapsed:.1?} ({:?})",
                what(),
                self.steps,
                self.limit
            );
        }
        self.steps += 1;
    }
}

/// The outcome of [`Harness::transfer`]: both statuses, errors as values (`status.error`), so
/// a test can assert on a truncation as easily as on a success.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transfer {
    /// The send's status.
    pub send: Status,
    /// The receive's status.
    pub recv: Status,
}

/// N devices of one job, stepped from the calling thread; see the module documentation.
/// Devices are indexed by their process id (`h[0]`, `h[1]`, ...).
pub struct Harness<N: Netmod, S: Shm> {
    devs: Vec<Device<N, S>>,
    limit: Limit,
    /// The events each device's latest progress call handled in the current wait; `None`
    /// before the wait stepped it (a request may be failed for a gone peer only after its
    /// device found nothing to do).
    events: Vec<Option<usize>>,
}

impl<N: Netmod, S: Shm> Harness<N, S> {
    /// A harness over devices already built; `devs[i]` should be process `i`.
    pub fn new(devs: Vec<Device<N, S>>) -> Self {
        let events = vec![None; devs.len()];
        Harness {
            devs,
            limit: Limit::DEFAULT,
            events,
        }
    }

    /// Builds a job of `ranks` devices: `make(gpid)` gives process `gpid`'s transports. The
    /// one place the kit calls `Device::new`, so every constructor numbers ranks alike.
    pub fn build(
        ranks: u32,
        config: DeviceConfig,
        mut make: impl FnMut(Gpid) -> Result<(N, S)>,
    ) -> Result<Self> {
        let devs = (0..ranks)
            .map(|gpid| {
                let (net, shm) = make(gpid)?;
                Device::new(net, shm, gpid, ranks, config)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Harness::new(devs))
    }

    /// The same harness with another [`Limit`] on every wait.
    pub fn with_limit(mut self, limit: Limit) -> Self {
        self.limit = limit;
        self
    }

    /// Changes the [`Limit`] of the waits that follow (a test that asserts "within 100
    /// rounds" sets `Limit::steps(100)` around that wait).
    pub fn set_limit(&mut self, limit: Limit) {
        self.limit = limit;
    }

    /// The limit in force.
    pub fn limit(&self) -> Limit {
        self.limit
    }

    /// How many devices.
    pub fn len(&self) -> usize {
        self.devs.len()
    }

    /// Whether there are no devices.
    pub fn is_empty(&self) -> bool {
        self.devs.is_empty()
    }

    /// The devices, to pass around as a slice.
    pub fn devices(&self) -> &[Device<N, S>] {
        &self.devs
    }

    /// The devices, mutably.
    pub fn devices_mut(&mut self) -> &mut [Device<N, S>] {
        &mut self.devs
    }

    /// Devices `i` and `j` at once (a sender and a receiver). Panics if `i == j`.
    pub fn pair_mut(&mut self, i: usize, j: usize) -> (&mut Device<N, S>, &mut Device<N, S>) {
        assert_ne!(i, j, "pair_mut needs two different devices");
        let (lo, hi) = (i.min(j), i.max(j));
        let (head, tail) = self.devs.split_at_mut(hi);
        let (a, b) = (&mut head[lo], &mut tail[0]);
        if i < j {
            (a, b)
        } else {
            (b, a)
        }
    }

    /// Gives the devices back, for a test that drops one (a peer that dies) or moves them.
    pub fn into_devices(self) -> Vec<Device<N, S>> {
        self.devs
    }

    /// The two devices of a pair. Panics if the harness does not hold exactly two.
    pub fn into_pair(self) -> (Device<N, S>, Device<N, S>) {
        let n = self.devs.len();
        let Ok([a, b]) = <[Device<N, S>; 2]>::try_from(self.devs) else {
            panic!("into_pair on a harness of {n} devices");
        };
        (a, b)
    }

    // ------------------------------------------------------------------ stepping

    /// One progress call on every device, in index order; returns the events handled in all
    /// (0: the whole job is idle). The first error stops the round and is returned.
    pub fn step(&mut self) -> Result<usize> {
        let mut total = 0;
        for (dev, events) in self.devs.iter_mut().zip(self.events.iter_mut()) {
            let n = dev.progress()?;
            *events = Some(n);
            total += n;
        }
        Ok(total)
    }

    /// Steps until `cond` holds, checking before every step, for at most `max_steps` steps;
    /// returns whether it held. Never panics on the bound: for asserting that something does
    /// *not* happen (a dropped message stays missing), or happens within a given number of
    /// rounds with the test's own message.
    pub fn steps_until(
        &mut self,
        max_steps: u64,
        mut cond: impl FnMut(&mut [Device<N, S>]) -> Result<bool>,
    ) -> Result<bool> {
        for _ in 0..max_steps {
            if cond(&mut self.devs)? {
                return Ok(true);
            }
            self.step()?;
        }
        cond(&mut self.devs)
    }

    /// Steps until `cond` holds, checking before every step; returns the steps taken. Past the
    /// [`Limit`] the test fails with a message naming `what` was awaited.
    #[track_caller]
    pub fn drive_until(
        &mut self,
        what: &str,
        mut cond: impl FnMut(&mut [Device<N, S>]) -> Result<bool>,
    ) -> Result<u64> {
        self.drive(&|| what.to_string(), |h| cond(&mut h.devs))
    }

    /// Steps until a whole round handles no event (quinn-proto's `Pair::drive`); returns the
    /// steps taken, the idle one included. Bounded like every wait.
    #[track_caller]
    pub fn settle(&mut self) -> Result<u64> {
        let mut bound = Bound::new(self.limit);
        loop {
            bound.step(&|| "every device to go idle".to_string());
            if self.step()? == 0 {
                return Ok(bound.steps);
            }
        }
    }

    /// Steps until every `(device, request)` in `reqs` has completed, without freeing them
    /// (the test then takes each with `Device::wait` or `wait_status`, which return at once).
    /// A request whose peer is gone is failed with `PeerFailed` as `Device::test` would: only
    /// once its device's progress found nothing to do. Returns the steps taken.
    #[track_caller]
    pub fn drive_until_done(&mut self, reqs: &[(usize, ReqHandle)]) -> Result<u64> {
        self.drive(
            &|| format!("requests {reqs:?} (device, handle) to complete"),
            |h| {
                let mut all = true;
                for &(i, req) in reqs {
                    let dev = &mut h.devs[i];
                    if dev.is_done(req)? {
                        continue;
                    }
                    if h.events[i] == Some(0) && dev.fail_if_peer_gone(req) {
                        continue;
                    }
                    all = false;
                }
                Ok(all)
            },
        )
    }

    /// Steps until request `req` of device `dev` completes, frees it and returns its status;
    /// an error status comes back as that error (like `Device::wait`).
    #[track_caller]
    pub fn wait(&mut self, dev: usize, req: ReqHandle) -> Result<Status> {
        status_result(self.wait_status(dev, req)?)
    }

    /// Like [`Harness::wait`], but an error status is returned as a value in `status.error`
    /// (like `Device::wait_status`).
    #[track_caller]
    pub fn wait_status(&mut self, dev: usize, req: ReqHandle) -> Result<Status> {
        self.drive_until_done(&[(dev, req)])?;
        self.devs[dev].wait_status(req)
    }

    /// The loop every point-to-point test writes: a standard-mode `isend` on device `from`,
    /// then an `irecv` of the same tag on device `to` (both on the world communicator), stepped
    /// until both complete; returns both statuses. Neither call polls the receiver, so the
    /// posting order does not change what happens.
    ///
    /// Neither request is left behind: both are completed, or released when posting or a step
    /// returns an error, before this returns — so buffers borrowed for `send` and `recv` need
    /// only outlive this call (the `SAFETY` argument of a caller's `SendBuf::borrowed`). A wait
    /// past the [`Limit`] panics, failing the test, with the requests still posted.
    #[track_caller]
    pub fn transfer(
        &mut self,
        from: usize,
        to: usize,
        tag: Tag,
        send: SendBuf,
        recv: RecvBuf,
    ) -> Result<Transfer> {
        let (src, dest) = (self.world_rank(from)?, self.world_rank(to)?);
        let comm = self.devs[from].world();
        let s = self.devs[from].isend(comm, dest, tag, send, SendMode::Standard)?;
        let comm = self.devs[to].world();
        let r = match self.devs[to].irecv(comm, src, tag, recv) {
            Ok(r) => r,
            Err(e) => {
                self.devs[from].release(s);
                return Err(e);
            }
        };
        if let Err(e) = self.drive_until_done(&[(from, s), (to, r)]) {
            self.devs[from].release(s);
            self.devs[to].release(r);
            return Err(e);
        }
        let recv = self.devs[to].wait_status(r)?;
        let send = self.devs[from].wait_status(s)?;
        Ok(Transfer { send, recv })
    }

    /// Hands `data` from device `from` to device `to` with a blocking send, steps until `to`
    /// can see it (`iprobe`), and receives it: how a test opens a connection-based transport's
    /// connection (TCP) before the part it measures or checks. Returns the receive's status.
    #[track_caller]
    pub fn pass(&mut self, from: usize, to: usize, tag: Tag, data: &[u8]) -> Result<Status> {
        let (src, dest) = (self.world_rank(from)?, self.world_rank(to)?);
        let comm = self.devs[from].world();
        self.devs[from].send(comm, dest, tag, data, SendMode::Standard)?;
        let comm = self.devs[to].world();
        self.drive(
            &|| format!("tag {tag} from device {from} to show at device {to}"),
            |h| Ok(h.devs[to].iprobe(comm, src, tag)?.is_some()),
        )?;
        let mut got = vec![0u8; data.len()];
        let st = self.devs[to].recv(comm, src, tag, &mut got)?;
        if got != data {
            return Err(Error::new(
                ErrorKind::Internal,
                format!("the message from device {from} arrived changed at device {to}"),
            ));
        }
        Ok(st)
    }

    /// Device `dev`'s rank in its world communicator.
    fn world_rank(&self, dev: usize) -> Result<Rank> {
        let d = &self.devs[dev];
        d.rank(d.world())
    }

    /// The bounded loop under every wait: check `done`, else step, until the limit.
    #[track_caller]
    fn drive(
        &mut self,
        what: &dyn Fn() -> String,
        mut done: impl FnMut(&mut Self) -> Result<bool>,
    ) -> Result<u64> {
        self.events.fill(None);
        let mut bound = Bound::new(self.limit);
        loop {
            if done(self)? {
                return Ok(bound.steps);
            }
            bound.step(what);
            self.step()?;
        }
    }
}

impl<N: Netmod, S: Shm> Index<usize> for Harness<N, S> {
    type Output = Device<N, S>;

    fn index(&self, i: usize) -> &Device<N, S> {
        &self.devs[i]
    }
}

impl<N: Netmod, S: Shm> IndexMut<usize> for Harness<N, S> {
    fn index_mut(&mut self, i: usize) -> &mut Device<N, S> {
        &mut self.devs[i]
    }
}

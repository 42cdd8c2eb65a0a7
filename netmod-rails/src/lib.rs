//! netmod-rails: one peer reached over several networks at once.
//!
//! A host with two network interfaces has twice the bandwidth to a peer that has them too; one
//! connection uses half. [`Rails`] opens one netmod endpoint per interface `CH4_RAILS` names
//! (see [`spec`]) and stands for all of them. Everything that matching depends on — eager
//! messages, requests-to-send, clear-to-sends, acknowledgements, credit — travels on the
//! *primary* rail, the first, so the order the AM engine relies on (`AM_ORDERED`: one ordered
//! channel per peer) holds as with one rail. Only rendezvous data is spread: each piece
//! (`am_fallback::wire::DataHeader`) names its receive and its offset, lands there straight from
//! whichever rail brought it, and the receive completes when its bytes have all come, in
//! whatever order. So the rails need not keep order among themselves. MPC's multirail and
//! Open MPI's `ob1` PML (which stripes a message's fragments over its BTLs by their
//! `bandwidth` weights) split the same way.
//!
//! Each piece goes to the rail that has carried the least data for its weight, among those
//! that can take it now: a rail whose socket is backed up is passed over, so a slower link than
//! its weight claims takes less. A peer that publishes fewer rails is reached by the ones both
//! have (rail *i* to rail *i*), a peer with one rail by the primary alone.
//!
//! A rail that fails to a peer fails the peer: its requests end with `PeerFailed`, as when the
//! primary fails. Moving the pieces to a surviving rail would need to know which bytes of a
//! broken connection arrived, which TCP does not tell.
//!
//! With one rail (no `CH4_RAILS`, or a job on one node) [`Rails`] is its primary and nothing
//! more: the striping test folds away for every message but rendezvous data, and polling looks
//! at one more length.

mod bootstrap;
pub mod spec;

use std::net::IpAddr;

use am_fallback::wire::handler;
use ch4_core::bootstrap::Bootstrap;
use ch4_core::env::Setting;
use ch4_core::transport::{AmSink, AmTransport, HandlerId, Netmod, PeerRead};
use ch4_core::{Error, ErrorKind, Gpid, PeerState, Result};

pub use spec::RAILS_VAR;

#[doc(hidden)]
pub use bootstrap::split_card;

/// The settings of this crate.
pub const SETTINGS: &[Setting] = &[Setting::new(
    RAILS_VAR,
    "none (one rail)",
    "networks to reach other nodes over at once: interfaces (eth1), subnets (10.1.0.0/16) or \
     addresses, comma-separated, each optionally weighted (eth1@25; default: the link speeds, \
     else equal); envelopes take the first, rendezvous data is striped over all",
)];

/// A netmod that can be one rail: opened on one of this host's addresses.
pub trait Rail: Bootstrap + Netmod<P2p = am_fallback::Am> {
    /// Opens rank `rank`'s endpoint, reachable at `addr` only, as [`Bootstrap::open`] would.
    fn open_on(rank: Gpid, size: u32, job_key: u64, addr: IpAddr) -> Result<Self>;

    /// Whether anything was ever exchanged with `peer` on this rail (a rail never used to a
    /// peer has nothing of it in flight).
    fn used_with(&self, peer: Gpid) -> bool;
}

impl Rail for netmod_tcp::TcpNetmod {
    /// Refuses `CH4_TCP_BIND` beside `CH4_RAILS`: both would say where to listen.
    fn open_on(rank: Gpid, size: u32, job_key: u64, addr: IpAddr) -> Result<Self> {
        if ch4_core::env::raw("CH4_TCP_BIND")?.is_some() {
            return Err(Error::new(
                ErrorKind::Arg,
                format!("CH4_TCP_BIND and {RAILS_VAR} both say where to listen: set one"),
            ));
        }
        netmod_tcp::TcpNetmod::bind(rank, size, job_key, (addr, 0).into())
    }

    fn used_with(&self, peer: Gpid) -> bool {
        self.ever_connected(peer)
    }
}

/// TCP over one rail or several: the TCP netmod of the facade and of `netmod-any`.
pub type TcpRails = Rails<netmod_tcp::TcpNetmod>;

/// A netmod over several rails: the primary for everything, the others for rendezvous data.
pub struct Rails<T> {
    primary: T,
    /// The other rails, in `CH4_RAILS` order; empty with one rail.
    extra: Vec<T>,
    /// Per rail (primary first): its share, and the data it has carried so far.
    weight: Vec<u64>,
    carried: Vec<u64>,
    /// Per rail: its name in `CH4_RAILS` and address, for the settings summary.
    described: Vec<String>,
    /// Per peer: how many rails reach it (the primary always).
    reach: Vec<u8>,
    /// Which rail a poll reads first, so a busy primary does not starve the others.
    turn: usize,
}

impl<T> Rails<T> {
    /// `primary` alone: everything over it, as if it were used directly.
    pub fn single(primary: T) -> Rails<T> {
        Rails {
            primary,
            extra: Vec::new(),
            weight: vec![1],
            carried: vec![0],
            described: Vec::new(),
            reach: Vec::new(),
            turn: 0,
        }
    }

    /// `rails` (the primary first), each with its name and weight.
    pub fn new(rails: Vec<(T, String, u64)>) -> Result<Rails<T>> {
        let mut rails = rails.into_iter();
        let Some((primary, name, w)) = rails.next() else {
            return Err(Error::new(ErrorKind::Arg, "rails need at least one netmod"));
        };
        let mut r = Rails::single(primary);
        r.weight = vec![w.max(1)];
        r.described = vec![name];
        for (t, name, w) in rails {
            r.extra.push(t);
            r.weight.push(w.max(1));
            r.carried.push(0);
            r.described.push(name);
        }
        Ok(r)
    }

    /// The primary rail, which carries everything but striped data.
    pub fn primary(&self) -> &T {
        &self.primary
    }

    /// Every rail, the primary first, to configure them alike.
    pub fn each_mut(&mut self) -> impl Iterator<Item = &mut T> {
        std::iter::once(&mut self.primary).chain(self.extra.iter_mut())
    }

    /// How many rails this process has.
    pub fn count(&self) -> usize {
        1 + self.extra.len()
    }

    /// How many rails reach `peer` (1: the primary alone).
    pub fn reaching(&self, peer: Gpid) -> usize {
        self.reach
            .get(peer as usize)
            .map_or(1, |&n| n.max(1) as usize)
    }

    /// The bytes of rendezvous data each rail has carried, the primary first.
    pub fn carried(&self) -> &[u64] {
        &self.carried
    }

    fn rail_mut(&mut self, i: usize) -> &mut T {
        if i == 0 {
            &mut self.primary
        } else {
            &mut self.extra[i - 1]
        }
    }

    fn rail(&self, i: usize) -> &T {
        if i == 0 {
            &self.primary
        } else {
            &self.extra[i - 1]
        }
    }
}

/// Reads through to the primary rail (its address, its counters): what a single-rail netmod's
/// user asked of the netmod still answers the same.
impl<T> std::ops::Deref for Rails<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.primary
    }
}

impl<T: Rail> Rails<T> {
    /// The rail for the next `bytes` of data to `dest`, and whether it can take them now: the
    /// rail reaching `dest` that has carried least for its weight — or, while that one is
    /// backed up, another that can send now and stays within two pieces of its share. So the
    /// weights hold over a transfer, and a moment's congestion on one rail stalls nothing. A
    /// rail not yet connected to `dest` counts as ready: it connects on its first piece.
    fn choose(&mut self, dest: Gpid, bytes: usize) -> (usize, bool) {
        let n = self.reaching(dest);
        let mut best = 0;
        for i in 1..n {
            if self.lighter(i, best) {
                best = i;
            }
        }
        if self.ready(best, dest, bytes) {
            return (best, true);
        }
        let lead = 2 * bytes as u128;
        for i in (0..n).filter(|&i| i != best) {
            let within = (u128::from(self.carried[i]) + bytes as u128)
                * u128::from(self.weight[best])
                <= (u128::from(self.carried[best]) + lead) * u128::from(self.weight[i]);
            if within && self.ready(i, dest, bytes) {
                return (i, true);
            }
        }
        (best, false)
    }

    fn ready(&mut self, i: usize, dest: Gpid, bytes: usize) -> bool {
        !self.rail(i).used_with(dest) || self.rail_mut(i).can_send_now(dest, bytes)
    }

    /// Whether rail `a` has carried less than rail `b` for their weights.
    fn lighter(&self, a: usize, b: usize) -> bool {
        u128::from(self.carried[a]) * u128::from(self.weight[b])
            < u128::from(self.carried[b]) * u128::from(self.weight[a])
    }

    /// The first rail other than the primary whose connection to `dest` failed. Such a peer is
    /// failed ([`AmTransport::peer_state`]), and so are the messages the primary would still
    /// carry to it: before, a send after the loss went out over the healthy primary and
    /// completed, to a peer every wait already took for failed.
    #[inline]
    fn lost_rail(&self, dest: Gpid) -> Option<usize> {
        (1..self.reaching(dest)).find(|&i| self.rail(i).peer_state(dest) == PeerState::Failed)
    }

    /// The error of a send to `dest`, which rail `i` no longer reaches.
    #[cold]
    fn rail_lost(&self, dest: Gpid, i: usize) -> Error {
        Error::new(
            ErrorKind::PeerFailed,
            format!(
                "process {dest} is failed: its connection over rail {} broke",
                self.described[i]
            ),
        )
    }

    #[cold]
    fn send_striped(&mut self, dest: Gpid, header: &[u8], payload: &[&[u8]]) -> Result<()> {
        let bytes: usize = payload.iter().map(|p| p.len()).sum();
        let (i, _) = self.choose(dest, header.len() + bytes);
        self.carried[i] += bytes as u64;
        let rail = if i == 0 {
            &mut self.primary
        } else {
            &mut self.extra[i - 1]
        };
        rail.am_send(dest, handler::DATA, header, payload)
            .map_err(|e| {
                if i == 0 {
                    e
                } else {
                    e.context(format!("rail {}", self.described[i]))
                }
            })
    }

    #[cold]
    fn poll_all<K: AmSink>(&mut self, sink: &mut K, budget: usize) -> Result<usize> {
        let n = self.count();
        self.turn = (self.turn + 1) % n;
        let mut delivered = 0;
        for k in 0..n {
            let i = (self.turn + k) % n;
            delivered += self
                .rail_mut(i)
                .am_poll(sink, budget.saturating_sub(delivered).max(1))?;
        }
        Ok(delivered)
    }
}

impl<T: Rail> AmTransport for Rails<T> {
    /// As the primary's: everything whose order matters travels on it.
    const AM_ORDERED: bool = T::AM_ORDERED;
    const NAME: &'static str = T::NAME;

    #[inline(always)]
    fn eager_limit(&self) -> usize {
        self.primary.eager_limit()
    }

    #[inline(always)]
    fn am_max_payload(&self) -> usize {
        self.primary.am_max_payload()
    }

    #[inline(always)]
    fn am_send(
        &mut self,
        dest: Gpid,
        handler: HandlerId,
        header: &[u8],
        payload: &[&[u8]],
    ) -> Result<()> {
        if !self.extra.is_empty() {
            if handler == handler::DATA {
                return self.send_striped(dest, header, payload);
            }
            if let Some(i) = self.lost_rail(dest) {
                return Err(self.rail_lost(dest, i));
            }
        }
        self.primary.am_send(dest, handler, header, payload)
    }

    #[inline(always)]
    fn am_poll<K: AmSink>(&mut self, sink: &mut K, budget: usize) -> Result<usize> {
        if self.extra.is_empty() {
            return self.primary.am_poll(sink, budget);
        }
        self.poll_all(sink, budget)
    }

    /// Failed when any rail to the peer failed (pieces of its messages may be lost); left once
    /// the primary says so and every other rail it used has delivered its goodbye too (their
    /// last pieces may still be on the way when the primary's arrives).
    fn peer_state(&self, gpid: Gpid) -> PeerState {
        let primary = self.primary.peer_state(gpid);
        if self.extra.is_empty() || primary == PeerState::Failed {
            return primary;
        }
        let mut all_left = primary == PeerState::Left;
        for i in 1..self.reaching(gpid) {
            match self.rail(i).peer_state(gpid) {
                PeerState::Failed => return PeerState::Failed,
                PeerState::Left => {}
                PeerState::Alive => all_left &= !self.rail(i).used_with(gpid),
            }
        }
        if all_left {
            PeerState::Left
        } else if primary == PeerState::Left {
            PeerState::Alive
        } else {
            primary
        }
    }

    fn settings(&self) -> Vec<(&'static str, String)> {
        let mut s = self.primary.settings();
        if !self.described.is_empty() {
            let rails: Vec<String> = self
                .described
                .iter()
                .zip(&self.weight)
                .map(|(d, w)| format!("{d} (weight {w})"))
                .collect();
            s.push((RAILS_VAR, rails.join(", ")));
        }
        s
    }

    fn peer_failed(&self, gpid: Gpid) -> bool {
        self.peer_state(gpid) == PeerState::Failed
    }

    #[inline(always)]
    fn has_queued_output(&self) -> bool {
        self.primary.has_queued_output() || self.extra.iter().any(|r| r.has_queued_output())
    }

    fn close_connections(&mut self) {
        for r in self.each_mut() {
            r.close_connections();
        }
    }

    fn arm_wakeup(
        &mut self,
        out: &mut Vec<ch4_core::transport::WaitFd>,
    ) -> ch4_core::transport::Arm {
        let mut arm = ch4_core::transport::Arm::Armed;
        for r in self.each_mut() {
            arm = arm.and(r.arm_wakeup(out));
        }
        arm
    }

    fn background_progress(&mut self, on: bool) {
        for r in self.each_mut() {
            r.background_progress(on);
        }
    }

    #[inline(always)]
    fn can_send_now(&mut self, dest: Gpid, bytes: usize) -> bool {
        self.primary.can_send_now(dest, bytes)
    }

    /// Whether the rail the next piece goes to can take it now (see `Rails::choose`).
    #[inline(always)]
    fn can_stream_now(&mut self, dest: Gpid, bytes: usize) -> bool {
        if self.extra.is_empty() {
            return self.primary.can_send_now(dest, bytes);
        }
        self.choose(dest, bytes).1
    }

    #[inline(always)]
    fn stream_piece(&self, crowded: bool) -> usize {
        self.primary.stream_piece(crowded)
    }

    #[inline(always)]
    fn first_piece(&self) -> usize {
        self.primary.first_piece()
    }

    #[inline(always)]
    fn offers_peer_read(&self, dest: Gpid, bytes: usize) -> bool {
        self.primary.offers_peer_read(dest, bytes)
    }

    #[inline(always)]
    fn read_pays(&self, bytes: usize, both_ways: bool) -> bool {
        self.primary.read_pays(bytes, both_ways)
    }

    fn read_peer(&mut self, src: Gpid, addr: u64, into: &mut [u8]) -> Result<PeerRead> {
        self.primary.read_peer(src, addr, into)
    }
}

impl<T: Rail> Netmod for Rails<T> {
    type P2p = am_fallback::Am;
}

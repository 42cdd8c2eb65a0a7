//! Communicators and the context ids that keep their traffic apart.
//!
//! A communicator is a group (a shared rank map, see [`crate::rankmap`]), our rank in it, and a
//! pair of context ids: one for point-to-point traffic, one for the collectives built on it, so a
//! user's message can never match a collective's. Context ids are agreed collectively: every
//! member contributes its mask of free ids and all take the lowest id free everywhere (MPICH's
//! scheme), which needs no central allocator and works for split's disjoint groups at once.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::pool::Handle;
use crate::rankmap::Group;
use crate::types::{ContextId, Rank};
use crate::{Error, ErrorKind, Result};

/// Names a communicator of one device. Stale after `comm_free`: using it is an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CommId(pub(crate) Handle);

/// One communicator as the device sees it.
///
/// An intercommunicator (MPI 4.1 section 7.6) has two groups: `group`, the local one, which
/// gives this process's rank and size, and `remote`, whose ranks its sends and receives name.
/// As in MPICH, each group agrees on a context id of its own among its members, on which its
/// members receive (`context`), and messages to the other group carry that group's id
/// (`send_context`): no agreement across both groups is needed to make one.
#[derive(Debug, Clone)]
pub struct Comm {
    /// Point-to-point context id (even) of the messages this process receives; the
    /// collective context is `context + 1`.
    pub context: ContextId,
    /// The context id of the messages this process sends: `context` for an
    /// intracommunicator, the remote group's for an intercommunicator.
    pub send_context: ContextId,
    /// Our rank in the group.
    pub rank: Rank,
    /// The members, shared with every dup (an intercommunicator's local group).
    pub group: Group,
    /// An intercommunicator's remote group, whose ranks address peers; `None` for an
    /// intracommunicator, whose peers are `group`.
    pub remote: Option<Group>,
    /// An intercommunicator's own intracommunicator of its local group (on the same device),
    /// over which its collectives' schedules work within the group (`crate::schedule`).
    pub local: Option<CommId>,
    /// Whether its small collectives go through the node's shared segment.
    pub(crate) node: crate::node_coll::NodeLanes,
    /// The tags its collective schedules have taken (`crate::schedule`).
    pub(crate) schedule_tags: crate::schedule::TagCounter,
}

impl Comm {
    /// An intracommunicator of `group` with context id `context`, this process at `rank`.
    pub fn intra(context: ContextId, rank: Rank, group: Group) -> Comm {
        Comm {
            context,
            send_context: context,
            rank,
            group,
            remote: None,
            local: None,
            node: Default::default(),
            schedule_tags: Default::default(),
        }
    }

    /// The group whose ranks sends and receives name: the remote group of an
    /// intercommunicator, else the communicator's own.
    #[inline(always)]
    pub fn peers(&self) -> &Group {
        match &self.remote {
            None => &self.group,
            Some(r) => r,
        }
    }

    /// Whether it is an intercommunicator.
    #[inline(always)]
    pub fn is_inter(&self) -> bool {
        self.remote.is_some()
    }

    /// The context id collectives over this communicator use.
    #[inline(always)]
    pub fn coll_context(&self) -> ContextId {
        self.context + 1
    }

    /// Number of members.
    #[inline(always)]
    pub fn size(&self) -> Rank {
        self.group.size() as Rank
    }

    /// The checked process id of peer `rank` (of the remote group, for an
    /// intercommunicator).
    #[inline(always)]
    pub fn gpid(&self, rank: Rank) -> Result<crate::Gpid> {
        let peers = self.peers();
        match peers.gpid(rank) {
            Some(g) => Ok(g),
            None => Err(Error::new(
                ErrorKind::Rank,
                format!("rank {rank} outside communicator of size {}", peers.size()),
            )),
        }
    }
}

/// How many context-id pairs a process can have in use at once.
pub const CONTEXT_SLOTS: usize = 64 * CONTEXT_WORDS;
/// The mask's length in 64-bit words (what one agreement exchanges).
pub const CONTEXT_WORDS: usize = 32;

/// The set of free context-id slots of one process; slot `s` owns ids `2s` and `2s + 1`.
#[derive(Debug, Clone)]
pub struct ContextMask {
    free: [u64; CONTEXT_WORDS],
}

impl Default for ContextMask {
    fn default() -> Self {
        let mut free = [u64::MAX; CONTEXT_WORDS];
        // Slots 0 and 1 belong to the world and self communicators.
        free[0] &= !0b11;
        ContextMask { free }
    }
}

impl ContextMask {
    /// The mask as words, to be AND-reduced with the other members' masks.
    pub fn words(&self) -> [u64; CONTEXT_WORDS] {
        self.free
    }

    /// Takes the lowest slot free in `agreed` (the AND of all members' masks) and returns its
    /// point-to-point context id.
    pub fn take_lowest(&mut self, agreed: &[u64; CONTEXT_WORDS]) -> Result<ContextId> {
        for (w, word) in agreed.iter().enumerate() {
            let usable = word & self.free[w];
            if usable != 0 {
                let bit = usable.trailing_zeros() as usize;
                self.free[w] &= !(1u64 << bit);
                return Ok(((w * 64 + bit) * 2) as ContextId);
            }
        }
        Err(Error::new(
            ErrorKind::Exhausted,
            format!("no context id free on every member ({CONTEXT_SLOTS} communicators at most)"),
        ))
    }

    /// Returns a context id's slot to the free set.
    pub fn release(&mut self, context: ContextId) {
        let slot = context as usize / 2;
        if (2..CONTEXT_SLOTS).contains(&slot) {
            self.free[slot / 64] |= 1u64 << (slot % 64);
        }
    }
}

/// The words one process contributes to a context-id agreement: its free mask, then a flag
/// word that is all ones when it holds its mask for this agreement (the agreement's AND then
/// says whether every member did).
pub type Offer = [u64; CONTEXT_WORDS + 1];

/// The context ids of one process, shared by every device (VCI) of it, and the claim that
/// lets threads create communicators at once.
///
/// An agreement reads the free mask, exchanges it (a collective on the parent communicator,
/// during which other threads run) and takes the lowest id free everywhere. Two threads of a
/// process agreeing at once over different parents could both pick the same id; so a thread
/// must *claim* the mask for its agreement, and one that cannot offers no ids at all, which
/// makes the whole agreement come out empty and every member try again. Which thread may
/// claim is decided by priority, the lowest parent context id first, which is the same order
/// on every process, so the creations that compete finish one after another instead of
/// failing each other forever (MPICH's `MPIR_Get_contextid_sparse_group` works the same way).
#[derive(Debug, Clone, Default)]
pub struct ContextIds(Arc<Mutex<ContextState>>);

#[derive(Debug, Default)]
struct ContextState {
    mask: ContextMask,
    /// Whether an agreement holds the mask.
    claimed: bool,
    /// Parent context ids of the agreements under way on this process (with repeats).
    trying: Vec<ContextId>,
}

impl ContextIds {
    fn state(&self) -> MutexGuard<'_, ContextState> {
        // Every change to the state is one statement, so a panic elsewhere cannot leave it
        // half made.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What this process offers to an agreement for a new communicator over `parent`, and
    /// whether it claimed its mask for it (then [`ContextIds::conclude`] must follow).
    pub fn offer(&self, parent: ContextId) -> (Offer, bool) {
        let mut st = self.state();
        if !st.trying.contains(&parent) {
            st.trying.push(parent);
        }
        let first = st.trying.iter().min() == Some(&parent);
        let mut offer = [0u64; CONTEXT_WORDS + 1];
        if st.claimed || !first {
            return (offer, false);
        }
        st.claimed = true;
        offer[..CONTEXT_WORDS].copy_from_slice(&st.mask.words());
        offer[CONTEXT_WORDS] = u64::MAX;
        (offer, true)
    }

    /// Ends one agreement over `parent` given its outcome (the AND of every member's offer):
    /// the agreed context id, `None` when some member could not claim its mask (try again),
    /// or an error when every member offered its mask and no id is free in all.
    pub fn conclude(
        &self,
        parent: ContextId,
        claimed: bool,
        agreed: &Offer,
    ) -> Result<Option<ContextId>> {
        let mut st = self.state();
        if claimed {
            st.claimed = false;
        }
        let everyone_claimed = agreed[CONTEXT_WORDS] != 0;
        let mut free = [0u64; CONTEXT_WORDS];
        free.copy_from_slice(&agreed[..CONTEXT_WORDS]);
        let outcome = if everyone_claimed {
            st.mask.take_lowest(&free).map(Some)
        } else {
            Ok(None)
        };
        if !matches!(outcome, Ok(None)) {
            if let Some(i) = st.trying.iter().position(|&p| p == parent) {
                st.trying.swap_remove(i);
            }
        }
        outcome
    }

    /// Returns a context id's slot to the free set.
    pub fn release(&self, context: ContextId) {
        self.state().mask.release(context);
    }

    /// The free mask as it is now, claimed or not: a nonblocking agreement's first round
    /// (`crate::schedule`), which holds no claim while it waits for the other members and so
    /// never makes a blocking agreement wait for it (MPICH's `comm_create_group_idup`
    /// interleaves the two in opposite orders on different members).
    pub fn snapshot(&self) -> [u64; CONTEXT_WORDS] {
        self.state().mask.words()
    }

    /// Takes every id of `ids` if all are free and no agreement holds the mask (whose
    /// members are choosing among the free ids): a nonblocking agreement's reservation of
    /// its candidates, which all members then confirm or undo together.
    pub fn try_take(&self, ids: &[ContextId]) -> bool {
        let mut st = self.state();
        if st.claimed {
            return false;
        }
        let free = |c: ContextId| {
            let slot = c as usize / 2;
            slot < CONTEXT_SLOTS && st.mask.free[slot / 64] & (1u64 << (slot % 64)) != 0
        };
        if !ids.iter().all(|&c| free(c)) {
            return false;
        }
        for &c in ids {
            let slot = c as usize / 2;
            st.mask.free[slot / 64] &= !(1u64 << (slot % 64));
        }
        true
    }
}

/// The context id of a communicator made by a nonblocking agreement still under way: no
/// slot's (slots are below `CONTEXT_SLOTS`), so releasing it does nothing and nothing
/// matches it.
pub const PENDING_CONTEXT: ContextId = ContextId::MAX & !1;

/// The `n` lowest context ids whose slots are set in `agreed` (fewer if there are not).
pub fn lowest_free(agreed: &[u64; CONTEXT_WORDS], n: usize) -> Vec<ContextId> {
    let mut out = Vec::with_capacity(n);
    for (w, &word) in agreed.iter().enumerate() {
        let mut bits = word;
        while bits != 0 && out.len() < n {
            let bit = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            out.push(((w * 64 + bit) * 2) as ContextId);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agreement_takes_lowest_common_slot() {
        let mut a = ContextMask::default();
        let mut b = ContextMask::default();
        // a already used slot 2 alone.
        let only_a = a.take_lowest(&a.words()).unwrap();
        assert_eq!(only_a, 4);
        let mut agreed = a.words();
        for (x, y) in agreed.iter_mut().zip(b.words()) {
            *x &= y;
        }
        assert_eq!(a.take_lowest(&agreed).unwrap(), 6);
        assert_eq!(b.take_lowest(&agreed).unwrap(), 6);
        a.release(6);
        assert_eq!(a.take_lowest(&a.words()).unwrap(), 6);
    }

    #[test]
    fn exhaustion_is_an_error() {
        let mut m = ContextMask::default();
        for _ in 2..CONTEXT_SLOTS {
            m.take_lowest(&m.words()).unwrap();
        }
        let e = m.take_lowest(&m.words()).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Exhausted);
    }

    fn agree(ids: &[&ContextIds], parent: ContextId) -> Vec<Result<Option<ContextId>>> {
        let offers: Vec<(Offer, bool)> = ids.iter().map(|i| i.offer(parent)).collect();
        let mut agreed = [u64::MAX; CONTEXT_WORDS + 1];
        for (o, _) in &offers {
            for (a, w) in agreed.iter_mut().zip(o) {
                *a &= w;
            }
        }
        ids.iter()
            .zip(&offers)
            .map(|(i, (_, claimed))| i.conclude(parent, *claimed, &agreed))
            .collect()
    }

    #[test]
    fn an_agreement_takes_the_same_id_everywhere() {
        let (a, b) = (ContextIds::default(), ContextIds::default());
        let ids = |out: Vec<Result<Option<ContextId>>>| -> Vec<Option<ContextId>> {
            out.into_iter().map(|r| r.unwrap()).collect()
        };
        assert_eq!(ids(agree(&[&a, &b], 0)), [Some(4), Some(4)]);
        assert_eq!(ids(agree(&[&a, &b], 0)), [Some(6), Some(6)]);
    }

    #[test]
    fn a_claimed_mask_makes_other_agreements_retry() {
        let a = ContextIds::default();
        let b = ContextIds::default();
        // A thread of `a` holds the mask for parent 0; an agreement over parent 8 meanwhile
        // gets no id from `a`, so it comes out empty at both members: they try again.
        let (held, claimed) = a.offer(0);
        assert!(claimed);
        let out = agree(&[&a, &b], 8);
        assert!(out.iter().all(|r| matches!(r, Ok(None))), "{out:?}");
        // The first agreement finishes (with `a` alone here), then the other succeeds.
        assert_eq!(a.conclude(0, true, &held).unwrap(), Some(4));
        let out = agree(&[&a, &b], 8);
        assert!(out.iter().all(|r| matches!(r, Ok(Some(6)))), "{out:?}");
    }

    #[test]
    fn a_reservation_takes_all_or_nothing_and_waits_for_no_claim() {
        let a = ContextIds::default();
        let ids = lowest_free(&a.snapshot(), 2);
        assert_eq!(ids, [4, 6]);
        assert!(a.try_take(&ids));
        // Taken now: a second reservation of one of them takes nothing.
        assert!(!a.try_take(&[6, 8]));
        assert_eq!(lowest_free(&a.snapshot(), 1), [8]);
        // While a blocking agreement holds the mask, no reservation is made.
        let (_, claimed) = a.offer(0);
        assert!(claimed);
        assert!(!a.try_take(&[8]));
        a.conclude(0, true, &[0; CONTEXT_WORDS + 1]).unwrap();
        assert!(a.try_take(&[8]));
        a.release(4);
        assert_eq!(lowest_free(&a.snapshot(), 1), [4]);
    }

    #[test]
    fn the_pending_context_is_no_slot() {
        let a = ContextIds::default();
        a.release(PENDING_CONTEXT);
        assert!(!a.try_take(&[PENDING_CONTEXT]));
    }

    #[test]
    fn the_lowest_parent_goes_first() {
        let a = ContextIds::default();
        // Two agreements under way: the one over parent 8 registers first, but while the one
        // over parent 2 waits, 8 may not claim.
        let (_, claimed_8) = a.offer(8);
        assert!(claimed_8);
        a.conclude(8, true, &[0; CONTEXT_WORDS + 1]).unwrap();
        let (_, claimed_2) = a.offer(2);
        assert!(claimed_2);
        a.conclude(2, true, &[0; CONTEXT_WORDS + 1]).unwrap();
        let (_, again_8) = a.offer(8);
        assert!(!again_8, "parent 2 is still trying and goes first");
    }
}

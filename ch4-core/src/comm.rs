//! Communicators and the context ids that keep their traffic apart.
//!
//! A communicator is a group (a shared rank map, see [`crate::rankmap`]), our rank in it, and a
//! pair of context ids: one for point-to-point traffic, one for the collectives built on it, so a
//! user's message can never match a collective's. Context ids are agreed collectively: every
//! member contributes its mask of free ids and all take the lowest id free everywhere (MPICH's
//! scheme), which needs no central allocator and works for split's disjoint groups at once.

use crate::pool::Handle;
use crate::rankmap::Group;
use crate::types::{ContextId, Rank};
use crate::{Error, ErrorKind, Result};

/// Names a communicator of one device. Stale after `comm_free`: using it is an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CommId(pub(crate) Handle);

/// One communicator as the device sees it.
#[derive(Debug, Clone)]
pub struct Comm {
    /// Point-to-point context id (even); the collective context is `context + 1`.
    pub context: ContextId,
    /// Our rank in the group.
    pub rank: Rank,
    /// The members, shared with every dup.
    pub group: Group,
}

impl Comm {
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

    /// The checked process id of `rank`.
    #[inline(always)]
    pub fn gpid(&self, rank: Rank) -> Result<crate::Gpid> {
        match self.group.gpid(rank) {
            Some(g) => Ok(g),
            None => Err(Error::new(
                ErrorKind::Rank,
                format!(
                    "rank {rank} outside communicator of size {}",
                    self.group.size()
                ),
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
}

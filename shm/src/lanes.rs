//! The collective lanes of a node's segment: per collective slot and local rank an arrival
//! word and two outboxes (one for odd-numbered operations, one for even), through which
//! `ch4_core::node_coll` runs small collectives with one flag store and a look at the others'
//! flags. The protocol is node_coll's: a rank publishes into its outbox for operation `op`
//! only once every member has arrived at `op - 1`, and arrives at `op - 1` only after it has
//! read all it wanted of `op - 2`, the last operation to use that outbox; a reader reads an
//! outbox for `op` only after it saw the owner's arrival at `op`.
//!
//! All of it goes through [`Bytes`](crate::sync::Bytes), so that `scripts/loom.sh` checks the
//! protocol with the outboxes' bytes in tracked cells and the words as atomics
//! (`loom_tests.rs`): a publication that a reader could see before its bytes, or an outbox
//! rewritten while a member still reads it, shows as a race.

use crate::sync::{Bytes, Ordering};

/// Bytes of a lane before its outboxes: the arrival word and the two length words, padded so
/// that the outboxes start on their own cache lines.
const LANE_HEADER: usize = 128;

/// The lanes of every collective slot of a segment: `slots` × `ranks` lanes of
/// [`Lanes::lane_size`] bytes, starting at the region's offset 0.
pub(crate) struct Lanes {
    bytes: Bytes,
    ranks: usize,
    slots: usize,
    outbox: usize,
}

impl Lanes {
    /// Bytes of one lane whose outboxes hold `outbox` bytes each.
    pub(crate) const fn lane_size(outbox: usize) -> usize {
        LANE_HEADER + 2 * outbox
    }

    /// The lanes in `bytes`: a region of at least `slots * ranks * lane_size(outbox)` bytes,
    /// 8-aligned, that every local rank maps (`outbox` a multiple of 8).
    pub(crate) fn new(bytes: Bytes, ranks: usize, slots: usize, outbox: usize) -> Lanes {
        Lanes {
            bytes,
            ranks,
            slots,
            outbox,
        }
    }

    /// Offset of the lane of local rank `local` in slot `slot`, if both exist.
    #[inline]
    fn lane(&self, slot: usize, local: usize) -> Option<usize> {
        (slot < self.slots && local < self.ranks)
            .then(|| (slot * self.ranks + local) * Self::lane_size(self.outbox))
    }

    /// The number of the last operation local rank `local` has entered on slot `slot`
    /// (acquire: what it published before arriving is visible after this returns it); 0 for
    /// a slot or rank that does not exist.
    #[inline]
    pub(crate) fn arrived(&self, slot: usize, local: usize) -> u64 {
        match self.lane(slot, local) {
            // SAFETY: a lane starts 8-aligned (lanes are multiples of 8 from an 8-aligned
            // start) within the region, and its arrival word is only ever reached as an atomic.
            Some(at) => unsafe { self.bytes.word(at) }.load(Ordering::Acquire),
            None => 0,
        }
    }

    /// Local rank `me` arrives at operation `op` on slot `slot` (release: after what it
    /// published for `op`).
    #[inline]
    pub(crate) fn arrive(&self, slot: usize, me: usize, op: u64) {
        if let Some(at) = self.lane(slot, me) {
            // SAFETY: as in `arrived`.
            unsafe { self.bytes.word(at) }.store(op, Ordering::Release);
        }
    }

    /// Local rank `me` writes `data` (cut to an outbox) into its outbox for operation `op`.
    ///
    /// # Safety
    /// `me` is the calling rank (no other rank writes its lane) and every member of the slot
    /// has arrived at `op - 1`, so none still reads this outbox (see the module's protocol).
    #[inline]
    pub(crate) unsafe fn publish(&self, slot: usize, me: usize, op: u64, data: &[u8]) {
        let Some(at) = self.lane(slot, me) else {
            return;
        };
        let parity = (op & 1) as usize;
        let outbox = at + LANE_HEADER + parity * self.outbox;
        let n = data.len().min(self.outbox);
        // SAFETY: the outbox lies within the lane; the caller's contract makes the bytes ours.
        unsafe { self.bytes.write(outbox, &data[..n]) };
        // SAFETY: the length words follow the arrival word, 8-aligned within the lane.
        unsafe { self.bytes.word(at + 8 + 8 * parity) }.store(n as u64, Ordering::Relaxed);
    }

    /// Runs `f` on what local rank `local` published for operation `op`.
    ///
    /// # Safety
    /// The caller saw `arrived(slot, local) >= op` (the acquire that makes the bytes visible),
    /// and arrives at `op + 1` only after `f` returns, so the owner does not rewrite them
    /// meanwhile (see the module's protocol).
    #[inline]
    pub(crate) unsafe fn read<R>(
        &self,
        slot: usize,
        local: usize,
        op: u64,
        f: impl FnOnce(&[u8]) -> R,
    ) -> R {
        let Some(at) = self.lane(slot, local) else {
            return f(&[]);
        };
        let parity = (op & 1) as usize;
        // SAFETY: as in `publish`.
        let len = unsafe { self.bytes.word(at + 8 + 8 * parity) }.load(Ordering::Relaxed);
        let n = (len as usize).min(self.outbox);
        let outbox = at + LANE_HEADER + parity * self.outbox;
        // SAFETY: in bounds as in `publish`; published to this reader and not rewritten until
        // it arrives at `op + 1`, by the caller's contract.
        unsafe { self.bytes.with_slice(outbox, n, f) }
    }
}

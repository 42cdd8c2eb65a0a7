//! Per-receiver queues of fixed-size cells, Nemesis style.
//!
//! Every local rank owns `per_rank` cells of `cell_size` bytes in the node segment and has one
//! receive queue. To send, a rank takes one of its own free cells, writes the message into it
//! and appends the cell to the receiver's queue; the receiver takes cells off its queue in
//! order, hands each to the AM engine in place (one copy, straight into the posted receive) and
//! frees it. The memory this costs grows with the number of local ranks, not with its square
//! like the per-pair rings, which is why rings can stay small on a crowded node and the cells
//! carry what does not fit them (see the transport for the split and for how a pair's messages
//! stay in order across the two paths).
//!
//! **The queue** is MPICH Nemesis's lock-free multi-producer single-consumer list. It holds cell
//! numbers (index + 1, so that 0 means "none"): offsets into the cell area, never pointers, so
//! it works at any mapping address. To append cell `c` a sender clears `c.next`, swaps the
//! queue's `tail` to `c` (AcqRel: it takes over the previous tail's link and publishes `c`'s
//! contents) and then links `c` in: into `head` when the queue was empty, or into the previous
//! tail's `next` (Release both times: the receiver that reads the link with Acquire sees the
//! message). The receiver alone reads `head`; it takes the list over (storing 0 into `head`,
//! so the next sender to find the queue empty can start a new list) and walks `next` links.
//! When the cell it holds has no successor yet, it tries to swap `tail` back to 0: success means
//! the list is empty again; failure means a sender has swapped `tail` but not yet linked its
//! cell, so the receiver leaves the cell in place and looks again at its next poll — it never
//! waits, and never frees a cell whose `next` word someone is still about to write.
//!
//! **Free cells** need no second queue: each cell has a `busy` word that its owner sets when it
//! fills the cell and the receiver clears with Release once it is done reading (and has seen the
//! cell's successor, so no sender will write its link again); the owner looks for a clear word
//! (Acquire) among its own cells, starting after the last one it used. Returning a cell is one
//! store into a line the receiver already holds, instead of an atomic swap on a free list that
//! every receiver would contend for.
//!
//! A sender that dies between its swap and its link (two instructions) leaves the receiver's
//! queue stalled at the previous cell; Nemesis has the same window. Messages already linked are
//! still delivered, and the peer's death is reported by the liveness checks.

use crossbeam_utils::CachePadded;

use crate::sync::{AtomicU64, Bytes, Ordering};

/// Bytes at the start of each cell before the message: link, busy flag, sequence, lengths.
pub const CELL_HEADER: usize = 64;
const NEXT: usize = 0;
const BUSY: usize = 8;
const SEQ: usize = 16;
const META: usize = 24;

/// Most cells a rank may own: a ring's records carry 8 bits of their pair's sequence number,
/// and the messages that can overtake a ring record are the sender's cells in flight, so fewer
/// than 256 of those keep the comparison exact.
pub const MAX_CELLS_PER_RANK: usize = 128;

/// The receive queue of one rank, as laid out in shared memory. Zero bytes are an empty queue.
#[repr(C)]
pub struct CellQueue {
    /// First cell of the list not yet taken over by the receiver; written by the sender that
    /// finds the queue empty, cleared by the receiver.
    head: CachePadded<AtomicU64>,
    /// Last cell appended; swapped by senders, swapped back to 0 by the receiver.
    tail: CachePadded<AtomicU64>,
}

/// The cells of every local rank: `ranks * per_rank` cells of `cell_size` bytes.
struct Area {
    data: Bytes,
    cell_size: usize,
    /// Cells in the area (numbers run 1..=total).
    total: u64,
}

impl Area {
    fn new(data: Bytes, ranks: usize, per_rank: usize, cell_size: usize) -> Area {
        Area {
            data,
            cell_size,
            total: (ranks * per_rank) as u64,
        }
    }

    /// The control word at `field` of cell number `cell` (1-based, checked by the caller).
    #[inline(always)]
    fn word(&self, cell: u64, field: usize) -> &AtomicU64 {
        debug_assert!(self.valid(cell));
        // SAFETY: callers only pass cell numbers in 1..=total (checked where they come from
        // shared memory), so the word lies inside the area; offsets are 8-aligned because the
        // cell size is a multiple of 64.
        unsafe { self.data.word((cell as usize - 1) * self.cell_size + field) }
    }

    #[inline(always)]
    fn body(&self, cell: u64) -> usize {
        (cell as usize - 1) * self.cell_size + CELL_HEADER
    }

    #[inline(always)]
    fn valid(&self, cell: u64) -> bool {
        (1..=self.total).contains(&cell)
    }
}

/// Why a cell send did not happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CellSendError {
    /// All of this rank's cells are in flight; try again after receivers have freed some.
    NoFreeCell,
    /// The message does not fit in a cell.
    TooLarge,
    /// The receiver's queue holds a cell number that cannot be valid (a corrupted segment).
    Corrupt,
}

/// The cell queues are not in a state this code can have produced: a corrupted segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CorruptCells;

/// The sending side of one rank: its own cells, and every rank's queue.
pub struct CellSender {
    area: Area,
    queues: *const CellQueue,
    ranks: usize,
    /// Number of this rank's first cell.
    first: u64,
    per_rank: u64,
    /// Where the search for a free cell starts (an index among our cells).
    cursor: u64,
}

/// The receiving side of one rank: its queue.
pub struct CellReceiver {
    area: Area,
    queue: *const CellQueue,
    per_rank: u64,
    /// The cell at the front of the list we have taken over (0: none).
    current: u64,
    /// Once `current` is detached from the queue: its successor (0: none).
    after: Option<u64>,
}

// SAFETY: a `CellSender` writes only cells it owns and does so while they are not in any queue,
// and touches queues only through atomics; a `CellReceiver` is the only reader of its queue's
// list. Moving either to another thread moves that role with it; the shared memory outlives
// both (whoever owns them keeps the segment alive).
unsafe impl Send for CellSender {}
// SAFETY: as for `CellSender`.
unsafe impl Send for CellReceiver {}

/// What the receiver's front cell holds, before it is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Front {
    /// Local rank that sent it.
    pub from: usize,
    /// The message's sequence number on its pair of ranks.
    pub seq: u64,
}

impl CellSender {
    /// The sender of local rank `me`, in an area of `ranks * per_rank` cells at `cells` with the
    /// `ranks` queues at `queues`.
    ///
    /// # Safety
    /// `queues` (`ranks` entries) and `cells .. cells + ranks * per_rank * cell_size` must be
    /// valid shared memory, zeroed when first used, for as long as this value exists; `cells`
    /// 64-byte aligned, `cell_size` a multiple of 64 above [`CELL_HEADER`]; at most one sender
    /// may exist per rank.
    #[cfg(not(loom))]
    pub unsafe fn new(
        queues: *const CellQueue,
        cells: *mut u8,
        ranks: usize,
        per_rank: usize,
        cell_size: usize,
        me: usize,
    ) -> CellSender {
        CellSender::from_parts(queues, Bytes { ptr: cells }, ranks, per_rank, cell_size, me)
    }

    fn from_parts(
        queues: *const CellQueue,
        data: Bytes,
        ranks: usize,
        per_rank: usize,
        cell_size: usize,
        me: usize,
    ) -> CellSender {
        CellSender {
            area: Area::new(data, ranks, per_rank, cell_size),
            queues,
            ranks,
            first: (me * per_rank) as u64 + 1,
            per_rank: per_rank as u64,
            cursor: 0,
        }
    }

    /// The largest header + payload one cell carries.
    #[inline(always)]
    pub fn max_body(&self) -> usize {
        self.area.cell_size - CELL_HEADER
    }

    /// A free cell of ours, if any (its number).
    #[inline]
    fn free_cell(&mut self) -> Option<u64> {
        for k in 0..self.per_rank {
            let i = (self.cursor + k) % self.per_rank;
            let cell = self.first + i;
            // Acquire: the receiver's reads of this cell happen before we write it again.
            if self.area.word(cell, BUSY).load(Ordering::Acquire) == 0 {
                self.cursor = i + 1;
                return Some(cell);
            }
        }
        None
    }

    /// Whether a cell is free now.
    pub fn has_free_cell(&mut self) -> bool {
        let saved = self.cursor;
        let found = self.free_cell().is_some();
        self.cursor = saved;
        found
    }

    /// Sends one message (`header` followed by the concatenated `payload` slices) to local rank
    /// `to`, tagged with the pair's sequence number `seq`. Never blocks.
    pub fn send(
        &mut self,
        to: usize,
        seq: u64,
        handler: u8,
        header: &[u8],
        payload: &[&[u8]],
    ) -> Result<(), CellSendError> {
        let len = header.len() + payload.iter().map(|p| p.len()).sum::<usize>();
        if len > self.max_body() || header.len() > u8::MAX as usize || to >= self.ranks {
            return Err(CellSendError::TooLarge);
        }
        let cell = self.free_cell().ok_or(CellSendError::NoFreeCell)?;
        // Only the owner reads `busy` as a claim; Relaxed, ordered for the receiver by the
        // Release of the link below.
        self.area.word(cell, BUSY).store(1, Ordering::Relaxed);
        let at = self.area.body(cell);
        // SAFETY: the cell is ours and free (its receiver is done with it and no sender will
        // write its link: see the module comment), so its body is exclusively ours to write;
        // `len` fits the body (checked above).
        unsafe {
            self.area.data.write(at, header);
            let mut off = at + header.len();
            for p in payload {
                self.area.data.write(off, p);
                off += p.len();
            }
        }
        // Relaxed: published together with the body by the Release of the link below.
        self.area.word(cell, SEQ).store(seq, Ordering::Relaxed);
        let meta = len as u64 | (u64::from(handler) << 32) | ((header.len() as u64) << 40);
        self.area.word(cell, META).store(meta, Ordering::Relaxed);
        self.area.word(cell, NEXT).store(0, Ordering::Relaxed);
        // SAFETY: `to < ranks` (checked above) and the queue table has `ranks` entries, valid
        // for our lifetime by `new`'s contract.
        let queue = unsafe { &*self.queues.add(to) };
        // AcqRel: Release publishes the cell (and its cleared link) to whoever takes over the
        // tail after us; Acquire orders our link store after the previous appender's clearing of
        // that cell's link.
        let prev = queue.tail.swap(cell, Ordering::AcqRel);
        if prev == 0 {
            // Release: the receiver reading `head` with Acquire sees the whole cell.
            queue.head.store(cell, Ordering::Release);
        } else if self.area.valid(prev) {
            // Release: as above, for a receiver that reaches us through `prev`'s link.
            self.area.word(prev, NEXT).store(cell, Ordering::Release);
        } else {
            return Err(CellSendError::Corrupt);
        }
        Ok(())
    }
}

impl CellReceiver {
    /// The receiver of local rank `me`; see [`CellSender::new`].
    ///
    /// # Safety
    /// As for [`CellSender::new`], with at most one receiver per rank.
    #[cfg(not(loom))]
    pub unsafe fn new(
        queues: *const CellQueue,
        cells: *mut u8,
        ranks: usize,
        per_rank: usize,
        cell_size: usize,
        me: usize,
    ) -> CellReceiver {
        CellReceiver::from_parts(queues, Bytes { ptr: cells }, ranks, per_rank, cell_size, me)
    }

    fn from_parts(
        queues: *const CellQueue,
        data: Bytes,
        ranks: usize,
        per_rank: usize,
        cell_size: usize,
        me: usize,
    ) -> CellReceiver {
        CellReceiver {
            area: Area::new(data, ranks, per_rank, cell_size),
            // Pointer arithmetic only; `new`'s contract makes it point into the table.
            queue: queues.wrapping_add(me),
            per_rank: per_rank as u64,
            current: 0,
            after: None,
        }
    }

    fn queue(&self) -> &CellQueue {
        // SAFETY: `new`'s contract keeps our queue valid while this value exists.
        unsafe { &*self.queue }
    }

    /// Whether `cell`, found in this rank's list, can be there: a cell of the area that its
    /// sender has marked busy. A sender sets the busy word before it publishes the cell, and
    /// only this receiver clears it, after reading the cell; so a link to a free cell (one
    /// already read, as in a cycle a foreign writer made) is a corrupted list.
    #[inline(always)]
    fn linkable(&self, cell: u64) -> bool {
        self.area.valid(cell) && self.area.word(cell, BUSY).load(Ordering::Relaxed) != 0
    }

    /// Whether nothing may be waiting (one load of a line that stays in our cache while idle).
    #[inline(always)]
    pub fn looks_empty(&self) -> bool {
        self.current == 0 && self.queue().head.load(Ordering::Relaxed) == 0
    }

    /// The sender and sequence number of the oldest message, once it can be read; `None` while
    /// the queue is empty or its oldest cell is still being linked in by a sender.
    #[inline]
    pub fn front(&mut self) -> Option<Result<Front, CorruptCells>> {
        if self.current == 0 {
            // Acquire: the cell's contents, written before the sender's Release, are visible.
            let head = self.queue().head.load(Ordering::Acquire);
            if head == 0 {
                return None;
            }
            if !self.linkable(head) {
                return Some(Err(CorruptCells));
            }
            // The list is ours now; the next sender that finds the queue empty (after we swap
            // the tail back to 0) starts a new one here.
            self.queue().head.store(0, Ordering::Relaxed);
            self.current = head;
            self.after = None;
        }
        let cell = self.current;
        if self.after.is_none() {
            // Acquire: a successor's contents are visible once its link is.
            let next = self.area.word(cell, NEXT).load(Ordering::Acquire);
            if next != 0 {
                // A cell linked to itself would hand out its message again after freeing it.
                if next == cell || !self.linkable(next) {
                    return Some(Err(CorruptCells));
                }
                self.after = Some(next);
            } else {
                // AcqRel on success: our reads of the list happen before a sender starts a new
                // one; on failure a sender has swapped in after `cell` and will link it soon.
                match self.queue().tail.compare_exchange(
                    cell,
                    0,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => self.after = Some(0),
                    Err(_) => return None,
                }
            }
        }
        let seq = self.area.word(cell, SEQ).load(Ordering::Relaxed);
        Some(Ok(Front {
            from: ((cell - 1) / self.per_rank) as usize,
            seq,
        }))
    }

    /// Hands the message of the front cell (see [`CellReceiver::front`], which must have
    /// returned it) to `f` as (handler, header, payload) borrowed from the cell, then frees it.
    #[inline]
    pub fn pop_with<R>(
        &mut self,
        f: impl FnOnce(u8, &[u8], &[u8]) -> R,
    ) -> Option<Result<R, CorruptCells>> {
        let after = self.after?;
        let cell = self.current;
        let meta = self.area.word(cell, META).load(Ordering::Relaxed);
        let len = (meta & 0xFFFF_FFFF) as usize;
        let handler = (meta >> 32) as u8;
        let hlen = ((meta >> 40) & 0xFF) as usize;
        if len > self.area.cell_size - CELL_HEADER || hlen > len {
            return Some(Err(CorruptCells));
        }
        // SAFETY: the cell was published to us by the Acquire load of its link and stays ours
        // until we clear its busy word below; `len` fits the cell (checked above).
        let r = unsafe {
            self.area.data.with_slice(self.area.body(cell), len, |b| {
                let (h, p) = b.split_at(hlen);
                f(handler, h, p)
            })
        };
        self.current = after;
        self.after = None;
        // Release: our reads of the cell happen before its owner fills it again.
        self.area.word(cell, BUSY).store(0, Ordering::Release);
        Some(Ok(r))
    }
}

/// Cells and queues on the heap (tests and loom models).
#[cfg(any(test, loom))]
pub(crate) mod heap {
    use super::*;
    use std::sync::Arc;

    /// The shared parts; kept alive while the ends are used.
    pub(crate) struct HeapCells {
        #[cfg_attr(loom, allow(dead_code))]
        pub(crate) queues: Arc<Vec<CellQueue>>,
        #[cfg(not(loom))]
        _data: Vec<[u64; 8]>,
    }

    /// Cells for `ranks` ranks with `per_rank` cells of `cell_size` bytes each: everyone's
    /// sender and receiver.
    pub(crate) fn cells(
        ranks: usize,
        per_rank: usize,
        cell_size: usize,
    ) -> (HeapCells, Vec<CellSender>, Vec<CellReceiver>) {
        let queues: Arc<Vec<CellQueue>> = Arc::new(
            (0..ranks)
                .map(|_| CellQueue {
                    head: CachePadded::new(AtomicU64::new(0)),
                    tail: CachePadded::new(AtomicU64::new(0)),
                })
                .collect(),
        );
        let qp = queues.as_ptr();
        let len = ranks * per_rank * cell_size;
        #[cfg(not(loom))]
        let mut backing = vec![[0u64; 8]; len / 64];
        #[cfg(not(loom))]
        let base = backing.as_mut_ptr() as *mut u8;
        #[cfg(not(loom))]
        let data = || Bytes { ptr: base };
        #[cfg(loom)]
        let shared = Bytes::zeroed(len);
        #[cfg(loom)]
        let data = || shared.clone();
        let senders = (0..ranks)
            .map(|me| CellSender::from_parts(qp, data(), ranks, per_rank, cell_size, me))
            .collect();
        let receivers = (0..ranks)
            .map(|me| CellReceiver::from_parts(qp, data(), ranks, per_rank, cell_size, me))
            .collect();
        (
            HeapCells {
                queues,
                #[cfg(not(loom))]
                _data: backing,
            },
            senders,
            receivers,
        )
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::heap::cells;
    use super::*;

    fn recv(r: &mut CellReceiver) -> Option<(Front, u8, Vec<u8>, Vec<u8>)> {
        let front = r.front()?.unwrap();
        let (h, hd, pl) = r
            .pop_with(|h, hd, pl| (h, hd.to_vec(), pl.to_vec()))
            .unwrap()
            .unwrap();
        Some((front, h, hd, pl))
    }

    #[test]
    fn messages_from_several_senders_arrive_whole_and_in_send_order() {
        let (_keep, mut tx, mut rx) = cells(3, 4, 256);
        assert!(rx[2].looks_empty() && rx[2].front().is_none());
        tx[0].send(2, 0, 7, b"h0", &[b"pay", b"load"]).unwrap();
        tx[1].send(2, 0, 8, b"", &[b"x"]).unwrap();
        tx[0].send(2, 1, 9, b"h1", &[]).unwrap();
        assert!(!rx[2].looks_empty());
        let got: Vec<_> = std::iter::from_fn(|| recv(&mut rx[2])).collect();
        assert_eq!(
            got,
            vec![
                (
                    Front { from: 0, seq: 0 },
                    7,
                    b"h0".to_vec(),
                    b"payload".to_vec()
                ),
                (Front { from: 1, seq: 0 }, 8, vec![], b"x".to_vec()),
                (Front { from: 0, seq: 1 }, 9, b"h1".to_vec(), vec![]),
            ]
        );
        assert!(rx[2].looks_empty());
        assert!(rx[0].front().is_none(), "nothing went to rank 0");
    }

    #[test]
    fn cells_run_out_and_come_back_when_the_receiver_is_done() {
        let (_keep, mut tx, mut rx) = cells(2, 2, 128);
        tx[0].send(1, 0, 1, b"", &[]).unwrap();
        tx[0].send(1, 1, 1, b"", &[]).unwrap();
        assert!(!tx[0].has_free_cell());
        assert_eq!(
            tx[0].send(1, 2, 1, b"", &[]),
            Err(CellSendError::NoFreeCell)
        );
        // Looking at the front does not free it; reading it does.
        rx[1].front().unwrap().unwrap();
        assert!(!tx[0].has_free_cell());
        recv(&mut rx[1]).unwrap();
        assert!(tx[0].has_free_cell());
        tx[0].send(1, 2, 1, b"", &[]).unwrap();
        assert_eq!(recv(&mut rx[1]).unwrap().0.seq, 1);
        assert_eq!(recv(&mut rx[1]).unwrap().0.seq, 2);
        assert!(recv(&mut rx[1]).is_none());
        assert_eq!(
            tx[0].send(1, 3, 1, &[0; 40], &[&[0; 25]]),
            Err(CellSendError::TooLarge),
            "65 bytes in a 128-byte cell (64 of header)"
        );
    }

    #[test]
    fn a_corrupt_link_is_an_error_not_a_panic() {
        let (keep, mut tx, mut rx) = cells(2, 2, 128);
        keep.queues[1].head.store(99, Ordering::Release);
        assert_eq!(rx[1].front(), Some(Err(CorruptCells)));
        keep.queues[1].head.store(0, Ordering::Release);
        keep.queues[1].tail.store(77, Ordering::Release);
        assert_eq!(tx[0].send(1, 0, 1, b"", &[]), Err(CellSendError::Corrupt));
    }

    #[test]
    fn a_cell_linked_to_itself_is_reported_not_read_twice() {
        let (_keep, mut tx, mut rx) = cells(2, 2, 128);
        tx[0].send(1, 0, 1, b"", &[b"once"]).unwrap();
        // Rank 0's first cell is cell 1.
        rx[1].area.word(1, NEXT).store(1, Ordering::Release);
        assert_eq!(rx[1].front(), Some(Err(CorruptCells)));
    }

    #[test]
    fn a_link_back_to_a_cell_already_read_is_reported() {
        let (_keep, mut tx, mut rx) = cells(2, 2, 128);
        tx[0].send(1, 0, 1, b"", &[b"a"]).unwrap();
        tx[0].send(1, 1, 1, b"", &[b"b"]).unwrap();
        let (front, _, _, payload) = recv(&mut rx[1]).unwrap();
        assert_eq!((front.seq, payload.as_slice()), (0, &b"a"[..]));
        // A cycle: the second cell (2) points back at the first, which the receiver has freed.
        rx[1].area.word(2, NEXT).store(1, Ordering::Release);
        assert_eq!(rx[1].front(), Some(Err(CorruptCells)));
        // A head naming a free cell is the same corruption.
        let (keep, _tx, mut rx) = cells(2, 2, 128);
        keep.queues[1].head.store(1, Ordering::Release);
        assert_eq!(rx[1].front(), Some(Err(CorruptCells)));
    }

    #[test]
    fn threads_stream_through_one_queue_without_loss_or_reordering() {
        let (keep, tx, mut rx) = cells(3, 8, 256);
        let n: u64 = if cfg!(debug_assertions) {
            50_000
        } else {
            500_000
        };
        let mut senders = tx.into_iter().take(2);
        let spawn = |mut s: CellSender, id: u8| {
            std::thread::spawn(move || {
                let mut seq = 0u64;
                while seq < n {
                    let len = (seq % 150) as usize;
                    match s.send(2, seq, id, &seq.to_le_bytes(), &[&vec![id; len]]) {
                        Ok(()) => seq += 1,
                        Err(CellSendError::NoFreeCell) => std::hint::spin_loop(),
                        Err(e) => panic!("{e:?}"),
                    }
                }
            })
        };
        let a = spawn(senders.next().unwrap(), 0);
        let b = spawn(senders.next().unwrap(), 1);
        let mut next = [0u64; 2];
        while next != [n, n] {
            let Some(front) = rx[2].front() else {
                std::hint::spin_loop();
                continue;
            };
            let front = front.unwrap();
            assert_eq!(front.seq, next[front.from]);
            rx[2]
                .pop_with(|h, hd, pl| {
                    assert_eq!(h as usize, front.from);
                    assert_eq!(u64::from_le_bytes(hd.try_into().unwrap()), front.seq);
                    assert_eq!(pl.len(), (front.seq % 150) as usize);
                    assert!(pl.iter().all(|&b| b == h));
                })
                .unwrap()
                .unwrap();
            next[front.from] += 1;
        }
        a.join().unwrap();
        b.join().unwrap();
        drop(keep);
    }
}

//! CH4 "memory objects": a slab of reusable slots for requests and other short-lived objects.
//!
//! Every nonblocking operation allocates a request, and a peer names that request again when it
//! answers (a rendezvous CTS, a synchronous-send ack). So allocation, lookup and release must be
//! O(1) and must not touch the global allocator while the pool has room, and a request id that
//! comes back over the wire must be checked, not trusted. Following the CH4 design, a pool
//! preallocates `min` objects, grows in chunks up to `max`, and can give back unused chunks
//! ("simple" garbage collection) without moving live objects, so handles stay valid.
//!
//! A [`Handle`] pairs a slot index with a generation counter that is bumped whenever the slot's
//! object is removed. A handle kept past its object's removal (a stale request id, a duplicate
//! ack, a forged header) then fails lookup instead of reaching whichever object reuses the slot.

use crate::{bail, Error, ErrorKind, Result};

/// End of the free list. Never a valid slot index, because [`PoolConfig::max`] is capped at
/// `u32::MAX`, so indices stop at `u32::MAX - 1`.
const NIL: u32 = u32::MAX;

/// A handle to a pooled object: slot index plus generation.
///
/// The generation makes a stale handle (its object removed, the slot perhaps reused) detectable
/// in O(1) without any bookkeeping per handle. Generations start at 1, so the all-zero handle is
/// never valid and raw id `0` can stand for "no request" in wire headers.
///
/// The two halves live in one `u64` (the index in the low half), not in two `u32` fields: a
/// handle made of two 4-byte stores and read back whole, as [`Handle::to_raw`] and the
/// comparisons read it, cannot be forwarded from the store buffer and waits for the stores to
/// reach the cache. `perf` put more than a third of the C library's `MPI_Irecv` samples on such
/// reads of a new request's handle.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Handle {
    raw: u64,
}

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handle")
            .field("index", &self.index())
            .field("generation", &self.generation())
            .finish()
    }
}

impl Handle {
    /// The handle of slot `index` at `generation`.
    #[inline(always)]
    const fn new(index: u32, generation: u32) -> Handle {
        Handle {
            raw: ((generation as u64) << 32) | index as u64,
        }
    }

    /// The slot's index.
    #[inline(always)]
    const fn index(self) -> u32 {
        self.raw as u32
    }

    /// The slot's generation when the handle was made.
    #[inline(always)]
    const fn generation(self) -> u32 {
        (self.raw >> 32) as u32
    }

    /// Names no object: an operation that was already complete when it started (an eager send
    /// whose bytes the transport took at once, a send to PROC_NULL). Waiting on it gives an
    /// empty status at once, with no pool entry made or freed — the nonblocking counterpart of
    /// CH3's request-less iStartMsg. Its index is never a slot, so every lookup misses.
    pub const DONE: Handle = Handle::new(NIL, 0);

    /// Packs the handle into 64 bits so it can travel in a wire header as a request id and come
    /// back in the peer's reply.
    #[inline]
    pub const fn to_raw(self) -> u64 {
        self.raw
    }

    /// Unpacks a request id received from a peer. Every `u64` is accepted: a corrupt or forged
    /// value becomes a handle that simply fails lookup, so no validation is needed here.
    #[inline]
    pub const fn from_raw(raw: u64) -> Handle {
        Handle { raw }
    }
}

/// Sizing of a [`Pool`], after CH4's memory objects: a floor kept at all times, a growth step,
/// and a hard ceiling so that a runaway producer hits an error rather than exhausting memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolConfig {
    /// Slots allocated up front and never released by [`Pool::trim`], so that steady-state
    /// traffic never allocates.
    pub min: usize,
    /// Slots added per growth step; bigger chunks mean fewer (copying) reallocations of the slab.
    pub chunk: usize,
    /// Most slots the pool will ever hold; [`Pool::insert`] beyond it fails with
    /// [`ErrorKind::Exhausted`]. At most `u32::MAX`, since handles carry a 32-bit index.
    pub max: usize,
}

impl Default for PoolConfig {
    /// Sized for a request pool: enough to start without growing, with a ceiling of a million
    /// outstanding requests per process.
    fn default() -> Self {
        PoolConfig {
            min: 64,
            chunk: 64,
            max: 1 << 20,
        }
    }
}

/// One slot of the slab. The generation lives outside the entry so that it survives the slot
/// being freed; a free slot holds the generation its next object will get.
#[derive(Debug)]
struct Slot<T> {
    generation: u32,
    entry: Entry<T>,
}

/// Free slots are linked through the slab itself, so the free list needs no memory of its own.
#[derive(Debug)]
enum Entry<T> {
    Occupied(T),
    Free { next: u32 },
}

/// A slab of objects addressed by generational [`Handle`]s.
///
/// The free list is LIFO: the slot freed last is reused first, as it is most likely still in
/// cache. Growth reserves exactly one chunk at a time so memory tracks `PoolConfig` rather than
/// `Vec`'s doubling.
#[derive(Debug)]
pub struct Pool<T> {
    slots: Vec<Slot<T>>,
    free_head: u32,
    len: usize,
    cfg: PoolConfig,
    /// Generation given to slots created by growth. Raised by [`Pool::trim`] above that of every
    /// released slot so that a slot index recreated later cannot revive a stale handle.
    fresh_generation: u32,
}

/// The generation after `g`, skipping 0 on wrap-around so the zero handle stays invalid.
///
/// After 2^32 - 1 reuses of one slot a very old handle would alias again; a request id held
/// across four billion reuses of the same slot is not a case worth paying for.
#[inline]
fn next_generation(g: u32) -> u32 {
    g.checked_add(1).unwrap_or(1)
}

#[cold]
#[inline(never)]
fn corrupt(what: &str) -> Error {
    Error::new(ErrorKind::Internal, format!("object pool corrupt: {what}"))
}

impl<T> Pool<T> {
    /// Builds a pool and allocates its `min` slots, so the first `min` inserts never allocate.
    ///
    /// Fails with [`ErrorKind::Arg`] when `chunk` is 0 (the pool could never grow), `min > max`,
    /// or `max > u32::MAX` (indices would not fit a handle), and with [`ErrorKind::Exhausted`]
    /// when the `min` slots cannot be allocated.
    pub fn new(cfg: PoolConfig) -> Result<Self> {
        if cfg.chunk == 0 {
            bail!(Arg, "pool chunk size must be at least 1");
        }
        if cfg.min > cfg.max {
            bail!(Arg, "pool min {} exceeds pool max {}", cfg.min, cfg.max);
        }
        if u64::try_from(cfg.max).map_or(true, |m| m > u64::from(u32::MAX)) {
            bail!(
                Arg,
                "pool max {} exceeds {} (handles carry a 32-bit index)",
                cfg.max,
                u32::MAX
            );
        }
        let mut pool = Pool {
            slots: Vec::new(),
            free_head: NIL,
            len: 0,
            cfg,
            fresh_generation: 1,
        };
        pool.slots.try_reserve_exact(cfg.min).map_err(|e| {
            Error::new(
                ErrorKind::Exhausted,
                format!("cannot preallocate {} pool slots: {e}", cfg.min),
            )
        })?;
        pool.append_free(cfg.min);
        Ok(pool)
    }

    /// The sizing this pool was built with, for diagnostics.
    pub fn config(&self) -> PoolConfig {
        self.cfg
    }

    /// Appends `n` free slots (room already reserved) and puts them at the head of the free list
    /// in ascending order, so that a fresh chunk is filled front to back.
    fn append_free(&mut self, n: usize) {
        let start = self.slots.len();
        let end = start + n;
        let generation = self.fresh_generation;
        for i in start..end {
            // `end <= max <= u32::MAX`, so every index here is below `NIL` and fits in u32.
            let next = if i + 1 == end {
                self.free_head
            } else {
                (i + 1) as u32
            };
            self.slots.push(Slot {
                generation,
                entry: Entry::Free { next },
            });
        }
        if n > 0 {
            self.free_head = start as u32;
        }
    }

    /// Adds one chunk of slots (fewer if `max` is closer). Kept out of line so that `insert`'s
    /// common path stays small.
    #[cold]
    #[inline(never)]
    fn grow(&mut self) -> Result<()> {
        let room = self.cfg.max.saturating_sub(self.slots.len());
        let n = self.cfg.chunk.min(room);
        if n == 0 {
            bail!(
                Exhausted,
                "object pool full: all {} slots (PoolConfig::max) hold live objects",
                self.cfg.max
            );
        }
        self.slots.try_reserve_exact(n).map_err(|e| {
            Error::new(
                ErrorKind::Exhausted,
                format!(
                    "cannot grow object pool from {} by {n} slots: {e}",
                    self.slots.len()
                ),
            )
        })?;
        self.append_free(n);
        Ok(())
    }

    /// Stores `value` and returns its handle. O(1); allocates only when every slot is in use,
    /// and then by one chunk.
    ///
    /// Fails with [`ErrorKind::Exhausted`] when `max` objects are live (or memory runs out);
    /// removing any object makes room again.
    #[inline]
    pub fn insert(&mut self, value: T) -> Result<Handle> {
        if self.free_head == NIL {
            self.grow()?;
        }
        let index = self.free_head;
        let Some(slot) = self.slots.get_mut(index as usize) else {
            return Err(corrupt("free list points past the slab"));
        };
        let Entry::Free { next } = slot.entry else {
            return Err(corrupt("free list points at a live slot"));
        };
        self.free_head = next;
        slot.entry = Entry::Occupied(value);
        self.len += 1;
        Ok(Handle::new(index, slot.generation))
    }

    /// One lookup for the completion path: `Err(())` if `h` names nothing, `Ok(None)` while
    /// `ready` says no, else removes the object — dropping it in place, so only what `extract`
    /// returns is moved out. Always inlined: it is every wait's completed-at-once check, and
    /// the compiler's own choice kept it out of the C library's `MPI_Wait`.
    #[inline(always)]
    #[allow(clippy::result_unit_err)]
    pub fn take_if<R>(
        &mut self,
        h: Handle,
        ready: impl FnOnce(&T) -> bool,
        extract: impl FnOnce(&T) -> R,
    ) -> std::result::Result<Option<R>, ()> {
        let Some(slot) = self.slots.get_mut(h.index() as usize) else {
            return Err(());
        };
        let Entry::Occupied(v) = &slot.entry else {
            return Err(());
        };
        if slot.generation != h.generation() {
            return Err(());
        }
        if !ready(v) {
            return Ok(None);
        }
        let out = extract(v);
        slot.entry = Entry::Free {
            next: self.free_head,
        };
        slot.generation = next_generation(slot.generation);
        self.free_head = h.index();
        self.len -= 1;
        Ok(Some(out))
    }

    /// The object behind `h`, or `None` if `h` is stale, forged or from another pool's range.
    #[inline]
    pub fn get(&self, h: Handle) -> Option<&T> {
        match self.slots.get(h.index() as usize) {
            Some(Slot {
                generation,
                entry: Entry::Occupied(v),
            }) if *generation == h.generation() => Some(v),
            _ => None,
        }
    }

    /// Mutable access to the object behind `h`; `None` under the same conditions as [`Pool::get`].
    #[inline]
    pub fn get_mut(&mut self, h: Handle) -> Option<&mut T> {
        match self.slots.get_mut(h.index() as usize) {
            Some(Slot {
                generation,
                entry: Entry::Occupied(v),
            }) if *generation == h.generation() => Some(v),
            _ => None,
        }
    }

    /// Takes the object out and frees its slot; `h` and every copy of it become stale at once,
    /// so a second remove (a duplicate completion) returns `None` rather than freeing twice.
    #[inline]
    pub fn remove(&mut self, h: Handle) -> Option<T> {
        let slot = self.slots.get_mut(h.index() as usize)?;
        if slot.generation != h.generation() || !matches!(slot.entry, Entry::Occupied(_)) {
            return None;
        }
        let old = std::mem::replace(
            &mut slot.entry,
            Entry::Free {
                next: self.free_head,
            },
        );
        slot.generation = next_generation(slot.generation);
        self.free_head = h.index();
        self.len -= 1;
        match old {
            Entry::Occupied(v) => Some(v),
            Entry::Free { .. } => None,
        }
    }

    /// Whether `h` names a live object: the check to run on a request id received from a peer.
    #[inline]
    pub fn contains(&self, h: Handle) -> bool {
        self.get(h).is_some()
    }

    /// Live objects, to report outstanding requests (for example at finalize).
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no object is live, e.g. to check that all requests completed.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Slots currently allocated, live or free; between `min` and `max`.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Garbage collection in CH4's "simple" mode: gives back whole chunks at the end of the slab
    /// that hold no live object, never going below `min`. Live objects are not moved, so every
    /// handle stays valid, and the cost is proportional to what is released (plus one chunk).
    ///
    /// Returns the number of slots released.
    pub fn trim(&mut self) -> usize {
        let old_len = self.slots.len();
        let (min, chunk) = (self.cfg.min, self.cfg.chunk);
        let mut new_len = old_len;
        // Chunks beyond `min` start at `min + k * chunk`; the last may be partial (capped by max).
        while new_len > min && chunk > 0 {
            let start = min + (new_len - min - 1) / chunk * chunk;
            let all_free = self.slots.get(start..new_len).is_some_and(|s| {
                s.iter()
                    .all(|slot| matches!(slot.entry, Entry::Free { .. }))
            });
            if !all_free {
                break;
            }
            new_len = start;
        }
        if new_len == old_len {
            return 0;
        }

        // Slots recreated at these indices later must not revive handles issued now.
        for slot in self.slots.get(new_len..).unwrap_or(&[]) {
            if slot.generation > self.fresh_generation {
                self.fresh_generation = slot.generation;
            }
        }

        self.unlink_free_from(new_len);
        self.slots.truncate(new_len);
        self.slots.shrink_to_fit();
        old_len - new_len
    }

    /// Drops indices `>= limit` from the free list, keeping the order of the rest (so LIFO reuse
    /// continues as before). O(free slots); bounded so that even a corrupt list cannot loop.
    fn unlink_free_from(&mut self, limit: usize) {
        let mut cur = self.free_head;
        let mut head = NIL;
        let mut prev = NIL;
        let mut steps = 0usize;
        while cur != NIL && steps <= self.slots.len() {
            steps += 1;
            let next = match self.slots.get(cur as usize) {
                Some(Slot {
                    entry: Entry::Free { next },
                    ..
                }) => *next,
                _ => break,
            };
            if (cur as usize) < limit {
                if prev == NIL {
                    head = cur;
                } else if let Some(Slot {
                    entry: Entry::Free { next: link },
                    ..
                }) = self.slots.get_mut(prev as usize)
                {
                    *link = cur;
                }
                prev = cur;
            }
            cur = next;
        }
        if let Some(Slot {
            entry: Entry::Free { next: link },
            ..
        }) = self.slots.get_mut(prev as usize)
        {
            *link = NIL;
        }
        self.free_head = head;
    }

    /// Every live object with its handle, in slot order, e.g. to cancel or report all
    /// outstanding requests.
    pub fn iter(&self) -> impl Iterator<Item = (Handle, &T)> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, slot)| match &slot.entry {
                // Slot indices are below `max <= u32::MAX`, so the cast is exact.
                Entry::Occupied(v) => Some((Handle::new(i as u32, slot.generation), v)),
                Entry::Free { .. } => None,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn cfg(min: usize, chunk: usize, max: usize) -> PoolConfig {
        PoolConfig { min, chunk, max }
    }

    /// Walks the free list and checks it covers exactly the free slots, once each.
    fn check_invariants<T>(p: &Pool<T>) {
        let mut seen = vec![false; p.slots.len()];
        let mut cur = p.free_head;
        let mut free = 0;
        while cur != NIL {
            let i = cur as usize;
            assert!(i < p.slots.len(), "free list leaves the slab");
            assert!(!seen[i], "free list cycles");
            seen[i] = true;
            free += 1;
            match p.slots[i].entry {
                Entry::Free { next } => cur = next,
                Entry::Occupied(_) => panic!("live slot on free list"),
            }
        }
        assert_eq!(free + p.len(), p.capacity());
        assert!(p.slots.iter().all(|s| s.generation != 0));
        assert!(p.capacity() >= p.cfg.min && p.capacity() <= p.cfg.max);
    }

    #[test]
    fn default_config_matches_design() {
        assert_eq!(PoolConfig::default(), cfg(64, 64, 1 << 20));
        let p: Pool<u8> = Pool::new(PoolConfig::default()).unwrap();
        assert_eq!(p.capacity(), 64);
        assert!(p.is_empty());
        assert_eq!(p.config(), PoolConfig::default());
    }

    #[test]
    fn bad_configs_are_rejected() {
        for bad in [cfg(0, 0, 10), cfg(11, 4, 10)] {
            let e = Pool::<u8>::new(bad).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Arg, "{bad:?}");
        }
        if let Some(too_big) = (u32::MAX as usize).checked_add(1) {
            let e = Pool::<u8>::new(cfg(0, 1, too_big)).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Arg);
            assert!(e.detail().contains("32-bit"));
        }
        // The largest legal max is fine as long as min is modest.
        let p = Pool::<u8>::new(cfg(0, 1, u32::MAX as usize)).unwrap();
        assert_eq!(p.capacity(), 0);
    }

    #[test]
    fn insert_get_remove_roundtrip() {
        let mut p = Pool::new(cfg(4, 4, 16)).unwrap();
        let a = p.insert("a").unwrap();
        let b = p.insert("b").unwrap();
        assert_ne!(a, b);
        assert_eq!(p.get(a), Some(&"a"));
        *p.get_mut(b).unwrap() = "B";
        assert_eq!(p.get(b), Some(&"B"));
        assert_eq!(p.len(), 2);
        assert_eq!(p.remove(a), Some("a"));
        assert_eq!(p.len(), 1);
        assert!(!p.contains(a));
        assert!(p.contains(b));
        check_invariants(&p);
    }

    #[test]
    fn stale_handles_fail_even_after_slot_reuse() {
        let mut p = Pool::new(cfg(1, 1, 1)).unwrap();
        let old = p.insert(1u32).unwrap();
        assert_eq!(p.remove(old), Some(1));
        assert_eq!(p.remove(old), None, "double remove must not free twice");
        let new = p.insert(2u32).unwrap();
        assert_eq!(old.index(), new.index(), "the only slot is reused");
        assert_ne!(old, new);
        assert_eq!(p.get(old), None);
        assert_eq!(p.get_mut(old), None);
        assert_eq!(p.remove(old), None);
        assert!(!p.contains(old));
        assert_eq!(p.get(new), Some(&2));
        check_invariants(&p);
    }

    #[test]
    fn zero_handle_is_never_valid() {
        let mut p = Pool::new(cfg(1, 1, 1)).unwrap();
        let h = p.insert(7u8).unwrap();
        assert_eq!(h.index(), 0);
        assert!(h.generation() >= 1);
        assert!(!p.contains(Handle::from_raw(0)));
        assert_eq!(p.remove(Handle::from_raw(0)), None);
        assert_eq!(p.get(h), Some(&7));
    }

    #[test]
    fn free_list_is_lifo() {
        let mut p = Pool::new(cfg(8, 8, 8)).unwrap();
        let hs: Vec<_> = (0..8).map(|i| p.insert(i).unwrap()).collect();
        // A fresh chunk fills front to back.
        assert!(hs.iter().enumerate().all(|(i, h)| h.index() as usize == i));
        p.remove(hs[2]);
        p.remove(hs[5]);
        assert_eq!(p.insert(50).unwrap().index(), 5);
        assert_eq!(p.insert(20).unwrap().index(), 2);
        check_invariants(&p);
    }

    #[test]
    fn grows_in_chunks_up_to_max() {
        let mut p = Pool::new(cfg(2, 3, 10)).unwrap();
        assert_eq!(p.capacity(), 2);
        let mut caps = Vec::new();
        for i in 0..10 {
            p.insert(i).unwrap();
            caps.push(p.capacity());
        }
        assert_eq!(caps, [2, 2, 5, 5, 5, 8, 8, 8, 10, 10]);
        check_invariants(&p);
    }

    #[test]
    fn no_allocation_while_free_slots_remain() {
        let mut p = Pool::new(cfg(16, 16, 64)).unwrap();
        let base = (p.slots.as_ptr(), p.slots.capacity());
        let hs: Vec<_> = (0..16).map(|i| p.insert(i).unwrap()).collect();
        for h in &hs[..8] {
            p.remove(*h);
        }
        for i in 0..8 {
            p.insert(i).unwrap();
        }
        assert_eq!((p.slots.as_ptr(), p.slots.capacity()), base);
        // Growth reserves exactly one chunk.
        p.insert(99).unwrap();
        assert_eq!(p.slots.capacity(), 32);
    }

    #[test]
    fn exhaustion_is_an_error_and_recoverable() {
        let mut p = Pool::new(cfg(0, 2, 5)).unwrap();
        let hs: Vec<_> = (0..5).map(|i| p.insert(i).unwrap()).collect();
        assert_eq!(p.capacity(), 5, "last chunk is cut to max");
        for _ in 0..3 {
            let e = p.insert(99).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Exhausted);
            assert!(e.detail().contains('5'), "{e}");
        }
        assert_eq!(p.len(), 5);
        assert_eq!(p.remove(hs[3]), Some(3));
        let h = p.insert(42).unwrap();
        assert_eq!(p.get(h), Some(&42));
        assert!(p.insert(43).is_err());
        check_invariants(&p);
    }

    #[test]
    fn ten_thousand_live_objects() {
        let mut p = Pool::new(PoolConfig::default()).unwrap();
        let hs: Vec<_> = (0..10_000u64).map(|i| p.insert(i * 3).unwrap()).collect();
        assert_eq!(p.len(), 10_000);
        assert_eq!(p.capacity(), 10_048, "64 + 156 chunks of 64");
        for (i, h) in hs.iter().enumerate() {
            assert_eq!(p.get(*h), Some(&(i as u64 * 3)));
        }
        let listed: Vec<_> = p.iter().map(|(h, v)| (h, *v)).collect();
        assert_eq!(listed.len(), 10_000);
        assert!(listed.iter().all(|(h, v)| p.get(*h) == Some(v)));
        for h in hs.iter().step_by(2) {
            assert!(p.remove(*h).is_some());
        }
        assert_eq!(p.len(), 5_000);
        check_invariants(&p);
    }

    #[test]
    fn raw_roundtrip_and_garbage() {
        let mut p = Pool::new(cfg(4, 4, 64)).unwrap();
        let hs: Vec<_> = (0..20).map(|i| p.insert(i).unwrap()).collect();
        for h in &hs {
            assert_eq!(Handle::from_raw(h.to_raw()), *h);
        }
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let fixed = [0, 1, u64::MAX, u64::from(u32::MAX), 1 << 32, (1 << 32) | 19];
        for raw in fixed.into_iter().chain((0..10_000).map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        })) {
            let h = Handle::from_raw(raw);
            let legit = hs.contains(&h);
            assert_eq!(p.contains(h), legit, "raw {raw:#x}");
            assert_eq!(p.get(h).is_some(), legit);
            assert_eq!(p.get_mut(h).is_some(), legit);
            if !legit {
                assert_eq!(p.remove(h), None);
            }
        }
        assert_eq!(p.len(), 20);
        check_invariants(&p);
    }

    #[test]
    fn generation_wraps_past_zero() {
        let mut p = Pool::new(cfg(1, 1, 1)).unwrap();
        p.slots[0].generation = u32::MAX;
        let h = p.insert(1u8).unwrap();
        assert_eq!(h.generation(), u32::MAX);
        p.remove(h);
        assert_eq!(p.slots[0].generation, 1, "0 is skipped");
        let h2 = p.insert(2u8).unwrap();
        assert_eq!(h2.generation(), 1);
        assert!(!p.contains(h));
        assert!(!p.contains(Handle::from_raw(0)));
    }

    #[test]
    fn trim_releases_free_tail_chunks_and_keeps_live_objects() {
        let mut p = Pool::new(cfg(4, 4, 64)).unwrap();
        let hs: Vec<_> = (0..20).map(|i| p.insert(i).unwrap()).collect();
        assert_eq!(p.capacity(), 20);
        assert_eq!(p.trim(), 0, "nothing free");
        // Free the last two chunks (slots 12..20) and part of the one before.
        for h in &hs[10..] {
            p.remove(*h);
        }
        assert_eq!(p.trim(), 8);
        assert_eq!(p.capacity(), 12);
        check_invariants(&p);
        for (i, h) in hs.iter().enumerate() {
            assert_eq!(p.get(*h).copied(), (i < 10).then_some(i));
        }
        // The free slots 10 and 11 are still reusable, LIFO (11 was freed last).
        assert_eq!(p.insert(110).unwrap().index(), 11);
        assert_eq!(p.insert(100).unwrap().index(), 10);
        assert_eq!(p.capacity(), 12);
        check_invariants(&p);
    }

    #[test]
    fn trim_stops_at_min_and_at_live_objects() {
        let mut p = Pool::new(cfg(4, 4, 64)).unwrap();
        let hs: Vec<_> = (0..16).map(|i| p.insert(i).unwrap()).collect();
        // A live object in the last chunk pins it, even if earlier chunks are free.
        for h in &hs[..15] {
            p.remove(*h);
        }
        assert_eq!(p.trim(), 0);
        p.remove(hs[15]);
        assert_eq!(p.trim(), 12);
        assert_eq!(p.capacity(), 4, "never below min");
        assert_eq!(p.trim(), 0);
        check_invariants(&p);
    }

    #[test]
    fn trim_handles_partial_last_chunk() {
        let mut p = Pool::new(cfg(1, 4, 7)).unwrap();
        let hs: Vec<_> = (0..7).map(|i| p.insert(i).unwrap()).collect();
        assert_eq!(p.capacity(), 7);
        for h in &hs[5..] {
            p.remove(*h);
        }
        assert_eq!(p.trim(), 2, "the partial chunk 5..7");
        assert_eq!(p.capacity(), 5);
        check_invariants(&p);
        // Regrowth restores the same chunk boundaries.
        p.insert(5).unwrap();
        p.insert(6).unwrap();
        assert_eq!(p.capacity(), 7);
        check_invariants(&p);
    }

    #[test]
    fn trimmed_then_regrown_slots_do_not_revive_stale_handles() {
        let mut p = Pool::new(cfg(0, 2, 8)).unwrap();
        let a = p.insert('a').unwrap();
        let b = p.insert('b').unwrap();
        p.remove(a);
        p.remove(b);
        assert_eq!(p.trim(), 2);
        assert_eq!(p.capacity(), 0);
        let c = p.insert('c').unwrap();
        let d = p.insert('d').unwrap();
        assert_eq!((c.index(), d.index()), (a.index(), b.index()));
        for stale in [a, b] {
            assert!(!p.contains(stale));
            assert_eq!(p.remove(stale), None);
        }
        assert_eq!(p.get(c), Some(&'c'));
        assert_eq!(p.get(d), Some(&'d'));
        check_invariants(&p);
    }

    #[test]
    fn iter_lists_live_objects_in_slot_order() {
        let mut p = Pool::new(cfg(2, 2, 16)).unwrap();
        let hs: Vec<_> = (0..6).map(|i| p.insert(i).unwrap()).collect();
        p.remove(hs[1]);
        p.remove(hs[4]);
        let got: Vec<_> = p.iter().collect();
        assert_eq!(
            got,
            vec![(hs[0], &0), (hs[2], &2), (hs[3], &3), (hs[5], &5)]
        );
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u16),
        /// Remove the n-th handle ever issued (modulo), which may be stale.
        Remove(usize),
        Get(usize),
        Mutate(usize, u16),
        Forged(u64),
        Trim,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => any::<u16>().prop_map(Op::Insert),
            3 => any::<usize>().prop_map(Op::Remove),
            2 => any::<usize>().prop_map(Op::Get),
            1 => (any::<usize>(), any::<u16>()).prop_map(|(i, v)| Op::Mutate(i, v)),
            1 => any::<u64>().prop_map(Op::Forged),
            1 => Just(Op::Trim),
        ]
    }

    proptest! {
        #[test]
        fn behaves_like_a_hashmap(
            min in 0usize..6,
            chunk in 1usize..5,
            extra in 0usize..12,
            ops in proptest::collection::vec(op(), 0..200),
        ) {
            let max = min + extra;
            let mut p = Pool::new(cfg(min, chunk, max)).unwrap();
            let mut model: HashMap<Handle, u16> = HashMap::new();
            let mut issued: Vec<Handle> = Vec::new();
            for op in ops {
                match op {
                    Op::Insert(v) => match p.insert(v) {
                        Ok(h) => {
                            prop_assert!(model.len() < max);
                            prop_assert!(!issued.contains(&h), "handle reissued");
                            model.insert(h, v);
                            issued.push(h);
                        }
                        Err(e) => {
                            prop_assert_eq!(e.kind(), ErrorKind::Exhausted);
                            prop_assert_eq!(model.len(), max);
                        }
                    },
                    Op::Remove(i) if !issued.is_empty() => {
                        let h = issued[i % issued.len()];
                        prop_assert_eq!(p.remove(h), model.remove(&h));
                    }
                    Op::Get(i) if !issued.is_empty() => {
                        let h = issued[i % issued.len()];
                        prop_assert_eq!(p.get(h), model.get(&h));
                        prop_assert_eq!(p.contains(h), model.contains_key(&h));
                    }
                    Op::Mutate(i, v) if !issued.is_empty() => {
                        let h = issued[i % issued.len()];
                        match (p.get_mut(h), model.get_mut(&h)) {
                            (Some(a), Some(b)) => { *a = v; *b = v; }
                            (None, None) => {}
                            (a, b) => prop_assert!(false, "get_mut {:?} vs model {:?}", a, b),
                        }
                    }
                    Op::Forged(raw) => {
                        let h = Handle::from_raw(raw);
                        prop_assert_eq!(p.get(h), model.get(&h));
                    }
                    Op::Trim => {
                        let before = p.capacity();
                        let released = p.trim();
                        prop_assert_eq!(p.capacity(), before - released);
                    }
                    _ => {}
                }
                prop_assert_eq!(p.len(), model.len());
                check_invariants(&p);
            }
            let mut listed: Vec<_> = p.iter().map(|(h, v)| (h, *v)).collect();
            let mut expected: Vec<_> = model.into_iter().collect();
            listed.sort_by_key(|(h, _)| h.to_raw());
            expected.sort_by_key(|(h, _)| h.to_raw());
            prop_assert_eq!(listed, expected);
        }
    }
}

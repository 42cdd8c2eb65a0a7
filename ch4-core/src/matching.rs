//! MPI matching queues: posted receives and unexpected messages.
//!
//! MPICH keeps both queues as linear lists, so a process with 10,000 outstanding receives pays
//! 10,000 envelope comparisons for every arriving message. Here every entry also sits in a bin
//! keyed by its envelope, so the exact case costs a few hash lookups whatever the depth. MPI's
//! non-overtaking rule still holds: posted receives carry a queue-wide sequence number so the
//! earliest of several candidate bins wins, and unexpected messages keep a per-context arrival
//! list for wildcard receives.
//!
//! Both queues share one private slab of nodes linked into intrusive doubly linked lists by
//! `u32` index. That keeps removal by id O(1), needs no `unsafe`, and lets a warmed-up queue run
//! without allocating: freed slots are reused and emptied bins leave their capacity in the map.

use rustc_hash::FxHashMap;

use crate::types::{ContextId, Envelope, ANY_SOURCE, ANY_TAG};

/// "No node": the end of a list, or an empty free list.
const NIL: u32 = u32::MAX;

/// One node's place in one list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Link {
    prev: u32,
    next: u32,
}

impl Link {
    const UNLINKED: Link = Link {
        prev: NIL,
        next: NIL,
    };
}

/// The two ends of one intrusive list; stored in the bin maps, not in the slab.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ends {
    head: u32,
    tail: u32,
}

impl Ends {
    const EMPTY: Ends = Ends {
        head: NIL,
        tail: NIL,
    };
}

/// Everything the matching walks look at, kept apart from the payloads so that a walk over a
/// long list touches only these small records.
#[derive(Debug, Clone, Copy)]
struct Meta<const L: usize> {
    /// Bumped each time the slot is freed so that old ids stop resolving.
    generation: u32,
    /// Queue-wide order of insertion; decides between candidate bins.
    seq: u64,
    env: Envelope,
    /// One link per list the node is on. While the slot is free, `links[0].next` chains the
    /// free list.
    links: [Link; L],
}

/// Slot index plus the generation it had when handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct RawId {
    index: u32,
    generation: u32,
}

/// Slab of nodes that can each sit on `L` intrusive lists (`L >= 1`).
///
/// The slab never frees memory and never moves a node, so indices stay valid for as long as
/// the node lives; a list only needs its [`Ends`] and the links inside the nodes.
#[derive(Debug, Clone)]
struct Slab<T, const L: usize> {
    meta: Vec<Meta<L>>,
    /// `Some` exactly for live slots; this is what makes a slot "occupied".
    payloads: Vec<Option<T>>,
    free_head: u32,
    len: usize,
    next_seq: u64,
}

impl<T, const L: usize> Slab<T, L> {
    const fn new() -> Self {
        Slab {
            meta: Vec::new(),
            payloads: Vec::new(),
            free_head: NIL,
            len: 0,
            next_seq: 0,
        }
    }

    /// Stores a node, reusing a freed slot when there is one. Links start unlinked.
    #[inline(always)] // measured: -17 instructions per message on the window pattern
    fn insert(&mut self, env: Envelope, payload: T) -> RawId {
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        let index = if self.free_head != NIL {
            let index = self.free_head;
            let m = &mut self.meta[index as usize];
            self.free_head = m.links[0].next;
            m.seq = seq;
            m.env = env;
            m.links = [Link::UNLINKED; L];
            self.payloads[index as usize] = Some(payload);
            index
        } else {
            // NIL is reserved as the list terminator, so the index space ends one short of it.
            // Reaching it needs billions of queued entries; like `Vec`'s capacity overflow it is
            // not something a caller can provoke without first running out of memory.
            let index = match u32::try_from(self.meta.len()) {
                Ok(i) if i != NIL => i,
                _ => panic!("matching queue holds more than 2^32 - 2 entries"),
            };
            self.meta.push(Meta {
                generation: 0,
                seq,
                env,
                links: [Link::UNLINKED; L],
            });
            self.payloads.push(Some(payload));
            index
        };
        self.len += 1;
        RawId {
            index,
            generation: self.meta[index as usize].generation,
        }
    }

    /// The slot of a live id; `None` for ids that are out of range, freed or reused since.
    fn resolve(&self, id: RawId) -> Option<usize> {
        let i = id.index as usize;
        match (self.meta.get(i), self.payloads.get(i)) {
            (Some(m), Some(Some(_))) if m.generation == id.generation => Some(i),
            _ => None,
        }
    }

    /// The id of a live slot (found by a list walk rather than handed in by a caller).
    fn id_of(&self, index: u32) -> RawId {
        RawId {
            index,
            generation: self.meta[index as usize].generation,
        }
    }

    fn payload(&self, i: usize) -> Option<&T> {
        self.payloads.get(i).and_then(Option::as_ref)
    }

    fn payload_mut(&mut self, i: usize) -> Option<&mut T> {
        self.payloads.get_mut(i).and_then(Option::as_mut)
    }

    /// Frees a slot that is already off every list, handing back what it held.
    fn release(&mut self, index: u32) -> Option<(Envelope, T)> {
        let i = index as usize;
        let payload = self.payloads.get_mut(i)?.take()?;
        self.len -= 1;
        let m = &mut self.meta[i];
        if m.generation == u32::MAX {
            // Reusing the slot would wrap the generation and let an ancient id resolve again.
            // Retiring it costs one slot per 2^32 reuses, which is nothing.
        } else {
            m.generation += 1;
            m.links[0].next = self.free_head;
            self.free_head = index;
        }
        Some((m.env, payload))
    }

    fn push_back(&mut self, list: usize, ends: &mut Ends, index: u32) {
        self.meta[index as usize].links[list] = Link {
            prev: ends.tail,
            next: NIL,
        };
        if ends.tail == NIL {
            ends.head = index;
        } else {
            self.meta[ends.tail as usize].links[list].next = index;
        }
        ends.tail = index;
    }

    fn unlink(&mut self, list: usize, ends: &mut Ends, index: u32) {
        let Link { prev, next } = self.meta[index as usize].links[list];
        if prev == NIL {
            ends.head = next;
        } else {
            self.meta[prev as usize].links[list].next = next;
        }
        if next == NIL {
            ends.tail = prev;
        } else {
            self.meta[next as usize].links[list].prev = prev;
        }
        self.meta[index as usize].links[list] = Link::UNLINKED;
    }

    /// Takes the front node off list `list` and frees its slot, in one pass over its record
    /// (what `unlink` + `id_of` + `release` do in three). Only for a slab whose nodes sit on
    /// that one list (`L == 1`).
    #[inline]
    fn pop_front(&mut self, list: usize, ends: &mut Ends) -> Option<(RawId, Envelope, T)> {
        debug_assert_eq!(L, 1);
        let index = ends.head;
        let m = self.meta.get_mut(index as usize)?;
        let payload = self.payloads.get_mut(index as usize)?.take()?;
        let next = m.links[list].next;
        let id = RawId {
            index,
            generation: m.generation,
        };
        let env = m.env;
        m.links[list] = Link::UNLINKED;
        if m.generation != u32::MAX {
            // As in `release`: a slot whose generation would wrap is retired instead.
            m.generation += 1;
            m.links[0].next = self.free_head;
            self.free_head = index;
        }
        self.len -= 1;
        ends.head = next;
        if next == NIL {
            ends.tail = NIL;
        } else if let Some(n) = self.meta.get_mut(next as usize) {
            n.links[list].prev = NIL;
        }
        Some((id, env, payload))
    }

    /// Unlinks `index` from the list `list` whose ends live in `map` under `key`. An emptied bin
    /// stays in the map — removing it and inserting it again on the next post of the same
    /// envelope was most of the cost of a match — and [`tidy`] bounds how many pile up.
    fn unlink_keyed<K: std::hash::Hash + Eq>(
        &mut self,
        list: usize,
        map: &mut FxHashMap<K, Ends>,
        key: K,
        index: u32,
    ) {
        if let Some(ends) = map.get_mut(&key) {
            self.unlink(list, ends, index);
        } else {
            debug_assert!(false, "node {index} is not on the list its key names");
        }
    }
}

/// Keeps a bin map from growing without bound: emptied when its queue empties (keeping its
/// allocation), and pruned of empty bins once they outnumber the live entries. Amortized O(1)
/// per removal.
#[inline(always)]
fn tidy<K>(map: &mut FxHashMap<K, Ends>, live: usize) {
    if live == 0 {
        if !map.is_empty() {
            map.clear();
        }
    } else if map.len() > 2 * live + 64 {
        map.retain(|_, e| e.head != NIL);
    }
}

/// The posted queue's bins: one kept in a field — the envelope most recently posted to while
/// its bin was free — and the rest in a hash map. A window of receives with one envelope (the
/// message-rate pattern: 64 irecvs from one peer, one tag) then posts and matches without
/// hashing at all. Invariant: a key is the hot one or in the map, never both.
#[derive(Debug, Clone)]
struct PostedBins {
    hot_key: Envelope,
    hot: Ends,
    map: FxHashMap<Envelope, Ends>,
}

impl PostedBins {
    /// No real envelope has these fields (tags and sources are never below -2).
    const NO_KEY: Envelope = Envelope {
        context: u32::MAX,
        source: i32::MIN,
        tag: i32::MIN,
    };

    fn new() -> Self {
        PostedBins {
            hot_key: Self::NO_KEY,
            hot: Ends::EMPTY,
            map: FxHashMap::default(),
        }
    }

    #[inline(always)]
    fn get(&self, key: &Envelope) -> Option<&Ends> {
        if *key == self.hot_key {
            Some(&self.hot)
        } else {
            self.map_get(key)
        }
    }

    #[inline(always)]
    fn get_mut(&mut self, key: &Envelope) -> Option<&mut Ends> {
        if *key == self.hot_key {
            Some(&mut self.hot)
        } else {
            self.map_get_mut(key)
        }
    }

    // The map's lookups are kept out of line: inlined, the compiler computed the key's hash
    // (and the probe's byte mask) ahead of the hot-key test, on every message — about 20
    // instructions of an 8-byte message's delivery (callgrind, window pattern).
    #[inline(never)]
    fn map_get(&self, key: &Envelope) -> Option<&Ends> {
        self.map.get(key)
    }

    #[inline(never)]
    fn map_get_mut(&mut self, key: &Envelope) -> Option<&mut Ends> {
        self.map.get_mut(key)
    }

    /// The bin of `key`, created empty if needed; becomes the hot one when the hot bin is free.
    #[inline(always)]
    fn entry(&mut self, key: Envelope) -> &mut Ends {
        if key == self.hot_key {
            return &mut self.hot;
        }
        self.entry_cold(key)
    }

    #[inline(never)]
    fn entry_cold(&mut self, key: Envelope) -> &mut Ends {
        if self.hot.head == NIL {
            self.hot = self.map.remove(&key).unwrap_or(Ends::EMPTY);
            self.hot_key = key;
            return &mut self.hot;
        }
        self.map.entry(key).or_insert(Ends::EMPTY)
    }

    /// See [`tidy`]; the hot bin is a field and costs nothing to keep.
    #[inline(always)]
    fn tidy(&mut self, live: usize) {
        tidy(&mut self.map, live);
    }

    /// Whether no bin holds a receive and the map keeps no emptied bins.
    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.map.is_empty() && self.hot.head == NIL
    }

    #[cfg(test)]
    fn capacity(&self) -> usize {
        self.map.capacity()
    }
}

/// Which of the four wildcard shapes an envelope has: bit 1 = any source, bit 0 = any tag.
#[inline(always)]
fn shape(env: &Envelope) -> usize {
    (usize::from(env.source == ANY_SOURCE) << 1) | usize::from(env.tag == ANY_TAG)
}

/// Names one posted receive, so that it can be cancelled or its payload reached later.
///
/// Carries a generation: once the receive is matched or removed the id never resolves again,
/// even after its slot is reused, so a late cancel cannot hit someone else's receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PostedId(RawId);

/// The posted-receive queue: receives waiting for a message, wildcards allowed.
///
/// Each receive sits in the bin of its own envelope, wildcards included. A concrete message can
/// only be accepted by four bins (exact, any tag, any source, both), and the front of each bin
/// is its earliest receive, so the earliest acceptable receive overall is the front with the
/// smallest sequence number: four hash lookups at most, whatever the depth.
#[derive(Debug, Clone)]
pub struct PostedQueue<P> {
    slab: Slab<P, 1>,
    /// The one posted receive when it is alone (NIL otherwise), kept off the bins: with a
    /// single receive outstanding — the common case of blocking and ping-pong code — posting
    /// and matching touch no hash map at all. Invariant: `solo != NIL` implies it is the only
    /// entry, so order is trivially kept; a second post first moves it into its bin.
    solo: u32,
    bins: PostedBins,
    /// Live receives per [`shape`], so a message skips the lookups of shapes nobody posted
    /// (typically all three wildcard ones).
    shape_count: [usize; 4],
}

impl<P> Default for PostedQueue<P> {
    fn default() -> Self {
        Self::new()
    }
}

impl<P> PostedQueue<P> {
    /// An empty queue; allocates nothing until the first receive is posted.
    pub fn new() -> Self {
        PostedQueue {
            slab: Slab::new(),
            solo: NIL,
            bins: PostedBins::new(),
            shape_count: [0; 4],
        }
    }

    /// Queues a receive behind every receive posted before it.
    ///
    /// # Panics
    ///
    /// Only if the queue would exceed 2^32 - 2 live entries.
    #[inline(always)]
    pub fn post(&mut self, want: Envelope, payload: P) -> PostedId {
        if self.slab.len == 0 {
            let id = self.slab.insert(want, payload);
            self.solo = id.index;
            return PostedId(id);
        }
        if self.solo != NIL {
            self.spill_solo();
        }
        let id = self.slab.insert(want, payload);
        let ends = self.bins.entry(want);
        self.slab.push_back(0, ends, id.index);
        self.shape_count[shape(&want)] += 1;
        PostedId(id)
    }

    /// Removes the earliest-posted receive that accepts `msg`, as MPI's ordering rule demands
    /// when a message arrives.
    pub fn take_match(&mut self, msg: &Envelope) -> Option<(PostedId, Envelope, P)> {
        if self.solo != NIL {
            let index = self.solo;
            if !self.slab.meta.get(index as usize)?.env.accepts(msg) {
                return None; // the only receive does not want it
            }
            self.solo = NIL;
            let id = PostedId(self.slab.id_of(index));
            let (env, payload) = self.slab.release(index)?;
            return Some((id, env, payload));
        }
        if self.slab.len == 0 {
            return None;
        }
        if self.shape_count[0] == self.slab.len {
            // Only exact receives are posted (the common case): one lookup finds the bin and
            // its front is the answer; pop it in place instead of looking the bin up again.
            let ends = self.bins.get_mut(msg)?;
            let (id, env, payload) = self.slab.pop_front(0, ends)?;
            self.shape_count[0] -= 1;
            self.bins.tidy(self.slab.len);
            return Some((PostedId(id), env, payload));
        }
        let index = self.earliest_in_bins(msg)?;
        let id = PostedId(self.slab.id_of(index));
        let (env, payload) = self.unlink_release(index)?;
        Some((id, env, payload))
    }

    /// The receive [`take_match`](Self::take_match) would take for `msg`, left in place: for a
    /// transport that must know where a message's data would go before it commits to reading
    /// it there (a request-to-send whose first piece a socket reads straight into the receive
    /// buffer), and otherwise leaves the message to the ordinary path.
    pub fn find(&self, msg: &Envelope) -> Option<(PostedId, &P)> {
        let index = if self.solo != NIL {
            let index = self.solo;
            if !self.slab.meta.get(index as usize)?.env.accepts(msg) {
                return None;
            }
            index
        } else if self.slab.len == 0 {
            return None;
        } else {
            self.earliest_in_bins(msg)?
        };
        let id = PostedId(self.slab.id_of(index));
        Some((id, self.slab.payload(index as usize)?))
    }

    /// The earliest-posted binned receive that accepts `msg`: the front of each of the (up to
    /// four) bins whose shape someone posted, the smallest sequence number winning.
    fn earliest_in_bins(&self, msg: &Envelope) -> Option<u32> {
        let keys = [
            *msg,
            Envelope {
                tag: ANY_TAG,
                ..*msg
            },
            Envelope {
                source: ANY_SOURCE,
                ..*msg
            },
            Envelope {
                source: ANY_SOURCE,
                tag: ANY_TAG,
                ..*msg
            },
        ];
        let mut best: Option<(u32, u64)> = None;
        for key in &keys {
            if self.shape_count[shape(key)] == 0 {
                continue;
            }
            if let Some(ends) = self.bins.get(key).filter(|e| e.head != NIL) {
                let seq = self.slab.meta[ends.head as usize].seq;
                match best {
                    Some((_, best_seq)) if best_seq <= seq => {}
                    _ => best = Some((ends.head, seq)),
                }
            }
        }
        best.map(|(index, _)| index)
    }

    /// Cancels a receive. `None` when it was already matched or removed, which is how a cancel
    /// that lost the race against an arriving message finds out.
    pub fn remove(&mut self, id: PostedId) -> Option<(Envelope, P)> {
        let i = self.slab.resolve(id.0)? as u32;
        if i == self.solo {
            self.solo = NIL;
            return self.slab.release(i);
        }
        self.unlink_release(i)
    }

    /// Moves the solo receive (there is one: `self.solo != NIL`) into its bin, before a second
    /// receive joins the queue (out of line: a window of receives does it once, at its second
    /// post).
    #[cold]
    #[inline(never)]
    fn spill_solo(&mut self) {
        let index = self.solo;
        self.solo = NIL;
        let env = self.slab.meta[index as usize].env;
        let ends = self.bins.entry(env);
        self.slab.push_back(0, ends, index);
        self.shape_count[shape(&env)] += 1;
    }

    /// The payload of a receive still waiting; `None` once it is gone.
    pub fn get(&self, id: PostedId) -> Option<&P> {
        let i = self.slab.resolve(id.0)?;
        self.slab.payload(i)
    }

    /// Mutable access to a waiting receive's payload, for updating it in place.
    pub fn get_mut(&mut self, id: PostedId) -> Option<&mut P> {
        let i = self.slab.resolve(id.0)?;
        self.slab.payload_mut(i)
    }

    /// How many receives are waiting.
    pub fn len(&self) -> usize {
        self.slab.len
    }

    /// Whether no receive is waiting, the cheap test before bothering to match.
    pub fn is_empty(&self) -> bool {
        self.slab.len == 0
    }

    fn unlink_release(&mut self, index: u32) -> Option<(Envelope, P)> {
        let env = self.slab.meta.get(index as usize)?.env;
        if let Some(ends) = self.bins.get_mut(&env) {
            self.slab.unlink(0, ends, index);
        } else {
            debug_assert!(false, "posted node {index} is not in its bin");
        }
        let out = self.slab.release(index)?;
        self.shape_count[shape(&env)] -= 1;
        self.bins.tidy(self.slab.len);
        Some(out)
    }
}

/// Names one unexpected message, so that it can be removed or inspected after a probe.
///
/// Carries a generation: once the message is taken the id never resolves again, even after
/// its slot is reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UnexpectedId(RawId);

/// List index of a node's exact bin (context, source, tag).
const BIN: usize = 0;
/// List index of a node's per-context arrival list.
const CTX: usize = 1;

/// The unexpected-message queue: messages that arrived before any receive accepted them.
///
/// Each message is on two lists: the bin of its exact envelope, which answers an exact receive
/// in O(1), and its context's arrival list, which a wildcard receive walks to the first message
/// it accepts. That walk is linear in the number of unexpected messages of that one context: a
/// wildcard must see arrival order across all sources and tags, and programs that pile up
/// thousands of unexpected messages usually receive them by exact envelope anyway.
#[derive(Debug, Clone)]
pub struct UnexpectedQueue<U> {
    slab: Slab<U, 2>,
    bins: FxHashMap<Envelope, Ends>,
    contexts: FxHashMap<ContextId, Ends>,
}

impl<U> Default for UnexpectedQueue<U> {
    fn default() -> Self {
        Self::new()
    }
}

impl<U> UnexpectedQueue<U> {
    /// An empty queue; allocates nothing until the first message arrives.
    pub fn new() -> Self {
        UnexpectedQueue {
            slab: Slab::new(),
            bins: FxHashMap::default(),
            contexts: FxHashMap::default(),
        }
    }

    /// Queues a message that arrived behind every message that arrived before it.
    ///
    /// # Panics
    ///
    /// Only if the queue would exceed 2^32 - 2 live entries.
    pub fn push(&mut self, msg: Envelope, payload: U) -> UnexpectedId {
        let id = self.slab.insert(msg, payload);
        let bin = self.bins.entry(msg).or_insert(Ends::EMPTY);
        self.slab.push_back(BIN, bin, id.index);
        let ctx = self.contexts.entry(msg.context).or_insert(Ends::EMPTY);
        self.slab.push_back(CTX, ctx, id.index);
        UnexpectedId(id)
    }

    /// Removes the earliest-arrived message that `want` accepts, as MPI's ordering rule
    /// demands when a receive is posted. Exact `want`: O(1); wildcard: see the type's docs.
    #[inline(always)]
    pub fn take_match(&mut self, want: &Envelope) -> Option<(UnexpectedId, Envelope, U)> {
        // Nothing waiting — the common case when receives are posted ahead — costs no call.
        if self.slab.len == 0 {
            return None;
        }
        self.take_match_queued(want)
    }

    /// [`UnexpectedQueue::take_match`] once something is queued.
    #[inline(never)]
    fn take_match_queued(&mut self, want: &Envelope) -> Option<(UnexpectedId, Envelope, U)> {
        let index = self.locate(want)?;
        let id = UnexpectedId(self.slab.id_of(index));
        let (env, payload) = self.unlink_release(index)?;
        Some((id, env, payload))
    }

    /// The message [`take_match`](Self::take_match) would take, left in place: MPI_Iprobe
    /// must report a message without consuming it.
    pub fn find(&self, want: &Envelope) -> Option<(UnexpectedId, &Envelope, &U)> {
        let index = self.locate(want)?;
        let i = index as usize;
        let payload = self.slab.payload(i)?;
        Some((
            UnexpectedId(self.slab.id_of(index)),
            &self.slab.meta[i].env,
            payload,
        ))
    }

    /// Removes a message by id (after a probe, say). `None` if it is already gone.
    pub fn remove(&mut self, id: UnexpectedId) -> Option<(Envelope, U)> {
        let i = self.slab.resolve(id.0)?;
        self.unlink_release(i as u32)
    }

    /// A message still queued; `None` once it is gone.
    pub fn get(&self, id: UnexpectedId) -> Option<(&Envelope, &U)> {
        let i = self.slab.resolve(id.0)?;
        Some((&self.slab.meta[i].env, self.slab.payload(i)?))
    }

    /// Mutable access to a queued message's payload, e.g. to append data that keeps arriving.
    pub fn get_mut(&mut self, id: UnexpectedId) -> Option<&mut U> {
        let i = self.slab.resolve(id.0)?;
        self.slab.payload_mut(i)
    }

    /// Removes the earliest message with exactly envelope `msg` whose payload satisfies
    /// `pred`. A sender cancelling its send knows only the envelope and its own request id, so
    /// it walks just that envelope's bin looking for the id.
    pub fn remove_first_where(
        &mut self,
        msg: &Envelope,
        mut pred: impl FnMut(&U) -> bool,
    ) -> Option<(UnexpectedId, U)> {
        let mut index = self.bins.get(msg)?.head;
        while index != NIL {
            let i = index as usize;
            if self.slab.payload(i).is_some_and(&mut pred) {
                let id = UnexpectedId(self.slab.id_of(index));
                let (_, payload) = self.unlink_release(index)?;
                return Some((id, payload));
            }
            index = self.slab.meta[i].links[BIN].next;
        }
        None
    }

    /// Removes every message of a context, in arrival order, because its communicator was
    /// freed and nobody can receive them any more.
    pub fn drain_context(&mut self, context: ContextId) -> Vec<(Envelope, U)> {
        let mut out = Vec::new();
        // The whole context list goes at once, so its nodes need not be unlinked from it.
        let Some(ends) = self.contexts.remove(&context) else {
            return out;
        };
        let mut index = ends.head;
        while index != NIL {
            let i = index as usize;
            let next = self.slab.meta[i].links[CTX].next;
            let env = self.slab.meta[i].env;
            self.slab.unlink_keyed(BIN, &mut self.bins, env, index);
            if let Some(item) = self.slab.release(index) {
                out.push(item);
            }
            index = next;
        }
        tidy(&mut self.bins, self.slab.len);
        tidy(&mut self.contexts, self.slab.len);
        out
    }

    /// How many messages are queued.
    pub fn len(&self) -> usize {
        self.slab.len
    }

    /// Whether nothing is queued, the cheap test before bothering to match.
    pub fn is_empty(&self) -> bool {
        self.slab.len == 0
    }

    /// The slot of the earliest message `want` accepts.
    fn locate(&self, want: &Envelope) -> Option<u32> {
        if self.slab.len == 0 {
            return None;
        }
        if want.source != ANY_SOURCE && want.tag != ANY_TAG {
            return self
                .bins
                .get(want)
                .map(|ends| ends.head)
                .filter(|&h| h != NIL);
        }
        let mut index = self.contexts.get(&want.context)?.head;
        while index != NIL {
            let m = &self.slab.meta[index as usize];
            if want.accepts(&m.env) {
                return Some(index);
            }
            index = m.links[CTX].next;
        }
        None
    }

    fn unlink_release(&mut self, index: u32) -> Option<(Envelope, U)> {
        let env = self.slab.meta.get(index as usize)?.env;
        self.slab.unlink_keyed(BIN, &mut self.bins, env, index);
        self.slab
            .unlink_keyed(CTX, &mut self.contexts, env.context, index);
        let out = self.slab.release(index);
        tidy(&mut self.bins, self.slab.len);
        tidy(&mut self.contexts, self.slab.len);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn env(context: ContextId, source: i32, tag: i32) -> Envelope {
        Envelope {
            context,
            source,
            tag,
        }
    }

    /// Every want shape over one message: (want, whether it accepts (1, 2, 3)).
    fn shapes() -> Vec<(Envelope, bool)> {
        vec![
            (env(1, 2, 3), true),
            (env(1, 2, ANY_TAG), true),
            (env(1, ANY_SOURCE, 3), true),
            (env(1, ANY_SOURCE, ANY_TAG), true),
            (env(1, 2, 4), false),
            (env(1, 5, 3), false),
            (env(1, 5, ANY_TAG), false),
            (env(1, ANY_SOURCE, 4), false),
            (env(0, 2, 3), false),
            (env(0, ANY_SOURCE, ANY_TAG), false),
        ]
    }

    // ---------------------------------------------------------------- posted

    #[test]
    fn posted_new_default_empty() {
        let q: PostedQueue<u8> = PostedQueue::default();
        assert!(q.is_empty());
        assert_eq!(q.len(), 0);
        let mut q: PostedQueue<u8> = PostedQueue::new();
        assert!(q.take_match(&env(0, 0, 0)).is_none());
    }

    #[test]
    fn posted_post_get_get_mut_len() {
        let mut q = PostedQueue::new();
        let a = q.post(env(0, 1, 2), "a".to_string());
        let b = q.post(env(0, ANY_SOURCE, 2), "b".to_string());
        assert_ne!(a, b);
        assert_eq!(q.len(), 2);
        assert!(!q.is_empty());
        assert_eq!(q.get(a).map(String::as_str), Some("a"));
        q.get_mut(b).unwrap().push('!');
        assert_eq!(q.get(b).map(String::as_str), Some("b!"));
    }

    #[test]
    fn posted_each_shape_accepts_exactly_what_accepts_says() {
        for (want, ok) in shapes() {
            let mut q = PostedQueue::new();
            let id = q.post(want, 7u32);
            let got = q.take_match(&env(1, 2, 3));
            assert_eq!(want.accepts(&env(1, 2, 3)), ok);
            if ok {
                assert_eq!(got, Some((id, want, 7)), "want {want:?}");
                assert!(q.is_empty());
            } else {
                assert!(got.is_none(), "want {want:?}");
                assert_eq!(q.len(), 1);
            }
        }
    }

    #[test]
    fn posted_same_envelope_in_post_order() {
        let mut q = PostedQueue::new();
        for i in 0..5 {
            q.post(env(0, 1, 1), i);
        }
        for i in 0..5 {
            assert_eq!(q.take_match(&env(0, 1, 1)).map(|t| t.2), Some(i));
        }
        assert!(q.take_match(&env(0, 1, 1)).is_none());
    }

    #[test]
    fn posted_wildcard_before_exact_wins() {
        let mut q = PostedQueue::new();
        q.post(env(0, ANY_SOURCE, 5), "wild");
        q.post(env(0, 3, 5), "exact");
        assert_eq!(q.take_match(&env(0, 3, 5)).map(|t| t.2), Some("wild"));
        assert_eq!(q.take_match(&env(0, 3, 5)).map(|t| t.2), Some("exact"));
    }

    #[test]
    fn posted_exact_before_wildcard_wins() {
        let mut q = PostedQueue::new();
        q.post(env(0, 3, 5), "exact");
        q.post(env(0, 3, ANY_TAG), "wild");
        assert_eq!(q.take_match(&env(0, 3, 5)).map(|t| t.2), Some("exact"));
        assert_eq!(q.take_match(&env(0, 3, 5)).map(|t| t.2), Some("wild"));
    }

    #[test]
    fn posted_all_shapes_every_post_order() {
        let wants = [
            env(1, 2, 3),
            env(1, 2, ANY_TAG),
            env(1, ANY_SOURCE, 3),
            env(1, ANY_SOURCE, ANY_TAG),
        ];
        // All 24 permutations of the four shapes.
        let mut perms = Vec::new();
        for a in 0..4 {
            for b in 0..4 {
                for c in 0..4 {
                    for d in 0..4 {
                        let p = [a, b, c, d];
                        let mut seen = [false; 4];
                        p.iter().for_each(|&x| seen[x] = true);
                        if seen.iter().all(|&s| s) {
                            perms.push(p);
                        }
                    }
                }
            }
        }
        assert_eq!(perms.len(), 24);
        for p in perms {
            let mut q = PostedQueue::new();
            for &k in &p {
                q.post(wants[k], k);
            }
            for &k in &p {
                // `find` names the receive `take_match` takes, and leaves it.
                let (found, &payload) = q.find(&env(1, 2, 3)).unwrap();
                assert_eq!(payload, k, "order {p:?}");
                let (id, e, got) = q.take_match(&env(1, 2, 3)).unwrap();
                assert_eq!((id, e, got), (found, wants[k], k), "order {p:?}");
            }
            assert!(q.find(&env(1, 2, 3)).is_none());
            assert!(q.is_empty());
            assert!(q.bins.is_empty());
            assert_eq!(q.shape_count, [0; 4]);
        }
    }

    #[test]
    fn posted_remove_cancels_and_stale_ids_are_none() {
        let mut q = PostedQueue::new();
        let a = q.post(env(0, 1, 1), 1);
        let b = q.post(env(0, 1, 1), 2);
        assert_eq!(q.remove(a), Some((env(0, 1, 1), 1)));
        assert_eq!(q.remove(a), None);
        assert_eq!(q.get(a), None);
        assert_eq!(q.get_mut(a), None);
        // The cancelled receive no longer matches; the next one does.
        assert_eq!(q.take_match(&env(0, 1, 1)), Some((b, env(0, 1, 1), 2)));
        assert_eq!(q.remove(b), None);
        // Slot reuse must not revive the old ids.
        let c = q.post(env(0, 1, 1), 3);
        assert_ne!(c, a);
        assert_ne!(c, b);
        assert_eq!(q.get(a), None);
        assert_eq!(q.get(b), None);
        assert_eq!(q.get(c), Some(&3));
        // Ids never handed out at all.
        let bogus = PostedId(RawId {
            index: 9999,
            generation: 0,
        });
        assert_eq!(q.get(bogus), None);
        assert_eq!(q.remove(bogus), None);
        let nil = PostedId(RawId {
            index: NIL,
            generation: u32::MAX,
        });
        assert_eq!(q.remove(nil), None);
        assert_eq!(q.len(), 1);
    }

    #[test]
    fn posted_remove_middle_keeps_links() {
        let mut q = PostedQueue::new();
        let ids: Vec<_> = (0..5).map(|i| q.post(env(0, 0, 0), i)).collect();
        q.remove(ids[2]);
        q.remove(ids[0]);
        q.remove(ids[4]);
        assert_eq!(q.take_match(&env(0, 0, 0)).map(|t| t.2), Some(1));
        assert_eq!(q.take_match(&env(0, 0, 0)).map(|t| t.2), Some(3));
        assert!(q.take_match(&env(0, 0, 0)).is_none());
        assert!(q.bins.is_empty());
    }

    #[test]
    fn posted_other_contexts_do_not_match() {
        let mut q = PostedQueue::new();
        q.post(env(1, ANY_SOURCE, ANY_TAG), ());
        assert!(q.take_match(&env(2, 0, 0)).is_none());
        assert!(q.take_match(&env(1, 0, 0)).is_some());
    }

    #[test]
    fn posted_steady_state_does_not_grow() {
        let mut q = PostedQueue::new();
        for i in 0..100 {
            q.post(env(0, i % 7, i), i);
        }
        // Warm up with the same operations as the measured loop: new keys may grow the map.
        for round in 0..10 {
            q.post(env(0, ANY_SOURCE, 9999), round);
            q.post(env(0, 1, 9999), round);
            q.take_match(&env(0, 1, 9999)).unwrap();
            q.take_match(&env(0, 1, 9999)).unwrap();
        }
        let caps = (
            q.slab.meta.capacity(),
            q.slab.payloads.capacity(),
            q.bins.capacity(),
        );
        for round in 0..10_000 {
            q.post(env(0, ANY_SOURCE, 9999), round);
            q.post(env(0, 1, 9999), round);
            q.take_match(&env(0, 1, 9999)).unwrap();
            q.take_match(&env(0, 1, 9999)).unwrap();
        }
        let after = (
            q.slab.meta.capacity(),
            q.slab.payloads.capacity(),
            q.bins.capacity(),
        );
        assert_eq!(caps, after);
        assert_eq!(q.len(), 100);
    }

    #[test]
    fn exhausted_generation_retires_slot() {
        let mut q = PostedQueue::new();
        let a = q.post(env(0, 0, 0), 1);
        q.slab.meta[a.0.index as usize].generation = u32::MAX;
        let a = PostedId(RawId {
            index: a.0.index,
            generation: u32::MAX,
        });
        assert_eq!(q.remove(a), Some((env(0, 0, 0), 1)));
        assert_eq!(q.get(a), None);
        let b = q.post(env(0, 0, 0), 2);
        assert_ne!(
            b.0.index, a.0.index,
            "a slot at the last generation is never reused"
        );
        assert_eq!(q.get(a), None);
        assert_eq!(q.get(b), Some(&2));
    }

    #[test]
    fn posted_find_leaves_the_receive_and_sees_only_what_accepts() {
        for (want, ok) in shapes() {
            // Alone (the solo slot) and behind another receive (the bins).
            for others in [0, 1] {
                let mut q = PostedQueue::new();
                if others == 1 {
                    q.post(env(9, 9, 9), 0u32);
                }
                let id = q.post(want, 7u32);
                let found = q.find(&env(1, 2, 3)).map(|(i, &p)| (i, p));
                assert_eq!(q.len(), 1 + others, "find removes nothing");
                if ok {
                    assert_eq!(found, Some((id, 7)), "want {want:?}");
                    assert_eq!(q.take_match(&env(1, 2, 3)).map(|t| t.0), Some(id));
                } else {
                    assert!(found.is_none(), "want {want:?}");
                }
            }
        }
    }

    #[test]
    fn posted_odd_messages_do_not_panic() {
        // Messages should be concrete, but wildcards in them must not break anything.
        let mut q = PostedQueue::new();
        q.post(env(0, ANY_SOURCE, ANY_TAG), 1);
        q.post(env(0, 1, 1), 2);
        assert!(q.take_match(&env(0, 1, ANY_TAG)).is_some());
        assert!(q.take_match(&env(0, ANY_SOURCE, ANY_TAG)).is_none());
        assert!(q.take_match(&env(u32::MAX, i32::MIN, i32::MAX)).is_none());
        assert_eq!(q.len(), 1);
    }

    // ------------------------------------------------------------ unexpected

    #[test]
    fn unexpected_new_default_empty() {
        let q: UnexpectedQueue<u8> = UnexpectedQueue::default();
        assert!(q.is_empty());
        assert_eq!(q.len(), 0);
        assert!(q.find(&env(0, ANY_SOURCE, ANY_TAG)).is_none());
        let mut q: UnexpectedQueue<u8> = UnexpectedQueue::new();
        assert!(q.take_match(&env(0, 0, 0)).is_none());
        assert!(q.take_match(&env(0, ANY_SOURCE, 0)).is_none());
        assert!(q.remove_first_where(&env(0, 0, 0), |_| true).is_none());
        assert!(q.drain_context(3).is_empty());
    }

    #[test]
    fn unexpected_push_get_get_mut_len() {
        let mut q = UnexpectedQueue::new();
        let a = q.push(env(0, 1, 2), vec![1u8]);
        let b = q.push(env(0, 1, 2), vec![2u8]);
        assert_ne!(a, b);
        assert_eq!(q.len(), 2);
        assert_eq!(q.get(a), Some((&env(0, 1, 2), &vec![1u8])));
        q.get_mut(b).unwrap().push(3);
        assert_eq!(q.get(b).map(|x| x.1.as_slice()), Some(&[2u8, 3][..]));
    }

    #[test]
    fn unexpected_each_shape_accepts_exactly_what_accepts_says() {
        for (want, ok) in shapes() {
            let mut q = UnexpectedQueue::new();
            let id = q.push(env(1, 2, 3), 7u32);
            let found = q.find(&want).map(|(i, e, p)| (i, *e, *p));
            let got = q.take_match(&want);
            if ok {
                assert_eq!(found, Some((id, env(1, 2, 3), 7)), "want {want:?}");
                assert_eq!(got, Some((id, env(1, 2, 3), 7)), "want {want:?}");
                assert!(q.is_empty());
            } else {
                assert!(found.is_none() && got.is_none(), "want {want:?}");
                assert_eq!(q.len(), 1);
            }
        }
    }

    #[test]
    fn unexpected_same_source_non_overtaking() {
        let mut q = UnexpectedQueue::new();
        for i in 0..4 {
            q.push(env(0, 1, 7), i);
        }
        for want in [
            env(0, 1, 7),
            env(0, ANY_SOURCE, 7),
            env(0, 1, ANY_TAG),
            env(0, ANY_SOURCE, ANY_TAG),
        ] {
            // Each shape takes the earliest of what is left.
            let next = q.find(&want).map(|t| *t.2);
            assert_eq!(q.take_match(&want).map(|t| t.2), next);
        }
        assert!(q.is_empty());
        let mut q = UnexpectedQueue::new();
        q.push(env(0, 1, 7), "first");
        q.push(env(0, 1, 8), "second");
        // The wildcard must see arrival order across bins.
        assert_eq!(
            q.take_match(&env(0, 1, ANY_TAG)).map(|t| t.2),
            Some("first")
        );
        assert_eq!(
            q.take_match(&env(0, 1, ANY_TAG)).map(|t| t.2),
            Some("second")
        );
    }

    #[test]
    fn unexpected_wildcards_across_sources_in_arrival_order() {
        let mut q = UnexpectedQueue::new();
        q.push(env(0, 3, 1), 0);
        q.push(env(0, 2, 1), 1);
        q.push(env(0, 2, 2), 2);
        q.push(env(0, 3, 2), 3);
        assert_eq!(q.take_match(&env(0, ANY_SOURCE, 2)).map(|t| t.2), Some(2));
        assert_eq!(q.take_match(&env(0, 2, ANY_TAG)).map(|t| t.2), Some(1));
        assert_eq!(
            q.take_match(&env(0, ANY_SOURCE, ANY_TAG)).map(|t| t.2),
            Some(0)
        );
        assert_eq!(q.take_match(&env(0, 3, 2)).map(|t| t.2), Some(3));
        assert!(q.is_empty());
        assert!(q.bins.is_empty() && q.contexts.is_empty());
    }

    #[test]
    fn unexpected_find_does_not_remove() {
        let mut q = UnexpectedQueue::new();
        let a = q.push(env(0, 1, 1), 'a');
        for _ in 0..3 {
            assert_eq!(
                q.find(&env(0, ANY_SOURCE, ANY_TAG)),
                Some((a, &env(0, 1, 1), &'a'))
            );
            assert_eq!(q.find(&env(0, 1, 1)), Some((a, &env(0, 1, 1), &'a')));
        }
        assert_eq!(q.len(), 1);
        assert_eq!(q.remove(a), Some((env(0, 1, 1), 'a')));
        assert!(q.find(&env(0, 1, 1)).is_none());
    }

    #[test]
    fn unexpected_remove_and_stale_ids() {
        let mut q = UnexpectedQueue::new();
        let a = q.push(env(0, 1, 1), 1);
        let b = q.push(env(0, 1, 1), 2);
        assert_eq!(q.remove(a), Some((env(0, 1, 1), 1)));
        assert_eq!(q.remove(a), None);
        assert_eq!(q.get(a), None);
        assert_eq!(q.get_mut(a), None);
        assert_eq!(
            q.take_match(&env(0, ANY_SOURCE, ANY_TAG)),
            Some((b, env(0, 1, 1), 2))
        );
        let c = q.push(env(0, 1, 1), 3);
        assert_ne!(c, a);
        assert_eq!(q.get(a), None);
        assert_eq!(q.get(b), None);
        assert_eq!(q.get(c), Some((&env(0, 1, 1), &3)));
        let bogus = UnexpectedId(RawId {
            index: 12345,
            generation: 7,
        });
        assert_eq!(q.get(bogus), None);
        assert_eq!(q.remove(bogus), None);
        assert_eq!(q.len(), 1);
    }

    #[test]
    fn unexpected_remove_first_where() {
        let mut q = UnexpectedQueue::new();
        q.push(env(0, 1, 1), (10, 'a'));
        let b = q.push(env(0, 1, 1), (11, 'b'));
        q.push(env(0, 1, 2), (11, 'c'));
        q.push(env(0, 1, 1), (11, 'd'));
        // Only the exact envelope's bin is searched, earliest first.
        assert_eq!(
            q.remove_first_where(&env(0, 1, 1), |p| p.0 == 11),
            Some((b, (11, 'b')))
        );
        assert_eq!(
            q.remove_first_where(&env(0, 1, 1), |p| p.0 == 11)
                .map(|t| t.1),
            Some((11, 'd'))
        );
        assert!(q.remove_first_where(&env(0, 1, 1), |p| p.0 == 11).is_none());
        assert!(q.remove_first_where(&env(0, 9, 9), |_| true).is_none());
        assert!(q.remove_first_where(&env(5, 1, 1), |_| true).is_none());
        // Wildcard envelopes name no bin of concrete messages.
        assert!(q
            .remove_first_where(&env(0, ANY_SOURCE, ANY_TAG), |_| true)
            .is_none());
        assert_eq!(q.len(), 2);
        let order: Vec<_> = std::iter::from_fn(|| q.take_match(&env(0, ANY_SOURCE, ANY_TAG)))
            .map(|t| (t.2).1)
            .collect();
        assert_eq!(order, vec!['a', 'c']);
    }

    #[test]
    fn unexpected_drain_context() {
        let mut q = UnexpectedQueue::new();
        q.push(env(1, 0, 0), 0);
        q.push(env(2, 0, 0), 1);
        q.push(env(1, 3, 1), 2);
        q.push(env(1, 0, 0), 3);
        q.push(env(2, 5, 5), 4);
        let drained = q.drain_context(1);
        assert_eq!(
            drained,
            vec![(env(1, 0, 0), 0), (env(1, 3, 1), 2), (env(1, 0, 0), 3)]
        );
        assert_eq!(q.len(), 2);
        assert!(q.drain_context(1).is_empty());
        assert!(q.drain_context(77).is_empty());
        assert!(q.take_match(&env(1, 0, 0)).is_none());
        assert!(q.find(&env(1, ANY_SOURCE, ANY_TAG)).is_none());
        assert_eq!(q.take_match(&env(2, 0, 0)).map(|t| t.2), Some(1));
        assert_eq!(
            q.take_match(&env(2, ANY_SOURCE, ANY_TAG)).map(|t| t.2),
            Some(4)
        );
        assert!(q.is_empty());
        assert!(q.bins.is_empty() && q.contexts.is_empty());
        // Slots freed by a drain are reused cleanly.
        q.push(env(1, 0, 0), 9);
        assert_eq!(q.take_match(&env(1, 0, 0)).map(|t| t.2), Some(9));
    }

    #[test]
    fn unexpected_steady_state_does_not_grow() {
        let mut q = UnexpectedQueue::new();
        for i in 0..100 {
            q.push(env(i as u32 % 3, i % 7, i), i);
        }
        // Warm up with the same operations as the measured loop: new keys may grow the maps.
        for _ in 0..10 {
            q.push(env(0, 1, 9999), 0);
            q.push(env(9, 1, 9999), 0);
            q.take_match(&env(0, ANY_SOURCE, 9999)).unwrap();
            q.take_match(&env(9, 1, 9999)).unwrap();
        }
        let caps = (
            q.slab.meta.capacity(),
            q.slab.payloads.capacity(),
            q.bins.capacity(),
            q.contexts.capacity(),
        );
        for round in 0..10_000 {
            q.push(env(0, 1, 9999), round);
            q.push(env(9, 1, 9999), round);
            q.take_match(&env(0, ANY_SOURCE, 9999)).unwrap();
            q.take_match(&env(9, 1, 9999)).unwrap();
        }
        let after = (
            q.slab.meta.capacity(),
            q.slab.payloads.capacity(),
            q.bins.capacity(),
            q.contexts.capacity(),
        );
        assert_eq!(caps, after);
        assert_eq!(q.len(), 100);
    }

    // ------------------------------------------------------------ model tests

    fn envelope() -> impl Strategy<Value = Envelope> {
        (0u32..2, -1i32..3, -1i32..3).prop_map(|(c, s, t)| env(c, s, t))
    }

    #[derive(Debug, Clone)]
    enum PostedOp {
        Post(Envelope),
        Take(Envelope),
        Remove(usize),
        Get(usize),
    }

    fn posted_op() -> impl Strategy<Value = PostedOp> {
        prop_oneof![
            3 => envelope().prop_map(PostedOp::Post),
            3 => envelope().prop_map(PostedOp::Take),
            1 => any::<usize>().prop_map(PostedOp::Remove),
            1 => any::<usize>().prop_map(PostedOp::Get),
        ]
    }

    #[derive(Debug, Clone)]
    enum UnexpectedOp {
        Push(Envelope),
        Take(Envelope),
        Find(Envelope),
        Remove(usize),
        RemoveWhere(Envelope, u32),
        Drain(u32),
        Get(usize),
    }

    fn unexpected_op() -> impl Strategy<Value = UnexpectedOp> {
        prop_oneof![
            4 => envelope().prop_map(UnexpectedOp::Push),
            3 => envelope().prop_map(UnexpectedOp::Take),
            2 => envelope().prop_map(UnexpectedOp::Find),
            1 => any::<usize>().prop_map(UnexpectedOp::Remove),
            1 => (envelope(), 0u32..3).prop_map(|(e, k)| UnexpectedOp::RemoveWhere(e, k)),
            1 => (0u32..3).prop_map(UnexpectedOp::Drain),
            1 => any::<usize>().prop_map(UnexpectedOp::Get),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// The posted queue against a Vec scanned in post order.
        #[test]
        fn posted_matches_linear_model(ops in proptest::collection::vec(posted_op(), 0..200)) {
            let mut q = PostedQueue::new();
            // (payload, want), in post order; payloads are unique and index `issued`.
            let mut model: Vec<(usize, Envelope)> = Vec::new();
            let mut issued: Vec<PostedId> = Vec::new();
            for op in ops {
                match op {
                    PostedOp::Post(want) => {
                        let p = issued.len();
                        issued.push(q.post(want, p));
                        model.push((p, want));
                    }
                    PostedOp::Take(msg) => {
                        let expect = model
                            .iter()
                            .position(|(_, w)| w.accepts(&msg))
                            .map(|i| model.remove(i))
                            .map(|(p, w)| (issued[p], w, p));
                        prop_assert_eq!(q.take_match(&msg), expect);
                    }
                    PostedOp::Remove(sel) if !issued.is_empty() => {
                        let p = sel % issued.len();
                        let expect = model
                            .iter()
                            .position(|&(mp, _)| mp == p)
                            .map(|i| model.remove(i))
                            .map(|(p, w)| (w, p));
                        prop_assert_eq!(q.remove(issued[p]), expect);
                    }
                    PostedOp::Get(sel) if !issued.is_empty() => {
                        let p = sel % issued.len();
                        let expect = model.iter().find(|&&(mp, _)| mp == p).map(|&(mp, _)| mp);
                        prop_assert_eq!(q.get(issued[p]).copied(), expect);
                        prop_assert_eq!(q.get_mut(issued[p]).map(|x| *x), expect);
                    }
                    PostedOp::Remove(_) | PostedOp::Get(_) => {}
                }
                prop_assert_eq!(q.len(), model.len());
                prop_assert_eq!(q.is_empty(), model.is_empty());
            }
            // Draining with a catch-all per context must return the rest in post order.
            for c in 0..2 {
                for s in -1..3 {
                    for t in -1..3 {
                        while let Some((_, w, p)) = q.take_match(&env(c, s, t)) {
                            let i = model.iter().position(|(_, mw)| mw.accepts(&env(c, s, t))).unwrap();
                            prop_assert_eq!(model.remove(i), (p, w));
                        }
                    }
                }
            }
            prop_assert!(q.is_empty() && model.is_empty());
            prop_assert!(q.bins.is_empty());
            prop_assert_eq!(q.shape_count, [0; 4]);
        }

        /// The unexpected queue against a Vec scanned in arrival order.
        #[test]
        fn unexpected_matches_linear_model(ops in proptest::collection::vec(unexpected_op(), 0..200)) {
            let mut q = UnexpectedQueue::new();
            let mut model: Vec<(u32, Envelope)> = Vec::new();
            let mut issued: Vec<UnexpectedId> = Vec::new();
            for op in ops {
                match op {
                    UnexpectedOp::Push(msg) => {
                        let p = issued.len() as u32;
                        issued.push(q.push(msg, p));
                        model.push((p, msg));
                    }
                    UnexpectedOp::Take(want) => {
                        let expect = model
                            .iter()
                            .position(|(_, m)| want.accepts(m))
                            .map(|i| model.remove(i))
                            .map(|(p, m)| (issued[p as usize], m, p));
                        prop_assert_eq!(q.take_match(&want), expect);
                    }
                    UnexpectedOp::Find(want) => {
                        let expect = model
                            .iter()
                            .find(|(_, m)| want.accepts(m))
                            .map(|&(p, m)| (issued[p as usize], m, p));
                        prop_assert_eq!(q.find(&want).map(|(i, m, p)| (i, *m, *p)), expect);
                    }
                    UnexpectedOp::Remove(sel) if !issued.is_empty() => {
                        let p = (sel % issued.len()) as u32;
                        let expect = model
                            .iter()
                            .position(|&(mp, _)| mp == p)
                            .map(|i| model.remove(i))
                            .map(|(p, m)| (m, p));
                        prop_assert_eq!(q.remove(issued[p as usize]), expect);
                    }
                    UnexpectedOp::RemoveWhere(msg, k) => {
                        let expect = model
                            .iter()
                            .position(|&(p, m)| m == msg && p % 3 == k)
                            .map(|i| model.remove(i))
                            .map(|(p, _)| (issued[p as usize], p));
                        prop_assert_eq!(q.remove_first_where(&msg, |p| p % 3 == k), expect);
                    }
                    UnexpectedOp::Drain(c) => {
                        let expect: Vec<(Envelope, u32)> = model
                            .iter()
                            .filter(|(_, m)| m.context == c)
                            .map(|&(p, m)| (m, p))
                            .collect();
                        model.retain(|(_, m)| m.context != c);
                        prop_assert_eq!(q.drain_context(c), expect);
                    }
                    UnexpectedOp::Get(sel) if !issued.is_empty() => {
                        let p = (sel % issued.len()) as u32;
                        let expect = model.iter().find(|&&(mp, _)| mp == p).map(|&(mp, m)| (m, mp));
                        prop_assert_eq!(q.get(issued[p as usize]).map(|(m, p)| (*m, *p)), expect);
                        prop_assert_eq!(q.get_mut(issued[p as usize]).map(|x| *x), expect.map(|e| e.1));
                    }
                    UnexpectedOp::Remove(_) | UnexpectedOp::Get(_) => {}
                }
                prop_assert_eq!(q.len(), model.len());
                prop_assert_eq!(q.is_empty(), model.is_empty());
            }
            for c in 0..2 {
                let rest: Vec<(Envelope, u32)> =
                    model.iter().filter(|(_, m)| m.context == c).map(|&(p, m)| (m, p)).collect();
                prop_assert_eq!(q.drain_context(c), rest);
            }
            prop_assert!(q.is_empty());
            prop_assert!(q.bins.is_empty() && q.contexts.is_empty());
        }
    }
}

//! What a natively matching engine needs from the core beyond the [`P2p`] calls: storage for
//! the network's operation contexts that never moves.
//!
//! A real network (libfabric, UCX) is asynchronous. An operation posted with a context pointer
//! (libfabric's `fi_context2`, which the provider uses as scratch space while it owns the
//! operation) is reported complete later, through a completion queue, by that pointer. The
//! core's requests cannot hold that context: they live in a [`Pool`](crate::pool::Pool) whose
//! storage moves when it grows, and a request can be freed (a stale handle) while the network
//! still reports on its operation. So an engine keeps each outstanding operation's context in
//! an [`OpContexts`] slot, whose address is fixed from insertion to removal, with the handle of
//! the request it belongs to; a completion names the slot by its context pointer
//! ([`OpContexts::find`]), and a completion whose request is gone (the pool says the handle
//! is stale) is dropped after its slot is freed. MPICH's ch4:ofi does the same with the
//! `fi_context2` embedded in its (non-moving) request objects.
//!
//! [`P2p`]: crate::transport::P2p

use std::cell::UnsafeCell;

use crate::core::Core;
use crate::request::{EngineWord, NativeHalf, RecvState, ReqHandle, Request, RequestKind};
use crate::transport::Cx;
use crate::{Error, ErrorKind, Result};

/// Slots per chunk. A chunk is allocated once and never moves or shrinks.
const CHUNK: usize = 256;

/// The index of one operation's slot in an [`OpContexts`].
pub type OpIndex = u32;

struct Slot<C, V> {
    /// What the network writes while it owns the operation; behind `UnsafeCell` because the
    /// network writes it through a raw pointer that the engine handed out.
    context: UnsafeCell<C>,
    value: Option<V>,
}

/// Fixed-address contexts of a native engine's outstanding operations, each with the engine's
/// value `V` (typically the request handle and the kind of operation).
pub struct OpContexts<C, V> {
    chunks: Vec<Box<[Slot<C, V>]>>,
    free: Vec<OpIndex>,
    live: usize,
}

impl<C: Default, V> Default for OpContexts<C, V> {
    fn default() -> Self {
        OpContexts {
            chunks: Vec::new(),
            free: Vec::new(),
            live: 0,
        }
    }
}

impl<C: Default, V> OpContexts<C, V> {
    /// An empty table; chunks are allocated as operations are posted.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes a slot for an operation about to be posted, keeping `value` with it. Its context
    /// starts as `C::default()` (zeroed, as libfabric expects of an `fi_context2`).
    #[inline]
    pub fn insert(&mut self, value: V) -> OpIndex {
        let i = match self.free.pop() {
            Some(i) => i,
            None => self.grow(),
        };
        let slot = self.slot_mut(i);
        *slot.context.get_mut() = C::default();
        slot.value = Some(value);
        self.live += 1;
        i
    }

    /// Adds a chunk of slots (the table's first, or when every slot is taken) and returns the
    /// first of them; the others go to the free list, lowest first.
    #[cold]
    #[inline(never)]
    fn grow(&mut self) -> OpIndex {
        let base = self.chunks.len() * CHUNK;
        self.chunks.push(
            (0..CHUNK)
                .map(|_| Slot {
                    context: UnsafeCell::new(C::default()),
                    value: None,
                })
                .collect(),
        );
        self.free
            .extend((base + 1..base + CHUNK).rev().map(|i| i as OpIndex));
        base as OpIndex
    }

    /// The context pointer to hand the network for operation `i`. It stays valid, at the same
    /// address, until [`OpContexts::remove`] of `i` (or the table is dropped). `None` when `i`
    /// is not outstanding.
    #[inline]
    pub fn context_ptr(&self, i: OpIndex) -> Option<*mut C> {
        let slot = self
            .chunks
            .get(i as usize / CHUNK)?
            .get(i as usize % CHUNK)?;
        slot.value.as_ref().map(|_| slot.context.get())
    }

    /// The value kept with operation `i`, if `i` is outstanding.
    #[inline]
    pub fn get(&self, i: OpIndex) -> Option<&V> {
        self.chunks
            .get(i as usize / CHUNK)
            .and_then(|c| c[i as usize % CHUNK].value.as_ref())
    }

    /// Mutable access to the value kept with operation `i`.
    #[inline]
    pub fn get_mut(&mut self, i: OpIndex) -> Option<&mut V> {
        self.chunks
            .get_mut(i as usize / CHUNK)
            .and_then(|c| c[i as usize % CHUNK].value.as_mut())
    }

    /// Frees operation `i`'s slot once the network has reported the operation complete (or
    /// cancelled), returning its value; `None` when `i` was not outstanding.
    #[inline]
    pub fn remove(&mut self, i: OpIndex) -> Option<V> {
        let chunk = self.chunks.get_mut(i as usize / CHUNK)?;
        let v = chunk[i as usize % CHUNK].value.take()?;
        self.free.push(i);
        self.live -= 1;
        Some(v)
    }

    /// The operation whose context is at `ptr` (a completion's `op_context`), if it is one of
    /// this table's outstanding operations. Pointer arithmetic only: nothing is read through
    /// `ptr`, so a bogus pointer from the network yields `None`, never undefined behaviour.
    #[inline]
    pub fn find(&self, ptr: *const C) -> Option<OpIndex> {
        let addr = ptr as usize;
        let size = std::mem::size_of::<Slot<C, V>>();
        for (c, chunk) in self.chunks.iter().enumerate() {
            let base = chunk.as_ptr() as usize;
            if addr < base || addr >= base + CHUNK * size {
                continue;
            }
            let off = addr - base;
            // The context is the slot's first field only if the compiler put it there: compare
            // against the real field address instead of assuming.
            let s = off / size;
            if chunk[s].context.get() as usize != addr || chunk[s].value.is_none() {
                return None;
            }
            return Some((c * CHUNK + s) as OpIndex);
        }
        None
    }

    /// How many operations are outstanding.
    #[inline]
    pub fn len(&self) -> usize {
        self.live
    }

    /// Whether no operation is outstanding.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// The outstanding operations' indices and values (for finalize and quiesce sweeps).
    pub fn iter(&self) -> impl Iterator<Item = (OpIndex, &V)> {
        self.chunks.iter().enumerate().flat_map(|(c, chunk)| {
            chunk.iter().enumerate().filter_map(move |(s, slot)| {
                Some(((c * CHUNK + s) as OpIndex, slot.value.as_ref()?))
            })
        })
    }

    fn slot_mut(&mut self, i: OpIndex) -> &mut Slot<C, V> {
        &mut self.chunks[i as usize / CHUNK][i as usize % CHUNK]
    }
}

/// The engine word naming operation slot `i` (a word of 0 names none).
#[inline(always)]
pub fn word_of(i: OpIndex) -> EngineWord {
    u64::from(i) + 1
}

/// The operation slot an engine word names, if any.
#[inline(always)]
pub fn op_of(word: EngineWord) -> Option<OpIndex> {
    word.checked_sub(1).map(|i| i as OpIndex)
}

/// The network has let go of receive `r`'s operation (it completed, was cancelled, or the
/// endpoint was closed): the receive is no longer in the network.
#[inline]
pub fn released(r: &mut RecvState) {
    r.engine = 0;
    r.native = NativeHalf::NotPosted;
}

/// The first step of a definite cancel of receive `req` in the network (see
/// [`P2p::cancel_recv`](crate::transport::P2p::cancel_recv)), the same for every native engine.
pub enum CancelStep {
    /// Known without asking the network: `true` cancelled (it was never, or is no longer, in
    /// the network and has not completed), `false` matched.
    Answered(bool),
    /// The receive is now [`NativeHalf::CancelAsked`]: ask the network to cancel operation
    /// `op` (`None`: the engine holds no operation for it) and wait for its report, then
    /// answer with [`cancel_answer`].
    Ask(Option<OpIndex>),
}

/// Moves receive `req` to [`NativeHalf::CancelAsked`] when it is posted, or answers at once.
pub fn begin_cancel(core: &mut Core, req: ReqHandle) -> CancelStep {
    let Some(Request {
        complete,
        kind: RequestKind::Recv(r),
        ..
    }) = core.requests.get_mut(req)
    else {
        return CancelStep::Answered(false);
    };
    match r.native {
        NativeHalf::Posted { partnered } => r.native = NativeHalf::CancelAsked { partnered },
        NativeHalf::CancelAsked { .. } => {}
        NativeHalf::Matched => return CancelStep::Answered(false),
        NativeHalf::NotPosted => return CancelStep::Answered(!*complete),
    }
    CancelStep::Ask(op_of(r.engine))
}

/// The answer to a cancel once the network has reported the receive's operation: cancelled
/// unless the report completed it, or matched it to a message whose data is still on its way
/// (the engine set [`NativeHalf::Matched`]: a large message read after its match, say).
pub fn cancel_answer(core: &Core, req: ReqHandle) -> bool {
    match core.requests.get(req) {
        None => true,
        Some(Request {
            kind: RequestKind::Recv(r),
            ..
        }) if r.native == NativeHalf::Matched => false,
        Some(r) => !r.complete,
    }
}

/// What the network may still hold of request `req`, for
/// [`P2p::quiesce`](crate::transport::P2p::quiesce).
pub enum Holding {
    /// A receive still posted: cancel it (definitely); once answered, nothing is held.
    PostedReceive,
    /// The operation in this slot (if the engine's word names one).
    Op(Option<OpIndex>),
}

/// Drives an engine until the network has let go of an operation (`held` turns false),
/// within the device's cancel limit (`DeviceConfig::cancel_limit`). `progress` reads this
/// engine's completions only (returning how many), yielding the CPU when there were none;
/// past the limit `close` ends every operation (closing the endpoint or NIC, failing what it
/// held), and the caller gets an [`ErrorKind::Pending`] error: a buffer is never handed back
/// while the network may still write it.
pub fn drive_until_released<T, P>(
    cx: &mut Cx<'_, T, P>,
    held: impl Fn(&T) -> bool,
    mut progress: impl FnMut(&mut Cx<'_, T, P>) -> Result<usize>,
    close: impl FnOnce(&mut Cx<'_, T, P>),
) -> Result<()> {
    let start = std::time::Instant::now();
    let limit = cx.core.config.cancel_limit;
    while held(cx.transport) {
        if start.elapsed() > limit {
            tracing::error!("the network did not end an operation in time; closing it");
            close(cx);
            return Err(Error::new(
                ErrorKind::Pending,
                format!("the network did not end an operation within {limit:?}"),
            ));
        }
        if progress(cx)? == 0 {
            std::thread::yield_now();
        }
    }
    Ok(())
}

/// Fails every request in `reqs` that has not completed, with `kind`: the network that held
/// their operations was closed (its endpoint or worker destroyed, ending them all), so they
/// can no longer complete.
pub fn fail_all(core: &mut Core, reqs: impl IntoIterator<Item = ReqHandle>, kind: ErrorKind) {
    for h in reqs {
        let Some(req) = core.requests.get_mut(h) else {
            continue;
        };
        if req.complete {
            continue;
        }
        match &mut req.kind {
            RequestKind::Recv(r) => released(r),
            RequestKind::Send(s) => s.engine = 0,
            RequestKind::Done | RequestKind::Schedule => {}
        }
        req.status.error = Some(kind);
        req.complete = true;
    }
}

/// Eager credit for natively matching engines, counted per message: the AM fallback's per-pair
/// credit (the core's `AmRouteState` of the engine's route), priced by what a network holds for
/// an unexpected message rather than by its length — libfabric's `tcp;ofi_rxm` keeps each in a
/// 16 KiB receive buffer whatever its length, UCX in a descriptor of up to its eager limit
/// (messages longer than those go by the network's own rendezvous, which leaves the data at the
/// sender). Sender and receiver count messages; the credit message says how many, and each side
/// prices them itself, so two ranks configured differently never leak credit.
pub mod message_credit {
    use crate::core::{credit_cost, Core};
    use crate::request::Route;
    use crate::Gpid;

    /// Credit bytes one message costs at most (before the core's per-message overhead), for a
    /// network that holds an unexpected message in 16 KiB: UCX's default, libfabric rxm's
    /// default buffer. An engine whose network holds more per message passes its own price.
    pub const MESSAGE_CHARGE: usize = 16 * 1024;

    /// The charge of one message on `route` for a network that holds `price` bytes per
    /// unexpected message: `price`, or a sixteenth of a pair's credit where that is smaller (a
    /// small `CH4_EAGER_CREDIT`), so that a pair always has room for several messages — a
    /// charge larger than the whole credit would leave a blocking send waiting for ever.
    #[inline(always)]
    pub fn charge(core: &Core, route: Route, price: usize) -> usize {
        let init = core.am[route.index()].credit_init;
        price.min((init / 16) as usize)
    }

    /// Spends the credit of one message of `price` (see [`charge`]) to `dest`; `false`
    /// (nothing spent) when there is none.
    #[inline(always)]
    pub fn take(core: &mut Core, route: Route, dest: Gpid, price: usize) -> bool {
        let charge = charge(core, route, price);
        core.take_credit(route, dest, charge)
    }

    /// Whether a blocking send to `dest` has the credit of one message of `price`.
    #[inline(always)]
    pub fn available(core: &Core, route: Route, dest: Gpid, price: usize) -> bool {
        core.has_credit(route, dest, charge(core, route, price))
    }

    /// A message of `price` from `src` was consumed here (received, truncated, or dropped
    /// after a matched probe); returns how many messages to give back to `src` once a quarter
    /// of its credit has added up.
    #[inline]
    pub fn consumed(core: &mut Core, route: Route, src: Gpid, price: usize) -> Option<u32> {
        let charge = charge(core, route, price);
        let per_message = credit_cost(charge);
        let amount = core.consume_credit(route, src, charge)?;
        Some((amount / per_message).min(u64::from(u32::MAX >> 1)) as u32)
    }

    /// `giver` gave back the credit of `messages` messages of `price`.
    pub fn returned(core: &mut Core, route: Route, giver: Gpid, messages: u32, price: usize) {
        let amount = u64::from(messages).saturating_mul(credit_cost(charge(core, route, price)));
        core.credit_returned(route, giver, amount);
    }
}

/// What [`P2p::quiesce`](crate::transport::P2p::quiesce) must wait for on request `req`.
pub fn holding(core: &Core, req: ReqHandle) -> Holding {
    match core.requests.get(req).map(|r| &r.kind) {
        Some(RequestKind::Recv(r)) if matches!(r.native, NativeHalf::Posted { .. }) => {
            Holding::PostedReceive
        }
        Some(RequestKind::Recv(r)) => Holding::Op(op_of(r.engine)),
        Some(RequestKind::Send(s)) => Holding::Op(op_of(s.engine)),
        _ => Holding::Op(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An `fi_context2`-sized context.
    #[derive(Default)]
    struct Ctx([usize; 8]);

    #[test]
    fn contexts_keep_their_address_while_the_table_grows() {
        let mut t = OpContexts::<Ctx, u32>::new();
        let first = t.insert(0);
        let p = t.context_ptr(first).unwrap();
        let ids: Vec<_> = (1..5 * CHUNK as u32).map(|v| t.insert(v)).collect();
        assert_eq!(
            t.context_ptr(first),
            Some(p),
            "a context moved when the table grew"
        );
        assert_eq!(t.find(p), Some(first));
        for (&i, v) in ids.iter().zip(1..) {
            assert_eq!(t.find(t.context_ptr(i).unwrap()), Some(i));
            assert_eq!(t.get(i), Some(&v));
        }
        assert_eq!(t.len(), 5 * CHUNK);
    }

    #[test]
    fn a_removed_or_foreign_context_is_not_found() {
        let mut t = OpContexts::<Ctx, &str>::new();
        let a = t.insert("a");
        let b = t.insert("b");
        let pa = t.context_ptr(a).unwrap();
        assert_eq!(t.remove(a), Some("a"));
        assert_eq!(t.remove(a), None, "removed twice");
        assert_eq!(
            t.find(pa),
            None,
            "a completion for a freed slot must not match"
        );
        let elsewhere = Ctx::default();
        assert_eq!(t.find(&elsewhere), None);
        // A pointer into the middle of a slot is not a context.
        let pb = t.context_ptr(b).unwrap();
        assert_eq!(t.find((pb as usize + 8) as *const Ctx), None);
        assert_eq!(t.find(pb), Some(b));
        assert_eq!(
            t.context_ptr(a),
            None,
            "a freed slot has no context to hand out"
        );
        assert_eq!(
            t.iter().map(|(i, v)| (i, *v)).collect::<Vec<_>>(),
            vec![(b, "b")]
        );
    }

    #[test]
    #[allow(unsafe_code)] // writes a context as the network would
    fn a_reused_slot_starts_with_a_clean_context() {
        let mut t = OpContexts::<Ctx, ()>::new();
        let a = t.insert(());
        // SAFETY: the slot is outstanding and nothing else refers to its context.
        unsafe { (*t.context_ptr(a).unwrap()).0[3] = 7 };
        t.remove(a);
        let b = t.insert(());
        assert_eq!(a, b);
        // SAFETY: as above.
        assert_eq!(unsafe { (*t.context_ptr(b).unwrap()).0[3] }, 0);
    }
}

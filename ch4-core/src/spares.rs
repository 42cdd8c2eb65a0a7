//! Byte vectors that finished collective schedules leave for the next ones.
//!
//! A schedule (`crate::schedule`) works in buffers of its own: working buffers, a copy of each
//! message it sends, a buffer for each it receives. Made fresh, every one of them is memory the
//! kernel maps in page by page on first touch — a 4 MiB `MPI_Iallreduce` between two ranks took
//! about 2,000 minor page faults a rank each time (8 MiB of new pages, measured with
//! `getrusage` around `benches/c/nbc.c`), which cost more than the reduction itself. The device
//! keeps the large vectors its schedules are done with, up to a bound, and hands them to the
//! next schedule, as MPICH's CH4 draws its active messages' buffers from a pool
//! (`MPIDIU_buf_pool_t`, `ch4r_buf.h`) rather than from the allocator each time.
//!
//! Small vectors are not kept: below [`Spares::KEPT_FROM`] the allocator's own free lists serve
//! them from memory already mapped.

/// A bounded set of spare byte vectors (see the [module docs](self)).
#[derive(Debug, Default)]
pub(crate) struct Spares {
    vecs: Vec<Vec<u8>>,
    /// The capacities of `vecs`, added up.
    bytes: usize,
}

impl Spares {
    /// Vectors smaller than this are neither kept nor looked for.
    pub(crate) const KEPT_FROM: usize = 64 << 10;
    /// The most bytes kept: a 4 MiB allreduce between two ranks works in about four vectors.
    /// What is kept stays mapped while the program runs; this bounds what an idle rank holds.
    pub(crate) const MAX_BYTES: usize = 32 << 20;
    /// The most vectors kept.
    const MAX_VECS: usize = 16;

    /// A vector of `len` bytes whose contents are unspecified (a spare's old bytes, or zeros):
    /// for a buffer every byte of which is written before it is read.
    pub(crate) fn take(&mut self, len: usize) -> Vec<u8> {
        self.take_reused(len).unwrap_or_else(|| vec![0; len])
    }

    /// A vector of `len` zero bytes.
    pub(crate) fn take_zeroed(&mut self, len: usize) -> Vec<u8> {
        match self.take_reused(len) {
            Some(mut v) => {
                v.fill(0);
                v
            }
            None => vec![0; len],
        }
    }

    /// An empty vector with room for at least `capacity` bytes.
    pub(crate) fn take_empty(&mut self, capacity: usize) -> Vec<u8> {
        match self.take_reused(capacity) {
            Some(mut v) => {
                v.clear();
                v
            }
            None => Vec::with_capacity(capacity),
        }
    }

    /// The spare that fits `len` best (the smallest large enough, and not more than four times
    /// larger, so a small buffer does not pin a huge one), resized to `len`.
    fn take_reused(&mut self, len: usize) -> Option<Vec<u8>> {
        if len < Self::KEPT_FROM {
            return None;
        }
        let best = self
            .vecs
            .iter()
            .enumerate()
            .filter(|(_, v)| v.capacity() >= len && v.capacity() / 4 <= len)
            .min_by_key(|(_, v)| v.capacity())
            .map(|(i, _)| i)?;
        let mut v = self.vecs.swap_remove(best);
        self.bytes -= v.capacity();
        if v.len() >= len {
            v.truncate(len);
        } else {
            // Within the capacity: initializes the tail without a new allocation.
            v.resize(len, 0);
        }
        Some(v)
    }

    /// Keeps `v` for a later schedule if it is large enough and there is room; the oldest spares
    /// make room for it.
    pub(crate) fn give(&mut self, v: Vec<u8>) {
        let cap = v.capacity();
        if !(Self::KEPT_FROM..=Self::MAX_BYTES).contains(&cap) {
            return;
        }
        while !self.vecs.is_empty()
            && (self.bytes + cap > Self::MAX_BYTES || self.vecs.len() >= Self::MAX_VECS)
        {
            let old = self.vecs.remove(0);
            self.bytes -= old.capacity();
        }
        self.bytes += cap;
        self.vecs.push(v);
    }

    /// The bytes kept now.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BIG: usize = Spares::KEPT_FROM;

    #[test]
    fn a_given_vector_comes_back_without_a_new_allocation() {
        let mut s = Spares::default();
        let v = vec![7u8; 4 * BIG];
        let at = v.as_ptr();
        s.give(v);
        let again = s.take(3 * BIG);
        assert_eq!(again.as_ptr(), at);
        assert_eq!(again.len(), 3 * BIG);
        assert_eq!(s.bytes(), 0);
        s.give(again);
        let zeroed = s.take_zeroed(4 * BIG);
        assert_eq!(zeroed.as_ptr(), at);
        assert!(zeroed.iter().all(|&b| b == 0));
        s.give(zeroed);
        let empty = s.take_empty(2 * BIG);
        assert_eq!((empty.as_ptr(), empty.len()), (at, 0));
    }

    #[test]
    fn small_requests_and_far_larger_spares_do_not_meet() {
        let mut s = Spares::default();
        s.give(vec![0u8; BIG - 1]);
        assert_eq!(s.bytes(), 0, "small vectors are left to the allocator");
        let big = vec![0u8; 8 * BIG];
        let at = big.as_ptr();
        s.give(big);
        let small = s.take(BIG);
        assert_ne!(small.as_ptr(), at, "a 4x larger spare is not lent");
        let larger = s.take(9 * BIG);
        assert_ne!(larger.as_ptr(), at, "nor one too small");
        let fits = s.take(2 * BIG);
        assert_eq!(fits.as_ptr(), at);
    }

    #[test]
    fn what_is_kept_stays_within_the_bound_oldest_out_first() {
        let mut s = Spares::default();
        let each = Spares::MAX_BYTES / 4;
        let first = vec![0u8; each];
        let first_at = first.as_ptr();
        s.give(first);
        for _ in 0..4 {
            s.give(vec![0u8; each]);
        }
        assert!(s.bytes() <= Spares::MAX_BYTES);
        assert_eq!(s.bytes(), 4 * each);
        let kept: Vec<Vec<u8>> = (0..4).map(|_| s.take(each)).collect();
        assert!(
            kept.iter()
                .all(|v| v.as_ptr() != first_at && v.len() == each),
            "the oldest went first"
        );
        assert_eq!(s.bytes(), 0);
        s.give(vec![0u8; Spares::MAX_BYTES + 1]);
        assert_eq!(s.bytes(), 0, "a vector over the bound is not kept");
        for _ in 0..2 * Spares::MAX_VECS {
            s.give(vec![0u8; BIG]);
        }
        assert_eq!(s.bytes(), Spares::MAX_VECS * BIG);
    }
}

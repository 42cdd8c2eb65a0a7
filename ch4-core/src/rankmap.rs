//! Communicator rank → global process id maps (CH4 rank maps) and process groups.
//!
//! Every send translates the destination rank into the global process id that the netmod
//! addresses, so the translation must be cheap; and a job may create many communicators over a
//! million processes, so a map must not cost an array per communicator when the ranks follow a
//! pattern. As in CH4, a map is either *direct* (an explicit table) or *computed* from a few
//! numbers: identity (world and its dups), offset ("displaced"), and strided (regular blocks, e.g.
//! one process per node). [`RankMap::from_gpids`] picks the most compact model that is exact.
//!
//! Maps are immutable and shared through [`Arc`] by every dup of a communicator and by the groups
//! made from it, so a dup costs a reference count, not a table.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::{bail, Gpid, Rank, Result, PROC_NULL};

/// How the ranks `0..size` of a communicator or group map to global process ids.
///
/// Maps built by [`RankMap::from_gpids`] (and by [`Group`] operations) are canonical: a list of
/// ids has exactly one representation, so derived equality means "same processes, same order".
/// The variants are public so that layers which know the pattern (world, a node-local slice) can
/// build a map without a list; a hand-built map that breaks a variant's rules (such as
/// `blocksize == 0`, or ids past `u32::MAX`) never panics, its unmappable ranks just give `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RankMap {
    /// Rank equals gpid: `MPI_COMM_WORLD` and its dups, with no table and no arithmetic.
    Identity {
        /// Number of ranks.
        size: u32,
    },
    /// A contiguous slice of the world ("displaced" in CH4): gpid = `offset + rank`.
    Offset {
        /// Gpid of rank 0.
        offset: Gpid,
        /// Number of ranks.
        size: u32,
    },
    /// Regular blocks: gpid = `offset + (rank / blocksize) * stride + rank % blocksize`. Covers
    /// every k-th process (blocksize 1) and the first few processes of each node.
    Strided {
        /// Gpid of rank 0.
        offset: Gpid,
        /// Distance in gpids between the starts of consecutive blocks; larger than `blocksize`
        /// so that ids are distinct.
        stride: u32,
        /// Consecutive gpids per block; at least 1.
        blocksize: u32,
        /// Number of ranks; the last block may be partial.
        size: u32,
    },
    /// Irregular: an explicit table indexed by rank, shared by reference count because it is
    /// the one model whose size grows with the communicator.
    Direct(Arc<[Gpid]>),
}

impl RankMap {
    /// Picks the most compact model that represents exactly this list (identity, then offset,
    /// then strided, else a direct table), so that regular communicators cost O(1) memory.
    ///
    /// Fails with [`crate::ErrorKind::Arg`] if a gpid appears twice (a process cannot hold two
    /// ranks) or the list has more than `i32::MAX` entries (ranks would not fit in [`Rank`]).
    pub fn from_gpids(gpids: &[Gpid]) -> Result<RankMap> {
        if Rank::try_from(gpids.len()).is_err() {
            bail!(
                Arg,
                "{} processes do not fit in a communicator (ranks are 32-bit signed)",
                gpids.len()
            );
        }
        let mut seen = HashSet::with_capacity(gpids.len());
        for (rank, &g) in gpids.iter().enumerate() {
            if !seen.insert(g) {
                bail!(Arg, "process {g} appears twice (again at rank {rank})");
            }
        }
        Ok(Self::classify(gpids))
    }

    /// The model choice of [`RankMap::from_gpids`] without the duplicate check, for callers that
    /// already guarantee distinct ids. Always exact, whatever the input.
    fn classify(gpids: &[Gpid]) -> RankMap {
        let (Ok(size), Some(&first)) = (u32::try_from(gpids.len()), gpids.first()) else {
            return if gpids.is_empty() {
                RankMap::Identity { size: 0 }
            } else {
                RankMap::Direct(gpids.into())
            };
        };
        let base = u64::from(first);
        // Length of the leading run first, first+1, ...: the block size if the list is strided.
        let run = gpids
            .iter()
            .zip(base..)
            .take_while(|&(&g, want)| u64::from(g) == want)
            .count();
        if run == gpids.len() {
            return if first == 0 {
                RankMap::Identity { size }
            } else {
                RankMap::Offset {
                    offset: first,
                    size,
                }
            };
        }
        if let Some(&next) = gpids.get(run) {
            // A second block must start past the end of the first for the ids to stay distinct.
            if u64::from(next) > base + run as u64 {
                let candidate = RankMap::Strided {
                    offset: first,
                    stride: next - first,
                    // `run < gpids.len() <= u32::MAX`.
                    blocksize: run as u32,
                    size,
                };
                if (0..size)
                    .zip(gpids)
                    .all(|(r, &g)| candidate.gpid_at(r) == Some(g))
                {
                    return candidate;
                }
            }
        }
        RankMap::Direct(gpids.into())
    }

    /// Number of ranks. (A hand-built table longer than `u32::MAX` reports `u32::MAX`.)
    #[inline]
    pub fn size(&self) -> u32 {
        match self {
            RankMap::Identity { size }
            | RankMap::Offset { size, .. }
            | RankMap::Strided { size, .. } => *size,
            RankMap::Direct(t) => u32::try_from(t.len()).unwrap_or(u32::MAX),
        }
    }

    /// The gpid of `rank`, or `None` when `rank < 0` (wildcards, `PROC_NULL`) or `rank >= size`.
    ///
    /// On the send path for every message: no allocation, one range check and a little
    /// arithmetic (or one table load), so callers can skip a separate rank validation.
    #[inline]
    pub fn gpid(&self, rank: Rank) -> Option<Gpid> {
        self.gpid_at(u32::try_from(rank).ok()?)
    }

    /// [`RankMap::gpid`] for a rank already known to be non-negative.
    #[inline]
    fn gpid_at(&self, r: u32) -> Option<Gpid> {
        match *self {
            RankMap::Identity { size } => (r < size).then_some(r),
            RankMap::Offset { offset, size } => {
                if r < size {
                    offset.checked_add(r)
                } else {
                    None
                }
            }
            RankMap::Strided {
                offset,
                stride,
                blocksize,
                size,
            } => {
                if r >= size {
                    return None;
                }
                let block = r.checked_div(blocksize)?;
                // `blocksize != 0` here, so the remainder cannot fail; u64 cannot overflow
                // (at most 2^32 + 2^64 - 2^33 + 1 + 2^32).
                let g = u64::from(offset)
                    + u64::from(block) * u64::from(stride)
                    + u64::from(r % blocksize);
                Gpid::try_from(g).ok()
            }
            RankMap::Direct(ref table) => table.get(usize::try_from(r).ok()?).copied(),
        }
    }

    /// The rank of process `gpid`, or `None` if it is not a member; used to turn a message's
    /// source gpid into the rank a receive reports.
    ///
    /// O(1) for the computed models; an O(size) scan for [`RankMap::Direct`], which keeps the
    /// shared table free of a second (reverse) table. Callers that translate many ids against
    /// one direct map (such as [`Group::translate`]) build a reverse index once instead.
    pub fn rank_of(&self, gpid: Gpid) -> Option<Rank> {
        let r = match *self {
            RankMap::Identity { size } => (gpid < size).then_some(gpid)?,
            RankMap::Offset { offset, size } => {
                let d = gpid.checked_sub(offset)?;
                (d < size).then_some(d)?
            }
            RankMap::Strided {
                offset,
                stride,
                blocksize,
                size,
            } => {
                let d = gpid.checked_sub(offset)?;
                // A (malformed) stride of 0 stacks every block on the first one.
                let (block, within) = match d.checked_div(stride) {
                    Some(q) => (q, d % stride),
                    None => (0, d),
                };
                if within >= blocksize {
                    return None;
                }
                let r = u32::try_from(u64::from(block) * u64::from(blocksize) + u64::from(within))
                    .ok()?;
                (r < size).then_some(r)?
            }
            RankMap::Direct(ref table) => {
                let i = table.iter().position(|&g| g == gpid)?;
                return Rank::try_from(i).ok();
            }
        };
        Rank::try_from(r).ok()
    }

    /// The explicit list, rank by rank: O(size) time and memory, for building new maps and for
    /// reporting, never for the hot path.
    pub fn to_gpids(&self) -> Vec<Gpid> {
        match self {
            RankMap::Direct(table) => table.to_vec(),
            _ => self.members().collect(),
        }
    }

    /// The members in rank order, without materializing a list.
    fn members(&self) -> impl Iterator<Item = Gpid> + '_ {
        (0..self.size()).filter_map(move |r| self.gpid_at(r))
    }

    /// The model's name, for logs and debugging output: `"identity"`, `"offset"`, `"strided"`
    /// or `"direct"`.
    pub fn model_name(&self) -> &'static str {
        match self {
            RankMap::Identity { .. } => "identity",
            RankMap::Offset { .. } => "offset",
            RankMap::Strided { .. } => "strided",
            RankMap::Direct(_) => "direct",
        }
    }
}

/// Reverse lookups against one map, many times: a direct map gets a hash index (built once)
/// instead of a scan per query; computed maps answer by arithmetic.
enum Reverse<'a> {
    Computed(&'a RankMap),
    Table(HashMap<Gpid, Rank>),
}

impl<'a> Reverse<'a> {
    /// Queries below which scanning a direct table beats building an index.
    const SCAN_LIMIT: usize = 8;

    fn new(map: &'a RankMap, queries: usize) -> Self {
        match map {
            RankMap::Direct(table) if queries > Self::SCAN_LIMIT => {
                let mut index = HashMap::with_capacity(table.len());
                for (r, &g) in table.iter().enumerate() {
                    let Ok(r) = Rank::try_from(r) else { break };
                    // Keep the first rank, as the scan in `rank_of` would.
                    index.entry(g).or_insert(r);
                }
                Reverse::Table(index)
            }
            _ => Reverse::Computed(map),
        }
    }

    fn rank_of(&self, gpid: Gpid) -> Option<Rank> {
        match self {
            Reverse::Computed(map) => map.rank_of(gpid),
            Reverse::Table(index) => index.get(&gpid).copied(),
        }
    }

    fn contains(&self, gpid: Gpid) -> bool {
        self.rank_of(gpid).is_some()
    }
}

/// An ordered set of processes (`MPI_Group`): a shared rank map.
///
/// Cloning shares the map. Operations return canonical maps (see [`RankMap`]) and reuse this
/// group's map when the result is the same list, so equal groups made from one another share
/// memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    map: Arc<RankMap>,
}

impl Group {
    /// Wraps an existing shared map, e.g. a communicator's, without copying it.
    pub fn from_map(map: Arc<RankMap>) -> Group {
        Group { map }
    }

    /// The shared map, for building a communicator that uses this group's ranks.
    pub fn map(&self) -> &Arc<RankMap> {
        &self.map
    }

    /// The group of `MPI_COMM_WORLD`: ranks are gpids, so no table.
    pub fn world(size: u32) -> Group {
        Group::from_map(Arc::new(RankMap::Identity { size }))
    }

    /// Number of processes (`MPI_Group_size`).
    pub fn size(&self) -> u32 {
        self.map.size()
    }

    /// The gpid of `rank`; `None` when out of range. See [`RankMap::gpid`].
    #[inline]
    pub fn gpid(&self, rank: Rank) -> Option<Gpid> {
        self.map.gpid(rank)
    }

    /// The rank of `gpid` in this group (`MPI_Group_rank` for the calling process), or `None`.
    pub fn rank_of(&self, gpid: Gpid) -> Option<Rank> {
        self.map.rank_of(gpid)
    }

    /// A group from a list of distinct ids, sharing this group's map when the list is the same.
    fn derive(&self, gpids: &[Gpid]) -> Group {
        let map = RankMap::classify(gpids);
        if map == *self.map {
            self.clone()
        } else {
            Group::from_map(Arc::new(map))
        }
    }

    /// The processes at `ranks`, in that order (`MPI_Group_incl`).
    ///
    /// Fails with [`crate::ErrorKind::Rank`] for a rank outside the group and with
    /// [`crate::ErrorKind::Arg`] for a rank listed twice, as the new group would not be a set.
    pub fn incl(&self, ranks: &[Rank]) -> Result<Group> {
        let mut seen = HashSet::with_capacity(ranks.len());
        let mut gpids = Vec::with_capacity(ranks.len());
        for &r in ranks {
            let Some(g) = self.gpid(r) else {
                bail!(
                    Rank,
                    "rank {r} in the include list is outside the group of size {}",
                    self.size()
                );
            };
            if !seen.insert(r) {
                bail!(Arg, "rank {r} appears twice in the include list");
            }
            gpids.push(g);
        }
        Ok(self.derive(&gpids))
    }

    /// The processes not at `ranks`, in group order (`MPI_Group_excl`).
    ///
    /// The same checks as [`Group::incl`]: every listed rank must be in the group, once.
    pub fn excl(&self, ranks: &[Rank]) -> Result<Group> {
        let mut drop = HashSet::with_capacity(ranks.len());
        for &r in ranks {
            if self.gpid(r).is_none() {
                bail!(
                    Rank,
                    "rank {r} in the exclude list is outside the group of size {}",
                    self.size()
                );
            }
            if !drop.insert(r) {
                bail!(Arg, "rank {r} appears twice in the exclude list");
            }
        }
        let gpids: Vec<Gpid> = (0..self.size())
            .filter(|&r| Rank::try_from(r).map_or(true, |r| !drop.contains(&r)))
            .filter_map(|r| self.map.gpid_at(r))
            .collect();
        Ok(self.derive(&gpids))
    }

    /// The processes at ranks `first, first + stride, ...` up to and including `last`
    /// (`MPI_Group_range_incl` with one triplet; `stride` may be negative).
    ///
    /// As in MPICH, `first` and `last` must be ranks of the group ([`crate::ErrorKind::Rank`]),
    /// and `stride` must be nonzero and point from `first` towards `last`
    /// ([`crate::ErrorKind::Arg`]), since otherwise the triplet names no sensible range.
    pub fn range_incl(&self, first: Rank, last: Rank, stride: Rank) -> Result<Group> {
        for (what, r) in [("first", first), ("last", last)] {
            if self.gpid(r).is_none() {
                bail!(
                    Rank,
                    "range {what} rank {r} is outside the group of size {}",
                    self.size()
                );
            }
        }
        if stride == 0 {
            bail!(Arg, "range stride must not be 0");
        }
        if (first < last && stride < 0) || (first > last && stride > 0) {
            bail!(
                Arg,
                "range stride {stride} leads away from last rank {last} (first rank {first})"
            );
        }
        let (first, last, stride) = (i64::from(first), i64::from(last), i64::from(stride));
        let count = (last - first) / stride + 1;
        let gpids: Vec<Gpid> = (0..count)
            .filter_map(|k| Rank::try_from(first + k * stride).ok())
            .filter_map(|r| self.gpid(r))
            .collect();
        Ok(self.derive(&gpids))
    }

    /// For each of `ranks` in this group, its rank in `other` (`MPI_Group_translate_ranks`):
    /// `None` (`MPI_UNDEFINED`) when the process is not in `other` or the rank is not in this
    /// group; `PROC_NULL` translates to itself, as MPI specifies.
    pub fn translate(&self, ranks: &[Rank], other: &Group) -> Vec<Option<Rank>> {
        let reverse = Reverse::new(&other.map, ranks.len());
        ranks
            .iter()
            .map(|&r| {
                if r == PROC_NULL {
                    Some(PROC_NULL)
                } else {
                    self.gpid(r).and_then(|g| reverse.rank_of(g))
                }
            })
            .collect()
    }

    /// All of this group, then the processes of `other` not in it, in `other`'s order
    /// (`MPI_Group_union`). (Should the two together name all 2^32 possible gpids, the result
    /// stops at `u32::MAX` members, the most a size can count.)
    pub fn union(&self, other: &Group) -> Group {
        if Arc::ptr_eq(&self.map, &other.map) {
            return self.clone();
        }
        let mine = Reverse::new(&self.map, other.map.size() as usize);
        let room = (u32::MAX - self.map.size()) as usize;
        let mut gpids: Vec<Gpid> = self.map.members().collect();
        gpids.extend(
            other
                .map
                .members()
                .filter(|&g| !mine.contains(g))
                .take(room),
        );
        self.derive(&gpids)
    }

    /// The processes of this group that are also in `other`, in this group's order
    /// (`MPI_Group_intersection`).
    pub fn intersection(&self, other: &Group) -> Group {
        if Arc::ptr_eq(&self.map, &other.map) {
            return self.clone();
        }
        let theirs = Reverse::new(&other.map, self.map.size() as usize);
        let gpids: Vec<Gpid> = self.map.members().filter(|&g| theirs.contains(g)).collect();
        self.derive(&gpids)
    }

    /// The processes of this group that are not in `other`, in this group's order
    /// (`MPI_Group_difference`).
    pub fn difference(&self, other: &Group) -> Group {
        if Arc::ptr_eq(&self.map, &other.map) {
            return Group::world(0);
        }
        let theirs = Reverse::new(&other.map, self.map.size() as usize);
        let gpids: Vec<Gpid> = self
            .map
            .members()
            .filter(|&g| !theirs.contains(g))
            .collect();
        self.derive(&gpids)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;
    use proptest::prelude::*;

    fn map(gpids: &[Gpid]) -> RankMap {
        RankMap::from_gpids(gpids).unwrap()
    }

    fn group(gpids: &[Gpid]) -> Group {
        Group::from_map(Arc::new(map(gpids)))
    }

    /// Every rank maps and maps back, and everything outside the range is `None`.
    fn check_roundtrip(m: &RankMap, gpids: &[Gpid]) {
        assert_eq!(m.size() as usize, gpids.len());
        assert_eq!(m.to_gpids(), gpids, "{m:?}");
        for (r, &g) in gpids.iter().enumerate() {
            assert_eq!(m.gpid(r as Rank), Some(g), "{m:?} rank {r}");
            assert_eq!(m.rank_of(g), Some(r as Rank), "{m:?} gpid {g}");
        }
        let n = gpids.len() as Rank;
        for r in [-1, PROC_NULL, i32::MIN, n, n + 1, i32::MAX] {
            assert_eq!(m.gpid(r), None, "{m:?} rank {r}");
        }
    }

    #[test]
    fn picks_each_model() {
        let cases: &[(&[Gpid], RankMap)] = &[
            (&[], RankMap::Identity { size: 0 }),
            (&[0], RankMap::Identity { size: 1 }),
            (&[0, 1, 2, 3], RankMap::Identity { size: 4 }),
            (&[7], RankMap::Offset { offset: 7, size: 1 }),
            (&[4, 5, 6], RankMap::Offset { offset: 4, size: 3 }),
            (
                &[0, 2, 4, 6],
                RankMap::Strided {
                    offset: 0,
                    stride: 2,
                    blocksize: 1,
                    size: 4,
                },
            ),
            (
                &[0, 1, 4, 5, 8, 9],
                RankMap::Strided {
                    offset: 0,
                    stride: 4,
                    blocksize: 2,
                    size: 6,
                },
            ),
            (
                &[10, 11, 12, 20, 21],
                RankMap::Strided {
                    offset: 10,
                    stride: 10,
                    blocksize: 3,
                    size: 5,
                },
            ),
            (&[3, 1, 2], RankMap::Direct(Arc::from(&[3, 1, 2][..]))),
            (&[0, 2, 3], RankMap::Direct(Arc::from(&[0, 2, 3][..]))),
            (&[0, 1, 4, 6], RankMap::Direct(Arc::from(&[0, 1, 4, 6][..]))),
        ];
        for (gpids, want) in cases {
            let got = map(gpids);
            assert_eq!(&got, want, "{gpids:?}");
            check_roundtrip(&got, gpids);
        }
        assert_eq!(map(&[0, 1]).model_name(), "identity");
        assert_eq!(map(&[2, 3]).model_name(), "offset");
        assert_eq!(map(&[1, 3]).model_name(), "strided");
        assert_eq!(map(&[3, 1]).model_name(), "direct");
    }

    #[test]
    fn ids_near_the_top_of_the_range() {
        let top = u32::MAX;
        for gpids in [
            vec![top],
            vec![top - 2, top - 1, top],
            vec![top - 4, top - 2, top],
            vec![0, top],
            vec![top, 0],
        ] {
            check_roundtrip(&map(&gpids), &gpids);
        }
    }

    #[test]
    fn duplicates_are_rejected() {
        for gpids in [&[1, 1][..], &[0, 1, 2, 0], &[5, 9, 5]] {
            let e = RankMap::from_gpids(gpids).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Arg);
        }
    }

    #[test]
    fn hand_built_maps_roundtrip() {
        let cases = [
            (RankMap::Identity { size: 3 }, vec![0, 1, 2]),
            (RankMap::Offset { offset: 9, size: 2 }, vec![9, 10]),
            (
                RankMap::Strided {
                    offset: 1,
                    stride: 8,
                    blocksize: 2,
                    size: 5,
                },
                vec![1, 2, 9, 10, 17],
            ),
            (RankMap::Direct(Arc::from(&[4, 0, 2][..])), vec![4, 0, 2]),
        ];
        for (m, gpids) in cases {
            check_roundtrip(&m, &gpids);
        }
    }

    #[test]
    fn malformed_maps_never_panic() {
        let maps = [
            RankMap::Offset {
                offset: u32::MAX - 1,
                size: 5,
            },
            RankMap::Strided {
                offset: 3,
                stride: 4,
                blocksize: 0,
                size: 5,
            },
            RankMap::Strided {
                offset: 3,
                stride: 0,
                blocksize: 2,
                size: 5,
            },
            RankMap::Strided {
                offset: u32::MAX,
                stride: u32::MAX,
                blocksize: 1,
                size: u32::MAX,
            },
            RankMap::Identity { size: u32::MAX },
        ];
        for m in &maps {
            for r in [i32::MIN, -1, 0, 1, 2, 3, 4, 5, i32::MAX] {
                if let Some(g) = m.gpid(r) {
                    // Whatever rank_of answers must map back to the same process.
                    let back = m.rank_of(g).expect("a mapped gpid has a rank");
                    assert_eq!(m.gpid(back), Some(g), "{m:?}");
                }
            }
            for g in [0, 1, 3, 4, 5, 7, u32::MAX - 1, u32::MAX] {
                if let Some(r) = m.rank_of(g) {
                    assert_eq!(m.gpid(r), Some(g), "{m:?}");
                }
            }
        }
        assert_eq!(maps[0].to_gpids(), vec![u32::MAX - 1, u32::MAX]);
        assert!(maps[1].to_gpids().is_empty());
        assert_eq!(maps[4].gpid(i32::MAX), Some(i32::MAX as u32));
        assert_eq!(maps[4].rank_of(u32::MAX - 1), None, "not a valid Rank");
    }

    #[test]
    fn group_basics_and_sharing() {
        let w = Group::world(8);
        assert_eq!(w.size(), 8);
        assert_eq!(w.gpid(3), Some(3));
        assert_eq!(w.rank_of(7), Some(7));
        assert_eq!(w.gpid(8), None);
        let dup = w.clone();
        assert!(Arc::ptr_eq(dup.map(), w.map()));
        let all = w.incl(&[0, 1, 2, 3, 4, 5, 6, 7]).unwrap();
        assert!(Arc::ptr_eq(all.map(), w.map()), "same list reuses the map");
        let evens = w.range_incl(0, 7, 2).unwrap();
        assert_eq!(evens.map().model_name(), "strided");
        assert_eq!(evens.map().to_gpids(), [0, 2, 4, 6]);
        let down = w.range_incl(6, 1, -2).unwrap();
        assert_eq!(down.map().to_gpids(), [6, 4, 2]);
        assert_eq!(w.range_incl(5, 5, -3).unwrap().map().to_gpids(), [5]);
        assert_eq!(w.range_incl(0, 7, 3).unwrap().map().to_gpids(), [0, 3, 6]);
        let odd = w.excl(&[0, 2, 4, 6]).unwrap();
        assert_eq!(odd.map().to_gpids(), [1, 3, 5, 7]);
        assert_eq!(
            evens.translate(&[0, 1, 3, PROC_NULL, 9, -1], &down),
            vec![None, Some(2), Some(0), Some(PROC_NULL), None, None]
        );
        assert_eq!(evens.union(&odd).map().to_gpids(), [0, 2, 4, 6, 1, 3, 5, 7]);
        assert_eq!(evens.intersection(&down).map().to_gpids(), [2, 4, 6]);
        assert_eq!(evens.difference(&down).map().to_gpids(), [0]);
        assert_eq!(w.difference(&w).size(), 0);
        assert!(Arc::ptr_eq(w.union(&w).map(), w.map()));
        assert!(Arc::ptr_eq(w.intersection(&dup).map(), w.map()));
        assert_eq!(w.union(&evens), w, "nothing new from evens");
    }

    #[test]
    fn group_errors() {
        let w = Group::world(4);
        let kind = |r: Result<Group>| r.unwrap_err().kind();
        assert_eq!(kind(w.incl(&[0, 4])), ErrorKind::Rank);
        assert_eq!(kind(w.incl(&[-1])), ErrorKind::Rank);
        assert_eq!(kind(w.incl(&[PROC_NULL])), ErrorKind::Rank);
        assert_eq!(kind(w.incl(&[1, 2, 1])), ErrorKind::Arg);
        assert_eq!(kind(w.excl(&[7])), ErrorKind::Rank);
        assert_eq!(kind(w.excl(&[3, 3])), ErrorKind::Arg);
        assert_eq!(kind(w.range_incl(0, 4, 1)), ErrorKind::Rank);
        assert_eq!(kind(w.range_incl(-1, 3, 1)), ErrorKind::Rank);
        assert_eq!(kind(w.range_incl(0, 3, 0)), ErrorKind::Arg);
        assert_eq!(kind(w.range_incl(0, 3, -1)), ErrorKind::Arg);
        assert_eq!(kind(w.range_incl(3, 0, 1)), ErrorKind::Arg);
        assert_eq!(w.incl(&[]).unwrap().size(), 0);
        assert_eq!(w.excl(&[]).unwrap(), w);
        assert_eq!(w.excl(&[0, 1, 2, 3]).unwrap().size(), 0);
    }

    #[test]
    fn translate_against_a_large_direct_map_uses_an_index() {
        let a: Vec<Gpid> = (0..200).rev().collect();
        let b: Vec<Gpid> = (0..200).map(|i| (i * 7) % 200).collect();
        let (ga, gb) = (group(&a), group(&b));
        assert_eq!(gb.map().model_name(), "direct");
        let ranks: Vec<Rank> = (0..200).collect();
        let got = ga.translate(&ranks, &gb);
        for (r, t) in ranks.iter().zip(got) {
            let g = a[*r as usize];
            let want = b.iter().position(|&x| x == g).map(|i| i as Rank);
            assert_eq!(t, want);
        }
    }

    /// Lists of distinct gpids, some random, some built from a computed pattern.
    fn gpid_list() -> impl Strategy<Value = Vec<Gpid>> {
        let random = proptest::collection::vec(0u32..64, 0..24).prop_map(|v| {
            let mut seen = HashSet::new();
            v.into_iter()
                .filter(|g| seen.insert(*g))
                .collect::<Vec<_>>()
        });
        let patterned = (
            prop_oneof![0u32..100, (u32::MAX - 200)..=u32::MAX],
            1u32..6,
            0u32..6,
            0u32..20,
        )
            .prop_map(|(offset, blocksize, gap, size)| {
                RankMap::Strided {
                    offset,
                    stride: blocksize + gap,
                    blocksize,
                    size,
                }
                .to_gpids()
            });
        let sorted = random.clone().prop_map(|mut v| {
            v.sort_unstable();
            v
        });
        prop_oneof![random, patterned, sorted]
    }

    /// `group` restricted to a universe small enough that groups overlap.
    fn small_group() -> impl Strategy<Value = Vec<Gpid>> {
        proptest::collection::vec(0u32..16, 0..12).prop_map(|v| {
            let mut seen = HashSet::new();
            v.into_iter().filter(|g| seen.insert(*g)).collect()
        })
    }

    fn model_select(list: &[Gpid], ranks: &[Rank]) -> std::result::Result<Vec<Rank>, ErrorKind> {
        let mut seen = HashSet::new();
        for &r in ranks {
            if r < 0 || r as usize >= list.len() {
                return Err(ErrorKind::Rank);
            }
            if !seen.insert(r) {
                return Err(ErrorKind::Arg);
            }
        }
        Ok(ranks.to_vec())
    }

    fn canonical(g: &Group) -> bool {
        **g.map() == RankMap::classify(&g.map().to_gpids())
    }

    proptest! {
        #[test]
        fn from_gpids_roundtrips(list in gpid_list()) {
            let m = RankMap::from_gpids(&list).unwrap();
            prop_assert_eq!(m.to_gpids(), list.clone());
            prop_assert_eq!(m.size() as usize, list.len());
            for (r, &g) in list.iter().enumerate() {
                prop_assert_eq!(m.gpid(r as Rank), Some(g));
                prop_assert_eq!(m.rank_of(g), Some(r as Rank));
            }
            prop_assert_eq!(m.gpid(list.len() as Rank), None);
            prop_assert_eq!(m.gpid(-1), None);
            // Ids that are not members have no rank.
            for g in [0u32, 1, 50, 63, 64, 100, u32::MAX - 1, u32::MAX] {
                if !list.contains(&g) {
                    prop_assert_eq!(m.rank_of(g), None);
                }
            }
            // Any increasing list of up to two ids follows a computed pattern.
            if list.len() <= 2 && list.windows(2).all(|w| w[0] < w[1]) {
                prop_assert_ne!(m.model_name(), "direct");
            }
        }

        #[test]
        fn patterned_lists_get_computed_models(
            offset in prop_oneof![0u32..100, (u32::MAX - 200)..=u32::MAX],
            blocksize in 1u32..6,
            gap in 0u32..6,
            size in 0u32..20,
        ) {
            let built = RankMap::Strided { offset, stride: blocksize + gap, blocksize, size };
            let list = built.to_gpids();
            let m = RankMap::from_gpids(&list).unwrap();
            prop_assert_eq!(m.to_gpids(), list.clone());
            if list.len() == size as usize {
                prop_assert_ne!(m.model_name(), "direct", "{:?}", list);
            }
        }

        #[test]
        fn group_ops_match_a_vec_model(
            a in small_group(),
            b in small_group(),
            ranks in proptest::collection::vec(-3i32..15, 0..8),
            first in -1i32..14,
            last in -1i32..14,
            stride in -4i32..5,
        ) {
            let (ga, gb) = (group(&a), group(&b));
            let pick = |rs: &[Rank]| rs.iter().map(|&r| a[r as usize]).collect::<Vec<_>>();

            match (ga.incl(&ranks), model_select(&a, &ranks)) {
                (Ok(g), Ok(rs)) => {
                    prop_assert_eq!(g.map().to_gpids(), pick(&rs));
                    prop_assert!(canonical(&g));
                }
                (Err(e), Err(k)) => prop_assert_eq!(e.kind(), k),
                (got, want) => prop_assert!(false, "incl {:?} vs {:?}", got, want),
            }

            match (ga.excl(&ranks), model_select(&a, &ranks)) {
                (Ok(g), Ok(rs)) => {
                    let want: Vec<Gpid> = (0..a.len() as Rank)
                        .filter(|r| !rs.contains(r))
                        .map(|r| a[r as usize])
                        .collect();
                    prop_assert_eq!(g.map().to_gpids(), want);
                    prop_assert!(canonical(&g));
                }
                (Err(e), Err(k)) => prop_assert_eq!(e.kind(), k),
                (got, want) => prop_assert!(false, "excl {:?} vs {:?}", got, want),
            }

            let n = a.len() as Rank;
            let in_range = |r: Rank| (0..n).contains(&r);
            let want_range = if !in_range(first) || !in_range(last) {
                Err(ErrorKind::Rank)
            } else if stride == 0 || (first < last && stride < 0) || (first > last && stride > 0) {
                Err(ErrorKind::Arg)
            } else {
                let mut rs = Vec::new();
                let mut r = first;
                while (stride > 0 && r <= last) || (stride < 0 && r >= last) {
                    rs.push(r);
                    r += stride;
                }
                Ok(pick(&rs))
            };
            match (ga.range_incl(first, last, stride), want_range) {
                (Ok(g), Ok(want)) => {
                    prop_assert_eq!(g.map().to_gpids(), want);
                    prop_assert!(canonical(&g));
                }
                (Err(e), Err(k)) => prop_assert_eq!(e.kind(), k),
                (got, want) => prop_assert!(false, "range_incl {:?} vs {:?}", got, want),
            }

            let translated = ga.translate(&ranks, &gb);
            for (&r, t) in ranks.iter().zip(&translated) {
                let want = if r == PROC_NULL {
                    Some(PROC_NULL)
                } else if in_range(r) {
                    b.iter().position(|&g| g == a[r as usize]).map(|i| i as Rank)
                } else {
                    None
                };
                prop_assert_eq!(*t, want);
            }

            let union: Vec<Gpid> = a.iter().copied().chain(b.iter().copied().filter(|g| !a.contains(g))).collect();
            let inter: Vec<Gpid> = a.iter().copied().filter(|g| b.contains(g)).collect();
            let diff: Vec<Gpid> = a.iter().copied().filter(|g| !b.contains(g)).collect();
            for (got, want) in [(ga.union(&gb), union), (ga.intersection(&gb), inter), (ga.difference(&gb), diff)] {
                prop_assert_eq!(got.map().to_gpids(), want);
                prop_assert!(canonical(&got));
            }
        }
    }
}

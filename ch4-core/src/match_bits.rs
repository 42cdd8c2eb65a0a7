//! The 60 low bits a natively matching network matches MPI messages on: the context id, the
//! sender's rank in the communicator, and the tag — the layout MPICH's ch4:ofi
//! (`MPIDI_OFI_init_sendtag`) and ch4:ucx (`MPIDI_UCX_init_tag`) share.
//!
//! ```text
//!  63     60 59            44 43                    24 23                     0
//! [ netmod  ][ context id 16 ][ source rank 20       ][ tag 24               ]
//! ```
//!
//! The top four bits are each netmod's own (its protocol tag spaces: acknowledgements,
//! descriptors, credit), which no user receive leaves free, so no user receive matches them.
//! A source rank in the bits means a receive from one rank matches by bits alone, with no
//! per-communicator lookup; the sender's process is not in them (a network that carries
//! remote data, libfabric's CQ data, sends it there; otherwise it is the communicator's member
//! at that rank, [`crate::core::Core::process_of`]).

use crate::{ContextId, Envelope, Error, ErrorKind, Rank, Result, Tag, ANY_SOURCE, ANY_TAG};

/// Bits of the user tag.
pub const TAG_BITS: u32 = 24;
/// Bits of the source rank.
pub const RANK_BITS: u32 = 20;
/// Bits of the context id.
pub const CONTEXT_BITS: u32 = 16;

/// The largest tag a message can carry (MPI_TAG_UB of a netmod with this layout).
pub const TAG_UB: Tag = (1 << TAG_BITS) - 1;
/// The most processes a job can have (ranks must fit their bits).
pub const MAX_PROCESSES: u64 = 1 << RANK_BITS;

const TAG_MASK: u64 = (1 << TAG_BITS) - 1;
const RANK_SHIFT: u32 = TAG_BITS;
const RANK_MASK: u64 = ((1 << RANK_BITS) - 1) << RANK_SHIFT;
const CONTEXT_SHIFT: u32 = TAG_BITS + RANK_BITS;
const CONTEXT_MASK: u64 = ((1 << CONTEXT_BITS) - 1) << CONTEXT_SHIFT;

/// The bits of a message from communicator rank `env.source` with `env.tag` in `env.context`,
/// or an [`ErrorKind::Arg`] error naming `network` when the context id or the rank does not
/// fit.
#[inline(always)]
pub fn pack(env: &Envelope, network: &str) -> Result<u64> {
    let (context, source) = (u64::from(env.context), env.source as u64);
    if context >> CONTEXT_BITS != 0 || source >> RANK_BITS != 0 || env.source < 0 {
        return Err(too_wide(env, network));
    }
    // Tags were checked against TAG_UB by the device (the engine declares it).
    let tag = (env.tag as u64) & TAG_MASK;
    Ok((context << CONTEXT_SHIFT) | (source << RANK_SHIFT) | tag)
}

/// The bits a receive for `want` (wildcards allowed) matches, and the bits it leaves free (its
/// wildcards): libfabric's ignore mask; UCX's tag mask is its complement.
#[inline(always)]
pub fn wanted(want: &Envelope, network: &str) -> Result<(u64, u64)> {
    let context = u64::from(want.context);
    if context >> CONTEXT_BITS != 0
        || (want.source != ANY_SOURCE && (want.source as u64) >> RANK_BITS != 0)
    {
        return Err(too_wide(want, network));
    }
    let mut bits = context << CONTEXT_SHIFT;
    let mut free = 0;
    if want.source == ANY_SOURCE {
        free |= RANK_MASK;
    } else {
        bits |= (want.source as u64) << RANK_SHIFT;
    }
    if want.tag == ANY_TAG {
        free |= TAG_MASK;
    } else {
        bits |= (want.tag as u64) & TAG_MASK;
    }
    Ok((bits, free))
}

/// The context id, source rank and tag that `bits` carry.
#[inline(always)]
pub fn unpack(bits: u64) -> (ContextId, Rank, Tag) {
    (
        ((bits & CONTEXT_MASK) >> CONTEXT_SHIFT) as ContextId,
        ((bits & RANK_MASK) >> RANK_SHIFT) as Rank,
        (bits & TAG_MASK) as Tag,
    )
}

#[cold]
fn too_wide(env: &Envelope, network: &str) -> Error {
    Error::new(
        ErrorKind::Arg,
        format!(
            "context id {} or rank {} does not fit the {network} netmod's match bits ({} \
             context bits, {} rank bits)",
            env.context, env.source, CONTEXT_BITS, RANK_BITS
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(context: u32, source: i32, tag: i32) -> Envelope {
        Envelope {
            context,
            source,
            tag,
        }
    }

    /// A message matches a receive when their bits agree outside the receive's free bits.
    fn matches(send: u64, (bits, free): (u64, u64)) -> bool {
        (send | free) == (bits | free)
    }

    #[test]
    fn receives_match_what_mpi_says_they_match() {
        let s = pack(&env(6, 3, 77), "test").unwrap();
        let want = |c, r, t| wanted(&env(c, r, t), "test").unwrap();
        assert!(matches(s, want(6, 3, 77)));
        assert!(matches(s, want(6, ANY_SOURCE, 77)));
        assert!(matches(s, want(6, 3, ANY_TAG)));
        assert!(matches(s, want(6, ANY_SOURCE, ANY_TAG)));
        assert!(!matches(s, want(7, ANY_SOURCE, ANY_TAG)), "other context");
        assert!(!matches(s, want(6, 4, 77)), "other source");
        assert!(!matches(s, want(6, 3, 78)), "other tag");
        assert_eq!(unpack(s), (6, 3, 77));
    }

    #[test]
    fn the_extremes_fit_and_beyond_is_an_error() {
        let top = env((1 << CONTEXT_BITS) - 1, (1 << RANK_BITS) - 1, TAG_UB);
        let bits = pack(&top, "test").unwrap();
        assert_eq!(unpack(bits), (top.context, top.source, TAG_UB));
        assert_eq!(bits >> 60, 0, "the fields never reach the netmod's bits");
        let (_, free) = wanted(&env(0, ANY_SOURCE, ANY_TAG), "test").unwrap();
        assert_eq!(free >> 60, 0, "no receive leaves a netmod bit free");
        let e = pack(&env(1 << CONTEXT_BITS, 0, 0), "UCX").unwrap_err();
        assert!(e.to_string().contains("UCX netmod's match bits"), "{e}");
        assert!(pack(&env(0, 1 << RANK_BITS, 0), "test").is_err());
        assert!(pack(&env(0, -2, 0), "test").is_err());
        assert!(wanted(&env(0, 1 << RANK_BITS, 0), "test").is_err());
    }
}

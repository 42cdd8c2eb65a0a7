//! The 64-bit tag of a UCX tagged message (`ucp_tag_t`).
//!
//! ```text
//!  63  62  61 60 59            44 43                    24 23                     0
//! [ 0 | 0 |CR| 0][ context id 16 ][ source rank 20       ][ tag 24               ]
//! ```
//!
//! - The context id separates communicators (and their collectives); the source is the sender's
//!   rank in that communicator, so a receive from one rank matches by tag bits alone, as in
//!   MPICH's ch4:ucx (`MPIDI_UCX_init_tag`: context, source rank, tag). UCX reports no sender
//!   for a tagged message (`ucp_tag_recv_info_t` has only the tag and the length), so the
//!   sender's *process* is the communicator's member at that rank.
//! - `CR` (bit 61): eager credit given back (see `crate::credit`), in a tag space of its own
//!   that no user receive matches (they never mask the bit): the giver's process in bits
//!   32-51, nothing else, so that a receive for one giver's credit takes exactly one tag; the
//!   number of messages travels as the message's 4 bytes.
//!
//! Every receive of a user message that names its source and tag takes exactly one tag (a full
//! mask). UCX keeps such receives in a hash by tag; one with any bit masked out goes to a list
//! that every arriving message is checked against (`ucp_tag_exp_search_all`). So no bit may be
//! left to mark anything about a message that receives must ignore, and credit receives take
//! one giver's exact tag.
//!
//! Synchronous sends need no bit: UCX acknowledges them itself (`ucp_tag_send_sync_nbx`), and
//! long messages go by UCX's own rendezvous.

use ch4_core::match_bits;
use ch4_core::{Envelope, Gpid, Rank, Result, Tag};

pub use ch4_core::match_bits::{CONTEXT_BITS, MAX_PROCESSES, RANK_BITS, TAG_BITS, TAG_UB};

/// The credit bit.
pub const CREDIT: u64 = 1 << 61;
/// The mask of a receive that takes exactly one tag.
pub const EXACT: u64 = u64::MAX;
/// The mask of the receives for credit: the credit bit, any giver, any amount.
pub const CREDIT_MASK: u64 = !((1 << 52) - 1);

/// The tag of a message from communicator rank `env.source` with `env.tag` in `env.context`
/// ([`match_bits::pack`]).
#[inline(always)]
pub fn send_tag(env: &Envelope) -> Result<u64> {
    match_bits::pack(env, "UCX")
}

/// The tag and mask of a receive for `want` (wildcards allowed). UCX's mask is the bits that
/// must match: the complement of the receive's free bits.
#[inline(always)]
pub fn recv_tag(want: &Envelope) -> Result<(u64, u64)> {
    let (bits, free) = match_bits::wanted(want, "UCX")?;
    Ok((bits, !free))
}

/// The context id, source rank and tag a message's tag carries.
#[inline(always)]
pub fn fields(bits: u64) -> (u32, Rank, Tag) {
    match_bits::unpack(bits)
}

/// The tag of a credit message from process `giver` (the number of messages is its payload).
#[inline(always)]
pub fn credit_tag(giver: Gpid) -> u64 {
    CREDIT | (u64::from(giver) << 32)
}

/// The giver of a credit message's tag.
#[inline(always)]
pub fn from_credit_tag(bits: u64) -> Gpid {
    ((bits >> 32) & ((1 << 20) - 1)) as Gpid
}

/// A credit message as it arrived (its tag and its payload, if the receive completed whole):
/// the giver and, when the payload is the 4 bytes a giver sends, the number of messages given
/// back. Anything else a peer sends there is `None` (ignored, with a warning).
pub fn credit_message(bits: u64, payload: Option<&[u8]>) -> (Gpid, Option<u32>) {
    let count = payload.and_then(|p| <[u8; 4]>::try_from(p).ok());
    (from_credit_tag(bits), count.map(u32::from_le_bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ch4_core::{ANY_SOURCE, ANY_TAG};

    fn env(context: u32, source: i32, tag: i32) -> Envelope {
        Envelope {
            context,
            source,
            tag,
        }
    }

    /// What UCX does: a message matches when its tag agrees with the receive's under the mask.
    fn matches(send: u64, (bits, mask): (u64, u64)) -> bool {
        (send & mask) == (bits & mask)
    }

    #[test]
    fn the_mask_is_what_must_match() {
        let s = send_tag(&env(6, 3, 77)).unwrap();
        assert!(matches(s, recv_tag(&env(6, ANY_SOURCE, ANY_TAG)).unwrap()));
        assert!(!matches(s, recv_tag(&env(6, 4, ANY_TAG)).unwrap()));
        let (_, mask) = recv_tag(&env(6, 3, 77)).unwrap();
        assert_eq!(mask, EXACT, "a receive without wildcards matches every bit");
        assert_eq!(fields(s), (6, 3, 77));
    }

    #[test]
    fn credit_has_a_tag_space_of_its_own() {
        let top = (1 << RANK_BITS) - 1;
        for giver in [0, 5, top] {
            let c = credit_tag(giver);
            let any = recv_tag(&env((1 << CONTEXT_BITS) - 1, ANY_SOURCE, ANY_TAG)).unwrap();
            assert!(!matches(c, any), "no user receive takes credit");
            assert!(matches(c, (CREDIT, CREDIT_MASK)));
            assert!(
                matches(c, (credit_tag(giver), EXACT)),
                "one giver's exact tag"
            );
            assert!(
                !matches(credit_tag(giver ^ 1), (c, EXACT)),
                "and no other's"
            );
            assert_eq!(from_credit_tag(c), giver);
        }
        let user = send_tag(&env((1 << CONTEXT_BITS) - 1, top as i32, TAG_UB)).unwrap();
        assert!(
            !matches(user, (CREDIT, CREDIT_MASK)),
            "credit receives take no user message"
        );
    }
}

//! The 64 match bits of a libfabric tagged message, and what travels in its remote CQ data.
//!
//! ```text
//!  63  62  61  60 59            44 43                    24 23                     0
//! [ 0 | 0 |ACK| 0 ][ context id 16 ][ source rank 20       ][ tag 24               ]
//! ```
//!
//! - `ACK`: an acknowledgement of a synchronous send, in a tag space of its own: no receive of
//!   user messages can match it (they never ignore the bit). Its low 32 bits name the
//!   acknowledgement receive the synchronous sender posted.
//! - The context id separates communicators (and their collectives); the source is the sender's
//!   rank in that communicator, so a receive from one rank matches by tag bits alone and the
//!   address table needs no per-communicator lookup. MPICH's ch4:ofi lays out its match bits
//!   the same way (protocol, context id, source rank, tag; `MPIDI_OFI_init_sendtag`).
//!
//! The remote CQ data (8 bytes on the providers this netmod accepts) carries the sender's
//! process number in its high half, so every receive learns the process its message came from,
//! and in its low half, for a synchronous send, the name of the acknowledgement receive (0 for
//! any other send), below bit 30. Bit 30 alone, [`UNCREDITED`], marks a message sent without
//! its receiver's eager credit (as a synchronous send). Its top bit, [`LARGE`], marks the stub of a message sent by RMA read
//! (see `crate::large`). With [`INLINE`] as well, the stub's 32-byte payload is the
//! sender's acknowledgement name and the descriptor (the message's length and the region to
//! read it from), and the low half's other 30 bits are the message's length, which a probe
//! reports without receiving the stub. Without it (messages of 1 GiB and more) the stub
//! carries no data, the low half names the sender's acknowledgement receive, which the
//! receiver answers once it has read the message, and the descriptor travels apart:
//!
//! - `CONTROL` (bit 60): the descriptor of such a message, sent just before the stub to the
//!   same receiver, in a tag space of its own named by the sender's process and the stub's
//!   acknowledgement name:
//!
//! ```text
//!  63    61  60  59       52 51                  32 31                                   0
//! [ 0 | 0 | 1 ][ 0          ][ sender process 20   ][ acknowledgement name 32             ]
//! ```
//!
//! - `CREDIT` (`ACK | CONTROL`, nothing else): eager credit given back (see `crate::credit`),
//!   an empty message whose remote CQ data carries the giver's process and the amount.
//!
//! Synchronous mode travels in the CQ data rather than as a tag bit: libfabric 1.17's
//! shm provider does not match an unexpected message whose tag has a bit the receive ignores
//! above the 60th, and receives would otherwise have to ignore it.

use ch4_core::match_bits;
use ch4_core::native::{word_of, OpIndex};
use ch4_core::{Envelope, Error, ErrorKind, Gpid, Rank, Result, Tag};

pub use ch4_core::match_bits::{CONTEXT_BITS, MAX_PROCESSES, RANK_BITS, TAG_BITS, TAG_UB};

/// Acknowledgement bit.
pub const ACK: u64 = 1 << 61;
/// Control bit: a large message's descriptor.
pub const CONTROL: u64 = 1 << 60;
/// The match bits of every credit message: a tag space of its own, matched exactly.
pub const CREDIT: u64 = ACK | CONTROL;
/// The flag in the low half of remote CQ data that marks a large message's stub.
pub const LARGE: u32 = 1 << 31;
/// With [`LARGE`]: the stub carries its descriptor and acknowledgement name as its payload
/// ([`INLINE_STUB_BYTES`]), and the low half's other 30 bits are the message's length (for a
/// probe, which sees no payload) instead of the acknowledgement name.
pub const INLINE: u32 = 1 << 30;
/// Without [`LARGE`]: a message sent without its receiver's eager credit, as a synchronous
/// send (see `crate::credit`); its receiver owes no credit for it. Acknowledgement names stay
/// below this bit.
pub const UNCREDITED: u32 = 1 << 30;
/// The longest message whose stub carries its descriptor.
pub const INLINE_MAX_LEN: usize = (INLINE - 1) as usize;
/// The payload of a stub that carries its descriptor: the acknowledgement name and the
/// descriptor, four little-endian words.
pub const INLINE_STUB_BYTES: usize = 32;

/// The match bits of a message from communicator rank `env.source` with `env.tag` in
/// `env.context` ([`match_bits::pack`]).
#[inline(always)]
pub fn send_tag(env: &Envelope) -> Result<u64> {
    match_bits::pack(env, "OFI")
}

/// The match bits and ignore mask of a receive for `want` (wildcards allowed).
#[inline(always)]
pub fn recv_tag(want: &Envelope) -> Result<(u64, u64)> {
    match_bits::wanted(want, "OFI")
}

/// The source rank and tag a message's match bits carry.
#[inline(always)]
pub fn source_and_tag(bits: u64) -> (Rank, Tag) {
    let (_, source, tag) = match_bits::unpack(bits);
    (source, tag)
}

/// The acknowledgement name of operation `a` (its engine word), which must stay below the
/// flags of the CQ data's low half ([`UNCREDITED`] / [`INLINE`], [`LARGE`]): past a billion
/// operations out, an `Exhausted` error.
pub fn ack_name_of(a: OpIndex) -> Result<u32> {
    match u32::try_from(word_of(a)) {
        Ok(ack) if ack < INLINE => Ok(ack),
        _ => Err(Error::new(
            ErrorKind::Exhausted,
            "too many OFI operations outstanding to name an acknowledgement",
        )),
    }
}

/// The match bits of the acknowledgement named `ack`.
#[inline(always)]
pub fn ack_tag(ack: u32) -> u64 {
    ACK | u64::from(ack)
}

/// Remote CQ data: the sender's process and the name of its acknowledgement receive (0: none).
#[inline(always)]
pub fn cq_data(sender: Gpid, ack: u32) -> u64 {
    (u64::from(sender) << 32) | u64::from(ack)
}

/// The sender's process and acknowledgement name from remote CQ data (without the
/// [`LARGE`] flag). Not for a stub that carries its descriptor ([`is_inline`]), whose low bits
/// are a length.
#[inline(always)]
pub fn from_cq_data(data: u64) -> (Gpid, u32) {
    ((data >> 32) as Gpid, data as u32 & !LARGE)
}

/// Whether remote CQ data marks a message sent without credit ([`UNCREDITED`]; a large
/// message's stub never took any either).
#[inline(always)]
pub fn is_uncredited(data: u64) -> bool {
    data as u32 & (LARGE | UNCREDITED) != 0
}

/// The name of the acknowledgement receive a message's remote CQ data names (0: none), for a
/// message that is not a stub carrying its descriptor ([`is_inline`]).
#[inline(always)]
pub fn ack_name(data: u64) -> u32 {
    data as u32 & !(LARGE | UNCREDITED)
}

/// Whether remote CQ data marks a large message's stub.
#[inline(always)]
pub fn is_large(data: u64) -> bool {
    data as u32 & LARGE != 0
}

/// Whether remote CQ data marks the stub of a large message that carries its descriptor
/// (and its low bits are then the message's length, not an acknowledgement name).
#[inline(always)]
pub fn is_inline(data: u64) -> bool {
    data as u32 & (LARGE | INLINE) == LARGE | INLINE
}

/// The message's length in the remote CQ data of a stub that carries its descriptor.
#[inline(always)]
pub fn inline_len(data: u64) -> usize {
    (data as u32 & (INLINE - 1)) as usize
}

/// The match bits of the descriptor of large message `ack` from process `sender`.
#[inline(always)]
pub fn control_tag(sender: Gpid, ack: u32) -> u64 {
    CONTROL | (u64::from(sender) << 32) | u64::from(ack)
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

    /// What libfabric does: a message matches when their bits agree outside the ignore mask.
    fn matches(send: u64, (bits, ignore): (u64, u64)) -> bool {
        (send | ignore) == (bits | ignore)
    }

    #[test]
    fn receives_match_what_mpi_says_they_match() {
        let s = send_tag(&env(6, 3, 77)).unwrap();
        assert!(matches(s, recv_tag(&env(6, 3, 77)).unwrap()));
        assert!(matches(s, recv_tag(&env(6, ANY_SOURCE, 77)).unwrap()));
        assert!(matches(s, recv_tag(&env(6, 3, ANY_TAG)).unwrap()));
        assert!(matches(s, recv_tag(&env(6, ANY_SOURCE, ANY_TAG)).unwrap()));
        assert!(
            !matches(s, recv_tag(&env(7, ANY_SOURCE, ANY_TAG)).unwrap()),
            "other context"
        );
        assert!(
            !matches(s, recv_tag(&env(6, 4, 77)).unwrap()),
            "other source"
        );
        assert!(!matches(s, recv_tag(&env(6, 3, 78)).unwrap()), "other tag");
        // No user receive matches an acknowledgement.
        for ack in [0, 1, u32::MAX] {
            assert!(!matches(
                ack_tag(ack),
                recv_tag(&env(0, ANY_SOURCE, ANY_TAG)).unwrap()
            ));
        }
        assert_eq!(source_and_tag(s), (3, 77));
    }

    #[test]
    fn large_message_descriptors_have_a_tag_space_of_their_own() {
        let top = (1 << RANK_BITS) - 1;
        for (sender, ack) in [(0, 1), (top, LARGE - 1), (5, 77)] {
            let c = control_tag(sender, ack);
            assert!(!matches(
                c,
                recv_tag(&env((1 << CONTEXT_BITS) - 1, ANY_SOURCE, ANY_TAG)).unwrap()
            ));
            assert!(!matches(c, (ack_tag(ack), 0)), "not an acknowledgement");
            assert_ne!(c, control_tag(sender ^ 1, ack), "the sender is part of it");
            let data = cq_data(sender, ack | LARGE);
            assert!(is_large(data) && !is_large(cq_data(sender, ack)));
            assert_eq!(
                from_cq_data(data),
                (sender, ack),
                "the flag is not the name"
            );
        }
    }

    #[test]
    fn credit_has_a_tag_space_of_its_own() {
        let any = recv_tag(&env((1 << CONTEXT_BITS) - 1, ANY_SOURCE, ANY_TAG)).unwrap();
        assert!(!matches(CREDIT, any), "no user receive takes credit");
        for ack in [0, 1, u32::MAX] {
            assert!(
                !matches(ack_tag(ack), (CREDIT, 0)),
                "not an acknowledgement"
            );
        }
        for (sender, ack) in [(0, 0), (0, 1), ((1 << RANK_BITS) - 1, LARGE - 1)] {
            assert!(
                !matches(control_tag(sender, ack), (CREDIT, 0)),
                "not a descriptor"
            );
        }
    }

    #[test]
    fn the_extremes_fit_and_beyond_is_an_error() {
        let top = env((1 << CONTEXT_BITS) - 1, (1 << RANK_BITS) - 1, TAG_UB);
        let bits = send_tag(&top).unwrap();
        assert_eq!(source_and_tag(bits), (top.source, TAG_UB));
        assert_eq!(bits >> 60, 0, "the fields never reach the protocol bits");
        assert!(send_tag(&env(1 << CONTEXT_BITS, 0, 0)).is_err());
        assert!(send_tag(&env(0, 1 << RANK_BITS, 0)).is_err());
        assert!(recv_tag(&env(0, 1 << RANK_BITS, 0)).is_err());
        assert_eq!(from_cq_data(cq_data(123_456, 789)), (123_456, 789));
    }

    #[test]
    fn a_stub_that_carries_its_descriptor_is_told_apart() {
        let stub = cq_data(77, INLINE_MAX_LEN as u32 | LARGE | INLINE);
        assert!(is_large(stub) && is_inline(stub));
        assert_eq!((stub >> 32, inline_len(stub)), (77, INLINE_MAX_LEN));
        let named = cq_data(77, (INLINE - 1) | LARGE);
        assert!(is_large(named) && !is_inline(named), "a name below INLINE");
        assert!(
            !is_inline(cq_data(77, INLINE)),
            "not large: a plain message's flag"
        );
    }

    #[test]
    fn acknowledgement_names_stay_below_the_flags() {
        assert_eq!(ack_name_of(0).unwrap(), 1);
        assert_eq!(ack_name_of(INLINE - 2).unwrap(), INLINE - 1);
        for a in [INLINE - 1, LARGE, u32::MAX] {
            assert_eq!(ack_name_of(a).unwrap_err().kind(), ErrorKind::Exhausted);
        }
    }

    #[test]
    fn a_message_sent_without_credit_is_told_apart_and_keeps_its_name() {
        let top = (1 << RANK_BITS) - 1;
        for (sender, ack) in [(0, 0), (5, 77), (top, UNCREDITED - 1)] {
            let plain = cq_data(sender, ack);
            let uncredited = cq_data(sender, ack | UNCREDITED);
            assert!(!is_uncredited(plain) && is_uncredited(uncredited));
            assert!(!is_large(uncredited) && !is_inline(uncredited));
            assert_eq!((ack_name(plain), ack_name(uncredited)), (ack, ack));
            assert_eq!(from_cq_data(uncredited).0, sender);
        }
        assert!(
            is_uncredited(cq_data(5, 77 | LARGE)),
            "a stub took no credit either"
        );
        assert_eq!(ack_name(cq_data(5, 77 | LARGE)), 77);
    }
}

//! The packets of the active-message protocol (after the CH3 TCP notes' packet types).
//!
//! Every header is a fixed-size `#[repr(C)]` struct of plain integers with its size asserted at
//! compile time. Parsing takes exactly that many bytes and never panics: a short, long or
//! garbled header from a peer becomes a `Protocol` error.
//!
//! Byte order: headers are in the sender's native order, read without conversion. Within a
//! node that is trivially shared; across hosts the TCP netmod's hello checks that both ends
//! have the same order and refuses a connection otherwise.

use bytemuck::{Pod, Zeroable};
use ch4_core::transport::HandlerId;
use ch4_core::{Error, ErrorKind, Result};
use static_assertions::const_assert_eq;

/// Handler ids of the protocol's packets.
pub mod handler {
    use ch4_core::transport::HandlerId;
    /// A whole small message: [`super::MatchHeader`] + data.
    pub const EAGER: HandlerId = 1;
    /// Rendezvous request-to-send: [`super::MatchHeader`], no data.
    pub const RTS: HandlerId = 2;
    /// Rendezvous clear-to-send: [`super::CtsHeader`].
    pub const CTS: HandlerId = 3;
    /// A piece of rendezvous data: [`super::DataHeader`] + bytes.
    pub const DATA: HandlerId = 4;
    /// A synchronous send was matched: [`super::AckHeader`].
    pub const SYNC_ACK: HandlerId = 5;
    /// Please remove an unmatched message: [`super::CancelHeader`].
    pub const CANCEL_REQ: HandlerId = 6;
    /// The answer to a cancel request: [`super::AckHeader`] with value 1 = removed.
    pub const CANCEL_ACK: HandlerId = 7;
    /// Request-to-send offering a single-copy read of the sender's buffer (LMT Get):
    /// [`super::ReadableRts`], no data.
    pub const RTS_GET: HandlerId = 8;
    /// The receiver has read an offered buffer: [`super::AckHeader`] with the bytes read.
    pub const GET_DONE: HandlerId = 9;
    /// Eager credit given back (flow control): [`super::AckHeader`] with `sreq` 0 and the
    /// credit bytes in `value`.
    pub const CREDIT: HandlerId = 10;
    /// A whole small message with the short header: [`super::EagerHeader`] + data. Sent in
    /// place of [`EAGER`] on ordered transports when nothing answers the message (no
    /// synchronous mode, so no request id): 16 header bytes instead of 40, so that up to 40
    /// bytes of data share one 64-byte shared-memory record with its header word — one cache
    /// line for the receiver's core to fetch instead of two.
    pub const EAGER_SHORT: HandlerId = 11;
    /// Request-to-send carrying the message's first bytes (a transport's
    /// [`first_piece`](ch4_core::transport::AmTransport::first_piece)): [`super::MatchHeader`]
    /// and at least one, at most `total` bytes of data from offset 0. The receiver answers
    /// with a clear-to-send like any request-to-send; the sender streams from where the piece
    /// ended (nothing more when it held the whole message).
    pub const RTS_DATA: HandlerId = 12;
}

/// The header of a message that takes part in matching (eager data or request-to-send).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Pod, Zeroable)]
pub struct MatchHeader {
    /// Context id of the communicator.
    pub context: u32,
    /// Sender's rank in that communicator.
    pub source: i32,
    /// Tag.
    pub tag: i32,
    /// `ch4_core::request::msg_flags` (SYNC, READY).
    pub flags: u32,
    /// Per-destination sequence number, used only on unordered transports.
    pub seq: u32,
    /// Reserved, zero.
    pub reserved: u32,
    /// Sender's request id (0 = none), named in CTS, SYNC_ACK and CANCEL_REQ.
    pub sreq: u64,
    /// Message length in bytes.
    pub total: u64,
}
const_assert_eq!(std::mem::size_of::<MatchHeader>(), 40);

/// The header of an [`handler::EAGER_SHORT`] message: a [`MatchHeader`] without what such a
/// message does not need — the sequence number (ordered transports only), the request id (no
/// reply) and the length (the packet's payload is the whole message).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Pod, Zeroable)]
pub struct EagerHeader {
    /// Context id of the communicator.
    pub context: u32,
    /// Sender's rank in that communicator.
    pub source: i32,
    /// Tag.
    pub tag: i32,
    /// `ch4_core::request::msg_flags` (READY; never SYNC).
    pub flags: u32,
}
const_assert_eq!(std::mem::size_of::<EagerHeader>(), 16);

impl EagerHeader {
    /// The short header of `m`, if `m` can go with one: no request id to name in a reply.
    #[inline(always)]
    pub fn of(m: &MatchHeader) -> Option<EagerHeader> {
        (m.sreq == 0).then_some(EagerHeader {
            context: m.context,
            source: m.source,
            tag: m.tag,
            flags: m.flags,
        })
    }
}

/// Whether `h` is a whole eager message ([`handler::EAGER`] or [`handler::EAGER_SHORT`]).
#[inline(always)]
pub fn is_eager(h: HandlerId) -> bool {
    h == handler::EAGER || h == handler::EAGER_SHORT
}

/// Whether `h` takes part in matching: an eager message or a request-to-send.
#[inline(always)]
pub fn is_match(h: HandlerId) -> bool {
    matches!(
        h,
        handler::EAGER | handler::EAGER_SHORT | handler::RTS | handler::RTS_GET | handler::RTS_DATA
    )
}

/// A request-to-send that offers the sender's buffer for a single-copy read.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Pod, Zeroable)]
pub struct ReadableRts {
    /// The matching header, as in a plain request-to-send.
    pub m: MatchHeader,
    /// The buffer's address in the sender's address space (never 0).
    pub addr: u64,
}
const_assert_eq!(std::mem::size_of::<ReadableRts>(), 48);

/// The matching header of an `EAGER`, `EAGER_SHORT`, `RTS`, `RTS_GET` or `RTS_DATA` packet carrying
/// `payload` bytes of data, with the offered address (0 when none).
#[inline(always)]
pub fn parse_match(h: HandlerId, bytes: &[u8], payload: usize) -> Result<(MatchHeader, u64)> {
    if h == handler::EAGER_SHORT {
        let e: EagerHeader = parse(bytes)?;
        if e.flags & ch4_core::request::msg_flags::SYNC != 0 {
            return Err(Error::new(
                ErrorKind::Protocol,
                "a synchronous message without a request id to acknowledge",
            ));
        }
        let m = MatchHeader {
            context: e.context,
            source: e.source,
            tag: e.tag,
            flags: e.flags,
            seq: 0,
            reserved: 0,
            sreq: 0,
            total: payload as u64,
        };
        Ok((m, 0))
    } else if h == handler::RTS_GET {
        let r: ReadableRts = parse(bytes)?;
        if r.addr == 0 {
            return Err(Error::new(
                ErrorKind::Protocol,
                "request-to-send offers a buffer at address 0",
            ));
        }
        Ok((r.m, r.addr))
    } else {
        Ok((parse(bytes)?, 0))
    }
}

/// Clear-to-send: the receiver matched a request-to-send.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Pod, Zeroable)]
pub struct CtsHeader {
    /// The sender's request id from the RTS.
    pub sreq: u64,
    /// The receiver's request id, named in every DATA piece.
    pub rreq: u64,
    /// How many bytes the receiver takes (less than the message when its buffer is smaller).
    pub accept: u64,
}
const_assert_eq!(std::mem::size_of::<CtsHeader>(), 24);

/// One piece of rendezvous data.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Pod, Zeroable)]
pub struct DataHeader {
    /// The receiver's request id from the CTS.
    pub rreq: u64,
    /// Where the piece starts in the message (streaming offset).
    pub offset: u64,
}
const_assert_eq!(std::mem::size_of::<DataHeader>(), 16);

/// An acknowledgement naming a send request.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Pod, Zeroable)]
pub struct AckHeader {
    /// The sender's request id.
    pub sreq: u64,
    /// Meaning depends on the handler (CANCEL_ACK: 1 = the message was removed).
    pub value: u64,
}
const_assert_eq!(std::mem::size_of::<AckHeader>(), 16);

/// Asks the receiver to drop a message it has not matched yet.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Pod, Zeroable)]
pub struct CancelHeader {
    /// Context id of the message.
    pub context: u32,
    /// Sender's rank in the communicator.
    pub source: i32,
    /// Tag of the message.
    pub tag: i32,
    /// Reserved, zero.
    pub reserved: u32,
    /// The sender's request id carried by the message.
    pub sreq: u64,
}
const_assert_eq!(std::mem::size_of::<CancelHeader>(), 24);

/// Reads a header of type `H` from exactly `bytes`.
#[inline(always)]
pub fn parse<H: Pod>(bytes: &[u8]) -> Result<H> {
    match bytemuck::try_pod_read_unaligned(bytes) {
        Ok(h) => Ok(h),
        Err(_) => Err(bad_header::<H>(bytes.len())),
    }
}

#[cold]
fn bad_header<H>(len: usize) -> Error {
    Error::new(
        ErrorKind::Protocol,
        format!(
            "header of {len} bytes where {} expected ({})",
            std::mem::size_of::<H>(),
            std::any::type_name::<H>()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn headers_round_trip() {
        let h = MatchHeader {
            context: 4,
            source: 3,
            tag: 99,
            flags: 1,
            seq: 7,
            reserved: 0,
            sreq: 0xdead_beef,
            total: 1 << 40,
        };
        assert_eq!(parse::<MatchHeader>(bytemuck::bytes_of(&h)).unwrap(), h);
        let r = ReadableRts {
            m: h,
            addr: 0x7f00_1000,
        };
        assert_eq!(
            parse_match(handler::RTS_GET, bytemuck::bytes_of(&r), 0).unwrap(),
            (h, 0x7f00_1000)
        );
        assert_eq!(
            parse_match(handler::RTS, bytemuck::bytes_of(&h), 0).unwrap(),
            (h, 0)
        );
        assert_eq!(
            parse_match(handler::RTS_DATA, bytemuck::bytes_of(&h), 4096).unwrap(),
            (h, 0)
        );
        assert!(is_match(handler::RTS_DATA) && !is_eager(handler::RTS_DATA));
        let null = ReadableRts { m: h, addr: 0 };
        let err = parse_match(handler::RTS_GET, bytemuck::bytes_of(&null), 0).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Protocol);
    }

    #[test]
    fn a_short_eager_header_stands_for_the_whole_one() {
        let h = MatchHeader {
            context: 4,
            source: 3,
            tag: 99,
            flags: 0,
            seq: 0,
            reserved: 0,
            sreq: 0,
            total: 24,
        };
        let e = EagerHeader::of(&h).unwrap();
        assert_eq!(
            parse_match(handler::EAGER_SHORT, bytemuck::bytes_of(&e), 24).unwrap(),
            (h, 0)
        );
        // A message that will be answered keeps its request id, so the long header.
        assert_eq!(EagerHeader::of(&MatchHeader { sreq: 5, ..h }), None);
        // A short header claiming synchronous mode has no request to acknowledge.
        let sync = EagerHeader {
            flags: ch4_core::request::msg_flags::SYNC,
            ..e
        };
        let err = parse_match(handler::EAGER_SHORT, bytemuck::bytes_of(&sync), 0).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Protocol);
    }

    proptest! {
        /// Any byte string parses to a header or to a Protocol error, never a panic.
        #[test]
        fn parsing_garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            for r in [
                parse::<MatchHeader>(&bytes).map(drop),
                parse::<CtsHeader>(&bytes).map(drop),
                parse::<DataHeader>(&bytes).map(drop),
                parse::<AckHeader>(&bytes).map(drop),
                parse::<CancelHeader>(&bytes).map(drop),
                parse_match(handler::RTS_GET, &bytes, 0).map(drop),
                parse_match(handler::RTS, &bytes, 0).map(drop),
                parse_match(handler::RTS_DATA, &bytes, 1).map(drop),
                parse_match(handler::EAGER_SHORT, &bytes, bytes.len()).map(drop),
            ] {
                if let Err(e) = r {
                    prop_assert_eq!(e.kind(), ErrorKind::Protocol);
                }
            }
        }
    }
}

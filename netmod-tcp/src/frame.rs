//! The stream format: every active message is one frame, an 8-byte frame header followed by the
//! AM header and the payload.
//!
//! ```text
//! [ handler u8 | header length u8 | kind u8 | pad u8 | payload length u32 (LE) ] header [pad] payload
//! ```
//!
//! Kind 0 is an active message for the engine (pad byte zero); kind [`PADDED`] is one with
//! `pad` bytes of padding between its AM header and its payload (see
//! [`alignment_pad`]); kind [`CONTROL`] is the connection's own business, with no header or
//! payload: the handler byte names what ([`GOODBYE`], [`LEAVING`]).
//!
//! TCP delivers a byte stream, so frames arrive in arbitrary pieces: the [`Decoder`] keeps what
//! has arrived of an incomplete frame (the CH3 TCP netmod's per-VC pending packet) and hands out whole
//! frames in place. Everything it reads is checked before use: a frame that cannot be valid is
//! an error for that connection, never a panic or an allocation of an attacker's choosing.

use std::io::{self, Read};

/// Bytes of the frame header.
pub const FRAME_HEADER: usize = 8;

/// Frame kind of the connection's own messages (byte 2 of the frame header).
pub const CONTROL: u8 = 1;
/// Frame kind of an active message whose payload follows its AM header after as many bytes of
/// padding as byte 3 of the frame header says.
pub const PADDED: u8 = 2;

/// Control code: the sender closes this connection in order and sends nothing more on it; it
/// may connect again later.
pub const GOODBYE: u8 = 1;
/// Control code: like [`GOODBYE`], and the sender is leaving the job (finalize).
pub const LEAVING: u8 = 2;

/// Size of the pages the kernel copies socket data into, and of the stretch over which a copy's
/// loads and stores alias.
const PAGE: usize = 4096;

/// A payload is kept at least this many bytes past its source's offset in a page...
const ALIAS_CLEAR: usize = 128;

/// ...even when the kernel's page already holds up to this many bytes when the write starts.
const ALIAS_SLACK: usize = 96;

/// Bytes of padding to put between the headers and a payload at `payload` (an address) so that
/// the kernel's copy of it into the socket stays clear of 4 KiB aliasing.
///
/// `write(2)` on a TCP socket copies into page fragments that the thread keeps filling from
/// where its last write stopped, and that start over at offset 0 once the data on them has been
/// consumed: in a ping-pong, at the start of nearly every write. A payload behind `headers`
/// bytes of headers then lands `headers` bytes past its source's offset within a page, which,
/// with a page-aligned buffer (as OSU and most large allocations have) and headers of 24-48
/// bytes, is the case where the CPU's copy (`rep movsb`) sees each load alias a store a few
/// bytes back and stalls. On this project's AMD EPYC host, a raw TCP ping-pong in C (no ch4)
/// that wrote a 24-byte header before each 64 KiB-1 MiB payload ran up to twice as slow, in the
/// host's slower mode, as the same with headers of 0 or 128-4096 bytes (64 bytes: in between),
/// and `osu_latency` over ch4's TCP at 64 KiB read 21.4-22.7 µs from page-aligned buffers
/// against 15.2-16.0 from buffers 128-2048 bytes in. So when the payload would land within
/// 128 bytes past its source's page offset (or up to 96 bytes before it, where a page not yet
/// started over would push it into the same stretch), it is moved to 128 bytes past: at most
/// 224 bytes of padding, and none for most buffers.
#[inline]
pub fn alignment_pad(headers: usize, payload: *const u8) -> usize {
    let lands = headers.wrapping_sub(payload as usize) & (PAGE - 1);
    if !(ALIAS_CLEAR..PAGE - ALIAS_SLACK).contains(&lands) {
        ALIAS_CLEAR.wrapping_sub(lands) & (PAGE - 1)
    } else {
        0
    }
}

/// Encodes a control frame carrying `code`.
pub fn encode_control(code: u8) -> [u8; FRAME_HEADER] {
    FrameHeader {
        handler: code,
        header_len: 0,
        kind: CONTROL,
        pad: 0,
        payload_len: 0,
    }
    .encode()
}

/// What [`Decoder::pop_with`] took off the stream.
#[derive(Debug, PartialEq, Eq)]
pub enum Popped<R> {
    /// An active message, handed to the caller's function, which returned this.
    Message(R),
    /// A control frame, with its code.
    Control(u8),
}

/// Encodes a frame header.
#[inline]
pub fn encode(handler: u8, header_len: usize, payload_len: usize) -> [u8; FRAME_HEADER] {
    encode_padded(handler, header_len, 0, payload_len)
}

/// Encodes the header of a frame with `pad` (at most 255) bytes of padding before its payload:
/// kind [`PADDED`], or kind 0 when there is none.
#[inline]
pub fn encode_padded(
    handler: u8,
    header_len: usize,
    pad: usize,
    payload_len: usize,
) -> [u8; FRAME_HEADER] {
    FrameHeader {
        handler,
        header_len: header_len as u8,
        kind: if pad == 0 { 0 } else { PADDED },
        pad: pad as u8,
        payload_len: payload_len as u32,
    }
    .encode()
}

/// A frame header, field by field: the one place its layout is written down in code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// The active-message handler (or, for a control frame, its code).
    pub handler: u8,
    /// Bytes of the AM header that follow.
    pub header_len: u8,
    /// 0 for an active message, [`PADDED`] for one with padding, [`CONTROL`] for the
    /// connection's own.
    pub kind: u8,
    /// Bytes of padding between the AM header and the payload of a [`PADDED`] frame; zero in
    /// every other kind.
    pub pad: u8,
    /// Bytes of payload after the AM header (little-endian on the wire).
    pub payload_len: u32,
}

impl FrameHeader {
    /// The header at the start of `bytes` (which must hold at least [`FRAME_HEADER`] bytes).
    #[inline(always)]
    pub fn read(bytes: &[u8]) -> FrameHeader {
        FrameHeader {
            handler: bytes[0],
            header_len: bytes[1],
            kind: bytes[2],
            pad: bytes[3],
            payload_len: u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]),
        }
    }

    /// The header's bytes.
    #[inline(always)]
    pub fn encode(&self) -> [u8; FRAME_HEADER] {
        let mut h = [0u8; FRAME_HEADER];
        h[0] = self.handler;
        h[1] = self.header_len;
        h[2] = self.kind;
        h[3] = self.pad;
        h[4..8].copy_from_slice(&self.payload_len.to_le_bytes());
        h
    }

    /// Whether this frame is an active message (rather than control, or foreign bytes).
    #[inline(always)]
    pub fn is_message(&self) -> bool {
        (self.kind == 0 && self.pad == 0) || self.kind == PADDED
    }

    /// Where the payload starts, from the start of the frame: after this header, the AM
    /// header and any padding.
    #[inline(always)]
    pub fn payload_at(&self) -> usize {
        let pad = if self.kind == PADDED { self.pad } else { 0 };
        FRAME_HEADER + usize::from(self.header_len) + usize::from(pad)
    }

    /// The whole frame's length: this header, the AM header, any padding and the payload.
    #[inline(always)]
    pub fn frame_len(&self) -> usize {
        self.payload_at() + self.payload_len as usize
    }

    /// The control code of a control frame, checked.
    fn control_code(&self) -> Result<u8, DecodeError> {
        if self.kind != CONTROL || self.pad != 0 {
            return Err(DecodeError::Reserved);
        }
        if self.header_len != 0
            || self.payload_len != 0
            || !matches!(self.handler, GOODBYE | LEAVING)
        {
            return Err(DecodeError::BadControl);
        }
        Ok(self.handler)
    }
}

/// Why a stream is not a sequence of valid frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// The kind is unknown, or the pad byte is set where the kind has none: not our protocol,
    /// or a corrupted stream.
    Reserved,
    /// A control frame with a header or payload, or an unknown code.
    BadControl,
    /// A frame announces more payload than any valid message carries.
    TooLong {
        /// Bytes announced.
        announced: u64,
        /// The largest this connection accepts.
        max: usize,
    },
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::Reserved => {
                write!(
                    f,
                    "frame header of an unknown kind, or padded where its kind is not"
                )
            }
            DecodeError::BadControl => write!(f, "malformed control frame"),
            DecodeError::TooLong { announced, max } => {
                write!(
                    f,
                    "frame announces {announced} payload bytes, at most {max} allowed"
                )
            }
        }
    }
}

/// Reassembles frames from a byte stream.
pub struct Decoder {
    buf: Vec<u8>,
    /// Start of the first unconsumed byte.
    start: usize,
    /// End of the bytes read so far.
    end: usize,
    max_payload: usize,
    drained: bool,
}

/// The most a frame's headers (frame header, AM header and padding) can take.
pub const HEADERS_MAX: usize = FRAME_HEADER + 2 * u8::MAX as usize;

/// Bytes read from the socket at a time, at least.
const READ_CHUNK: usize = 64 << 10;

impl Decoder {
    /// A decoder refusing frames with more than `max_payload` payload bytes.
    pub fn new(max_payload: usize) -> Decoder {
        Decoder {
            buf: Vec::new(),
            start: 0,
            end: 0,
            max_payload,
            drained: false,
        }
    }

    /// Whether bytes of an incomplete frame (or undelivered whole frames) are held.
    pub fn has_data(&self) -> bool {
        self.end > self.start
    }

    /// Reads once from `r` into free space; `Ok(0)` means end of stream. [`Decoder::drained`]
    /// then tells whether the read left space unfilled (the socket had no more for now).
    pub fn read_from(&mut self, r: &mut impl Read) -> io::Result<usize> {
        self.read_at_most(r, usize::MAX)
    }

    /// Like [`Decoder::read_from`], offering the source at most `limit` bytes of space.
    pub fn read_at_most(&mut self, r: &mut impl Read, limit: usize) -> io::Result<usize> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        let want = self.needed().max(READ_CHUNK);
        if self.buf.len() - self.end < want {
            // Move the partial frame to the front before growing.
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            if self.buf.len() - self.end < want {
                self.buf.resize(self.end + want, 0);
            }
        }
        // At most what the front frame still needs, or a chunk: a large payload whose headers
        // arrive in a chunk can then be read straight into its receive buffer instead.
        let offered = want.min(self.buf.len() - self.end).min(limit.max(1));
        let n = r.read(&mut self.buf[self.end..self.end + offered])?;
        self.end += n;
        self.drained = n < offered;
        Ok(n)
    }

    /// Whether the last read took less than the space offered: the source had nothing more at
    /// that moment, so reading again at once would most likely find nothing.
    pub fn drained(&self) -> bool {
        self.drained
    }

    /// Bytes still missing from the frame at the front (0 when unknown or complete).
    fn needed(&self) -> usize {
        let have = self.end - self.start;
        if have < FRAME_HEADER {
            return FRAME_HEADER - have;
        }
        let h = FrameHeader::read(&self.buf[self.start..]);
        if h.payload_len as usize > self.max_payload {
            return 0; // pop_with reports it; never size a buffer from an invalid length
        }
        h.frame_len().saturating_sub(have)
    }

    /// The front frame while its headers are in but its payload is not complete: (handler, AM
    /// header, payload length, payload bytes already held). `None` otherwise, and for a frame
    /// that is not valid ([`Decoder::pop_with`] reports those).
    pub fn partial_front(&self) -> Option<(u8, &[u8], usize, &[u8])> {
        let held = &self.buf[self.start..self.end];
        if held.len() < FRAME_HEADER {
            return None;
        }
        let h = FrameHeader::read(held);
        if !h.is_message() {
            // Control frames have no payload to place; foreign ones are reported by pop_with.
            return None;
        }
        let hlen = usize::from(h.header_len);
        let plen = h.payload_len as usize;
        let at = h.payload_at();
        if plen > self.max_payload || held.len() < at {
            return None;
        }
        let payload = &held[at..];
        (payload.len() < plen).then(|| {
            (
                h.handler,
                &held[FRAME_HEADER..FRAME_HEADER + hlen],
                plen,
                payload,
            )
        })
    }

    /// Whether the front frame's headers are in and at least `min` payload bytes are announced
    /// but not all have arrived.
    pub fn awaits_payload_of(&self, min: usize) -> bool {
        self.partial_front()
            .is_some_and(|(_, _, len, _)| len >= min)
    }

    /// Whether the front frame can be handed on now: it is whole (or invalid, which
    /// [`Decoder::pop_with`] reports), or its headers are in and it announces at least
    /// `direct_min` payload bytes, which may be read straight into their destination.
    pub fn has_work(&self, direct_min: usize) -> bool {
        self.end - self.start >= FRAME_HEADER
            && (self.needed() == 0 || self.awaits_payload_of(direct_min))
    }

    /// Forgets everything held: the caller has taken the front frame's headers and partial
    /// payload (see [`Decoder::partial_front`]) and reads the rest of it elsewhere.
    pub fn clear(&mut self) {
        self.start = 0;
        self.end = 0;
    }

    /// Hands the next whole frame to `f` as (handler, AM header, payload), borrowed from the
    /// buffer, then consumes it; a control frame is consumed and returned as its code.
    /// `Ok(None)` when no whole frame is there yet.
    #[inline]
    pub fn pop_with<R>(
        &mut self,
        f: impl FnOnce(u8, &[u8], &[u8]) -> R,
    ) -> Result<Option<Popped<R>>, DecodeError> {
        let have = self.end - self.start;
        if have < FRAME_HEADER {
            return Ok(None);
        }
        let h = FrameHeader::read(&self.buf[self.start..]);
        if !h.is_message() {
            let code = h.control_code()?;
            self.start += FRAME_HEADER;
            return Ok(Some(Popped::Control(code)));
        }
        let hlen = usize::from(h.header_len);
        if h.payload_len as usize > self.max_payload {
            return Err(DecodeError::TooLong {
                announced: u64::from(h.payload_len),
                max: self.max_payload,
            });
        }
        let total = h.frame_len();
        if have < total {
            return Ok(None);
        }
        let header = &self.buf[self.start + FRAME_HEADER..self.start + FRAME_HEADER + hlen];
        let payload = &self.buf[self.start + h.payload_at()..self.start + total];
        let r = f(h.handler, header, payload);
        self.start += total;
        Ok(Some(Popped::Message(r)))
    }

    /// The control code of the last frame held, when the bytes held are whole frames ending
    /// with a control frame: at the end of a stream, whether the peer said goodbye before it
    /// closed (an orderly close) or just vanished. Walks frame headers only.
    pub fn ends_with_control(&self) -> Option<u8> {
        let mut at = self.start;
        let mut last = None;
        while at + FRAME_HEADER <= self.end {
            let h = FrameHeader::read(&self.buf[at..]);
            if !h.is_message() {
                last = Some(h.control_code().ok()?);
                at += FRAME_HEADER;
                continue;
            }
            at += h.frame_len();
            last = None;
        }
        (at == self.end).then_some(last).flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Decoded frames: (handler, header, payload).
    type Frames = Vec<(u8, Vec<u8>, Vec<u8>)>;

    fn frame(handler: u8, header: &[u8], payload: &[u8]) -> Vec<u8> {
        padded_frame(handler, header, 0, payload)
    }

    /// A frame with `pad` bytes of padding (of value 0xEE, which must never show) before its
    /// payload.
    fn padded_frame(handler: u8, header: &[u8], pad: usize, payload: &[u8]) -> Vec<u8> {
        let mut v = encode_padded(handler, header.len(), pad, payload.len()).to_vec();
        v.extend_from_slice(header);
        v.extend(std::iter::repeat_n(0xEE, pad));
        v.extend_from_slice(payload);
        v
    }

    /// Feeds `bytes` to a decoder in pieces of the given sizes, collecting whole frames.
    fn decode_in_pieces(bytes: &[u8], pieces: &[usize], max: usize) -> Result<Frames, DecodeError> {
        let mut d = Decoder::new(max);
        let mut out = Vec::new();
        let mut at = 0;
        let mut i = 0;
        while at < bytes.len() {
            let n = pieces[i % pieces.len()].max(1).min(bytes.len() - at);
            i += 1;
            let mut src = &bytes[at..at + n];
            while !src.is_empty() {
                at += d.read_from(&mut src).unwrap();
            }
            while let Some(f) = d.pop_with(|h, hd, pl| (h, hd.to_vec(), pl.to_vec()))? {
                match f {
                    Popped::Message(m) => out.push(m),
                    // Control frames show up as handler 255 with the code as header.
                    Popped::Control(c) => out.push((255, vec![c], vec![])),
                }
            }
        }
        Ok(out)
    }

    /// A decoder that has read all of `bytes` (nothing popped).
    fn fed(bytes: &[u8], max: usize) -> Decoder {
        let mut d = Decoder::new(max);
        let mut src = bytes;
        while !src.is_empty() {
            d.read_from(&mut src).unwrap();
        }
        d
    }

    #[test]
    fn frames_split_anywhere_come_out_whole() {
        let mut stream = frame(1, b"abc", b"payload");
        stream.extend(frame(2, b"", b""));
        stream.extend(frame(3, &[9; 40], &vec![7; 100_000]));
        for piece in [1, 3, 8, 9, 64, 70_000] {
            let got = decode_in_pieces(&stream, &[piece], 1 << 20).unwrap();
            assert_eq!(got.len(), 3, "pieces of {piece}");
            assert_eq!(got[0], (1, b"abc".to_vec(), b"payload".to_vec()));
            assert_eq!(got[1], (2, vec![], vec![]));
            assert_eq!((got[2].0, got[2].1.len(), got[2].2.len()), (3, 40, 100_000));
        }
    }

    #[test]
    fn padding_before_a_payload_is_skipped_whole_or_in_part() {
        let mut stream = padded_frame(4, &[1; 16], 200, &vec![7; 70_000]);
        stream.extend(frame(1, b"abc", b"payload"));
        stream.extend(padded_frame(9, b"", 255, b"x"));
        for piece in [1, 7, 30, 263, 600, 70_000] {
            let got = decode_in_pieces(&stream, &[piece], 1 << 20).unwrap();
            assert_eq!(
                got,
                vec![
                    (4, vec![1; 16], vec![7; 70_000]),
                    (1, b"abc".to_vec(), b"payload".to_vec()),
                    (9, vec![], b"x".to_vec()),
                ],
                "pieces of {piece}"
            );
        }
        // A large payload is offered for reading in place only once its padding is in, and
        // with the padding left out.
        let big = padded_frame(4, &[1; 16], 100, &vec![7; 70_000]);
        assert_eq!(
            fed(&big[..FRAME_HEADER + 16 + 99], 1 << 20).partial_front(),
            None
        );
        let d = fed(&big[..FRAME_HEADER + 16 + 100 + 5], 1 << 20);
        let (h, header, len, held) = d.partial_front().unwrap();
        assert_eq!(
            (h, header, len, held),
            (4, &[1u8; 16][..], 70_000, &[7u8; 5][..])
        );
        // A padded frame is a message, not the end of a stream.
        assert_eq!(
            fed(&padded_frame(1, b"", 3, b""), 100).ends_with_control(),
            None
        );
    }

    #[test]
    fn the_padding_keeps_a_payload_clear_of_its_source_offset() {
        // Page-aligned buffers behind 24 or 48 bytes of headers are the case that stalls.
        assert_eq!(alignment_pad(24, 0x10000 as *const u8), 104);
        assert_eq!(alignment_pad(48, 0x7f00_0000_2000 as *const u8), 80);
        // malloc's large blocks start 16 bytes into a page.
        assert_eq!(alignment_pad(24, 0x10010 as *const u8), 120);
        // A payload that would land just before its source's offset is moved past it too.
        assert_eq!(alignment_pad(24, 0x10040 as *const u8), 168);
        // Clear already: no padding.
        assert_eq!(alignment_pad(24, 0x10f00 as *const u8), 0);
        assert_eq!(alignment_pad(300, 0x10000 as *const u8), 0);
        for headers in [8, 24, 48, 263] {
            for offset in (0..PAGE).step_by(8) {
                let pad = alignment_pad(headers, (0x40000 + offset) as *const u8);
                assert!(pad <= u8::MAX as usize, "{headers} {offset}: {pad}");
                let lands = (headers + pad).wrapping_sub(offset) & (PAGE - 1);
                assert!(
                    (ALIAS_CLEAR..PAGE - ALIAS_SLACK).contains(&lands),
                    "{headers} {offset}: lands {lands}"
                );
            }
        }
    }

    #[test]
    fn oversized_and_foreign_frames_are_errors() {
        let big = frame(1, b"", &[0; 100]);
        assert_eq!(
            decode_in_pieces(&big, &[8], 50),
            Err(DecodeError::TooLong {
                announced: 100,
                max: 50
            })
        );
        let mut foreign = frame(1, b"", b"x");
        foreign[3] = 1;
        assert_eq!(
            decode_in_pieces(&foreign, &[64], 50),
            Err(DecodeError::Reserved)
        );
        let mut unknown_kind = frame(1, b"", b"x");
        unknown_kind[2] = 3;
        assert_eq!(
            decode_in_pieces(&unknown_kind, &[64], 50),
            Err(DecodeError::Reserved)
        );
    }

    #[test]
    fn control_frames_are_taken_by_the_decoder_and_checked() {
        let mut stream = frame(4, b"h", b"data");
        stream.extend(encode_control(GOODBYE));
        let got = decode_in_pieces(&stream, &[3], 100).unwrap();
        assert_eq!(
            got,
            vec![
                (4, b"h".to_vec(), b"data".to_vec()),
                (255, vec![GOODBYE], vec![])
            ]
        );
        let mut bad = encode_control(LEAVING).to_vec();
        bad[4] = 1; // a control frame announcing payload
        assert_eq!(
            decode_in_pieces(&bad, &[8], 100),
            Err(DecodeError::BadControl)
        );
        let mut unknown = encode_control(GOODBYE).to_vec();
        unknown[0] = 77;
        assert_eq!(
            decode_in_pieces(&unknown, &[8], 100),
            Err(DecodeError::BadControl)
        );
    }

    #[test]
    fn a_stream_ends_in_order_only_after_a_goodbye() {
        let feed = |bytes: &[u8]| fed(bytes, 1000).ends_with_control();
        let mut stream = frame(1, b"abc", b"payload");
        assert_eq!(feed(&stream), None);
        stream.extend(encode_control(LEAVING));
        assert_eq!(feed(&stream), Some(LEAVING));
        // A payload whose last bytes look like a goodbye is not one.
        let tricky = frame(1, b"", &encode_control(GOODBYE));
        assert_eq!(feed(&tricky), None);
        // Nor is a goodbye followed by the start of another frame.
        let mut cut = encode_control(GOODBYE).to_vec();
        cut.extend(&frame(1, b"", b"xyz")[..5]);
        assert_eq!(feed(&cut), None);
    }

    proptest! {
        /// The stream decoder's fuzz target: arbitrary bytes in arbitrary pieces never panic,
        /// never allocate beyond the announced limit, and either decode or fail cleanly.
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..2000),
                                pieces in proptest::collection::vec(1usize..300, 1..8)) {
            let _ = decode_in_pieces(&bytes, &pieces, 1 << 16);
            let _ = fed(&bytes, 1 << 16).ends_with_control();
        }

        /// Any sequence of valid frames, padded or not, cut anywhere, decodes to itself.
        #[test]
        fn valid_streams_round_trip(frames in proptest::collection::vec(
            (any::<u8>(), proptest::collection::vec(any::<u8>(), 0..60), 0usize..256,
             proptest::collection::vec(any::<u8>(), 0..3000)), 0..12),
            pieces in proptest::collection::vec(1usize..5000, 1..6)) {
            let stream: Vec<u8> = frames
                .iter()
                .flat_map(|(h, hd, pad, pl)| padded_frame(*h, hd, *pad, pl))
                .collect();
            let got = decode_in_pieces(&stream, &pieces, 1 << 16).unwrap();
            let want: Frames = frames.into_iter().map(|(h, hd, _, pl)| (h, hd, pl)).collect();
            prop_assert_eq!(got, want);
        }
    }
}

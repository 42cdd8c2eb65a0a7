//! The active-message protocol's packets (`am-fallback`), as the AM fallback reads them from a
//! peer: the header parsers alone, and a real engine fed a hostile peer's packets.

use am_fallback::wire::{self, handler, AckHeader, CancelHeader, CtsHeader, DataHeader};
use am_fallback::wire::{EagerHeader, MatchHeader, ReadableRts};
use bytemuck::Pod;
use ch4_core::buffer::{RecvBuf, SendBuf};
use ch4_core::core::DeviceConfig;
use ch4_core::{SendMode, ANY_SOURCE, ANY_TAG};
use testkit::{pipe_pair, Frame};

use crate::input::Input;

/// A header of type `H` parses from exactly its size, and to the bytes it came from.
fn header_round_trip<H: Pod + PartialEq + std::fmt::Debug>(bytes: &[u8]) {
    match wire::parse::<H>(bytes) {
        Ok(h) => {
            assert_eq!(bytes.len(), std::mem::size_of::<H>());
            assert_eq!(bytemuck::bytes_of(&h), bytes);
        }
        Err(e) => {
            assert_ne!(bytes.len(), std::mem::size_of::<H>(), "{e}");
            assert_eq!(e.kind(), ch4_core::ErrorKind::Protocol);
        }
    }
}

/// Every header type and the matching-header reader, on bytes of a peer's choosing: a
/// `Protocol` error or the header the bytes spell, never a panic. Input: a handler id, a
/// payload length (u16), then the header bytes.
pub fn headers(data: &[u8]) {
    let mut input = Input::new(data);
    let h = input.u8();
    let payload = usize::from(input.u16());
    let bytes = input.rest();
    header_round_trip::<MatchHeader>(bytes);
    header_round_trip::<EagerHeader>(bytes);
    header_round_trip::<ReadableRts>(bytes);
    header_round_trip::<CtsHeader>(bytes);
    header_round_trip::<DataHeader>(bytes);
    header_round_trip::<AckHeader>(bytes);
    header_round_trip::<CancelHeader>(bytes);
    if let Ok((m, addr)) = wire::parse_match(h, bytes, payload) {
        assert!(wire::is_match(h) || h != handler::EAGER_SHORT);
        if h == handler::EAGER_SHORT {
            assert_eq!(m.total, payload as u64);
            assert_eq!(m.sreq, 0);
            assert_eq!(m.flags & ch4_core::request::msg_flags::SYNC, 0);
        }
        if h == handler::RTS_GET {
            assert_ne!(addr, 0);
        } else {
            assert_eq!(addr, 0);
        }
    }
}

/// Largest payload a forged packet carries (the pipe takes whatever it is given).
const PAYLOAD_MAX: usize = 1 << 16;

/// One forged packet of the input: handler, header length, payload length (u16), a byte of
/// flags (bit 0: run the victim's progress after it; bit 1: the honest peer's too), then the
/// header and the payload.
pub fn packet_bytes(handler: u8, header: &[u8], payload: &[u8], step: u8) -> Vec<u8> {
    let mut v = vec![handler, header.len() as u8];
    v.extend((payload.len() as u16).to_le_bytes());
    v.push(step);
    v.extend(header);
    v.extend(payload);
    v
}

/// A real AM engine (device 1 of a pipe pair) with receives posted, a rendezvous send waiting
/// for its clear-to-send and a synchronous send waiting for its acknowledgement, fed packets
/// forged as from device 0 (see [`packet_bytes`]). Whatever they say — lengths past the
/// buffer, offsets past the message, request ids that were never issued or were freed, credit
/// out of thin air — the engine answers with an error or ignores them, never panics or writes
/// out of bounds; then every request it holds can still be tested and released.
pub fn packets(data: &[u8]) {
    let Ok((wire, mut h)) = pipe_pair(DeviceConfig::default()) else {
        return;
    };
    let mut reqs = Vec::new();
    {
        let d = &mut h[1];
        let world = d.world();
        reqs.extend(d.irecv(world, ANY_SOURCE, ANY_TAG, RecvBuf::owned(24)));
        reqs.extend(d.irecv(world, 0, 7, RecvBuf::owned(4096)));
        reqs.extend(d.irecv(world, 0, 9, RecvBuf::owned(0)));
        let big = SendBuf::owned(vec![0x5A; 3000]);
        reqs.extend(d.isend(world, 0, 3, big, SendMode::Standard));
        let small = SendBuf::owned(vec![0xA5; 8]);
        reqs.extend(d.isend(world, 0, 4, small, SendMode::Synchronous));
    }
    let mut input = Input::new(data);
    while !input.is_empty() {
        let handler = input.u8();
        let hlen = input.u8() as usize;
        let plen = usize::from(input.u16()).min(PAYLOAD_MAX);
        let step = input.u8();
        let header = input.bytes(hlen);
        let payload = input.bytes(plen);
        wire.inject(1, Frame::new(0, handler, header, payload));
        if step & 1 != 0 {
            let _ = h[1].progress();
        }
        if step & 2 != 0 {
            let _ = h[0].progress();
        }
    }
    for _ in 0..4 {
        let _ = h[1].progress();
        let _ = h[0].progress();
    }
    let d = &mut h[1];
    for r in reqs {
        let _ = d.test_status(r);
        d.release(r);
    }
    let world = d.world();
    let _ = d.iprobe(world, ANY_SOURCE, ANY_TAG);
}

/// Seeds for [`packets`]: the packets an honest device 0 sends device 1 over the pipe for
/// eager, synchronous, rendezvous and cancelled messages, in the input format.
pub fn packet_seeds() -> Vec<Vec<u8>> {
    let mut seeds = Vec::new();
    for (len, mode, tag) in [
        (8usize, SendMode::Standard, 7),
        (8, SendMode::Synchronous, 7),
        (30, SendMode::Ready, 9),
        (200, SendMode::Standard, 7),
        (5000, SendMode::Standard, 7),
        (100, SendMode::Synchronous, 1),
    ] {
        let Ok((wire, mut h)) = pipe_pair(DeviceConfig::default()) else {
            continue;
        };
        let world = h[0].world();
        let Ok(s) = h[0].isend(world, 1, tag, SendBuf::owned(vec![7; len]), mode) else {
            continue;
        };
        let mut input = Vec::new();
        // Let device 0 run the whole exchange against an answering device 1, recording what
        // reaches device 1.
        let world1 = h[1].world();
        let r = h[1].irecv(world1, 0, tag, RecvBuf::owned(len));
        for _ in 0..64 {
            let _ = h[0].progress();
            let frames: Vec<Frame> = wire.with_inbox(1, |q| q.iter().cloned().collect());
            for f in &frames {
                input.extend(packet_bytes(f.handler, &f.header, &f.payload, 1));
            }
            let _ = h[1].progress();
        }
        let _ = h[0].test_status(s);
        h[0].release(s);
        if let Ok(r) = r {
            h[1].release(r);
        }
        seeds.push(input);
    }
    seeds
}

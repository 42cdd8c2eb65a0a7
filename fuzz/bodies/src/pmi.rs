//! PMI: the PMI-1 and PMI-2 wire formats, the launcher's server core fed clients' lines, the
//! client fed a process manager's replies, and the values carried in them (hex, the process
//! mapping).

use std::io::{self, Read, Write};

use pmi::wire::{Command, Decoder, WireError};
use pmi::{wire2, ClientId, JobConfig, Output, Server, Version};

use crate::input::{chunks, Input};

/// The messages a PMI-1 decoder gives for `stream` arriving in `pieces`, draining after every
/// push as a connection does; at the end, whether it stopped mid-message.
fn decode1(stream: &[u8], pieces: &[usize]) -> (Vec<Result<Command, WireError>>, bool) {
    let mut d = Decoder::new();
    let mut out = Vec::new();
    for chunk in chunks(stream, pieces) {
        d.push(chunk);
        while let Some(m) = d.next_message() {
            out.push(m);
        }
    }
    (out, d.finish().is_err())
}

/// A message that parsed formats back to a line that parses to it again.
fn round_trips(cmd: &Command, encode: impl Fn(&Command) -> Result<Vec<u8>, WireError>) {
    let Ok(bytes) = encode(cmd) else {
        return; // a value the format cannot carry (a space in a single-line value, say)
    };
    let mut d = Decoder::new();
    d.push(&bytes);
    let again = d.next_message().expect("a formatted message is whole");
    assert_eq!(
        again.as_ref(),
        Ok(cmd),
        "{:?}",
        String::from_utf8_lossy(&bytes)
    );
}

/// PMI-1 lines (and `mcmd` blocks) in arbitrary pieces: the same messages as whole, each good
/// one formatting back to itself. Input: a byte counting piece sizes, the sizes, the stream.
pub fn wire1(data: &[u8]) {
    let mut input = Input::new(data);
    let n = input.u8() as usize;
    let pieces = Input::new(input.bytes(n)).pieces();
    let stream = input.rest();
    let (whole, _) = decode1(stream, &[usize::MAX]);
    let (split, _) = decode1(stream, &pieces);
    // Errors may be reported differently (a line found too long when its newline arrives, or
    // while it is still coming), but the good messages are the same.
    let good = |v: &[Result<Command, WireError>]| -> Vec<Command> {
        v.iter().filter_map(|m| m.as_ref().ok().cloned()).collect()
    };
    assert_eq!(good(&whole), good(&split), "pieces {pieces:?}");
    for cmd in good(&whole) {
        round_trips(&cmd, |c| c.to_wire().map(String::into_bytes));
    }
    let _ = Command::parse(stream);
}

/// The messages a PMI-2 decoder gives, up to and including its first error (after which the
/// stream is unusable).
fn decode2(stream: &[u8], pieces: &[usize]) -> Vec<Result<Command, WireError>> {
    let mut d = wire2::Decoder::new();
    let mut out = Vec::new();
    for chunk in chunks(stream, pieces) {
        d.push(chunk);
        while let Some(m) = d.next_message() {
            let bad = m.is_err();
            out.push(m);
            if bad {
                return out;
            }
        }
    }
    out
}

/// PMI-2 length-prefixed messages in arbitrary pieces: the same messages and the same first
/// error as whole; each good one encodes back to itself. Input as for [`wire1`].
pub fn wire2(data: &[u8]) {
    let mut input = Input::new(data);
    let n = input.u8() as usize;
    let pieces = Input::new(input.bytes(n)).pieces();
    let stream = input.rest();
    let whole = decode2(stream, &[usize::MAX]);
    let split = decode2(stream, &pieces);
    // Parse errors inside a body are the same however it arrived; a bad length prefix too.
    assert_eq!(whole, split, "pieces {pieces:?}");
    for cmd in whole.iter().filter_map(|m| m.as_ref().ok()) {
        if let Ok(bytes) = wire2::encode(cmd) {
            let mut d = wire2::Decoder::new();
            d.push(&bytes);
            let again = d.next_message().expect("an encoded message is whole");
            assert_eq!(
                again.as_ref(),
                Ok(cmd),
                "{:?}",
                String::from_utf8_lossy(&bytes)
            );
        }
    }
    let _ = wire2::parse_body(stream);
}

/// The launcher's server core (the state machine behind `ch4run`) with three clients, fed
/// lines of the clients' choosing, disconnects among them. Every reply it writes must be a
/// well-formed PMI-1 line, and nothing may panic. Input: records of a byte (client 0-2, or 3+
/// for "that client disconnects"), a length byte and the bytes the client writes.
pub fn server(data: &[u8]) {
    let mut input = Input::new(data);
    let size = u32::from(input.u8() % 4) + 1;
    let mut config = JobConfig::single_node(size);
    config.kvsname = "kvs_fuzz_0".into();
    let Ok(mut server) = Server::new(config) else {
        return;
    };
    let mut decoders: Vec<Decoder> = (0..3).map(|_| Decoder::new()).collect();
    for c in 0..3u64 {
        // Client 0 was told its rank by the launcher, the others ask.
        let rank = (c == 0).then_some(0);
        let _ = server.add_client(ClientId(c), rank);
    }
    while !input.is_empty() {
        let who = input.u8();
        let bytes = input.short_bytes();
        let c = usize::from(who % 8);
        if c >= 3 {
            let _ = server.handle_disconnect(ClientId((c - 3) as u64 % 3));
            continue;
        }
        decoders[c].push(bytes);
        while let Some(m) = decoders[c].next_message() {
            let _ = match m {
                Ok(cmd) => server.handle_command(ClientId(c as u64), &cmd),
                Err(e) => server.handle_malformed(ClientId(c as u64), &e),
            };
        }
        while let Some(out) = server.poll_output() {
            if let Output::Send { data, .. } = out {
                let mut d = Decoder::new();
                d.push(data.as_bytes());
                let mut n = 0;
                while let Some(m) = d.next_message() {
                    assert!(m.is_ok(), "the server wrote a malformed line: {data:?}");
                    n += 1;
                }
                assert!(n > 0 && d.finish().is_ok(), "the server wrote {data:?}");
            }
        }
    }
}

/// A process manager's side of a connection, played from the input: reads hand out the
/// scripted bytes in pieces, then end of stream; writes are taken and forgotten.
struct Scripted {
    replies: Vec<u8>,
    at: usize,
    piece: usize,
}

impl Read for Scripted {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = buf.len().min(self.piece).min(self.replies.len() - self.at);
        buf[..n].copy_from_slice(&self.replies[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

impl Write for Scripted {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The client a rank uses, over a connection whose process manager answers with the input's
/// bytes: whatever it says, every call returns (end of stream is an error, never a hang) and
/// nothing panics. Input: a byte of options (protocol version, whether the launcher gave rank
/// and size, read piece size), a byte counting calls, the calls (one byte each), then the
/// replies.
pub fn client(data: &[u8]) {
    let mut input = Input::new(data);
    let opts = input.u8();
    let ncalls = input.u8() as usize % 16;
    let calls = input.bytes(ncalls).to_vec();
    let replies = input.rest().to_vec();
    let stream = Scripted {
        replies,
        at: 0,
        piece: usize::from(opts >> 3).max(1) * 7,
    };
    let (rank, size) = if opts & 2 != 0 {
        (Some(0), Some(2))
    } else {
        (None, None)
    };
    let Ok(c) = pmi::Client::over_stream(stream, rank, size) else {
        return;
    };
    let version = if opts & 1 != 0 {
        Version::Two
    } else {
        Version::One
    };
    let mut c = c.speaking(version, (opts & 4 != 0).then(|| "job7".to_owned()));
    if c.init().is_err() {
        return;
    }
    let _ = (c.rank(), c.size(), c.get_my_kvsname().map(str::len));
    for call in calls {
        let _ = match call % 12 {
            0 => c.get_maxes().map(drop),
            1 => c.get_universe_size().map(drop),
            2 => c.get_appnum().map(drop),
            3 => c.put("card-0", "0a0b"),
            4 => c.put_bytes("card-0", &[1, 2, 3]),
            5 => c.get("card-1").map(drop),
            6 => c.get_bytes("card-1").map(drop),
            7 => c.barrier(),
            8 => c.node_ids().map(drop),
            9 => c.watch_peers().map(drop),
            10 => c.poll_peer_events().map(drop),
            _ => c.finalize(),
        };
    }
}

/// The values inside PMI messages: hex (business cards) decodes only what encoding could give
/// and round-trips; a process mapping parses, prints back to itself and places exactly the
/// job's ranks. Input: a byte choosing the value kind, two bytes of job size, the text.
pub fn values(data: &[u8]) {
    let mut input = Input::new(data);
    let kind = input.u8();
    let size = u32::from(input.u16() % 4096);
    let Ok(text) = std::str::from_utf8(input.rest()) else {
        return;
    };
    if kind & 1 == 0 {
        if let Ok(bytes) = pmi::hex::decode(text) {
            assert!(pmi::hex::encode(&bytes).eq_ignore_ascii_case(text));
        }
        return;
    }
    let Ok(mapping) = pmi::ProcessMapping::parse(text) else {
        return;
    };
    let printed = mapping.to_string();
    assert_eq!(
        pmi::ProcessMapping::parse(&printed).ok().as_ref(),
        Some(&mapping)
    );
    if let Ok(Some(ids)) = mapping.node_ids(size) {
        assert_eq!(ids.len(), size as usize);
    }
}

//! The TCP netmod's stream: the frame decoder alone, and a real listening rank fed a stranger's
//! connection (the hello handshake, then frames, then the AM engine behind them).

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use ch4_core::buffer::RecvBuf;
use ch4_core::core::DeviceConfig;
use ch4_core::{Device, NoShm, ANY_SOURCE, ANY_TAG};
use netmod_tcp::frame::{self, Decoder, Popped};
use netmod_tcp::TcpNetmod;

use crate::input::{chunks, Input};

/// What a decoder made of a stream: each frame (message or control) and how it ended.
#[derive(Debug, PartialEq, Eq)]
enum Event {
    Message(u8, Vec<u8>, Vec<u8>),
    Control(u8),
    Error(frame::DecodeError),
}

/// A reader handing out its chunks one per read (at most what is asked for).
struct Chunked<'a> {
    chunks: Vec<&'a [u8]>,
    next: usize,
    within: usize,
}

impl Read for Chunked<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let Some(chunk) = self.chunks.get(self.next) else {
            return Ok(0);
        };
        let n = buf.len().min(chunk.len() - self.within);
        buf[..n].copy_from_slice(&chunk[self.within..self.within + n]);
        self.within += n;
        if self.within == chunk.len() {
            self.next += 1;
            self.within = 0;
        }
        Ok(n)
    }
}

/// Decodes `stream` arriving in `pieces`: the frames in order, up to the first error.
fn decode(stream: &[u8], pieces: &[usize], max_payload: usize) -> (Vec<Event>, bool) {
    let mut d = Decoder::new(max_payload);
    let mut r = Chunked {
        chunks: chunks(stream, pieces),
        next: 0,
        within: 0,
    };
    let mut out = Vec::new();
    loop {
        let n = d.read_from(&mut r).expect("an in-memory read cannot fail");
        // The queries a connection makes between reads: none may panic on what is held.
        let _ = d
            .partial_front()
            .map(|(h, hd, len, p)| (h, hd.len(), len, p.len()));
        let _ = d.has_work(1 << 10);
        let _ = d.ends_with_control();
        loop {
            match d.pop_with(|h, hd, p| (h, hd.to_vec(), p.to_vec())) {
                Ok(Some(Popped::Message((h, hd, p)))) => out.push(Event::Message(h, hd, p)),
                Ok(Some(Popped::Control(c))) => out.push(Event::Control(c)),
                Ok(None) => break,
                Err(e) => {
                    out.push(Event::Error(e));
                    return (out, d.has_data());
                }
            }
        }
        if n == 0 {
            return (out, d.has_data());
        }
    }
}

/// The frame decoder fed a stream whole and in arbitrary pieces: the same frames, the same
/// error, never a panic or an allocation sized by an unchecked length. Input: a byte choosing
/// the payload limit, a byte counting the piece sizes that follow, the sizes, then the stream.
pub fn frames(data: &[u8]) {
    let mut input = Input::new(data);
    let max_payload = match input.u8() {
        0..=127 => 64,
        128..=191 => 4096,
        _ => 1 << 20,
    };
    let n = input.u8() as usize;
    let pieces = Input::new(input.bytes(n)).pieces();
    let stream = input.rest();
    let whole = decode(stream, &[usize::MAX], max_payload);
    let split = decode(stream, &pieces, max_payload);
    assert_eq!(
        whole, split,
        "pieces {pieces:?} changed what the stream decodes to"
    );
    // What decoded re-encodes to the bytes it came from (a frame's pad bytes excepted, which
    // a message frame's re-encoding does not carry): check the messages survive a round trip.
    let mut again = Vec::new();
    for e in &whole.0 {
        match e {
            Event::Message(h, hd, p) => {
                again.extend(frame::encode(*h, hd.len(), p.len()));
                again.extend(hd);
                again.extend(p);
            }
            Event::Control(c) => again.extend(frame::encode_control(*c)),
            Event::Error(_) => {}
        }
    }
    let round: Vec<Event> = decode(&again, &[usize::MAX], max_payload)
        .0
        .into_iter()
        .collect();
    let expect: Vec<&Event> = whole
        .0
        .iter()
        .filter(|e| !matches!(e, Event::Error(_)))
        .collect();
    assert_eq!(round.iter().collect::<Vec<_>>(), expect);
}

/// The job key of the rank [`connection`] attacks; a hello with it passes.
pub const JOB_KEY: u64 = 0x00C4_F022_0000_0001;

/// The hello of rank 1 of the job [`JOB_KEY`], connection generation 0: the first bytes a real
/// peer sends.
pub fn hello() -> Vec<u8> {
    let mut h = b"ch4tcp\0\x02".to_vec();
    h.extend(JOB_KEY.to_le_bytes());
    h.extend(1u32.to_le_bytes());
    h.extend(0u32.to_le_bytes());
    h.extend(0x0102_0304u32.to_ne_bytes());
    h
}

/// A real rank (rank 0 of two, TCP on loopback, receives posted) and a connection from a stranger: the first input byte chooses whether the
/// stranger opens with the job's valid hello (even) or its own bytes (odd); the rest is what it
/// writes before closing. The rank must refuse or serve it without a panic, and the body ends
/// once the rank has closed the connection (bounded in time, for a loaded machine).
pub fn connection(data: &[u8]) {
    let mut input = Input::new(data);
    let mode = input.u8();
    let stream = input.rest();
    let loopback = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
    let Ok(mut net) = TcpNetmod::bind(0, 2, JOB_KEY, loopback) else {
        return; // out of ports or descriptors: nothing to test
    };
    // Rank 1's address: a port nothing listens on, so the rank's own connect attempts fail
    // fast instead of reaching anything.
    let _ = net.set_address(1, SocketAddr::from((Ipv4Addr::LOCALHOST, 9)));
    let addr = net.local_addr();
    let Ok(mut dev) = Device::new(net, NoShm, 0, 2, DeviceConfig::default()) else {
        return;
    };
    let world = dev.world();
    let _ = dev.irecv(world, ANY_SOURCE, ANY_TAG, RecvBuf::owned(64));
    let _ = dev.irecv(world, 1, 7, RecvBuf::owned(1 << 16));
    let _ = dev.irecv(world, 1, 0, RecvBuf::owned(0));
    let Ok(mut s) = TcpStream::connect(addr) else {
        return;
    };
    let mut sent = if mode & 1 == 0 { hello() } else { Vec::new() };
    sent.extend_from_slice(stream);
    let _ = s.set_nonblocking(true);
    let mut at = 0;
    let start = Instant::now();
    let mut closed = false;
    let mut buf = [0u8; 4096];
    while start.elapsed() < Duration::from_secs(2) {
        let _ = dev.progress();
        if at < sent.len() {
            match s.write(&sent[at..]) {
                Ok(n) => at += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => at = sent.len(),
            }
            if at == sent.len() {
                let _ = s.shutdown(Shutdown::Write);
            }
        }
        match s.read(&mut buf) {
            Ok(0) => closed = true,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => closed = true,
        }
        if closed && at == sent.len() {
            break;
        }
    }
}

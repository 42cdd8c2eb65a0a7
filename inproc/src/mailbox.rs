//! A rank's mailbox: senders append framed messages under a lock; the owner swaps the whole
//! buffer out and parses it without holding the lock. Both buffers keep their capacity, so a
//! warmed-up mailbox allocates nothing.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use ch4_core::transport::HandlerId;
use ch4_core::{Error, ErrorKind, Gpid, Result};
use crossbeam_utils::CachePadded;

/// Frame layout: src u32 | payload length u32 | handler u8 | header length u8 | 2 bytes padding.
const FRAME: usize = 12;

/// The shared half, one per rank and route.
#[derive(Default)]
pub(crate) struct Mailbox {
    bytes: CachePadded<Mutex<Vec<u8>>>,
    /// Set after an append, cleared when the owner takes the bytes: lets an idle poll skip the
    /// lock. Release on set / Acquire on test order it with the appended bytes; a stale `false`
    /// only delays delivery to the next poll, a stale `true` costs one lock.
    nonempty: CachePadded<AtomicBool>,
}

impl Mailbox {
    /// Appends one message.
    #[inline]
    pub(crate) fn push(
        &self,
        src: Gpid,
        handler: HandlerId,
        header: &[u8],
        payload: &[&[u8]],
    ) -> Result<()> {
        let plen: usize = payload.iter().map(|p| p.len()).sum();
        let (Ok(hlen), Ok(plen32)) = (u8::try_from(header.len()), u32::try_from(plen)) else {
            return Err(Error::new(
                ErrorKind::Count,
                format!(
                    "active message too large: header {} payload {plen}",
                    header.len()
                ),
            ));
        };
        let mut frame = [0u8; FRAME];
        frame[0..4].copy_from_slice(&src.to_le_bytes());
        frame[4..8].copy_from_slice(&plen32.to_le_bytes());
        frame[8] = handler;
        frame[9] = hlen;
        let mut buf = self
            .bytes
            .lock()
            .map_err(|_| Error::new(ErrorKind::PeerFailed, "a rank panicked holding a mailbox"))?;
        buf.reserve(FRAME + header.len() + plen);
        buf.extend_from_slice(&frame);
        buf.extend_from_slice(header);
        for p in payload {
            buf.extend_from_slice(p);
        }
        self.nonempty.store(true, Ordering::Release);
        Ok(())
    }
}

/// The owner's half: the swapped-out buffer and how far it has been read.
#[derive(Default)]
pub(crate) struct Inbox {
    buf: Vec<u8>,
    pos: usize,
}

impl Inbox {
    /// Hands up to `budget` messages to `deliver`; returns how many.
    #[inline]
    pub(crate) fn poll(
        &mut self,
        mailbox: &Mailbox,
        budget: usize,
        mut deliver: impl FnMut(Gpid, HandlerId, &[u8], &[u8]) -> Result<()>,
    ) -> Result<usize> {
        if self.pos >= self.buf.len() {
            self.buf.clear();
            self.pos = 0;
            if !mailbox.nonempty.load(Ordering::Acquire) {
                return Ok(0);
            }
            let mut shared = mailbox.bytes.lock().map_err(|_| {
                Error::new(ErrorKind::PeerFailed, "a rank panicked holding a mailbox")
            })?;
            if shared.is_empty() {
                return Ok(0);
            }
            std::mem::swap(&mut *shared, &mut self.buf);
            mailbox.nonempty.store(false, Ordering::Relaxed);
        }
        let mut n = 0;
        while n < budget && self.pos < self.buf.len() {
            let rest = &self.buf[self.pos..];
            let Some(frame) = rest.get(..FRAME) else {
                self.pos = self.buf.len();
                return Err(corrupt());
            };
            let src = u32::from_le_bytes([frame[0], frame[1], frame[2], frame[3]]);
            let plen = u32::from_le_bytes([frame[4], frame[5], frame[6], frame[7]]) as usize;
            let handler = frame[8];
            let hlen = frame[9] as usize;
            let end = FRAME + hlen + plen;
            let Some(body) = rest.get(FRAME..end) else {
                self.pos = self.buf.len();
                return Err(corrupt());
            };
            let (header, payload) = body.split_at(hlen);
            self.pos += end;
            n += 1;
            deliver(src, handler, header, payload)?;
        }
        Ok(n)
    }
}

#[cold]
fn corrupt() -> Error {
    Error::new(ErrorKind::Internal, "in-process mailbox holds a torn frame")
}

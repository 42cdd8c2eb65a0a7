//! Receiving: reading sockets into the per-VC decoders, delivering whole frames, and reading
//! large payloads straight into their receive buffers (`read`, or `readv` into the blocks of a
//! noncontiguous one).

use std::io::{self, IoSliceMut, Read};

use ch4_core::transport::AmSink;
use ch4_core::Result;
use smallvec::SmallVec;

use super::*;
use crate::frame::Popped;

/// A frame whose payload goes straight from the socket into the receive buffer the engine
/// named for it (no copy through the decoder).
pub(super) struct DirectRecv {
    pub(super) handler: HandlerId,
    pub(super) header: Vec<u8>,
    pub(super) len: usize,
    pub(super) done: usize,
    /// Into the pieces of a noncontiguous receive buffer (`readv`), not one slice.
    pub(super) scattered: bool,
}

/// How far a direct read got.
pub(super) enum Direct {
    /// The whole payload is in place.
    Placed,
    /// The socket has no more for now.
    Pending,
    /// The connection or the receive is gone.
    Failed(String),
}

/// A noncontiguous receive buffer is read into directly when a payload falls into at most this
/// many pieces (one `readv`)...
pub(super) const SCATTER_MAX: usize = IOV_LIMIT;

/// ...of at least this many bytes on average (default of `CH4_TCP_SCATTER_MIN`). Measured with
/// `cargo bench -p netmod-tcp --bench strided` (4 MiB into a vector layout, medians of 5, two
/// runs): `readv` straight into the blocks against copying out of the decoder, 1.30-1.36x at
/// 4 KiB blocks, 1.4-1.7x from 16 KiB; at 1 KiB 0.99x in one run and 1.27x in the other, so
/// the default starts at 4 KiB.
pub(super) const SCATTER_MIN_PIECE: usize = 4 << 10;

/// Payloads at least this long are read straight into the receive buffer when the engine has
/// one for them: below, the copy out of the decoder costs less than the extra reads.
pub(super) const DIRECT_MIN: usize = 16 << 10;

impl TcpNetmod {
    /// With more connections than are read directly, `peer` just sent something: read it
    /// directly at the next polls too (it is likely to send again soon, and a read finds that
    /// sooner than epoll), in place of the peer heard from longest ago.
    fn mark_hot(&mut self, peer: usize) {
        if self.connected.len() > DIRECT_MAX && !self.hot.contains(&peer) {
            self.hot.insert(0, peer);
            self.hot.truncate(HOT_MAX);
        }
    }

    /// Reads everything the socket has into the VC's decoder. Readiness from epoll is
    /// edge-triggered, so after an event the socket must be read until it would block; a direct
    /// read at a poll (`until_would_block` false) stops at the first read that leaves space,
    /// saving the system call that would only say "nothing more".
    pub(super) fn read_all(&mut self, peer: usize, until_would_block: bool) {
        self.vcs[peer].paused = false;
        if self.vcs[peer].direct.is_some() {
            // The payload under way is read by the delivery, straight into its buffer.
            if !self.backlog.contains(&peer) {
                self.backlog.push(peer);
            }
            return;
        }
        let vc = &mut self.vcs[peer];
        if vc.eof {
            return; // the stream has ended; the connection only finishes sending
        }
        let mut limit = if vc.after_placed && !vc.decoder.has_data() {
            frame::HEADERS_MAX
        } else {
            usize::MAX
        };
        vc.after_placed = false;
        let outcome = match vc.stream.as_mut() {
            None => return,
            Some(stream) => loop {
                let read = vc.decoder.read_at_most(stream, limit);
                limit = usize::MAX;
                match read {
                    Ok(0) => break Err(None),
                    // Deliver what is whole before reading more, so that a large payload
                    // behind it stays in the socket and can be read straight into its
                    // receive buffer (the delivery reads on after it, or if it cannot).
                    Ok(_) if !vc.decoder_only && vc.decoder.has_work(DIRECT_MIN) => {
                        vc.paused = until_would_block || !vc.decoder.drained();
                        break Ok(());
                    }
                    Ok(_) if !until_would_block && vc.decoder.drained() => break Ok(()),
                    Ok(_) => {}
                    Err(e) if would_block(&e) => break Ok(()),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => break Err(Some(e)),
                }
            },
        };
        // Frames that arrived before an end of stream are still delivered.
        if self.vcs[peer].decoder.has_data() && !self.backlog.contains(&peer) {
            self.backlog.push(peer);
            self.mark_hot(peer);
        }
        match outcome {
            Ok(()) => {}
            Err(None) => self.on_eof(peer),
            // A process that left may reset the connection rather than close it.
            Err(Some(_)) if self.vcs[peer].peer_goodbye == Some(true) => self.peer_left(peer),
            Err(Some(e)) => self.fail(peer, format!("read: {e}")),
        }
    }

    /// When the decoder holds the headers of a large frame whose payload is still coming and
    /// the engine has a place for that payload, moves what has arrived there and switches the
    /// VC to reading the rest straight into it.
    pub(super) fn start_direct<K: AmSink>(&mut self, peer: usize, sink: &mut K) -> bool {
        let vc = &mut self.vcs[peer];
        let Some((handler, header, len, held)) = vc.decoder.partial_front() else {
            return false;
        };
        if len < DIRECT_MIN {
            return false;
        }
        let src = peer as Gpid;
        let scattered = if let Some(dst) = sink.destination(src, handler, header, len) {
            if dst.len() != len {
                return false;
            }
            dst[..held.len()].copy_from_slice(held);
            false
        } else if let Some(mut pieces) =
            sink.scattered_destination(src, handler, header, len, SCATTER_MAX)
        {
            let total: usize = pieces.iter().map(|p| p.len()).sum();
            if total != len || len / pieces.len().max(1) < self.scatter_min {
                return false;
            }
            let mut rest = held;
            for p in pieces.iter_mut() {
                let n = p.len().min(rest.len());
                p[..n].copy_from_slice(&rest[..n]);
                rest = &rest[n..];
            }
            true
        } else {
            return false;
        };
        vc.direct = Some(DirectRecv {
            handler,
            header: header.to_vec(),
            len,
            done: held.len(),
            scattered,
        });
        vc.decoder.clear();
        true
    }

    /// Reads more of a direct payload into its buffer; reports it placed once complete.
    pub(super) fn continue_direct<K: AmSink>(
        &mut self,
        peer: usize,
        sink: &mut K,
    ) -> Result<Direct> {
        let src = peer as Gpid;
        let vc = &mut self.vcs[peer];
        let (Some(d), Some(stream)) = (vc.direct.as_mut(), vc.stream.as_mut()) else {
            return Ok(Direct::Failed("the connection closed mid-message".into()));
        };
        let gone = || {
            Ok(Direct::Failed(
                "the receive of a message arriving in place went away".into(),
            ))
        };
        if d.scattered {
            let Some(mut pieces) =
                sink.scattered_destination(src, d.handler, &d.header, d.len, SCATTER_MAX)
            else {
                return gone();
            };
            while d.done < d.len {
                let mut skip = d.done;
                let mut iov: SmallVec<[IoSliceMut<'_>; 8]> = SmallVec::new();
                for p in pieces.iter_mut() {
                    if skip >= p.len() {
                        skip -= p.len();
                    } else {
                        iov.push(IoSliceMut::new(&mut p[skip..]));
                        skip = 0;
                    }
                }
                if let Some(end) = read_outcome(stream.read_vectored(&mut iov), &mut d.done) {
                    return Ok(end);
                }
            }
        } else {
            let Some(dst) = sink.destination(src, d.handler, &d.header, d.len) else {
                return gone();
            };
            while d.done < d.len {
                if let Some(end) = read_outcome(stream.read(&mut dst[d.done..]), &mut d.done) {
                    return Ok(end);
                }
            }
        }
        let done = vc.direct.take();
        vc.after_placed = true;
        if let Some(d) = done {
            sink.placed(src, d.handler, &d.header, d.len)?;
        }
        self.placed += 1;
        Ok(Direct::Placed)
    }

    /// Delivers whole frames held by backlogged decoders, up to `budget`.
    pub(super) fn deliver_backlog<K: AmSink>(
        &mut self,
        sink: &mut K,
        budget: usize,
    ) -> Result<usize> {
        let mut delivered = 0;
        let mut i = 0;
        while i < self.backlog.len() && delivered < budget {
            let peer = self.backlog[i];
            let src = peer as Gpid;
            let mut failure = None;
            let mut waiting_direct = false;
            loop {
                if delivered >= budget {
                    break;
                }
                if self.vcs[peer].direct.is_some() {
                    match self.continue_direct(peer, sink)? {
                        Direct::Placed => {
                            delivered += 1;
                            // What follows the payload is read as usual (until the socket
                            // would block: readiness is edge-triggered).
                            self.read_all(peer, true);
                            continue;
                        }
                        Direct::Pending => {
                            waiting_direct = true;
                            break;
                        }
                        Direct::Failed(why) => {
                            self.fail(peer, why);
                            break;
                        }
                    }
                }
                match self.vcs[peer]
                    .decoder
                    .pop_with(|h, hdr, payload| sink.deliver(src, h, hdr, payload))
                {
                    Ok(Some(Popped::Message(r))) => {
                        delivered += 1;
                        self.vcs[peer].decoder_only = false;
                        r?;
                    }
                    Ok(Some(Popped::Control(code))) => {
                        self.on_goodbye(peer, code == frame::LEAVING);
                    }
                    Ok(None) => {
                        if self.start_direct(peer, sink) {
                            continue;
                        }
                        let vc = &mut self.vcs[peer];
                        if vc.paused {
                            // No place for it yet: read on through the decoder (until the
                            // socket would block, as edge-triggered readiness needs).
                            vc.decoder_only = vc.decoder.awaits_payload_of(DIRECT_MIN);
                            self.read_all(peer, true);
                            continue;
                        }
                        break;
                    }
                    Err(e) => {
                        failure = Some(e);
                        break;
                    }
                }
            }
            if waiting_direct {
                i += 1;
                continue;
            }
            if let Some(e) = failure {
                self.fail(peer, format!("undecodable stream: {e}"));
                self.vcs[peer].decoder = Decoder::new(0);
                self.backlog.swap_remove(i);
                continue;
            }
            if delivered < budget {
                // Drained: no whole frame left (a partial one waits for its readable event).
                self.backlog.swap_remove(i);
            } else {
                i += 1;
            }
        }
        Ok(delivered)
    }
}

/// One read of a direct payload: counts what came into `done`; `Some` when reading must stop
/// (nothing more for now, or the connection broke).
fn read_outcome(read: io::Result<usize>, done: &mut usize) -> Option<Direct> {
    match read {
        Ok(0) => Some(Direct::Failed("the peer closed mid-message".into())),
        Ok(n) => {
            *done += n;
            None
        }
        Err(e) if would_block(&e) => Some(Direct::Pending),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => None,
        Err(e) => Some(Direct::Failed(format!("read: {e}"))),
    }
}

//! Ending connections: the orderly close (`vc_terminate`, finalize's leaving goodbye, the
//! peer's answer, reconnecting after it) and failures (end of stream without a goodbye, resets).

use super::*;

/// An orderly close under way.
#[derive(Debug, Clone, Copy)]
pub(super) struct Closing {
    /// We leave the job: the goodbye says so.
    pub(super) leaving: bool,
    /// The goodbye is in the send queue, behind everything sent before the close.
    pub(super) goodbye_queued: bool,
    /// Our sending side is shut down: the peer has everything, goodbye included.
    pub(super) shut: bool,
}

impl TcpNetmod {
    /// Closes the connection to `peer` in order without waiting (the Nemesis netmod API's `vc_terminate`):
    /// what was sent to it still goes out, followed by a goodbye; the peer answers with its own
    /// once its queue is out, and then the VC is idle. Sends made meanwhile wait and go on a new
    /// connection. Closing a VC that has no connection does nothing.
    pub fn vc_terminate(&mut self, peer: Gpid) -> Result<()> {
        if peer as usize >= self.vcs.len() {
            return Err(Error::new(ErrorKind::Rank, format!("no process {peer}")));
        }
        if peer != self.me {
            self.begin_close(peer as usize, false);
        }
        Ok(())
    }

    /// Whether a connection to `peer` is open (connected, or still closing).
    pub fn is_connected(&self, peer: Gpid) -> bool {
        self.vcs
            .get(peer as usize)
            .is_some_and(|v| matches!(v.state, VcState::Connected))
    }

    pub(super) fn begin_close(&mut self, peer: usize, leaving: bool) {
        let vc = &mut self.vcs[peer];
        if matches!(vc.state, VcState::Idle | VcState::Failed(..)) {
            return;
        }
        match vc.close.as_mut() {
            None => {
                vc.close = Some(Closing {
                    leaving,
                    goodbye_queued: false,
                    shut: false,
                })
            }
            Some(c) if !c.goodbye_queued => c.leaving |= leaving,
            Some(_) => {}
        }
        // Queues the goodbye once connected; shuts our side once everything is out.
        self.flush(peer);
    }

    /// The peer's goodbye came out of the stream.
    pub(super) fn on_goodbye(&mut self, peer: usize, leaving: bool) {
        self.vcs[peer].peer_goodbye = Some(leaving);
        if !leaving {
            // Answer with our own once what we queued for it is out.
            self.begin_close(peer, false);
        }
        self.maybe_closed(peer);
    }

    /// The peer's end of stream: an orderly close if its goodbye came first (already taken from
    /// the stream, or the last frame still held), a failure otherwise.
    pub(super) fn on_eof(&mut self, peer: usize) {
        let vc = &mut self.vcs[peer];
        let goodbye = vc
            .peer_goodbye
            .or_else(|| vc.decoder.ends_with_control().map(|c| c == frame::LEAVING));
        match goodbye {
            None => self.fail(peer, "the peer closed the connection".into()),
            Some(true) => self.peer_left(peer),
            Some(false) => {
                vc.eof = true;
                self.begin_close(peer, false);
                self.maybe_closed(peer);
            }
        }
    }

    /// Ends an orderly close once both directions are done: our goodbye is out, the peer's end
    /// of stream came after its goodbye, and every frame before it was delivered. The VC is then
    /// idle; frames sent meanwhile go on the peer's next connection, if it opened one, or on a
    /// new one of ours.
    pub(super) fn maybe_closed(&mut self, peer: usize) {
        let vc = &self.vcs[peer];
        let done = vc.close.is_some_and(|c| c.shut)
            && vc.eof
            && vc.peer_goodbye.is_some()
            && !vc.decoder.has_data()
            && vc.direct.is_none();
        if !done {
            return;
        }
        self.connected.retain(|&p| p != peer);
        self.hot.retain(|&p| p != peer);
        let vc = &mut self.vcs[peer];
        if let Some(mut s) = vc.stream.take() {
            let _ = self.poll.registry().deregister(&mut s);
        }
        vc.close = None;
        vc.peer_goodbye = None;
        vc.eof = false;
        vc.head_sent = 0;
        // From Connected: no handshake to uncount (see `set_state`).
        vc.state = VcState::Idle;
        vc.sendq = std::mem::take(&mut vc.reopen);
        tracing::debug!(peer, "tcp: connection closed in order");
        if let Some(next) = vc.successor.take() {
            self.adopt(peer, next);
        } else if !self.vcs[peer].sendq.is_empty() {
            if let Err(e) = self.start_connect(peer) {
                self.fail(peer, e.to_string());
            }
        }
    }

    /// The connection to `peer` broke (`why`): it is closed, what was queued for it dropped,
    /// and sends to it fail from now on. Frames it sent that are already held are still
    /// delivered.
    pub(super) fn fail(&mut self, peer: usize, why: String) {
        tracing::warn!(peer, "tcp: connection failed: {why}");
        self.end_vc(peer, why, false);
    }

    /// Ends `peer`'s VC for good, with `why` as the error its sends report; `left` when the peer
    /// left the job in order.
    fn end_vc(&mut self, peer: usize, why: String, left: bool) {
        self.connected.retain(|&p| p != peer);
        self.hot.retain(|&p| p != peer);
        let vc = &mut self.vcs[peer];
        if let Some(mut s) = vc.stream.take() {
            let _ = self.poll.registry().deregister(&mut s);
        }
        vc.sendq.clear();
        vc.head_sent = 0;
        vc.direct = None;
        vc.close = None;
        vc.reopen.clear();
        vc.successor = None;
        self.set_state(peer, VcState::Failed(why, left));
    }

    /// `peer` finalized and left the job: its VC ends like a failed one (requests waiting on it
    /// fail, sends to it too), but that is no fault, so it is not reported as one.
    pub(super) fn peer_left(&mut self, peer: usize) {
        tracing::debug!(peer, "tcp: the peer left the job");
        self.end_vc(peer, format!("process {peer} left the job"), true);
    }
}

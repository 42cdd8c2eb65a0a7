//! The shared-memory transport: `AmTransport` + `Shm` over the segment's per-pair rings and
//! per-receiver cell queues.
//!
//! A send is one record written straight into the ring towards the receiver or, when that ring
//! is full or too small for it, into one of the sender's cells appended to the receiver's queue.
//! The receiver's poll hands records and cells to the AM engine *in place*, so a matched eager
//! message is copied once, from shared memory into the user's buffer. When neither path has
//! room the record waits in a local queue (a transport never blocks in a send) and later records
//! to that peer queue behind it.
//!
//! **Order across the two paths.** Every message of an ordered pair of ranks gets the next
//! number of that pair's sequence when it goes out; rings carry its low 8 bits, cells all 64.
//! The receiver keeps the number it expects from each sender and takes a ring record or a cell
//! only when it carries that number. Both directions of waiting resolve: a ring record tagged
//! ahead waits until the cells before it arrive (they were appended before it was written), and
//! a cell tagged ahead means the records before it are already in the sender's ring (written
//! before the cell was published, so visible once the cell is), which the receiver then drains
//! first. Eight bits suffice because what can overtake a ring record is the sender's cells in
//! flight, fewer than 256 (`MAX_CELLS_PER_RANK`).

use std::collections::VecDeque;
use std::sync::Arc;

use ch4_core::core::CTRL_HEADER_MAX;
use ch4_core::transport::{AmSink, AmTransport, HandlerId, PeerRead, PeerState, Shm};
use ch4_core::{Error, ErrorKind, Gpid, Result};

use crate::cells::{CellReceiver, CellSendError, CellSender, CELL_HEADER, MAX_CELLS_PER_RANK};
use crate::cma::{self, CmaConfig, ReadFailure, ReadWhen};
use crate::ring::{max_record_body, Consumer, Producer, PushError, MAX_CAPACITY};
use crate::segment::{coll_slots, Geometry, Segment, COLL_OUTBOX, COLL_SLOTS};

/// `local_of` entry of a process on another node.
const NOT_LOCAL: u32 = u32::MAX;

/// Default size of a rendezvous data piece (`CH4_SHM_PIECE_SIZE` overrides it).
const DEFAULT_PIECE: usize = 64 << 10;

/// A record that found its ring full: the active-message header followed by the payload.
struct Waiting {
    handler: HandlerId,
    header_len: usize,
    record: Vec<u8>,
}

/// Record buffers kept for reuse at most, and the largest kept: a window of eager messages that
/// overflows a ring should not cost an allocation each — for records of tens of KiB, fresh
/// pages from the kernel, since the allocator returns freed ones (measured: osu_bibw at 32 KiB
/// went from 1.5-2.3 to 6.2-6.7 GB/s).
const SPARE_RECORDS: usize = 256;
const SPARE_RECORD_MAX: usize = 128 << 10;

/// Tunables, from the environment or the defaults.
#[derive(Debug, Clone, Copy)]
pub struct ShmConfig {
    /// Messages up to this size go eagerly (one record); longer ones by rendezvous.
    pub eager_limit: usize,
    /// Bytes per ring (a power of two); a record may use half.
    pub ring_capacity: usize,
    /// Bytes per cell, its 64-byte header included.
    pub cell_size: usize,
    /// Cells each local rank owns.
    pub cells_per_rank: usize,
}

impl ShmConfig {
    /// Defaults scaled to the number of local ranks (the segment holds `ranks²` rings and
    /// `ranks * cells_per_rank` cells), overridden by `CH4_SHM_EAGER_LIMIT`, `CH4_SHM_RING_SIZE`,
    /// `CH4_SHM_CELL_SIZE` (bytes) and `CH4_SHM_CELLS` (per rank); a value that does not parse
    /// or is out of range is an error. The rendezvous piece size is `CH4_SHM_PIECE_SIZE`
    /// (default 64 KiB), read by [`ShmTransport::new`].
    pub fn for_ranks(ranks: usize) -> Result<ShmConfig> {
        ShmConfig::for_node(ranks, 1)
    }

    /// [`ShmConfig::for_ranks`] for one of `vcis` segments of a node whose ranks each have
    /// `vcis` VCIs (a segment per VCI): the node's ring budget and each rank's default cells
    /// are shared among the VCIs, so that many VCIs do not multiply the node's memory. For 64
    /// ranks: one VCI takes 64 MiB of rings (16 KiB each) and 32 MiB of cells, 96 MiB in all;
    /// eight take 8 × (16 MiB of rings at the 4 KiB floor, 4 MiB of cells, 4 a rank), 160 MiB.
    /// Each segment adds its collective lanes, about 1 MiB (`segment::coll_slots`).
    /// A node of a few ranks keeps 1 MiB rings whatever the VCIs.
    pub fn for_node(ranks: usize, vcis: usize) -> Result<ShmConfig> {
        use ch4_core::env;
        let vcis = vcis.max(1);
        // Ring bytes per node: 1 MiB rings up to 8 ranks, shrinking to 4 KiB ones (a few small
        // messages per pair, like Nemesis's fastboxes) at 128 ranks and beyond, where the cells
        // carry the rest.
        let budget = (64usize << 20) / vcis;
        let per_pair = (budget / (ranks * ranks).max(1)).clamp(4 << 10, 1 << 20);
        let ring_capacity = match env::bytes("CH4_SHM_RING_SIZE")? {
            Some(c) if c.is_power_of_two() && (4096..=MAX_CAPACITY).contains(&c) => c,
            Some(c) => {
                return Err(env::bad(
                    "CH4_SHM_RING_SIZE",
                    &c.to_string(),
                    &format!("a power of two from 4096 to {MAX_CAPACITY}"),
                ))
            }
            None => per_pair.next_power_of_two().min(1 << 20),
        };
        let cell_size = match env::bytes("CH4_SHM_CELL_SIZE")? {
            Some(c) if (2 * CELL_HEADER..=1 << 20).contains(&c) => c.div_ceil(64) * 64,
            Some(c) => {
                return Err(env::bad(
                    "CH4_SHM_CELL_SIZE",
                    &c.to_string(),
                    &format!("a number of bytes from {} to 1M", 2 * CELL_HEADER),
                ))
            }
            None => Geometry::DEFAULT_CELL_SIZE,
        };
        let cells_per_rank = match env::bytes("CH4_SHM_CELLS")? {
            Some(c) if (1..=MAX_CELLS_PER_RANK).contains(&c) => c,
            Some(c) => {
                return Err(env::bad(
                    "CH4_SHM_CELLS",
                    &c.to_string(),
                    &format!("a count from 1 to {MAX_CELLS_PER_RANK}"),
                ))
            }
            None => (Geometry::DEFAULT_CELLS / vcis).max(4),
        };
        let record_max = max_record_body(ring_capacity).max(cell_size - CELL_HEADER);
        // 32 KiB, by measurement on this project's host (osu_latency / osu_bw sweeping
        // CH4_SHM_EAGER_LIMIT over 4-64 KiB): eager beats rendezvous in latency at every size up
        // to 64 KiB (32 KiB: 5.7-6.6 µs eager vs 6.4-8.5 µs rendezvous) with bandwidth within
        // noise; 32 rather than 64 KiB bounds what an early-arriving message costs to buffer.
        let eager_default = (32usize << 10).min(record_max - CTRL_HEADER_MAX);
        let eager_limit = env::bytes("CH4_SHM_EAGER_LIMIT")?
            .unwrap_or(eager_default)
            .min(record_max - CTRL_HEADER_MAX);
        Ok(ShmConfig {
            eager_limit,
            ring_capacity,
            cell_size,
            cells_per_rank,
        })
    }

    /// The segment geometry this configuration asks for.
    pub fn geometry(&self) -> Geometry {
        Geometry {
            ring_capacity: self.ring_capacity,
            cell_size: self.cell_size,
            cells_per_rank: self.cells_per_rank,
        }
    }
}

/// The shared-memory transport of one rank.
pub struct ShmTransport {
    seg: Arc<Segment>,
    me: usize,
    /// Local index of each process id (`None` = not on this node).
    local_of: Vec<u32>,
    /// Process id of each local index.
    gpid_of: Vec<Gpid>,
    producers: Vec<Producer>,
    consumers: Vec<Consumer>,
    cell_tx: CellSender,
    cell_rx: CellReceiver,
    /// Messages this rank has sent through cells (the rest went by ring).
    cell_sends: u64,
    waiting: Vec<VecDeque<Waiting>>,
    waiting_total: usize,
    /// Buffers of flushed waiting records, for the next ones.
    spare_records: Vec<Vec<u8>>,
    next_poll: usize,
    eager_limit: usize,
    max_payload: usize,
    /// The largest record the rings take (`set_ring_record_max`).
    ring_record_max: usize,
    /// Single-copy reads for large messages (LMT Get through CMA).
    cma: CmaConfig,
    /// More ranks than CPUs on this host (set by the facade at start-up; see `ReadWhen`).
    host_crowded: bool,
    /// When this rank last moved off a CPU it shared with its peer (`Shm::move_off_cpu`).
    last_move: Option<std::time::Instant>,
    /// Collective slots a communicator of this process has used (bit per slot).
    coll_used: u64,
    /// Collective slots offered by an agreement still under way.
    coll_held: u64,
}

impl ShmTransport {
    /// The transport of local rank `me` in `seg`, where `local_gpids[i]` is the process id of
    /// local rank `i` and `world_size` the number of processes in the job. `pid` is this
    /// process's id, or 0 when ranks are threads.
    pub fn new(
        seg: Arc<Segment>,
        me: usize,
        local_gpids: &[Gpid],
        world_size: u32,
        eager_limit: usize,
        pid: u32,
    ) -> Result<ShmTransport> {
        let n = seg.ranks();
        if local_gpids.len() != n || me >= n {
            return Err(Error::new(
                ErrorKind::Arg,
                format!(
                    "local rank {me} of {} with a segment for {n}",
                    local_gpids.len()
                ),
            ));
        }
        let mut local_of = vec![NOT_LOCAL; world_size as usize];
        for (i, &g) in local_gpids.iter().enumerate() {
            let slot = local_of.get_mut(g as usize).ok_or_else(|| {
                Error::new(
                    ErrorKind::Arg,
                    format!("process {g} outside a job of {world_size}"),
                )
            })?;
            *slot = i as u32;
        }
        let producers = (0..n)
            .map(|to| seg.producer(me, to))
            .collect::<Result<Vec<_>>>()?;
        let consumers = (0..n)
            .map(|from| seg.consumer(from, me))
            .collect::<Result<Vec<_>>>()?;
        // Rendezvous data moves in pieces: small enough that copying into the ring and out of
        // it overlap (a pipeline several pieces deep), large enough to amortize each record.
        // Measured with osu_latency on this project's 2-core host: 64 KiB pieces take a 1 MiB
        // message from 231 µs (512 KiB pieces) to 135 µs; 32-128 KiB are all close.
        let max_payload = ch4_core::env::bytes("CH4_SHM_PIECE_SIZE")?
            .unwrap_or(DEFAULT_PIECE)
            .max(1);
        let cma = CmaConfig::from_env()?;
        let ring_record_max = ch4_core::env::bytes("CH4_SHM_RING_RECORD_MAX")?;
        seg.set_alive(me, pid, true);
        if let Some(cpu) = current_cpu() {
            seg.publish_cpu(me, cpu);
        }
        let mut t = ShmTransport {
            me,
            local_of,
            gpid_of: local_gpids.to_vec(),
            producers,
            consumers,
            cell_tx: seg.cell_sender(me)?,
            cell_rx: seg.cell_receiver(me)?,
            cell_sends: 0,
            waiting: (0..n).map(|_| VecDeque::new()).collect(),
            waiting_total: 0,
            spare_records: Vec::new(),
            next_poll: 0,
            eager_limit: eager_limit.min(max_payload),
            max_payload,
            ring_record_max: usize::MAX,
            cma,
            host_crowded: false,
            last_move: None,
            coll_used: 0,
            coll_held: 0,
            seg,
        };
        t.set_ring_record_max(ring_record_max.unwrap_or(usize::MAX));
        Ok(t)
    }

    /// Sends only records of up to `bytes` (active-message header and payload) through the
    /// per-pair rings, the rest through cells: on a crowded node the rings then act as small
    /// per-pair fast paths for the smallest messages (Nemesis's fastboxes). Payload and eager
    /// limits shrink if the largest record no longer fits anywhere.
    pub fn set_ring_record_max(&mut self, bytes: usize) {
        for p in &mut self.producers {
            p.limit_record(bytes);
        }
        let g = self.seg.geometry();
        let ring = max_record_body(g.ring_capacity).min(bytes);
        self.ring_record_max = ring;
        // A cell holds at least 64 bytes (the geometry's minimum): every control record fits.
        let record_max = ring.max(g.cell_size - CELL_HEADER);
        self.limit_payload(record_max - CTRL_HEADER_MAX);
    }

    /// Lowers the largest active-message payload (rendezvous data then moves in smaller
    /// pieces); tests use it to exercise chunking with small messages.
    pub fn limit_payload(&mut self, max_payload: usize) {
        self.max_payload = self.max_payload.min(max_payload.max(1));
        self.eager_limit = self.eager_limit.min(self.max_payload);
    }

    /// Turns single-copy reads (CMA) on or off for this rank, whatever the environment says:
    /// on means by the size rules however many ranks share the CPUs (`CH4_SHM_CMA=on`).
    pub fn set_cma(&mut self, enabled: bool) {
        self.cma.enabled = enabled && cfg!(target_os = "linux");
        self.cma.read_when = ReadWhen::Always;
    }

    /// Tells the transport whether this host has more ranks than CPUs; under
    /// `CH4_SHM_CMA=auto` only then are offered buffers read rather than streamed
    /// ([`ReadWhen::Crowded`]).
    pub fn set_host_crowded(&mut self, crowded: bool) {
        self.host_crowded = crowded;
    }

    /// Whether this rank currently offers and performs single-copy reads.
    pub fn cma_enabled(&self) -> bool {
        self.cma.enabled
    }

    /// How many messages this rank has sent through cells rather than rings: a crowded node's
    /// small rings overflow into them, a large node's rarely do.
    pub fn cell_sends(&self) -> u64 {
        self.cell_sends
    }

    /// The segment this transport uses.
    pub fn segment(&self) -> &Arc<Segment> {
        &self.seg
    }

    #[inline(always)]
    fn local(&self, gpid: Gpid) -> Option<usize> {
        match self.local_of.get(gpid as usize) {
            Some(&l) if l != NOT_LOCAL => Some(l as usize),
            _ => None,
        }
    }

    /// Moves waiting records into rings or cells while there is room.
    #[cold]
    fn flush_waiting(&mut self) -> Result<usize> {
        let mut moved = 0;
        for to in 0..self.waiting.len() {
            while let Some(w) = self.waiting[to].pop_front() {
                let (header, payload) = w.record.split_at(w.header_len);
                if !self.try_send(to, w.handler, header, &[payload])? {
                    self.waiting[to].push_front(w);
                    break;
                }
                if self.spare_records.len() < SPARE_RECORDS
                    && w.record.capacity() <= SPARE_RECORD_MAX
                {
                    self.spare_records.push(w.record);
                }
                moved += 1;
            }
        }
        self.waiting_total -= moved;
        Ok(moved)
    }

    /// Sends one record to local rank `to` by its ring or else a cell, numbering it in the
    /// pair's sequence; `false` when neither has room now.
    #[inline(always)]
    fn try_send(
        &mut self,
        to: usize,
        handler: HandlerId,
        header: &[u8],
        payload: &[&[u8]],
    ) -> Result<bool> {
        match self.producers[to].push(handler, header, payload) {
            Ok(()) => Ok(true),
            Err(full_or_large) => self.try_send_cell(to, handler, header, payload, full_or_large),
        }
    }

    /// The cell half of [`ShmTransport::try_send`]: out of line, so the ring path stays short.
    #[inline(never)]
    fn try_send_cell(
        &mut self,
        to: usize,
        handler: HandlerId,
        header: &[u8],
        payload: &[&[u8]],
        ring: PushError,
    ) -> Result<bool> {
        let seq = self.producers[to].next_seq();
        match self.cell_tx.send(to, seq, handler, header, payload) {
            Ok(()) => {
                self.producers[to].take_seq();
                self.cell_sends += 1;
                Ok(true)
            }
            Err(CellSendError::NoFreeCell) => Ok(false),
            Err(CellSendError::TooLarge) if ring == PushError::Full => Ok(false),
            Err(CellSendError::TooLarge) => Err(Error::new(
                ErrorKind::Count,
                format!(
                    "active message of {} bytes exceeds both the ring's record limit and the \
                     cell size",
                    header.len() + payload.iter().map(|p| p.len()).sum::<usize>()
                ),
            )),
            Err(CellSendError::Corrupt) => Err(Error::new(
                ErrorKind::Transport,
                format!("the cell queue of local rank {to} is corrupted"),
            )),
        }
    }

    /// Delivers what the cell queue holds. A cell numbered ahead of what its sender's ring has
    /// delivered means the records before it are in that ring: they go first.
    #[inline(always)]
    fn poll_cells<K: AmSink>(&mut self, sink: &mut K, budget: usize) -> Result<usize> {
        let mut delivered = 0;
        while delivered < budget {
            let front = match self.cell_rx.front() {
                None => break,
                Some(Ok(f)) => f,
                Some(Err(_)) => {
                    return Err(Error::new(
                        ErrorKind::Transport,
                        "this rank's cell queue is corrupted",
                    ))
                }
            };
            let from = front.from;
            let src = self.gpid_of[from];
            let ring = &mut self.consumers[from];
            while ring.expected_seq() != front.seq {
                let expect = ring.expected_seq();
                let popped = if front.seq > expect {
                    ring.pop_with(|h, hdr, payload| sink.deliver(src, h, hdr, payload))
                } else {
                    None
                };
                match popped {
                    Some(Ok(r)) => {
                        delivered += 1;
                        r?;
                        if !sink.wants_more() {
                            return Ok(delivered);
                        }
                    }
                    _ => {
                        return Err(Error::new(
                            ErrorKind::Transport,
                            format!(
                                "message {} from process {src} arrived by cell, but message \
                                 {expect} is in neither its ring nor the queue: shared memory \
                                 is corrupted",
                                front.seq
                            ),
                        ))
                    }
                }
            }
            match self
                .cell_rx
                .pop_with(|h, hdr, payload| sink.deliver(src, h, hdr, payload))
            {
                Some(Ok(r)) => {
                    ring.skip_seq();
                    delivered += 1;
                    r?;
                    if !sink.wants_more() {
                        break;
                    }
                }
                _ => {
                    return Err(Error::new(
                        ErrorKind::Transport,
                        "this rank's cell queue is corrupted",
                    ))
                }
            }
        }
        Ok(delivered)
    }
}

impl AmTransport for ShmTransport {
    const AM_ORDERED: bool = true;
    const NAME: &'static str = "shm";

    #[inline(always)]
    fn eager_limit(&self) -> usize {
        self.eager_limit
    }

    #[inline(always)]
    fn am_max_payload(&self) -> usize {
        self.max_payload
    }

    #[inline(always)]
    fn am_send(
        &mut self,
        dest: Gpid,
        handler: HandlerId,
        header: &[u8],
        payload: &[&[u8]],
    ) -> Result<()> {
        let Some(to) = self.local(dest) else {
            return Err(Error::new(
                ErrorKind::Internal,
                format!("process {dest} is not on this node"),
            ));
        };
        // `waiting_total` first: one field, where `waiting[to]` is a bounds-checked lookup.
        if (self.waiting_total == 0 || self.waiting[to].is_empty())
            && self.try_send(to, handler, header, payload)?
        {
            return Ok(());
        }
        // Probing liveness costs a syscall: do it when records start to queue for this peer
        // and then every 64th one, not on every send into a full ring.
        if self.waiting[to].len() % 64 == 0 && self.seg.is_gone(to) {
            return Err(Error::new(
                ErrorKind::PeerFailed,
                format!("process {dest} has exited"),
            ));
        }
        let mut record = self.spare_records.pop().unwrap_or_default();
        record.clear();
        record.extend_from_slice(header);
        for p in payload {
            record.extend_from_slice(p);
        }
        self.waiting[to].push_back(Waiting {
            handler,
            header_len: header.len(),
            record,
        });
        self.waiting_total += 1;
        Ok(())
    }

    #[inline]
    fn am_poll<K: AmSink>(&mut self, sink: &mut K, budget: usize) -> Result<usize> {
        if self.waiting_total != 0 {
            self.flush_waiting()?;
        }
        let mut delivered = 0;
        let n = self.consumers.len();
        let mut idle_rings = 0;
        let mut i = self.next_poll;
        while delivered < budget && idle_rings < n {
            let src = self.gpid_of[i];
            match self.consumers[i].pop_with(|h, hdr, payload| sink.deliver(src, h, hdr, payload)) {
                None => idle_rings += 1,
                Some(Ok(r)) => {
                    delivered += 1;
                    idle_rings = 0;
                    r?;
                    if !sink.wants_more() {
                        break;
                    }
                    continue; // drain this ring first: keeps a sender's burst together
                }
                Some(Err(_)) => {
                    return Err(Error::new(
                        ErrorKind::Transport,
                        format!("the shared ring from process {src} is corrupted"),
                    ))
                }
            }
            i = if i + 1 == n { 0 } else { i + 1 };
        }
        self.next_poll = i;
        if delivered < budget && sink.wants_more() && !self.cell_rx.looks_empty() {
            delivered += self.poll_cells(sink, budget - delivered)?;
        }
        Ok(delivered)
    }

    fn settings(&self) -> Vec<(&'static str, String)> {
        let g = self.seg.geometry();
        let cma = match (self.cma.enabled, self.cma.read_when) {
            (false, _) => "off".to_string(),
            (true, ReadWhen::Always) => "on".to_string(),
            (true, ReadWhen::Crowded) => format!(
                "auto: {} (the host has {} ranks than CPUs)",
                if self.host_crowded { "read" } else { "stream" },
                if self.host_crowded { "more" } else { "no more" }
            ),
        };
        vec![
            ("CH4_SHM_EAGER_LIMIT", self.eager_limit.to_string()),
            ("CH4_SHM_RING_SIZE", g.ring_capacity.to_string()),
            ("CH4_SHM_RING_RECORD_MAX", self.ring_record_max.to_string()),
            ("CH4_SHM_CELL_SIZE", g.cell_size.to_string()),
            ("CH4_SHM_CELLS", g.cells_per_rank.to_string()),
            ("CH4_SHM_PIECE_SIZE", self.max_payload.to_string()),
            ("CH4_SHM_CMA", cma),
            ("CH4_SHM_CMA_THRESHOLD", self.cma.threshold.to_string()),
            ("CH4_SHM_CMA_MAX", self.cma.max.to_string()),
        ]
    }

    fn peer_state(&self, gpid: Gpid) -> PeerState {
        match self.local(gpid) {
            Some(l) if l != self.me => self.seg.peer_state(l),
            _ => PeerState::Alive,
        }
    }

    /// Leaving the job in order: peers learn that this rank left rather than failed.
    fn close_connections(&mut self) {
        self.seg.mark_left(self.me);
    }

    fn arm_wakeup(
        &mut self,
        _out: &mut Vec<ch4_core::transport::WaitFd>,
    ) -> ch4_core::transport::Arm {
        // The rings are polled: a sleeper cannot wait on them. With no other rank on the node
        // nothing arrives here but what this rank's own calls put in.
        if self.seg.ranks() <= 1 {
            ch4_core::transport::Arm::Armed
        } else {
            ch4_core::transport::Arm::Unable
        }
    }

    fn has_queued_output(&self) -> bool {
        self.waiting_total != 0
            && self
                .waiting
                .iter()
                .enumerate()
                .any(|(to, q)| !q.is_empty() && (to == self.me || !self.seg.is_gone(to)))
    }

    #[inline(always)]
    fn offers_peer_read(&self, _dest: Gpid, bytes: usize) -> bool {
        // Every rendezvous message: the receiver chooses (`read_pays`).
        self.cma.enabled && bytes >= self.cma.threshold
    }

    #[inline(always)]
    fn read_pays(&self, bytes: usize, both_ways: bool) -> bool {
        self.cma.enabled
            && (self.host_crowded || self.cma.read_when == ReadWhen::Always)
            && bytes >= self.cma.threshold
            && if both_ways {
                bytes >= cma::BOTH_WAYS_MIN
            } else {
                bytes <= self.cma.max
            }
    }

    fn read_peer(&mut self, src: Gpid, addr: u64, into: &mut [u8]) -> Result<PeerRead> {
        let Some(from) = self.local(src) else {
            return Ok(PeerRead::Unavailable);
        };
        if !self.cma.enabled {
            return Ok(PeerRead::Unavailable);
        }
        // Ranks that are threads share our process: they record pid 0.
        let pid = match self.seg.pid(from) {
            0 => std::process::id(),
            p => p,
        };
        match cma::read(pid, addr, into) {
            Ok(()) => Ok(PeerRead::Copied),
            Err(ReadFailure::Forbidden) => {
                tracing::info!(
                    src,
                    "the kernel refuses cross-memory reads (ptrace restrictions): large \
                     messages are streamed through the rings from now on"
                );
                self.cma.enabled = false;
                Ok(PeerRead::Unavailable)
            }
            Err(ReadFailure::Gone) => Err(cma::gone(pid)),
            Err(ReadFailure::Failed) => {
                tracing::warn!(src, addr, "cross-memory read failed; streaming instead");
                Ok(PeerRead::Unavailable)
            }
        }
    }

    #[inline]
    fn can_send_now(&mut self, dest: Gpid, bytes: usize) -> bool {
        match self.local(dest) {
            Some(to) => {
                self.waiting[to].is_empty()
                    && (self.producers[to].has_room(bytes)
                        || (bytes <= self.cell_tx.max_body() && self.cell_tx.has_free_cell()))
            }
            None => true,
        }
    }
}

impl Shm for ShmTransport {
    type P2p = am_fallback::Am;
    const COLL_OUTBOX: usize = COLL_OUTBOX;

    #[inline(always)]
    fn is_local(&self, gpid: Gpid) -> bool {
        self.local(gpid).is_some()
    }

    fn peer_shares_cpu(&mut self, peer: Option<Gpid>) -> bool {
        let Some(cpu) = current_cpu() else {
            return false;
        };
        // Said here, in the idle loop, so that a peer asking about this rank while it is
        // descheduled reads where it waits to run.
        self.seg.publish_cpu(self.me, cpu);
        // `next_poll` is the ring that last delivered: polling stops on it, and an idle poll
        // goes once round and ends where it began.
        let other = match peer {
            Some(gpid) => match self.local(gpid) {
                Some(l) => l,
                None => return false,
            },
            None => self.next_poll,
        };
        other != self.me && self.seg.cpu_of(other) == Some(cpu)
    }

    #[inline(always)]
    fn watch_for_arrival(&mut self, peer: Gpid, loads: usize) -> bool {
        match self.local(peer) {
            // Cells carry only records too large for a ring: looked at before and after.
            Some(l) => {
                !self.cell_rx.looks_empty()
                    || self.consumers[l].watch(loads)
                    || !self.cell_rx.looks_empty()
            }
            None => true,
        }
    }

    fn coll_local(&self, gpid: Gpid) -> Option<u32> {
        self.local(gpid)
            .filter(|_| self.seg.has_coll_lanes())
            .map(|l| l as u32)
    }

    fn coll_offer(&mut self) -> u64 {
        if !self.seg.has_coll_lanes() {
            return 0;
        }
        let slots = coll_slots(self.seg.ranks());
        let all = if slots >= 64 {
            u64::MAX
        } else {
            (1u64 << slots) - 1
        };
        let offer = all & !self.coll_used & !self.coll_held;
        self.coll_held |= offer;
        offer
    }

    fn coll_conclude(&mut self, offered: u64, taken: Option<u32>) {
        self.coll_held &= !offered;
        if let Some(slot) = taken.filter(|&s| (s as usize) < COLL_SLOTS) {
            self.coll_used |= 1 << slot;
        }
    }

    #[inline]
    fn coll_arrived(&self, slot: u32, local: u32) -> u64 {
        self.seg.lanes().arrived(slot as usize, local as usize)
    }

    #[inline]
    fn coll_arrive(&self, slot: u32, op: u64) {
        self.seg.lanes().arrive(slot as usize, self.me, op);
    }

    #[inline]
    fn coll_publish(&self, slot: u32, op: u64, data: &[u8]) {
        // SAFETY: `self.me` is this rank, the only writer of its lane; the protocol of
        // `ch4_core::node_coll` calls this only once every member has entered the operation
        // after the last one that read this outbox.
        unsafe { self.seg.lanes().publish(slot as usize, self.me, op, data) }
    }

    #[inline]
    fn coll_read<R>(&self, slot: u32, local: u32, op: u64, f: impl FnOnce(&[u8]) -> R) -> R {
        // SAFETY: the caller (`ch4_core::node_coll`) saw the owner's arrival at `op`, and
        // enters `op + 1`, after which the owner may write this outbox again, only after `f`
        // returns.
        unsafe { self.seg.lanes().read(slot as usize, local as usize, op, f) }
    }

    fn move_off_cpu(&mut self) -> bool {
        let now = std::time::Instant::now();
        if self
            .last_move
            .is_some_and(|t| now.duration_since(t) < MOVE_OFF_CPU_EVERY)
        {
            return false;
        }
        self.last_move = Some(now);
        let Some(cpu) = current_cpu() else {
            return false;
        };
        let Some(allowed) = affinity() else {
            return false;
        };
        // The allowed CPU, other than this one, where the fewest of the others last ran.
        let ranks_on = |c: usize| {
            (0..self.seg.ranks())
                .filter(|&l| l != self.me && self.seg.cpu_of(l) == Some(c as u32))
                .count()
        };
        let target = (0..libc::CPU_SETSIZE as usize)
            // SAFETY: `allowed` is an initialized cpu_set_t and `c` < CPU_SETSIZE.
            .filter(|&c| c != cpu as usize && unsafe { libc::CPU_ISSET(c, &allowed) })
            .min_by_key(|&c| ranks_on(c));
        let Some(target) = target else {
            return false;
        };
        // SAFETY: `only` is a zeroed cpu_set_t of this frame and `target` < CPU_SETSIZE; the
        // calls read the sets and change only the calling thread's affinity. The kernel moves
        // a running thread off a CPU its new set excludes before the first call returns; the
        // second gives back the set it had, which keeps it where it now is.
        let moved = unsafe {
            let mut only: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(target, &mut only);
            let size = std::mem::size_of::<libc::cpu_set_t>();
            let moved = libc::sched_setaffinity(0, size, &only) == 0;
            if libc::sched_setaffinity(0, size, &allowed) != 0 {
                tracing::warn!("could not give this thread its CPUs back after moving it");
            }
            moved
        };
        if moved {
            if let Some(now_on) = current_cpu() {
                self.seg.publish_cpu(self.me, now_on);
            }
        }
        moved
    }
}

/// How seldom a rank moves off a CPU it shares with its peer: moving costs a migration and
/// a cold cache, and a scheduler that keeps putting the two together should win.
const MOVE_OFF_CPU_EVERY: std::time::Duration = std::time::Duration::from_millis(10);

/// The CPUs the calling thread may run on (`None` if the kernel does not say).
fn affinity() -> Option<libc::cpu_set_t> {
    // SAFETY: `set` is a zeroed cpu_set_t of this frame, and sched_getaffinity writes at most
    // the size given into it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        (libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0)
            .then_some(set)
    }
}

/// The CPU the calling thread runs on now (`None` if the kernel does not say).
fn current_cpu() -> Option<u32> {
    // SAFETY: sched_getcpu takes no arguments and touches no memory of ours; glibc answers it
    // from the thread's rseq area or the vDSO, without a system call on current kernels.
    let cpu = unsafe { libc::sched_getcpu() };
    u32::try_from(cpu).ok()
}

impl Drop for ShmTransport {
    fn drop(&mut self) {
        self.seg.mark_gone(self.me);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    //! The failure tests that need the crate's private items (`Segment::set_alive`); the rest
    //! drive the transport from `shm/tests/transport.rs` with the test kit's `shm_job`, which
    //! cannot serve here: unit tests compile a second copy of this crate, and the kit names the
    //! first one's types.
    use super::*;
    use ch4_core::core::DeviceConfig;
    use ch4_core::{Device, NoNetmod, SendMode};
    use testkit::Harness;

    type Dev = Device<NoNetmod, ShmTransport>;

    /// Two ranks as threads over 16 KiB rings, eager limit 1 KiB (the kit's `shm_job`, built
    /// from this copy of the crate).
    fn pair() -> (Dev, Dev, Arc<Segment>) {
        let seg = Arc::new(Segment::anonymous(2, Geometry::with_ring(1 << 14)).unwrap());
        let h = Harness::build(2, DeviceConfig::default(), |me| {
            let mut t = ShmTransport::new(seg.clone(), me as usize, &[0, 1], 2, 1024, 0)?;
            // Reads by the size rules, as on a crowded host, so that they take part.
            t.set_cma(true);
            Ok((NoNetmod, t))
        })
        .unwrap();
        let (a, b) = h.into_pair();
        (a, b, seg)
    }

    /// Pins the calling thread to the CPU it runs on, so that `sched_getcpu` stays put; only
    /// this test's thread is pinned (affinity is per thread).
    fn pin_here() -> u32 {
        let cpu = current_cpu().expect("sched_getcpu works here");
        // SAFETY: `set` is a zeroed cpu_set_t owned by this frame; the calls read or write only
        // it and the calling thread's affinity.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu as usize, &mut set);
            assert_eq!(
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set),
                0
            );
        }
        cpu
    }

    #[test]
    fn a_peer_shares_the_cpu_only_where_it_last_said_it_ran() {
        let cpu = pin_here();
        let seg = Arc::new(Segment::anonymous(3, Geometry::with_ring(1 << 14)).unwrap());
        let mut t0 = ShmTransport::new(seg.clone(), 0, &[0, 1, 2], 3, 1024, 0).unwrap();
        assert_eq!(seg.cpu_of(2), None, "rank 2 has not attached");
        assert!(!t0.peer_shares_cpu(Some(2)));
        // A transport says where it runs when it is made.
        let _t1 = ShmTransport::new(seg.clone(), 1, &[0, 1, 2], 3, 1024, 0).unwrap();
        assert_eq!(seg.cpu_of(1), Some(cpu));
        assert!(t0.peer_shares_cpu(Some(1)));
        // Rank 1 moved away.
        seg.publish_cpu(1, cpu + 1);
        assert!(!t0.peer_shares_cpu(Some(1)));
        // Never itself, never a process off the node, and `None` (the last ring that
        // delivered) starts at rank 0's own.
        seg.publish_cpu(1, cpu);
        assert!(!t0.peer_shares_cpu(Some(0)));
        assert!(!t0.peer_shares_cpu(Some(7)));
        assert!(!t0.peer_shares_cpu(None));
    }

    #[test]
    fn a_rank_moves_off_its_cpu_keeping_its_allowed_cpus_and_not_again_at_once() {
        let before = affinity().unwrap();
        // SAFETY: `before` is an initialized cpu_set_t.
        let allowed = unsafe { libc::CPU_COUNT(&before) };
        let seg = Arc::new(Segment::anonymous(2, Geometry::with_ring(1 << 14)).unwrap());
        let mut t = ShmTransport::new(seg.clone(), 0, &[0, 1], 2, 1024, 0).unwrap();
        let was = current_cpu().unwrap();
        // Before the first move's own clock reading: what has passed since bounds what the
        // second call sees (a loaded host, or ThreadSanitizer, can take longer than the
        // window between the two calls; then the second may move again).
        let start = std::time::Instant::now();
        let moved = t.move_off_cpu();
        assert_eq!(
            moved,
            allowed > 1,
            "moves exactly when it may run elsewhere"
        );
        if moved {
            assert_ne!(seg.cpu_of(0), Some(was), "says where it went");
        }
        let after = affinity().unwrap();
        // SAFETY: both sets are initialized cpu_set_t values.
        let same = unsafe { libc::CPU_EQUAL(&before, &after) };
        assert!(same, "allowed CPUs unchanged");
        let again = t.move_off_cpu();
        if start.elapsed() < MOVE_OFF_CPU_EVERY {
            assert!(!again, "not twice within {MOVE_OFF_CPU_EVERY:?}");
        }
    }

    #[test]
    fn without_a_peer_named_the_last_sender_heard_from_is_asked_about() {
        let cpu = pin_here();
        let (mut a, mut b, seg) = pair();
        let w = b.world();
        a.send(a.world(), 1, 3, b"hi", SendMode::Standard).unwrap();
        let mut got = [0u8; 2];
        b.recv(w, 0, 3, &mut got).unwrap();
        assert_eq!(&got, b"hi");
        assert!(b.shm_mut().peer_shares_cpu(None));
        seg.publish_cpu(0, cpu + 1);
        assert!(!b.shm_mut().peer_shares_cpu(None));
        drop(a);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn offered_buffers_are_read_on_a_crowded_host_or_when_reads_are_on() {
        let seg = Arc::new(Segment::anonymous(2, Geometry::with_ring(1 << 14)).unwrap());
        let mut t = ShmTransport::new(seg, 0, &[0, 1], 2, 1024, 0).unwrap();
        t.cma = CmaConfig {
            enabled: true,
            read_when: ReadWhen::Crowded,
            threshold: 0,
            max: 256 << 10,
        };
        // A CPU for every rank: everything streams, lone or both ways.
        assert!(!t.read_pays(64 << 10, false));
        assert!(!t.read_pays(1 << 20, true));
        // More ranks than CPUs: the size rules decide.
        t.set_host_crowded(true);
        assert!(t.read_pays(64 << 10, false));
        assert!(t.read_pays(1 << 20, true));
        assert!(
            !t.read_pays(1 << 20, false),
            "a lone message past the cap streams"
        );
        assert!(!t.read_pays(256 << 10, true), "both ways only from 512 KiB");
        // Switched on: the size rules decide whatever the CPUs.
        t.set_host_crowded(false);
        t.set_cma(true);
        assert!(t.read_pays(64 << 10, false));
        t.set_cma(false);
        assert!(!t.read_pays(64 << 10, false));
    }

    #[test]
    fn a_sender_that_dies_before_its_buffer_is_read_fails_the_receive() {
        let (mut a, mut b, seg) = pair();
        let (wa, wb) = (a.world(), b.world());
        let msg = vec![1u8; 50_000];
        // SAFETY: `msg` outlives the request; the request is abandoned with the device below.
        let _s = a
            .isend(
                wa,
                1,
                0,
                unsafe { ch4_core::buffer::SendBuf::borrowed(&msg) },
                SendMode::Standard,
            )
            .unwrap();
        // The sender "was" a process that has now exited: its pid names nobody.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        child.wait().unwrap();
        seg.set_alive(0, child.id(), true);
        let mut got = vec![0u8; 50_000];
        let err = b.recv(wb, 0, 0, &mut got).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::PeerFailed);
        assert_eq!(b.live_requests(), 0);
    }

    #[test]
    fn a_dead_peer_process_fails_the_receive_instead_of_hanging() {
        let (mut a, b, seg) = pair();
        // Rank 1 is "a process" that then dies: record a real child's pid, kill and reap it.
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        seg.set_alive(1, child.id(), true);
        assert!(!a.shm().peer_failed(1));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(a.shm().peer_failed(1));
        let w = a.world();
        let mut buf = [0u8; 4];
        let err = a.recv(w, 1, 0, &mut buf).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::PeerFailed);
        assert_eq!(a.live_requests(), 0, "the failed receive was released");
        drop(b);
    }
}

#[cfg(test)]
mod node_memory {
    use super::ShmConfig;
    use crate::segment::segment_size;

    /// Bytes of /dev/shm a node of `ranks` ranks with `vcis` VCIs each takes.
    fn node_bytes(ranks: usize, vcis: usize) -> usize {
        let cfg = ShmConfig::for_node(ranks, vcis).unwrap();
        vcis * segment_size(ranks, cfg.geometry()).unwrap()
    }

    /// The figures `ShmConfig::for_node` states: VCIs share the node's budget, so 8 VCIs on 64
    /// ranks take well under twice what one does, not eight times.
    #[test]
    fn many_vcis_share_the_node_budget() {
        let one = node_bytes(64, 1);
        let eight = node_bytes(64, 8);
        let mib = |b: usize| b as f64 / (1 << 20) as f64;
        assert!((90.0..110.0).contains(&mib(one)), "{} MiB", mib(one));
        assert!((150.0..180.0).contains(&mib(eight)), "{} MiB", mib(eight));
        // A small node keeps its large rings whatever the VCIs.
        let cfg = ShmConfig::for_node(2, 4).unwrap();
        assert_eq!(cfg.ring_capacity, 1 << 20);
    }
}

//! The node's shared segment: a header, one liveness word per local rank, one cell queue and
//! `cells_per_rank` cells per local rank, and one ring per ordered pair of local ranks (self
//! included, so self-sends take the same paths).
//!
//! ```text
//! [ header | alive[n] | pid[n] | cell queues[n] (256 B each) | ring indices[n*n] (256 B each)
//!   | ring data[n*n] (ring capacity each) | cells[n*cells_per_rank] (cell size each)
//!   | collective lanes[coll_slots(n)*n] (COLL_LANE each, only up to COLL_MAX_RANKS ranks) ]
//! ```
//!
//! Every position is an offset computed from `n` and the [`Geometry`], identical in every
//! process, so nothing inside the segment is a pointer. For processes the segment is a file in
//! /dev/shm created by the node's first rank — under a random name, exclusively, mode 0600
//! ([`Segment::create_unique`]) — and unlinked by the last local rank to map it
//! ([`Segment::attach`], which maps only a file of this user's open to no one else); for ranks
//! as threads it is anonymous memory.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use ch4_core::{Error, ErrorKind, PeerState, Result};
use memmap2::{MmapMut, MmapOptions};

use crate::cells::{CellQueue, CellReceiver, CellSender, CELL_HEADER, MAX_CELLS_PER_RANK};
use crate::lanes::Lanes;
use crate::ring::{Consumer, Producer, RingIndices, MAX_CAPACITY};
use crate::sync::{AtomicU64, Bytes, Ordering};

const MAGIC: u64 = 0x6368_345f_7368_6d34; // "ch4_shm4"
const HEADER: usize = 4096;
const INDICES: usize = 256;
const QUEUE: usize = 256;
/// Values of a rank's liveness word: attached and running; gone without leaving in order;
/// left in order (finalized). 0 means not attached yet.
const ALIVE: u64 = 1;
const FAILED: u64 = 2;
const LEFT: u64 = 3;
const _: () = assert!(std::mem::size_of::<RingIndices>() <= INDICES);
const _: () = assert!(std::mem::size_of::<CellQueue>() <= QUEUE);

/// Collective slots in a segment at most: communicators that run their small collectives
/// through the segment at once, each on a slot of its own ([`crate::transport`] hands them
/// out). Fewer on large nodes: see [`coll_slots`].
pub const COLL_SLOTS: usize = 32;
/// Bytes of each outbox: the largest broadcast or contribution to a reduction that goes
/// through the segment (two outboxes per lane, one for odd and one for even operations).
pub const COLL_OUTBOX: usize = 2048;
/// Nodes of up to this many ranks get collective lanes. Every member polls every other's
/// arrival word, which stops paying beyond a few dozen ranks (MPICH's `release_gather` uses
/// a tree of flags there); larger nodes keep the point-to-point collectives.
pub const COLL_MAX_RANKS: usize = 64;
/// One lane: an arrival word on a 128-byte line of its own (two cache lines, as the adjacent
/// line prefetcher fetches pairs), then the two outboxes.
const COLL_LANE: usize = Lanes::lane_size(COLL_OUTBOX);
/// Bytes of lanes a segment aims at: every VCI has a segment, so the lanes of a large node
/// count eight times over where ranks have eight VCIs.
const COLL_BUDGET: usize = 1 << 20;

/// Collective slots of a segment for `ranks` local ranks: as many as [`COLL_BUDGET`] holds, 4
/// to [`COLL_SLOTS`] (32 up to 7 ranks, 15 at 16, 4 at 64); none beyond [`COLL_MAX_RANKS`].
pub fn coll_slots(ranks: usize) -> usize {
    if ranks == 0 || ranks > COLL_MAX_RANKS {
        0
    } else {
        (COLL_BUDGET / (ranks * COLL_LANE)).clamp(4, COLL_SLOTS)
    }
}

/// Bytes of the collective lanes of a segment for `ranks` local ranks.
fn coll_area_size(ranks: usize) -> usize {
    coll_slots(ranks) * ranks * COLL_LANE
}

/// The segment's fixed header.
#[repr(C)]
struct Header {
    magic: AtomicU64,
    ranks: AtomicU64,
    capacity: AtomicU64,
    /// How many local ranks have mapped the segment.
    attached: AtomicU64,
    cell_size: AtomicU64,
    cells_per_rank: AtomicU64,
}

/// The sizes a segment is made with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Bytes of each per-pair ring's data area: a power of two, 4 KiB ..= 16 MiB.
    pub ring_capacity: usize,
    /// Bytes of each cell, its 64-byte header included: a multiple of 64, 128 B ..= 1 MiB.
    pub cell_size: usize,
    /// Cells each local rank owns: 1 ..= 128.
    pub cells_per_rank: usize,
}

impl Geometry {
    /// Default cell size: 16 KiB carries every eager message and control record, and a
    /// rendezvous piece where rings are small, while 32 of them cost a rank 512 KiB.
    pub const DEFAULT_CELL_SIZE: usize = 16 << 10;
    /// Default cells per rank (Nemesis gives each process 64 cells of 64 KiB; ours are smaller
    /// because the per-pair rings take most traffic on small nodes).
    pub const DEFAULT_CELLS: usize = 32;

    /// Rings of `ring_capacity` bytes and the default cells.
    pub const fn with_ring(ring_capacity: usize) -> Geometry {
        Geometry {
            ring_capacity,
            cell_size: Geometry::DEFAULT_CELL_SIZE,
            cells_per_rank: Geometry::DEFAULT_CELLS,
        }
    }
}

/// A mapped node segment.
pub struct Segment {
    map: MmapMut,
    ranks: usize,
    geometry: Geometry,
    path: Option<PathBuf>,
    /// Whether this process created the file: its name goes when this segment does, attached
    /// to or not, so a rank whose start failed between creating and the others' attaching
    /// leaves nothing in /dev/shm.
    creator: bool,
}

// SAFETY: the mapping is shared memory whose concurrent use goes only through atomics and the
// SPSC ring protocol; `MmapMut` itself is Send + Sync, and the other fields are plain values.
unsafe impl Sync for Segment {}

/// Bytes before the cell queues: the header, then per rank a liveness word, a process id and
/// the CPU it last ran on, rounded to 16 ranks so that what follows stays 128-aligned.
fn queues_base(ranks: usize) -> usize {
    HEADER + 24 * ranks.div_ceil(16) * 16
}

/// The bytes a segment for `ranks` local ranks with geometry `g` needs.
pub fn segment_size(ranks: usize, g: Geometry) -> Result<usize> {
    let too_large = || Error::new(ErrorKind::Count, "segment too large");
    let pairs = ranks.checked_mul(ranks).ok_or_else(too_large)?;
    let rings = INDICES
        .checked_add(g.ring_capacity)
        .and_then(|per_pair| pairs.checked_mul(per_pair))
        .ok_or_else(too_large)?;
    let cells = ranks
        .checked_mul(g.cells_per_rank)
        .and_then(|c| c.checked_mul(g.cell_size))
        .ok_or_else(too_large)?;
    queues_base(ranks)
        .checked_add(ranks * QUEUE)
        .and_then(|s| s.checked_add(rings))
        .and_then(|s| s.checked_add(cells))
        .map(|s| s.next_multiple_of(128))
        .and_then(|s| s.checked_add(coll_area_size(ranks)))
        .ok_or_else(too_large)
}

fn check_params(ranks: usize, g: Geometry) -> Result<()> {
    if ranks == 0 || ranks > 4096 {
        return Err(Error::new(
            ErrorKind::Arg,
            format!("{ranks} local ranks (1..=4096 supported)"),
        ));
    }
    let capacity = g.ring_capacity;
    if !capacity.is_power_of_two() || !(4096..=MAX_CAPACITY).contains(&capacity) {
        return Err(Error::new(
            ErrorKind::Arg,
            format!("ring capacity {capacity} must be a power of two, 4 KiB to 16 MiB"),
        ));
    }
    if g.cell_size % 64 != 0 || !(2 * CELL_HEADER..=1 << 20).contains(&g.cell_size) {
        return Err(Error::new(
            ErrorKind::Arg,
            format!(
                "cell size {} must be a multiple of 64, 128 B to 1 MiB",
                g.cell_size
            ),
        ));
    }
    if !(1..=MAX_CELLS_PER_RANK).contains(&g.cells_per_rank) {
        return Err(Error::new(
            ErrorKind::Arg,
            format!(
                "{} cells per rank (1..={MAX_CELLS_PER_RANK} supported)",
                g.cells_per_rank
            ),
        ));
    }
    Ok(())
}

fn io_err(what: &str, path: &Path, e: std::io::Error) -> Error {
    Error::new(
        ErrorKind::Transport,
        format!("{what} {}: {e}", path.display()),
    )
}

/// Makes sure the memory of a new segment file exists, so that a full /dev/shm (Docker gives
/// containers 64 MiB by default) is a clear error at start-up and not a SIGBUS when a ring first
/// touches a page that tmpfs cannot supply. Segments that are populated anyway get their pages
/// now (`posix_fallocate`); larger ones, which fault in lazily, must at least fit in the free
/// space.
fn reserve(file: &File, size: usize, path: &Path) -> Result<()> {
    if size <= POPULATE_MAX {
        let len = libc::off_t::try_from(size).unwrap_or(libc::off_t::MAX);
        // SAFETY: posix_fallocate on a descriptor we own, for the range [0, size); it touches
        // no memory of ours.
        let r = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) };
        return match r {
            0 => Ok(()),
            // Filesystems without fallocate: fall back to the free-space check.
            libc::EOPNOTSUPP | libc::EINVAL => check_free_space(file, size, path),
            errno => Err(no_room(
                path,
                size,
                std::io::Error::from_raw_os_error(errno),
            )),
        };
    }
    check_free_space(file, size, path)
}

/// Bytes free for us on the filesystem holding `file`; `None` when the kernel will not say.
fn free_bytes(file: &File) -> Option<u128> {
    // SAFETY: an all-zero statvfs is a valid value to be overwritten.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatvfs writes one statvfs into `st`, a valid, writable value of this frame.
    if unsafe { libc::fstatvfs(file.as_raw_fd(), &mut st) } != 0 {
        return None;
    }
    Some(u128::from(st.f_bavail) * u128::from(st.f_frsize))
}

fn check_free_space(file: &File, size: usize, path: &Path) -> Result<()> {
    let Some(free) = free_bytes(file) else {
        return Ok(()); // cannot tell; mapping will show
    };
    if free < size as u128 {
        return Err(no_room(
            path,
            size,
            std::io::Error::other(format!("{free} bytes free")),
        ));
    }
    Ok(())
}

fn no_room(path: &Path, size: usize, e: std::io::Error) -> Error {
    Error::new(
        ErrorKind::Exhausted,
        format!(
            "cannot reserve {size} bytes for the shared segment {} ({e}), even with the \
             smallest rings and cells: give {} more room (docker run --shm-size)",
            path.display(),
            path.parent()
                .map_or_else(|| "/dev/shm".into(), |p| p.display().to_string())
        ),
    )
}

/// The geometry to use for a new segment: `wanted`, made smaller until the segment takes at
/// most half of the filesystem's free space — first fewer cells per rank (down to 4), then
/// smaller rings (down to 4 KiB), then smaller cells (down to 1 KiB); if even that does not
/// fit, [`reserve`] reports it.
fn fitting_geometry(file: &File, ranks: usize, wanted: Geometry) -> Geometry {
    let Some(free) = free_bytes(file) else {
        return wanted;
    };
    let room = free / 2;
    let mut g = wanted;
    while segment_size(ranks, g).map_or(true, |size| size as u128 > room) {
        if g.cells_per_rank > 4 {
            g.cells_per_rank /= 2;
        } else if g.ring_capacity > 4096 {
            g.ring_capacity /= 2;
        } else if g.cell_size > 1024 {
            g.cell_size = (g.cell_size / 2).max(1024);
        } else {
            break;
        }
    }
    if g != wanted {
        tracing::warn!(
            ?wanted,
            chosen = ?g,
            "little room in the shared-memory filesystem: smaller rings and fewer cells"
        );
    }
    g
}

/// Segments up to this size are populated when mapped (see [`map_options`]).
const POPULATE_MAX: usize = 128 << 20;

/// How a segment is mapped. Up to [`POPULATE_MAX`] bytes the mapping is populated
/// (MAP_POPULATE): the rings' pages are faulted in at start-up rather than one by one on the
/// first lap of traffic, where each fault costs a message a microsecond or more. A larger
/// segment (hundreds of local ranks: the rings grow with their square) is left to fault in as
/// pairs actually talk, so pairs that never do cost no memory.
fn map_options(size: usize) -> MmapOptions {
    let mut o = MmapOptions::new();
    if size <= POPULATE_MAX {
        o.populate();
    }
    o
}

impl Segment {
    /// A segment in anonymous memory, for ranks that are threads of this process.
    pub fn anonymous(ranks: usize, geometry: Geometry) -> Result<Segment> {
        check_params(ranks, geometry)?;
        let size = segment_size(ranks, geometry)?;
        let map = map_options(size).len(size).map_anon().map_err(|e| {
            Error::new(
                ErrorKind::Exhausted,
                format!("anonymous map of {size} bytes: {e}"),
            )
        })?;
        let seg = Segment {
            map,
            ranks,
            geometry,
            path: None,
            creator: false,
        };
        seg.init_header();
        Ok(seg)
    }

    /// Creates the node's segment file (exclusively, mode 0600) and maps it. The caller makes it
    /// known to the other local ranks and calls [`Segment::unlink`] once they have attached.
    ///
    /// `geometry` is what is wanted; when the filesystem (a container's small /dev/shm) has less
    /// room than the segment needs, rings are made smaller, down to 4 KiB, so that the segment
    /// takes at most half the free space. [`Segment::geometry`] tells what was chosen, and
    /// [`Segment::attach`] learns it from the file.
    pub fn create(path: &Path, ranks: usize, geometry: Geometry) -> Result<Segment> {
        check_params(ranks, geometry)?;
        let file =
            Segment::create_file(path).map_err(|e| io_err("creating shared segment", path, e))?;
        Segment::create_in(file, path, ranks, geometry)
    }

    /// A new file at `path`, made exclusively (`O_EXCL`: never an existing file, nor through a
    /// symbolic link), readable and writable by this user only.
    fn create_file(path: &Path) -> std::io::Result<File> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
    }

    /// Sizes, reserves and maps the new segment file `file` at `path`; removes it on failure.
    fn create_in(file: File, path: &Path, ranks: usize, geometry: Geometry) -> Result<Segment> {
        let geometry = fitting_geometry(&file, ranks, geometry);
        let size = match segment_size(ranks, geometry) {
            Ok(size) => size,
            Err(e) => {
                let _ = std::fs::remove_file(path);
                return Err(e);
            }
        };
        let sized = file
            .set_len(size as u64)
            .map_err(|e| io_err("sizing shared segment", path, e))
            .and_then(|()| reserve(&file, size, path));
        if let Err(e) = sized {
            let _ = std::fs::remove_file(path);
            return Err(e);
        }
        let map = match Segment::map_file(&file, path, size) {
            Ok(map) => map,
            Err(e) => {
                let _ = std::fs::remove_file(path);
                return Err(e);
            }
        };
        let seg = Segment {
            map,
            ranks,
            geometry,
            path: Some(path.to_path_buf()),
            creator: true,
        };
        seg.init_header();
        Ok(seg)
    }

    /// [`Segment::create`] under a name no one can guess: `{prefix}-{n:016x}` with `n` from
    /// `random` (64 random bits). The file is made exclusively, so a name that exists already
    /// — a file another user made there, hoping a job would map it — is never opened: the next
    /// name is tried, up to [`Segment::NAME_TRIES`] in all. Returns the segment and the `n`
    /// of its name, which the other local ranks need to attach.
    pub fn create_unique(
        prefix: &Path,
        ranks: usize,
        geometry: Geometry,
        mut random: impl FnMut() -> Result<u64>,
    ) -> Result<(Segment, u64)> {
        check_params(ranks, geometry)?;
        let mut taken = Vec::new();
        for _ in 0..Segment::NAME_TRIES {
            let n = random()?;
            let path = Segment::unique_path(prefix, n);
            match Segment::create_file(&path) {
                Ok(file) => {
                    return Segment::create_in(file, &path, ranks, geometry).map(|s| (s, n))
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    taken.push(path.display().to_string());
                }
                Err(e) => return Err(io_err("creating shared segment", &path, e)),
            }
        }
        Err(Error::new(
            ErrorKind::Transport,
            format!(
                "every name tried for the shared segment exists already ({}): someone is \
                 making files under this job's names in {}",
                taken.join(", "),
                prefix
                    .parent()
                    .map_or_else(|| "/dev/shm".into(), |p| p.display().to_string())
            ),
        ))
    }

    /// Names [`Segment::create_unique`] tries before giving up: with 64 random bits a name,
    /// one already taken is someone's doing, never chance.
    pub const NAME_TRIES: usize = 4;

    /// The path of the segment named `n` under `prefix` (see [`Segment::create_unique`]).
    pub fn unique_path(prefix: &Path, n: u64) -> PathBuf {
        let mut name = prefix.as_os_str().to_owned();
        name.push(format!("-{n:016x}"));
        PathBuf::from(name)
    }

    /// Maps `size` bytes of a segment file at least that long (the callers have made or
    /// checked it so).
    fn map_file(file: &File, path: &Path, size: usize) -> Result<MmapMut> {
        // SAFETY: the file is this job's segment (created exclusively by its first local rank,
        // mode 0600) and at least `size` bytes long; every process maps it only through this
        // module, which accesses the memory through atomics and the ring and cell protocols,
        // at offsets checked against the segment's size.
        unsafe { map_options(size).map_mut(file) }
            .map_err(|e| io_err("mapping shared segment", path, e))
    }

    /// Maps a segment another local rank created, checking that it matches this job's layout;
    /// the geometry is the creator's choice, read from the file.
    pub fn attach(path: &Path, ranks: usize) -> Result<Segment> {
        check_params(ranks, Geometry::with_ring(4096))?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .map_err(|e| {
                if e.kind() == std::io::ErrorKind::NotFound {
                    Error::new(
                        ErrorKind::Transport,
                        format!(
                            "shared segment {} does not exist: the node's first rank could not \
                             create it (see its error)",
                            path.display()
                        ),
                    )
                } else {
                    io_err("opening shared segment", path, e)
                }
            })?;
        let meta = file
            .metadata()
            .map_err(|e| io_err("inspecting shared segment", path, e))?;
        let len = meta.len();
        let not_ours = |why: String| {
            Error::new(
                ErrorKind::Transport,
                format!(
                    "{} is not a ch4 segment for this job: {why}",
                    path.display()
                ),
            )
        };
        // Made by a rank of this job: by this user, readable by no one else. (The name is
        // random and made exclusively, so this holds unless something is badly wrong; mapping
        // another user's file would hand that user this job's messages.)
        {
            use std::os::unix::fs::MetadataExt;
            // SAFETY: geteuid has no preconditions and cannot fail.
            let me = unsafe { libc::geteuid() };
            if !meta.file_type().is_file() {
                return Err(not_ours("not a regular file".into()));
            }
            if meta.uid() != me {
                return Err(not_ours(format!(
                    "owned by user {}, not by this job's user {me}",
                    meta.uid()
                )));
            }
            if meta.mode() & 0o077 != 0 {
                return Err(not_ours(format!(
                    "mode {:o}: open to other users",
                    meta.mode() & 0o777
                )));
            }
        }
        if len < HEADER as u64 || len > usize::MAX as u64 {
            return Err(not_ours(format!("{len} bytes")));
        }
        let map = Segment::map_file(&file, path, len as usize)?;
        // SAFETY: the map has at least HEADER bytes and is page-aligned; `Header` is atomics,
        // valid for any bit pattern.
        let h = unsafe { &*(map.as_ptr() as *const Header) };
        if h.magic.load(Ordering::Acquire) != MAGIC {
            return Err(not_ours("wrong magic number".into()));
        }
        let field = |w: &AtomicU64| usize::try_from(w.load(Ordering::Relaxed)).unwrap_or(0);
        let geometry = Geometry {
            ring_capacity: field(&h.capacity),
            cell_size: field(&h.cell_size),
            cells_per_rank: field(&h.cells_per_rank),
        };
        if field(&h.ranks) != ranks {
            return Err(not_ours(format!(
                "made for {} local ranks, this job has {ranks}",
                field(&h.ranks)
            )));
        }
        check_params(ranks, geometry).map_err(|e| not_ours(e.to_string()))?;
        let size = segment_size(ranks, geometry)?;
        if len != size as u64 {
            return Err(not_ours(format!("{len} bytes, expected {size}")));
        }
        let seg = Segment {
            map,
            ranks,
            geometry,
            path: Some(path.to_path_buf()),
            creator: false,
        };
        let h = seg.header();
        let attached = h.attached.fetch_add(1, Ordering::AcqRel) + 1;
        if attached >= ranks as u64 {
            // The last local rank is in: no one needs the name any more, so it goes now, not
            // at the job's next barrier.
            seg.unlink()?;
        }
        Ok(seg)
    }

    /// Removes the segment's name; the memory stays mapped until every rank has exited, and
    /// nothing is left in /dev/shm even if a rank is later killed.
    pub fn unlink(&self) -> Result<()> {
        match &self.path {
            Some(p) => match std::fs::remove_file(p) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(io_err("unlinking shared segment", p, e)),
            },
            None => Ok(()),
        }
    }

    fn init_header(&self) {
        let h = self.header();
        h.ranks.store(self.ranks as u64, Ordering::Relaxed);
        h.capacity
            .store(self.geometry.ring_capacity as u64, Ordering::Relaxed);
        h.cell_size
            .store(self.geometry.cell_size as u64, Ordering::Relaxed);
        h.cells_per_rank
            .store(self.geometry.cells_per_rank as u64, Ordering::Relaxed);
        h.attached.store(1, Ordering::Relaxed);
        // Release: a rank that sees the magic also sees the fields above.
        h.magic.store(MAGIC, Ordering::Release);
    }

    fn header(&self) -> &Header {
        // SAFETY: the map is at least HEADER bytes, page-aligned, and `Header` is made of
        // atomics, valid for any bit pattern including the zeroes of a new mapping.
        unsafe { &*(self.map.as_ptr() as *const Header) }
    }

    /// Local ranks that have mapped the segment.
    pub fn attached(&self) -> u64 {
        self.header().attached.load(Ordering::Acquire)
    }

    /// Local ranks the segment was made for.
    pub fn ranks(&self) -> usize {
        self.ranks
    }

    /// Bytes of each ring's data area.
    pub fn ring_capacity(&self) -> usize {
        self.geometry.ring_capacity
    }

    /// The sizes this segment was made with.
    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    fn word(&self, offset: usize) -> &AtomicU64 {
        // SAFETY: callers pass offsets of 8-aligned words inside the liveness table or at the
        // start of a collective lane (128-aligned), both within the mapping (see
        // `segment_size`); an atomic is valid for any bit pattern.
        unsafe { &*(self.map.as_ptr().add(offset) as *const AtomicU64) }
    }

    fn alive_word(&self, local: usize) -> &AtomicU64 {
        self.word(HEADER + 8 * local)
    }

    fn pid_word(&self, local: usize) -> &AtomicU64 {
        self.word(HEADER + 8 * self.ranks + 8 * local)
    }

    fn cpu_word(&self, local: usize) -> &AtomicU64 {
        self.word(HEADER + 16 * self.ranks + 8 * local)
    }

    /// Records that local rank `local` runs on CPU `cpu`. Written only when it changed, so
    /// that a rank polling this in its idle loop does not keep taking the line from readers.
    pub(crate) fn publish_cpu(&self, local: usize, cpu: u32) {
        if local < self.ranks {
            let word = self.cpu_word(local);
            let value = u64::from(cpu) + 1;
            if word.load(Ordering::Relaxed) != value {
                word.store(value, Ordering::Relaxed);
            }
        }
    }

    /// The CPU local rank `local` last said it ran on (`None`: it has not said yet). Only a
    /// hint: the rank may have moved since.
    pub(crate) fn cpu_of(&self, local: usize) -> Option<u32> {
        if local >= self.ranks {
            return None;
        }
        match self.cpu_word(local).load(Ordering::Relaxed) {
            0 => None,
            v => u32::try_from(v - 1).ok(),
        }
    }

    /// Marks local rank `local` as alive, with its process id (0 for a thread).
    pub(crate) fn set_alive(&self, local: usize, pid: u32, alive: bool) {
        if local < self.ranks {
            self.pid_word(local)
                .store(u64::from(pid), Ordering::Relaxed);
            self.alive_word(local)
                .store(if alive { ALIVE } else { 0 }, Ordering::Release);
        }
    }

    /// The process id recorded for local rank `local` (0: a thread, or not attached yet).
    pub(crate) fn pid(&self, local: usize) -> u32 {
        if local >= self.ranks {
            return 0;
        }
        self.pid_word(local).load(Ordering::Relaxed) as u32
    }

    /// Whether local rank `local` is still in the job: it said it left or failed, or its
    /// process no longer exists (killed: it could say nothing).
    pub(crate) fn peer_state(&self, local: usize) -> PeerState {
        if local >= self.ranks {
            return PeerState::Failed;
        }
        match self.alive_word(local).load(Ordering::Acquire) {
            FAILED => return PeerState::Failed,
            LEFT => return PeerState::Left,
            _ => {}
        }
        let pid = self.pid_word(local).load(Ordering::Relaxed);
        if pid == 0 {
            return PeerState::Alive;
        }
        // SAFETY: kill with signal 0 only checks that the process exists; no signal is sent.
        let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
        if r != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
            PeerState::Failed
        } else {
            PeerState::Alive
        }
    }

    /// Whether local rank `local` has gone, in order or not.
    pub(crate) fn is_gone(&self, local: usize) -> bool {
        self.peer_state(local) != PeerState::Alive
    }

    /// Records that local rank `local` left the job in order (finalize).
    pub(crate) fn mark_left(&self, local: usize) {
        if local < self.ranks {
            self.alive_word(local).store(LEFT, Ordering::Release);
        }
    }

    /// Records that local rank `local` is gone without leaving in order (its transport was
    /// dropped before finalize: its thread failed or its program ended without finalizing). A
    /// rank that left in order stays so.
    pub(crate) fn mark_gone(&self, local: usize) {
        if local < self.ranks {
            let _ = self.alive_word(local).compare_exchange(
                ALIVE,
                FAILED,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
        }
    }

    fn rings_base(&self) -> usize {
        queues_base(self.ranks) + self.ranks * QUEUE
    }

    fn cells_base(&self) -> usize {
        self.rings_base() + self.ranks * self.ranks * (INDICES + self.geometry.ring_capacity)
    }

    fn coll_base(&self) -> usize {
        let g = self.geometry;
        (self.cells_base() + self.ranks * g.cells_per_rank * g.cell_size).next_multiple_of(128)
    }

    /// Whether the segment has collective lanes.
    pub fn has_coll_lanes(&self) -> bool {
        coll_area_size(self.ranks) != 0
    }

    /// The collective lanes (see `crate::lanes`): none on a segment without them.
    #[inline]
    pub(crate) fn lanes(&self) -> Lanes {
        let slots = if self.has_coll_lanes() {
            coll_slots(self.ranks)
        } else {
            0
        };
        // The lanes start 128-aligned within the mapping, and `segment_size` counted them.
        let ptr = self.map.as_ptr().wrapping_add(self.coll_base()) as *mut u8;
        Lanes::new(Bytes { ptr }, self.ranks, slots, COLL_OUTBOX)
    }

    /// Pointers to the cell queues and the cell area.
    fn cell_parts(&self) -> (*const CellQueue, *mut u8) {
        let base = self.map.as_ptr() as *mut u8;
        // SAFETY: both offsets are within the mapping by construction of `segment_size` (the
        // queues follow the liveness table, the cells the rings).
        unsafe {
            (
                base.add(queues_base(self.ranks)) as *const CellQueue,
                base.add(self.cells_base()),
            )
        }
    }

    /// The cell sender of local rank `me`. The caller must be that rank and create it once.
    pub(crate) fn cell_sender(&self, me: usize) -> Result<CellSender> {
        if me >= self.ranks {
            return Err(Error::new(ErrorKind::Internal, "rank index out of range"));
        }
        let (q, c) = self.cell_parts();
        let g = self.geometry;
        // SAFETY: the queues (`ranks` of them) and cells (`ranks * cells_per_rank` of
        // `cell_size`) lie in this mapping, which the transport keeps alive (it holds an
        // `Arc<Segment>`) as long as the sender; the cell area is 128-aligned (every region
        // before it is a multiple of 128 bytes) and the geometry was checked; one sender per rank.
        Ok(unsafe { CellSender::new(q, c, self.ranks, g.cells_per_rank, g.cell_size, me) })
    }

    /// The cell receiver of local rank `me`. The caller must be that rank and create it once.
    pub(crate) fn cell_receiver(&self, me: usize) -> Result<CellReceiver> {
        if me >= self.ranks {
            return Err(Error::new(ErrorKind::Internal, "rank index out of range"));
        }
        let (q, c) = self.cell_parts();
        let g = self.geometry;
        // SAFETY: as for `cell_sender`, with one receiver per rank.
        Ok(unsafe { CellReceiver::new(q, c, self.ranks, g.cells_per_rank, g.cell_size, me) })
    }

    /// Pointers to the ring carrying `from` → `to`.
    fn ring(&self, from: usize, to: usize) -> Result<(*const RingIndices, *mut u8)> {
        if from >= self.ranks || to >= self.ranks {
            return Err(Error::new(ErrorKind::Internal, "ring index out of range"));
        }
        let pair = from * self.ranks + to;
        let pairs = self.ranks * self.ranks;
        let indices = self.rings_base() + pair * INDICES;
        let data = self.rings_base() + pairs * INDICES + pair * self.geometry.ring_capacity;
        let base = self.map.as_ptr() as *mut u8;
        // SAFETY: both offsets are within the mapping by construction of `segment_size`
        // (pair < ranks², capacity per pair), so `add` stays in bounds.
        Ok(unsafe { (base.add(indices) as *const RingIndices, base.add(data)) })
    }

    /// The producer end of `from` → `to`. The caller must be local rank `from` and create it once.
    pub(crate) fn producer(&self, from: usize, to: usize) -> Result<Producer> {
        let (i, d) = self.ring(from, to)?;
        // SAFETY: the pointers lie in this mapping, which the transport keeps alive (it holds an
        // `Arc<Segment>`) as long as the end; offsets are 128/8-aligned; the capacity is a power
        // of two ≥ 4096; each local rank makes only its own producers, once.
        Ok(unsafe { Producer::new(i, d, self.geometry.ring_capacity) })
    }

    /// The consumer end of `from` → `to`. The caller must be local rank `to` and create it once.
    pub(crate) fn consumer(&self, from: usize, to: usize) -> Result<Consumer> {
        let (i, d) = self.ring(from, to)?;
        // SAFETY: as for `producer`, with each local rank making only its own consumers, once.
        Ok(unsafe { Consumer::new(i, d, self.geometry.ring_capacity) })
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // The creator's segment dropped means the job's start failed or the rank ends: no one
        // will attach any more. Unlinking twice is harmless.
        if self.path.is_some() && (self.creator || self.attached() >= self.ranks as u64) {
            let _ = self.unlink();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    /// A name prefix in /dev/shm (the tmpfs segments live on) of this test alone.
    fn prefix(test: &str) -> PathBuf {
        PathBuf::from(format!("/dev/shm/ch4-test-{}-{test}", std::process::id()))
    }

    fn small() -> Geometry {
        Geometry {
            ring_capacity: 4096,
            cell_size: 1024,
            cells_per_rank: 2,
        }
    }

    /// Numbers 1, 2, 3, ... for names that a test can squat on beforehand.
    fn counter() -> impl FnMut() -> Result<u64> {
        let mut n = 0;
        move || {
            n += 1;
            Ok(n)
        }
    }

    /// The segment file is this user's, mode 0600, and its name goes as soon as the last
    /// local rank has attached: the segment itself keeps working.
    #[test]
    fn a_segment_is_private_and_its_name_goes_once_every_rank_is_in() {
        let pre = prefix("private");
        let (made, n) = Segment::create_unique(&pre, 3, small(), counter()).unwrap();
        let path = Segment::unique_path(&pre, n);
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.mode() & 0o777, 0o600);
        // SAFETY: geteuid has no preconditions.
        assert_eq!(meta.uid(), unsafe { libc::geteuid() });
        let second = Segment::attach(&path, 3).unwrap();
        assert!(path.exists(), "two of three ranks in: the name stays");
        let third = Segment::attach(&path, 3).unwrap();
        assert!(!path.exists(), "every rank in: the name is gone");
        assert_eq!(made.attached(), 3);
        second.mark_left(1);
        assert_eq!(third.peer_state(1), PeerState::Left);
    }

    /// A start that fails after the segment was made (the others never attach) leaves nothing.
    #[test]
    fn the_creators_segment_dropped_before_the_others_attach_leaves_no_file() {
        let pre = prefix("dropped");
        let (made, n) = Segment::create_unique(&pre, 4, small(), counter()).unwrap();
        let path = Segment::unique_path(&pre, n);
        assert!(path.exists());
        drop(made);
        assert!(!path.exists());
    }

    /// A file another user made under the name a job would pick is never opened: the next
    /// name is taken, and when every name tried is taken the start fails saying so.
    #[test]
    fn a_squatted_name_is_passed_over_never_mapped() {
        let pre = prefix("squat");
        let squatted = Segment::unique_path(&pre, 1);
        std::fs::write(&squatted, b"not yours").unwrap();
        std::fs::set_permissions(&squatted, std::fs::Permissions::from_mode(0o666)).unwrap();
        let (seg, n) = Segment::create_unique(&pre, 2, small(), counter()).unwrap();
        assert_eq!(n, 2);
        assert_eq!(std::fs::read(&squatted).unwrap(), b"not yours");
        drop(seg);
        // Every name taken (a symbolic link among them: O_EXCL does not follow it).
        let target = prefix("squat-target");
        std::fs::write(&target, b"target").unwrap();
        for k in 2..=Segment::NAME_TRIES as u64 {
            std::os::unix::fs::symlink(&target, Segment::unique_path(&pre, k)).unwrap();
        }
        let e = match Segment::create_unique(&pre, 2, small(), counter()) {
            Err(e) => e,
            Ok(_) => panic!("a squatted name was used"),
        };
        assert!(e.to_string().contains("exists already"), "{e}");
        assert_eq!(std::fs::read(&target).unwrap(), b"target");
        assert_eq!(std::fs::read(&squatted).unwrap(), b"not yours");
        for k in 1..=Segment::NAME_TRIES as u64 {
            let _ = std::fs::remove_file(Segment::unique_path(&pre, k));
        }
        let _ = std::fs::remove_file(&target);
    }

    /// Attaching checks that the file is what this job's first rank made: not a link, this
    /// user's, open to no one else.
    #[test]
    fn attach_refuses_a_file_not_made_by_this_jobs_user_alone() {
        let pre = prefix("attach");
        let (seg, n) = Segment::create_unique(&pre, 2, small(), counter()).unwrap();
        let path = Segment::unique_path(&pre, n);
        let link = prefix("attach-link");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        let e = Segment::attach(&link, 2)
            .err()
            .expect("attached through a link");
        assert!(e.to_string().contains("attach-link"), "{e}");
        let _ = std::fs::remove_file(&link);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = Segment::attach(&path, 2)
            .err()
            .expect("attached a file open to others");
        assert!(e.to_string().contains("open to other users"), "{e}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            // As root, hand the file to another user and back.
            std::os::unix::fs::chown(&path, Some(65534), None).unwrap();
            let e = Segment::attach(&path, 2)
                .err()
                .expect("attached another user's file");
            assert!(e.to_string().contains("owned by user 65534"), "{e}");
            std::os::unix::fs::chown(&path, Some(0), None).unwrap();
        }
        assert!(Segment::attach(&path, 2).is_ok());
        drop(seg);
    }
}

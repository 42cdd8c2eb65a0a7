//! The node's shared segment: a header, one liveness word per local rank, and one ring per
//! ordered pair of local ranks (self included, so self-sends take the same path).
//!
//! ```text
//! [ header | alive[n] | pid[n] | ring indices[n*n] (256 B each) | ring data[n*n] (capacity each) ]
//! ```
//!
//! Every position is an offset computed from `n` and the ring capacity, identical in every
//! process, so nothing inside the segment is a pointer. For processes the segment is a file in
//! /dev/shm (mode 0600) created by the node's first rank and unlinked as soon as every local rank
//! has mapped it; for ranks as threads it is anonymous memory.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use ch4_core::{Error, ErrorKind, Result};
use memmap2::{MmapMut, MmapOptions};

use crate::ring::{Consumer, Producer, RingIndices};
use crate::sync::{AtomicU64, Ordering};

const MAGIC: u64 = 0x6368_345f_7368_6d31; // "ch4_shm1"
const HEADER: usize = 4096;
const INDICES: usize = 256;

/// The segment's fixed header.
#[repr(C)]
struct Header {
    magic: AtomicU64,
    ranks: AtomicU64,
    capacity: AtomicU64,
    /// How many local ranks have mapped the segment.
    attached: AtomicU64,
}

/// A mapped node segment.
pub struct Segment {
    map: MmapMut,
    ranks: usize,
    capacity: usize,
    path: Option<PathBuf>,
}

// SAFETY: the mapping is shared memory whose concurrent use goes only through atomics and the
// SPSC ring protocol; `MmapMut` itself is Send + Sync, and the other fields are plain values.
unsafe impl Sync for Segment {}

/// The bytes a segment for `ranks` local ranks with rings of `capacity` bytes needs.
pub fn segment_size(ranks: usize, capacity: usize) -> Result<usize> {
    let pairs = ranks
        .checked_mul(ranks)
        .ok_or_else(|| Error::new(ErrorKind::Count, "too many local ranks"))?;
    let per_pair = INDICES
        .checked_add(capacity)
        .ok_or_else(|| Error::new(ErrorKind::Count, "ring capacity too large"))?;
    pairs
        .checked_mul(per_pair)
        .and_then(|r| r.checked_add(HEADER + 16 * ranks.div_ceil(8) * 8))
        .ok_or_else(|| Error::new(ErrorKind::Count, "segment too large"))
}

fn check_params(ranks: usize, capacity: usize) -> Result<()> {
    if ranks == 0 || ranks > 4096 {
        return Err(Error::new(
            ErrorKind::Arg,
            format!("{ranks} local ranks (1..=4096 supported)"),
        ));
    }
    if !capacity.is_power_of_two() || capacity < 4096 {
        return Err(Error::new(
            ErrorKind::Arg,
            format!("ring capacity {capacity} must be a power of two ≥ 4096"),
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
             smallest rings: give {} more room (docker run --shm-size)",
            path.display(),
            path.parent()
                .map_or_else(|| "/dev/shm".into(), |p| p.display().to_string())
        ),
    )
}

/// The ring capacity to use for a new segment: `wanted`, halved until the segment takes at most
/// half of the filesystem's free space, but not below 4 KiB (if even that does not fit,
/// [`reserve`] reports it).
fn fitting_capacity(file: &File, ranks: usize, wanted: usize) -> usize {
    let Some(free) = free_bytes(file) else {
        return wanted;
    };
    let room = free / 2;
    let mut capacity = wanted;
    while capacity > 4096 && segment_size(ranks, capacity).map_or(true, |size| size as u128 > room)
    {
        capacity /= 2;
    }
    if capacity != wanted {
        tracing::warn!(
            wanted,
            capacity,
            "little room in the shared-memory filesystem: smaller rings"
        );
    }
    capacity
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
    pub fn anonymous(ranks: usize, capacity: usize) -> Result<Segment> {
        check_params(ranks, capacity)?;
        let size = segment_size(ranks, capacity)?;
        let map = map_options(size).len(size).map_anon().map_err(|e| {
            Error::new(
                ErrorKind::Exhausted,
                format!("anonymous map of {size} bytes: {e}"),
            )
        })?;
        let seg = Segment {
            map,
            ranks,
            capacity,
            path: None,
        };
        seg.init_header();
        Ok(seg)
    }

    /// Creates the node's segment file (exclusively, mode 0600) and maps it. The caller makes it
    /// known to the other local ranks and calls [`Segment::unlink`] once they have attached.
    ///
    /// `capacity` is the ring size wanted; when the filesystem (a container's small /dev/shm)
    /// has less room than the segment needs, rings are made smaller, down to 4 KiB, so that the
    /// segment takes at most half the free space. [`Segment::ring_capacity`] tells what was
    /// chosen, and [`Segment::attach`] learns it from the file.
    pub fn create(path: &Path, ranks: usize, capacity: usize) -> Result<Segment> {
        check_params(ranks, capacity)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| io_err("creating shared segment", path, e))?;
        let capacity = fitting_capacity(&file, ranks, capacity);
        let size = segment_size(ranks, capacity)?;
        let sized = file
            .set_len(size as u64)
            .map_err(|e| io_err("sizing shared segment", path, e))
            .and_then(|()| reserve(&file, size, path));
        if let Err(e) = sized {
            let _ = std::fs::remove_file(path);
            return Err(e);
        }
        let seg = Segment::map_file(&file, path, ranks, capacity)?;
        seg.init_header();
        Ok(seg)
    }

    /// Maps a segment file whose length is `segment_size(ranks, capacity)` (the callers have
    /// made or checked it so).
    fn map_file(file: &File, path: &Path, ranks: usize, capacity: usize) -> Result<Segment> {
        let size = segment_size(ranks, capacity)?;
        // SAFETY: the file is this job's segment (created exclusively by its first local rank,
        // mode 0600) and at least `size` bytes long, so every offset computed from `ranks` and
        // `capacity` is in bounds; every process maps it only through this module, which
        // accesses the memory through atomics and the ring protocol.
        let map = unsafe { map_options(size).map_mut(file) }
            .map_err(|e| io_err("mapping shared segment", path, e))?;
        Ok(Segment {
            map,
            ranks,
            capacity,
            path: Some(path.to_path_buf()),
        })
    }

    /// Maps a segment another local rank created, checking that it matches this job's layout;
    /// the ring size is the creator's choice, read from the file.
    pub fn attach(path: &Path, ranks: usize) -> Result<Segment> {
        check_params(ranks, 4096)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
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
        let len = file
            .metadata()
            .map_err(|e| io_err("inspecting shared segment", path, e))?
            .len();
        let fixed = segment_size(ranks, 0)? as u64;
        let pairs = (ranks * ranks) as u64;
        let capacity = (len.saturating_sub(fixed) / pairs) as usize;
        let size = segment_size(ranks, capacity)?;
        if len != size as u64 || check_params(ranks, capacity).is_err() {
            return Err(Error::new(
                ErrorKind::Transport,
                format!(
                    "shared segment {} has {len} bytes, expected {size}",
                    path.display()
                ),
            ));
        }
        let seg = Segment::map_file(&file, path, ranks, capacity)?;
        let h = seg.header();
        if h.magic.load(Ordering::Acquire) != MAGIC
            || h.ranks.load(Ordering::Relaxed) != ranks as u64
            || h.capacity.load(Ordering::Relaxed) != capacity as u64
        {
            return Err(Error::new(
                ErrorKind::Transport,
                format!("{} is not a ch4 segment for this job", path.display()),
            ));
        }
        h.attached.fetch_add(1, Ordering::AcqRel);
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
        h.capacity.store(self.capacity as u64, Ordering::Relaxed);
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
        self.capacity
    }

    fn word(&self, offset: usize) -> &AtomicU64 {
        // SAFETY: callers pass offsets of 8-aligned words inside the liveness table, which lies
        // within the mapping (see `segment_size`); an atomic is valid for any bit pattern.
        unsafe { &*(self.map.as_ptr().add(offset) as *const AtomicU64) }
    }

    fn alive_word(&self, local: usize) -> &AtomicU64 {
        self.word(HEADER + 8 * local)
    }

    fn pid_word(&self, local: usize) -> &AtomicU64 {
        self.word(HEADER + 8 * self.ranks + 8 * local)
    }

    /// Marks local rank `local` as alive, with its process id (0 for a thread).
    pub(crate) fn set_alive(&self, local: usize, pid: u32, alive: bool) {
        if local < self.ranks {
            self.pid_word(local)
                .store(u64::from(pid), Ordering::Relaxed);
            self.alive_word(local)
                .store(u64::from(alive), Ordering::Release);
        }
    }

    /// The process id recorded for local rank `local` (0: a thread, or not attached yet).
    pub(crate) fn pid(&self, local: usize) -> u32 {
        if local >= self.ranks {
            return 0;
        }
        self.pid_word(local).load(Ordering::Relaxed) as u32
    }

    /// Whether local rank `local` has gone: it said so on exit, or its process no longer exists.
    pub(crate) fn is_gone(&self, local: usize) -> bool {
        if local >= self.ranks {
            return true;
        }
        if self.alive_word(local).load(Ordering::Acquire) == 2 {
            return true;
        }
        let pid = self.pid_word(local).load(Ordering::Relaxed);
        if pid == 0 {
            return false;
        }
        // SAFETY: kill with signal 0 only checks that the process exists; no signal is sent.
        let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
        r != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
    }

    /// Records that local rank `local` has left (its transport was dropped).
    pub(crate) fn mark_gone(&self, local: usize) {
        if local < self.ranks {
            self.alive_word(local).store(2, Ordering::Release);
        }
    }

    fn rings_base(&self) -> usize {
        HEADER + 16 * self.ranks.div_ceil(8) * 8
    }

    /// Pointers to the ring carrying `from` → `to`.
    fn ring(&self, from: usize, to: usize) -> Result<(*const RingIndices, *mut u8)> {
        if from >= self.ranks || to >= self.ranks {
            return Err(Error::new(ErrorKind::Internal, "ring index out of range"));
        }
        let pair = from * self.ranks + to;
        let pairs = self.ranks * self.ranks;
        let indices = self.rings_base() + pair * INDICES;
        let data = self.rings_base() + pairs * INDICES + pair * self.capacity;
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
        Ok(unsafe { Producer::new(i, d, self.capacity) })
    }

    /// The consumer end of `from` → `to`. The caller must be local rank `to` and create it once.
    pub(crate) fn consumer(&self, from: usize, to: usize) -> Result<Consumer> {
        let (i, d) = self.ring(from, to)?;
        // SAFETY: as for `producer`, with each local rank making only its own consumers, once.
        Ok(unsafe { Consumer::new(i, d, self.capacity) })
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // Only the creator's name matters, and unlinking twice is harmless.
        if self.path.is_some() && self.attached() >= self.ranks as u64 {
            let _ = self.unlink();
        }
    }
}

//! What a rank keeps per peer: the heap bytes the device and its netmod hold for a job of N
//! processes, at two sizes up to 10^6, without opening a connection (every peer's business card
//! learned, none contacted) — the CH4 design's claim that the core keeps no per-peer virtual
//! connections (CH3's VC was about 480 bytes) and that a connectionless netmod keeps only an
//! address handle. Heap bytes come from a counting allocator (Rust's side); the process's
//! resident memory is printed beside them, for what the C libraries (libfabric's address vector,
//! UCX) allocate themselves.
//!
//! `cargo bench --bench memory_per_peer [-- SMALL LARGE]` (default 10,000 and 1,000,000; with
//! `--features ucx` UCX's too; libfabric's address vector folds equal addresses, so the
//! simulation does not apply to it).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

#[cfg(any(feature = "tcp", feature = "ucx"))]
use ch4_core::bootstrap::Bootstrap;
use ch4_core::core::DeviceConfig;
use ch4_core::transport::{Netmod, NoNetmod, NoShm};
use ch4_core::Device;

/// The system allocator, counting the bytes live.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call goes to the system allocator with the caller's layout and pointer
// unchanged; the counter is only arithmetic beside it.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract for `alloc` is the system allocator's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: `ptr` came from `alloc` above with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: `ptr` came from this allocator with `layout`; the caller guarantees the rest.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

/// Resident memory of this process, in bytes.
fn resident() -> isize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: isize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// Heap and resident bytes of a device for `world` processes over the netmod `open` makes,
/// held until both are read.
fn held<N: Netmod>(world: u32, open: &impl Fn(u32) -> N) -> (isize, isize) {
    let (heap0, rss0) = (live(), resident());
    let net = open(world);
    let dev = Device::new(net, NoShm, 0, world, DeviceConfig::default()).expect("device");
    let (heap, rss) = (live() - heap0, resident() - rss0);
    drop(dev);
    (heap, rss)
}

fn report<N: Netmod>(name: &str, small: u32, large: u32, open: impl Fn(u32) -> N) {
    let (h1, r1) = held(small, &open);
    let (h2, r2) = held(large, &open);
    let peers = f64::from(large - small);
    println!(
        "{name:<28} {:>10.1} B/peer heap {:>10.1} B/peer resident   ({large} processes: {:.1} MiB heap)",
        (h2 - h1) as f64 / peers,
        (r2 - r1) as f64 / peers,
        h2 as f64 / f64::from(1 << 20)
    );
}

#[cfg(any(feature = "tcp", feature = "ucx"))]
/// A netmod of rank 0 that has learned `world` cards, every peer's the same address (no peer
/// is contacted, so none needs to exist).
fn with_cards<N: Bootstrap>(world: u32) -> N {
    let mut net = N::open(0, world, 7, true).expect("open the netmod");
    let card = net.business_card().expect("card");
    let cards = vec![card; world as usize];
    net.learn_cards(&cards).expect("learn the cards");
    net
}

fn main() {
    let sizes: Vec<u32> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let (small, large) = match sizes[..] {
        [s, l, ..] => (s, l),
        // `cargo test` runs benches without `--bench`: small sizes then.
        _ if !std::env::args().any(|a| a == "--bench") => (100, 1_000),
        _ => (10_000, 1_000_000),
    };
    println!("# bytes a rank keeps per peer, between {small} and {large} processes (no connection opened)");
    report("core alone (no netmod)", small, large, |_| NoNetmod);
    #[cfg(feature = "tcp")]
    report(
        "tcp (TcpNetmod)",
        small,
        large,
        with_cards::<netmod_tcp::TcpNetmod>,
    );
    #[cfg(feature = "tcp")]
    report(
        "tcp rails (one rail)",
        small,
        large,
        with_cards::<netmod_rails::TcpRails>,
    );
    // libfabric's address vector maps equal addresses to one entry, so the copies of one card
    // this simulation learns cannot stand for a million peers there: not measured yet.
    #[cfg(feature = "ucx")]
    report(
        "ucx (UcxNetmod)",
        small,
        large,
        with_cards::<netmod_ucx::UcxNetmod>,
    );
}

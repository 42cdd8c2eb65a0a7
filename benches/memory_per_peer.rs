//! What a rank keeps per peer: the heap bytes the device and its netmod hold for a job of N
//! processes, at two sizes up to 10^6, without opening a connection (every peer's business card
//! learned, none contacted) — the CH4 design's claim that the core keeps no per-peer virtual
//! connections (CH3's VC was about 480 bytes) and that a connectionless netmod keeps only an
//! address handle. Heap bytes come from a counting allocator (Rust's side); the process's
//! resident memory is printed beside them, for what the C libraries (libfabric's address vector,
//! UCX) allocate themselves.
//!
//! Cards are learned the way process mode learns them ([`Bootstrap::learn_cards_from`], whose
//! source reads the process manager): UCX asks for a peer's card on first contact, the others
//! now. libfabric's address vector folds equal addresses into one entry, so its peers get
//! distinct ones (the card's socket address with the peer's number in its IPv4 address).
//!
//! `cargo bench --bench memory_per_peer [-- SMALL LARGE]` (default 10,000 and 1,000,000; with
//! `--features ofi,ucx` libfabric's and UCX's too).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

#[cfg(any(feature = "tcp", feature = "ofi", feature = "ucx"))]
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

/// Prints a netmod's bytes per peer between the two sizes; returns the heap's.
fn report<N: Netmod>(name: &str, small: u32, large: u32, open: impl Fn(u32) -> N) -> f64 {
    let (h1, r1) = held(small, &open);
    let (h2, r2) = held(large, &open);
    let peers = f64::from(large - small);
    println!(
        "{name:<28} {:>10.1} B/peer heap {:>10.1} B/peer resident   ({large} processes: {:.1} MiB heap)",
        (h2 - h1) as f64 / peers,
        (r2 - r1) as f64 / peers,
        h2 as f64 / f64::from(1 << 20)
    );
    (h2 - h1) as f64 / peers
}

/// What the connectionless netmods may keep per peer: an address handle's worth, as CH4's
/// design promises (CH3's VC was about 480 bytes). Checked on every run, `cargo test`'s too,
/// so that per-peer state added anywhere in the device fails the suite.
const CONNECTIONLESS_MAX: f64 = 16.0;

#[cfg(any(feature = "tcp", feature = "ucx"))]
/// A netmod of rank 0 that has learned `world` cards, every peer's the same address (no peer
/// is contacted, so none needs to exist).
fn with_cards<N: Bootstrap>(world: u32) -> N {
    let mut net = N::open(0, world, 7, true).expect("open the netmod");
    let card = net.business_card().expect("card");
    net.learn_cards_from(world, Box::new(move |_| Ok(card.clone())))
        .expect("learn the cards");
    net
}

#[cfg(feature = "ofi")]
/// [`with_cards`] for libfabric, every peer at an address of its own: this rank's card, an
/// IPv4 socket address (`FI_SOCKADDR_IN`, the tcp provider's), with the peer's number as the
/// last three bytes of the address (127.x.y.z: no peer is contacted).
fn with_distinct_cards(world: u32) -> netmod_ofi::OfiNetmod {
    let mut net = netmod_ofi::OfiNetmod::open(0, world, 7, true).expect("open the netmod");
    let card = net.business_card().expect("card");
    assert_eq!(card.len(), 16, "an IPv4 socket address (FI_SOCKADDR_IN)");
    net.learn_cards_from(
        world,
        Box::new(move |g| {
            let mut c = card.clone();
            c[4] = 127;
            c[5..8].copy_from_slice(&g.to_be_bytes()[1..]);
            Ok(c)
        }),
    )
    .expect("learn the cards");
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
    let core = report("core alone (no netmod)", small, large, |_| NoNetmod);
    assert!(core <= CONNECTIONLESS_MAX, "the core keeps {core} B a peer");
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
    #[cfg(feature = "ofi")]
    {
        let ofi = report("ofi (OfiNetmod)", small, large, with_distinct_cards);
        assert!(
            ofi <= CONNECTIONLESS_MAX,
            "libfabric's netmod keeps {ofi} B a peer"
        );
    }
    #[cfg(feature = "ucx")]
    {
        let ucx = report(
            "ucx (UcxNetmod)",
            small,
            large,
            with_cards::<netmod_ucx::UcxNetmod>,
        );
        assert!(
            ucx <= CONNECTIONLESS_MAX,
            "UCX's netmod keeps {ucx} B a peer"
        );
    }
}

//! The bodies of ch4's fuzz targets, one public function per target.
//!
//! Every parser that reads bytes from outside the process — a peer's frames and packets, a
//! launcher's PMI lines, another process's writes into shared memory, the business cards other
//! ranks publish — has a body here that feeds it the fuzzer's bytes and checks what must hold:
//! no panic, no out-of-bounds access (AddressSanitizer, cargo-fuzz's default, sees those), and
//! where the format allows it a property (decoding what was encoded gives it back; a decoder
//! fed a stream in arbitrary pieces gives what it gives fed whole). A body panics only when
//! such a check fails.
//!
//! The bodies live in a workspace crate rather than in the cargo-fuzz crate (`fuzz/`, outside
//! the workspace, built with nightly flags) so that the normal test run builds them and replays
//! every kept input through them (`tests/regressions.rs`, over `fuzz/regressions/<target>/`):
//! an input that once found a bug stays a regression test without the fuzzer. The targets in
//! `fuzz/fuzz_targets/` are one line each, calling the body of their name.
//!
//! libFuzzer's own documentation (<https://llvm.org/docs/LibFuzzer.html>) describes the engine;
//! the layout follows smoltcp's and quinn's `fuzz/` directories.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod am;
pub mod cards;
pub mod credit;
pub mod datatype;
pub mod input;
pub mod pmi;
pub mod seeds;
pub mod settings;
pub mod shm;
pub mod tcp;

/// A target's body: the fuzzer's bytes in, a panic out when a check fails.
pub type Body = fn(&[u8]);

/// Every target's name and body, for the replay test and the seed writer.
pub const TARGETS: &[(&str, Body)] = &[
    ("am_headers", am::headers),
    ("am_packets", am::packets),
    ("tcp_frames", tcp::frames),
    ("tcp_connection", tcp::connection),
    ("pmi1_wire", pmi::wire1),
    ("pmi2_wire", pmi::wire2),
    ("pmi_server", pmi::server),
    ("pmi_client", pmi::client),
    ("pmi_values", pmi::values),
    ("shm_ring", shm::ring),
    ("shm_cells", shm::cells),
    ("business_cards", cards::cards),
    ("ofi_names", cards::ofi_names),
    ("ofi_large", credit::ofi_large),
    ("credit", credit::credit),
    ("settings", settings::settings),
    ("datatypes", datatype::datatypes),
];

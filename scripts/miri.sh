#!/usr/bin/env bash
# Miri (Rust's interpreter that checks for undefined behaviour: out-of-bounds and dangling
# accesses, aliasing under Stacked Borrows, uninitialized reads, leaks) over ch4-core and
# am-fallback: their unit tests, am-fallback's in-memory tests, and the doc tests. ch4-core's
# `unsafe` is the lent buffers (`buffer.rs`: a borrowed slice kept as a raw pointer until
# the request is gone) and the native engines' operation contexts (`native.rs`); am-fallback
# has none (`#![deny(unsafe_code)]`), so there Miri checks what it calls.
#
# Miri is a rustup component of nightly toolchains only (`rustup component add miri
# --toolchain nightly`, with rust-src for its sysroot); it cannot run on the stable toolchain,
# even with RUSTC_BOOTSTRAP=1. Where no nightly toolchain with Miri is installed this script
# says so and exits 0; scripts/asan.sh's `core` part is the check that runs everywhere.
#
# Property tests run 8 cases each here (PROPTEST_CASES): Miri runs orders of magnitude
# slower than native code. Isolation is off so that proptest may read its regression files.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = --dry-run ]; then
    echo "would run Miri over ch4-core and am-fallback (toolchain ${MIRI_TOOLCHAIN:-nightly})"
    exit 0
fi
toolchain="${MIRI_TOOLCHAIN:-nightly}"
if ! cargo "+$toolchain" miri --version >/dev/null 2>&1; then
    mkdir -p target
    echo "scripts/miri.sh: no Miri on toolchain $toolchain (rustup component add miri rust-src --toolchain $toolchain)" \
        >>target/skipped-tests.txt
    echo "Miri skipped: toolchain $toolchain has no miri component" >&2
    exit 0
fi
export PROPTEST_CASES="${PROPTEST_CASES:-8}"
export MIRIFLAGS="${MIRIFLAGS:--Zmiri-disable-isolation}"
export CARGO_TARGET_DIR="${MIRI_TARGET_DIR:-target/miri}"
# Left out: am-fallback's only_a_lone_rendezvous_send_takes_a_first_piece, which checks a
# 100 ms window between three sends (`SENDING_LARGE_FOR`) that Miri's speed overruns (all
# three then take a first piece): a timing assumption, not undefined behaviour.
cargo "+$toolchain" miri test -q -p ch4-core -p am-fallback "$@" -- \
    --skip only_a_lone_rendezvous_send_takes_a_first_piece

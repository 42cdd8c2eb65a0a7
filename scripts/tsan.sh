#!/usr/bin/env bash
# ThreadSanitizer over the multiple thread level: the locks of the thread-level crate, the
# multithreaded semantics suite on every in-process route (ranks as threads: shared memory,
# TCP, the in-process NICs, a stalled VCI) and the asynchronous progress thread. Rust's standard
# library is rebuilt with the sanitizer (-Zbuild-std; unsanitized, its own locks and channels
# show as races), which needs nightly flags on the stable toolchain (RUSTC_BOOTSTRAP=1) and the
# rust-src component, added here when missing. A separate target dir: every crate is rebuilt.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! rustup component list --installed 2>/dev/null | grep -q '^rust-src' &&
    ! rustup component add rust-src >/dev/null 2>&1; then
    # Noted where scripts/test.sh lists what it skipped.
    mkdir -p target
    echo "scripts/tsan.sh: the rust-src component could not be added (rustup offline?)" \
        >>target/skipped-tests.txt
    echo "ThreadSanitizer skipped: no rust-src to rebuild the standard library with" >&2
    exit 0
fi
export RUSTC_BOOTSTRAP=1
export RUSTFLAGS="-Zsanitizer=thread"
export CARGO_TARGET_DIR="${TSAN_TARGET_DIR:-target/tsan}"
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1}"
target="$(rustc -vV | sed -n 's/^host: //p')"
cargo test -q -Zbuild-std --target "$target" -p thread-level --lib
# Process jobs run their ranks through ch4run, outside the sanitizer: left to the ordinary suite.
cargo test -q -Zbuild-std --target "$target" --test multithreaded -- --skip processes --skip rank
# The progress thread beside the ranks' threads, and the wakers of awaited requests (tokio's
# and futures' executors).
cargo test -q -Zbuild-std --target "$target" --test async_progress

#!/usr/bin/env bash
# ThreadSanitizer over every test that runs ranks, their threads or a progress thread as
# threads of one process. Rust's standard library is rebuilt with the sanitizer
# (-Zbuild-std; unsanitized, its own locks and channels show as races), which needs nightly
# flags on the stable toolchain (RUSTC_BOOTSTRAP=1) and the rust-src component, added here when
# missing. A separate target dir: every crate is rebuilt.
#
# Default (the CI set): the locks of the thread-level crate; shm's own tests (the transport
# between threads; the ring and cell-queue streams of 200,000 and 2 x 50,000 messages between
# threads only with --all: minutes under the sanitizer); the multithreaded
# semantics suite on every in-process route (ranks as threads: shared memory, TCP, the
# in-process NICs, a stalled VCI); the asynchronous progress thread with tokio's and futures'
# executors; many senders into one cell queue.
# `--all` adds ranks as threads that fail (its bounds — 60 s for four routes, a 1 MiB send that
# must not complete before its receiver fails — are timing a sanitized, loaded host can miss),
# the point-to-point semantics suite (every in-process route: shm, streamed,
# crowded, the in-process AM netmod, TCP, two TCP rails, the native NIC mixed with shm) and
# the collective schedules on every route — about ten times as long.
#
# Left out, and why: process jobs (tcp_processes, mixed_processes, two_hosts, the `rank`
# bodies) run the test binary as ranks under ch4run, each a process of its own with nothing
# shared to race on but the shm segment, which the shm routes here cover between threads;
# libfabric and UCX (the ofi/ucx routes) are Debian's uninstrumented builds, whose internal
# threads TSan cannot see (it would report their lock-free completions as races in our code or
# miss them): scripts/asan.sh runs those routes.
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
tests=(--test multithreaded --test async_progress --test shm_cells --test transport)
skip=(--skip two_threads_stream_many_records_in_order
    --skip threads_stream_through_one_queue_without_loss_or_reordering)
if [ "${1:-}" = --all ]; then
    tests+=(--test thread_failures --test pt2pt --test schedules)
    skip=()
fi
# One build for all (the packages' features unified once).
cargo test -q -Zbuild-std --target "$target" -p ch4 -p shm -p thread-level --lib "${tests[@]}" \
    -- --skip processes --skip two_hosts "${skip[@]}"

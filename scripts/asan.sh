#!/usr/bin/env bash
# AddressSanitizer (with LeakSanitizer) over the code that touches memory C libraries hand
# back: the FFI netmods and their bindings — libfabric-sys's and ucx-sys's smoke tests,
# netmod-ofi's and netmod-ucx's tests, the semantics suite over libfabric and UCX with ranks
# as threads (each its own node, and nodes of two with ch4's shared memory) — and the
# shared-memory layer (its mapped segment, CMA reads), ch4-core (its lent buffers) and
# am-fallback. Rust's standard library is rebuilt with the sanitizer (-Zbuild-std; mixing
# sanitized and unsanitized crates is refused), which needs nightly flags on the stable
# toolchain (RUSTC_BOOTSTRAP=1) and the rust-src component. A separate target dir.
#
# libfabric and UCX themselves are Debian's builds, not instrumented: ASan sees our side of
# every buffer we hand them, and their allocations through its malloc (so their leaks are
# reported; scripts/asan-leaks.supp lists the ones that are theirs, never ch4's).
#
# Left out, and why:
# - the process-mode tests (ranks through ch4run): they run the test binary as ranks, and the
#   launcher's own children; kept to the ordinary suite;
# - the C library (c-abi): libmpi_abi.so is loaded by C programs built with mpicc, which would
#   need the ASan runtime preloaded into each; not done here;
# - the fuzz targets: scripts/fuzz.sh builds them with ASan already (cargo fuzz's default).
#
# Usage: scripts/asan.sh [--dry-run] [ofi|ucx|shm|core]...   (default: all four)
# --dry-run checks the arguments and says what would run.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = --dry-run ]; then
    shift
    for part in "$@"; do
        case "$part" in
            ofi | ucx | shm | core) ;;
            *) echo "scripts/asan.sh: unknown part $part (ofi, ucx, shm or core)" >&2; exit 2 ;;
        esac
    done
    echo "would run AddressSanitizer over: ${*:-ofi ucx shm core}"
    exit 0
fi
if ! rustup component list --installed 2>/dev/null | grep -q '^rust-src' &&
    ! rustup component add rust-src >/dev/null 2>&1; then
    mkdir -p target
    echo "scripts/asan.sh: the rust-src component could not be added (rustup offline?)" \
        >>target/skipped-tests.txt
    echo "AddressSanitizer skipped: no rust-src to rebuild the standard library with" >&2
    exit 0
fi
export RUSTC_BOOTSTRAP=1
export RUSTFLAGS="-Zsanitizer=address"
export RUSTDOCFLAGS="-Zsanitizer=address"
export CARGO_TARGET_DIR="${ASAN_TARGET_DIR:-target/asan}"
export CARGO_INCREMENTAL=0
supp="$(pwd)/scripts/asan-leaks.supp"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1:abort_on_error=0:detect_stack_use_after_return=1}"
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$supp:print_suppressions=1}"
# UCX patches malloc and mmap to learn when registered memory goes away; ASan replaces them
# too. UCX's hooks off: ch4 registers no memory that UCX must track (its rendezvous buffers
# are the user's, registered per transfer).
export UCX_MEM_MALLOC_HOOKS="${UCX_MEM_MALLOC_HOOKS:-no}"
export UCX_MEM_MMAP_HOOK_MODE="${UCX_MEM_MMAP_HOOK_MODE:-none}"
target="$(rustc -vV | sed -n 's/^host: //p')"
build=(cargo test -q -Zbuild-std --target "$target")
# One build of the facade for every part (each route test names its netmod's type).
facade="${ASAN_FACADE_FEATURES:-ofi,ucx}"

parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(ofi ucx shm core)
for part in "${parts[@]}"; do
    case "$part" in
    ofi)
        # libfabric over its tcp;ofi_rxm provider on loopback (as the ordinary suite).
        "${build[@]}" -p libfabric-sys -p netmod-ofi
        "${build[@]}" --features "$facade" --test pt2pt --test multithreaded -- ofi \
            --skip processes --skip two_hosts
        ;;
    ucx)
        # UCX's TCP transport on the loopback device, then its shared-memory transports.
        UCX_TLS=tcp UCX_NET_DEVICES=lo "${build[@]}" -p ucx-sys -p netmod-ucx
        UCX_TLS=tcp UCX_NET_DEVICES=lo "${build[@]}" --features "$facade" --test pt2pt \
            --test multithreaded -- ucx --skip processes --skip two_hosts
        UCX_TLS=posix,sysv,cma,self "${build[@]}" --features "$facade" --test pt2pt -- ucx \
            --skip processes --skip two_hosts
        ;;
    shm)
        "${build[@]}" -p shm --lib --tests
        "${build[@]}" --features "$facade" --test shm_cells
        "${build[@]}" --features "$facade" --test pt2pt -- shm
        ;;
    core)
        PROPTEST_CASES="${PROPTEST_CASES:-64}" "${build[@]}" -p ch4-core -p am-fallback
        ;;
    *)
        echo "usage: scripts/asan.sh [ofi|ucx|shm|core]..." >&2
        exit 2
        ;;
    esac
done

#!/usr/bin/env bash
# The fault tests with many seeds (docs/hardening/faults.md): the semantics suite through the
# seeded fault wrapper over TCP and shared memory, connections reset and dropped by a proxy
# (ch4's TCP netmod and libfabric's tcp;ofi_rxm), a rail lost mid-transfer, with FAULT_SEEDS seeds each (CI runs 1 and 2); then the killed-rank
# tests over every network the machine has. A failing seed is printed with the line that
# replays it (FAULT_SEED=s).
#
#   ./scripts/faults.sh [--dry-run] [SEEDS]     # default 16: about 10 minutes on 2 cores
# --dry-run checks the arguments and says what would run.
set -euo pipefail
cd "$(dirname "$0")/.."
dry_run=no
if [ "${1:-}" = --dry-run ]; then
    dry_run=yes
    shift
fi
case "${1:-16}" in
    '' | *[!0-9]*) echo "scripts/faults.sh: SEEDS must be a number, not ${1}" >&2; exit 2 ;;
esac
if [ "$dry_run" = yes ]; then
    echo "would run the fault tests with ${1:-16} seeds each"
    exit 0
fi
export FAULT_SEEDS="${1:-16}"
export CARGO_INCREMENTAL=0
start=$(date +%s)
echo "== semantics suite through the fault wrapper, $FAULT_SEEDS seeds"
cargo test -q --test pt2pt --test multithreaded --test schedules faults_
echo "== TCP connections reset and dropped, a rail lost, libfabric's cut, $FAULT_SEEDS seeds"
cargo test -q -p testkit --test faults
cargo test -q -p netmod-tcp --test faults
cargo test -q -p netmod-rails --test faults
cargo test -q -p netmod-ofi --test wire_faults
echo "== killed ranks: TCP and shared memory, then libfabric and UCX where they build"
cargo test -q --test process a_receive_from_a_killed -- --nocapture 2>&1 |
    grep -E "the receive failed|test result"
cargo test -q --test thread_failures
if pkg-config --exists libfabric 2>/dev/null; then
    cargo test -q --features ofi --test process a_receive_from_a_killed -- --nocapture 2>&1 |
        grep -E "the receive failed|test result"
    cargo test -q --features ofi --test thread_failures
fi
if pkg-config --exists ucx 2>/dev/null; then
    for mode in none peer; do
        CH4_UCX_ERR_MODE=$mode UCX_TLS=tcp UCX_NET_DEVICES=lo \
            cargo test -q --features ucx --test process a_receive_from_a_killed -- --nocapture 2>&1 |
            grep -E "the receive failed|test result"
    done
    UCX_TLS=tcp UCX_NET_DEVICES=lo cargo test -q --features ucx --test thread_failures
fi
echo "faults: $FAULT_SEEDS seeds, all passed in $(( $(date +%s) - start )) s"

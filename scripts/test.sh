#!/usr/bin/env bash
# The whole test suite. Installs what it needs (nothing yet beyond the Rust toolchain; the
# libfabric/UCX/MPICH packages join here with their netmods), then runs every test of the
# workspace: unit tests, the multi-rank integration tests (ranks as threads) and the doc tests.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null 2>&1; then
    echo "cargo not found: install a Rust toolchain (https://rustup.rs)" >&2
    exit 1
fi

cargo test --workspace --all-targets
cargo test --workspace --doc

#!/usr/bin/env bash
# Model-checks the shared-memory rings with loom (separate target dir: --cfg loom rebuilds all).
set -euo pipefail
cd "$(dirname "$0")/.."
LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-3}" RUSTFLAGS="--cfg loom" \
    CARGO_TARGET_DIR="${LOOM_TARGET_DIR:-target/loom}" \
    cargo test -p shm --release --lib loom

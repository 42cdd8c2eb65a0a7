#!/usr/bin/env bash
# Model-checks with loom the shared-memory rings and the multiple thread level's VCI lock (its
# exclusion, its refusal of re-entry and of use after finalize, and the hand-off between a
# waiting loop's polls); a separate target dir, since --cfg loom rebuilds all.
set -euo pipefail
cd "$(dirname "$0")/.."
LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-3}" RUSTFLAGS="--cfg loom" \
    CARGO_TARGET_DIR="${LOOM_TARGET_DIR:-target/loom}" \
    cargo test -p shm -p thread-level --release --lib loom

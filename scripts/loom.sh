#!/usr/bin/env bash
# Model-checks with loom every lock-free structure ch4 has and the multiple thread level's VCI
# lock: the shared-memory rings (records published by their header word, wrap-around and
# padding), the cell queues (two senders racing on the tail, a freed cell refilled and
# requeued), the collective lanes (arrival words and double-buffered outboxes, allgather and a
# run of broadcasts), the VCI lock (its exclusion, its refusal of re-entry and of use after
# finalize, the hand-off between a waiting loop's polls) and the progress thread's sleep flag
# (a post on any VCI wakes a thread going to sleep). docs/hardening/sanitizers.md lists every
# atomic of the workspace and what checks it. A separate target dir, since --cfg loom
# rebuilds all; a preemption bound that keeps the stage to seconds once built.
set -euo pipefail
cd "$(dirname "$0")/.."
LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-3}" RUSTFLAGS="--cfg loom" \
    CARGO_TARGET_DIR="${LOOM_TARGET_DIR:-target/loom}" \
    cargo test -p shm -p thread-level --release --lib loom

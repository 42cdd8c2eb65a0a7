#!/usr/bin/env bash
# The whole test suite. Installs what it needs, then runs every test of the workspace: unit
# tests, multi-rank tests (ranks as threads), multi-process tests (through ch4run and MPICH's
# Hydra), doc tests, and the loom models of the shared-memory rings.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null 2>&1; then
    echo "cargo not found: install a Rust toolchain (https://rustup.rs)" >&2
    exit 1
fi

# MPICH's Hydra launcher, for the test that runs our binaries under mpiexec.hydra.
if ! command -v mpiexec.hydra >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing Debian's mpich (for mpiexec.hydra)..."
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mpich >/dev/null
    else
        echo "note: mpiexec.hydra is missing and cannot be installed here; its test will skip"
    fi
fi

# The chart tests of tools/osu-plot draw text with DejaVu Sans.
if [ ! -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] && [ -z "${OSU_PLOT_FONT:-}" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing Debian's fonts-dejavu-core (for the chart tests)..."
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fonts-dejavu-core >/dev/null
    else
        echo "note: DejaVu Sans is missing (fonts-dejavu-core); the chart tests will fail"
    fi
fi

cargo test --workspace --all-targets
cargo test --workspace --doc
./scripts/loom.sh

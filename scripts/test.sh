#!/usr/bin/env bash
# The whole test suite. Installs what it needs, then runs every test of the workspace: unit
# tests, multi-rank tests (ranks as threads), multi-process tests (through ch4run and MPICH's
# Hydra), the real OSU programs over ch4's C library, doc tests, and the loom models of the
# shared-memory rings.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null 2>&1; then
    echo "cargo not found: install a Rust toolchain (https://rustup.rs)" >&2
    exit 1
fi

# Installs Debian packages when we are root on a Debian-like system (returns 1 otherwise);
# the package lists are updated once, before the first install.
apt_updated=no
apt_install() {
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        return 1
    fi
    if [ "$apt_updated" = no ]; then
        apt-get update -qq
        apt_updated=yes
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# libfabric >= 1.17 with its headers' pkg-config file (libfabric-sys links it; netmod-ofi's
# tests run over its tcp and shm providers) and fi_info, to inspect the providers.
if ! command -v pkg-config >/dev/null 2>&1 ||
    ! pkg-config --atleast-version 1.17 libfabric 2>/dev/null ||
    ! command -v fi_info >/dev/null 2>&1; then
    echo "installing Debian's libfabric-dev, libfabric-bin and pkg-config (for libfabric-sys)..."
    apt_install libfabric-dev libfabric-bin pkg-config ||
        echo "note: libfabric >= 1.17 is missing and cannot be installed here; libfabric-sys will not build"
fi

# UCX >= 1.13 with its pkg-config file (ucx-sys links it; its tests and netmod-ucx's run over
# UCX's tcp and shared-memory transports) and ucx_info, to inspect the transports.
if ! pkg-config --atleast-version 1.13 ucx 2>/dev/null || ! command -v ucx_info >/dev/null 2>&1; then
    echo "installing Debian's libucx-dev and ucx-utils (for ucx-sys)..."
    apt_install libucx-dev ucx-utils pkg-config ||
        echo "note: UCX >= 1.13 is missing and cannot be installed here; ucx-sys will not build"
fi

# OpenPMIx >= 4.2 with its pkg-config file (pmix-sys links it; the PMIx client's tests and the
# `pmix` build of ch4 run under Open MPI's mpirun, which hosts a PMIx server, and Slurm's srun).
if ! pkg-config --atleast-version 4.2 pmix 2>/dev/null || ! command -v mpirun.openmpi >/dev/null 2>&1; then
    echo "installing Debian's libpmix-dev and openmpi-bin (for pmix-sys and the PMIx launchers)..."
    apt_install libpmix-dev openmpi-bin pkg-config ||
        echo "note: OpenPMIx >= 4.2 or Open MPI is missing and cannot be installed here; pmix-sys will not build"
fi

# MPICH's Hydra launcher, for the test that runs our binaries under mpiexec.hydra.
if ! command -v mpiexec.hydra >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing Debian's mpich (for mpiexec.hydra)..."
        apt_install mpich
    else
        echo "note: mpiexec.hydra is missing and cannot be installed here; its test will skip"
    fi
fi

# iproute2's ip and tc, for the tests on two hosts: network namespaces joined by two
# rate-limited links (scripts/lib/netns-hosts.sh); they skip where namespaces cannot be made.
if ! command -v ip >/dev/null 2>&1 || ! command -v tc >/dev/null 2>&1; then
    echo "installing Debian's iproute2 (for the tests on two hosts)..."
    apt_install iproute2 || echo "note: ip and tc are missing; the tests on two hosts will skip"
fi

# The chart tests of tools/osu-plot draw text with DejaVu Sans.
if [ ! -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] && [ -z "${OSU_PLOT_FONT:-}" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing Debian's fonts-dejavu-core (for the chart tests)..."
        apt_install fonts-dejavu-core
    else
        echo "note: DejaVu Sans is missing (fonts-dejavu-core); the chart tests will fail"
    fi
fi

# MPICH 5 with the MPI standard ABI (PyPI's mpich: mpicc_abi, mpi_abi.h, libmpi_abi.so.1 and
# Hydra), for the C ABI tests: our mpi.h's constants against MPICH's, and one OSU binary run on
# both libraries. The same place scripts/osu-vs-peers.sh --ofi uses.
if [ ! -x target/mpich5-venv/bin/mpicc_abi ]; then
    echo "installing MPICH 5.0.2 from PyPI into target/mpich5-venv (for the C ABI tests)..."
    python3 -m venv target/mpich5-venv 2>/dev/null || {
        apt_install python3-venv && python3 -m venv target/mpich5-venv
    } || true
    target/mpich5-venv/bin/pip install -q mpich==5.0.2 ||
        echo "note: MPICH 5 could not be installed; the C ABI tests skip their MPICH part"
fi

# The third-party programs (the real OSU benchmarks, MPICH's tests) are not part of the
# repository: they are looked for in $THIRD_PARTY_DIR, by default ../shared/third_party beside
# the project (where CI puts them). Without them the cases that build them are skipped, each
# noted in target/skipped-tests.txt, which is printed at the end.
third_party="${THIRD_PARTY_DIR:-../shared/third_party}"
if [ ! -d "$third_party" ]; then
    echo "note: no third-party programs in $third_party (set THIRD_PARTY_DIR): the OSU and MPICH test cases will skip"
fi
# One build per feature set, never rebuilt piecewise: incremental caches would only double the
# target directory's size (they did, to tens of GB).
export CARGO_INCREMENTAL=0
mkdir -p target
rm -f target/skipped-tests.txt
report_skips() {
    { set +x; } 2>/dev/null
    if [ -n "${steps_fd:-}" ]; then report_steps; fi
    if [ -s target/skipped-tests.txt ]; then
        echo "Skipped (see above for why; the rest of the suite ran):"
        sort -u target/skipped-tests.txt
    fi
}
trap report_skips EXIT

# Where the time goes (CI allows 90 minutes; we keep the suite well under 30): each step below is
# traced with the second it started into target/suite-steps.txt, and the steps that took longer
# than 20 s are listed at the end, longest first.
exec {steps_fd}>target/suite-steps.txt
BASH_XTRACEFD=$steps_fd
PS4='+ ${SECONDS} '
report_steps() {
    echo "+ $SECONDS (end)" >&"$steps_fd"
    echo "Steps over 20 s (seconds, command), of ${SECONDS} s in all:"
    # xtrace prints a command's environment assignments on a line of their own before it.
    awk '!/^\+ [0-9]+ / { next }
         $3 ~ /^[A-Za-z_][A-Za-z0-9_]*=/ { env = env substr($0, index($0, $3)) " "; next }
         { if (prev != "") { d = $2 - t; if (d > 20) printf "%6d  %s\n", d, prev }
           t = $2; prev = env substr($0, index($0, $3)); env = "" }' target/suite-steps.txt |
        sort -rn
}
set -x

cargo test --workspace --all-targets
cargo test --workspace --doc
# Ranks that join through PMIx (the `pmix` feature): under Open MPI's mpirun and Slurm's
# srun --mpi=pmix, the ring, ch4's osu_latency and the real OSU program on the C library.
cargo test --features pmix --test open_mpi --test slurm pmix
# The semantics suite again over libfabric's tcp;ofi_rxm (the `ofi` feature), single- and
# multithreaded (each thread level's VCIs an endpoint of their own): ranks as threads
# and as processes, each its own node and mixed with ch4's shared memory; again with the
# provider's largest message forced down to 4 KiB, so that every longer message goes by RMA
# read; and the process-mode tests (launchers, stress, killed and vanished ranks, floods under
# eager credit, two hosts in network namespaces) with OFI as the network, and its bytes per peer. This build has tcp and
# ofi, so the netmod is chosen at start (`netmod_choice`: each of them by CH4_NETMOD, auto, a
# name not built in).
cargo test --features ofi --test pt2pt --test multithreaded ofi
CH4_OFI_MAX_MSG_SIZE=4096 cargo test --features ofi --test pt2pt ofi
cargo test --features ofi --test process --test flood --test netmod_choice --test two_hosts \
    --test thread_failures --bench memory_per_peer
# And over UCX (the `ucx` feature): the semantics suite over UCX's TCP transport on the
# loopback device, over its shared-memory transports, and with UCX's own choice; the
# process-mode tests with UCX as the network.
UCX_TLS=tcp UCX_NET_DEVICES=lo cargo test --features ucx --test pt2pt --test multithreaded ucx
# ... and with endpoints that ask UCX for its failure guarantee (another rendezvous protocol).
CH4_UCX_ERR_MODE=peer UCX_TLS=tcp UCX_NET_DEVICES=lo cargo test --features ucx --test pt2pt ucx
UCX_TLS=posix,sysv,cma,self cargo test --features ucx --test pt2pt --test multithreaded ucx
cargo test --features ucx --test pt2pt ucx
UCX_TLS=tcp UCX_NET_DEVICES=lo cargo test --features ucx --test process --test flood --test two_hosts \
    --test thread_failures --bench memory_per_peer
# A rank killed mid-rendezvous, with UCX's own failure guarantee on the endpoints.
CH4_UCX_ERR_MODE=peer UCX_TLS=tcp UCX_NET_DEVICES=lo cargo test --features ucx --test process \
    a_receive_from_a_killed
# The C library over the network, each rank its own node (over shared memory it ran with the
# workspace above): over TCP every folder of MPICH's tests (point-to-point, threads,
# collectives, communicators, datatypes, caching, error handling, groups, topologies) and
# tests/c/threads.c, less the two longest stress cases of the collectives (a minute over TCP;
# they ran over shared memory above); over libfabric's tcp;ofi_rxm and UCX's tcp the
# MPI_THREAD_MULTIPLE ones, with one library built with all three netmods (in
# target/abi-tcp-ofi-ucx), the network chosen per job by CH4_NETMOD.
ABI_TEST_MPICH_SKIP="gather_big,nonblocking3 -n 10,nonblocking3 -n 5" CH4_NODE_SIZE=1 \
    cargo test -p ch4-mpi-abi --test threads --test mpich
export UCX_TLS=tcp UCX_NET_DEVICES=lo
ABI_TEST_NETMOD=tcp,ofi,ucx cargo test -p ch4-mpi-abi --test api chosen_at_start
ABI_TEST_NETMOD=tcp,ofi,ucx CH4_NETMOD=ofi CH4_NODE_SIZE=1 \
    cargo test -p ch4-mpi-abi --test threads --test mpich thread
ABI_TEST_NETMOD=tcp,ofi,ucx CH4_NETMOD=ucx CH4_NODE_SIZE=1 \
    cargo test -p ch4-mpi-abi --test threads --test mpich thread
unset UCX_TLS UCX_NET_DEVICES
./scripts/loom.sh
./scripts/tsan.sh

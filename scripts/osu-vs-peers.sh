#!/usr/bin/env bash
# ch4 against MPICH and Open MPI with the same OSU-style loops (benches/osu/): ch4's build, and
# the same programs built with --features peer-mpi over each system MPI through rsmpi. Two
# processes on one node, one rank per core. The host this project is measured on is noisy, so
# every round runs ch4, MPICH and Open MPI one after the other (A B C A B C ...), and the
# results are medians over the rounds with the spread, and ratios of medians.
#
#   ./scripts/osu-vs-peers.sh [--tcp | --ofi | --ucx] [--record LABEL] [rounds] [bench...]
#       (default: 5 rounds; latency bw bibw mbw_mr)
#
# mt_mr is the multithreaded message rate (benches/osu/mt_mr.rs, every library at
# MPI_THREAD_MULTIPLE): its tables' "size" column is the number of thread pairs, its value the
# aggregate rate.
#
# --dry-run checks the arguments and prints what would run, without installing, building or
# running anything (the README's test runs every comparison command of the README this way).
#
# --record LABEL keeps the run in the results record: docs/results/<topic>/<today>-LABEL/
# (topic shared-memory, tcp, ofi or ucx; under-load with --busy or --np), see
# scripts/lib/record.sh.
#
# --tcp measures the network path instead of shared memory, two processes over loopback: ch4
# with every rank its own node (CH4_NODE_SIZE=1: the TCP netmod), MPICH with UCX's TCP
# transport (UCX_TLS=tcp,self), Open MPI with its TCP BTL (--mca btl tcp,self).
#
# --ofi measures libfabric's tcp provider over loopback, every peer matching in the provider:
# ch4 built with the `ofi` feature (CH4_NODE_SIZE=1 FI_PROVIDER=tcp: Debian's libfabric 1.17,
# tcp;ofi_rxm), MPICH 5.0.2's ch4:ofi from PyPI (installed into target/mpich5-venv; it brings
# its own libfabric 2.5 and its native tcp provider; MPIR_CVAR_NOLOCAL=1
# MPIR_CVAR_CH4_NETMOD=ofi FI_PROVIDER=tcp FI_TCP_IFACE=lo) in the "mpich" column, and Open
# MPI's OFI MTL over the same libfabric 1.17 as ch4 (--mca pml cm --mca mtl ofi, provider tcp).
#
# --ucx measures UCX's tcp transport over loopback (UCX_TLS=tcp UCX_NET_DEVICES=lo for all
# three), every peer matching in UCX: ch4 built with the `ucx` feature (CH4_NODE_SIZE=1),
# Debian's MPICH 4.0.2, whose netmod is ch4:ucx (MPIR_CVAR_NOLOCAL=1, so that the peers on this
# node go through UCX too), and Open MPI's pml ucx (--mca pml ucx --mca pml_ucx_tls any
# --mca pml_ucx_devices any).
#
# Under load (shared memory only): --busy pinned runs one busy process (a spinning `yes`) on
# the core of rank 1 for the whole of every run, --busy free the same process unpinned; --np N
# runs N ranks (osu_multi_lat and osu_mbw_mr take any even number), unbound when N is more than
# the cores, so that 4 ranks on 2 cores share them the way the scheduler likes. Results go to
# target/osu-vs-peers-busy-<how>/ and target/osu-vs-peers-np<N>/.
# Under load every size runs long, hundreds of milliseconds or more (see long_args below):
# with OSU's iteration counts 64 KiB bandwidth is timed over about 2 ms and 8-byte latency over
# about 1 ms, less than one scheduler slice, so such a figure only tells whether a preemption
# happened to fall into it, for every library. Long runs measure how a library shares the
# cores, which is what a busy neighbour or oversubscription does to a user's program.
#
# --policies soon,never compares ch4 with itself instead of the peers: its idle policies side
# by side, CH4_YIELD=auto (the column "ch4") and the ones named, interleaved the same way (ch4's
# own builds only; results in <out>-policies/). Meant for the runs under load, where waiting
# decides. (`never` with more ranks than cores spins through whole time slices: minutes a run.)
#
# Writes target/osu-vs-peers/results.tsv (every run: bench, impl, size, value) and modes.tsv
# (the host's mode around each round, see below), prints a table per bench with ch4/MPICH and
# ch4/Open MPI (also into summary.txt), and draws target/osu-vs-peers/<bench>.png.
# Installs what it needs when missing and running as root on Debian: mpich, openmpi, their
# headers, libclang (the mpi crate's bindings), DejaVu fonts (the charts).
# OSU_ARGS_<bench> (e.g. OSU_ARGS_latency="-m 0:1024") overrides a bench's options; several
# option sets separated by ';' run one after the other in the same round (each its own run).
#
# Every run is stopped after OSU_RUN_TIMEOUT seconds (default 600; 0 = never), and each bench of
# each round is bracketed by a probe of the host's mode: see scripts/lib/runs.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/record.sh
. scripts/lib/record.sh
net=shm
busy=""
dry_run=""
np=2
impls=(ch4 mpich openmpi)
while [ $# -gt 0 ]; do
    case "$1" in
        --tcp) net=tcp; shift ;;
        --ofi) net=ofi; shift ;;
        --ucx) net=ucx; shift ;;
        --busy) busy="$2"; shift 2 ;;
        --np) np="$2"; shift 2 ;;
        --record) record_option "${2:-}"; shift 2 ;;
        --dry-run) dry_run=yes; shift ;;
        --policies)
            IFS=, read -r -a impls <<<"${2:-}"
            for p in "${impls[@]}"; do
                case "$p" in
                    soon | never) ;;
                    *) echo "--policies takes soon and/or never, comma-separated, not '${2:-}'" >&2; exit 2 ;;
                esac
            done
            impls=(ch4 "${impls[@]}")
            shift 2
            ;;
        *) break ;;
    esac
done
case "$busy" in
    "" | pinned | free) ;;
    *) echo "--busy takes pinned or free, not '$busy'" >&2; exit 2 ;;
esac
cores=$(nproc)
topic=shared-memory
[ "$net" = shm ] || topic="$net"
[ -z "$busy" ] && [ "$np" = 2 ] || topic=under-load
record_begin "$topic"
rounds="${1:-5}"
shift || true
benches=("$@")
[ ${#benches[@]} -ne 0 ] || benches=(latency bw bibw mbw_mr)
case "$rounds" in
    '' | *[!0-9]* | 0) echo "rounds is a positive number, not '$rounds'" >&2; exit 2 ;;
esac
case "$np" in
    '' | *[!0-9]* | *[13579]) echo "--np takes an even number of ranks, not '$np'" >&2; exit 2 ;;
esac
for b in "${benches[@]}"; do
    case "$b" in
        latency | bw | bibw | mbw_mr | multi_lat | mt_mr) ;;
        *) echo "no bench '$b': latency, bw, bibw, mbw_mr, multi_lat or mt_mr" >&2; exit 2 ;;
    esac
done
if [ -n "$dry_run" ]; then
    echo "would run $rounds rounds of ${benches[*]} on ${impls[*]} ($net, $np ranks${busy:+, a busy process $busy})${record_dir:+, recorded in $record_dir}"
    exit 0
fi

fonts=()
[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || fonts+=(fonts-dejavu-core)
# UCX's headers, for ch4's ucx build.
[ "$net" != ucx ] || pkg-config --atleast-version 1.13 ucx 2>/dev/null || fonts+=(libucx-dev pkg-config)
# shellcheck source=lib/peers.sh
. scripts/lib/peers.sh
install_peers "${fonts[@]}"

examples=()
for b in "${benches[@]}"; do examples+=(--example "osu_$b"); done
# ch4's osu_latency always: it probes the host's mode between runs.
ch4_examples=("${examples[@]}")
[[ " ${benches[*]} " == *" latency "* ]] || ch4_examples+=(--example osu_latency)
echo "building ch4's programs and the peers' (rsmpi over MPICH, over Open MPI)..." >&2
ch4dir=target/release
mpichdir=target/peers-mpich
venv=target/mpich5-venv
if [ "$net" = ofi ]; then
    ch4dir=target/ofi/release
    mpichdir=target/peers-mpich5
    # libfabric alone: the device over OfiNetmod itself (with the default tcp as well, the
    # netmod would be chosen at run time; docs/results/netmods.md compares the two).
    CARGO_TARGET_DIR=target/ofi cargo build --release -q --no-default-features --features ofi \
        "${ch4_examples[@]}"
    if [ ! -x "$venv/bin/mpicc" ]; then
        echo "installing MPICH 5.0.2 from PyPI into $venv..." >&2
        python3 -m venv "$venv"
        "$venv/bin/pip" install -q mpich==5.0.2
    fi
    MPICC="$PWD/$venv/bin/mpicc" CARGO_TARGET_DIR=target/peers-mpich5 \
        cargo build --release -q --features peer-mpi "${examples[@]}"
else
    if [ "$net" = ucx ]; then
        ch4dir=target/ucx/release
        CARGO_TARGET_DIR=target/ucx cargo build --release -q --no-default-features \
            --features ucx "${ch4_examples[@]}"
    else
        cargo build --release -q "${ch4_examples[@]}"
    fi
    [ "${impls[1]:-}" != mpich ] || MPICC=mpicc.mpich CARGO_TARGET_DIR=target/peers-mpich \
        cargo build --release -q --features peer-mpi "${examples[@]}"
fi
[ "${impls[2]:-}" != openmpi ] || MPICC=mpicc.openmpi CARGO_TARGET_DIR=target/peers-openmpi \
    cargo build --release -q --features peer-mpi "${examples[@]}"
cargo build --release -q -p osu-plot

# Three decimals: at 0.1 µs OSU's two would make the ratios steps of 10%.
export OSU_FLOAT_PRECISION="${OSU_FLOAT_PRECISION:-3}"

default_args() {
    case "$1" in
        latency) echo "-m 0:4194304" ;;
        bw | bibw) echo "-m 1:4194304" ;;
        mbw_mr) echo "-m 1:65536" ;;
        multi_lat) echo "-m 0:65536" ;;
        mt_mr) echo "-p 1,2,4,8" ;;
    esac
}

# Under load: sizes in ranges, each with iterations for hundreds of milliseconds or more a size
# on this host (the loops time a tenth of -i above 8 KiB, as OSU does).
long_args() {
    case "$1" in
        latency) echo "-m 0:8192 -i 1000000; -m 16384:4194304 -i 20000" ;;
        bw | bibw) echo "-m 1:8192 -i 20000; -m 16384:262144 -i 10000; -m 524288:4194304 -i 1000" ;;
        mbw_mr) echo "-m 1:65536 -i 20000" ;;
        multi_lat) echo "-m 0:65536 -i 100000" ;;
        mt_mr) echo "-p 1,2,4,8 -i 20000" ;;
    esac
}
under_load=""
[ -z "$busy" ] && [ "$np" -le "$cores" ] || under_load=yes

out=target/osu-vs-peers
[ "$net" = shm ] || out="target/osu-vs-peers-$net"
[ -z "$busy" ] || out="target/osu-vs-peers-busy-$busy"
[ "$np" = 2 ] || out="target/osu-vs-peers-np$np"
[ "${impls[1]:-}" = mpich ] || out="$out-policies"
# Binding: one rank per core while there are enough cores (ch4's launcher does so by itself);
# with more ranks than cores nobody is bound.
bind=core
[ "$np" -le "$cores" ] || bind=none
mkdir -p "$out"
tsv="$out/results.tsv"
printf 'bench\timpl\tsize\tvalue\n' >"$tsv"
# shellcheck source=lib/runs.sh
. scripts/lib/runs.sh
runs_init "$out"
# ch4's self-launch pins one rank per core by default (CH4_BIND); the peers' launchers are
# asked to.
run() {
    local impl="$1" bench="$2"
    shift 2
    local var="OSU_ARGS_$bench"
    local sets
    if [ -n "${!var:-}" ]; then
        sets="${!var}"
    elif [ -n "$under_load" ]; then
        sets=$(long_args "$bench")
    else
        sets=$(default_args "$bench")
    fi
    local prog="osu_$bench"
    local ch4env=() mpichenv=() ompinet=() mpiexec=mpiexec.mpich
    if [ "$net" = tcp ]; then
        ch4env=(CH4_NODE_SIZE=1)
        mpichenv=(-genv UCX_TLS tcp,self)
        ompinet=(--mca pml ob1 --mca btl tcp,self)
    elif [ "$net" = ofi ]; then
        ch4env=(CH4_NODE_SIZE=1 FI_PROVIDER=tcp)
        mpiexec="$venv/bin/mpiexec"
        mpichenv=(-genv LD_LIBRARY_PATH "$PWD/$venv/lib" -genv FI_TCP_IFACE lo
            -genv MPIR_CVAR_NOLOCAL 1 -genv MPIR_CVAR_CH4_NETMOD ofi -genv FI_PROVIDER tcp)
        ompinet=(--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include tcp --mca btl self
            --mca oob_tcp_if_include lo -x FI_TCP_IFACE=lo)
    elif [ "$net" = ucx ]; then
        ch4env=(CH4_NODE_SIZE=1 UCX_TLS=tcp UCX_NET_DEVICES=lo)
        mpichenv=(-genv UCX_TLS tcp -genv UCX_NET_DEVICES lo -genv MPIR_CVAR_NOLOCAL 1)
        ompinet=(--mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any --mca btl self
            -x UCX_TLS=tcp -x UCX_NET_DEVICES=lo)
    fi
    local set args status
    option_sets "$sets"
    for set in "${option_sets[@]}"; do
        read -r -a args <<<"$set"
        busy_start "$busy"
        status=0
        case "$impl" in
            ch4) env CH4_NP="$np" "${ch4env[@]}" "${limit[@]}" "$ch4dir/examples/$prog" "${args[@]}" ;;
            soon | never) env CH4_YIELD="$impl" CH4_NP="$np" "${ch4env[@]}" "${limit[@]}" \
                "$ch4dir/examples/$prog" "${args[@]}" ;;
            mpich) "${limit[@]}" "$mpiexec" -bind-to "$bind" "${mpichenv[@]}" -n "$np" \
                "$mpichdir/release/examples/$prog" "${args[@]}" ;;
            openmpi) "${limit[@]}" mpirun.openmpi --allow-run-as-root --oversubscribe --bind-to "$bind" \
                "${ompinet[@]}" -n "$np" target/peers-openmpi/release/examples/$prog "${args[@]}" ;;
        esac | awk -v b="$bench" -v i="$impl" '/^[0-9]/ { col = (b == "mbw_mr") ? $3 : $2; print b "\t" i "\t" $1 "\t" col }' >>"$tsv" \
            || status=$?
        busy_stop
        run_ended "$status" "$round" "$bench" "$impl"
    done
}

# The host's mode (scripts/lib/runs.sh): ch4's 8-byte latency, two ranks.
probe() {
    CH4_NP=2 "${limit[@]}" "$ch4dir/examples/osu_latency" -m 8:8 2>/dev/null |
        awk '/^8 / { print $2 }' || true
}
for round in $(seq "$rounds"); do
    for b in "${benches[@]}"; do
        echo "round $round/$rounds: $b" >&2
        before=$(probe)
        for impl in "${impls[@]}"; do
            run "$impl" "$b"
        done
        note_mode "$round" "$b" "$before" "$(probe)"
    done
done

# The table (medians, spread, ratios) and one chart per bench.
setup="$net, $np processes, interleaved"
[ -z "$busy" ] || setup="$setup, one busy process ($busy)"
target/release/osu-plot --setup "$setup" "$tsv" "$out" | tee "$out/summary.txt" || plot_status=$?
# The modes and the stopped runs even when nothing was left to plot.
runs_report
record_end "$out"
exit "${plot_status:-0}"

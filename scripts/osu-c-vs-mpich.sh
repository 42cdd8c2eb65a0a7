#!/usr/bin/env bash
# The real OSU 7.2 C programs, one binary per benchmark, run on two libraries of the MPI
# standard ABI: ch4's libmpi_abi.so.1 (under ch4run) and MPICH 5's (PyPI's mpich 5.0.2, under
# its Hydra; "mpich5" in the tables). The binary is built once, with c-abi/bin/mpicc; only
# LD_LIBRARY_PATH changes, so the loops, the buffers and the timing code are the same on both
# sides: the fairest comparison there is. With --debian, the same C sources are also built
# against Debian's MPICH 4.0.2 (mpicc.mpich: "mpich") and Open MPI 4.1 (mpicc.openmpi:
# "openmpi") and run with their launchers, bound one rank per core as ch4run binds: the real
# OSU programs against the peers of scripts/osu-vs-peers.sh, whose Rust loops compare only with
# Rust loops (they give every receive of a window its own buffer; OSU's share one). Interleaved
# rounds (ch4, MPICH 5, [MPICH 4, Open MPI,] ch4, ...), two processes on this host, medians with
# the spread, ratios and charts in target/osu-c-vs-mpich/.
#
#   ./scripts/osu-c-vs-mpich.sh [--debian] [--only IMPLS] [--busy pinned|free] [--np N]
#       [--record LABEL] [rounds] [bench...]
#   (default 3 rounds and latency bw bibw mbw_mr allreduce; any OSU blocking collective works
#   too: bcast, gather, allgather, alltoall, reduce_scatter, ...)
#
# --np N runs every program on N ranks instead of 2 (the collectives at 8, say). With more ranks
# than this host's cores nothing is bound (Open MPI is told --bind-to none: its default then
# refuses to start); results go to target/osu-c-vs-mpich-np<N>/.
#
# --dry-run checks the arguments and prints what would run, without installing, building or
# running anything.
#
# --record LABEL keeps the run in the results record: docs/results/c-library/<today>-LABEL/
# (under-load/ with --busy), see scripts/lib/record.sh.
#
# --only ch4,mpich5,mpich runs only the libraries named (of ch4, mpich5, and with --debian
# mpich and openmpi). Open MPI 4.1's osu_latency_mt, for one, takes milliseconds a message at
# MPI_THREAD_MULTIPLE on this host and exits with an error after printing them.
#
# --debian installs Debian's mpich and openmpi-bin with their -dev packages when missing and
# running as root.
#
# --busy pinned|free runs one busy process (a spinning `yes`) beside the two ranks for the whole
# of every run, on rank 1's core or unpinned, as scripts/osu-vs-peers.sh --busy does; results
# go to target/osu-c-vs-mpich-busy-<how>/. Every size then runs long, hundreds of milliseconds or
# more (long_args below): with OSU's iteration counts a size is timed over a millisecond or
# two, less than one scheduler slice, and its figure only tells whether a preemption fell into
# it.
#
# OSU_ARGS_<bench> replaces a benchmark's arguments (e.g. OSU_ARGS_latency="-m 1:4096");
# several sets separated by ';' run one after the other in the same round. A set with OSU's
# thread option (-t N or -t S:R, the _mt programs) is its own line in the tables, the bench's
# name with the threads appended (latency_mt_t2x2). latency_mt runs at 2 and 4 threads a rank,
# 8 bytes, unless OSU_ARGS_latency_mt says otherwise.
#
# The multithreaded programs (latency_mt at MPI_THREAD_MULTIPLE) run on MPICH 5 with its VCIs
# switched on as its documentation says (MPIR_CVAR_CH4_NUM_VCIS, 4 like ch4's default
# CH4_NUM_VCIS at that level). Debian's MPICH 4.0.2 is built with one VCI (asking for more
# fails its start-up assertion MPIDI_global.n_vcis <= MPIDI_CH4_MAX_VCIS), so it runs as built.
#
# Every run is stopped after OSU_RUN_TIMEOUT seconds (default 600; 0 = never), and each bench of
# each round is bracketed by a probe of the host's mode (the real osu_latency at 8 bytes on
# ch4): see scripts/lib/runs.sh. <out>/modes.tsv and <out>/stopped.tsv.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/record.sh
. scripts/lib/record.sh
rounds=3
benches=()
impls=(ch4 mpich5)
only=""
busy=""
dry_run=""
np=2
while [ $# -gt 0 ]; do
    case "$1" in
        --debian) impls=(ch4 mpich5 mpich openmpi) ;;
        --only)
            [ $# -ge 2 ] || { echo "--only takes a list such as ch4,mpich5" >&2; exit 2; }
            only="$2"
            shift
            ;;
        --busy)
            [ $# -ge 2 ] || { echo "--busy takes pinned or free" >&2; exit 2; }
            busy="$2"
            shift
            ;;
        --record)
            record_option "${2:-}"
            shift
            ;;
        --np)
            [ $# -ge 2 ] || { echo "--np takes a number of ranks" >&2; exit 2; }
            np="$2"
            shift
            ;;
        --dry-run) dry_run=yes ;;
        -*) echo "no option '$1' (see the script's first lines)" >&2; exit 2 ;;
        [0-9]*) rounds="$1" ;;
        *) benches+=("$1") ;;
    esac
    shift
done
case "$np" in
    '' | *[!0-9]* | 0 | 1) echo "--np takes a number of ranks, 2 or more, not '$np'" >&2; exit 2 ;;
esac
case "$busy" in
    '' | pinned | free) ;;
    *) echo "--busy takes pinned or free, not '$busy'" >&2; exit 2 ;;
esac
[ ${#benches[@]} -gt 0 ] || benches=(latency bw bibw mbw_mr allreduce)
if [ -n "$only" ]; then
    chosen=()
    for i in "${impls[@]}"; do
        [[ ",$only," != *",$i,"* ]] || chosen+=("$i")
    done
    [ ${#chosen[@]} -gt 0 ] || { echo "--only names none of ${impls[*]}" >&2; exit 2; }
    impls=("${chosen[@]}")
fi
if [ -z "$busy" ]; then record_begin c-library; else record_begin under-load; fi
[ "$rounds" -gt 0 ] || { echo "rounds is a positive number" >&2; exit 2; }
osu=${THIRD_PARTY_DIR:-../shared/third_party}/osu-micro-benchmarks-7.2/c
for b in "${benches[@]}"; do
    case "$b" in
        *[!a-z_]*) echo "no OSU benchmark '$b'" >&2; exit 2 ;;
    esac
    # Without OSU's sources (a dry run in a clone alone) the names cannot be checked here.
    [ ! -d "$osu" ] || [ -e "$osu/mpi/pt2pt/standard/osu_$b.c" ] ||
        [ -e "$osu/mpi/collective/blocking/osu_$b.c" ] ||
        { echo "no OSU benchmark '$b' in $osu" >&2; exit 2; }
done
if [ -n "$dry_run" ]; then
    echo "would run $rounds rounds of ${benches[*]} on ${impls[*]} at $np ranks${busy:+, a busy process $busy}${record_dir:+, recorded in $record_dir}"
    exit 0
fi

venv=target/mpich5-venv
if [ ! -x "$venv/bin/mpicc_abi" ]; then
    echo "installing MPICH 5.0.2 from PyPI into $venv..." >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q mpich==5.0.2
fi

if [ ${#impls[@]} -gt 2 ] && ! { command -v mpicc.mpich && command -v mpicc.openmpi; } >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mpich libmpich-dev openmpi-bin \
            libopenmpi-dev >/dev/null
    else
        echo "--debian needs Debian's mpich and openmpi-bin (with their -dev packages)" >&2
        exit 1
    fi
fi

cargo build --release -q -p pmi --bin ch4run
cargo build --release -q -p ch4-mpi-abi
cargo build --release -q -p osu-plot
[ -d "$osu" ] || { echo "OSU 7.2's sources are not in $osu (set THIRD_PARTY_DIR to the folder holding osu-micro-benchmarks-7.2)" >&2; exit 1; }
# One build directory per compiler: the standard-ABI binaries (ch4 and MPICH 5 run the same
# ones), Debian's MPICH, Debian's Open MPI.
bindir() {
    case "$1" in
        ch4 | mpich5) echo target/osu-c/bin ;;
        mpich) echo target/osu-c/bin-mpich ;;
        openmpi) echo target/osu-c/bin-openmpi ;;
    esac
}
compiler() {
    case "$1" in
        ch4 | mpich5) echo c-abi/bin/mpicc ;;
        mpich) echo mpicc.mpich ;;
        openmpi) echo mpicc.openmpi ;;
    esac
}
flags=(-O2 -DFIELD_WIDTH=18 -DFLOAT_PRECISION=4 -I "$osu/util")
source_of() {
    if [ -e "$osu/mpi/collective/blocking/osu_$1.c" ]; then
        echo "$osu/mpi/collective/blocking/osu_$1.c"
    else
        echo "$osu/mpi/pt2pt/standard/osu_$1.c"
    fi
}
# Collectives report a latency.
is_collective() { [ -e "$osu/mpi/collective/blocking/osu_$1.c" ]; }
# ch4's osu_latency always: it probes the host's mode between runs.
built=("${benches[@]}")
[[ " ${benches[*]} " == *" latency "* ]] || built+=(latency)
for impl in "${impls[@]}"; do
    [ "$impl" != mpich5 ] || continue # ch4's binaries
    bin=$(bindir "$impl")
    cc=$(compiler "$impl")
    mkdir -p "$bin"
    objs=()
    for u in osu_util osu_util_mpi osu_util_graph osu_util_validation osu_util_papi; do
        "$cc" "${flags[@]}" -c "$osu/util/$u.c" -o "$bin/$u.o"
        objs+=("$bin/$u.o")
    done
    bins=("${benches[@]}")
    [ "$impl" != ch4 ] || bins=("${built[@]}")
    for b in "${bins[@]}"; do
        "$cc" "${flags[@]}" -o "$bin/osu_$b" "$(source_of "$b")" "${objs[@]}" -lm -lpthread
    done
done

# With a busy process: sizes in ranges, each with iterations for hundreds of milliseconds or
# more a size on this host (OSU's -i sets the large messages' count too).
long_args() {
    case "$1" in
        latency) echo "-m 0:8192 -i 1000000; -m 16384:4194304 -i 2000" ;;
        bw | bibw) echo "-m 1:8192 -i 20000; -m 16384:262144 -i 1000; -m 524288:4194304 -i 100" ;;
        mbw_mr) echo "-m 1:65536 -i 20000" ;;
        *) echo "" ;;
    esac
}

out=target/osu-c-vs-mpich
[ -z "$busy" ] || out="target/osu-c-vs-mpich-busy-$busy"
[ "$np" = 2 ] || out="$out-np$np"
# One rank per core while there are cores enough (ch4run binds only when asked; unbound, two
# spinning ranks are sometimes moved and lose up to 20%); none bound beyond.
cores=$(nproc)
if [ "$np" -le "$cores" ]; then
    bind_ch4=(--bind-to core) bind_mpich=(-bind-to core) bind_openmpi=(--bind-to core)
else
    bind_ch4=() bind_mpich=() bind_openmpi=(--bind-to none)
fi
mkdir -p "$out"
tsv="$out/results.tsv"
printf 'bench\timpl\tsize\tvalue\n' >"$tsv"
# shellcheck source=lib/runs.sh
. scripts/lib/runs.sh
runs_init "$out"
run() {
    local impl="$1" b="$2"
    local var="OSU_ARGS_$b"
    local sets="${!var:-}"
    [ -n "$sets" ] || [ -z "$busy" ] || sets=$(long_args "$b")
    # The multithreaded latency at 2 and 4 threads a rank, 8 bytes (OSU's -t S:R).
    [ -n "$sets" ] || [ "$b" != latency_mt ] ||
        sets="-t 2:2 -m 8:8 -i 20000; -t 4:4 -m 8:8 -i 20000"
    local name bin
    # MPICH 5's VCIs for the multithreaded programs only: the others compare as they always did.
    local vcis=()
    [[ "$b" != *_mt ]] || vcis=(MPIR_CVAR_CH4_NUM_VCIS=4)
    bin=$(bindir "$impl")
    local set args status threads
    option_sets "$sets"
    # No options at all: one run with OSU's defaults.
    [ ${#option_sets[@]} -ne 0 ] || option_sets=("")
    for set in "${option_sets[@]}"; do
        read -r -a args <<<"$set"
        threads=$(awk '{ for (i = 1; i < NF; i++) if ($i == "-t") { t = $(i + 1); gsub(":", "x", t); print "_t" t } }' <<<"$set")
        # The table's name for it: collectives are latencies.
        name="$b$threads"
        ! is_collective "$b" || name="${b}_latency"
        busy_start "$busy"
        status=0
        case "$impl" in
            ch4) "${limit[@]}" target/release/ch4run "${bind_ch4[@]}" -n "$np" "$bin/osu_$b" "${args[@]}" ;;
            mpich5) env LD_LIBRARY_PATH="$PWD/$venv/lib" "${vcis[@]}" "${limit[@]}" \
                "$venv/bin/mpiexec" "${bind_mpich[@]}" -n "$np" "$bin/osu_$b" "${args[@]}" ;;
            mpich) "${limit[@]}" mpiexec.mpich "${bind_mpich[@]}" -n "$np" "$bin/osu_$b" "${args[@]}" ;;
            openmpi) "${limit[@]}" mpirun.openmpi --allow-run-as-root --oversubscribe \
                "${bind_openmpi[@]}" -n "$np" "$bin/osu_$b" "${args[@]}" ;;
        esac | awk -v b="$name" -v i="$impl" '
            /^[0-9]/ { col = (b == "mbw_mr") ? $3 : $2; print b "\t" i "\t" $1 "\t" col }
            # osu_barrier prints its latency alone on a line: size 0 in the table.
            /^ *[0-9.]+ *$/ { print b "\t" i "\t0\t" $1 }' >>"$tsv" \
            || status=$?
        busy_stop
        run_ended "$status" "$round" "$b" "$impl"
    done
}
# The host's mode (scripts/lib/runs.sh): the real osu_latency on ch4 at 8 bytes.
probe() {
    "${limit[@]}" target/release/ch4run --bind-to core -n 2 "$(bindir ch4)/osu_latency" -m 8:8 \
        2>/dev/null | awk '/^8 / { print $2 }' || true
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
setup="the real OSU C programs (one binary on ch4 and MPICH 5), $np processes, interleaved"
[ -z "$busy" ] || setup="$setup, one busy process ($busy)"
target/release/osu-plot --setup "$setup" "$tsv" "$out" | tee "$out/summary.txt" || plot_status=$?
# The modes and the stopped runs even when nothing was left to plot.
runs_report
record_end "$out"
exit "${plot_status:-0}"

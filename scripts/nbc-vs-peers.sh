#!/usr/bin/env bash
# Nonblocking collectives against the peers: ch4's own C benchmark (benches/c/nbc.c, OSU's
# method for its nonblocking collective programs: the latency of start-and-wait, and the part of
# it a computation of the same length hides) built once against the MPI standard ABI and run on
# ch4's library (under ch4run) and MPICH 5's (PyPI's mpich 5.0.2, under its Hydra; the same
# binary), and built with Open MPI's mpicc and run under its mpirun. Interleaved rounds, medians
# with the spread, ratios and charts in target/nbc-vs-peers[-np<N>]/.
#
#   ./scripts/nbc-vs-peers.sh [--np N] [--only IMPLS] [--record LABEL] [rounds] [collective...]
#   (default 5 rounds, 2 ranks, iallreduce and ibcast; ibarrier too)
#
# The implementations: ch4, ch4 with its progress thread (CH4_ASYNC_PROGRESS=1: "ch4-async"),
# mpich5 and openmpi; --only picks some (comma-separated), and may add "mpich5-async", MPICH 5
# with its progress thread (MPIR_CVAR_ASYNC_PROGRESS=1), which is not run by default: on this
# 2-core host its thread takes a core from the ranks and an 8-byte Iallreduce takes 3.6 ms
# (ibcast 1.4 ms), so a run of the default sizes outlasts OSU_RUN_TIMEOUT. Each collective gives two tables: <c>_latency
# (µs, start and wait back to back) and <c>_overlap (%, 100 = the computation hid all of it).
# NBC_ARGS replaces the benchmark's arguments (default "-m 4:65536 -i 2000").
#
# More ranks than cores (--np 8 on this host): nothing is bound (Open MPI is told
# --bind-to none). Every run is stopped after OSU_RUN_TIMEOUT seconds (scripts/lib/runs.sh),
# and each round is bracketed by a probe of the host's mode.
#
# --record LABEL keeps the run in docs/results/collectives/<today>-LABEL/.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/record.sh
. scripts/lib/record.sh
rounds=5
colls=()
impls=(ch4 ch4-async mpich5 openmpi)
known=(ch4 ch4-async mpich5 mpich5-async openmpi)
only=""
np=2
while [ $# -gt 0 ]; do
    case "$1" in
        --only)
            [ $# -ge 2 ] || { echo "--only takes a list such as ch4,mpich5" >&2; exit 2; }
            only="$2"
            shift
            ;;
        --np)
            [ $# -ge 2 ] || { echo "--np takes a number of ranks" >&2; exit 2; }
            np="$2"
            shift
            ;;
        --record)
            record_option "${2:-}"
            shift
            ;;
        -*) echo "no option '$1' (see the script's first lines)" >&2; exit 2 ;;
        [0-9]*) rounds="$1" ;;
        iallreduce | ibcast | ibarrier) colls+=("$1") ;;
        *) echo "no collective '$1' (iallreduce, ibcast, ibarrier)" >&2; exit 2 ;;
    esac
    shift
done
case "$np" in
    '' | *[!0-9]* | 0 | 1) echo "--np takes a number of ranks, 2 or more, not '$np'" >&2; exit 2 ;;
esac
[ ${#colls[@]} -gt 0 ] || colls=(iallreduce ibcast)
if [ -n "$only" ]; then
    chosen=()
    for i in "${known[@]}"; do
        [[ ",$only," != *",$i,"* ]] || chosen+=("$i")
    done
    [ ${#chosen[@]} -gt 0 ] || { echo "--only names none of ${known[*]}" >&2; exit 2; }
    impls=("${chosen[@]}")
fi
record_begin collectives
args=(${NBC_ARGS:--m 4:65536 -i 2000})

venv=target/mpich5-venv
if [[ " ${impls[*]} " == *" mpich5"* ]] && [ ! -x "$venv/bin/mpicc_abi" ]; then
    echo "installing MPICH 5.0.2 from PyPI into $venv..." >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q mpich==5.0.2
fi
if [[ " ${impls[*]} " == *" openmpi "* ]] && ! command -v mpicc.openmpi >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openmpi-bin libopenmpi-dev >/dev/null
    else
        echo "openmpi needs Debian's openmpi-bin and libopenmpi-dev" >&2
        exit 1
    fi
fi
cargo build --release -q -p pmi --bin ch4run
cargo build --release -q -p ch4-mpi-abi
cargo build --release -q -p osu-plot
mkdir -p target/nbc/bin target/nbc/bin-openmpi
c-abi/bin/mpicc -O2 -o target/nbc/bin/nbc benches/c/nbc.c
[[ " ${impls[*]} " != *" openmpi "* ]] || mpicc.openmpi -O2 -o target/nbc/bin-openmpi/nbc benches/c/nbc.c

out=target/nbc-vs-peers
[ "$np" = 2 ] || out="$out-np$np"
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
    local impl="$1" c="$2" status=0
    case "$impl" in
        ch4 | ch4-async)
            env CH4_ASYNC_PROGRESS="$([ "$impl" = ch4-async ] && echo 1 || echo 0)" \
                "${limit[@]}" target/release/ch4run "${bind_ch4[@]}" -n "$np" \
                target/nbc/bin/nbc "$c" "${args[@]}" ;;
        mpich5 | mpich5-async)
            env LD_LIBRARY_PATH="$PWD/$venv/lib" \
                MPIR_CVAR_ASYNC_PROGRESS="$([ "$impl" = mpich5-async ] && echo 1 || echo 0)" \
                "${limit[@]}" "$venv/bin/mpiexec" "${bind_mpich[@]}" -n "$np" \
                target/nbc/bin/nbc "$c" "${args[@]}" ;;
        openmpi)
            "${limit[@]}" mpirun.openmpi --allow-run-as-root --oversubscribe "${bind_openmpi[@]}" \
                -n "$np" target/nbc/bin-openmpi/nbc "$c" "${args[@]}" ;;
    esac | awk -v c="$c" -v i="$impl" '
        /^[0-9]/ { print c "_latency\t" i "\t" $1 "\t" $4; print c "_overlap\t" i "\t" $1 "\t" $5 }' \
        >>"$tsv" || status=$?
    run_ended "$status" "$round" "$c" "$impl"
}
# The host's mode (scripts/lib/runs.sh): ch4's Iallreduce at 8 bytes between two ranks.
probe() {
    "${limit[@]}" target/release/ch4run --bind-to core -n 2 target/nbc/bin/nbc iallreduce \
        -m 8:8 -i 20000 2>/dev/null | awk '/^8 / { print $4 }' || true
}
for round in $(seq "$rounds"); do
    for c in "${colls[@]}"; do
        echo "round $round/$rounds: $c" >&2
        before=$(probe)
        for impl in "${impls[@]}"; do
            run "$impl" "$c"
        done
        note_mode "$round" "$c" "$before" "$(probe)"
    done
done
setup="ch4's nbc benchmark (OSU's method; one binary on ch4 and MPICH 5), $np processes, interleaved"
target/release/osu-plot --setup "$setup" "$tsv" "$out" | tee "$out/summary.txt" || plot_status=$?
runs_report
record_end "$out"
exit "${plot_status:-0}"

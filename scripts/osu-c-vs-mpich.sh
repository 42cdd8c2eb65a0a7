#!/usr/bin/env bash
# The real OSU 7.2 C programs, one binary per benchmark, run on two libraries of the MPI
# standard ABI: ch4's libmpi_abi.so.1 (under ch4run) and MPICH 5's (PyPI's mpich 5.0.2, under
# its Hydra). The binary is built once, with c-abi/bin/mpicc; only LD_LIBRARY_PATH changes, so
# the loops, the buffers and the timing code are the same on both sides: the fairest comparison
# there is. Interleaved rounds (ch4, MPICH, ch4, MPICH, ...), two processes on this host,
# medians with the spread, ratios and charts in target/osu-c-vs-mpich/. The Rust-loop comparison
# against MPICH 4 and Open MPI is scripts/osu-vs-peers.sh.
#
#   ./scripts/osu-c-vs-mpich.sh [rounds] [latency bw bibw mbw_mr allreduce ...]   (default 3, these five)
#   (any OSU blocking collective works too: bcast, gather, allgather, alltoall, reduce_scatter, ...)
#
# OSU_ARGS_<bench> replaces a benchmark's arguments (e.g. OSU_ARGS_latency="-m 1:4096").
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=3
benches=()
for a in "$@"; do
    case "$a" in
        [0-9]*) rounds="$a" ;;
        *) benches+=("$a") ;;
    esac
done
[ ${#benches[@]} -gt 0 ] || benches=(latency bw bibw mbw_mr allreduce)

venv=target/mpich5-venv
if [ ! -x "$venv/bin/mpicc_abi" ]; then
    echo "installing MPICH 5.0.2 from PyPI into $venv..." >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q mpich==5.0.2
fi

cargo build --release -q -p pmi --bin ch4run
cargo build --release -q -p ch4-mpi-abi
cargo build --release -q -p osu-plot
osu=../shared/third_party/osu-micro-benchmarks-7.2/c
bin=target/osu-c/bin
mkdir -p "$bin"
flags=(-O2 -DFIELD_WIDTH=18 -DFLOAT_PRECISION=4 -I "$osu/util")
objs=()
for u in osu_util osu_util_mpi osu_util_graph osu_util_validation osu_util_papi; do
    c-abi/bin/mpicc "${flags[@]}" -c "$osu/util/$u.c" -o "$bin/$u.o"
    objs+=("$bin/$u.o")
done
source_of() {
    if [ -e "$osu/mpi/collective/blocking/osu_$1.c" ]; then
        echo "$osu/mpi/collective/blocking/osu_$1.c"
    else
        echo "$osu/mpi/pt2pt/standard/osu_$1.c"
    fi
}
# Collectives report a latency.
is_collective() { [ -e "$osu/mpi/collective/blocking/osu_$1.c" ]; }
for b in "${benches[@]}"; do
    c-abi/bin/mpicc "${flags[@]}" -o "$bin/osu_$b" "$(source_of "$b")" "${objs[@]}" -lm -lpthread
done

out=target/osu-c-vs-mpich
mkdir -p "$out"
tsv="$out/results.tsv"
printf 'bench\timpl\tsize\tvalue\n' >"$tsv"
run() {
    local impl="$1" b="$2"
    local var="OSU_ARGS_$b"
    local args
    read -r -a args <<<"${!var:-}"
    # The table's name for it: collectives are latencies.
    local name="$b"
    ! is_collective "$b" || name="${b}_latency"
    case "$impl" in
        ch4) target/release/ch4run -n 2 "$bin/osu_$b" "${args[@]}" ;;
        mpich) LD_LIBRARY_PATH="$PWD/$venv/lib" "$venv/bin/mpiexec" -bind-to core -n 2 \
            "$bin/osu_$b" "${args[@]}" ;;
    esac | awk -v b="$name" -v i="$impl" '/^[0-9]/ { col = (b == "mbw_mr") ? $3 : $2; print b "\t" i "\t" $1 "\t" col }' >>"$tsv"
}
for r in $(seq "$rounds"); do
    for b in "${benches[@]}"; do
        echo "round $r/$rounds: $b" >&2
        for impl in ch4 mpich; do
            run "$impl" "$b"
        done
    done
done
target/release/osu-plot --setup "the real OSU C programs, one binary on both libraries, 2 processes, interleaved" "$tsv" "$out"

#!/usr/bin/env bash
# What the C skin costs, in instructions (valgrind's callgrind: exact and repeatable on a
# noisy host). The same loop on MPI_COMM_SELF, 8 bytes, once as a C program through
# libmpi_abi.so.1 (c-abi/tests/c/isend_loop.c) and once as a Rust program calling the device
# (c-abi/examples/isend_loop.rs), the Rust one twice: with its arguments visible to the
# compiler, and "opaque" (black_box, as a program's run-time values; black_box itself costs a
# few stores and loads). Two rounds: MPI_Irecv + MPI_Isend + two MPI_Wait, and MPI_Send +
# MPI_Recv (osu_latency's calls). Each program runs N and 2N rounds; the difference divided
# by N is one round, free of start-up.
#
#   ./scripts/c-abi-overhead.sh [N]      (default 20000)
#
# And in time: `latency [ROUNDS]` runs the real OSU osu_latency (built with c-abi/bin/mpicc)
# and the Rust loop (examples osu_latency) under ch4run, 1-64 bytes, interleaved C, Rust, C,
# Rust, ...; per size the median of the per-round ratios C / Rust with their range. Run it on
# a quiet host.
#
#   ./scripts/c-abi-overhead.sh latency [ROUNDS]      (default 7)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = latency ]; then
    rounds="${2:-7}"
    cargo build --release -q -p pmi --bin ch4run
    cargo build --release -q -p ch4-mpi-abi
    cargo build --release -q -p ch4 --example osu_latency
    osu=${THIRD_PARTY_DIR:-../shared/third_party}/osu-micro-benchmarks-7.2/c
    [ -d "$osu" ] || { echo "OSU 7.2's sources are not in $osu (set THIRD_PARTY_DIR to the folder holding osu-micro-benchmarks-7.2)" >&2; exit 1; }
    out=target/c-abi-overhead
    mkdir -p "$out"
    flags=(-O2 -DFIELD_WIDTH=18 -DFLOAT_PRECISION=4 -I "$osu/util")
    c-abi/bin/mpicc "${flags[@]}" -o "$out/osu_latency" "$osu/mpi/pt2pt/standard/osu_latency.c" \
        "$osu/util/osu_util.c" "$osu/util/osu_util_mpi.c" "$osu/util/osu_util_graph.c" \
        "$osu/util/osu_util_validation.c" "$osu/util/osu_util_papi.c" -lm -lpthread
    args=(-m 1:64 -i 50000 -x 5000)
    : >"$out/latency.tsv"
    for r in $(seq "$rounds"); do
        target/release/ch4run -n 2 "$out/osu_latency" "${args[@]}" |
            awk -v r="$r" '$1 ~ /^[0-9]+$/ { print r "\tC\t" $1 "\t" $2 }' >>"$out/latency.tsv"
        OSU_FLOAT_PRECISION=4 target/release/ch4run -n 2 target/release/examples/osu_latency "${args[@]}" |
            awk -v r="$r" '$1 ~ /^[0-9]+$/ { print r "\tRust\t" $1 "\t" $2 }' >>"$out/latency.tsv"
    done
    echo "# size  C (us, median)  Rust (us, median)  C/Rust (median of per-round ratios, range), $rounds rounds"
    python3 - "$out/latency.tsv" <<'PY'
import sys, statistics as st
rows = [l.split("\t") for l in open(sys.argv[1]).read().split("\n") if l]
by = {}
for r, side, size, us in rows:
    by.setdefault(int(size), {}).setdefault(side, {})[r] = float(us)
for size in sorted(by):
    c, rust = by[size]["C"], by[size]["Rust"]
    ratios = [c[r] / rust[r] for r in c if r in rust]
    print(f"{size:6d}  {st.median(c.values()):.4f}  {st.median(rust.values()):.4f}  "
          f"{st.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})")
PY
    exit 0
fi
n="${1:-20000}"
command -v valgrind >/dev/null || {
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null
}
cargo build --release -q -p ch4-mpi-abi --lib --example isend_loop
out=target/c-abi-overhead
mkdir -p "$out"
c-abi/bin/mpicc -O2 -o "$out/isend_loop" c-abi/tests/c/isend_loop.c
total() { callgrind_annotate "$1" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }'; }
# per_round NAME PROGRAM ARGS...: instructions of one round
per_round() {
    local name="$1" prog="$2"
    shift 2
    for k in 1 2; do
        valgrind --tool=callgrind --callgrind-out-file="$out/$name.$k" "$prog" $((n * k)) "$@" >/dev/null 2>&1
    done
    echo $(( ($(total "$out/$name.2") - $(total "$out/$name.1")) / n ))
}
rust=target/release/examples/isend_loop
for round in nonblocking blocking; do
    arg=()
    [ "$round" = blocking ] && arg=(blocking)
    c=$(per_round "c-$round" "$out/isend_loop" "${arg[@]}")
    r=$(per_round "rust-$round" "$rust" "${arg[@]}")
    o=$(per_round "rust-opaque-$round" "$rust" "${arg[@]}" opaque)
    calls=4
    [ "$round" = blocking ] && calls=2
    echo "$round round: C $c, Rust $r, Rust opaque $o instructions;" \
        "C over Rust $(( (c - r) / calls )) per call, over Rust opaque $(( (c - o) / calls ))"
done
echo "profiles: $out/{c,rust,rust-opaque}-{nonblocking,blocking}.2 (callgrind_annotate --inclusive=yes)"

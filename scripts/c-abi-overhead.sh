#!/usr/bin/env bash
# What the C skin costs, in instructions (valgrind's callgrind: exact and repeatable on a
# noisy host): the same loop of MPI_Irecv + MPI_Isend to itself + two MPI_Wait, 8 bytes, once
# as a C program through libmpi_abi.so.1 (c-abi/tests/c/isend_loop.c) and once as a Rust
# program calling the device (c-abi/examples/isend_loop.rs). Each runs N and 2N rounds; the
# difference divided by N is one round, free of start-up. Then the per-call split for the
# isend: the C function's inclusive cost against the device isend's.
#
#   ./scripts/c-abi-overhead.sh [N]      (default 20000)
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-20000}"
command -v valgrind >/dev/null || {
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null
}
cargo build --release -q -p ch4-mpi-abi --lib --example isend_loop
out=target/c-abi-overhead
mkdir -p "$out"
c-abi/bin/mpicc -O2 -o "$out/isend_loop" c-abi/tests/c/isend_loop.c
total() { callgrind_annotate "$1" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }'; }
incl() { # inclusive count of the first function matching $2 in profile $1
    callgrind_annotate --inclusive=yes --threshold=100 "$1" 2>/dev/null |
        awk -v pat="$2" 'index($0, pat) { gsub(",", "", $1); print $1; exit }'
}
for side in c rust; do
    for k in 1 2; do
        if [ "$side" = c ]; then prog="$out/isend_loop"; else prog=target/release/examples/isend_loop; fi
        valgrind --tool=callgrind --callgrind-out-file="$out/$side.$k" "$prog" $((n * k)) >/dev/null 2>&1
    done
done
per() { echo $(( ($(total "$out/$1.2") - $(total "$out/$1.1")) / n )); }
per_fn() { echo $(( ($(incl "$out/$1.2" "$2") - $(incl "$out/$1.1" "$2")) / n )); }
echo "one round (irecv + isend + 2 waits), instructions: C $(per c), Rust $(per rust)"
echo "MPI_Isend (C, inclusive): $(per_fn c 'lib.rs:MPI_Isend [')"
echo "MPI_Irecv (C, inclusive): $(per_fn c 'lib.rs:MPI_Irecv [')"
echo "MPI_Wait x2 (C, inclusive): $(per_fn c 'lib.rs:MPI_Wait [')"
echo "Device::isend (Rust, inclusive): $(per_fn rust 'Device<N,S>::isend [')"

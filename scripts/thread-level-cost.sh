#!/usr/bin/env bash
# What MPI_THREAD_MULTIPLE costs a rank with one communicating thread: the 8-byte osu_latency
# and osu_mbw_mr between two processes at the single level and with --multiple (the multiple
# level, CH4_NUM_VCIS VCIs, 4 by default), interleaved round by round, then the medians, their
# spread and the per-round ratios. This host swings between two speeds (see
# docs/results/shared-memory.md): compare only rounds of one mode.
#
#   ./scripts/thread-level-cost.sh [rounds]        (default 7)
#
# Prints one line a round and level (round, level, latency in µs, messages/s) and the summary.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-7}"
case "$rounds" in
    *[!0-9]* | 0) echo "rounds is a positive number, not '$rounds'" >&2; exit 2 ;;
esac
cargo build --release -q --example osu_latency --example osu_mbw_mr
export OSU_FLOAT_PRECISION=3 CH4_NP=2
rows=$(mktemp)
trap 'rm -f "$rows"' EXIT
for r in $(seq 1 "$rounds"); do
    for level in single multiple; do
        extra=()
        [ "$level" = multiple ] && extra=(--multiple)
        lat=$(target/release/examples/osu_latency -m 8:8 -i 200000 -x 20000 "${extra[@]}" |
            awk '$1 == 8 { print $2 }')
        rate=$(target/release/examples/osu_mbw_mr -m 8:8 -i 2000 -x 200 "${extra[@]}" |
            awk '$1 == 8 { print $3 }')
        echo "$r $level $lat $rate" | tee -a "$rows"
    done
done
python3 - "$rows" <<'EOF'
import statistics as st
import sys

rows = [line.split() for line in open(sys.argv[1])]
for col, name in ((2, "latency (µs)"), (3, "message rate (/s)")):
    single = [float(r[col]) for r in rows if r[1] == "single"]
    multiple = [float(r[col]) for r in rows if r[1] == "multiple"]
    ratios = [m / s for s, m in zip(single, multiple)]
    print(
        f"{name}: single {st.median(single):.4g} [{min(single):.4g}-{max(single):.4g}], "
        f"multiple {st.median(multiple):.4g} [{min(multiple):.4g}-{max(multiple):.4g}], "
        f"multiple/single {st.median(ratios):.3f} [{min(ratios):.3f}-{max(ratios):.3f}]"
    )
EOF

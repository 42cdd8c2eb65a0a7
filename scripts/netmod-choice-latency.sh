#!/usr/bin/env bash
# What choosing the netmod at run time costs in time: ch4's osu_latency between two processes,
# each its own node, built with one netmod (tcp, ofi, ucx: the device over that netmod's type)
# against built with all three (the device over netmod_any's enum, CH4_NETMOD naming the same
# netmod), interleaved per network (single, enum; enum, single in the next round), ROUNDS rounds.
# Prints per size the medians, their ratio, and the median and spread of the per-round ratios.
#
#   ./scripts/netmod-choice-latency.sh [ROUNDS] [--dry-run]        (default 15)
#
# Needs libfabric and UCX with their pkg-config files (Debian: libfabric-dev, libucx-dev).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=15
for a in "$@"; do
    case "$a" in
        --dry-run) dry_run=yes ;;
        *[!0-9]* | 0) echo "ROUNDS is a positive number, not '$a'" >&2; exit 2 ;;
        *) rounds="$a" ;;
    esac
done
if [ -n "${dry_run:-}" ]; then
    echo "would build osu_latency four times (tcp, ofi, ucx, all three) and run $rounds interleaved rounds"
    exit 0
fi
dir=target/netmod-choice
mkdir -p "$dir"
build() { # name, cargo feature arguments...
    local name="$1"
    shift
    cargo build -q --release "$@" --example osu_latency
    cp target/release/examples/osu_latency "$dir/$name"
}
build enum --features ofi,ucx
build tcp
build ofi --no-default-features --features ofi
build ucx --no-default-features --features ucx
out="$dir/latency.tsv"
: >"$out"
for round in $(seq "$rounds"); do
    echo "round $round/$rounds" >&2
    for net in tcp ofi ucx; do
        case $net in
            tcp) env=(CH4_NODE_SIZE=1) ;;
            ofi) env=(CH4_NODE_SIZE=1 FI_PROVIDER=tcp) ;;
            ucx) env=(CH4_NODE_SIZE=1 UCX_TLS=tcp UCX_NET_DEVICES=lo) ;;
        esac
        order="single enum"
        [ $((round % 2)) = 0 ] && order="enum single"
        for v in $order; do
            if [ "$v" = single ]; then
                bin="$dir/$net" extra=()
            else
                bin="$dir/enum" extra=(CH4_NETMOD=$net)
            fi
            env CH4_NP=2 "${env[@]}" "${extra[@]}" timeout 120 "$bin" -m 8:65536 2>/dev/null |
                awk -v r="$round" -v n="$net" -v v="$v" '/^[0-9]/ { print r "\t" n "\t" v "\t" $1 "\t" $2 }' >>"$out"
        done
    done
done
python3 - "$out" "$rounds" <<'PY'
import collections, statistics as st, sys
d = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    r, n, v, size, lat = line.split()
    d[(n, int(size), v)][int(r)] = float(lat)
print(f"# osu_latency (us), 2 processes each its own node, {sys.argv[2]} interleaved rounds")
print("# net   size  single median (min-max)   enum median (min-max)   enum/single  per-round ratio median (min-max)")
for n in ["tcp", "ofi", "ucx"]:
    for size in sorted({k[1] for k in d if k[0] == n}):
        s, e = d[(n, size, "single")], d[(n, size, "enum")]
        rounds = sorted(set(s) & set(e))
        if not rounds:
            continue
        a, b = [s[r] for r in rounds], [e[r] for r in rounds]
        q = sorted(e[r] / s[r] for r in rounds)
        print(f"{n:5} {size:6d}  {st.median(a):7.2f} ({min(a):.2f}-{max(a):.2f})   {st.median(b):7.2f} ({min(b):.2f}-{max(b):.2f})   "
              f"{st.median(b) / st.median(a):.3f}   {st.median(q):.3f} ({q[0]:.2f}-{q[-1]:.2f})")
PY

#!/usr/bin/env bash
# How much of a transfer hides behind computation, with ch4's progress thread and without:
# ch4's osu_overlap (benches/osu/overlap.rs; OSU's definition, for point-to-point) on two ranks,
# interleaved round by round (route, computation, thread off then on), the ranges over the
# rounds per cell.
#
#   ./scripts/overlap.sh [rounds] [route...]     (default 2 rounds; shm tcp)
#
# Routes: shm (shared memory streaming through its rings, CH4_SHM_CMA=0: the case that needs the
# sender's progress; its single-copy reads need only the receiver's), tcp (every rank its own
# node over loopback), ofi and ucx (the same over libfabric's tcp;ofi_rxm and UCX's tcp: builds
# with those features, in target/ofi and target/ucx, as osu-vs-peers.sh makes them).
# Computations: sleep (leaves the core to the progress thread) and spin (shares it: on a host
# with no spare core the scheduler's split decides). OVERLAP_ARGS overrides the sizes and
# iterations (default "-m 1048576:16777216 -i 12").
#
# Rows in target/overlap/results.tsv (round, route, computation, thread, size, pure_us,
# sender, receiver, both); the table on standard output and in target/overlap/summary.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-2}"
shift || true
routes=("$@")
[ ${#routes[@]} -gt 0 ] || routes=(shm tcp)
case "$rounds" in
    '' | *[!0-9]* | 0) echo "rounds is a positive number, not '$rounds'" >&2; exit 2 ;;
esac
for r in "${routes[@]}"; do
    case "$r" in
        shm | tcp) cargo build --release -q --example osu_overlap ;;
        ofi) CARGO_TARGET_DIR=target/ofi cargo build --release -q --no-default-features \
            --features ofi --example osu_overlap ;;
        ucx) CARGO_TARGET_DIR=target/ucx cargo build --release -q --no-default-features \
            --features ucx --example osu_overlap ;;
        *) echo "no route '$r': shm, tcp, ofi or ucx" >&2; exit 2 ;;
    esac
done
read -r -a args <<<"${OVERLAP_ARGS:--m 1048576:16777216 -i 12}"
out=target/overlap
mkdir -p "$out"
tsv="$out/results.tsv"
printf 'round\troute\tcompute\tthread\tsize\tpure_us\tsender\treceiver\tboth\n' >"$tsv"
for round in $(seq "$rounds"); do
    for route in "${routes[@]}"; do
        for compute in sleep spin; do
            for thread in off on; do
                env=() opts=()
                exe=target/release/examples/osu_overlap
                case "$route" in
                    shm) env=(CH4_SHM_CMA=0) ;;
                    tcp) env=(CH4_NODE_SIZE=1) ;;
                    ofi) env=(CH4_NODE_SIZE=1 FI_PROVIDER=tcp) exe=target/ofi/release/examples/osu_overlap ;;
                    ucx) env=(CH4_NODE_SIZE=1 UCX_TLS=tcp UCX_NET_DEVICES=lo) exe=target/ucx/release/examples/osu_overlap ;;
                esac
                [ "$compute" != sleep ] || opts+=(--sleep)
                [ "$thread" != on ] || opts+=(--async)
                echo "round $round/$rounds: $route, computing by ${compute}ing, thread $thread" >&2
                env "${env[@]}" "$exe" "${opts[@]}" "${args[@]}" |
                    awk -v r="$round" -v ro="$route" -v c="$compute" -v t="$thread" \
                        '/^[0-9]/ { print r "\t" ro "\t" c "\t" t "\t" $1 "\t" $2 "\t" $3 "\t" $4 "\t" $5 }' >>"$tsv"
            done
        done
    done
done
# Per route, computation and size: each case's overlap as min-max over the rounds, off / on.
awk -F'\t' 'NR > 1 {
        key = $2 "\t" $3 "\t" $5
        if (!(key in seen)) { seen[key] = 1; order[++n] = key }
        for (col = 7; col <= 9; col++) {
            cell = key SUBSEP $4 SUBSEP col
            if (!(cell in lo) || $col + 0 < lo[cell]) lo[cell] = $col + 0
            if (!(cell in hi) || $col + 0 > hi[cell]) hi[cell] = $col + 0
        }
    }
    END {
        print "overlap %, min-max over the rounds: thread off / on"
        printf "%-6s %-6s %10s  %-16s %-16s %-16s\n", "route", "comp", "size", "sender", "receiver", "both"
        for (i = 1; i <= n; i++) {
            split(order[i], k, "\t")
            line = sprintf("%-6s %-6s %10s", k[1], k[2], k[3])
            for (col = 7; col <= 9; col++) {
                off = order[i] SUBSEP "off" SUBSEP col
                on = order[i] SUBSEP "on" SUBSEP col
                line = line sprintf("  %-16s", sprintf("%.0f-%.0f / %.0f-%.0f", lo[off], hi[off], lo[on], hi[on]))
            }
            print line
        }
    }' "$tsv" | tee "$out/summary.txt"

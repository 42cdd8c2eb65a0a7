#!/usr/bin/env bash
# The soak (examples/soak.rs) on every route: random sizes (0 B-1 MiB, mostly small), tags and
# wildcards among several ranks, several threads a rank at MPI_THREAD_MULTIPLE, every message
# checked for order (MPI's non-overtaking rule, wildcards included) and content, resident memory
# sampled. One table at the end; exits nonzero if any run lost, misordered or corrupted a
# message, stalled, or grew after warm-up.
#
#   ./scripts/soak.sh [--dry-run] [messages] [route...]   (default 1e7 messages a run; every route)
#
# Routes: shm (every rank on one node: ch4's shared memory), tcp (every rank its own node,
# CH4_NODE_SIZE=1: the TCP netmod over loopback), ofi (libfabric's tcp;ofi_rxm, the `ofi` build
# in target/ofi), ucx (UCX's tcp transport on lo, the `ucx` build in target/ucx), ucx-shm (UCX
# between ranks of separate ch4 nodes over UCX's own shared-memory transports).
# SOAK_RANKS (default "4 8") and SOAK_THREADS (default 4) say which jobs run on each route;
# CH4_NUM_VCIS defaults to 3 here, so that some threads of a rank share a VCI. SOAK_ARGS adds
# options to every run (e.g. "--max-size 65536 --seed 7"); SOAK_TIMEOUT bounds each run in
# seconds (default 7200).
#
# Logs in target/soak/<route>-<ranks>x<threads>.log, the table in target/soak/summary.txt
# (SOAK_OUT names another directory, so that two invocations can run side by side).
set -euo pipefail
cd "$(dirname "$0")/.."
dry_run=no
args=()
for a in "$@"; do
    if [ "$a" = --dry-run ]; then dry_run=yes; else args+=("$a"); fi
done
messages="${args[0]:-10000000}"
routes=("${args[@]:1}")
[ ${#routes[@]} -gt 0 ] || routes=(shm tcp ofi ucx ucx-shm)
case "$messages" in
    '' | *[!0-9e]* | e* | *e*e*) echo "messages is a count (10000000 or 1e7), not '$messages'" >&2; exit 2 ;;
esac
for r in "${routes[@]}"; do
    case "$r" in
        shm | tcp | ofi | ucx | ucx-shm) ;;
        *) echo "no route '$r': shm, tcp, ofi, ucx or ucx-shm" >&2; exit 2 ;;
    esac
done
read -r -a ranks_list <<<"${SOAK_RANKS:-4 8}"
read -r -a threads_list <<<"${SOAK_THREADS:-4}"
read -r -a extra <<<"${SOAK_ARGS:-}"
export CH4_NUM_VCIS="${CH4_NUM_VCIS:-3}"
timeout_s="${SOAK_TIMEOUT:-7200}"

if [ "$dry_run" = yes ]; then
    echo "would build the soak for ${routes[*]} and run $messages messages on each with" \
        "${ranks_list[*]} ranks x ${threads_list[*]} threads (CH4_NUM_VCIS=$CH4_NUM_VCIS)"
    exit 0
fi

export CARGO_INCREMENTAL=0
built_default=no built_ofi=no built_ucx=no
for r in "${routes[@]}"; do
    case "$r" in
        shm | tcp)
            [ "$built_default" = yes ] ||
                cargo build --release -q -p pmi --bin ch4run -p ch4 --example soak
            built_default=yes ;;
        ofi)
            [ "$built_ofi" = yes ] || CARGO_TARGET_DIR=target/ofi cargo build --release -q \
                --no-default-features --features ofi -p ch4 --example soak
            built_ofi=yes ;;
        ucx | ucx-shm)
            [ "$built_ucx" = yes ] || CARGO_TARGET_DIR=target/ucx cargo build --release -q \
                --no-default-features --features ucx -p ch4 --example soak
            built_ucx=yes ;;
    esac
done
# The launcher does not depend on the netmod: one build serves every route.
[ -x target/release/ch4run ] || cargo build --release -q -p pmi --bin ch4run

out="${SOAK_OUT:-target/soak}"
mkdir -p "$out"
rows="$out/rows.tsv"
: >"$rows"
failed=0
for route in "${routes[@]}"; do
    for ranks in "${ranks_list[@]}"; do
        for threads in "${threads_list[@]}"; do
            env=() exe=target/release/examples/soak
            case "$route" in
                shm) env=() ;;
                tcp) env=(CH4_NODE_SIZE=1) ;;
                ofi) env=(CH4_NODE_SIZE=1 FI_PROVIDER=tcp) exe=target/ofi/release/examples/soak ;;
                ucx) env=(CH4_NODE_SIZE=1 UCX_TLS=tcp UCX_NET_DEVICES=lo) exe=target/ucx/release/examples/soak ;;
                ucx-shm) env=(CH4_NODE_SIZE=1 "UCX_TLS=posix,sysv,cma,self") exe=target/ucx/release/examples/soak ;;
            esac
            log="$out/$route-${ranks}x$threads.log"
            echo "soak: $route, $ranks ranks x $threads threads, $messages messages (log: $log)" >&2
            set +e
            env "${env[@]}" timeout "$timeout_s" target/release/ch4run -n "$ranks" "$exe" \
                -m "$messages" -t "$threads" --label "$route" "${extra[@]}" >"$log" 2>&1
            rc=$?
            set -e
            line=$(grep '^soak: result:' "$log" | tail -n 1 || true)
            if [ "$rc" != 0 ] || [ -z "$line" ]; then
                failed=1
                echo "soak: $route ${ranks}x$threads FAILED (exit $rc):" >&2
                grep -E 'soak: |error|panicked' "$log" | head -n 30 >&2 || true
            fi
            if [ -z "$line" ]; then
                [ "$rc" = 124 ] && why=timeout || why="exit $rc"
                printf '%s\t%s\t%s\t%s\t-\t-\t-\t-\t-\t-\t%s\n' \
                    "$route" "$ranks" "$threads" "$messages" "FAILED ($why)" >>"$rows"
                continue
            fi
            echo "$line" | awk -v rc="$rc" '{
                for (i = 3; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = substr($i, length(kv[1]) + 2) }
                # The verdict is last and may hold spaces: "FAIL(1 lost, 2 corrupt)".
                if (match($0, /verdict=.*/)) v["verdict"] = substr($0, RSTART + 8)
                printf "%s\t%s\t%s\t%s\t%s\t%s\t%s/%s/%s/%s\t%s\t%s\t%+d KiB (%+.1f%%)\t%s\n",
                    v["netmod"], v["ranks"], v["threads"], v["messages"], v["time_s"], v["msgs_per_s"],
                    v["lost"], v["misordered"], v["corrupt"], v["extra"],
                    v["rss_warm_kib"], v["rss_end_kib"], v["growth_kib"], v["growth_pct"],
                    (rc == 0 ? v["verdict"] : v["verdict"] " (exit " rc ")")
            }' >>"$rows"
        done
    done
done
{
    printf '%-8s %5s %7s %10s %9s %9s %-22s %12s %12s %-20s %s\n' route ranks threads messages \
        time_s msgs/s lost/misord/corrupt/dup "RSS warm KiB" "RSS end KiB" "growth (max rank)" verdict
    awk -F'\t' '{ printf "%-8s %5s %7s %10s %9s %9s %-22s %12s %12s %-20s %s\n", $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11 }' "$rows"
} | tee "$out/summary.txt"
exit "$failed"

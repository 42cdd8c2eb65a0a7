#!/usr/bin/env bash
# The flood (benches/osu/flood.rs) on ch4 and, with the very same loop built over the system
# MPI through rsmpi (--features peer-mpi), on MPICH and Open MPI: four senders each send
# `-n` blocking 1 KiB messages to rank 0, which is busy for 3 s first ("sleep") or takes each
# sender's messages in runs of 100 tags backwards ("reverse"), or nonblocking ones, a thousand
# at a time, to the busy rank 0 ("window"). Every rank's growth of resident
# memory over its idle size, and the time, per implementation and configuration, one after
# the other (A B C A B C ...) for `rounds` rounds.
#
#   ./scripts/flood-vs-peers.sh [--tcp] [--record LABEL] [rounds] [messages]
#       (default: 1 round, 1000000)
#
# FLOOD_MODES picks the configurations (default "sleep reverse window").
# A run that takes longer than FLOOD_TIMEOUT seconds (default 300) is stopped and reported as
# such (MPICH 4.0.2 scans its unexpected queue linearly: receiving in reverse runs took 13 s
# for 10,000 messages a sender here and does not finish for a million).
# --tcp: ch4 with every rank its own node (CH4_NODE_SIZE=1), MPICH over UCX's TCP transport
# (UCX_TLS=tcp,self), Open MPI over its TCP BTL. Five ranks on this host's cores are
# oversubscribed; every launcher is told so. Installs mpich, openmpi and libclang when missing
# (root, Debian). Writes target/flood-vs-peers/results.tsv and the table as summary.txt;
# --dry-run checks the arguments and prints what would run; --record LABEL keeps them in
# docs/results/flow-control/<today>-LABEL/ (scripts/lib/record.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/record.sh
. scripts/lib/record.sh
net=shm
dry_run=""
while [ $# -gt 0 ]; do
    case "$1" in
        --tcp) net=tcp; shift ;;
        --record) record_option "${2:-}"; shift 2 ;;
        --dry-run) dry_run=yes; shift ;;
        *) break ;;
    esac
done
record_begin flow-control
rounds="${1:-1}"
messages="${2:-1000000}"
for v in "$rounds" "$messages"; do
    case "$v" in
        '' | *[!0-9]* | 0) echo "rounds and messages are positive numbers, not '$v'" >&2; exit 2 ;;
    esac
done
for mode in ${FLOOD_MODES:-sleep reverse window}; do
    case "$mode" in
        sleep | reverse | window) ;;
        *) echo "FLOOD_MODES: no mode '$mode' (sleep, reverse, window)" >&2; exit 2 ;;
    esac
done
if [ -n "$dry_run" ]; then
    echo "would flood $messages messages a sender, $rounds rounds of ${FLOOD_MODES:-sleep reverse window} ($net) on ch4, MPICH and Open MPI${record_dir:+, recorded in $record_dir}"
    exit 0
fi

# shellcheck source=lib/peers.sh
. scripts/lib/peers.sh
install_peers

echo "building the flood for ch4 and over MPICH and Open MPI..." >&2
cargo build --release -q --example flood
cargo build --release -q -p pmi --bin ch4run
MPICC=mpicc.mpich CARGO_TARGET_DIR=target/peers-mpich \
    cargo build --release -q --features peer-mpi --example flood
MPICC=mpicc.openmpi CARGO_TARGET_DIR=target/peers-openmpi \
    cargo build --release -q --features peer-mpi --example flood

out=target/flood-vs-peers
[ "$net" = shm ] || out=target/flood-vs-peers-tcp
mkdir -p "$out"
tsv="$out/results.tsv"
printf 'impl\tmode\trank\tidle_mib\tpeak_mib\tgrowth_mib\tseconds\n' >"$tsv"

run() {
    local impl="$1" mode="$2"
    local args=(-n "$messages")
    case "$mode" in
        sleep) args+=(--sleep 3000) ;;
        reverse) args+=(--sleep 0 --reverse 100) ;;
        window) args+=(--sleep 3000 --window 1000) ;;
    esac
    local ch4env=() mpichenv=() ompinet=()
    if [ "$net" = tcp ]; then
        ch4env=(CH4_NODE_SIZE=1)
        mpichenv=(-genv UCX_TLS tcp,self)
        ompinet=(--mca pml ob1 --mca btl tcp,self)
    fi
    local t="${FLOOD_TIMEOUT:-300}"
    case "$impl" in
        ch4) env "${ch4env[@]}" timeout "$t" target/release/ch4run -n 5 target/release/examples/flood "${args[@]}" ;;
        mpich) timeout "$t" mpiexec.mpich "${mpichenv[@]}" -n 5 \
            target/peers-mpich/release/examples/flood "${args[@]}" ;;
        openmpi) timeout "$t" mpirun.openmpi --allow-run-as-root --oversubscribe "${ompinet[@]}" -n 5 \
            target/peers-openmpi/release/examples/flood "${args[@]}" ;;
    esac 2>&1 | awk -v i="$impl" -v m="$mode" '
        /^flood: rank [0-9]+ idle/ {
            g = $10; gsub(/[(+)]/, "", g)
            print i "\t" m "\t" $3 "\t" $5 "\t" $8 "\t" g "\t" $12; n++
        }
        END { if (n == 0) print i "\t" m "\t-\t-\t-\t-\ttimeout" }' >>"$tsv"
}

for r in $(seq "$rounds"); do
    for mode in ${FLOOD_MODES:-sleep reverse window}; do
        for impl in ch4 mpich openmpi; do
            echo "round $r/$rounds: $mode $impl" >&2
            run "$impl" "$mode" || echo "$impl $mode failed" >&2
        done
    done
done

# Per implementation and mode: the largest growth of a sender, the receiver's, the receiver's
# time (medians over the rounds).
python3 - "$tsv" <<'PY' | tee "$out/summary.txt"
import csv, statistics, sys, collections
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
by = collections.defaultdict(lambda: collections.defaultdict(list))
for r in rows:
    key = (r["mode"], r["impl"])
    if r["seconds"] == "timeout":
        by[key]["timeout"] = True
        continue
    by[key][r["rank"] == "0"].append(r)
print(f"{'mode':8} {'impl':8} {'senders +MiB (max)':>19} {'receiver +MiB':>14} {'receiver s':>11}")
for (mode, impl), d in sorted(by.items()):
    if d.get("timeout") and not d[True]:
        print(f"{mode:8} {impl:8} {'did not finish':>19}")
        continue
    snd = max((float(x["growth_mib"]) for x in d[False]), default=float("nan"))
    rcv = statistics.median(float(x["growth_mib"]) for x in d[True]) if d[True] else float("nan")
    t = statistics.median(float(x["seconds"]) for x in d[True]) if d[True] else float("nan")
    print(f"{mode:8} {impl:8} {snd:19.1f} {rcv:14.1f} {t:11.2f}")
PY
record_end "$out"

#!/usr/bin/env bash
# What rails buy: osu_bw and osu_latency between two hosts — network namespaces of this
# machine joined by two links of the same rate (scripts/lib/netns-hosts.sh), one rank on each,
# launched by MPICH's Hydra as on a cluster — over TCP without CH4_RAILS, over the first link
# named as a rail, and over both rails; interleaved, for N rounds (default 5), then the median
# of each size and configuration with its spread, and the ratios to one rail.
#
#   ./scripts/rails-bandwidth.sh [rounds]        (root; RAILS_RATE=200mbit sets each link's rate)
#
# Exits 77 where the machine gives no namespaces. Nothing else may run meanwhile: although the
# links set the bandwidth, latency is the CPUs'.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds="${1:-5}"
rate="${RAILS_RATE:-200mbit}"
prefix=c4bench
hosts="$PWD/scripts/lib/netns-hosts.sh"
out="target/rails-bandwidth"

command -v mpiexec.hydra >/dev/null || { echo "mpiexec.hydra is missing (Debian's mpich)" >&2; exit 77; }
cargo build --release -q --example osu_bw --example osu_latency
st=0
"$hosts" up "$prefix" "$rate" || st=$?
[ "$st" = 0 ] || exit "$st"
trap '"$hosts" down "$prefix"' EXIT
rm -rf "$out" && mkdir -p "$out"

# $1: configuration (tcp, rail1, rails2); the rest: the program and its options.
launch() {
    local config=$1
    shift
    local rails=()
    case $config in
        tcp) rails=(-u CH4_RAILS) ;;
        rail1) rails=(CH4_RAILS="${prefix}1") ;;
        rails2) rails=(CH4_RAILS="${prefix}1,${prefix}2") ;;
    esac
    env "${rails[@]}" timeout 600 "$hosts" run "$prefix-a" mpiexec.hydra -launcher ssh \
        -launcher-exec "$hosts" -iface "${prefix}1" -hosts "$prefix-a:1,$prefix-b:1" -n 2 "$@"
}

echo "rate $rate per link and direction; $rounds rounds; $(nproc) CPUs; load: $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq 1 "$rounds"); do
    for config in tcp rail1 rails2; do
        launch "$config" target/release/examples/osu_bw -m 65536:4194304 -i 3 -x 1 -W 16 \
            >"$out/bw-$config-$round.txt"
        launch "$config" target/release/examples/osu_latency -m 8:65536 -i 200 -x 20 \
            >"$out/lat-$config-$round.txt"
    done
    echo "round $round done"
done

python3 - "$out" "$rounds" <<'EOF'
import statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
configs = ["tcp", "rail1", "rails2"]
for kind, unit in (("bw", "MB/s"), ("lat", "us")):
    table = {}
    for c in configs:
        for r in range(1, rounds + 1):
            for line in open(f"{out}/{kind}-{c}-{r}.txt"):
                f = line.split()
                if len(f) == 2 and f[0].isdigit():
                    table.setdefault(int(f[0]), {}).setdefault(c, []).append(float(f[1]))
    print(f"\nosu_{'bw' if kind == 'bw' else 'latency'} ({unit}): median [min-max] of {rounds} rounds; ratio to rail1")
    print(f"{'size':>8}  " + "  ".join(f"{c:>22}" for c in configs) + "  rails2/rail1  tcp/rail1")
    for size in sorted(table):
        row = table[size]
        med = {c: statistics.median(row[c]) for c in configs}
        cells = "  ".join(f"{med[c]:>9.2f} [{min(row[c]):.2f}-{max(row[c]):.2f}]".rjust(22) for c in configs)
        print(f"{size:>8}  {cells}  {med['rails2'] / med['rail1']:>12.2f}  {med['tcp'] / med['rail1']:>9.2f}")
EOF

#!/usr/bin/env bash
# The shared-memory path of ch4 against MPICH's and Open MPI's, two processes on one node:
# 0-64 B latency, 8 B message rate, 64 KiB / 1 MiB / 4 MiB bandwidth. The host this project is
# measured on is noisy, so the three are run interleaved (ch4, MPICH, Open MPI, ch4, ...) and
# reported as medians with the range, plus the ratio of medians.
#
#   ./scripts/shm-vs-peers.sh [repetitions]     (default 7)
#
# Installs Debian's mpich and openmpi (with their compilers) when missing and running as root.
# The peers run the same loops, in C: scripts/peers/latency.c and bandwidth.c.
set -euo pipefail
cd "$(dirname "$0")/.."
reps="${1:-7}"

need=()
command -v mpicc.mpich >/dev/null || need+=(mpich libmpich-dev)
command -v mpicc.openmpi >/dev/null || need+=(openmpi-bin libopenmpi-dev)
command -v python3 >/dev/null || need+=(python3)
if [ ${#need[@]} -ne 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "installing ${need[*]}..."
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
    else
        echo "missing: ${need[*]} (install them, or run as root on Debian)" >&2
        exit 1
    fi
fi

cargo build --release -q -p ch4 --example osu_latency --example osu_bw
out=target/peers
mkdir -p "$out"
for p in latency bandwidth; do
    mpicc.mpich -O2 -o "$out/$p.mpich" "scripts/peers/$p.c"
    mpicc.openmpi -O2 -o "$out/$p.ompi" "scripts/peers/$p.c"
done
data="$(mktemp -d)"
trap 'rm -rf "$data"' EXIT
ch4=target/release/examples
# Every contender pinned one rank per core: ch4's self-launch does it by default (CH4_BIND),
# Hydra and Open MPI are asked to.
mpich=(mpiexec.mpich -bind-to core -n 2)
ompi=(mpirun.openmpi --allow-run-as-root --oversubscribe --bind-to core -n 2)

for r in $(seq "$reps"); do
    echo "round $r/$reps" >&2
    "$ch4/osu_latency" -m 0:64 -i 30000 -x 3000 | grep -E '^(0|1|8|64) ' >>"$data/lat.ch4"
    "${mpich[@]}" "$out/latency.mpich" >>"$data/lat.mpich"
    "${ompi[@]}" "$out/latency.ompi" >>"$data/lat.ompi"
    "$ch4/osu_bw" -m 8:8 -i 3000 | grep -v '^#' | awk '{print $1, $3}' >>"$data/rate.ch4"
    "$ch4/osu_bw" -m 65536:4194304 -i 100 | grep -E '^(65536|1048576|4194304) ' >>"$data/bw.ch4"
    "${mpich[@]}" "$out/bandwidth.mpich" 100 >"$data/b.mpich"
    "${ompi[@]}" "$out/bandwidth.ompi" 100 >"$data/b.ompi"
    for v in mpich ompi; do
        awk '$1 == 8 {print $1, $3}' "$data/b.$v" >>"$data/rate.$v"
        awk '$1 != 8 {print $1, $2}' "$data/b.$v" >>"$data/bw.$v"
    done
done

python3 - "$data" "$reps" <<'EOF'
import collections, statistics, sys
data, reps = sys.argv[1], sys.argv[2]
def load(name):
    m = collections.defaultdict(list)
    for line in open(f"{data}/{name}"):
        f = line.split()
        if len(f) >= 2:
            m[int(f[0])].append(float(f[1]))
    return m
print(f"# ch4 shm vs MPICH (CH4/ucx, Debian) and Open MPI (vader), 2 processes, {reps} interleaved rounds")
print("# median [min-max]; ratios of medians")
for kind, unit, better in [("lat", "latency, us", "lower"), ("rate", "message rate, msg/s", "higher"),
                           ("bw", "bandwidth, MB/s", "higher")]:
    runs = {v: load(f"{kind}.{v}") for v in ("ch4", "mpich", "ompi")}
    print(f"\n## {unit} ({better} is better)")
    print(f"{'size':>8}  {'ch4':>24}  {'MPICH':>24}  {'Open MPI':>24}  ch4/MPICH  ch4/OMPI")
    for size in sorted(runs["ch4"]):
        cells, med = [], {}
        for v in ("ch4", "mpich", "ompi"):
            x = runs[v].get(size, [])
            med[v] = statistics.median(x) if x else float("nan")
            cells.append(f"{med[v]:>10.4g} [{min(x):.3g}-{max(x):.3g}]" if x else f"{'-':>24}")
        print(f"{size:>8}  " + "  ".join(f"{c:>24}" for c in cells)
              + f"  {med['ch4'] / med['mpich']:9.2f}  {med['ch4'] / med['ompi']:8.2f}")
EOF

#!/usr/bin/env bash
# What rails buy, against the peers: osu_bw between two hosts — network namespaces of this
# machine joined by two links of the same rate (scripts/lib/netns-hosts.sh), one rank on each,
# launched as on a cluster (Hydra, or Open MPI's mpirun, through an ssh stand-in that enters a
# namespace) — over the first link and over both:
#   ch4      ch4's osu_bw (benches/osu): TCP without CH4_RAILS, CH4_RAILS=<link1>, =<link1>,<link2>
#   ch4-c    the real OSU 7.2 osu_bw on ch4's C library (libmpi_abi.so.1), the same rails
#   openmpi  Open MPI 4.1's TCP BTL (ob1), btl_tcp_if_include=<link1> or <link1>,<link2>
#   mpich    MPICH 4.0.2 (ch4 over UCX 1.13's tcp), UCX_NET_DEVICES=<link1> or both (with
#            UCX_MAX_RNDV_RAILS=2)
# interleaved for N rounds (default 3); then the median of each size and configuration with its
# spread, and each library's two links against its one. Also ch4's osu_latency up to 8 KiB over
# each of its three configurations (small messages take the first rail only).
#
#   ./scripts/rails-bandwidth.sh [rounds]        (root; RAILS_RATE=200mbit sets each link's rate)
#
# Needs Debian's mpich (Hydra; mpicc.mpich), openmpi-bin and libopenmpi-dev for the peers (a
# peer whose compiler is missing is left out) and OSU 7.2 in $THIRD_PARTY_DIR (default
# ../shared/third_party). Exits 77 where the machine gives no namespaces. Nothing else may run
# meanwhile: the links set the bandwidth, but latency is the CPUs'. Rows: target/rails-bandwidth/.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds="${1:-3}"
rate="${RAILS_RATE:-200mbit}"
prefix=c4bench
hosts="$PWD/scripts/lib/netns-hosts.sh"
out="target/rails-bandwidth"
osu="${THIRD_PARTY_DIR:-../shared/third_party}/osu-micro-benchmarks-7.2/c"
bw_args=(-m 65536:4194304 -i 3 -x 1 -W 16)

command -v mpiexec.hydra >/dev/null || { echo "mpiexec.hydra is missing (Debian's mpich)" >&2; exit 77; }
cargo build --release -q --example osu_bw --example osu_latency
cargo build --release -q -p ch4-mpi-abi
rm -rf "$out" && mkdir -p "$out/bin"

# The real osu_bw, built by each library's compiler.
impls=(ch4)
for impl in ch4-c openmpi mpich; do
    case $impl in
        ch4-c) cc=c-abi/bin/mpicc ;;
        openmpi) cc=mpicc.openmpi ;;
        mpich) cc=mpicc.mpich ;;
    esac
    if [ ! -d "$osu" ] || ! command -v "$cc" >/dev/null; then
        echo "note: $impl left out (no $cc or no OSU sources in $osu)"
        continue
    fi
    mkdir -p "$out/bin/$impl"
    "$cc" -O2 -DFIELD_WIDTH=18 -DFLOAT_PRECISION=2 -I "$osu/util" -o "$out/bin/$impl/osu_bw" \
        "$osu/mpi/pt2pt/standard/osu_bw.c" "$osu"/util/osu_util{,_mpi,_graph,_validation,_papi}.c \
        -lm -lpthread
    impls+=("$impl")
done

st=0
"$hosts" up "$prefix" "$rate" || st=$?
[ "$st" = 0 ] || exit "$st"
trap '"$hosts" down "$prefix"' EXIT

# $1: library, $2: links (tcp: ch4 without CH4_RAILS; 1; 2); the rest: the program's options.
launch() {
    local impl=$1 links=$2
    shift 2
    local devs="${prefix}1"
    [ "$links" != 2 ] || devs="${prefix}1,${prefix}2"
    local hydra=("$hosts" run "$prefix-a" mpiexec.hydra -launcher ssh -launcher-exec "$hosts"
        -iface "${prefix}1" -hosts "$prefix-a:1,$prefix-b:1" -n 2)
    case $impl in
        ch4 | ch4-c)
            local prog=target/release/examples/osu_bw
            [ "$impl" = ch4 ] || prog="$out/bin/ch4-c/osu_bw"
            [ "${1:-}" != latency ] || { prog=target/release/examples/osu_latency; shift; }
            if [ "$links" = tcp ]; then
                env -u CH4_RAILS timeout 600 "${hydra[@]}" "$prog" "$@"
            else
                CH4_RAILS="$devs" timeout 600 "${hydra[@]}" "$prog" "$@"
            fi
            ;;
        openmpi)
            timeout 600 "$hosts" run "$prefix-a" mpirun.openmpi --allow-run-as-root \
                --mca plm_rsh_agent "$hosts" --mca pml ob1 --mca btl tcp,self,vader \
                --mca btl_tcp_if_include "$devs" --mca oob_tcp_if_include "${prefix}1" \
                --host "$prefix-a:1,$prefix-b:1" -n 2 "$out/bin/openmpi/osu_bw" "$@"
            ;;
        mpich)
            UCX_TLS=tcp UCX_NET_DEVICES="$devs" UCX_MAX_RNDV_RAILS=2 timeout 600 "${hydra[@]}" \
                "$out/bin/mpich/osu_bw" "$@"
            ;;
    esac
}

echo "rate $rate per link and direction; $rounds rounds; $(nproc) CPUs; load: $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq 1 "$rounds"); do
    for impl in "${impls[@]}"; do
        configs=(1 2)
        [ "$impl" != ch4 ] || configs=(tcp 1 2)
        for links in "${configs[@]}"; do
            launch "$impl" "$links" "${bw_args[@]}" >"$out/bw-$impl-$links-$round.txt"
        done
    done
    for links in tcp 1 2; do
        launch ch4 "$links" latency -m 8:8192 -i 2000 -x 200 >"$out/lat-ch4-$links-$round.txt"
    done
    echo "round $round done"
done

python3 - "$out" "$rounds" "${impls[@]}" <<'EOF'
import statistics, sys
out, rounds, impls = sys.argv[1], int(sys.argv[2]), sys.argv[3:]

def table(kind, impl, links):
    rows = {}
    for r in range(1, rounds + 1):
        for line in open(f"{out}/{kind}-{impl}-{links}-{r}.txt"):
            f = line.split()
            if len(f) == 2 and f[0].isdigit():
                rows.setdefault(int(f[0]), []).append(float(f[1]))
    return rows

def cell(v):
    return f"{statistics.median(v):.2f} [{min(v):.2f}-{max(v):.2f}]"

print(f"\nosu_bw (MB/s): median [min-max] of {rounds} rounds; 'x' = two links / one link")
cols = [(i, l) for i in impls for l in (("tcp", "1", "2") if i == "ch4" else ("1", "2"))]
tabs = {c: table("bw", *c) for c in cols}
print("| size | " + " | ".join(f"{i} {'no CH4_RAILS' if l == 'tcp' else l + ' link' + ('s' if l == '2' else '')}" for i, l in cols)
      + " | " + " | ".join(f"{i} x" for i in impls) + " |")
print("|---" * (1 + len(cols) + len(impls)) + "|")
for size in sorted(tabs[cols[0]]):
    ratios = [statistics.median(tabs[(i, "2")][size]) / statistics.median(tabs[(i, "1")][size]) for i in impls]
    print(f"| {size} | " + " | ".join(cell(tabs[c][size]) for c in cols)
          + " | " + " | ".join(f"{x:.2f}" for x in ratios) + " |")

print(f"\nch4's osu_latency (us): median [min-max] of {rounds} rounds")
lat = {l: table("lat", "ch4", l) for l in ("tcp", "1", "2")}
print("| size | no CH4_RAILS | 1 link | 2 links | 2 links / 1 |")
print("|---|---|---|---|---|")
for size in sorted(lat["1"]):
    x = statistics.median(lat["2"][size]) / statistics.median(lat["1"][size])
    print(f"| {size} | " + " | ".join(cell(lat[l][size]) for l in ("tcp", "1", "2")) + f" | {x:.2f} |")
EOF

#!/usr/bin/env bash
# How long a job takes on two hosts under each launcher a cluster runs: four ranks of the ring
# (examples/ring, two a host, TCP between the hosts over the first link), on two hosts made of
# network namespaces (scripts/lib/netns-hosts.sh), from the launcher's start to its end, under
#   hydra        MPICH's mpiexec.hydra, through an ssh stand-in (PMI-1)
#   srun-pmi2    Slurm's srun --mpi=pmi2, a slurmd in each namespace (scripts/lib/slurm-cluster.sh)
#   srun-pmix    srun --mpi=pmix (ch4's PMIx client)
#   mpirun       Open MPI's mpirun, through the same ssh stand-in (ch4's PMIx client)
# and, beside each, the same launcher running `true` on the four slots: what the launcher
# itself takes, so that ch4's part is the difference. Interleaved for N rounds (default 5);
# medians with the spread. One binary, built with the `pmix` feature, serves all four.
#
#   ./scripts/startup-two-hosts.sh [rounds]          (root; Debian's mpich, openmpi-bin,
#                                                     slurm packages: installed when missing)
#
# Exits 77 where the machine gives no namespaces or Slurm cannot start. Nothing else may run
# meanwhile (two CPUs). Rows: target/startup-two-hosts/.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds="${1:-5}"
prefix=c4start
hosts="$PWD/scripts/lib/netns-hosts.sh"
slurm="$PWD/scripts/lib/slurm-cluster.sh"
out="target/startup-two-hosts"

command -v mpiexec.hydra >/dev/null || { echo "mpiexec.hydra is missing (Debian's mpich)" >&2; exit 77; }
command -v mpirun.openmpi >/dev/null || { echo "mpirun.openmpi is missing (Debian's openmpi-bin)" >&2; exit 77; }
cargo build --release -q --features pmix --example ring
ring="$PWD/target/release/examples/ring"
rm -rf "$out" && mkdir -p "$out"
cluster="$(mktemp -d /tmp/ch4-startup-XXXXXX)"
chmod 755 "$cluster"

st=0
"$hosts" up "$prefix" 1gbit || st=$?
[ "$st" = 0 ] || exit "$st"
cleanup() {
    "$slurm" down "$cluster" >/dev/null 2>&1 || true
    rm -rf "$cluster"
    "$hosts" down "$prefix"
}
trap cleanup EXIT
conf="$("$slurm" up "$cluster" --netns "$prefix" | sed -n "s/^export SLURM_CONF=//p" | tr -d "'\"")"
[ -n "$conf" ] || { echo "the Slurm cluster did not start" >&2; exit 77; }

# $1: launcher; the rest: the program and its arguments. Four ranks, two a host.
launch() {
    local how=$1
    shift
    case $how in
        hydra)
            CH4_RAILS="${prefix}1" timeout 120 "$hosts" run "$prefix-a" mpiexec.hydra \
                -launcher ssh -launcher-exec "$hosts" -iface "${prefix}1" \
                -hosts "$prefix-a:2,$prefix-b:2" -n 4 "$@"
            ;;
        srun-pmi2 | srun-pmix)
            CH4_RAILS="${prefix}1" SLURM_CONF="$conf" timeout 120 "$hosts" run "$prefix-a" \
                srun "--mpi=${how#srun-}" -N 2 -n 4 --ntasks-per-node=2 "$@"
            ;;
        mpirun)
            CH4_RAILS="${prefix}1" timeout 120 "$hosts" run "$prefix-a" mpirun.openmpi \
                --allow-run-as-root --mca plm_rsh_agent "$hosts" \
                --mca oob_tcp_if_include "${prefix}1" --mca btl_tcp_if_include "${prefix}1" \
                -x CH4_RAILS --host "$prefix-a:2,$prefix-b:2" -n 4 "$@"
            ;;
    esac
}

launchers=(hydra srun-pmi2 srun-pmix mpirun)
echo "$rounds rounds; $(nproc) CPUs; load: $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq 1 "$rounds"); do
    for how in "${launchers[@]}"; do
        for what in true ring; do
            prog=/bin/true
            [ "$what" = true ] || prog="$ring"
            start=$(date +%s.%N)
            launch "$how" "$prog" >"$out/$how-$what-$round.out" 2>&1 ||
                { echo "$how $what failed in round $round:" >&2; tail -5 "$out/$how-$what-$round.out" >&2; exit 1; }
            end=$(date +%s.%N)
            if [ "$what" = ring ] && [ "$(grep -c 'sum of ranks 6' "$out/$how-$what-$round.out")" != 4 ]; then
                echo "$how: not every rank ended the ring in round $round" >&2
                exit 1
            fi
            echo "$how $what $round $(echo "$end - $start" | bc)" >>"$out/times.txt"
        done
    done
    echo "round $round done"
done

python3 - "$out/times.txt" "${launchers[@]}" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
def times(how, what):
    return [float(r[3]) * 1000 for r in rows if r[0] == how and r[1] == what]
def cell(v):
    return f"{statistics.median(v):.0f} [{min(v):.0f}-{max(v):.0f}]"
print("\nms from the launcher's start to its end, median [min-max]; ring - true: ch4's part")
print("| launcher | the ring, 4 ranks on 2 hosts | `true` on the same slots | ring - true |")
print("|---|---|---|---|")
for how in sys.argv[2:]:
    ring, true = times(how, "ring"), times(how, "true")
    print(f"| {how} | {cell(ring)} | {cell(true)} | {statistics.median(ring) - statistics.median(true):.0f} |")
PY

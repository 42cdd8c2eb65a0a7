#!/usr/bin/env bash
# Real MPI proxy applications, built unmodified, on ch4's C library and on the peers: HPCG 3.1
# (the conjugate gradient benchmark of the TOP500's HPCG list), miniFE (Mantevo's implicit
# finite-element proxy: assembly, then CG) and miniAMR (Mantevo's adaptive mesh refinement
# proxy: stencils, face exchanges with Isend/Irecv/Waitany, refinement, load balancing). Each
# is built once for the MPI standard ABI with c-abi/bin/mpicc (ch4 and MPICH 5 run that very
# binary), once with Debian's MPICH 4.0.2 (mpicc.mpich: "mpich") and once with Open MPI 4.1
# (mpicc.openmpi: "openmpi"); each runs at 2 ranks and at 8 (more ranks than this host's 2
# cores), interleaved round by round (ch4, MPICH 5, MPICH 4, Open MPI, ch4, ...). Every run's
# own verification is checked, and a run that fails it stops the script:
#
#   hpcg     the report's "HPCG result is VALID"; figure: its GFLOP/s rating (higher is better)
#   minife   "solution matches analytic solution" (verify_solution=1); figure: its CG time, s
#   miniamr  no "difference too large" from its checksums (every 4 stages); figure: its total
#            time, s
#
# Medians with the spread, ratios and a chart per app in target/apps-vs-peers/, through
# osu-plot (the x axis is the number of ranks).
#
#   ./scripts/apps-vs-peers.sh [--apps DIR] [--only IMPLS] [--ranks "2 8"] [--record LABEL]
#       [--dry-run] [rounds] [app...]
#   (default 5 rounds, every app, 2 and 8 ranks, ch4,mpich5,mpich,openmpi)
#
# --apps DIR (or APPS_DIR; default ../apps, beside the project) holds the Mantevo sources,
# taken unmodified from their public repositories:
#   git clone https://github.com/Mantevo/miniFE DIR/miniFE
#   git clone https://github.com/Mantevo/miniAMR DIR/miniAMR
# HPCG comes from the third-party folder (THIRD_PARTY_DIR, default ../shared/third_party).
# An app whose sources are missing is left out with a message saying where to get them.
#
# Binding: at 2 ranks every library binds one rank per core (as the OSU scripts do); at 8,
# none binds (Open MPI is told --bind-to none: its default with more ranks than cores refuses
# to start). The problem sizes are fixed per rank count (below), the same for every library.
#
# A run is stopped after APPS_RUN_TIMEOUT seconds (default 120): MPICH's libraries poll without
# ever yielding and take minutes at 8 ranks on 2 cores. A library stopped on an app at a rank
# count is not run again there in later rounds (its column reads "-"), and the stopped runs are
# listed at the end (<out>/stopped.tsv).
#
# --record LABEL keeps the run in the results record: docs/results/apps/<today>-LABEL/ (see
# scripts/lib/record.sh). CH4_* variables reach ch4's runs as they are (CH4_YIELD=soon, say).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/record.sh
. scripts/lib/record.sh
rounds=5
apps=()
impls=(ch4 mpich5 mpich openmpi)
only=""
ranks_list="2 8"
dry_run=""
apps_dir="${APPS_DIR:-../apps}"
while [ $# -gt 0 ]; do
    case "$1" in
        --apps)
            [ $# -ge 2 ] || { echo "--apps takes a directory" >&2; exit 2; }
            apps_dir="$2"
            shift
            ;;
        --only)
            [ $# -ge 2 ] || { echo "--only takes a list such as ch4,openmpi" >&2; exit 2; }
            only="$2"
            shift
            ;;
        --ranks)
            [ $# -ge 2 ] || { echo "--ranks takes a list such as \"2 8\"" >&2; exit 2; }
            ranks_list="$2"
            shift
            ;;
        --record)
            record_option "${2:-}"
            shift
            ;;
        --dry-run) dry_run=yes ;;
        -*) echo "no option '$1' (see the script's first lines)" >&2; exit 2 ;;
        [0-9]*) rounds="$1" ;;
        hpcg | minife | miniamr) apps+=("$1") ;;
        *) echo "no app '$1': hpcg, minife or miniamr" >&2; exit 2 ;;
    esac
    shift
done
[ "$rounds" -gt 0 ] || { echo "rounds is a positive number" >&2; exit 2; }
[ ${#apps[@]} -gt 0 ] || apps=(hpcg minife miniamr)
for n in $ranks_list; do
    case "$n" in
        2 | 8) ;;
        *) echo "--ranks takes 2 and/or 8 (the sizes below are set for them), not '$n'" >&2; exit 2 ;;
    esac
done
if [ -n "$only" ]; then
    chosen=()
    for i in "${impls[@]}"; do
        [[ ",$only," != *",$i,"* ]] || chosen+=("$i")
    done
    [ ${#chosen[@]} -gt 0 ] || { echo "--only names none of ${impls[*]}" >&2; exit 2; }
    impls=("${chosen[@]}")
fi
timeout_s="${APPS_RUN_TIMEOUT:-120}"
case "$timeout_s" in
    '' | *[!0-9]*) echo "APPS_RUN_TIMEOUT takes whole seconds, not '$timeout_s'" >&2; exit 2 ;;
esac
record_begin apps
third_party="${THIRD_PARTY_DIR:-../shared/third_party}"

# Where an app's sources are, or nothing (with the reason on stderr).
sources_of() {
    local dir
    case "$1" in
        hpcg) dir="$third_party/hpcg-3.1" ;;
        minife) dir="$apps_dir/miniFE" ;;
        miniamr) dir="$apps_dir/miniAMR" ;;
    esac
    if [ -d "$dir" ]; then
        echo "$dir"
        return
    fi
    case "$1" in
        hpcg) echo "hpcg: no sources in $dir (set THIRD_PARTY_DIR)" >&2 ;;
        minife) echo "minife: no sources in $dir: git clone https://github.com/Mantevo/miniFE $dir" >&2 ;;
        miniamr) echo "miniamr: no sources in $dir: git clone https://github.com/Mantevo/miniAMR $dir" >&2 ;;
    esac
}
present=()
for a in "${apps[@]}"; do
    [ -z "$(sources_of "$a")" ] || present+=("$a")
done
[ ${#present[@]} -gt 0 ] || { echo "no app's sources are here" >&2; exit 1; }
apps=("${present[@]}")
if [ -n "$dry_run" ]; then
    echo "would run $rounds rounds of ${apps[*]} at ${ranks_list// /, } ranks on ${impls[*]}${record_dir:+, recorded in $record_dir}"
    exit 0
fi

venv=target/mpich5-venv
if [[ " ${impls[*]} " == *" mpich5 "* ]] && [ ! -x "$venv/bin/mpiexec" ]; then
    echo "installing MPICH 5.0.2 from PyPI into $venv..." >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q mpich==5.0.2
fi
# shellcheck source=lib/peers.sh
. scripts/lib/peers.sh
if [[ " ${impls[*]} " == *" mpich "* ]] || [[ " ${impls[*]} " == *" openmpi "* ]]; then
    if command -v g++ >/dev/null; then install_peers; else install_peers g++; fi
fi
cargo build --release -q -p pmi --bin ch4run
cargo build --release -q -p ch4-mpi-abi
cargo build --release -q -p osu-plot

# The build a library runs: the ABI build (ch4 and MPICH 5), Debian's MPICH's, Open MPI's.
build_of() {
    case "$1" in
        ch4 | mpich5) echo abi ;;
        *) echo "$1" ;;
    esac
}
compilers() { # C and C++ compilers of a build
    case "$1" in
        abi) echo "$PWD/c-abi/bin/mpicc $PWD/c-abi/bin/mpicxx" ;;
        mpich) echo "mpicc.mpich mpicxx.mpich" ;;
        openmpi) echo "mpicc.openmpi mpicxx.openmpi" ;;
    esac
}
root="$PWD/target/apps-vs-peers/build"
# Builds app $1 for build $2 in $root/$2/$1 from a fresh copy of its sources; prints the
# executable's path.
build_app() {
    local app="$1" build="$2" src dir cc cxx
    src=$(sources_of "$app")
    dir="$root/$build/$app"
    read -r cc cxx <<<"$(compilers "$build")"
    rm -rf "$dir"
    mkdir -p "$dir"
    case "$app" in
        hpcg)
            # HPCG's own build system wants a configured setup file; its sources build as one
            # compiler line, MPI-only as its documentation describes (-DHPCG_NO_OPENMP).
            "$cxx" -O3 -DHPCG_NO_OPENMP -I"$src/src" -o "$dir/xhpcg" "$src"/src/*.cpp
            echo "$dir/xhpcg"
            ;;
        minife)
            cp -r "$src/ref" "$dir/ref"
            make -s -C "$dir/ref/src" CXX="$cxx" CC="$cc" >"$dir/build.log" 2>&1 ||
                { cat "$dir/build.log" >&2; exit 1; }
            echo "$dir/ref/src/miniFE.x"
            ;;
        miniamr)
            cp -r "$src/ref" "$dir/ref"
            make -s -C "$dir/ref" CC="$cc" LD="$cc" >"$dir/build.log" 2>&1 ||
                { cat "$dir/build.log" >&2; exit 1; }
            echo "$dir/ref/miniAMR.x"
            ;;
    esac
}
declare -A exe
builds=()
for i in "${impls[@]}"; do
    b=$(build_of "$i")
    [[ " ${builds[*]} " == *" $b "* ]] || builds+=("$b")
done
for a in "${apps[@]}"; do
    for b in "${builds[@]}"; do
        echo "building $a ($b)..." >&2
        exe[$a/$b]=$(build_app "$a" "$b")
    done
done

# The problem of app $1 at $2 ranks: a few seconds to a few tens on ch4 here.
app_args() {
    case "$1/$2" in
        hpcg/2) echo "--nx=32 --ny=32 --nz=32 --rt=3" ;;
        hpcg/8) echo "--nx=16 --ny=16 --nz=16 --rt=3" ;;
        minife/2) echo "nx=64 ny=64 nz=64 verify_solution=1" ;;
        minife/8) echo "nx=64 ny=64 nz=64 verify_solution=1" ;;
        miniamr/*)
            local grid="--npx 2 --npy 1 --npz 1"
            [ "$2" != 8 ] || grid="--npx 2 --npy 2 --npz 2"
            echo "$grid --report_perf 4 --num_refine 3 --max_blocks 1000 --num_vars 20" \
                "--init_x 1 --init_y 1 --init_z 1 --nx 8 --ny 8 --nz 8 --num_tsteps 20" \
                "--checksum_freq 4 --stages_per_ts 16 --num_objects 2" \
                "--object 2 0 -1.10 -1.10 -1.10 0.030 0.030 0.030 1.5 1.5 1.5 0.0 0.0 0.0" \
                "--object 2 0 0.5 0.5 1.76 0.0 0.0 -0.025 0.75 0.75 0.75 0.0 0.0 0.0"
            ;;
    esac
}
# The table's name for an app's figure.
figure_of() {
    case "$1" in
        hpcg) echo hpcg_gflops ;;
        minife) echo minife_cg_seconds ;;
        miniamr) echo miniamr_seconds ;;
    esac
}

# The launcher line of library $1 at $2 ranks.
launcher() {
    local impl="$1" n="$2" bind=()
    case "$impl" in
        ch4)
            [ "$n" != 2 ] || bind=(--bind-to core)
            echo "$PWD/target/release/ch4run ${bind[*]} -n $n"
            ;;
        mpich5)
            [ "$n" != 2 ] || bind=(-bind-to core)
            echo "env LD_LIBRARY_PATH=$PWD/$venv/lib $PWD/$venv/bin/mpiexec ${bind[*]} -n $n"
            ;;
        mpich)
            [ "$n" != 2 ] || bind=(-bind-to core)
            echo "mpiexec.mpich ${bind[*]} -n $n"
            ;;
        openmpi)
            bind=(--bind-to none)
            [ "$n" != 2 ] || bind=(--bind-to core)
            echo "mpirun.openmpi --allow-run-as-root --oversubscribe ${bind[*]} -n $n"
            ;;
    esac
}

out="$PWD/target/apps-vs-peers"
mkdir -p "$out"
tsv="$out/results.tsv"
printf 'bench\timpl\tsize\tvalue\n' >"$tsv"
printf 'round\tapp\tranks\timpl\tseconds\n' >"$out/stopped.tsv"
declare -A dropped
# One run: its figure appended to the table, or the reason it has none.
run() {
    local app="$1" n="$2" impl="$3" round="$4" dir log status=0 value="" launch args
    dir=$(mktemp -d "$out/run.XXXXXX")
    log="$dir/output.txt"
    read -r -a launch <<<"$(launcher "$impl" "$n")"
    read -r -a args <<<"$(app_args "$app" "$n")"
    (cd "$dir" && timeout --kill-after=10 "$timeout_s" "${launch[@]}" \
        "${exe[$app/$(build_of "$impl")]}" "${args[@]}" </dev/null >"$log" 2>&1) ||
        status=$?
    if [ "$status" = 124 ] || [ "$status" = 137 ]; then
        echo "round $round: $impl $app at $n ranks stopped after $timeout_s s; not run again there" >&2
        printf '%s\t%s\t%s\t%s\t%s\n' "$round" "$app" "$n" "$impl" "$timeout_s" >>"$out/stopped.tsv"
        dropped[$app/$n/$impl]=1
        rm -rf "$dir"
        return
    fi
    case "$app" in
        hpcg)
            value=$(cat "$dir"/HPCG-Benchmark* 2>/dev/null |
                awk -F= '/^Final Summary::HPCG result is VALID with a GFLOP\/s rating of=/ { print $2 }')
            ;;
        minife)
            grep -q "solution matches analytic solution" "$log" &&
                value=$(awk '/Total CG Time:/ { print $NF }' "$dir"/miniFE.*.yaml 2>/dev/null)
            ;;
        miniamr)
            grep -q "difference too large" "$log" ||
                value=$(awk -F: '/^Total time for test/ { split($3, f, " "); print f[1] }' "$log")
            ;;
    esac
    if [ "$status" != 0 ] || [ -z "$value" ]; then
        echo "round $round: $impl $app at $n ranks failed its run or its verification (exit $status); its output:" >&2
        tail -n 30 "$log" >&2
        exit 1
    fi
    printf '%s\t%s\t%s\t%s\n' "$(figure_of "$app")" "$impl" "$n" "$value" >>"$tsv"
    printf 'round %s: %s at %s ranks, %s: %s\n' "$round" "$app" "$n" "$impl" "$value" >&2
    rm -rf "$dir"
}
# Each round starts with the next library (round r runs them from the r-th on): in a fixed
# order one library always ran first after a change of app, and on this host the time of a
# run drifts with the minutes around it (a 9-round run read ch4 1.22x on miniAMR at 2 ranks
# with ch4 always first; minutes later, by hand with the order turning, 1.04x).
for round in $(seq "$rounds"); do
    for app in "${apps[@]}"; do
        for n in $ranks_list; do
            for k in "${!impls[@]}"; do
                impl="${impls[$(((round - 1 + k) % ${#impls[@]}))]}"
                [ -n "${dropped[$app/$n/$impl]:-}" ] || run "$app" "$n" "$impl" "$round"
            done
        done
    done
done
target/release/osu-plot --x ranks --setup "proxy apps, interleaved; at 8 ranks more ranks than cores" \
    "$tsv" "$out" | tee "$out/summary.txt" || plot_status=$?
if [ "$(wc -l <"$out/stopped.tsv")" -gt 1 ]; then
    echo "Runs stopped by APPS_RUN_TIMEOUT (not in the medians; not run again in later rounds):" >&2
    column -t "$out/stopped.tsv" >&2
fi
record_end "$out"
exit "${plot_status:-0}"

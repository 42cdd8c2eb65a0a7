#!/usr/bin/env bash
# The CH4 inlining claim in instructions: an 8-byte isend + irecv + wait through the device
# generic over its transports, and through the same device reaching its shared-memory transport
# through a vtable (benches/inlining.rs). Counted with valgrind's callgrind, which is exact and
# repeatable on a noisy machine: each variant runs twice (N and 2N iterations) and the
# difference divided by N is the cost of one pair, free of start-up costs. Then the generic
# isend alone is split into the enqueue — the shared-memory transport's am_send of the same
# 8-byte eager message, measured on its own — and the path from the public call to it.
#
#   ./scripts/inlining-proof.sh [N] [--ofi | --network] [--dry-run]        (default 20000)
#
# --ofi builds with the libfabric netmod alone in the devices (unused: one node), to show what
# building a natively matching netmod in costs the shared-memory path.
# --network counts the network route instead (TCP on loopback, no shared memory): the device
# over the TCP netmod itself, over the enum of the build's netmods (built with all three, so
# the netmod is chosen at run time) and over the TCP netmod behind a vtable; and the
# shared-memory route of the device over the enum against the one over TCP alone.
#
# Installs valgrind when missing and running as root on Debian.
set -euo pipefail
cd "$(dirname "$0")/.."
n=20000
features=()
for a in "$@"; do
    case "$a" in
        --ofi) features=(--no-default-features --features ofi) ;;
        --network) features=(--features ofi,ucx) network=yes ;;
        --dry-run) dry_run=yes ;;
        *[!0-9]* | 0) echo "N is a positive number, not '$a'" >&2; exit 2 ;;
        *) n="$a" ;;
    esac
done
if [ -n "${dry_run:-}" ]; then
    echo "would count $n and $((2 * n)) isend + irecv + wait pairs under callgrind${features[*]:+ (${features[*]})}"
    exit 0
fi
if ! command -v valgrind >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null
    else
        echo "valgrind is missing" >&2
        exit 1
    fi
fi
cargo bench -q "${features[@]}" --bench inlining --no-run 2>/dev/null
bin=$(cargo bench -q "${features[@]}" --bench inlining --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "inlining" and m.get("executable"):
        print(m["executable"])')
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
variants="generic dyn enqueue"
if [ -n "${network:-}" ]; then
    variants="net-generic net-enum net-dyn net-rails shm-tcp shm-enum"
fi
for v in $variants; do
    for k in 1 2; do
        valgrind --tool=callgrind --callgrind-out-file="$out/$v.$k" "$bin" $((k * n)) "$v" \
            >/dev/null 2>&1
    done
done
python3 - "$out" "$n" "${network:-}" <<'EOF'
import re, subprocess, sys
out, n, network = sys.argv[1], int(sys.argv[2]), sys.argv[3]

def total(path):
    for line in open(path):
        if line.startswith("totals:") or line.startswith("summary:"):
            return int(line.split()[1])
    raise SystemExit(f"no totals in {path}")

def per_pair(v):
    return (total(f"{out}/{v}.2") - total(f"{out}/{v}.1")) / n

def probe(path, name, calls):
    """Instructions of one call of probe function `name`, callees included."""
    text = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", path],
                          capture_output=True, text=True).stdout
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+) \([^)]*\)\s+benches/inlining.rs:inlining::(\w+)", line)
        if m and m.group(2) == name:
            return int(m.group(1).replace(",", "")) / calls
    raise SystemExit(f"{name} not found in {path}")

if network:
    g, e, d = per_pair("net-generic"), per_pair("net-enum"), per_pair("net-dyn")
    r = per_pair("net-rails")
    st, se = per_pair("shm-tcp"), per_pair("shm-enum")
    print("# instructions per 8-byte isend + irecv + wait pair over the network route")
    print("# (TCP on loopback, no shared memory; callgrind, both devices in one thread)")
    print(f"device over TcpNetmod (monomorphized):      {g:8.0f}")
    print(f"device over the enum (tcp, ofi, ucx):       {e:8.0f}   ({e / g:.3f}x; target <= 1.05x)")
    print(f"device over TcpNetmod behind a vtable:      {d:8.0f}   ({d / g:.3f}x)")
    print(f"device over Rails<TcpNetmod>, one rail:     {r:8.0f}   ({r / g:.3f}x)")
    print()
    print("# the shared-memory route in the same build")
    print(f"device over TcpNetmod:                      {st:8.0f}")
    print(f"device over the enum:                       {se:8.0f}   ({se / st:.3f}x; target 1.00 +- 0.01)")
    raise SystemExit(0)
g, d = per_pair("generic"), per_pair("dyn")
whole = probe(f"{out}/generic.2", "isend_probe", 2 * n)
enqueue = probe(f"{out}/enqueue.2", "enqueue_probe", 2 * n)
print("# instructions per 8-byte isend + irecv + wait pair (callgrind, both devices in one thread)")
print(f"generic device (static dispatch, inlined):  {g:8.0f}")
print(f"dyn transport (vtable calls, MPICH-style):  {d:8.0f}")
print(f"dyn / generic:                              {d / g:8.2f}")
print()
print("# the generic isend alone")
print(f"public isend call, whole:                   {whole:8.0f}")
print(f"  the enqueue (the transport's am_send):    {enqueue:8.0f}")
print(f"  from the public call to the enqueue:      {whole - enqueue:8.0f}   (target: <= 60)")
EOF

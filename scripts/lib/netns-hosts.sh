#!/usr/bin/env bash
# Two "hosts" on one Linux machine, for tests that need ranks on different nodes joined by more
# than one network (multi-rail): network namespaces <prefix>-a and <prefix>-b joined by two veth
# pairs, each end rate-limited, and an ssh stand-in through which MPICH's Hydra starts its
# proxies "on" them, the way a cluster launches.
#
#   netns-hosts.sh up <prefix> <rate>          creates the hosts (root), after removing any
#                                              leftovers of the same prefix; e.g. up ch4r 200mbit
#   netns-hosts.sh down <prefix>               removes them; succeeds when nothing is left
#   netns-hosts.sh enter <host> [command...]   runs command on host <prefix>-a or <prefix>-b,
#                                              as ssh would: the words joined by spaces, then
#                                              run by `bash -c` (no command: an interactive shell)
#   netns-hosts.sh run <host> <program> [args...]
#                                              runs program on the host with its arguments as
#                                              they are (no shell in between)
#   netns-hosts.sh launcher <prefix>           prints the words that start mpiexec.hydra across
#                                              both hosts, one a line (append -n, program)
#
# The layout up makes (the same interface name on both hosts, as on a cluster's nodes):
#   rail 1  <prefix>1   10.71.1.1/24 on <prefix>-a   <->   10.71.1.2/24 on <prefix>-b
#   rail 2  <prefix>2   10.71.2.1/24 on <prefix>-a   <->   10.71.2.2/24 on <prefix>-b
# Every one of the four ends sends through a token bucket (tbf) at <rate> (tc's units: 200mbit,
# 1gbit, 50mbps...), so each rail carries <rate> each way and both together twice that.
# Processes started by enter/run see the host's name as their hostname (a UTS namespace of
# their own), and both names resolve to their rail-1 address on both hosts
# (/etc/netns/<host>/hosts, which `ip netns exec` mounts over /etc/hosts): a library that
# publishes "my hostname's address" publishes one the other host reaches.
#
# Hydra: `launcher` prints, for prefix ch4r,
#   netns-hosts.sh run ch4r-a mpiexec.hydra -launcher ssh -launcher-exec netns-hosts.sh
#       -iface ch4r1 -hosts ch4r-a,ch4r-b -ppn 2
# (script paths absolute). Hydra runs its "ssh" as `<launcher-exec> -x <host> <command words>`,
# the proxy's path among them in literal double quotes, meant for the remote shell: called with
# an option first (or, as rsh, with a host first), this script takes it for ssh and does what
# enter does. mpiexec started by run knows <prefix>-a for itself and forks that host's proxy
# without the launcher. -iface has mpiexec give its proxies rail 1's address for its control
# port instead of its hostname: needed when mpiexec is started by a bare `ip netns exec`, whose
# hostname (the machine's) host b cannot resolve or reach.
# Hydra 4.0.2 sometimes never returns when a rank exits early with proxies on two hosts (with a
# plain ssh stand-in and no namespaces too): give its runs a time limit.
#
# up exits with 77 (the usual "skipped" status) and one line on stderr when this machine gives
# no namespaces: not root, no ip/tc, or the kernel refusing namespaces, veth or tbf.
set -euo pipefail

self="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
rails=(1 2)

die() { # status, message
    echo "netns-hosts.sh: $2" >&2
    exit "$1"
}

usage() {
    sed -n '/^#   netns-hosts.sh up/,/^#$/s/^# \{0,3\}//p' "$self" >&2
    exit 2
}

# An interface is named the prefix and the rail's digit, and the kernel allows 15 characters.
check_prefix() {
    [[ $1 =~ ^[A-Za-z0-9][A-Za-z0-9_-]{0,13}$ ]] ||
        die 2 "prefix '$1' is not 1 to 14 letters, digits, '_' or '-' (it names interfaces)"
}

check_host() {
    [[ $1 =~ ^[A-Za-z0-9][A-Za-z0-9_-]{0,13}-[ab]$ ]] ||
        die 2 "host '$1' is not <prefix>-a or <prefix>-b"
    [ -e "/run/netns/$1" ] || die 1 "no host $1 (netns-hosts.sh up first)"
}

# <rate> in bits per second, from tc's rate units; nothing when tc would not read it.
rate_bits() {
    [[ $1 =~ ^([0-9]+(\.[0-9]+)?)([a-zA-Z]*)$ ]] || return 0
    local n="${BASH_REMATCH[1]}" unit="${BASH_REMATCH[3],,}" m
    case "$unit" in
        '' | bit) m=1 ;;
        kbit) m=1e3 ;;
        mbit) m=1e6 ;;
        gbit) m=1e9 ;;
        tbit) m=1e12 ;;
        kibit) m=1024 ;;
        mibit) m=1048576 ;;
        gibit) m=1073741824 ;;
        tibit) m=1099511627776 ;;
        bps) m=8 ;;
        kbps) m=8e3 ;;
        mbps) m=8e6 ;;
        gbps) m=8e9 ;;
        tbps) m=8e12 ;;
        kibps) m=8192 ;;
        mibps) m=8388608 ;;
        gibps) m=8589934592 ;;
        tibps) m=8796093022208 ;;
        *) return 0 ;;
    esac
    awk -v n="$n" -v m="$m" 'BEGIN { printf "%.0f\n", n * m }'
}

down() {
    local prefix="$1" host pids
    for host in "$prefix-a" "$prefix-b"; do
        # A namespace outlives its name while a process is in it, veths and all: a rank left
        # spinning by a failed run would stay, unseen by `ip netns list`, on a 2-core machine.
        # Whatever is in it was started through this script, for the test.
        if [ -e "/run/netns/$host" ]; then
            pids="$(ip netns pids "$host" 2>/dev/null || true)"
            if [ -n "$pids" ]; then
                # shellcheck disable=SC2086 # one pid a word
                kill $pids 2>/dev/null || true
                sleep 1
                pids="$(ip netns pids "$host" 2>/dev/null || true)"
                # shellcheck disable=SC2086
                [ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
            fi
            ip netns delete "$host" 2>/dev/null || true
        fi
        rm -rf "/etc/netns/$host"
    done
    rmdir /etc/netns 2>/dev/null || true
}

rails_up() { # prefix
    local host state r
    for host in "$1-a" "$1-b"; do
        for r in "${rails[@]}"; do
            state="$(ip -n "$host" -br link show dev "$1$r")"
            [[ $state =~ ^[^\ ]+\ +UP\  ]] || return 1
        done
    done
}

up() {
    local prefix="$1" rate="$2" bits burst a="$1-a" b="$1-b" r
    bits="$(rate_bits "$rate")"
    if [ -z "$bits" ] || [ "$bits" -eq 0 ]; then
        die 2 "rate '$rate' is not a tc rate (like 200mbit, 1gbit, 50mbps)"
    fi
    [ "$(id -u)" = 0 ] || die 77 "skipped: network namespaces need root"
    command -v ip >/dev/null || die 77 "skipped: no 'ip' command (iproute2)"
    command -v tc >/dev/null || die 77 "skipped: no 'tc' command (iproute2)"
    down "$prefix"
    # From here a failure is the machine's refusal: undo what was made, and skip.
    trap 'down "$prefix"; die 77 "skipped: could not build the hosts (see the error above)"' ERR
    ip netns add "$a"
    ip netns add "$b"
    # A burst of one millisecond at the rate, and never under two 64 KiB segments: veth passes
    # TCP's segmentation-offloaded packets of up to 64 KiB whole, and a smaller bucket holds a
    # single stream well under the rate (measured: 1gbit with 64kb gave 900 Mbit/s, 4gbit with
    # 128kb 3.6 Gbit/s, against 955 and 3.7 with 1 ms). 20 ms of queue drops nothing a single
    # stream sends (5 ms did) and keeps the queueing delay a sharing flow sees modest.
    burst=$((bits / 8 / 1000))
    [ "$burst" -ge 131072 ] || burst=131072
    for r in "${rails[@]}"; do
        ip link add "$prefix$r" netns "$a" type veth peer name "$prefix$r" netns "$b"
        ip -n "$a" addr add "10.71.$r.1/24" dev "$prefix$r"
        ip -n "$b" addr add "10.71.$r.2/24" dev "$prefix$r"
        for host in "$a" "$b"; do
            tc -n "$host" qdisc add dev "$prefix$r" root tbf rate "$rate" burst "$burst" latency 20ms
            ip -n "$host" link set "$prefix$r" up
        done
    done
    for host in "$a" "$b"; do
        ip -n "$host" link set lo up
        mkdir -p "/etc/netns/$host"
        printf '%s\n' "127.0.0.1 localhost" "::1 localhost ip6-localhost ip6-loopback" \
            "10.71.1.1 $a" "10.71.1.2 $b" >"/etc/netns/$host/hosts"
    done
    trap - ERR
    # Until the kernel's link watcher has seen both ends' carrier (up to a second later), the
    # qdisc is the one that drops everything: a connection opened at once would lose its SYN
    # and wait a second for the retry.
    for _ in $(seq 50); do
        rails_up "$prefix" && return 0
        sleep 0.1
    done
    down "$prefix"
    die 77 "skipped: the rails' links did not come up"
}

# Runs argv on the host: in its network namespace and a UTS namespace named after it.
run() {
    local host="$1"
    shift
    [ $# -gt 0 ] || die 2 "run: no program"
    check_host "$host"
    # exec all the way down: the launcher's pid is the program's, so Hydra's signals reach it.
    # shellcheck disable=SC2016 # expanded by that sh
    exec ip netns exec "$host" unshare --uts \
        sh -c 'echo "$0" >/proc/sys/kernel/hostname && exec "$@"' "$host" "$@"
}

# ssh's way: one command line from the words, run by a shell on the host. bash rather than sh:
# bash execs a lone command where dash forks it, and the launcher's pid must stay the proxy's.
enter() {
    local host="$1" IFS=' '
    shift
    [ $# -gt 0 ] || set -- exec bash -i
    run "$host" bash -c "$*"
}

launcher() {
    local prefix="$1"
    printf '%s\n' "$self" run "$prefix-a" mpiexec.hydra -launcher ssh -launcher-exec "$self" \
        -iface "${prefix}1" -hosts "$prefix-a,$prefix-b" -ppn 2
}

[ $# -gt 0 ] || usage
case "$1" in
    up)
        [ $# -eq 3 ] || usage
        check_prefix "$2"
        up "$2" "$3"
        ;;
    down)
        [ $# -eq 2 ] || usage
        check_prefix "$2"
        down "$2"
        ;;
    enter)
        [ $# -ge 2 ] || usage
        shift
        enter "$@"
        ;;
    run)
        [ $# -ge 3 ] || usage
        shift
        run "$@"
        ;;
    launcher)
        [ $# -eq 2 ] || usage
        check_prefix "$2"
        launcher "$2"
        ;;
    -*)
        # Called as Hydra's ssh: drop ssh's options (Hydra passes -x), the host and the
        # command words follow.
        while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done
        [ $# -ge 1 ] || usage
        enter "$@"
        ;;
    *-a | *-b)
        # Called as Hydra's rsh, which passes no option first.
        [ -e "/run/netns/$1" ] || usage
        enter "$@"
        ;;
    *) usage ;;
esac

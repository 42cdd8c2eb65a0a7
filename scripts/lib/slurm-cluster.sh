#!/usr/bin/env bash
# A one-machine Slurm cluster for tests: this machine is its only node (or, with --netns, the
# two "hosts" of netns-hosts.sh are its two nodes), and everything the cluster writes (config,
# munge key and socket, state, spool, logs, pid files) lives under one directory, so the
# system's Slurm and munge (if any) are never read or touched.
#
#   slurm-cluster.sh up <dir> [--netns <prefix>]
#                                 installs what is missing (apt, only as root), writes the
#                                 config under <dir>, starts munged, slurmctld and slurmd, waits
#                                 until the nodes are idle and prints the environment a caller
#                                 needs as `export X=...` lines: eval "$(slurm-cluster.sh up d)"
#   slurm-cluster.sh down <dir>   stops what up started from <dir> (jobs, slurmds, slurmctld,
#                                 munged, by their pid files); succeeds when nothing is running
#
# up exits with 77 (the usual "skipped" status) and one line on stderr when Slurm cannot run
# here: not root, the packages cannot be installed, or a daemon refuses to start; it has then
# stopped whatever it started. A second up on the same <dir> restarts the cluster afresh.
#
# Two hosts (--netns <prefix>, after `netns-hosts.sh up <prefix> <rate>`): nodes <prefix>-a and
# <prefix>-b, addressed by their rail-1 addresses 10.71.1.1 and 10.71.1.2, one slurmd in each
# namespace (started by `netns-hosts.sh run`, so it sees the host's name as its hostname).
# slurmctld runs on <prefix>-a, the only place both nodes reach (this machine's own namespace
# is joined to neither), so clients run there too, with SLURM_CONF set:
#   netns-hosts.sh run <prefix>-a srun --mpi=pmi2 -N 2 -n 4 prog
# The one munged stays outside: its socket is a file, which every namespace reaches. Stop the
# cluster before the hosts (down reaches into the namespaces to cancel jobs).
#
# Tunables (environment of up):
#   SLURM_CLUSTER_CPUS   CPUs each node claims (default 8, whatever the machine has): a plain
#                        `srun -n N` runs at once for N up to this. Slurm is told to believe the
#                        config over the hardware (SlurmdParameters=config_overrides); tasks
#                        are not bound (task/none), so 8 tasks share 2 cores as processes do.
#   SLURM_CLUSTER_FIRST_JOB_ID
#                        the first job's id (default: 1 plus a random multiple of 1000 below
#                        65 million). Programs name node-local things after the job id (ch4
#                        its shared-memory segments in /dev/shm), and all clusters on this
#                        machine share one /dev/shm: two clusters counting from 1 ran jobs of
#                        the same id at once, whose ranks met in one segment and hung.
#   SLURM_CLUSTER_PORT   slurmctld's port (default: the first free pair from 16817; with
#                        --netns, 16817, the namespaces' stacks being their own), slurmd's is
#                        the next one; high so as not to clash with a real Slurm's 6817/6818.
#
# Layout of <dir> (made 0755: munged wants every directory above its socket searchable by all):
#   etc/      slurm.conf, cgroup.conf, plugstack.conf (empty, so /etc/slurm's is not read);
#             netns (the prefix, with --netns: how down finds the nodes)
#   munge/    munge.key, munge.socket, munged.{pid,log,seed}
#   state/    slurmctld's StateSaveLocation     spool/  slurmd's SlurmdSpoolDir
#   run/      slurmctld.pid, slurmd.pid         log/    slurmctld.log, slurmd.log, apt.log
# With --netns every node has its own spool/<node>/, run/slurmd-<node>.pid,
# log/slurmd-<node>.{log,out} and tmp/<node>/ (its TmpFS).
#
# The munged is private (its own key and socket, AuthInfo=socket=... in slurm.conf), so clients
# need only SLURM_CONF. MPI: `srun --mpi=pmi2` (Slurm's PMI-2 server) and `srun --mpi=pmix`
# (PMIx v4 through Debian's libpmix) both work; MpiDefault is none, so say which.
set -euo pipefail

self="$(basename "${BASH_SOURCE[0]}")"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
self_path=$here/$self
netns_hosts=$here/netns-hosts.sh
plugin_dir=/usr/lib/x86_64-linux-gnu/slurm-wlm
# slurmd and slurmctld and the client tools, munge, the plugins holding mpi_pmi2/mpi_pmix, and
# libpmix-dev because the pmix plugin dlopens the unversioned libpmix.so, which only -dev ships
# (the plugin package does not depend on it: without it `srun --mpi=pmix` fails at run time).
packages=(slurmctld slurmd slurm-client munge slurm-wlm-basic-plugins libpmix-dev)

die() { # status, message
    echo "$self: $2" >&2
    exit "$1"
}

usage() {
    sed -n '/^#   slurm-cluster.sh up/,/^#$/s/^# \{0,3\}//p' "${BASH_SOURCE[0]}" >&2
    exit 2
}

# Whether a pid runs the named program, so that a stale pid file whose pid was reused never
# gets an unrelated process killed. Zombies count as gone: this machine's init reaps orphans
# late, and a zombie holds no port, socket or file.
pid_alive() { # pid, program
    local state comm
    comm="$(cat "/proc/$1/comm" 2>/dev/null)" || return 1
    [[ $comm == "$2" ]] || return 1
    state="$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" || return 1
    [[ $state != Z && $state != X ]]
}

# The pid in a pid file if that process still runs the named program.
live_pid() { # pidfile, program
    local pid
    [[ -r $1 ]] || return 1
    read -r pid <"$1" 2>/dev/null || return 1
    [[ $pid =~ ^[0-9]+$ ]] && pid_alive "$pid" "$2" || return 1
    echo "$pid"
}

# Waits on the pid rather than the file: slurmctld removes its pid file as it starts shutting
# down, seconds before it exits (it saves its state first).
stop_daemon() { # pidfile, program
    local pid i
    pid="$(live_pid "$1" "$2")" || { rm -f "$1"; return 0; }
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
        pid_alive "$pid" "$2" || break
        sleep 0.1
    done
    if pid_alive "$pid" "$2"; then
        kill -KILL "$pid" 2>/dev/null || true
        sleep 0.2
    fi
    rm -f "$1"
}

# slurmstepd processes of this cluster's steps: each listens on a unix socket in the spool
# directory (<node>_<job>.<step>), which is what ties a stepd to this <dir> and no other cluster.
# Read from /proc (the stepd's socket inodes against its namespace's socket table) rather than
# with ss, which sees only its own network namespace's sockets, not those of a node's.
stepd_pids() { # spool dir
    [[ -d $1 ]] || return 0
    local p comm
    for p in /proc/[0-9]*; do
        read -r comm 2>/dev/null <"$p/comm" || continue
        [[ $comm == slurmstepd ]] || continue
        find "$p/fd" -lname 'socket:*' -printf '%l\n' 2>/dev/null | tr -dc '0-9\n' |
            awk -v dir="$1/" 'NR == FNR { own[$1]; next }
                ($7 in own) && index($8, dir) == 1 { found = 1 }
                END { exit !found }' - "$p/net/unix" 2>/dev/null &&
            echo "${p#/proc/}"
    done
    return 0
}

# A stepd and everything below it: with proctrack/linuxproc the tasks are its descendants, and
# killing the stepd alone would leave them running.
with_descendants() { # pid...
    local all=" $* " parent child
    for ((;;)); do
        local more=0
        while read -r child parent; do
            if [[ $all == *" $parent "* && $all != *" $child "* ]]; then
                all+="$child "
                more=1
            fi
        done < <(ps -eo pid=,ppid=)
        ((more)) || break
    done
    echo "$all"
}

# Client commands started against this cluster (SLURM_CONF naming its slurm.conf). Normally
# scancel ends them; an srun whose step lost its slurmd waits forever and shrugs off SIGTERM.
client_pids() { # slurm.conf
    local p comm
    for p in /proc/[0-9]*; do
        read -r comm 2>/dev/null <"$p/comm" || continue
        case $comm in srun | salloc | sbatch | sattach) ;; *) continue ;; esac
        if grep -qzxF "SLURM_CONF=$1" "$p/environ" 2>/dev/null; then
            echo "${p#/proc/}"
        fi
    done
}

# The cluster's nodes, one a line: this machine, or the two hosts of a --netns cluster.
prefix=
nodes() {
    if [[ -n $prefix ]]; then
        printf '%s\n' "$prefix-a" "$prefix-b"
    else
        hostname -s
    fi
}

# Runs a program on a node: in its namespace for a --netns cluster (where slurmctld, on the
# first node, is also where clients reach it).
on_node() { # node, program, args...
    if [[ -n $prefix ]]; then
        "$netns_hosts" run "$@"
    else
        shift
        "$@"
    fi
}

# slurmd 22.05 does not start without a cgroup filesystem under /sys/fs/cgroup, and `ip netns
# exec` gives the namespace's programs a fresh /sys without the machine's cgroup mounts.
# cgroup_mounts lists the machine's (read outside the namespaces), with_cgroups mounts them
# again (the same types and options, so the same hierarchies) in the mount namespace of the
# program it then runs, which `ip netns exec` made for it alone: nothing changes outside.
cgroup_mounts() {
    awk '$2 ~ "^/sys/fs/cgroup(/|$)" { print $3, $2, $4 }' /proc/self/mounts
}

with_cgroups() { # mounts (cgroup_mounts' lines), program, args...
    local type dir opts
    while read -r type dir opts; do
        [[ -n $type ]] || continue
        { mkdir -p "$dir" && mount -t "$type" -o "$opts" "$type" "$dir"; } ||
            die 1 "cannot mount $type on $dir in host $(hostname)"
    done <<<"$1"
    shift
    exec "$@"
}

slurmd_pidfile() { # dir, node
    if [[ -n $prefix ]]; then
        echo "$1/run/slurmd-$2.pid"
    else
        echo "$1/run/slurmd.pid"
    fi
}

any_slurmd() { # dir
    local f
    for f in "$1"/run/slurmd*.pid; do
        live_pid "$f" slurmd >/dev/null && return 0
    done
    return 1
}

down() { # dir
    local dir=$1 pids i f ctl
    [[ -d $dir ]] || return 0
    dir="$(cd "$dir" && pwd)"
    local conf=$dir/etc/slurm.conf
    # The cluster being stopped may be another kind than the one up is about to start.
    prefix="$(cat "$dir/etc/netns" 2>/dev/null)" || prefix=
    ctl="$(nodes | head -n 1)"
    # Cancel jobs first so that slurmd ends their steps (and the tasks) itself; a stepd
    # left behind by a dead slurmd would keep its tasks running.
    if live_pid "$dir/run/slurmctld.pid" slurmctld >/dev/null && [[ -r $conf ]] &&
        any_slurmd "$dir"; then
        on_node "$ctl" env SLURM_CONF="$conf" timeout 10 scancel --user=root >/dev/null 2>&1 ||
            true
        for ((i = 0; i < 50; i++)); do
            [[ -z "$(stepd_pids "$dir/spool")" ]] && break
            sleep 0.2
        done
    fi
    for f in "$dir"/run/slurmd*.pid; do
        if [[ -e $f ]]; then stop_daemon "$f" slurmd; fi
    done
    stop_daemon "$dir/run/slurmctld.pid" slurmctld
    # Steps whose slurmd is gone (it was killed, or slurmctld was already down so nothing
    # could be cancelled) go by force, with their tasks.
    pids="$(stepd_pids "$dir/spool")"
    if [[ -n $pids ]]; then
        # shellcheck disable=SC2046,SC2086 # one pid per word
        kill -KILL $(with_descendants $pids) 2>/dev/null || true
    fi
    pids="$(client_pids "$conf")"
    if [[ -n $pids ]]; then
        # shellcheck disable=SC2086 # one pid per word
        kill -KILL $pids 2>/dev/null || true
    fi
    stop_daemon "$dir/munge/munged.pid" munged
}

missing_packages() {
    local missing=0 c
    for c in slurmctld slurmd srun sinfo scontrol scancel munged munge; do
        command -v "$c" >/dev/null || missing=1
    done
    for c in "$plugin_dir/mpi_pmi2.so" "$plugin_dir/mpi_pmix.so" \
        /usr/lib/x86_64-linux-gnu/libpmix.so; do
        [[ -e $c ]] || missing=1
    done
    return $((1 - missing))
}

install_packages() { # log file
    missing_packages || return 0
    local apt=(env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends)
    # Try first without `apt-get update`, which is slow; a fresh machine's empty lists make the
    # install fail at once, and then the update is needed anyway.
    "${apt[@]}" "${packages[@]}" >>"$1" 2>&1 ||
        { apt-get update >>"$1" 2>&1 && "${apt[@]}" "${packages[@]}" >>"$1" 2>&1; } ||
        return 1
    ! missing_packages
}

# A port nobody listens on, on any address: connecting to loopback finds listeners on
# 127.0.0.1 and on the wildcard address, which are the ones that would clash.
port_free() { # port
    ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

pick_port() {
    local p
    if [[ -n ${SLURM_CLUSTER_PORT:-} ]]; then
        echo "$SLURM_CLUSTER_PORT"
        return
    fi
    for ((p = 16817; p < 16917; p += 2)); do
        if port_free "$p" && port_free $((p + 1)); then
            echo "$p"
            return
        fi
    done
    return 1
}

write_config() { # dir, port, cpus, first job id, node=address... (the first runs slurmctld)
    local dir=$1 port=$2 cpus=$3 first_job=$4 node addr names='' per_node=''
    local what='a one-node test cluster'
    shift 4
    # Every slurmd of a --netns cluster writes its own files (%n: the node's name).
    [[ -z $prefix ]] || { per_node=-%n what="a test cluster of two namespace hosts"; }
    cat >"$dir/etc/slurm.conf" <<EOF
# Written by $self up: $what, everything under $dir.
ClusterName=ch4test
SlurmctldHost=${1%%=*}(${1#*=})
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool${per_node:+/%n}
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd$per_node.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd$per_node.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=$dir/etc/plugstack.conf
# No cgroups: process tracking by /proc parentage and no task binding work in any container.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MailProg=/bin/true
MpiDefault=none
SchedulerType=sched/backfill
# A job submitted while the previous one is still COMPLETING (the node is held for some
# milliseconds after its tasks end) is queued ("srun: job N queued and waiting for resources"
# on stderr) until a later scheduling pass: about 3 s later with the defaults, at most 1 s
# with the main loop run every second.
SchedulerParameters=sched_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
# A node claims $cpus CPUs whatever the hardware says, so that \`srun -n $cpus\` runs at once.
SlurmdParameters=config_overrides
ReturnToService=2
InactiveLimit=0
KillWait=5
MinJobAge=60
FirstJobId=$first_job
EOF
    if [[ -n $per_node ]]; then
        # srun --mpi=pmix's plugin makes a directory for each step under TmpFS, named alike on
        # every node, and the hosts of a --netns cluster share one /tmp.
        echo "TmpFS=$dir/tmp/%n" >>"$dir/etc/slurm.conf"
    fi
    for node in "$@"; do
        addr=${node#*=} node=${node%%=*}
        names+=${names:+,}$node
        echo "NodeName=$node NodeAddr=$addr CPUs=$cpus Sockets=1 CoresPerSocket=$cpus" \
            "ThreadsPerCore=1 State=UNKNOWN" >>"$dir/etc/slurm.conf"
    done
    cat >>"$dir/etc/slurm.conf" <<EOF
# FORCE lets several jobs share those CPUs too (tests started in parallel do not queue).
PartitionName=test Nodes=$names Default=YES MaxTime=INFINITE OverSubscribe=FORCE:4 State=UP
EOF
    # slurmd 22.05 loads a cgroup plugin whatever the other plugins are (it reads the cpuset
    # on cgroup v1 and creates nothing with task/none and proctrack/linuxproc); it reads this
    # file beside slurm.conf, and writing it pins the choice instead of leaving it to defaults.
    cat >"$dir/etc/cgroup.conf" <<EOF
CgroupPlugin=autodetect
EOF
    : >"$dir/etc/plugstack.conf"
}

fail_up() { # dir, message
    down "$1" || true
    die 77 "$2"
}

# munged refuses a socket below a directory that not everybody can search.
check_ancestors() { # absolute dir
    local d=$1
    while [[ $d != / ]]; do
        d="$(dirname "$d")"
        [[ $(($(stat -c '0%a' "$d") & 1)) -eq 1 ]] ||
            die 2 "munged needs every directory above its socket searchable by all: chmod o+x $d"
    done
}

cluster_dir=
# Whatever makes up fail (a command failing under set -e, a signal) stops what it started.
cleanup_failed_up() {
    local rc=$?
    if ((rc != 0)) && [[ -n $cluster_dir ]]; then
        down "$cluster_dir" || true
    fi
}

up() { # dir, netns prefix (empty: this machine alone)
    local dir=$1 want=$2 port cpus first_job i node ctl states log idle
    local -a nodes=() addrs=()
    [[ $(id -u) -eq 0 ]] || die 77 "not root: slurmd must run as root to start tasks"
    [[ $dir != *[[:space:]]* ]] || die 2 "the directory's path must not contain white space"
    if [[ -n $want ]]; then
        [[ -x $netns_hosts ]] || die 2 "no $netns_hosts beside this script"
        for node in "$want-a" "$want-b"; do
            [[ -e /run/netns/$node ]] ||
                die 2 "no host $node: run netns-hosts.sh up $want <rate> first"
        done
    fi
    mkdir -p "$dir"
    dir="$(cd "$dir" && pwd)"
    check_ancestors "$dir"
    down "$dir"
    prefix=$want
    cluster_dir=$dir
    trap cleanup_failed_up EXIT
    trap 'exit 130' INT TERM
    rm -rf "${dir:?}"/{etc,munge,state,spool,run,log,tmp}
    mkdir -p "$dir"/{etc,munge,state,spool,run,log}
    chmod 0755 "$dir" "$dir/munge"
    # Written first, so that a failing up's down already knows where the slurmds are.
    [[ -z $prefix ]] || echo "$prefix" >"$dir/etc/netns"

    install_packages "$dir/log/apt.log" ||
        fail_up "$dir" "cannot install Slurm (${packages[*]}): see $dir/log/apt.log"

    mapfile -t nodes < <(nodes)
    if [[ -n $prefix ]]; then
        addrs=(10.71.1.1 10.71.1.2)
        port=${SLURM_CLUSTER_PORT:-16817}
    else
        addrs=(127.0.0.1)
        port="$(pick_port)" || fail_up "$dir" "no free port pair in 16817-16916"
    fi
    ctl=${nodes[0]}
    cpus=${SLURM_CLUSTER_CPUS:-8}
    first_job=${SLURM_CLUSTER_FIRST_JOB_ID:-$(((RANDOM << 15 | RANDOM) % 65000 * 1000 + 1))}
    [[ $first_job =~ ^[1-9][0-9]{0,7}$ ]] ||
        fail_up "$dir" "SLURM_CLUSTER_FIRST_JOB_ID '$first_job' is not a job id (1 to 67043327)"
    local -a spec=()
    for i in "${!nodes[@]}"; do
        spec+=("${nodes[i]}=${addrs[i]}")
        [[ -z $prefix ]] || mkdir -p "$dir/spool/${nodes[i]}" "$dir/tmp/${nodes[i]}"
    done
    write_config "$dir" "$port" "$cpus" "$first_job" "${spec[@]}"

    # munged refuses a key readable by others and sockets under directories not searchable
    # by all; it runs as root here (the key is root's), which munged allows.
    dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
    chmod 0400 "$dir/munge/munge.key"
    munged --socket="$dir/munge/munge.socket" --key-file="$dir/munge/munge.key" \
        --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" \
        --seed-file="$dir/munge/munged.seed" </dev/null >>"$dir/log/munged.out" 2>&1 ||
        fail_up "$dir" "munged did not start: see $dir/munge/munged.log"
    munge -n -S "$dir/munge/munge.socket" | unmunge -S "$dir/munge/munge.socket" >/dev/null 2>&1 ||
        fail_up "$dir" "munged does not answer on $dir/munge/munge.socket"

    # The daemons fork into the background; their stdio goes to files, never to ours, so that
    # a caller's $(...) around up does not wait for them to exit.
    export SLURM_CONF=$dir/etc/slurm.conf
    on_node "$ctl" slurmctld -f "$SLURM_CONF" </dev/null >>"$dir/log/slurmctld.out" 2>&1 ||
        fail_up "$dir" "slurmctld did not start: see $dir/log/slurmctld.log"
    for ((i = 0; i < 100; i++)); do
        on_node "$ctl" timeout 5 scontrol ping 2>/dev/null | grep -q 'is UP' && break
        live_pid "$dir/run/slurmctld.pid" slurmctld >/dev/null ||
            fail_up "$dir" "slurmctld exited: see $dir/log/slurmctld.log"
        sleep 0.2
    done
    for node in "${nodes[@]}"; do
        log=$dir/log/slurmd${prefix:+-$node}
        if [[ -n $prefix ]]; then
            on_node "$node" "$self_path" with-cgroups "$(cgroup_mounts)" \
                slurmd -f "$SLURM_CONF" -N "$node"
        else
            slurmd -f "$SLURM_CONF" -N "$node"
        fi </dev/null >>"$log.out" 2>&1 ||
            fail_up "$dir" "slurmd of $node did not start: see $log.log and $log.out"
    done
    idle="$(printf 'idle %.0s' "${nodes[@]}")"
    for ((i = 0; ; i++)); do
        states="$(on_node "$ctl" timeout 5 sinfo -h -N -o %t 2>/dev/null | paste -sd ' ')" || true
        [[ $states == "${idle% }" ]] && break
        ((i < 300)) ||
            fail_up "$dir" "nodes ${nodes[*]} not all idle after 60 s ($states): see $dir/log"
        for node in "${nodes[@]}"; do
            log=$dir/log/slurmd${prefix:+-$node}.log
            live_pid "$(slurmd_pidfile "$dir" "$node")" slurmd >/dev/null ||
                fail_up "$dir" "slurmd of $node exited: see $log"
        done
        sleep 0.2
    done
    echo "export SLURM_CONF=$SLURM_CONF"
}

case ${1:-}:$# in
up:2) up "$2" '' ;;
up:4)
    [[ $3 == --netns ]] || usage
    [[ $4 =~ ^[A-Za-z0-9][A-Za-z0-9_-]{0,13}$ ]] ||
        die 2 "prefix '$4' is not one netns-hosts.sh takes (1 to 14 letters, digits, '_', '-')"
    up "$2" "$4"
    ;;
down:2) down "$2" ;;
# Not for callers: how up starts a slurmd in a namespace (see with_cgroups).
with-cgroups:*)
    shift
    with_cgroups "$@"
    ;;
*) usage ;;
esac

# Sourced by the peer-comparison scripts: installs the peers' MPI libraries (and what the mpi
# crate's bindings need) when missing and running as root on Debian.
#   install_peers [extra Debian packages to need...]
install_peers() {
    local need=("$@")
    command -v mpicc.mpich >/dev/null || need+=(mpich libmpich-dev)
    command -v mpicc.openmpi >/dev/null || need+=(openmpi-bin libopenmpi-dev)
    ls /usr/lib/llvm-*/lib/libclang.so* >/dev/null 2>&1 || need+=(libclang-dev)
    [ ${#need[@]} -ne 0 ] || return 0
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "installing ${need[*]}..." >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
    else
        echo "missing: ${need[*]} (install them, or run as root on Debian)" >&2
        exit 1
    fi
}

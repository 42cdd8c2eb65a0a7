//! osu_multi_lat, after the OSU micro-benchmark of the same name. Latency of many pairs at once: rank i ping-pongs with rank i + n/2, all pairs together; the
//! average one-way latency over the pairs.
//!
//! `cargo run --release --example osu_multi_lat -- [-m [min:]max] [-i iterations] [-x warmup]`
//! starts 2 processes through the embedded launcher (`CH4_NP` sets another count); under
//! `ch4run -n N` or Hydra's `mpiexec -n N` the program joins their job instead, and `--threads`
//! runs the ranks as threads of one process. Built with `--features peer-mpi` the same loop runs
//! over the system's MPI (see `scripts/osu-vs-peers.sh`). The loops live in `common/`.

mod common;

fn main() -> std::process::ExitCode {
    common::main(&common::Spec::of(common::Kind::MultiLatency))
}

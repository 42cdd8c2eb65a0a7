//! osu_latency, after the OSU micro-benchmark of the same name. Ping-pong latency between two ranks: rank 0 sends and receives, rank 1 receives and sends;
//! one-way latency = time / (2 × iterations).
//!
//! `cargo run --release --example osu_latency -- [-m [min:]max] [-i iterations] [-x warmup]`
//! starts 2 processes through the embedded launcher (`CH4_NP` sets another count); under
//! `ch4run -n N` or Hydra's `mpiexec -n N` the program joins their job instead, and `--threads`
//! runs the ranks as threads of one process. Built with `--features peer-mpi` the same loop runs
//! over the system's MPI (see `scripts/osu-vs-peers.sh`). The loops live in `common/`.

mod common;

fn main() -> std::process::ExitCode {
    common::main(&common::Spec::of(common::Kind::Latency))
}

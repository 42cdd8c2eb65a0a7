//! osu_bibw, after the OSU micro-benchmark of the same name. Bidirectional bandwidth: both ranks post a window of receives and a window of sends to each
//! other and wait for all; MB/s counts both directions.
//!
//! `cargo run --release --example osu_bibw -- [-m [min:]max] [-i iterations] [-x warmup] [-W window]`
//! starts 2 processes through the embedded launcher (`CH4_NP` sets another count); under
//! `ch4run -n N` or Hydra's `mpiexec -n N` the program joins their job instead, and `--threads`
//! runs the ranks as threads of one process. Built with `--features peer-mpi` the same loop runs
//! over the system's MPI (see `scripts/osu-vs-peers.sh`). The loops live in `common/`.

mod common;

fn main() -> std::process::ExitCode {
    common::main(&common::Spec::of(common::Kind::Bidirectional))
}

//! osu_bw, after the OSU micro-benchmark of the same name. Unidirectional bandwidth: rank 0 posts a window of `-W` nonblocking sends, waits for them all
//! and for rank 1's 4-byte acknowledgement; MB/s = 10^6 bytes per second, as OSU prints it.
//!
//! `cargo run --release --example osu_bw -- [-m [min:]max] [-i iterations] [-x warmup] [-W window]`
//! starts 2 processes through the embedded launcher (`CH4_NP` sets another count); under
//! `ch4run -n N` or Hydra's `mpiexec -n N` the program joins their job instead, and `--threads`
//! runs the ranks as threads of one process. Built with `--features peer-mpi` the same loop runs
//! over the system's MPI (see `scripts/osu-vs-peers.sh`). The loops live in `common/`.

mod common;

fn main() -> std::process::ExitCode {
    common::main(&common::Spec::of(common::Kind::Bandwidth))
}

//! osu_mbw_mr, after the OSU micro-benchmark of the same name. Aggregate bandwidth and message rate: the first half of the ranks each stream windows of
//! sends to a partner in the second half (rank i to i + n/2), acknowledged per window; the
//! pairs' rates are summed. With two ranks (the default) this is the message rate of one pair.
//!
//! `cargo run --release --example osu_mbw_mr -- [-m [min:]max] [-i iterations] [-x warmup] [-W window]`
//! starts 2 processes through the embedded launcher (`CH4_NP` sets another count); under
//! `ch4run -n N` or Hydra's `mpiexec -n N` the program joins their job instead, and `--threads`
//! runs the ranks as threads of one process. Built with `--features peer-mpi` the same loop runs
//! over the system's MPI (see `scripts/osu-vs-peers.sh`). The loops live in `common/`.

mod common;

fn main() -> std::process::ExitCode {
    common::main(&common::Spec::of(common::Kind::MessageRate))
}

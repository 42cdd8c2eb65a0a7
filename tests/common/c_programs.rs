//! C programs on ch4's C library, for the tests that run them under a cluster's launchers
//! (Slurm's `srun`, Open MPI's `mpirun`).

use std::path::PathBuf;
use std::process::Command;

/// ch4's C library of this profile (`libmpi_abi.so`, built here with the default netmod, and
/// with PMIx when this test was built with the `pmix` feature), in a directory of its own under
/// its soname too, for `c-abi/bin/mpicc` to link and the programs to load (`CH4_ABI_LIBDIR`).
pub fn c_library() -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut build = Command::new(cargo);
    build.args(["build", "-q", "-p", "ch4-mpi-abi", "--lib"]);
    if cfg!(feature = "pmix") {
        build.args(["--features", "pmix"]);
    }
    if !cfg!(debug_assertions) {
        build.arg("--release");
    }
    assert!(
        build.status().expect("run cargo build").success(),
        "building the C library failed"
    );
    let dir = super::jobs::bin_dir().join("launchers-abi/lib");
    std::fs::create_dir_all(&dir).unwrap();
    for name in ["libmpi_abi.so.1", "libmpi_abi.so"] {
        let link = dir.join(name);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(super::jobs::bin_dir().join("libmpi_abi.so"), &link).unwrap();
    }
    dir
}

/// The real OSU `osu_latency` built on ch4's C library ([`c_library`]) as `name` under the
/// temporary directory, or `None` (and `test` skipped) when the OSU sources are not here.
pub fn osu_latency(test: &str, name: &str) -> Option<PathBuf> {
    let osu = testkit::skip::third_party("osu-micro-benchmarks-7.2/c", test)?;
    let bin = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    let util: Vec<PathBuf> = [
        "osu_util",
        "osu_util_mpi",
        "osu_util_graph",
        "osu_util_validation",
        "osu_util_papi",
    ]
    .iter()
    .map(|u| osu.join(format!("util/{u}.c")))
    .collect();
    let cc = Command::new(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("c-abi/bin/mpicc"))
        .env("CH4_ABI_LIBDIR", c_library())
        .args(["-O2", "-DFIELD_WIDTH=18", "-DFLOAT_PRECISION=2", "-I"])
        .arg(osu.join("util"))
        .arg("-o")
        .arg(&bin)
        .arg(osu.join("mpi/pt2pt/standard/osu_latency.c"))
        .args(&util)
        .args(["-lm", "-lpthread"])
        .status()
        .expect("run c-abi/bin/mpicc");
    assert!(
        cc.success(),
        "building osu_latency on ch4's C library failed"
    );
    Some(bin)
}

/// `c-abi/examples/hello.c` (a token passed around a ring of every rank) built on ch4's C
/// library ([`c_library`]) as `name` under the temporary directory.
pub fn hello(name: &str) -> PathBuf {
    let bin = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let cc = Command::new(root.join("c-abi/bin/mpicc"))
        .env("CH4_ABI_LIBDIR", c_library())
        .args(["-O2", "-o"])
        .arg(&bin)
        .arg(root.join("c-abi/examples/hello.c"))
        .status()
        .expect("run c-abi/bin/mpicc");
    assert!(cc.success(), "building hello.c on ch4's C library failed");
    bin
}

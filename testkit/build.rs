//! Declares `cfg(loom)`: `scripts/loom.sh` builds shm's tests, and so this dev-dependency of
//! theirs, with `--cfg loom`, under which shm has no segment or transport; the kit then leaves
//! out its shm constructor (`[lints] workspace = true` leaves no room for a crate-local
//! `check-cfg` list, so it is declared here).

fn main() {
    println!("cargo::rustc-check-cfg=cfg(loom)");
}

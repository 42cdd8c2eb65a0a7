//! `c-abi/bin/mpicc` as build systems call it. `CC` picks the compiler it wraps, and a Makefile
//! run as `make CC=mpicc` (miniAMR's, HPC codes' usual way) hands the recipes `CC` naming the
//! wrapper itself: the wrapper must then compile with `cc`, not run itself without end.

mod common;

use std::path::Path;

/// What the wrapper would run (`-show`) for `cc_var` as `CC`.
fn shown(cc_var: &str) -> String {
    let lib = common::built();
    common::run_ok(
        common::mpicc(&lib)
            .env("CC", cc_var)
            .args(["-show", "-c", "x.c"]),
    )
}

#[test]
fn cc_naming_the_wrapper_itself_compiles_with_cc() {
    let wrapper = common::root().join("c-abi/bin/mpicc");
    let cmd = shown(&wrapper.to_string_lossy());
    assert!(cmd.starts_with("cc -I"), "{cmd}");
    // Through a link of another name, too.
    let dir = common::bin_dir().join("mpi-abi-test/wrapper");
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join("mpicc-link");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&wrapper, &link).unwrap();
    let cmd = shown(&link.to_string_lossy());
    assert!(cmd.starts_with("cc -I"), "{cmd}");
}

#[test]
fn cc_naming_a_compiler_is_used() {
    let cmd = shown("g++");
    assert!(cmd.starts_with("g++ -I"), "{cmd}");
    assert!(
        cmd.contains(&*Path::new("c-abi/include").to_string_lossy()),
        "{cmd}"
    );
}

/// `mpicxx` (a link to the same wrapper) compiles with `CXX`, `c++` by default, and links the
/// library; `make CXX=mpicxx` is handled as `make CC=mpicc` is.
#[test]
fn mpicxx_compiles_with_cxx() {
    let lib = common::built();
    let mpicxx = common::root().join("c-abi/bin/mpicxx");
    let show = |cxx: Option<&str>| {
        let mut cmd = std::process::Command::new(&mpicxx);
        cmd.env("CH4_ABI_LIBDIR", &lib).env_remove("CXX");
        if let Some(c) = cxx {
            cmd.env("CXX", c);
        }
        common::run_ok(cmd.args(["-show", "x.cpp"]))
    };
    let cmd = show(None);
    assert!(
        cmd.starts_with("c++ -I") && cmd.contains("-lmpi_abi"),
        "{cmd}"
    );
    assert!(show(Some("clang++")).starts_with("clang++ -I"));
    assert!(show(Some(&mpicxx.to_string_lossy())).starts_with("c++ -I"));
}

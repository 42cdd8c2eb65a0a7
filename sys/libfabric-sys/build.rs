//! Finds the system libfabric with pkg-config and links it.
//!
//! The bindings are generated ahead of time (`src/bindings.rs`, by
//! `scripts/regen-libfabric-bindings.sh`), so a build needs neither bindgen nor libclang: only
//! libfabric's `.pc` file and shared library.

use std::process::ExitCode;

/// The libfabric the committed bindings were generated from; older ones lack fields and calls.
const MIN_VERSION: &str = "1.17";

fn main() -> ExitCode {
    println!("cargo:rerun-if-changed=build.rs");
    match pkg_config::Config::new()
        .atleast_version(MIN_VERSION)
        .probe("libfabric")
    {
        Ok(lib) => {
            // Exported to dependents' build scripts as DEP_FABRIC_INCLUDE / DEP_FABRIC_VERSION
            // (this package `links = "fabric"`).
            let includes: Vec<String> = lib
                .include_paths
                .iter()
                .map(|p| p.display().to_string())
                .collect();
            println!("cargo:include={}", includes.join(":"));
            println!("cargo:version={}", lib.version);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!(
                "error: libfabric >= {MIN_VERSION} was not found by pkg-config.\n\
                 \n\
                 On Debian or Ubuntu install it with:\n\
                 \n    apt-get install libfabric-dev pkg-config\n\
                 \n\
                 (elsewhere, install libfabric's development files and make sure \
                 `pkg-config --modversion libfabric` prints {MIN_VERSION} or newer; \
                 PKG_CONFIG_PATH can point at a libfabric installed under a prefix).\n\
                 \n\
                 pkg-config said: {e}"
            );
            ExitCode::FAILURE
        }
    }
}

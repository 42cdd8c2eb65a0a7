//! Finds the system UCX with pkg-config and links UCP and what it needs (`-lucp -luct -lucs
//! -lucm`).
//!
//! The bindings are generated ahead of time (`src/bindings.rs`, by
//! `scripts/regen-ucx-bindings.sh`), so a build needs neither bindgen nor libclang: only UCX's
//! `.pc` file and shared libraries.

use std::process::ExitCode;

/// The UCX the committed bindings were generated from; older ones lack fields and calls (the
/// `*_nbx` API, `ucp_request_param_t`'s fields).
const MIN_VERSION: &str = "1.13";

fn main() -> ExitCode {
    println!("cargo:rerun-if-changed=build.rs");
    match pkg_config::Config::new()
        .atleast_version(MIN_VERSION)
        .probe("ucx")
    {
        Ok(lib) => {
            // Exported to dependents' build scripts as DEP_UCP_INCLUDE / DEP_UCP_VERSION (this
            // package `links = "ucp"`); the include list is empty when UCX's headers are in a
            // system directory, as Debian's are.
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
                "error: UCX >= {MIN_VERSION} was not found by pkg-config.\n\
                 \n\
                 On Debian or Ubuntu install it with:\n\
                 \n    apt-get install libucx-dev pkg-config\n\
                 \n\
                 (elsewhere, install UCX's development files and make sure \
                 `pkg-config --modversion ucx` prints {MIN_VERSION} or newer; \
                 PKG_CONFIG_PATH can point at a UCX installed under a prefix).\n\
                 \n\
                 pkg-config said: {e}"
            );
            ExitCode::FAILURE
        }
    }
}

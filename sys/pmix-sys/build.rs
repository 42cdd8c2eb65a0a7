//! Finds the system OpenPMIx with pkg-config and links `-lpmix`.
//!
//! The bindings are generated ahead of time (`src/bindings.rs`, by
//! `scripts/regen-pmix-bindings.sh`), so a build needs neither bindgen nor libclang: only
//! PMIx's `.pc` file and shared library.

use std::process::ExitCode;

/// The PMIx the committed bindings were generated from (Debian 12's, 4.2.2): the layout of
/// `pmix_value_t` and the attribute names they use are those of the v4 standard.
const MIN_VERSION: &str = "4.2";

fn main() -> ExitCode {
    println!("cargo:rerun-if-changed=build.rs");
    match pkg_config::Config::new()
        .atleast_version(MIN_VERSION)
        .probe("pmix")
    {
        Ok(lib) => {
            // Debian keeps the library a build links under a private directory (…/pmix2/lib,
            // which pkg-config names); the loader finds the same library, libpmix.so.2, in the
            // system's directory, so programs need no rpath.
            println!("cargo:version={}", lib.version);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!(
                "error: OpenPMIx >= {MIN_VERSION} was not found by pkg-config.\n\
                 \n\
                 On Debian or Ubuntu install it with:\n\
                 \n    apt-get install libpmix-dev pkg-config\n\
                 \n\
                 (elsewhere, install OpenPMIx's development files and make sure \
                 `pkg-config --modversion pmix` prints {MIN_VERSION} or newer; \
                 PKG_CONFIG_PATH can point at a PMIx installed under a prefix).\n\
                 \n\
                 pkg-config said: {e}"
            );
            ExitCode::FAILURE
        }
    }
}

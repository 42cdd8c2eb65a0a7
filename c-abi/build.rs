//! The library's name to the dynamic linker: programs record `libmpi_abi.so.1`, the standard
//! ABI's library name, whichever implementation they were linked against.

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libmpi_abi.so.1");
}

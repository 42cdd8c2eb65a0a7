#![no_main]
// The body, and what it checks, is fuzz_bodies::pmi::server (fuzz/bodies/src).
libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_bodies::pmi::server(data));

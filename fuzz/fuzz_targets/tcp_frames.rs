#![no_main]
// The body, and what it checks, is fuzz_bodies::tcp::frames (fuzz/bodies/src).
libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_bodies::tcp::frames(data));

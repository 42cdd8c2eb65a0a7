#![no_main]
// The body, and what it checks, is fuzz_bodies::credit::credit (fuzz/bodies/src).
libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_bodies::credit::credit(data));

#![no_main]
// The body, and what it checks, is fuzz_bodies::shm::cells (fuzz/bodies/src).
libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_bodies::shm::cells(data));

#![no_main]
//! Fuzz target `batch_body`: see `core_publisher::fuzzing::check_batch_body` for what it checks.

libfuzzer_sys::fuzz_target!(|data: &[u8]| core_publisher::fuzzing::check_batch_body(data));

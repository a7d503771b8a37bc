#![no_main]
//! Fuzz target `pixel_body`: see `core_publisher::fuzzing::check_pixel_body` for what it checks.

libfuzzer_sys::fuzz_target!(|data: &[u8]| core_publisher::fuzzing::check_pixel_body(data));

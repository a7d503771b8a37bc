#![no_main]
//! Fuzz target `pixel_record`: see `shared::fuzzing::check_pixel_record` for what it checks.

libfuzzer_sys::fuzz_target!(|data: &[u8]| shared::fuzzing::check_pixel_record(data));

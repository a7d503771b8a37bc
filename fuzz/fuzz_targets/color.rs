#![no_main]
//! Fuzz target `color`: see `shared::fuzzing::check_color` for what it checks.

libfuzzer_sys::fuzz_target!(|data: &[u8]| shared::fuzzing::check_color(data));

#![no_main]
//! Fuzz target `epoch`: see `shared::fuzzing::check_epoch` for what it checks.

libfuzzer_sys::fuzz_target!(|data: &[u8]| shared::fuzzing::check_epoch(data));

#![no_main]
//! Fuzz target `snapshot_record`: see `shared::fuzzing::check_snapshot_record` for what it checks.

libfuzzer_sys::fuzz_target!(|data: &[u8]| shared::fuzzing::check_snapshot_record(data));

#![no_main]
//! Fuzz target `ws_query`: see `shared::fuzzing::check_ws_query` for what it checks.

libfuzzer_sys::fuzz_target!(|data: &[u8]| shared::fuzzing::check_ws_query(data));

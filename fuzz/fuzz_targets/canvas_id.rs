#![no_main]
//! Fuzz target `canvas_id`: see `shared::fuzzing::check_canvas_id` for what it checks.

libfuzzer_sys::fuzz_target!(|data: &[u8]| shared::fuzzing::check_canvas_id(data));

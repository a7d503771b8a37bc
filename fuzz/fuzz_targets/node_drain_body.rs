#![no_main]
//! Fuzz target `node_drain_body`: see `ws_node::fuzzing::check_drain_body` for what it checks.

libfuzzer_sys::fuzz_target!(|data: &[u8]| ws_node::fuzzing::check_drain_body(data));

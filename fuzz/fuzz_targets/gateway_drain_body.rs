#![no_main]
//! Fuzz target `gateway_drain_body`: see `gateway::fuzzing::check_drain` for what it checks.

libfuzzer_sys::fuzz_target!(|data: &[u8]| gateway::fuzzing::check_drain(data));

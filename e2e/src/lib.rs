//! The end-to-end harness of the fleet.
//!
//! It starts a Kafka-protocol broker ([`broker`]), the real binaries as processes ([`procs`],
//! [`fleet`]), WebSocket clients that reconnect and resume like good clients ([`client`]) and a
//! publisher load ([`load`]); it kills and restarts nodes and checks every client's stream
//! ([`checker`]). [`scenario`] is the brief's whole sequence, shared by the test
//! (`tests/suite/scenario.rs`) and the demo (`src/bin/demo.rs`). [`writer`] publishes through the gateway
//! with idempotency keys and retries, and [`audit`] checks its acknowledgements against the log;
//! [`control_audit`] checks the gateways' control topic: no deposed leader acted.
//! [`chaos`] runs random fault schedules drawn from a seed.

pub mod audit;
pub mod chaos;
pub mod broker;
pub mod checker;
pub mod client;
pub mod control_audit;
pub mod faults;
pub mod fleet;
pub mod haproxy;
pub mod link;
pub mod models;
/// Steady publishing through the publisher's HTTP API (the `loadgen` crate).
pub mod load {
    pub use loadgen::*;
}
pub mod procs;
pub mod scenario;
pub mod tokens;
pub mod writer;
pub mod bench;

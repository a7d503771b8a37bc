//! The end-to-end tests, one module per subject, in one test binary: one compile and one link of
//! the harness for all of them instead of one per file (`cargo test --release -p e2e --test suite
//! scenario::` runs one module). Each test starts its own broker and real processes, so they take
//! turns ([`one_at_a_time`]): two cores shared by two fleets would make a slow machine look like
//! a fault.
//!
//! `tests/faults.rs` stays a binary of its own: its cases share one three-node cluster held in a
//! static, which must not outlive them into the other tests.

mod admission;
mod auth;
mod browser;
mod cluster;
mod containers;
mod deploy;
mod gateways;
mod history;
mod input;
mod kafka_security;
mod kafka_settings;
mod limits;
mod links;
mod metrics;
mod operations;
mod peers;
mod retention;
mod scenario;
mod snapshot_loads;
mod standby;
mod transactions;
mod upgrade;

static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs a test's future in its turn ([`one_at_a_time`]) on a runtime of two workers, as many as
/// the machine's cores.
pub fn block_on(test: impl std::future::Future<Output = ()>) {
    let _turn = one_at_a_time();
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("a runtime").block_on(test);
}

/// This test's turn: held for the whole test, so one fleet runs at a time (a test that panicked
/// while holding it leaves no state behind in it, hence poison is ignored).
pub fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    TURN.lock().unwrap_or_else(|p| p.into_inner())
}

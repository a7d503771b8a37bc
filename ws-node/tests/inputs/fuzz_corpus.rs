//! Every checked-in fuzz corpus of this crate's targets (`fuzz/corpus/<target>/`), run through
//! the target's own check under stable `cargo test`: a missing or empty corpus fails.

use shared::fuzzing::run_corpus;
use ws_node::fuzzing;

#[test]
fn node_drain_body_corpus() {
    let n = run_corpus(
        env!("CARGO_MANIFEST_DIR"),
        "node_drain_body",
        fuzzing::check_drain_body,
    );
    assert!(n > 0);
}

#[test]
fn node_hold_body_corpus() {
    let n = run_corpus(
        env!("CARGO_MANIFEST_DIR"),
        "node_hold_body",
        fuzzing::check_hold_body,
    );
    assert!(n > 0);
}

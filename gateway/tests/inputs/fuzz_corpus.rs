//! Every checked-in fuzz corpus of this crate's targets (`fuzz/corpus/<target>/`), run through
//! the target's own check under stable `cargo test`: a missing or empty corpus fails.

use gateway::fuzzing;
use shared::fuzzing::run_corpus;

#[test]
fn gateway_drain_body_corpus() {
    let n = run_corpus(
        env!("CARGO_MANIFEST_DIR"),
        "gateway_drain_body",
        fuzzing::check_drain,
    );
    assert!(n > 0);
}

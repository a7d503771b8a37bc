//! Every checked-in fuzz corpus of this crate's targets (`fuzz/corpus/<target>/`), run through
//! the target's own check under stable `cargo test`: a missing or empty corpus fails.

use core_publisher::fuzzing;
use shared::fuzzing::run_corpus;

#[test]
fn pixel_body_corpus() {
    let n = run_corpus(
        env!("CARGO_MANIFEST_DIR"),
        "pixel_body",
        fuzzing::check_pixel_body,
    );
    assert!(n > 0);
}

#[test]
fn batch_body_corpus() {
    let n = run_corpus(
        env!("CARGO_MANIFEST_DIR"),
        "batch_body",
        fuzzing::check_batch_body,
    );
    assert!(n > 0);
}

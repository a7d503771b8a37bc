//! Every checked-in fuzz corpus of this crate's targets (`fuzz/corpus/<target>/`), run through
//! the target's own check under stable `cargo test`: a missing or empty corpus fails.

use shared::fuzzing;
use shared::fuzzing::run_corpus;

#[test]
fn ws_query_corpus() {
    let n = run_corpus(
        env!("CARGO_MANIFEST_DIR"),
        "ws_query",
        fuzzing::check_ws_query,
    );
    assert!(n > 0);
}

#[test]
fn pixel_record_corpus() {
    let n = run_corpus(
        env!("CARGO_MANIFEST_DIR"),
        "pixel_record",
        fuzzing::check_pixel_record,
    );
    assert!(n > 0);
}

#[test]
fn snapshot_record_corpus() {
    let n = run_corpus(
        env!("CARGO_MANIFEST_DIR"),
        "snapshot_record",
        fuzzing::check_snapshot_record,
    );
    assert!(n > 0);
}

#[test]
fn canvas_id_corpus() {
    let n = run_corpus(
        env!("CARGO_MANIFEST_DIR"),
        "canvas_id",
        fuzzing::check_canvas_id,
    );
    assert!(n > 0);
}

#[test]
fn color_corpus() {
    let n = run_corpus(env!("CARGO_MANIFEST_DIR"), "color", fuzzing::check_color);
    assert!(n > 0);
}

#[test]
fn epoch_corpus() {
    let n = run_corpus(env!("CARGO_MANIFEST_DIR"), "epoch", fuzzing::check_epoch);
    assert!(n > 0);
}

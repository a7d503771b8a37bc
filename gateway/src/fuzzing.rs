//! Check of the gateway's drain body, the fuzz target `gateway_drain_body`
//! (`fuzz/fuzz_targets/`), run by the target and by `tests/inputs/fuzz_corpus.rs` on every checked-in
//! corpus file (see [`shared::fuzzing`]).

use crate::api::check_drain_body;
use shared::api::{DEFAULT_GRACE_MS, MAX_GRACE_MS};
use shared::fuzzing::{assert_body_error, assert_one_json_object};

/// Target `gateway_drain_body`: the body of `POST /api/fleet/nodes/{id}/drain`
/// ([`check_drain_body`]). Accepted: an empty body (the default grace) or one JSON object, with a
/// grace of at most [`MAX_GRACE_MS`]; `{"grace_ms": <it>}` checks to the same grace. Refused: a
/// 400 as documented.
pub fn check_drain(data: &[u8]) {
    match check_drain_body(data) {
        Ok(grace_ms) => {
            assert!(grace_ms <= MAX_GRACE_MS, "{grace_ms}");
            if data.is_empty() {
                assert_eq!(grace_ms, DEFAULT_GRACE_MS);
            } else {
                assert_one_json_object(data);
            }
            let again = serde_json::to_vec(&serde_json::json!({ "grace_ms": grace_ms }))
                .expect("serialises");
            assert_eq!(check_drain_body(&again), Ok(grace_ms));
        }
        Err(e) => assert_body_error(&e, data),
    }
}

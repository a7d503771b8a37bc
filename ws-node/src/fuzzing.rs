//! Checks of the node's admin bodies, one per fuzz target (`fuzz/fuzz_targets/`), run by the
//! targets and by `tests/inputs/fuzz_corpus.rs` on every checked-in corpus file (see
//! [`shared::fuzzing`]).

use crate::http::{check_drain, check_hold};
use shared::api::{MAX_GRACE_MS, MAX_HOLD_EXTENSION_MS};
use shared::fuzzing::{assert_body_error, assert_client_error, assert_one_json_object};
use shared::protocol::DrainReason;

/// The partition counts the drain target checks against: a node that has not read its topic yet
/// (0), and one of a 12-partition topic.
pub const PARTITION_COUNTS: [u32; 2] = [0, 12];

/// Target `node_drain_body`: the body of a node's `POST /admin/drain` ([`check_drain`]).
/// Accepted: one JSON object asking for `FAILBACK_TO_RECOVERED_SERVER`, `MAINTENANCE` or
/// `NODE_DEGRADED`,
/// `grace_ms` at most [`MAX_GRACE_MS`], partitions (if named) that exist; the request written
/// back as JSON checks to itself. Refused: a 400 as documented, or 409 `not_recovered` when
/// partitions are named before the node knows how many there are.
pub fn check_drain_body(data: &[u8]) {
    for n in PARTITION_COUNTS {
        match check_drain(data, n) {
            Ok(req) => {
                assert_one_json_object(data);
                assert!(
                    matches!(
                        req.reason,
                        DrainReason::FailbackToRecoveredServer | DrainReason::Maintenance | DrainReason::NodeDegraded
                    ),
                    "{req:?}"
                );
                assert!(req.grace_ms <= MAX_GRACE_MS, "{req:?}");
                if let Some(ps) = &req.partitions {
                    assert!(
                        ps.iter().all(|p| (0..n as i32).contains(p)),
                        "{req:?} with {n} partitions"
                    );
                }
                let again = serde_json::to_vec(&req).expect("serialises");
                assert_eq!(check_drain(&again, n).as_ref(), Ok(&req));
            }
            Err(e) if e.status == axum::http::StatusCode::CONFLICT => {
                assert_client_error(&e);
                assert_eq!((n, e.body.error.as_str()), (0, "not_recovered"), "{e:?}");
            }
            Err(e) => assert_body_error(&e, data),
        }
    }
}

/// Target `node_hold_body`: the body of a node's `POST /admin/hold` ([`check_hold`]). Accepted:
/// one JSON object with `for_ms` in 1..=[`MAX_HOLD_EXTENSION_MS`]; written back as JSON it checks
/// to itself. Refused: a 400 as documented.
pub fn check_hold_body(data: &[u8]) {
    match check_hold(data) {
        Ok(req) => {
            assert_one_json_object(data);
            assert!((1..=MAX_HOLD_EXTENSION_MS).contains(&req.for_ms), "{req:?}");
            let again = serde_json::to_vec(&req).expect("serialises");
            assert_eq!(check_hold(&again).as_ref(), Ok(&req));
        }
        Err(e) => assert_body_error(&e, data),
    }
}

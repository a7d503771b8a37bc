//! Property tests of the node's admin bodies (`POST /admin/drain`, `POST /admin/hold`): generated
//! valid bodies check to the same request; near-valid ones get the documented error naming the
//! field.

use proptest::prelude::*;
use serde_json::json;
use shared::api::{DrainRequest, HoldRequest, MAX_GRACE_MS, MAX_HOLD_EXTENSION_MS};
use shared::http::ApiError;
use shared::protocol::DrainReason;
use ws_node::http::{check_drain, check_hold};

fn asked_reason() -> impl Strategy<Value = DrainReason> {
    prop_oneof![
        Just(DrainReason::FailbackToRecoveredServer),
        Just(DrainReason::Maintenance),
        Just(DrainReason::NodeDegraded)
    ]
}

fn assert_field(e: &ApiError, field: &str) {
    assert_eq!(
        (e.status.as_u16(), e.body.error.as_str()),
        (400, "invalid_field"),
        "{e:?}"
    );
    assert_eq!(e.body.field.as_deref(), Some(field), "{e:?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn a_drain_body_round_trips(
        reason in asked_reason(), grace_ms in 0..=MAX_GRACE_MS, n in 1u32..64, ps in proptest::option::of(proptest::collection::vec(any::<u32>(), 0..8)),
    ) {
        let req = DrainRequest { reason, grace_ms, partitions: ps.map(|ps| ps.into_iter().map(|p| (p % n) as i32).collect()) };
        let body = serde_json::to_vec(&req).unwrap();
        prop_assert_eq!(check_drain(&body, n).unwrap(), req);
    }

    /// One field of a valid drain body made invalid: the documented error naming it.
    #[test]
    fn a_near_valid_drain_body_is_refused(reason in asked_reason(), n in 1u32..64, which in 0usize..8, k in any::<u32>()) {
        let mut body = json!({ "reason": reason, "grace_ms": 10, "partitions": [0] });
        let field = match which {
            0 => { body["grace_ms"] = json!(MAX_GRACE_MS + 1 + u64::from(k)); "grace_ms" }
            1 => { body["reason"] = json!(if k % 2 == 0 { "SHUTDOWN" } else { "PARTITIONS_REVOKED" }); "reason" }
            2 => { body["partitions"] = json!([0, n + k % 1000]); "partitions" }
            3 => { body["partitions"] = json!([-1 - (k % 1000) as i64]); "partitions" }
            4 => { body["partitions"] = json!([i64::from(i32::MAX) + 1 + i64::from(k)]); "partitions[0]" }
            5 => { body["grace_ms"] = json!(-1 - (k % 1000) as i64); "grace_ms" }
            6 => { body["reason"] = json!(reason.as_str().to_ascii_lowercase()); "reason" }
            _ => { body["zz"] = json!(k); "zz" }
        };
        let e = check_drain(body.to_string().as_bytes(), n).unwrap_err();
        assert_field(&e, field);
    }

    /// Before the node knows its partitions, naming some is a conflict, not a bad request.
    #[test]
    fn partitions_before_recovery_are_a_conflict(reason in asked_reason(), p in 0i32..100) {
        let body = json!({ "reason": reason, "partitions": [p] }).to_string();
        let e = check_drain(body.as_bytes(), 0).unwrap_err();
        prop_assert_eq!((e.status.as_u16(), e.body.error.as_str()), (409, "not_recovered"));
        let whole = json!({ "reason": reason }).to_string();
        prop_assert!(check_drain(whole.as_bytes(), 0).is_ok());
    }

    #[test]
    fn a_hold_body_round_trips(ps in proptest::collection::vec(any::<i32>(), 0..8), for_ms in 1..=MAX_HOLD_EXTENSION_MS) {
        let req = HoldRequest { partitions: ps, for_ms };
        prop_assert_eq!(check_hold(&serde_json::to_vec(&req).unwrap()).unwrap(), req);
    }

    #[test]
    fn a_near_valid_hold_body_is_refused(which in 0usize..5, k in any::<u32>()) {
        let mut body = json!({ "partitions": [0], "for_ms": 10 });
        let field = match which {
            0 => { body["for_ms"] = json!(0); "for_ms" }
            1 => { body["for_ms"] = json!(MAX_HOLD_EXTENSION_MS + 1 + u64::from(k)); "for_ms" }
            2 => { body["for_ms"] = json!(k.to_string()); "for_ms" }
            3 => { body.as_object_mut().unwrap().remove("partitions"); "partitions" }
            _ => { body["zz"] = json!(k); "zz" }
        };
        assert_field(&check_hold(body.to_string().as_bytes()).unwrap_err(), field);
    }
}

//! Property tests of the gateway's drain body (`POST /api/fleet/nodes/{id}/drain`): a valid grace
//! checks to itself; an out-of-range or mistyped one, or an unknown field, gets a 400 naming it.

use gateway::api::check_drain_body;
use proptest::prelude::*;
use serde_json::json;
use shared::api::{DEFAULT_GRACE_MS, MAX_GRACE_MS};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn a_grace_round_trips(grace_ms in 0..=MAX_GRACE_MS, spaced in any::<bool>()) {
        let body = if spaced { format!(" {{ \"grace_ms\" : {grace_ms} }} ") } else { json!({ "grace_ms": grace_ms }).to_string() };
        prop_assert_eq!(check_drain_body(body.as_bytes()), Ok(grace_ms));
    }

    #[test]
    fn a_near_valid_grace_is_refused(which in 0usize..4, k in any::<u32>(), name in "[a-z]{1,10}") {
        prop_assume!(name != "grace_ms");
        let (body, field) = match which {
            0 => (json!({ "grace_ms": MAX_GRACE_MS + 1 + u64::from(k) }), "grace_ms".to_owned()),
            1 => (json!({ "grace_ms": -1 - i64::from(k) }), "grace_ms".to_owned()),
            2 => (json!({ "grace_ms": k.to_string() }), "grace_ms".to_owned()),
            _ => (json!({ &name: k }), name.clone()),
        };
        let e = check_drain_body(body.to_string().as_bytes()).unwrap_err();
        prop_assert_eq!((e.status.as_u16(), e.body.error.as_str()), (400, "invalid_field"));
        prop_assert_eq!(e.body.field, Some(field));
    }
}

#[test]
fn an_empty_body_or_object_is_the_default_grace() {
    assert_eq!(check_drain_body(b""), Ok(DEFAULT_GRACE_MS));
    assert_eq!(check_drain_body(b"{}"), Ok(DEFAULT_GRACE_MS));
    assert_eq!(
        check_drain_body(b"  ").unwrap_err().body.error,
        "malformed_json"
    );
}

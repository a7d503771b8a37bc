//! What `GET /api/fleet` leaves out for a caller without the admin token: addresses and error
//! texts (they name hosts, ports and internals). States, UP streaks, partitions, sessions,
//! catch-up progress and the decisions' actions stay, so the `/fleet` page works for everyone.
//!
//! - `nodes[].url`, `nodes[].last_error`, `nodes[].catchup.error`: removed;
//! - `publishers[].url`: replaced by `publisher-<n>` (1-based, configured order: rows keep their
//!   identity), `publishers[].last_error`: removed;
//! - `decisions[]`: `reason` of a `*_failed` action replaced by [`HIDDEN`]; every `error`,
//!   `message`, `url` and `last_error` inside `detail` removed.

use serde_json::Value;

/// The reason shown instead of a failure's text.
pub const HIDDEN: &str = "(hidden: needs the admin token)";

/// Keys whose values are addresses or error texts.
const SECRET_KEYS: &[&str] = &["url", "last_error", "error", "message"];

/// Removes addresses and error texts from an `/api/fleet` snapshot, in place.
pub fn redact(snapshot: &mut Value) {
    for n in snapshot["nodes"].as_array_mut().into_iter().flatten() {
        if let Some(o) = n.as_object_mut() {
            o.remove("url");
            o.remove("last_error");
        }
        if let Some(c) = n.get_mut("catchup").and_then(Value::as_object_mut) {
            c.remove("error");
        }
    }
    for (i, p) in snapshot["publishers"].as_array_mut().into_iter().flatten().enumerate() {
        if let Some(o) = p.as_object_mut() {
            o.insert("url".into(), Value::String(format!("publisher-{}", i + 1)));
            o.remove("last_error");
        }
    }
    for d in snapshot["decisions"].as_array_mut().into_iter().flatten() {
        if d["action"].as_str().is_some_and(|a| a.ends_with("_failed")) {
            d["reason"] = Value::String(HIDDEN.into());
        }
        if let Some(detail) = d.get_mut("detail") {
            strip(detail);
        }
    }
}

fn strip(v: &mut Value) {
    match v {
        Value::Object(o) => {
            o.retain(|k, _| !SECRET_KEYS.contains(&k.as_str()));
            o.values_mut().for_each(strip);
        }
        Value::Array(a) => a.iter_mut().for_each(strip),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn addresses_and_error_texts_are_left_out_the_rest_stays() {
        let mut s = json!({
            "partition_count": 6,
            "nodes": [
                {"id": "ws-1", "url": "http://10.0.0.5:8081", "state": "DOWN", "up_streak": 0, "assigned_partitions": [],
                 "sessions": 0, "last_error": "connect 10.0.0.5:8081: refused", "catchup": null},
                {"id": "ws-2", "url": "http://10.0.0.6:8081", "state": "HEALTHY", "assigned_partitions": [0, 1], "sessions": 3,
                 "last_error": null, "catchup": {"status": "failed", "error": "broker 10.0.0.9 down", "replay_count": 4}}
            ],
            "publishers": [{"url": "http://10.0.0.7:8080", "ready": true, "preferred": true, "last_error": "x"},
                           {"url": "http://10.0.0.8:8080", "ready": false, "preferred": false, "last_error": null}],
            "decisions": [
                {"node": "ws-1", "action": "start_recovery_failed", "reason": "error sending request for url (http://10.0.0.5:8081/...)", "detail": null},
                {"node": "ws-1", "action": "failback_failed", "reason": "ws-1 owns partitions again",
                 "detail": {"ws-2": {"error": {"error": "node_unreachable", "message": "node ws-2: 10.0.0.6"}}}},
                {"node": "ws-1", "action": "transition", "reason": "UP x5", "detail": {"from": "UP", "to": "RECOVERING"}}
            ]
        });
        redact(&mut s);
        let text = s.to_string();
        assert!(!text.contains("10.0.0."), "{text}");
        assert_eq!(s["partition_count"], 6);
        assert_eq!(s["nodes"][0], json!({"id": "ws-1", "state": "DOWN", "up_streak": 0, "assigned_partitions": [], "sessions": 0, "catchup": null}));
        assert_eq!(s["nodes"][1]["catchup"], json!({"status": "failed", "replay_count": 4}));
        assert_eq!(s["nodes"][1]["sessions"], 3);
        assert_eq!(s["publishers"][0], json!({"url": "publisher-1", "ready": true, "preferred": true}));
        assert_eq!(s["publishers"][1]["url"], "publisher-2");
        assert_eq!(s["decisions"][0]["reason"], HIDDEN);
        assert_eq!(s["decisions"][1]["reason"], HIDDEN);
        assert_eq!(s["decisions"][1]["detail"], json!({"ws-2": {}}));
        assert_eq!(s["decisions"][2]["reason"], "UP x5");
        assert_eq!(s["decisions"][2]["detail"], json!({"from": "UP", "to": "RECOVERING"}));
    }
}

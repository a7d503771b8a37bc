//! Property tests of the publisher's request bodies: generated valid bodies parse (and pass the
//! batch checks) to the same values; generated near-valid ones (an unknown field, an
//! out-of-range number, a wrong type, a pixel off the canvas, a key used twice) get the
//! documented 400 naming the field.

use core_publisher::api::{check_batch, BatchRequest, PixelRequest, MAX_BATCH_EVENTS};
use core_publisher::fuzzing::DIMS;
use proptest::prelude::*;
use serde_json::{json, Value};
use shared::http::{parse_json, ApiError};
use shared::{ChannelId, Color};

fn color() -> impl Strategy<Value = Color> {
    any::<[u8; 3]>().prop_map(Color)
}

/// A valid batch event on a [`DIMS`] canvas, as JSON, with a key when `key` is set.
fn batch_event() -> impl Strategy<Value = Value> {
    (
        "[A-Za-z0-9_-]{1,64}",
        0..DIMS.width,
        0..DIMS.height,
        color(),
        proptest::option::of("[!-~]{1,120}"),
    )
        .prop_map(|(canvas, x, y, color, key)| {
            let mut e = json!({ "canvas": canvas, "x": x, "y": y, "color": color.to_string() });
            if let Some(k) = key {
                e["idempotency_key"] = json!(k);
            }
            e
        })
}

/// Valid batches: keys made unique by their position.
fn batch() -> impl Strategy<Value = Vec<Value>> {
    proptest::collection::vec(batch_event(), 1..=20).prop_map(|mut events| {
        for (i, e) in events.iter_mut().enumerate() {
            if let Some(k) = e.get("idempotency_key").and_then(Value::as_str) {
                e["idempotency_key"] = json!(format!("{i}-{}", &k[..k.len().min(100)]));
            }
        }
        events
    })
}

fn assert_field(e: &ApiError, field: &str) {
    assert_eq!(
        (e.status.as_u16(), e.body.error.as_str()),
        (400, "invalid_field"),
        "{e:?}"
    );
    assert_eq!(e.body.field.as_deref(), Some(field), "{e:?}");
}

/// The batch checked as `POST /pixels` checks it.
fn parse_batch(body: &[u8]) -> Result<BatchRequest, ApiError> {
    let req: BatchRequest = parse_json(body)?;
    check_batch(&req, |_| Ok(DIMS))?;
    Ok(req)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn a_pixel_body_round_trips(x in any::<u32>(), y in any::<u32>(), c in color(), upper in any::<bool>()) {
        let color = if upper { c.to_string().to_ascii_uppercase() } else { c.to_string() };
        let body = json!({ "x": x, "y": y, "color": color }).to_string();
        let req: PixelRequest = parse_json(body.as_bytes()).unwrap();
        prop_assert_eq!((req.x, req.y, req.color), (x, y, c));
    }

    /// One field of a valid pixel body made invalid: a 400 naming that field.
    #[test]
    fn a_near_valid_pixel_body_names_the_field(
        x in any::<u32>(), c in color(), which in 0usize..7, n in any::<u64>(), name in "[a-z_]{1,12}",
    ) {
        prop_assume!(!["x", "y", "color"].contains(&name.as_str()));
        let mut body = json!({ "x": x, "y": 0, "color": c.to_string() });
        let field = match which {
            0 => { body[&name] = json!(n); name.as_str() }
            1 => { body["x"] = json!(u64::from(u32::MAX) + 1 + n % 1_000_000); "x" }
            2 => { body["y"] = json!(-1 - (n % 1000) as i64); "y" }
            3 => { body["x"] = json!(n.to_string()); "x" }
            4 => { body["color"] = json!(n); "color" }
            5 => { body["color"] = json!(format!("{:06x}", n % 0x100_0000)); "color" }
            _ => { body.as_object_mut().unwrap().remove("y"); "y" }
        };
        let e = parse_json::<PixelRequest>(body.to_string().as_bytes()).unwrap_err();
        assert_field(&e, field);
    }

    #[test]
    fn a_batch_round_trips(events in batch()) {
        let body = json!({ "events": events }).to_string();
        let req = parse_batch(body.as_bytes()).unwrap();
        prop_assert_eq!(req.events.len(), events.len());
        for (got, want) in req.events.iter().zip(&events) {
            prop_assert_eq!(Some(got.canvas.as_str()), want["canvas"].as_str());
            prop_assert_eq!((u64::from(got.x), u64::from(got.y)), (want["x"].as_u64().unwrap(), want["y"].as_u64().unwrap()));
            prop_assert_eq!(Some(got.color.to_string()), want["color"].as_str().map(str::to_owned));
            prop_assert_eq!(got.idempotency_key.as_deref(), want.get("idempotency_key").and_then(Value::as_str));
        }
    }

    /// One event of a valid batch made invalid: a 400 naming that event's field, and nothing of
    /// the batch accepted.
    #[test]
    fn a_near_valid_batch_names_the_event(events in batch(), at in any::<prop::sample::Index>(), which in 0usize..7, n in any::<u32>()) {
        let mut events = events;
        let i = at.index(events.len());
        let want = match which {
            0 => { events[i]["x"] = json!(DIMS.width + n % 1000); format!("events[{i}].x") }
            1 => { events[i]["y"] = json!(DIMS.height + n % 1000); format!("events[{i}].y") }
            2 => { events[i]["idempotency_key"] = json!("has space"); format!("events[{i}].idempotency_key") }
            3 => { events[i]["idempotency_key"] = json!("k".repeat(129 + (n % 100) as usize)); format!("events[{i}].idempotency_key") }
            4 => { events[i]["canvas"] = json!(format!("c {n}")); format!("events[{i}].canvas") }
            5 => { events[i]["zz"] = json!(n); format!("events[{i}].zz") }
            _ => {
                // The same key as an earlier event: the later one is named.
                events[0]["idempotency_key"] = json!("dup");
                events.push(events[0].clone());
                format!("events[{}].idempotency_key", events.len() - 1)
            }
        };
        let body = json!({ "events": events }).to_string();
        assert_field(&parse_batch(body.as_bytes()).unwrap_err(), &want);
    }
}

#[test]
fn batch_sizes_outside_one_to_the_most_are_refused() {
    let one = json!({ "canvas": "c1", "x": 0, "y": 0, "color": "#000000" });
    for n in [0, MAX_BATCH_EVENTS + 1] {
        let body = json!({ "events": vec![one.clone(); n] }).to_string();
        assert_field(&parse_batch(body.as_bytes()).unwrap_err(), "events");
    }
    let body = json!({ "events": vec![one.clone(); MAX_BATCH_EVENTS] }).to_string();
    assert_eq!(
        parse_batch(body.as_bytes()).unwrap().events.len(),
        MAX_BATCH_EVENTS
    );
    assert_eq!(
        ChannelId::parse("c1").unwrap(),
        parse_batch(body.as_bytes()).unwrap().events[0].canvas
    );
}

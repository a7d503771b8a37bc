//! Checks of the publisher's request bodies, one per fuzz target (`fuzz/fuzz_targets/`), run by
//! the targets and by `tests/inputs/fuzz_corpus.rs` on every checked-in corpus file (see
//! [`shared::fuzzing`]).

use crate::api::{check_batch, BatchRequest, PixelRequest, MAX_BATCH_EVENTS};
use shared::fuzzing::{assert_body_error, assert_one_json_object};
use shared::http::parse_json;
use shared::CanvasDims;
use std::collections::HashSet;

/// The canvas size the batch target checks bounds against.
pub const DIMS: CanvasDims = CanvasDims {
    width: 64,
    height: 48,
};

/// Target `pixel_body`: the body of `POST /canvases/{id}/pixels`. Accepted: one JSON object, and
/// the same request written back as JSON parses to the same `x`, `y` and colour. Refused: a 400
/// as documented ([`assert_body_error`]). (Bounds are the canvas's, checked when publishing.)
pub fn check_pixel_body(data: &[u8]) {
    match parse_json::<PixelRequest>(data) {
        Ok(req) => {
            assert_one_json_object(data);
            let again = serde_json::json!({ "x": req.x, "y": req.y, "color": req.color });
            let back: PixelRequest = parse_json(&serde_json::to_vec(&again).expect("serialises"))
                .expect("a written-back request parses");
            assert_eq!((back.x, back.y, back.color), (req.x, req.y, req.color));
        }
        Err(e) => assert_body_error(&e, data),
    }
}

/// Target `batch_body`: the body of `POST /pixels`, parsed and checked ([`check_batch`]) as the
/// route does on a [`DIMS`] canvas. Accepted: one JSON object of 1 to [`MAX_BATCH_EVENTS`]
/// events, every pixel on the canvas, idempotency keys 1–128 visible ASCII characters and all
/// different; written back as JSON it parses and checks to the same events. Refused: a 400 as
/// documented, a check's naming `events` or one of its events.
pub fn check_batch_body(data: &[u8]) {
    let req = match parse_json::<BatchRequest>(data) {
        Ok(req) => req,
        Err(e) => return assert_body_error(&e, data),
    };
    assert_one_json_object(data);
    if let Err(e) = check_batch(&req, |_| Ok(DIMS)) {
        assert_body_error(&e, data);
        assert_eq!(e.body.error, "invalid_field");
        assert!(
            e.body
                .field
                .as_deref()
                .is_some_and(|f| f == "events" || f.starts_with("events[")),
            "{e:?}"
        );
        return;
    }
    assert!((1..=MAX_BATCH_EVENTS).contains(&req.events.len()));
    let mut keys = HashSet::new();
    for e in &req.events {
        assert!(
            DIMS.contains(e.x, e.y),
            "({}, {}) is off the canvas",
            e.x,
            e.y
        );
        if let Some(k) = &e.idempotency_key {
            assert!(
                (1..=128).contains(&k.len()) && k.bytes().all(|b| (0x21..=0x7e).contains(&b)),
                "key {k:?}"
            );
            assert!(keys.insert(k.as_str()), "key {k:?} used twice");
        }
    }
    let fields = |r: &BatchRequest| -> Vec<_> {
        r.events
            .iter()
            .map(|e| {
                (
                    e.canvas.clone(),
                    e.x,
                    e.y,
                    e.color,
                    e.idempotency_key.clone(),
                )
            })
            .collect()
    };
    let events: Vec<_> = req
        .events
        .iter()
        .map(|e| serde_json::json!({ "canvas": e.canvas, "x": e.x, "y": e.y, "color": e.color, "idempotency_key": e.idempotency_key }))
        .collect();
    let again = serde_json::to_vec(&serde_json::json!({ "events": events })).expect("serialises");
    let back: BatchRequest = parse_json(&again).expect("a written-back batch parses");
    check_batch(&back, |_| Ok(DIMS)).expect("a written-back batch checks");
    assert_eq!(fields(&back), fields(&req));
}

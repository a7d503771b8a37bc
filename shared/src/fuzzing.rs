//! Checks of the parsers that read outside input, one per fuzz target (`fuzz/fuzz_targets/`).
//!
//! Each `check_*` function takes the raw input a target gets, runs the parser on it and panics
//! when an invariant breaks: the parser itself panicked, it accepted something its documented
//! rules refuse, what it accepted does not round-trip, or its error is not a clear one. The same
//! functions run in the fuzz targets and, under stable `cargo test`, on every checked-in corpus
//! file (`tests/inputs/fuzz_corpus.rs`, with [`run_corpus`]), so a corpus entry checks exactly what the
//! fuzzer checked. The publisher's, node's and gateway's bodies have theirs in their own crates'
//! `fuzzing` modules, built on [`assert_body_error`].

use crate::epoch::{self, Epoch};
use crate::event::{
    ChannelId, ChannelIdError, Color, PixelEvent, CHANNEL_ID_MAX_LEN, MAX_EVENTS_PER_RECORD,
};
use crate::http::ApiError;
use crate::protocol::Refusal;
use crate::snapshot::{self, Entry, CHECKPOINT_KEY, MAX_SIDE};
use std::path::Path;

/// Asserts that `e` is a clear refusal of a client's input: a 4xx status, no `Retry-After`, a
/// non-empty `error` code and `message`, a non-empty `field` when one is named, and a body that
/// serialises to the documented JSON object `{"error","message","field"?}`.
pub fn assert_client_error(e: &ApiError) {
    assert!(e.status.is_client_error(), "not a 4xx: {e:?}");
    assert_eq!(
        e.retry_after_secs, None,
        "a refused input is not a \"try later\": {e:?}"
    );
    assert!(
        !e.body.error.is_empty() && !e.body.message.is_empty(),
        "empty error body: {e:?}"
    );
    assert!(
        e.body.field.as_deref().is_none_or(|f| !f.is_empty()),
        "empty field name: {e:?}"
    );
    let json = serde_json::to_value(&e.body).expect("an error body serialises");
    let obj = json.as_object().expect("an error body is a JSON object");
    assert_eq!(
        obj.get("error").and_then(|v| v.as_str()),
        Some(e.body.error.as_str())
    );
    assert_eq!(
        obj.get("message").and_then(|v| v.as_str()),
        Some(e.body.message.as_str())
    );
    assert_eq!(
        obj.get("field").and_then(|v| v.as_str()),
        e.body.field.as_deref()
    );
}

/// Asserts that `e`, the error of [`crate::http::parse_json`] (or of a check after it) on `body`,
/// is what the fleet documents: a clear 400 ([`assert_client_error`]), `malformed_json` only for
/// a body that is not a JSON object, and `invalid_field` always naming the field.
pub fn assert_body_error(e: &ApiError, body: &[u8]) {
    assert_client_error(e);
    assert_eq!(e.status, axum::http::StatusCode::BAD_REQUEST, "{e:?}");
    match e.body.error.as_str() {
        "malformed_json" => {
            let parsed = serde_json::from_slice::<serde_json::Value>(body);
            assert!(
                !matches!(parsed, Ok(serde_json::Value::Object(_))),
                "a JSON object called malformed: {e:?}"
            );
        }
        "invalid_field" => assert!(
            e.body.field.is_some(),
            "invalid_field without a field: {e:?}"
        ),
        other => panic!("unexpected error code {other:?} for a body: {e:?}"),
    }
}

/// Asserts that a body `parse_json` accepted is one JSON object: nothing else before or after
/// it (the parser refuses arrays, trailing data and a second object).
pub fn assert_one_json_object(body: &[u8]) {
    let parsed = serde_json::from_slice::<serde_json::Value>(body);
    assert!(
        matches!(parsed, Ok(serde_json::Value::Object(_))),
        "accepted a body that is not one JSON object: {parsed:?}"
    );
}

/// Target `ws_query`: the query string of `GET /ws` (not UTF-8: read lossily, as a proxy would
/// pass it on). Accepted: the channel id and epoch obey their rules, and the query a proxy sends on
/// ([`WsQuery::resume_query`], plus `refusal`) parses back to the same query. Refused: 400
/// `invalid_field` naming the parameter.
pub fn check_ws_query(data: &[u8]) {
    let raw = String::from_utf8_lossy(data);
    match crate::http::parse_ws_query(&raw) {
        Ok(q) => {
            assert_eq!(ChannelId::parse(q.id().as_str()).as_ref(), Ok(q.id()));
            if let Some(e) = &q.epoch {
                assert_eq!(Epoch::parse(e.as_str()).as_ref(), Ok(e));
            }
            let mut again = q.resume_query();
            if q.refusal == Refusal::Frame {
                again.push_str("&refusal=frame");
            }
            let back = crate::http::parse_ws_query(&again)
                .unwrap_or_else(|e| panic!("{again:?} of {raw:?} does not parse: {e:?}"));
            assert_eq!(back, q, "{again:?} of {raw:?}");
        }
        Err(e) => {
            assert_client_error(&e);
            assert_eq!(
                (e.status.as_u16(), e.body.error.as_str()),
                (400, "invalid_field"),
                "{e:?}"
            );
            assert!(e.body.field.is_some(), "{e:?}");
        }
    }
}

/// Target `pixel_record`: a Kafka record value of the events topic. Accepted: 1 to
/// [`MAX_EVENTS_PER_RECORD`] events of one canvas with consecutive versions, and the value the
/// publisher would write for them ([`PixelEvent::record_value`]) decodes to the same events.
/// Refused: an error with a message (readers log it and skip the record).
pub fn check_pixel_record(data: &[u8]) {
    match PixelEvent::decode_record(Some(data)) {
        Ok(events) => {
            assert!(
                (1..=MAX_EVENTS_PER_RECORD).contains(&events.len()),
                "{} events",
                events.len()
            );
            for pair in events.windows(2) {
                assert_eq!(pair[1].canvas, pair[0].canvas);
                assert_eq!(
                    pair[0].version.checked_add(1),
                    Some(pair[1].version),
                    "versions not consecutive"
                );
            }
            let value = PixelEvent::record_value(&events);
            let back = PixelEvent::decode_record(Some(value.as_bytes()))
                .unwrap_or_else(|e| panic!("re-encoded {value} does not decode: {e}"));
            assert_eq!(back, events);
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
}

/// Target `snapshot_record`: a record of the snapshot topic, the input being the key, a `\n`, then
/// the value (no `\n`: the whole input is the value of key `c1`). Accepted: a canvas snapshot has
/// the key's id, a size within 1..=[`MAX_SIDE`] and exactly its pixel bytes, and a checkpoint
/// comes under [`CHECKPOINT_KEY`]; either re-encodes to a value that decodes equal. Refused: an
/// error with a message. A record without a value is a tombstone (nothing), whatever its key.
pub fn check_snapshot_record(data: &[u8]) {
    let (key, value) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (b"c1".as_slice(), data),
    };
    match snapshot::decode(Some(key), Some(value)) {
        Ok(None) => panic!("a record with a value decoded as a tombstone"),
        Ok(Some(Entry::Canvas(s))) => {
            assert_eq!(s.canvas.as_str().as_bytes(), key);
            assert!(
                (1..=MAX_SIDE).contains(&s.dims.width) && (1..=MAX_SIDE).contains(&s.dims.height),
                "{:?}",
                s.dims
            );
            assert_eq!(s.pixels.len(), s.dims.byte_len());
            let again = snapshot::decode(Some(key), Some(&s.encode()))
                .expect("a re-encoded snapshot decodes");
            assert_eq!(again, Some(Entry::Canvas(s.clone())));
            // `to_canvas` trusts decode's length check.
            assert_eq!(s.to_canvas().bytes(), &s.pixels[..]);
        }
        Ok(Some(Entry::Channel(s))) => {
            assert_eq!(s.channel.as_str().as_bytes(), key);
            let again = snapshot::decode(Some(key), Some(&s.encode()))
                .expect("a re-encoded channel snapshot decodes");
            assert_eq!(again, Some(Entry::Channel(s)));
        }
        Ok(Some(Entry::Checkpoint(c))) => {
            assert_eq!(key, CHECKPOINT_KEY.as_bytes());
            let again = snapshot::decode(Some(key), Some(&c.encode()))
                .expect("a re-encoded checkpoint decodes");
            assert_eq!(again, Some(Entry::Checkpoint(c)));
        }
        Ok(Some(Entry::Keys(k))) => {
            assert_eq!(k.name.as_bytes(), key);
            let again = snapshot::decode(Some(key), Some(&k.encode())).expect("a re-encoded key record decodes");
            assert_eq!(again, Some(Entry::Keys(k)));
        }
        Ok(Some(Entry::KeysFrom(o))) => {
            let again = snapshot::decode(Some(key), Some(&snapshot::encode_keys_from(o))).expect("a re-encoded keys-from decodes");
            assert_eq!(again, Some(Entry::KeysFrom(o)));
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
    match snapshot::decode(Some(key), None) {
        Ok(None) => assert!(std::str::from_utf8(key).is_ok()),
        Ok(Some(entry)) => panic!("a tombstone decoded as {entry:?}"),
        Err(e) => assert!(std::str::from_utf8(key).is_err(), "{e}"),
    }
}

/// What [`ChannelId::parse`] documents for `raw`: 1 to 128 bytes of `[A-Za-z0-9_-]`, with at
/// most one `:`, which has a byte of those on each side.
fn canvas_id_rule(raw: &str) -> Result<(), ChannelIdError> {
    let colons: Vec<usize> = raw.match_indices(':').map(|(i, _)| i).collect();
    if raw.is_empty() {
        Err(ChannelIdError::Empty)
    } else if raw.len() > CHANNEL_ID_MAX_LEN {
        Err(ChannelIdError::TooLong)
    } else if !raw.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b':')
        || colons.len() > 1
        || colons.first().is_some_and(|&i| i == 0 || i + 1 == raw.len())
    {
        Err(ChannelIdError::BadChar)
    } else {
        Ok(())
    }
}

/// Target `canvas_id`: a canvas id from a path or query (input read lossily as UTF-8). Accepted
/// exactly when the documented rule holds, refused with the error of the rule that fails; an
/// accepted id is the input unchanged, parses again to itself, and the JSON form (a record's
/// `canvas`) accepts exactly what [`ChannelId::parse`] accepts.
pub fn check_canvas_id(data: &[u8]) {
    let raw = String::from_utf8_lossy(data);
    let parsed = ChannelId::parse(&raw);
    assert_eq!(
        parsed.as_ref().map(|_| ()).map_err(Clone::clone),
        canvas_id_rule(&raw),
        "{raw:?}"
    );
    if let Ok(id) = &parsed {
        assert_eq!(id.as_str(), raw);
        assert_eq!(ChannelId::parse(&id.to_string()).as_ref(), Ok(id));
    }
    let via_json = serde_json::from_value::<ChannelId>(serde_json::Value::String(raw.to_string()));
    assert_eq!(via_json.ok(), parsed.ok(), "{raw:?}");
}

/// Target `color`: a `#rrggbb` colour (input read lossily as UTF-8). Accepted exactly when it is
/// `#` and six hex digits; an accepted colour prints as the input in lowercase and parses back to
/// itself, and its JSON form accepts exactly what [`Color::parse`] accepts.
pub fn check_color(data: &[u8]) {
    let raw = String::from_utf8_lossy(data);
    let rule = raw.len() == 7
        && raw.starts_with('#')
        && raw.bytes().skip(1).all(|b| b.is_ascii_hexdigit());
    let parsed = Color::parse(&raw);
    assert_eq!(parsed.is_ok(), rule, "{raw:?}: {parsed:?}");
    if let Ok(c) = parsed {
        assert_eq!(c.to_string(), raw.to_ascii_lowercase());
        assert_eq!(Color::parse(&c.to_string()), Ok(c));
    }
    let via_json = serde_json::from_value::<Color>(serde_json::Value::String(raw.to_string()));
    assert_eq!(via_json.ok(), parsed.ok(), "{raw:?}");
}

/// Target `epoch`: a stream epoch from the `/ws` query (input read lossily as UTF-8). Accepted
/// exactly when it is 1 to [`epoch::MAX_LEN`] bytes of `[A-Za-z0-9_-]`; an accepted epoch is the
/// input unchanged and round-trips through its JSON form (the `welcome` frame's `epoch`).
pub fn check_epoch(data: &[u8]) {
    let raw = String::from_utf8_lossy(data);
    let rule = !raw.is_empty()
        && raw.len() <= epoch::MAX_LEN
        && raw
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    let parsed = Epoch::parse(&raw);
    assert_eq!(parsed.is_ok(), rule, "{raw:?}");
    if let Ok(e) = &parsed {
        assert_eq!(e.as_str(), raw);
        let json = serde_json::to_string(e).expect("an epoch serialises");
        assert_eq!(serde_json::from_str::<Epoch>(&json).as_ref().ok(), Some(e));
    }
    let via_json = serde_json::from_value::<Epoch>(serde_json::Value::String(raw.to_string()));
    assert_eq!(via_json.ok(), parsed.ok(), "{raw:?}");
}

/// Runs `check` on every file of `fuzz/corpus/<target>/` (`manifest_dir` is the calling crate's
/// `CARGO_MANIFEST_DIR`, a sibling of `fuzz/`) and returns how many it checked. Panics when the
/// directory is missing or empty, so a lost corpus fails the test instead of passing vacuously,
/// and names the file whose check failed.
pub fn run_corpus(manifest_dir: &str, target: &str, check: fn(&[u8])) -> usize {
    let dir = Path::new(manifest_dir).join("../fuzz/corpus").join(target);
    let entries = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("corpus {} is missing: {e}", dir.display()));
    let mut files: Vec<_> = entries
        .map(|e| e.expect("a corpus entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "corpus {} is empty", dir.display());
    for path in &files {
        let data = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if let Err(panic) = std::panic::catch_unwind(|| check(&data)) {
            let why = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("?");
            panic!("{target}: {} fails its check: {why}", path.display());
        }
    }
    files.len()
}

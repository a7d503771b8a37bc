//! The Kafka record: key = canvas id (UTF-8 bytes), value = a [`PixelEvent`] as JSON.
//!
//! ```json
//! {"canvas":"c1","version":13,"x":1,"y":2,"color":"#ff0000","published_at_ms":1764400000000}
//! ```
//!
//! Versions are per canvas, contiguous and start at 1: version `n` is the `n`-th pixel change the
//! publisher accepted for that canvas. Readers drop any version at or below the one they hold.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Name of the Kafka record header that carries a publish's `Idempotency-Key` (when the client
/// sent one), so a publisher that lost track of an outcome can find it in the log.
pub const IDEMPOTENCY_HEADER: &str = "idempotency-key";

pub use crate::channel::{ChannelId, ChannelIdError, CHANNEL_ID_MAX_LEN};

/// An RGB colour, written `#rrggbb` on the wire (lowercase when we write it; either case accepted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Color(pub [u8; 3]);

/// A colour that is not `#rrggbb`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("colour must be \"#rrggbb\" (six hex digits after '#')")]
pub struct ColorError;

impl Color {
    /// White, the colour of a pixel nobody painted.
    pub const WHITE: Color = Color([0xff, 0xff, 0xff]);

    /// Parses `#rrggbb` (hex digits in either case).
    ///
    /// # Errors
    /// [`ColorError`] for anything else (no `#`, wrong length, non-hex digits).
    pub fn parse(raw: &str) -> Result<Self, ColorError> {
        let hex_digits = raw.strip_prefix('#').ok_or(ColorError)?;
        if hex_digits.len() != 6 {
            return Err(ColorError);
        }
        let mut rgb = [0u8; 3];
        hex::decode_to_slice(hex_digits, &mut rgb).map_err(|_| ColorError)?;
        Ok(Color(rgb))
    }
}

impl fmt::Display for Color {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", hex::encode(self.0))
    }
}

impl Serialize for Color {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Color {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = std::borrow::Cow::<str>::deserialize(d)?;
        Color::parse(&raw).map_err(serde::de::Error::custom)
    }
}

/// One pixel change of one canvas: the value of a Kafka record and the body of an `event` frame.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PixelEvent {
    /// The canvas this change belongs to (also the record key).
    pub canvas: ChannelId,
    /// Per-canvas version, contiguous from 1.
    pub version: u64,
    /// Column, 0-based, `< width`.
    pub x: u32,
    /// Row, 0-based, `< height`.
    pub y: u32,
    /// New colour of the pixel.
    pub color: Color,
    /// When the publisher accepted the change (Unix epoch, milliseconds).
    pub published_at_ms: u64,
}

/// Most events one record carries: a canvas's publishes that waited for the same Kafka round trip
/// go out as one record (see [`PixelEvent::record_value`]); ~100 B each, so a record stays far
/// below Kafka's default `message.max.bytes` (1 MiB).
pub const MAX_EVENTS_PER_RECORD: usize = 256;

/// A record value that is not a [`PixelEvent`] or a group of them.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("record has no value")]
    Empty,
    #[error("record value is not a pixel event: {0}")]
    Json(#[from] serde_json::Error),
    /// A JSON array that is not 1..=[`MAX_EVENTS_PER_RECORD`] events of one canvas with
    /// consecutive versions.
    #[error("record value is not a group of pixel events: {0}")]
    Group(&'static str),
}

impl PixelEvent {
    /// The record value: the event as compact JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a PixelEvent always serialises")
    }

    /// The value of a record carrying `events` (one canvas, consecutive versions, at least one):
    /// the event's JSON object for one, a JSON array of them for several (a group commit).
    pub fn record_value(events: &[PixelEvent]) -> String {
        match events {
            [one] => one.to_json(),
            many => serde_json::to_string(many).expect("PixelEvents always serialise"),
        }
    }

    /// Decodes a record value: one event (a JSON object) or a group (a JSON array of
    /// 1..=[`MAX_EVENTS_PER_RECORD`] events of one canvas with consecutive versions, in order).
    ///
    /// # Errors
    /// [`DecodeError`] when the value is missing, is not a valid event (bad canvas id, colour,
    /// unknown field, ...) or not a valid group. Readers log and skip such records: they were not
    /// written by the publisher.
    pub fn decode_record(value: Option<&[u8]>) -> Result<Vec<Self>, DecodeError> {
        let value = value.ok_or(DecodeError::Empty)?;
        let first = value.iter().find(|b| !b.is_ascii_whitespace());
        if first != Some(&b'[') {
            return Ok(vec![serde_json::from_slice(value)?]);
        }
        let events: Vec<Self> = serde_json::from_slice(value)?;
        if events.is_empty() {
            return Err(DecodeError::Group("no events"));
        }
        if events.len() > MAX_EVENTS_PER_RECORD {
            return Err(DecodeError::Group("more events than a record carries"));
        }
        for pair in events.windows(2) {
            if pair[1].canvas != pair[0].canvas {
                return Err(DecodeError::Group("events of more than one canvas"));
            }
            // Checked: a group ending past u64::MAX is refused (`MAX + 1` panicked in debug
            // builds and wrapped to 0 in release ones, accepting `[MAX, 0]` as consecutive).
            if pair[0].version.checked_add(1) != Some(pair[1].version) {
                return Err(DecodeError::Group("versions are not consecutive"));
            }
        }
        Ok(events)
    }
}

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_parses_and_prints_lowercase() {
        assert_eq!(Color::parse("#FF0080"), Ok(Color([255, 0, 128])));
        assert_eq!(Color([255, 0, 128]).to_string(), "#ff0080");
        for bad in ["ff0000", "#ff000", "#ff00000", "#gg0000", "", "#"] {
            assert_eq!(Color::parse(bad), Err(ColorError), "{bad:?}");
        }
    }

    #[test]
    fn event_json_round_trip_matches_the_documented_shape() {
        let raw = r##"{"canvas":"c1","version":13,"x":1,"y":2,"color":"#ff0000","published_at_ms":1764400000000}"##;
        let ev: PixelEvent = serde_json::from_str(raw).unwrap();
        assert_eq!(ev.version, 13);
        assert_eq!(ev.color, Color([255, 0, 0]));
        assert_eq!(ev.to_json(), raw);
        assert_eq!(PixelEvent::decode_record(Some(raw.as_bytes())).unwrap(), vec![ev.clone()]);
        assert_eq!(PixelEvent::record_value(std::slice::from_ref(&ev)), raw, "one event is a plain object");
    }

    #[test]
    fn a_group_record_round_trips_in_order() {
        let ev = |v: u64| PixelEvent { canvas: ChannelId::parse("c1").unwrap(), version: v, x: v as u32, y: 0, color: Color([1, 2, 3]), published_at_ms: 7 };
        let group = vec![ev(4), ev(5), ev(6)];
        let value = PixelEvent::record_value(&group);
        assert!(value.starts_with('['), "{value}");
        assert_eq!(PixelEvent::decode_record(Some(value.as_bytes())).unwrap(), group);
    }

    #[test]
    fn bad_groups_are_errors() {
        let one = |c: &str, v: u64| format!(r##"{{"canvas":"{c}","version":{v},"x":0,"y":0,"color":"#000000","published_at_ms":0}}"##);
        let too_many = format!("[{}]", (1..=MAX_EVENTS_PER_RECORD as u64 + 1).map(|v| one("c1", v)).collect::<Vec<_>>().join(","));
        for (bad, why) in [
            ("[]".to_owned(), "no events"),
            (format!("[{},{}]", one("c1", 1), one("c2", 2)), "more than one canvas"),
            (format!("[{},{}]", one("c1", 1), one("c1", 3)), "not consecutive"),
            (format!("[{},{}]", one("c1", 2), one("c1", 1)), "not consecutive"),
            (too_many, "more events"),
            (format!("[{},{}]", one("c1", u64::MAX), one("c1", u64::MAX)), "not consecutive"),
            (format!("[{},{}]", one("c1", u64::MAX), one("c1", 0)), "not consecutive"),
        ] {
            match PixelEvent::decode_record(Some(bad.as_bytes())) {
                Err(DecodeError::Group(m)) => assert!(m.contains(why), "{m} for {bad}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
        let most = format!("[{}]", (1..=MAX_EVENTS_PER_RECORD as u64).map(|v| one("c1", v)).collect::<Vec<_>>().join(","));
        assert_eq!(PixelEvent::decode_record(Some(most.as_bytes())).unwrap().len(), MAX_EVENTS_PER_RECORD);
    }

    #[test]
    fn bad_records_are_errors_not_panics() {
        assert!(matches!(PixelEvent::decode_record(None), Err(DecodeError::Empty)));
        for bad in [
            "not json",
            r##"{"canvas":"c 1","version":1,"x":0,"y":0,"color":"#000000","published_at_ms":0}"##,
            r##"{"canvas":"c1","version":1,"x":0,"y":0,"color":"red","published_at_ms":0}"##,
            r##"{"canvas":"c1","version":1,"x":0,"y":0,"color":"#000000","published_at_ms":0,"z":1}"##,
        ] {
            assert!(PixelEvent::decode_record(Some(bad.as_bytes())).is_err(), "{bad}");
        }
    }
}

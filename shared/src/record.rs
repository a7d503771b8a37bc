//! The events topic's records: publications, format 2.
//!
//! Key = the channel id (UTF-8), so a channel's publications share a partition and its order.
//! Headers: [`FORMAT_HEADER`] = `2` (the value's format, so that binary data can come later) and
//! [`NAMESPACES_HEADER`] = the publisher's namespaces fingerprint
//! ([`crate::namespaces::Namespaces::fingerprint`]). Value, JSON:
//!
//! ```json
//! {"channel":"scores:final","version":13,"data":{"home":2},"published_at_ms":1764400000000}
//! ```
//!
//! or a JSON array of 1..=[`MAX_PER_RECORD`] of them: one channel's consecutive versions, in
//! order (a group commit: publishes to one channel that waited for the same Kafka round trip).
//! `data` is JSON of the channel's model ([`crate::model`]). Versions are per channel, contiguous
//! from 1; readers drop any version at or below the one they hold.
//!
//! A record with the header [`OP_HEADER`] is not a publication but a change of the channel's
//! history ([`ChannelOp`]): `reset` (its state starts again, empty, at version 0 of its next reset
//! count; [`crate::epoch`]) or `delete` (its state and snapshot are gone). Value, JSON:
//!
//! ```json
//! {"channel":"scores:final","resets":1,"published_at_ms":1764400000000}
//! ```
//!
//! `resets` is the reset count of the history that starts (`reset`) or that ends (`delete`). A
//! reader applies a record of a channel only at an offset past what its state covers (a snapshot's
//! offset, or the op's), so publications of a history that a reset ended are never applied on top
//! of the next one, whatever their versions.
//!
//! A record without a [`FORMAT_HEADER`] is of format 1, the fleet before namespaces: a
//! [`PixelEvent`] (or a group of them), read as the `pixels` model's data `{"x","y","color"}`. So a
//! log written before the upgrade keeps its history. A record of a later format than this build
//! reads is [`DecodeError::NewerFormat`]: a node stops on it rather than skip versions.

use crate::channel::ChannelId;
use crate::event::PixelEvent;
use crate::model::pixels::Paint;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// The header naming a record's format.
pub const FORMAT_HEADER: &str = "fleet-format";

/// The format this build writes, and the newest it reads.
pub const FORMAT: u32 = 2;

/// The header carrying the publisher's namespaces fingerprint.
pub const NAMESPACES_HEADER: &str = "fleet-namespaces";

/// The header of a [`ChannelOp`] record: its value names the op (`reset` or `delete`).
pub const OP_HEADER: &str = "fleet-op";

/// Most publications one record carries (as format 1's groups).
pub const MAX_PER_RECORD: usize = crate::event::MAX_EVENTS_PER_RECORD;

/// Most bytes of data a group record carries: a publication that would pass it starts the next
/// record (a single publication of up to a namespace's `max_data_bytes`, 1 MiB at most, is a
/// record of its own).
pub const MAX_GROUP_DATA_BYTES: usize = 256 * 1024;

/// The events topic's `max.message.bytes` when the publisher creates it: the largest data (1 MiB)
/// with its envelope and headers.
pub const MAX_RECORD_BYTES: usize = 2 * 1024 * 1024;

/// One publication: a channel's next version and its data.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Publication {
    pub channel: ChannelId,
    /// Per-channel version, contiguous from 1.
    pub version: u64,
    /// JSON of the channel's model.
    pub data: Box<RawValue>,
    /// When the publisher accepted it (Unix epoch, milliseconds).
    pub published_at_ms: u64,
}

impl PartialEq for Publication {
    fn eq(&self, other: &Self) -> bool {
        (&self.channel, self.version, self.data.get(), self.published_at_ms) == (&other.channel, other.version, other.data.get(), other.published_at_ms)
    }
}

impl Eq for Publication {}

impl From<PixelEvent> for Publication {
    /// A format-1 event as the `pixels` model's publication.
    fn from(ev: PixelEvent) -> Self {
        let data = Paint { x: ev.x, y: ev.y, color: ev.color }.to_data();
        Self { channel: ev.canvas, version: ev.version, data, published_at_ms: ev.published_at_ms }
    }
}

/// A record value that is not publications this build reads.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("record has no value")]
    Empty,
    #[error("record's {FORMAT_HEADER} header is not a format number")]
    BadFormat,
    /// A later format: readers are upgraded before the publisher (docs/operations.md).
    #[error("record is of format {0}, newer than this build reads ({FORMAT}): upgrade the nodes before the publisher")]
    NewerFormat(u32),
    #[error("record value is not a publication: {0}")]
    Json(#[from] serde_json::Error),
    #[error("record value is not a group of publications: {0}")]
    Group(&'static str),
    #[error(transparent)]
    Legacy(#[from] crate::event::DecodeError),
    /// The reader stopped applying records (it met one it must not skip) and reads no more.
    #[error("not applied: {0}")]
    Stopped(String),
    /// An op this build does not know (a later build's): not skipped, as a later format.
    #[error("record's {OP_HEADER} header names an op this build does not know ({0:?}): upgrade the nodes before the publisher")]
    UnknownOp(String),
}

impl DecodeError {
    /// Whether the reader stops on it (a later format or op) rather than skip the record.
    pub fn stops(&self) -> bool {
        matches!(self, DecodeError::NewerFormat(_) | DecodeError::Stopped(_) | DecodeError::UnknownOp(_))
    }
}

/// The headers of a record that decide how it is read.
#[derive(Debug, Clone, Copy, Default)]
pub struct RecordHeaders<'a> {
    /// [`FORMAT_HEADER`]'s value (`None`: format 1).
    pub format: Option<&'a [u8]>,
    /// [`NAMESPACES_HEADER`]'s value.
    pub namespaces: Option<&'a [u8]>,
    /// [`OP_HEADER`]'s value (`None`: publications).
    pub op: Option<&'a [u8]>,
}

impl<'a> RecordHeaders<'a> {
    /// A record of format 1 (no headers).
    pub const NONE: RecordHeaders<'static> = RecordHeaders { format: None, namespaces: None, op: None };

    /// The headers of `msg`.
    pub fn of<M: rdkafka::message::Message>(msg: &'a M) -> Self {
        use rdkafka::message::Headers;
        let mut out = RecordHeaders::default();
        if let Some(headers) = msg.headers() {
            for h in headers.iter() {
                match h.key {
                    FORMAT_HEADER => out.format = h.value,
                    NAMESPACES_HEADER => out.namespaces = h.value,
                    OP_HEADER => out.op = h.value,
                    _ => {}
                }
            }
        }
        out
    }

    /// Format 2 headers (what the publisher writes), with `namespaces` as fingerprint.
    pub fn current(namespaces: &'a str) -> Self {
        RecordHeaders { format: Some(b"2"), namespaces: Some(namespaces.as_bytes()), op: None }
    }

    /// The headers of an op record of `op` (what the publisher writes), with `namespaces` as
    /// fingerprint.
    pub fn of_op(namespaces: &'a str, op: OpKind) -> Self {
        RecordHeaders { op: Some(op.as_str().as_bytes()), ..Self::current(namespaces) }
    }
}

/// What an op record does to its channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OpKind {
    /// The channel's state starts again, empty, at version 0 of reset count `resets`.
    Reset,
    /// The channel is gone: its state, recent publications and snapshot (history of reset count
    /// `resets`). A later publication starts a new history.
    Delete,
}

impl OpKind {
    /// The [`OP_HEADER`] value.
    pub fn as_str(self) -> &'static str {
        match self {
            OpKind::Reset => "reset",
            OpKind::Delete => "delete",
        }
    }

    fn parse(raw: &[u8]) -> Option<Self> {
        match raw {
            b"reset" => Some(OpKind::Reset),
            b"delete" => Some(OpKind::Delete),
            _ => None,
        }
    }
}

/// A change of a channel's history: an op record's header and value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelOp {
    pub op: OpKind,
    pub channel: ChannelId,
    /// The reset count of the history that starts (a reset) or ends (a delete).
    pub resets: u64,
    /// When the publisher accepted it (Unix epoch, milliseconds).
    pub published_at_ms: u64,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct OpValue {
    channel: ChannelId,
    resets: u64,
    published_at_ms: u64,
}

impl ChannelOp {
    /// The record value.
    pub fn record_value(&self) -> Vec<u8> {
        serde_json::to_vec(&OpValue { channel: self.channel.clone(), resets: self.resets, published_at_ms: self.published_at_ms }).expect("an op serialises")
    }
}

/// One record of the events topic, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    /// One publication, or a channel's group of them.
    Publications(Vec<Publication>),
    /// A reset or a delete.
    Op(ChannelOp),
}

/// Decodes a record of the events topic from its headers and value: publications
/// ([`Publication::decode_record`]) or, with an [`OP_HEADER`], a [`ChannelOp`].
///
/// # Errors
/// As [`Publication::decode_record`]; an op header of another value than `reset` / `delete` is
/// [`DecodeError::NewerFormat`] of the record's format (a later build's op: a node stops on it
/// rather than skip it).
pub fn decode(headers: RecordHeaders<'_>, value: Option<&[u8]>) -> Result<Decoded, DecodeError> {
    let Some(op) = headers.op else {
        return Publication::decode_record(headers.format, value).map(Decoded::Publications);
    };
    let format: u32 = headers.format.and_then(|f| std::str::from_utf8(f).ok()).and_then(|f| f.parse().ok()).ok_or(DecodeError::BadFormat)?;
    if format > FORMAT {
        return Err(DecodeError::NewerFormat(format));
    }
    let op = OpKind::parse(op).ok_or(DecodeError::UnknownOp(String::from_utf8_lossy(op).into_owned()))?;
    let v: OpValue = serde_json::from_slice(value.ok_or(DecodeError::Empty)?)?;
    Ok(Decoded::Op(ChannelOp { op, channel: v.channel, resets: v.resets, published_at_ms: v.published_at_ms }))
}

impl Publication {
    /// The format-1 event of a pixel's publication (`None` when it is other data).
    pub fn to_pixel_event(&self) -> Option<PixelEvent> {
        let p = self.paint()?;
        Some(PixelEvent { canvas: self.channel.clone(), version: self.version, x: p.x, y: p.y, color: p.color, published_at_ms: self.published_at_ms })
    }

    /// Its data as a pixel's (`None` when it is other data).
    pub fn paint(&self) -> Option<Paint> {
        serde_json::from_str(self.data.get()).ok()
    }

    /// The value of a record carrying `pubs` (one channel, consecutive versions, at least one): the
    /// publication's JSON object for one, a JSON array of them for several.
    pub fn record_value(pubs: &[Publication]) -> Vec<u8> {
        match pubs {
            [one] => serde_json::to_vec(one),
            many => serde_json::to_vec(many),
        }
        .expect("publications serialise")
    }

    /// Decodes a record from its [`FORMAT_HEADER`] value (`None`: format 1) and its value.
    ///
    /// # Errors
    /// [`DecodeError`]: readers log and skip such a record (it was not written by a publisher),
    /// except [`DecodeError::NewerFormat`], on which a node stops.
    pub fn decode_record(format: Option<&[u8]>, value: Option<&[u8]>) -> Result<Vec<Self>, DecodeError> {
        let Some(format) = format else {
            return Ok(PixelEvent::decode_record(value)?.into_iter().map(Publication::from).collect());
        };
        let format: u32 = std::str::from_utf8(format).ok().and_then(|f| f.parse().ok()).ok_or(DecodeError::BadFormat)?;
        if format > FORMAT {
            return Err(DecodeError::NewerFormat(format));
        }
        if format < 2 {
            return Ok(PixelEvent::decode_record(value)?.into_iter().map(Publication::from).collect());
        }
        let value = value.ok_or(DecodeError::Empty)?;
        if value.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'[') {
            return Ok(vec![serde_json::from_slice(value)?]);
        }
        let pubs: Vec<Self> = serde_json::from_slice(value)?;
        check_group(&pubs)?;
        Ok(pubs)
    }
}

/// A group's rules: 1..=[`MAX_PER_RECORD`] publications of one channel, consecutive versions.
fn check_group(pubs: &[Publication]) -> Result<(), DecodeError> {
    if pubs.is_empty() {
        return Err(DecodeError::Group("no publications"));
    }
    if pubs.len() > MAX_PER_RECORD {
        return Err(DecodeError::Group("more publications than a record carries"));
    }
    for pair in pubs.windows(2) {
        if pair[1].channel != pair[0].channel {
            return Err(DecodeError::Group("publications of more than one channel"));
        }
        if pair[0].version.checked_add(1) != Some(pair[1].version) {
            return Err(DecodeError::Group("versions are not consecutive"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn publication(channel: &str, version: u64, data: &str) -> Publication {
        Publication { channel: ChannelId::parse(channel).unwrap(), version, data: RawValue::from_string(data.into()).unwrap(), published_at_ms: 7 }
    }

    #[test]
    fn a_publication_has_the_documented_shape_and_round_trips() {
        let raw = br#"{"channel":"scores:final","version":13,"data":{"home":2},"published_at_ms":1764400000000}"#;
        let got = Publication::decode_record(Some(b"2"), Some(raw)).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].channel.as_str(), got[0].version, got[0].data.get()), ("scores:final", 13, r#"{"home":2}"#));
        assert_eq!(Publication::record_value(&got), raw.to_vec());
    }

    #[test]
    fn a_group_round_trips_and_bad_groups_are_errors() {
        let group = vec![publication("chat:a", 4, r#""hi""#), publication("chat:a", 5, "[1]"), publication("chat:a", 6, "null")];
        let value = Publication::record_value(&group);
        assert_eq!(value[0], b'[');
        assert_eq!(Publication::decode_record(Some(b"2"), Some(&value)).unwrap(), group);
        for (bad, why) in [
            (vec![], "no publications"),
            (vec![publication("a", 1, "1"), publication("b", 2, "1")], "more than one channel"),
            (vec![publication("a", 1, "1"), publication("a", 3, "1")], "not consecutive"),
            (vec![publication("a", u64::MAX, "1"), publication("a", 0, "1")], "not consecutive"),
            ((1..=MAX_PER_RECORD as u64 + 1).map(|v| publication("a", v, "1")).collect(), "more publications"),
        ] {
            let value = serde_json::to_vec(&bad).unwrap();
            match Publication::decode_record(Some(b"2"), Some(&value)) {
                Err(DecodeError::Group(m)) => assert!(m.contains(why), "{m}"),
                other => panic!("{why}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_record_of_format_1_is_read_as_pixels_data() {
        let raw = br##"{"canvas":"c1","version":13,"x":1,"y":2,"color":"#FF0000","published_at_ms":1764400000000}"##;
        for format in [None, Some(&b"1"[..])] {
            let got = Publication::decode_record(format, Some(raw)).unwrap();
            assert_eq!(got, vec![Publication { published_at_ms: 1764400000000, ..publication("c1", 13, r##"{"x":1,"y":2,"color":"#ff0000"}"##) }]);
        }
        let group = br##"[{"canvas":"c1","version":1,"x":0,"y":0,"color":"#000000","published_at_ms":0},{"canvas":"c1","version":2,"x":1,"y":0,"color":"#000000","published_at_ms":0}]"##;
        assert_eq!(Publication::decode_record(None, Some(group)).unwrap().iter().map(|p| p.version).collect::<Vec<_>>(), [1, 2]);
        assert!(matches!(Publication::decode_record(None, Some(b"{}")), Err(DecodeError::Legacy(_))));
    }

    #[test]
    fn op_records_round_trip_and_an_unknown_op_stops_the_reader() {
        for op in [OpKind::Reset, OpKind::Delete] {
            let want = ChannelOp { op, channel: ChannelId::parse("scores:final").unwrap(), resets: 3, published_at_ms: 9 };
            let value = want.record_value();
            assert_eq!(value, br#"{"channel":"scores:final","resets":3,"published_at_ms":9}"#.to_vec());
            assert_eq!(decode(RecordHeaders::of_op("f", op), Some(&value)).unwrap(), Decoded::Op(want.clone()));
            // A reader of publications only does not take it for one.
            assert!(Publication::decode_record(Some(b"2"), Some(&value)).is_err());
        }
        let value = br#"{"channel":"c","resets":1,"published_at_ms":0}"#;
        let headers = |op: &'static [u8]| RecordHeaders { format: Some(b"2"), namespaces: None, op: Some(op) };
        let e = decode(headers(b"truncate"), Some(value)).unwrap_err();
        assert!(matches!(&e, DecodeError::UnknownOp(o) if o == "truncate") && e.stops(), "{e}");
        assert!(matches!(decode(RecordHeaders { format: Some(b"3"), ..headers(b"reset") }, Some(value)), Err(DecodeError::NewerFormat(3))));
        assert!(matches!(decode(RecordHeaders { format: None, ..headers(b"reset") }, Some(value)), Err(DecodeError::BadFormat)));
        assert!(decode(headers(b"reset"), Some(br#"{"channel":"c","resets":1}"#)).is_err());
        assert!(matches!(decode(headers(b"reset"), None), Err(DecodeError::Empty)));
        // Without the op header: publications, as before.
        let raw = br#"{"channel":"c1","version":1,"data":1,"published_at_ms":0}"#;
        assert!(matches!(decode(RecordHeaders::current("f"), Some(raw)), Ok(Decoded::Publications(p)) if p.len() == 1));
    }

    #[test]
    fn a_later_format_is_named_and_a_bad_one_refused() {
        let raw = br#"{"channel":"c1","version":1,"data":1,"published_at_ms":0}"#;
        assert!(matches!(Publication::decode_record(Some(b"3"), Some(raw)), Err(DecodeError::NewerFormat(3))));
        for bad in [&b"two"[..], b"", b"-1", b"\xff"] {
            assert!(matches!(Publication::decode_record(Some(bad), Some(raw)), Err(DecodeError::BadFormat)), "{bad:?}");
        }
        for bad in [&br#"{"channel":"c1","version":1,"data":1}"#[..], br#"{"channel":"c1","version":1,"data":1,"published_at_ms":0,"x":1}"#, b"[", b"{\"channel\":\"a:\"}"] {
            assert!(Publication::decode_record(Some(b"2"), Some(bad)).is_err());
        }
        assert!(matches!(Publication::decode_record(Some(b"2"), None), Err(DecodeError::Empty)));
    }
}

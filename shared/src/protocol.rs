//! The WebSocket protocol between a node (through the gateway) and a client.
//!
//! A client opens `GET /ws?canvas=<id>&since=<last version it applied>&epoch=<epoch of its
//! last welcome>` (`epoch` absent on a first connect). The server then sends JSON text frames
//! ([`ServerMessage`]), in this order:
//!
//! 0. a `welcome` naming the node that serves the session and the channel's current epoch
//!    ([`crate::epoch`]);
//! 1. the backlog: the events after `since`, one `event` frame each, when it still holds them; a
//!    `snapshot` otherwise, and always when `since=0` (the client has nothing: the snapshot gives it
//!    a base and the canvas size) or when the client's `epoch` is not the current one (its versions
//!    belong to another history: a recreated topic, a reset channel);
//! 2. live `event` frames, each version exactly once and in order;
//! 3. possibly a `reconnect` notice (the node is draining): reconnect after `retry_after_ms` with
//!    `since` = the last version applied and the epoch, and the events continue where they stopped.
//!
//! Clients send nothing but control frames (ping/pong/close); text they send is ignored when it is
//! well-formed JSON.
//!
//! Close codes are from RFC 6455 §7.4.1 and the IANA "WebSocket Close Code Number Registry"
//! (RFC 6455 §11.7), see [`close`].

use crate::epoch::Epoch;
use crate::event::PixelEvent;
use crate::model::{ModelKind, State};
use crate::record::Publication;
use serde::{Deserialize, Serialize};

/// A frame from server to client (JSON text, tagged by `"type"`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum ServerMessage {
    /// First frame of every session: which node serves it (for status displays and logs), the
    /// version the backlog starts after (the client's `since`, or 0 when its epoch was not the
    /// current one), and the channel's current epoch, which the client sends back as
    /// `epoch=` when it reconnects (absent only from nodes older than epochs).
    ///
    /// A session opened with `channel=` (or a `subscribe` frame) is welcomed with `channel` and
    /// its namespace's `model`; one opened with today's `canvas=` with `canvas`.
    Welcome {
        node: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        canvas: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        channel: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<ModelKind>,
        since: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        epoch: Option<Epoch>,
    },
    /// The channel's whole state at `version`, in its model's JSON form ([`crate::model`]): what a
    /// client with nothing, or with versions no longer held, starts from.
    State { channel: String, version: u64, state: serde_json::Value },
    /// One publication (the record's fields next to `"type":"publication"`).
    Publication { channel: String, version: u64, data: serde_json::Value, published_at_ms: u64 },
    /// The client's position is now `version` of `epoch`: what came between is not coming (a
    /// `stream` channel resumed from beyond the node's window; its state is the application's to
    /// reload).
    Reset {
        channel: String,
        version: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        epoch: Option<Epoch>,
    },
    /// The whole canvas at `version`: `pixels` is base64 of the canonical bytes
    /// (`width * height * 3` bytes, row-major RGB).
    Snapshot {
        canvas: String,
        version: u64,
        width: u32,
        height: u32,
        pixels: String,
    },
    /// One pixel change (the Kafka event's fields next to `"type":"event"`).
    Event(PixelEvent),
    /// The node is handing this session over: reconnect (through the gateway) after
    /// `retry_after_ms` milliseconds plus jitter, with `since` = the last version applied.
    Reconnect { reason: DrainReason, retry_after_ms: u64 },
    /// Something the client should know before the server closes or ignores its input. With
    /// `retry_after_ms`, a refusal: the connection closes with 1013 and the client should not try
    /// again sooner (what an HTTP 503's `Retry-After` says, for clients that cannot read one).
    Error {
        code: String,
        message: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_after_ms: Option<u64>,
        /// The channel it is about (absent: the connection).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        channel: Option<String>,
    },
}

impl ServerMessage {
    /// The frame as compact JSON text.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a ServerMessage always serialises")
    }
}

/// [`ServerMessage::Event`] of a borrowed event: the same JSON without cloning the event.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum BorrowedMessage<'a> {
    Event(&'a PixelEvent),
    Publication(&'a Publication),
}

/// Appends the JSON text of `ServerMessage::Event(ev)` to `out` (the bytes
/// [`ServerMessage::to_json`] gives, without a copy of the event or of the text).
pub fn write_event_json(ev: &PixelEvent, out: &mut Vec<u8>) {
    serde_json::to_writer(out, &BorrowedMessage::Event(ev)).expect("an event always serialises");
}

/// Appends the JSON text of a `publication` frame of `p` to `out`: the record's fields as they
/// are (its data's text is copied, never parsed).
pub fn write_publication_json(p: &Publication, out: &mut Vec<u8>) {
    serde_json::to_writer(out, &BorrowedMessage::Publication(p)).expect("a publication always serialises");
}

/// The JSON text of a `state` frame of `channel` at `version`, `state` written in its model's
/// JSON form.
pub fn state_json(channel: &str, version: u64, state: &dyn State) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + state.byte_len() * 4 / 3);
    out.extend_from_slice(b"{\"type\":\"state\",\"channel\":");
    serde_json::to_writer(&mut out, channel).expect("a string serialises");
    out.extend_from_slice(format!(",\"version\":{version},\"state\":").as_bytes());
    state.write_json(&mut out);
    out.push(b'}');
    out
}

/// A frame from client to server (JSON text, tagged by `"type"`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum ClientMessage {
    /// The channel a connection opened without one in its query (`/ws` with no `channel=`) is
    /// for, as its first frame: the same position as the query's (`since`, `epoch`) and the
    /// client token when one is required. One per connection for now; several channels per
    /// connection will extend this frame, not replace it.
    Subscribe {
        channel: crate::ChannelId,
        #[serde(default)]
        since: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        epoch: Option<Epoch>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token: Option<String>,
    },
}

impl ClientMessage {
    /// The frame as compact JSON text.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a ClientMessage always serialises")
    }
}

/// How long a server waits for the `subscribe` frame of a connection opened without a channel
/// before it closes it with 1008 Policy Violation.
pub const SUBSCRIBE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Why sessions are being handed over. Written in `SCREAMING_SNAKE_CASE` on the wire and in logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum DrainReason {
    /// The node that owned these channels before a failure is healthy again (gateway failback).
    FailbackToRecoveredServer,
    /// Kafka's group assignment moved these partitions to another node (a rebalance).
    PartitionsRevoked,
    /// An operator takes the node out (`POST /api/fleet/nodes/{id}/drain`).
    Maintenance,
    /// The process is stopping (SIGTERM/SIGINT).
    Shutdown,
    /// The gateway takes a DEGRADED node out of the broadcast group (its consumer stalled), so
    /// its partitions move to a node that serves them.
    NodeDegraded,
}

impl DrainReason {
    /// The wire/log spelling, e.g. `FAILBACK_TO_RECOVERED_SERVER`.
    pub fn as_str(self) -> &'static str {
        match self {
            DrainReason::FailbackToRecoveredServer => "FAILBACK_TO_RECOVERED_SERVER",
            DrainReason::PartitionsRevoked => "PARTITIONS_REVOKED",
            DrainReason::Maintenance => "MAINTENANCE",
            DrainReason::Shutdown => "SHUTDOWN",
            DrainReason::NodeDegraded => "NODE_DEGRADED",
        }
    }
}

impl std::fmt::Display for DrainReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a refused handshake is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Refusal {
    /// HTTP 503 with `Retry-After` (the default; what HTTP clients and tools read).
    #[default]
    Http,
    /// Accept the WebSocket, send an `error` frame with `retry_after_ms`, close with 1013. For
    /// browsers, which cannot read the status or headers of a refused WebSocket handshake.
    Frame,
}

/// Which frames a session is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FrameStyle {
    /// `welcome {channel, model}`, `state`, `publication`, `reset`: a session opened with
    /// `channel=`.
    Channel,
    /// Today's `welcome {canvas}`, `snapshot`, `event`: a session opened with `canvas=` (clients of
    /// the present version, during an upgrade), of a `pixels` channel only.
    Canvas,
}

/// Query of `GET /ws`: `channel` (a channel id; or `canvas`, the same for today's frames: exactly
/// one of them), `since` (last version applied; 0 = nothing), `epoch` (the epoch of the client's
/// last `welcome`; absent = none known) and `refusal` (`http` or `frame`, see [`Refusal`]) and
/// `token` (the client token when the service requires one, see [`crate::client_token`]: browsers
/// cannot set headers on a WebSocket). Parse it with `shared::http::parse_ws_query`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WsQuery {
    /// Validated while parsing (a bad id is an error naming `channel`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<crate::ChannelId>,
    /// As `channel`, for today's frames ([`FrameStyle::Canvas`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canvas: Option<crate::ChannelId>,
    #[serde(default)]
    pub since: u64,
    /// Validated while parsing ([`Epoch::parse`]; a bad one is an error naming `epoch`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<Epoch>,
    #[serde(default)]
    pub refusal: Refusal,
    /// The client token (a JWT), passed on by the gateway to the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

impl WsQuery {
    /// A query for `id` in `style`.
    pub fn new(id: crate::ChannelId, style: FrameStyle, since: u64, epoch: Option<Epoch>) -> Self {
        let (channel, canvas) = match style {
            FrameStyle::Channel => (Some(id), None),
            FrameStyle::Canvas => (None, Some(id)),
        };
        Self { channel, canvas, since, epoch, refusal: Refusal::Http, token: None }
    }

    /// The channel (of a query `shared::http::parse_ws_query` accepted).
    pub fn id(&self) -> &crate::ChannelId {
        self.channel.as_ref().or(self.canvas.as_ref()).expect("a parsed query names a channel")
    }

    /// The frames its session is sent.
    pub fn style(&self) -> FrameStyle {
        if self.channel.is_some() {
            FrameStyle::Channel
        } else {
            FrameStyle::Canvas
        }
    }

    /// The query string a proxy or a client sends on: `channel=..` (or `canvas=..`) `&since=..`,
    /// then `&epoch=..` when there is one (ids and epochs need no escaping), then `&token=..`
    /// (percent-encoded) when there is one. `refusal` is the caller's business.
    pub fn resume_query(&self) -> String {
        let q = resume_query_as(self.style(), self.id(), self.since, self.epoch.as_ref());
        match &self.token {
            Some(t) => format!("{q}&token={}", form_urlencoded::byte_serialize(t.as_bytes()).collect::<String>()),
            None => q,
        }
    }
}

/// `canvas=<id>&since=<since>[&epoch=<epoch>]`, the resume position of `GET /ws` in today's frames.
pub fn resume_query(canvas: &crate::ChannelId, since: u64, epoch: Option<&Epoch>) -> String {
    resume_query_as(FrameStyle::Canvas, canvas, since, epoch)
}

/// `<channel|canvas>=<id>&since=<since>[&epoch=<epoch>]`, the resume position of `GET /ws`.
pub fn resume_query_as(style: FrameStyle, id: &crate::ChannelId, since: u64, epoch: Option<&Epoch>) -> String {
    let param = match style {
        FrameStyle::Channel => "channel",
        FrameStyle::Canvas => "canvas",
    };
    match epoch {
        Some(e) => format!("{param}={id}&since={since}&epoch={e}"),
        None => format!("{param}={id}&since={since}"),
    }
}

/// WebSocket close codes the fleet sends, with their source.
pub mod close {
    /// 1000 Normal Closure (RFC 6455 §7.4.1).
    pub const NORMAL: u16 = 1000;
    /// 1001 Going Away: the server is shutting down (RFC 6455 §7.4.1).
    pub const GOING_AWAY: u16 = 1001;
    /// 1002 Protocol Error (RFC 6455 §7.4.1).
    pub const PROTOCOL_ERROR: u16 = 1002;
    /// 1003 Unsupported Data, e.g. a binary frame where only text is accepted (RFC 6455 §7.4.1).
    pub const UNSUPPORTED_DATA: u16 = 1003;
    /// 1007 Invalid Frame Payload Data, e.g. text that is not UTF-8 or not JSON (RFC 6455 §7.4.1).
    pub const INVALID_PAYLOAD: u16 = 1007;
    /// 1008 Policy Violation (RFC 6455 §7.4.1).
    pub const POLICY_VIOLATION: u16 = 1008;
    /// 1009 Message Too Big (RFC 6455 §7.4.1).
    pub const MESSAGE_TOO_BIG: u16 = 1009;
    /// 1011 Internal Error (RFC 6455 §7.4.1).
    pub const INTERNAL_ERROR: u16 = 1011;
    /// 1012 Service Restart (IANA registry, RFC 6455 §11.7): a drain's grace period ended;
    /// reconnect through the gateway and resume with `since`.
    pub const SERVICE_RESTART: u16 = 1012;
    /// 1013 Try Again Later (IANA registry, RFC 6455 §11.7): the session's outbound queue was full
    /// (the client is too slow to keep up); reconnect with `since` after a delay.
    pub const TRY_AGAIN_LATER: u16 = 1013;
    /// 1006 Abnormal Closure: never sent, reported locally when a connection drops without a close
    /// frame (RFC 6455 §7.4.1).
    pub const ABNORMAL: u16 = 1006;
    /// 1005 No Status Received: never sent, reported locally for a close frame without a code
    /// (RFC 6455 §7.4.1).
    pub const NO_STATUS: u16 = 1005;

    /// Close codes that mean the peer broke the protocol (reconnecting the same way will fail again).
    pub fn is_protocol_error(code: u16) -> bool {
        matches!(code, PROTOCOL_ERROR | UNSUPPORTED_DATA | INVALID_PAYLOAD | MESSAGE_TOO_BIG)
    }
}

#[cfg(test)]
mod borrowed_tests {
    use super::*;

    #[test]
    fn a_borrowed_event_writes_the_same_json_as_the_owned_message() {
        let ev: PixelEvent = serde_json::from_str(r##"{"canvas":"c-1","version":7,"x":3,"y":4,"color":"#0a0b0c","published_at_ms":1733}"##).unwrap();
        let mut out = b"xy".to_vec();
        write_event_json(&ev, &mut out);
        assert_eq!(&out[2..], ServerMessage::Event(ev).to_json().as_bytes());
    }
}

#[cfg(test)]
mod channel_frame_tests {
    use super::*;

    #[test]
    fn a_publication_frame_carries_the_data_as_published_and_parses_back() {
        let raw = br#"{"channel":"scores:m1","version":7,"data":{"b":1.50,"a":[true]},"published_at_ms":9}"#;
        let p = Publication::decode_record(Some(b"2"), Some(raw)).unwrap().remove(0);
        let mut out = Vec::new();
        write_publication_json(&p, &mut out);
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text, r#"{"type":"publication","channel":"scores:m1","version":7,"data":{"b":1.50,"a":[true]},"published_at_ms":9}"#);
        let back: ServerMessage = serde_json::from_str(&text).unwrap();
        assert_eq!(back, ServerMessage::Publication { channel: "scores:m1".into(), version: 7, data: serde_json::json!({"a":[true],"b":1.5}), published_at_ms: 9 });
    }

    #[test]
    fn a_state_frame_writes_the_models_json_form() {
        use crate::model::Model as _;
        let mut s = crate::model::json::Json::default().empty();
        s.apply(&serde_json::value::RawValue::from_string(r#"{"title":"Q\"3"}"#.into()).unwrap()).unwrap();
        let text = String::from_utf8(state_json("docs:a", 3, s.as_ref())).unwrap();
        assert_eq!(text, r#"{"type":"state","channel":"docs:a","version":3,"state":{"title":"Q\"3"}}"#);
        assert!(matches!(serde_json::from_str(&text).unwrap(), ServerMessage::State { version: 3, .. }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{ChannelId, Color};

    #[test]
    fn frames_round_trip_with_documented_shapes() {
        let ev = PixelEvent {
            canvas: ChannelId::parse("c1").unwrap(),
            version: 13,
            x: 1,
            y: 2,
            color: Color([255, 0, 0]),
            published_at_ms: 1764400000000,
        };
        let cases = [
            (
                ServerMessage::Event(ev),
                r##"{"type":"event","canvas":"c1","version":13,"x":1,"y":2,"color":"#ff0000","published_at_ms":1764400000000}"##,
            ),
            (
                ServerMessage::Snapshot {
                    canvas: "c1".into(),
                    version: 12,
                    width: 1,
                    height: 1,
                    pixels: "////".into(),
                },
                r#"{"type":"snapshot","canvas":"c1","version":12,"width":1,"height":1,"pixels":"////"}"#,
            ),
            (
                ServerMessage::Reconnect {
                    reason: DrainReason::FailbackToRecoveredServer,
                    retry_after_ms: 250,
                },
                r#"{"type":"reconnect","reason":"FAILBACK_TO_RECOVERED_SERVER","retry_after_ms":250}"#,
            ),
            (
                ServerMessage::Error { code: "not_owner".into(), message: "m".into(), retry_after_ms: None, channel: None },
                r#"{"type":"error","code":"not_owner","message":"m"}"#,
            ),
            (
                ServerMessage::Error { code: "no_owner".into(), message: "m".into(), retry_after_ms: Some(1000), channel: Some("c1".into()) },
                r#"{"type":"error","code":"no_owner","message":"m","retry_after_ms":1000,"channel":"c1"}"#,
            ),
            (
                ServerMessage::Welcome { node: "ws-1".into(), canvas: Some("c1".into()), channel: None, model: None, since: 12, epoch: Some(Epoch::of("q5XGvJ9mR2yqH7Y1cjTQfA", 0)) },
                r#"{"type":"welcome","node":"ws-1","canvas":"c1","since":12,"epoch":"q5XGvJ9mR2yqH7Y1cjTQfA-0"}"#,
            ),
            (
                ServerMessage::Welcome { node: "ws-1".into(), canvas: None, channel: Some("scores:m1".into()), model: Some(ModelKind::Json), since: 0, epoch: Some(Epoch::of("q5X", 2)) },
                r#"{"type":"welcome","node":"ws-1","channel":"scores:m1","model":"json","since":0,"epoch":"q5X-2"}"#,
            ),
            (
                ServerMessage::State { channel: "scores:m1".into(), version: 12, state: serde_json::json!({"home": 2}) },
                r#"{"type":"state","channel":"scores:m1","version":12,"state":{"home":2}}"#,
            ),
            (
                ServerMessage::Publication { channel: "chat:a".into(), version: 13, data: serde_json::json!("hi"), published_at_ms: 1764400000000 },
                r#"{"type":"publication","channel":"chat:a","version":13,"data":"hi","published_at_ms":1764400000000}"#,
            ),
            (
                ServerMessage::Reset { channel: "chat:a".into(), version: 40, epoch: Some(Epoch::of("q5X", 0)) },
                r#"{"type":"reset","channel":"chat:a","version":40,"epoch":"q5X-0"}"#,
            ),
            (
                // A welcome of a node older than epochs still parses.
                ServerMessage::Welcome { node: "ws-1".into(), canvas: Some("c1".into()), channel: None, model: None, since: 12, epoch: None },
                r#"{"type":"welcome","node":"ws-1","canvas":"c1","since":12}"#,
            ),
        ];
        for (msg, json) in cases {
            assert_eq!(msg.to_json(), json);
            assert_eq!(serde_json::from_str::<ServerMessage>(json).unwrap(), msg);
        }
    }

    #[test]
    fn drain_reason_spelling_matches_serde() {
        for r in [
            DrainReason::FailbackToRecoveredServer,
            DrainReason::PartitionsRevoked,
            DrainReason::Maintenance,
            DrainReason::Shutdown,
        ] {
            assert_eq!(serde_json::to_string(&r).unwrap(), format!("\"{}\"", r.as_str()));
        }
    }

    #[test]
    fn ws_query_since_defaults_to_zero_and_refusal_to_http() {
        let q: WsQuery = serde_json::from_str(r#"{"canvas":"c1"}"#).unwrap();
        assert_eq!((q.since, q.refusal, q.style()), (0, Refusal::Http, FrameStyle::Canvas));
        let q: WsQuery = serde_json::from_str(r#"{"canvas":"c1","refusal":"frame"}"#).unwrap();
        assert_eq!(q.refusal, Refusal::Frame);
        assert!(serde_json::from_str::<WsQuery>(r#"{"canvas":"c1","refusal":"smoke"}"#).is_err());
    }

    #[test]
    fn ws_query_carries_the_epoch_and_builds_the_resume_query() {
        let q: WsQuery = crate::http::parse_ws_query("canvas=c1&since=40&epoch=q5X-_9-3&refusal=frame").unwrap();
        assert_eq!(q.epoch.as_ref().map(Epoch::as_str), Some("q5X-_9-3"));
        assert_eq!(q.resume_query(), "canvas=c1&since=40&epoch=q5X-_9-3");
        let q: WsQuery = crate::http::parse_ws_query("canvas=c1&since=40").unwrap();
        assert_eq!((q.epoch.is_none(), q.resume_query()), (true, "canvas=c1&since=40".to_owned()));
        let q: WsQuery = crate::http::parse_ws_query("canvas=c1&since=4&token=a.b%2Bc.d&refusal=frame").unwrap();
        assert_eq!(q.token.as_deref(), Some("a.b+c.d"));
        assert_eq!(q.resume_query(), "canvas=c1&since=4&token=a.b%2Bc.d");
        for bad in ["canvas=c1&epoch=", "canvas=c1&epoch=a%20b", "canvas=c1&epoch=a%2Bb"] {
            let e = crate::http::parse_ws_query(bad).unwrap_err();
            assert_eq!(e.body.field.as_deref(), Some("epoch"), "{bad}");
        }
    }

    #[test]
    fn ws_query_takes_a_channel_or_a_canvas() {
        let q = crate::http::parse_ws_query("channel=scores:m1&since=3&epoch=q5X-0").unwrap();
        assert_eq!((q.id().as_str(), q.style()), ("scores:m1", FrameStyle::Channel));
        assert_eq!(q.resume_query(), "channel=scores:m1&since=3&epoch=q5X-0");
        assert_eq!(crate::http::parse_ws_query("canvas=c1").unwrap().style(), FrameStyle::Canvas);
        for (bad, field) in [("since=3", "channel"), ("channel=a&canvas=a", "canvas"), ("channel=a:", "channel"), ("channel=a:b:c", "channel")] {
            let e = crate::http::parse_ws_query(bad).unwrap_err();
            assert_eq!((e.status.as_u16(), e.body.field.as_deref()), (400, Some(field)), "{bad}");
        }
    }
}

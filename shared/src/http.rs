//! The fleet's HTTP error answer and JSON body parsing, shared by every service.
//!
//! Every 4xx/5xx is `{"error": <code>, "message": <text>, "field"?: <name>}` ([`ErrorBody`]);
//! a 503 carries `Retry-After` (seconds, RFC 9110 §10.2.3).

use crate::api::ErrorBody;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::de::DeserializeOwned;

/// Largest request body the fleet's APIs accept (bytes); larger gets 413. Routers apply it with
/// `DefaultBodyLimit::max(MAX_BODY_BYTES)`.
pub const MAX_BODY_BYTES: usize = 4096;
/// Largest body of a batch publish (`POST /pixels` on the publisher, `/api/pixels` on the
/// gateway), bytes: 1,000 events with 64-character canvas ids and 128-character idempotency
/// keys take about 263,000 bytes of compact JSON; this leaves room for whitespace.
pub const MAX_BATCH_BODY_BYTES: usize = 512 * 1024;

/// A request body declared as JSON (or not declared), read whole: 415 for another `Content-Type`,
/// 413 over [`MAX_BODY_BYTES`].
pub struct JsonBody(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        require_json(req.headers())?;
        let bytes = Bytes::from_request(req, state).await.map_err(|r| ApiError::from_body_rejection(r, MAX_BODY_BYTES))?;
        Ok(Self(bytes))
    }
}

/// A JSON request body of up to `LIMIT` bytes, for the routes that take more than
/// [`MAX_BODY_BYTES`] (the route also needs `DefaultBodyLimit::max(LIMIT)`): 415 for another
/// `Content-Type`, 413 over `LIMIT`.
pub struct JsonBodyUpTo<const LIMIT: usize>(pub Bytes);

impl<S: Send + Sync, const LIMIT: usize> FromRequest<S> for JsonBodyUpTo<LIMIT> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        require_json(req.headers())?;
        let bytes = Bytes::from_request(req, state).await.map_err(|r| ApiError::from_body_rejection(r, LIMIT))?;
        Ok(Self(bytes))
    }
}

/// The single `{...}` path parameter of a route, percent-decoded (400 `invalid_path` when it is
/// not UTF-8).
pub struct PathSegment(pub String);

impl<S: Send + Sync> FromRequestParts<S> for PathSegment {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Path(s) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|r| ApiError::bad_request("invalid_path", r.body_text()))?;
        Ok(Self(s))
    }
}

/// A `{id}` path parameter that is a valid channel id (400 naming `canvas` otherwise).
pub struct ChannelPath(pub crate::ChannelId);

impl<S: Send + Sync> FromRequestParts<S> for ChannelPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let PathSegment(raw) = PathSegment::from_request_parts(parts, state).await?;
        crate::ChannelId::parse(&raw).map(Self).map_err(|e| ApiError::field("canvas", e.to_string()))
    }
}

/// An error answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub body: ErrorBody,
    /// `Retry-After` in seconds (503, and 429 `rate_limited`).
    pub retry_after_secs: Option<u64>,
}

impl ApiError {
    /// An error answer with `status`, machine-readable `code` and `message`.
    pub fn new(status: StatusCode, code: &str, message: impl Into<String>) -> Self {
        Self {
            status,
            body: ErrorBody { error: code.into(), message: message.into(), field: None },
            retry_after_secs: None,
        }
    }

    /// 400 `invalid_field`: `field` is missing, unknown, of the wrong type or out of range.
    pub fn field(field: impl Into<String>, message: impl Into<String>) -> Self {
        let mut e = Self::new(StatusCode::BAD_REQUEST, "invalid_field", message);
        e.body.field = Some(field.into());
        e
    }

    /// 400 `malformed_json`: the body is not JSON.
    pub fn malformed(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "malformed_json", message)
    }

    /// 400 with a code of the caller's.
    pub fn bad_request(code: &str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    /// 404 `not_found`.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// 401 with a code of the caller's (`missing_token`, `invalid_token`, `token_expired`): no
    /// credential, or one that does not verify. The answer carries `WWW-Authenticate: Bearer`
    /// (RFC 6750 §3).
    pub fn unauthorized(code: &str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, code, message)
    }

    /// 403 with a code of the caller's: a valid credential that does not allow this request
    /// (e.g. a client token for other canvases).
    pub fn forbidden(code: &str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, code, message)
    }

    /// 409: the request conflicts with the current state (e.g. a drain already running).
    pub fn conflict(code: &str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, code, message)
    }

    /// 413 `body_too_large` (limit in bytes).
    pub fn too_large(limit: usize) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, "body_too_large", format!("request body is larger than {limit} bytes"))
    }

    /// 502 `bad_gateway`: an upstream answered badly.
    pub fn bad_gateway(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_GATEWAY, "bad_gateway", message)
    }

    /// 503 with `Retry-After: retry_after_secs`: not now, try again.
    pub fn unavailable(code: &str, message: impl Into<String>, retry_after_secs: u64) -> Self {
        let mut e = Self::new(StatusCode::SERVICE_UNAVAILABLE, code, message);
        e.retry_after_secs = Some(retry_after_secs);
        e
    }

    /// Maps a body-read failure: over the limit is 413, anything else 400.
    pub fn from_body_rejection(r: BytesRejection, limit: usize) -> Self {
        match r {
            BytesRejection::FailedToBufferBody(e) => match body_timeout_in(&e) {
                Some(t) => Self::new(StatusCode::REQUEST_TIMEOUT, "body_timeout", t.to_string()),
                None if matches!(e, axum::extract::rejection::FailedToBufferBody::LengthLimitError(_)) => Self::too_large(limit),
                None => Self::malformed(format!("the request body could not be read: {}", e.body_text())),
            },
            other => Self::malformed(other.body_text()),
        }
    }
}

/// The [`crate::serve::BodyTimeout`] among the causes of `e`, if the body read failed on it.
fn body_timeout_in(e: &(dyn std::error::Error + 'static)) -> Option<crate::serve::BodyTimeout> {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if let Some(t) = c.downcast_ref::<crate::serve::BodyTimeout>() {
            return Some(*t);
        }
        cause = c.source();
    }
    None
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let missing = self.body.error == "missing_token";
        let mut resp = (self.status, Json(self.body)).into_response();
        if let Some(secs) = self.retry_after_secs {
            resp.headers_mut().insert(header::RETRY_AFTER, secs.into());
        }
        if self.status == StatusCode::UNAUTHORIZED {
            // RFC 6750 §3: the scheme, and `error="invalid_token"` when a token was sent.
            let v = if missing {
                header::HeaderValue::from_static("Bearer realm=\"canvas-fleet\"")
            } else {
                header::HeaderValue::from_static("Bearer realm=\"canvas-fleet\", error=\"invalid_token\"")
            };
            resp.headers_mut().insert(header::WWW_AUTHENTICATE, v);
        }
        resp
    }
}

/// Parses a JSON body into `T`, naming the field at fault.
///
/// # Errors
/// [`ApiError::malformed`] when the body is not JSON; [`ApiError::field`] for a missing, unknown,
/// badly typed or invalid field (the field named as a path, e.g. `color` or `partitions[2]`).
pub fn parse_json<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    // Bodies are JSON objects: the array form serde would also accept for a struct is refused.
    match body.iter().find(|b| !b.is_ascii_whitespace()) {
        None => return Err(ApiError::malformed("the body is empty; a JSON object is expected")),
        Some(b'{') => {}
        Some(_) => return Err(ApiError::malformed("the body must be a JSON object")),
    }
    let de = &mut serde_json::Deserializer::from_slice(body);
    let value = serde_path_to_error::deserialize::<_, T>(&mut *de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        // A syntax error inside a field (e.g. `{"reason":1}` for an enum) names that field.
        if inner.is_eof() || (inner.is_syntax() && (path == "." || path.contains('?'))) {
            return ApiError::malformed(inner.to_string());
        }
        field_error(&path, &inner.to_string())
    })?;
    de.end().map_err(|e| ApiError::malformed(format!("data after the JSON object: {e}")))?;
    Ok(value)
}

/// Checks that a request with a body declares it as JSON (`Content-Type: application/json`, any
/// parameters); a body without a `Content-Type` is read as JSON too.
///
/// # Errors
/// 415 `unsupported_media_type` for any other declared type.
fn require_json(headers: &axum::http::HeaderMap) -> Result<(), ApiError> {
    match headers.get(axum::http::header::CONTENT_TYPE) {
        None => Ok(()),
        Some(v) => {
            let mime = v.to_str().unwrap_or("").split(';').next().unwrap_or("").trim().to_ascii_lowercase();
            if mime == "application/json" {
                Ok(())
            } else {
                Err(ApiError::new(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "unsupported_media_type",
                    format!("Content-Type {mime:?} is not application/json"),
                ))
            }
        }
    }
}

/// 405 `method_not_allowed` with the stable body (axum's default has none).
pub async fn method_not_allowed() -> ApiError {
    ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", "this route does not take that method")
}


/// Parses a URL query string (`a=1&b=x`, percent-decoded) into `T`, naming the field at fault.
///
/// # Errors
/// [`ApiError::field`] for a missing, badly typed or invalid parameter.
pub fn parse_query<T: DeserializeOwned>(raw: &str) -> Result<T, ApiError> {
    let de = serde_urlencoded::Deserializer::new(form_urlencoded::parse(raw.as_bytes()));
    serde_path_to_error::deserialize::<_, T>(de).map_err(|e| {
        let path = e.path().to_string();
        field_error(&path, &e.into_inner().to_string())
    })
}

/// Parses a `/ws` query string ([`crate::protocol::WsQuery`]).
///
/// # Errors
/// 400 `invalid_field` naming the parameter: a bad one, neither `channel` nor `canvas`, or both.
pub fn parse_ws_query(raw: &str) -> Result<crate::protocol::WsQuery, ApiError> {
    let q: crate::protocol::WsQuery = parse_query(raw)?;
    match (&q.channel, &q.canvas) {
        (None, None) => Err(ApiError::field("channel", "missing field `channel`")),
        (Some(_), Some(_)) => Err(ApiError::field("canvas", "give channel or canvas, not both")),
        _ => Ok(q),
    }
}

/// Parses a `/ws` query string that may name no channel: `None` when it names none (no
/// `channel`, `canvas`, `since` or `epoch`: the client sends a `subscribe` frame first, see
/// [`parse_subscribe`]); else as [`parse_ws_query`]. `refusal` and `token` alone are allowed.
///
/// # Errors
/// As [`parse_ws_query`].
pub fn parse_ws_open(raw: &str) -> Result<Option<crate::protocol::WsQuery>, ApiError> {
    let names_position = form_urlencoded::parse(raw.as_bytes()).any(|(k, _)| matches!(k.as_ref(), "channel" | "canvas" | "since" | "epoch"));
    if names_position {
        return parse_ws_query(raw).map(Some);
    }
    // Checked all the same: a bad `refusal` or an unknown parameter is named.
    let _: crate::protocol::WsQuery = parse_query(raw)?;
    Ok(None)
}

/// Parses a client's `subscribe` frame ([`crate::protocol::ClientMessage::Subscribe`]) into the
/// query it stands for (the channel's frames; `refusal` is the caller's).
///
/// # Errors
/// 400 `invalid_field` naming the field (`type` for another frame), or `malformed_json`.
pub fn parse_subscribe(text: &str) -> Result<crate::protocol::WsQuery, ApiError> {
    // The frame's fields as a struct of their own (an internally tagged enum would lose the
    // field's name in serde's error).
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "lowercase")]
    enum Kind {
        Subscribe,
    }
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Frame {
        #[serde(rename = "type")]
        _kind: Kind,
        channel: crate::ChannelId,
        #[serde(default)]
        since: u64,
        #[serde(default)]
        epoch: Option<crate::epoch::Epoch>,
        #[serde(default)]
        token: Option<String>,
    }
    let f: Frame = parse_json(text.as_bytes())?;
    let mut q = crate::protocol::WsQuery::new(f.channel, crate::protocol::FrameStyle::Channel, f.since, f.epoch);
    q.token = f.token;
    Ok(q)
}

#[cfg(test)]
mod ws_open_tests {
    use super::*;

    #[test]
    fn a_query_without_a_channel_waits_for_a_subscribe_frame() {
        assert_eq!(parse_ws_open("").unwrap(), None);
        assert_eq!(parse_ws_open("refusal=frame&token=a.b.c").unwrap(), None);
        assert_eq!(parse_ws_open("channel=chat:a&since=2").unwrap().unwrap().since, 2);
        assert_eq!(parse_ws_open("since=2").unwrap_err().body.field.as_deref(), Some("channel"), "a position needs its channel");
        assert_eq!(parse_ws_open("refusal=never").unwrap_err().body.field.as_deref(), Some("refusal"));
        let q = parse_subscribe(r#"{"type":"subscribe","channel":"scores:final","since":12,"epoch":"T-1","token":"x.y.z"}"#).unwrap();
        assert_eq!((q.id().as_str(), q.since, q.epoch.as_ref().map(|e| e.as_str()), q.token.as_deref()), ("scores:final", 12, Some("T-1"), Some("x.y.z")));
        assert_eq!(q.style(), crate::protocol::FrameStyle::Channel);
        assert_eq!(parse_subscribe(r#"{"type":"subscribe","channel":"a"}"#).unwrap().since, 0);
        for (bad, field) in [
            (r#"{"type":"subscribe","channel":"a b"}"#, "channel"),
            (r#"{"type":"subscribe"}"#, "channel"),
            (r#"{"type":"subscribe","channel":"a","since":-1}"#, "since"),
            (r#"{"type":"subscribe","channel":"a","epoch":"a/b"}"#, "epoch"),
            (r#"{"type":"subscribe","channel":"a","extra":1}"#, "extra"),
            (r#"{"type":"publish","channel":"a"}"#, "type"),
        ] {
            assert_eq!(parse_subscribe(bad).unwrap_err().body.field.as_deref(), Some(field), "{bad}");
        }
        assert_eq!(parse_subscribe("not json").unwrap_err().body.error, "malformed_json");
    }
}

fn field_error(path: &str, msg: &str) -> ApiError {
    // The path names the field at fault, unknown fields included; a missing field is named only in
    // serde's message, below the path of its parent.
    let missing = msg.strip_prefix("missing field `").and_then(|m| m.split('`').next());
    let mut field = match (path, missing) {
        (".", Some(name)) => name.to_owned(),
        (".", None) => "body".to_owned(),
        (p, Some(name)) => format!("{p}.{name}"),
        (p, None) => p.to_owned(),
    };
    // A field whose name is the empty string (`{"":1}`) is named `""`, never by an empty path.
    if field.is_empty() || field.ends_with('.') {
        field.push_str("\"\"");
    }
    ApiError::field(field, msg)
}

/// A listener that sets `TCP_NODELAY` on every accepted connection, so small WebSocket frames and
/// HTTP answers leave at once instead of waiting, under Nagle's algorithm (RFC 896), for the ACK
/// of the previous segment — which a peer delaying its ACKs holds for up to 40 ms on Linux.
pub fn no_delay(listener: tokio::net::TcpListener) -> axum::serve::TapIo<tokio::net::TcpListener, fn(&mut tokio::net::TcpStream)> {
    fn set(stream: &mut tokio::net::TcpStream) {
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "could not set TCP_NODELAY on an accepted connection");
        }
    }
    axum::serve::ListenerExt::tap_io(listener, set as fn(&mut tokio::net::TcpStream))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Req {
        a: u32,
        b: Option<Vec<i32>>,
    }

    #[test]
    fn errors_name_the_field() {
        let cases: &[(&str, &str, Option<&str>)] = &[
            ("{", "malformed_json", None),
            ("", "malformed_json", None),
            (r#"{"b":[1]}"#, "invalid_field", Some("a")),
            (r#"{"a":1,"c":2}"#, "invalid_field", Some("c")),
            (r#"{"a":-1}"#, "invalid_field", Some("a")),
            (r#"{"a":1,"b":[1,"x"]}"#, "invalid_field", Some("b[1]")),
            ("[1]", "malformed_json", None),
            ("   ", "malformed_json", None),
            (r#"{"a":1} trailing"#, "malformed_json", None),
            (r#"{"a":1}{"a":2}"#, "malformed_json", None),
            (r#"{"a":"x"}"#, "invalid_field", Some("a")),
            ("{not json", "malformed_json", None),
            (r#"{"a":1,"":2}"#, "invalid_field", Some(r#""""#)),
        ];
        for (body, code, field) in cases {
            let e = parse_json::<Req>(body.as_bytes()).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{body}");
            assert_eq!(e.body.error, *code, "{body}");
            assert_eq!(e.body.field.as_deref(), *field, "{body}: {}", e.body.message);
        }
        assert!(parse_json::<Req>(br#"{"a":1}"#).is_ok());
    }

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Q {
        canvas: String,
        #[serde(default)]
        since: u64,
    }

    #[test]
    fn query_errors_name_the_parameter() {
        let q: Q = parse_query("canvas=a%2Db&since=4").unwrap();
        assert_eq!((q.canvas.as_str(), q.since), ("a-b", 4));
        assert_eq!(parse_query::<Q>("canvas=c").unwrap().since, 0);
        for (raw, field) in [("since=1", "canvas"), ("canvas=c&since=-1", "since"), ("canvas=c&since=x", "since"), ("", "canvas")] {
            let e = parse_query::<Q>(raw).unwrap_err();
            assert_eq!(e.body.field.as_deref(), Some(field), "{raw}: {}", e.body.message);
        }
    }

    #[test]
    fn unavailable_sets_retry_after() {
        let resp = ApiError::unavailable("not_ready", "m", 2).into_response();
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(resp.headers()[header::RETRY_AFTER], "2");
    }
}

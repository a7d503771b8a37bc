//! HTTP API of the publisher.
//!
//! | method and path | answer |
//! |---|---|
//! | `POST /canvases/{id}/pixels` `{"x","y","color"}` | `201 {"canvas","version","partition","offset"}` after Kafka's ack |
//! | `GET /canvases/{id}` | `200 {"canvas","version","hash"}` |
//! | `GET /health` | `200 {"ready","canvases","partitions"}` |
//!
//! Errors are `{"error","message","field"?}`: 400 for bad input (naming the field), 404 for an
//! unknown path, 413 for a body over 4 KiB, 503 with `Retry-After` while the heads are rebuilt or
//! when Kafka did not acknowledge.

use crate::log::EventLog;
use crate::versions::{PublishError, Versions};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use shared::api::ErrorBody;
use shared::{CanvasId, Color};
use std::sync::Arc;

/// Largest accepted request body (bytes); larger gets 413.
pub const MAX_BODY_BYTES: usize = 4096;
/// `Retry-After` of a 503, seconds.
pub const RETRY_AFTER_SECS: u64 = 1;

/// Body of `POST /canvases/{id}/pixels`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PixelRequest {
    pub x: u32,
    pub y: u32,
    pub color: Color,
}

/// Every error answer of this API.
#[derive(Debug)]
pub enum ApiError {
    /// 400 `invalid_field` naming the field.
    Field { field: String, message: String },
    /// 400 `malformed_json`.
    Malformed(String),
    /// 413 `body_too_large`.
    TooLarge,
    /// 404 `not_found`.
    NotFound,
    /// 503 `not_ready` / `kafka_unavailable`, with `Retry-After`.
    Unavailable { code: &'static str, message: String },
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, error, message, field) = match self {
            ApiError::Field { field, message } => (StatusCode::BAD_REQUEST, "invalid_field", message, Some(field)),
            ApiError::Malformed(m) => (StatusCode::BAD_REQUEST, "malformed_json", m, None),
            ApiError::TooLarge => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                format!("request body is larger than {MAX_BODY_BYTES} bytes"),
                None,
            ),
            ApiError::NotFound => (StatusCode::NOT_FOUND, "not_found", "no such route".to_owned(), None),
            ApiError::Unavailable { code, message } => {
                let body = ErrorBody { error: code.into(), message, field: None };
                return (
                    StatusCode::SERVICE_UNAVAILABLE,
                    [(header::RETRY_AFTER, RETRY_AFTER_SECS.to_string())],
                    Json(body),
                )
                    .into_response();
            }
        };
        (status, Json(ErrorBody { error: error.into(), message, field })).into_response()
    }
}

impl From<PublishError> for ApiError {
    fn from(e: PublishError) -> Self {
        match e {
            PublishError::NotReady => ApiError::Unavailable { code: "not_ready", message: e.to_string() },
            PublishError::Kafka(_) => ApiError::Unavailable {
                code: "kafka_unavailable",
                message: "kafka did not acknowledge the event; nothing was applied, retry".into(),
            },
            PublishError::OutOfBounds { field, .. } => ApiError::Field { field: field.into(), message: e.to_string() },
        }
    }
}

fn canvas_id(raw: &str) -> Result<CanvasId, ApiError> {
    CanvasId::parse(raw).map_err(|e| ApiError::Field { field: "canvas".into(), message: e.to_string() })
}

/// Parses a pixel request, naming the field at fault.
///
/// # Errors
/// [`ApiError::Malformed`] when the body is not JSON, [`ApiError::Field`] for a missing, unknown
/// or badly typed field.
pub fn parse_pixel(body: &[u8]) -> Result<PixelRequest, ApiError> {
    let de = &mut serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize::<_, PixelRequest>(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let msg = inner.to_string();
        if inner.is_syntax() || inner.is_eof() {
            return ApiError::Malformed(msg);
        }
        // serde names missing and unknown fields in its message; other errors carry a path.
        let field = if path != "." {
            path
        } else if let Some(name) = msg.split('`').nth(1).filter(|_| msg.starts_with("missing field") || msg.starts_with("unknown field")) {
            name.to_owned()
        } else {
            "body".to_owned()
        };
        ApiError::Field { field, message: msg }
    })
}

async fn post_pixel<L: EventLog>(
    State(v): State<Arc<Versions<L>>>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body.map_err(|r| match r {
        BytesRejection::FailedToBufferBody(_) => ApiError::TooLarge,
        other => ApiError::Malformed(other.body_text()),
    })?;
    let canvas = canvas_id(&id)?;
    let req = parse_pixel(&body)?;
    let published = v.publish(&canvas, req.x, req.y, req.color).await?;
    Ok((StatusCode::CREATED, Json(published)).into_response())
}

async fn get_canvas<L: EventLog>(State(v): State<Arc<Versions<L>>>, Path(id): Path<String>) -> Result<Response, ApiError> {
    let canvas = canvas_id(&id)?;
    Ok(Json(v.truth(&canvas).await?).into_response())
}

async fn health<L: EventLog>(State(v): State<Arc<Versions<L>>>) -> Response {
    Json(serde_json::json!({
        "ready": v.is_ready(),
        "canvases": v.canvas_count(),
        "partitions": v.partitions(),
        "width": v.dims().width,
        "height": v.dims().height,
    }))
    .into_response()
}

/// The publisher's router over `versions`.
pub fn router<L: EventLog>(versions: Arc<Versions<L>>) -> Router {
    Router::new()
        .route("/canvases/{id}/pixels", post(post_pixel::<L>))
        .route("/canvases/{id}", get(get_canvas::<L>))
        .route("/health", get(health::<L>))
        .fallback(|| async { ApiError::NotFound })
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(versions)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::fake::{Fate, FakeLog};
    use axum::body::Body;
    use axum::http::Request;
    use http_body_util::BodyExt;
    use shared::CanvasDims;
    use tower::ServiceExt;

    async fn make_app(fate: Fate, rebuilt: bool) -> (Router, Arc<Versions<FakeLog>>) {
        let v = Arc::new(Versions::new(FakeLog::new(6, move |_| fate), CanvasDims::default(), 6));
        if rebuilt {
            v.rebuild().await.unwrap();
        }
        (router(v.clone()), v)
    }

    async fn call(app: &Router, method: &str, uri: &str, body: impl Into<Body>) -> (StatusCode, serde_json::Value, Option<String>) {
        let req = Request::builder()
            .method(method)
            .uri(uri)
            .header("content-type", "application/json")
            .body(body.into())
            .unwrap();
        let resp = app.clone().oneshot(req).await.unwrap();
        let status = resp.status();
        let retry = resp.headers().get(header::RETRY_AFTER).map(|v| v.to_str().unwrap().to_owned());
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        let json = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
        (status, json, retry)
    }

    #[tokio::test]
    async fn publish_returns_201_with_version_partition_offset() {
        let (app, v) = make_app(Fate::Ok, true).await;
        let (s, j, _) = call(&app, "POST", "/canvases/c1/pixels", r##"{"x":1,"y":2,"color":"#FF0000"}"##).await;
        assert_eq!(s, StatusCode::CREATED);
        assert_eq!(j["canvas"], "c1");
        assert_eq!(j["version"], 1);
        assert_eq!(j["partition"], v.partition_of(&CanvasId::parse("c1").unwrap()));
        assert_eq!(j["offset"], 0);
        let (s, j, _) = call(&app, "GET", "/canvases/c1", Body::empty()).await;
        assert_eq!(s, StatusCode::OK);
        assert_eq!(j["version"], 1);
        assert_eq!(j["hash"].as_str().unwrap().len(), 64);
    }

    /// Each bad request: (path, body, status, error code, field named). Nothing may be published.
    #[tokio::test]
    async fn bad_input_is_rejected_naming_the_field_and_nothing_is_published() {
        let (app, v) = make_app(Fate::Ok, true).await;
        let big = format!(r##"{{"x":1,"y":1,"color":"#000000","pad":"{}"}}"##, "a".repeat(5000));
        let cases: Vec<(&str, String, StatusCode, &str, Option<&str>)> = vec![
            ("/canvases/bad%20id/pixels", r##"{"x":1,"y":1,"color":"#000000"}"##.into(), StatusCode::BAD_REQUEST, "invalid_field", Some("canvas")),
            ("/canvases/c1/pixels", r##"{"x":64,"y":1,"color":"#000000"}"##.into(), StatusCode::BAD_REQUEST, "invalid_field", Some("x")),
            ("/canvases/c1/pixels", r##"{"x":1,"y":99,"color":"#000000"}"##.into(), StatusCode::BAD_REQUEST, "invalid_field", Some("y")),
            ("/canvases/c1/pixels", r##"{"x":-1,"y":1,"color":"#000000"}"##.into(), StatusCode::BAD_REQUEST, "invalid_field", Some("x")),
            ("/canvases/c1/pixels", r##"{"x":1,"y":1,"color":"red"}"##.into(), StatusCode::BAD_REQUEST, "invalid_field", Some("color")),
            ("/canvases/c1/pixels", r##"{"x":1,"y":1,"color":"#000000","z":3}"##.into(), StatusCode::BAD_REQUEST, "invalid_field", Some("z")),
            ("/canvases/c1/pixels", r##"{"x":1,"color":"#000000"}"##.into(), StatusCode::BAD_REQUEST, "invalid_field", Some("y")),
            ("/canvases/c1/pixels", "{not json".into(), StatusCode::BAD_REQUEST, "malformed_json", None),
            ("/canvases/c1/pixels", "".into(), StatusCode::BAD_REQUEST, "malformed_json", None),
            ("/canvases/c1/pixels", big, StatusCode::PAYLOAD_TOO_LARGE, "body_too_large", None),
        ];
        for (path, body, status, code, field) in cases {
            let (s, j, _) = call(&app, "POST", path, body.clone()).await;
            assert_eq!(s, status, "{path} {body:.60}: {j}");
            assert_eq!(j["error"], code, "{path} {body:.60}");
            assert_eq!(j["field"].as_str(), field, "{path} {body:.60}: {j}");
            assert!(!j["message"].as_str().unwrap().is_empty());
        }
        assert_eq!(v.canvas_count(), 0, "a rejected request created a canvas head");
        assert!(v.log.events_of("c1").is_empty());
    }

    #[tokio::test]
    async fn not_ready_and_kafka_failures_are_503_with_retry_after() {
        let (app, _) = make_app(Fate::Ok, false).await;
        let (s, j, retry) = call(&app, "POST", "/canvases/c1/pixels", r##"{"x":1,"y":1,"color":"#000000"}"##).await;
        assert_eq!((s, j["error"].as_str(), retry.as_deref()), (StatusCode::SERVICE_UNAVAILABLE, Some("not_ready"), Some("1")));
        let (app, _) = make_app(Fate::FailNotWritten, true).await;
        let (s, j, retry) = call(&app, "POST", "/canvases/c1/pixels", r##"{"x":1,"y":1,"color":"#000000"}"##).await;
        assert_eq!((s, j["error"].as_str(), retry.as_deref()), (StatusCode::SERVICE_UNAVAILABLE, Some("kafka_unavailable"), Some("1")));
    }

    #[tokio::test]
    async fn unknown_routes_get_a_json_404() {
        let (app, _) = make_app(Fate::Ok, true).await;
        let (s, j, _) = call(&app, "GET", "/nope", Body::empty()).await;
        assert_eq!((s, j["error"].as_str()), (StatusCode::NOT_FOUND, Some("not_found")));
    }
}

//! HTTP API of the publisher.
//!
//! | method and path | answer |
//! |---|---|
//! | `POST /canvases/{id}/pixels` `{"x","y","color"}` | `201 {"canvas","version","partition","offset"}` after Kafka's ack |
//! | `GET /canvases/{id}` | `200 {"canvas","version","hash"}` |
//! | `GET /health` | `200 {"ready","canvases","partitions","width","height"}` (always 200 while the process answers) |
//! | `GET /ready` | `200 {"ready":true}` once writes are accepted, else `503` + `Retry-After` (for container health checks and readiness probes) |
//!
//! Errors are `{"error","message","field"?}`: 400 for bad input (naming the field), 404 for an
//! unknown path, 409 for a reused `Idempotency-Key`, 413 for a body over 4 KiB, 415 for a body
//! that is not declared JSON, 503 with `Retry-After` while the heads are rebuilt or when Kafka did
//! not acknowledge (`kafka_unavailable`: nothing applied; `kafka_outcome_unknown`: retry with the
//! same `Idempotency-Key`).

use crate::log::EventLog;
use crate::versions::{PublishError, Versions};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use shared::http::{method_not_allowed, parse_json, ApiError, CanvasPath, JsonBody};
use shared::Color;
use std::sync::Arc;

pub use shared::http::MAX_BODY_BYTES;
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

fn publish_error(e: PublishError) -> ApiError {
    match e {
        PublishError::NotReady => ApiError::unavailable("not_ready", e.to_string(), RETRY_AFTER_SECS),
        PublishError::NotWritten(_) => ApiError::unavailable(
            "kafka_unavailable",
            "kafka did not write the event; nothing was applied, retry",
            RETRY_AFTER_SECS,
        ),
        PublishError::Unknown(_) => ApiError::unavailable(
            "kafka_outcome_unknown",
            "kafka did not acknowledge in time: the event may or may not have been applied; retry with the same \
             Idempotency-Key to apply it exactly once (GET /canvases/{id} shows the head)",
            RETRY_AFTER_SECS,
        ),
        PublishError::KeyConflict => ApiError::conflict("idempotency_key_conflict", e.to_string()),
        PublishError::KeyInFlight => {
            let mut a = ApiError::conflict("idempotency_key_in_flight", e.to_string());
            a.retry_after_secs = Some(RETRY_AFTER_SECS);
            a
        }
        PublishError::OutOfBounds { field, .. } => ApiError::field(field, e.to_string()),
    }
}

/// Header of a retry-safe publish (`Idempotency-Key`, 1–128 visible ASCII characters).
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
/// Response header set to `true` when the answer is the replay of an earlier request.
pub const REPLAYED: &str = "idempotent-replayed";

async fn post_pixel<L: EventLog>(
    State(v): State<Arc<Versions<L>>>,
    CanvasPath(canvas): CanvasPath,
    headers: HeaderMap,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let req: PixelRequest = parse_json(&body)?;
    let key = match headers.get(IDEMPOTENCY_KEY) {
        None => None,
        Some(v) => {
            let k = v.to_str().map_err(|_| ApiError::field("Idempotency-Key", "not visible ASCII"))?;
            if let Some(problem) = crate::idempotency::key_problem(k) {
                return Err(ApiError::field("Idempotency-Key", problem));
            }
            Some(k.to_owned())
        }
    };
    let (published, replayed) =
        v.publish_with_key(&canvas, req.x, req.y, req.color, key.as_deref()).await.map_err(publish_error)?;
    let mut resp = (StatusCode::CREATED, Json(published)).into_response();
    if replayed {
        resp.headers_mut().insert(REPLAYED, axum::http::HeaderValue::from_static("true"));
    }
    Ok(resp)
}

async fn get_canvas<L: EventLog>(State(v): State<Arc<Versions<L>>>, CanvasPath(canvas): CanvasPath) -> Result<Response, ApiError> {
    Ok(Json(v.truth(&canvas).await.map_err(publish_error)?).into_response())
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

async fn ready<L: EventLog>(State(v): State<Arc<Versions<L>>>) -> Result<Response, ApiError> {
    if v.is_ready() {
        Ok(Json(serde_json::json!({"ready": true})).into_response())
    } else {
        Err(ApiError::unavailable("not_ready", "the publisher is preparing the topic or rebuilding canvas versions", RETRY_AFTER_SECS))
    }
}

/// The publisher's router over `versions`.
pub fn router<L: EventLog>(versions: Arc<Versions<L>>) -> Router {
    Router::new()
        .route("/canvases/{id}/pixels", post(post_pixel::<L>))
        .route("/canvases/{id}", get(get_canvas::<L>))
        .route("/health", get(health::<L>))
        .route("/ready", get(ready::<L>))
        .fallback(|| async { ApiError::not_found("no such route") })
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(versions)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::fake::{Fate, FakeLog};
    use axum::body::Body;
    use axum::http::{header, Request};
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
        assert_eq!(j["partition"], v.partition_of(&shared::CanvasId::parse("c1").unwrap()));
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
            ("/canvases/c1/pixels", r##"{"x":1,"y":1,"color":"#000000"} trailing"##.into(), StatusCode::BAD_REQUEST, "malformed_json", None),
            ("/canvases/c1/pixels", r##"[1,1,"#000000"]"##.into(), StatusCode::BAD_REQUEST, "malformed_json", None),
            ("/canvases/%FF/pixels", r##"{"x":1,"y":1,"color":"#000000"}"##.into(), StatusCode::BAD_REQUEST, "invalid_path", None),
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
    async fn ready_is_503_until_the_heads_are_rebuilt() {
        let (app, v) = make_app(Fate::Ok, false).await;
        let (s, j, retry) = call(&app, "GET", "/ready", Body::empty()).await;
        assert_eq!((s, j["error"].as_str(), retry.as_deref()), (StatusCode::SERVICE_UNAVAILABLE, Some("not_ready"), Some("1")));
        v.rebuild().await.unwrap();
        let (s, j, _) = call(&app, "GET", "/ready", Body::empty()).await;
        assert_eq!((s, j["ready"].as_bool()), (StatusCode::OK, Some(true)));
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
    async fn idempotency_keys_replay_the_first_answer_and_refuse_other_requests() {
        let (app, v) = make_app(Fate::Ok, true).await;
        let post = |key: &'static str, body: &'static str| {
            Request::builder()
                .method("POST")
                .uri("/canvases/c1/pixels")
                .header("content-type", "application/json")
                .header("idempotency-key", key)
                .body(Body::from(body))
                .unwrap()
        };
        let first = app.clone().oneshot(post("k1", r##"{"x":1,"y":1,"color":"#000000"}"##)).await.unwrap();
        assert_eq!(first.status(), StatusCode::CREATED);
        assert!(first.headers().get(REPLAYED).is_none());
        let again = app.clone().oneshot(post("k1", r##"{"x":1,"y":1,"color":"#000000"}"##)).await.unwrap();
        assert_eq!(again.status(), StatusCode::CREATED);
        assert_eq!(again.headers()[REPLAYED], "true");
        let other = app.clone().oneshot(post("k1", r##"{"x":2,"y":1,"color":"#000000"}"##)).await.unwrap();
        assert_eq!(other.status(), StatusCode::CONFLICT);
        let bad = app.clone().oneshot(post("has space", r##"{"x":1,"y":1,"color":"#000000"}"##)).await.unwrap();
        assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
        assert_eq!(v.log.events_of("c1"), vec![1], "one write for one key");
    }

    #[tokio::test]
    async fn unknown_routes_methods_and_types_get_json_errors() {
        let (app, v) = make_app(Fate::Ok, true).await;
        let (s, j, _) = call(&app, "GET", "/nope", Body::empty()).await;
        assert_eq!((s, j["error"].as_str()), (StatusCode::NOT_FOUND, Some("not_found")));
        let (s, j, _) = call(&app, "DELETE", "/canvases/c1", Body::empty()).await;
        assert_eq!((s, j["error"].as_str()), (StatusCode::METHOD_NOT_ALLOWED, Some("method_not_allowed")));
        let req = Request::builder()
            .method("POST")
            .uri("/canvases/c1/pixels")
            .header("content-type", "text/plain")
            .body(Body::from(r##"{"x":1,"y":1,"color":"#000000"}"##))
            .unwrap();
        let resp = app.clone().oneshot(req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
        assert!(v.log.events_of("c1").is_empty());
    }
}

//! HTTP API of the publisher.
//!
//! | method and path | answer |
//! |---|---|
//! | `POST /canvases/{id}/pixels` `{"x","y","color"}` | `201 {"canvas","version","partition","offset"}` after Kafka's ack |
//! | `POST /pixels` `{"events":[{"canvas","x","y","color","idempotency_key"?}, …]}` (1–1,000 events) | `200 {"results":[…]}`, one result per event in order: `{"status":201,"canvas","version","partition","offset","replayed"}` or `{"status":4xx/503,"error","message","field"?}` |
//! | `GET /canvases/{id}` | `200 {"canvas","version","hash"}` |
//! | `GET /health` | `200 {"ready","state","role","start_error","in_doubt_partitions","partition_writers","transactions","snapshots","channels","channel_limit","partitions","width","height","namespaces_fingerprint"}` (and, deprecated, the names before channels with equal values: `canvases`, `canvas_limit`, `uncovered_canvases`, `incomplete_canvases`; always 200 while the process answers; `state`: `preparing`, `ready`, `fenced` or `failed`; `role`: `active`, `standby` or `promoting` ([`crate::role`]); `start_error`: why the last start attempt failed, until one succeeds, else null (another producer's transaction open on a partition is named there with its offsets); `partition_writers`: each partition's `mode` (`shared` or `isolated`) and `activity`; `transactions`: `{"committed","events","records","not_committed","in_doubt","isolations","snapshots"}` since start; `snapshots`: `{"uncovered_channels","incomplete_channels"}`, the channels with events no snapshot covers yet, and the channels whose early versions are gone from the log with no snapshot covering them, an error to act on; `channels`: the channels with a publication; `channel_limit`: `{"max_channels","near"}` (`MAX_CHANNELS`, and whether `channels` is at 90 % of it); `namespaces_fingerprint`: the 16 hex digits of [`Namespaces::fingerprint`], the same in every binary of a fleet; `input`: null without `INPUT_TOPICS`, else `{"topics","published","skipped","skipped_by_reason","last_skipped","assignment","partitions":[{"topic","partition","committed","read_to","queued","in_transaction"}],"held_records","held_bytes","paused"}`, see [`crate::input`]) |
//! | `GET /metrics` | `200` Prometheus exposition ([`crate::metrics`]) |
//! | `GET /livez` | `200 {"status":"alive"}` whenever the process answers (liveness probes; [`shared::probe`]) |
//! | `GET /readyz`, `GET /ready` (the same) | `200 {"status":"ready","ready":true}` once writes are accepted, else `503` + `Retry-After` (`not_ready`, its message naming why the last start attempt failed, `standby` while a standby follows the log, or `fenced` once another publisher took over; for container health checks, readiness probes and the gateway) |
//!
//! With client tokens required (`CLIENT_TOKEN_*`, [`shared::client_token`]) both publishes need
//! `Authorization: Bearer <jwt>` allowing `publish` on the channel (on every event's channel for a
//! batch): 401 without a valid token, 403 when it does not allow one of the channels (nothing of
//! the batch is published then).
//!
//! Errors are `{"error","message","field"?}`: 400 for bad input (naming the field), 404 for an
//! unknown path, 409 for a reused `Idempotency-Key`, 413 for a body over 4 KiB (512 KiB for a
//! batch), 415 for a body that is not declared JSON, 503 with `Retry-After` when nothing can be
//! written now: `not_ready` (starting), `standby` (a standby until promoted: send it to the active
//! publisher), `fenced` (another publisher took over: send it there),
//! `kafka_unavailable` (the transaction did not commit: nothing applied, retry),
//! `idempotency_store_full` (a new `Idempotency-Key` while the publisher holds
//! `IDEMPOTENCY_KEYS_MAX` keys younger than the window: nothing applied, retry after
//! `Retry-After`) and `kafka_outcome_unknown` (the commit was not confirmed in time: retry with
//! the same `Idempotency-Key`). Only the last one may have been applied.

use crate::log::EventLog;
use crate::types::PublishError;
use crate::versions::Versions;
use axum::extract::{DefaultBodyLimit, State};
use axum::Extension;
use shared::client_token::{Action, ClientTokens, Grant};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use shared::api::ErrorBody;
use shared::http::{method_not_allowed, parse_json, ApiError, ChannelPath, JsonBody, JsonBodyUpTo};
use shared::{ChannelId, Color};
use std::collections::HashMap;
use std::sync::Arc;

pub use crate::answers::{publish_error, ClientAuth, IDEMPOTENCY_KEY, REPLAYED, RETRY_AFTER_SECS};
use crate::answers::{count_publish, refuse};
pub use shared::http::{MAX_BATCH_BODY_BYTES, MAX_BODY_BYTES};

/// Body of `POST /canvases/{id}/pixels`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PixelRequest {
    pub x: u32,
    pub y: u32,
    pub color: Color,
}

/// Most events one `POST /pixels` takes.
pub const MAX_BATCH_EVENTS: usize = 1000;

/// Body of `POST /pixels`: several publishes in one request, to any channels.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchRequest {
    pub events: Vec<BatchEvent>,
}

/// One event of a [`BatchRequest`]: what `POST /canvases/{id}/pixels` takes, plus the channel and
/// the `Idempotency-Key` as fields.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchEvent {
    pub canvas: ChannelId,
    pub x: u32,
    pub y: u32,
    pub color: Color,
    #[serde(default)]
    pub idempotency_key: Option<String>,
}

/// The answer for one event of a batch: `status` is what `POST /canvases/{id}/pixels` would have
/// answered for it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
pub enum BatchResult {
    Published {
        status: u16,
        #[serde(flatten)]
        published: crate::types::Published,
        /// The answer of an earlier request with the same idempotency key.
        replayed: bool,
    },
    Failed {
        status: u16,
        #[serde(flatten)]
        error: ErrorBody,
    },
}

impl BatchResult {
    fn failed(e: ApiError) -> Self {
        Self::Failed { status: e.status.as_u16(), error: e.body }
    }
}

use shared::rate_limit::PublishLimiter;

/// Checks that `grant` (from [`ClientAuth::grant`]) allows publishing to `channel`.
fn allow(grant: Option<&Grant>, channel: &ChannelId) -> Result<(), ApiError> {
    grant.map_or(Ok(()), |g| g.check(channel.as_str(), Action::Publish).map_err(refuse))
}

async fn post_pixel<L: EventLog>(
    State(v): State<Arc<Versions<L>>>,
    Extension(auth): Extension<ClientAuth>,
    ChannelPath(channel): ChannelPath,
    headers: HeaderMap,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    allow(auth.grant(&headers)?.as_ref(), &channel)?;
    let req: PixelRequest = parse_json(&body)?;
    pixels_dims(v.namespaces(), &channel)?;
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
    // Run to the end even if the client goes away: a publish cut off while Kafka writes its
    // record would leave the channel's head behind the log.
    let task = tokio::spawn(async move { v.publish_with_key(&channel, req.x, req.y, req.color, key.as_deref()).await });
    let (published, replayed) = task
        .await
        .map_err(|e| {
            tracing::error!(error = %e, "a publish task failed");
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "the publish failed; GET /canvases/{id} shows the head")
        })?
        .map_err(publish_error)?;
    let mut resp = (StatusCode::CREATED, Json(published)).into_response();
    if replayed {
        resp.headers_mut().insert(REPLAYED, axum::http::HeaderValue::from_static("true"));
    }
    Ok(resp)
}

/// `POST /pixels`: the events are checked first (any bad one, or an `idempotency_key` used twice:
/// 400 naming it, e.g. `events[3].x`, and nothing is published); then each channel's events are
/// published in their order in the batch, in one transaction with consecutive versions (as group
/// records), and different channels side by side, in a task of their own (a client that goes away
/// does not cut a publish short). If a channel's transaction does not commit, every event of that
/// channel fails alike; an event whose key was used before with another request (409) or is still
/// in flight stops its channel there: the channel's later events are not attempted
/// (`not_attempted`: 503 when the failure was a "not now", else 409), so a channel never gets a
/// later change of the batch without an earlier one. `Retry-After` is set when any event may be
/// retried later (the longest any of them asks for).
async fn post_batch<L: EventLog>(
    State(v): State<Arc<Versions<L>>>,
    Extension(auth): Extension<ClientAuth>,
    headers: HeaderMap,
    JsonBodyUpTo(body): JsonBodyUpTo<MAX_BATCH_BODY_BYTES>,
) -> Result<Response, ApiError> {
    let grant = auth.grant(&headers)?;
    let req: BatchRequest = parse_json(&body)?;
    for e in &req.events {
        allow(grant.as_ref(), &e.canvas)?;
    }
    let spaces = v.namespaces().clone();
    check_batch(&req, |c| pixels_dims(&spaces, c))?;
    if let Some(e) = v.not_writable() {
        return Err(publish_error(e));
    }
    // Run to the end even if the client goes away: a publish cut off while Kafka writes its
    // record would leave the channel's head behind the log.
    let results = tokio::spawn(publish_batch(v.clone(), req.events)).await.map_err(|e| {
        tracing::error!(error = %e, "a batch publish task failed");
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "the batch publish failed; GET /canvases/{id} shows each canvas's head")
    })?;
    let retry = results.iter().filter_map(|(_, retry)| *retry).max();
    for (BatchResult::Published { status, .. } | BatchResult::Failed { status, .. }, _) in &results {
        v.counters().metrics.published("batch", *status);
    }
    let results: Vec<BatchResult> = results.into_iter().map(|(r, _)| r).collect();
    let mut resp = Json(serde_json::json!({ "results": results })).into_response();
    if let Some(secs) = retry {
        resp.headers_mut().insert(axum::http::header::RETRY_AFTER, secs.into());
    }
    Ok(resp)
}

/// The canvas size of `channel`'s namespace, for the pixel routes.
///
/// # Errors
/// 400 `unknown_namespace`, or 400 naming `canvas` when its namespace is not a `pixels` one.
pub fn pixels_dims(spaces: &shared::namespaces::Namespaces, channel: &ChannelId) -> Result<shared::CanvasDims, ApiError> {
    let ns = spaces.of(channel).map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "unknown_namespace", e.to_string()))?;
    ns.dims().ok_or_else(|| {
        ApiError::field("canvas", format!("{channel} is a {} channel: publish to it with POST /channels/{{id}}/publications", ns.kind()))
    })
}

/// Checks a parsed batch against what `POST /pixels` accepts, each canvas of the size
/// `dims_of` gives: 1 to [`MAX_BATCH_EVENTS`] events, every pixel on its canvas, every
/// `idempotency_key` valid and none used twice. Pure, so the fuzz targets and property tests
/// check exactly what the route does.
///
/// # Errors
/// 400 `invalid_field` naming the first event at fault (e.g. `events[3].x`), or `events`; the
/// error `dims_of` gives for an event's channel (its `field` then names the event's `canvas`).
pub fn check_batch(req: &BatchRequest, dims_of: impl Fn(&ChannelId) -> Result<shared::CanvasDims, ApiError>) -> Result<(), ApiError> {
    if req.events.is_empty() {
        return Err(ApiError::field("events", "at least one event is needed"));
    }
    if req.events.len() > MAX_BATCH_EVENTS {
        return Err(ApiError::field("events", format!("at most {MAX_BATCH_EVENTS} events per request")));
    }
    for (i, e) in req.events.iter().enumerate() {
        let dims = dims_of(&e.canvas).map_err(|mut err| {
            err.body.field = Some(format!("events[{i}].canvas"));
            err
        })?;
        if e.x >= dims.width {
            return Err(ApiError::field(format!("events[{i}].x"), format!("x must be below {}", dims.width)));
        }
        if e.y >= dims.height {
            return Err(ApiError::field(format!("events[{i}].y"), format!("y must be below {}", dims.height)));
        }
        if let Some(problem) = e.idempotency_key.as_deref().and_then(crate::idempotency::key_problem) {
            return Err(ApiError::field(format!("events[{i}].idempotency_key"), problem));
        }
    }
    let mut seen_keys: HashMap<&str, usize> = HashMap::new();
    for (i, e) in req.events.iter().enumerate() {
        if let Some(k) = e.idempotency_key.as_deref() {
            if let Some(first) = seen_keys.insert(k, i) {
                return Err(ApiError::field(
                    format!("events[{i}].idempotency_key"),
                    format!("the same Idempotency-Key as events[{first}]: one key names one publish"),
                ));
            }
        }
    }
    Ok(())
}

/// Publishes checked batch `events`: each channel's in one group, channels side by side. Returns
/// each event's result, in request order, and the `Retry-After` it asks for, if any.
async fn publish_batch<L: EventLog>(v: Arc<Versions<L>>, events: Vec<BatchEvent>) -> Vec<(BatchResult, Option<u64>)> {
    let v = &v;
    crate::answers::run_batch(
        &events,
        |e| &e.canvas,
        |channel, group| {
            let pixels: Vec<crate::versions::Pixel<'_>> =
                group.iter().map(|&i| (events[i].x, events[i].y, events[i].color, events[i].idempotency_key.as_deref())).collect();
            async move { v.publish_many(channel, &pixels).await }
        },
        |published, replayed| BatchResult::Published { status: StatusCode::CREATED.as_u16(), published: published.clone(), replayed },
        BatchResult::failed,
        "an earlier event of this canvas in the batch failed; this one was not published (publish it after that one)",
    )
    .await
}

async fn get_canvas<L: EventLog>(State(v): State<Arc<Versions<L>>>, ChannelPath(channel): ChannelPath) -> Result<Response, ApiError> {
    Ok(Json(v.truth(&channel).await.map_err(publish_error)?).into_response())
}

async fn health<L: EventLog>(State(v): State<Arc<Versions<L>>>) -> Response {
    let state = if v.is_fenced() {
        "fenced"
    } else if v.stopped().is_some() {
        "failed"
    } else if v.is_ready() {
        "ready"
    } else {
        "preparing"
    };
    // At 90 % of the limit: time to raise MAX_CHANNELS or to retire channels.
    let near = v.channel_count() as f64 >= 0.9 * v.max_channels() as f64;
    Json(serde_json::json!({
        "ready": v.is_ready(),
        "state": state,
        "role": v.role().as_str(),
        "start_error": v.start_problem(),
        "in_doubt_partitions": v.in_doubt_partitions(),
        "partition_writers": v.partition_reports(),
        "transactions": v.counters().to_json(),
        "input": v.input_report(),
        // Each channel figure also under its name before channels (deprecated: an older reader
        // may ask for it; `shared::renamed`).
        "snapshots": serde_json::json!({
            "uncovered_channels": v.uncovered_channels(),
            "incomplete_channels": v.incomplete_channels(),
            "uncovered_canvases": v.uncovered_channels(),
            "incomplete_canvases": v.incomplete_channels(),
        }),
        "channels": v.channel_count(),
        "canvases": v.channel_count(),
        "channel_limit": serde_json::json!({"max_channels": v.max_channels(), "near": near}),
        "canvas_limit": serde_json::json!({"max_canvases": v.max_channels(), "near": near}),
        "partitions": v.partitions(),
        // The default namespace's canvas size (when it is a pixels one).
        "width": v.namespaces().default_namespace().dims().map(|d| d.width),
        "height": v.namespaces().default_namespace().dims().map(|d| d.height),
        "namespaces_fingerprint": v.namespaces().fingerprint(),
    }))
    .into_response()
}

async fn metrics<L: EventLog>(State(v): State<Arc<Versions<L>>>, headers: HeaderMap) -> Response {
    v.counters().metrics.render(&v.figures(), headers.get(axum::http::header::ACCEPT))
}

/// `GET /readyz` and its alias `GET /ready`: whether writes are accepted.
async fn ready<L: EventLog>(State(v): State<Arc<Versions<L>>>) -> Result<Response, ApiError> {
    if v.is_ready() {
        Ok(shared::probe::ready())
    } else if v.is_fenced() {
        Err(publish_error(PublishError::Fenced))
    } else if let Some(e @ PublishError::Standby) = v.not_writable() {
        Err(publish_error(e))
    } else {
        let promoting = v.role() == crate::role::Role::Promoting;
        let why = shared::kafka::with_recent_client_error(match (v.start_problem(), promoting) {
            (Some(problem), true) => format!("promoted from standby; it cannot take over yet: {problem}"),
            (None, true) => "promoted from standby: fencing the active publisher, then reading the log to its end".to_owned(),
            (Some(problem), false) => format!("the publisher cannot start yet: {problem}"),
            (None, false) => "the publisher is preparing the topic or rebuilding channel versions".to_owned(),
        });
        Err(ApiError::unavailable("not_ready", why, RETRY_AFTER_SECS))
    }
}

/// The publisher's router over `versions`, publishing without client tokens.
pub fn router<L: EventLog>(versions: Arc<Versions<L>>) -> Router {
    router_with(versions, None, Arc::new(PublishLimiter::new(0, 0, Default::default())), None)
}

/// The publisher's router over `versions`; with `tokens`, publishing needs a client token; the
/// publish routes have the rate limit `limiter` (429 `rate_limited`); with `admin`, a channel's
/// reset and delete are served behind it ([`crate::channels_api::admin_routes`]).
pub fn router_with<L: EventLog>(versions: Arc<Versions<L>>, tokens: Option<ClientTokens>, limiter: Arc<PublishLimiter>, admin: Option<shared::auth::AdminToken>) -> Router {
    let limited = || axum::middleware::from_fn_with_state(limiter.clone(), shared::rate_limit::enforce);
    let channel_admin = match admin {
        // The token first (401), then what a page could send (415, 403).
        Some(token) => crate::channels_api::admin_routes::<L>()
            .route_layer(axum::middleware::from_fn_with_state(shared::admin_guard::AdminGuard::Token, shared::admin_guard::guard))
            .route_layer(axum::middleware::from_fn_with_state(token, shared::auth::require_admin)),
        None => crate::channels_api::admin_routes_refused::<L>(),
    };
    Router::new()
        .route(
            "/canvases/{id}/pixels",
            post(post_pixel::<L>).layer(limited()).layer(axum::middleware::from_fn_with_state(versions.clone(), count_publish::<L>)),
        )
        .route("/pixels", post(post_batch::<L>).layer(DefaultBodyLimit::max(MAX_BATCH_BODY_BYTES)).layer(limited()))
        .route("/canvases/{id}", get(get_canvas::<L>))
        .merge(crate::channels_api::routes(versions.clone(), limiter.clone()))
        .merge(channel_admin)
        .route("/health", get(health::<L>))
        .route("/metrics", get(metrics::<L>))
        // The orchestrators' probes ([`shared::probe`]); `/ready` is `/readyz` under its old name.
        .merge(shared::probe::routes(get(ready::<L>)))
        .route("/ready", get(ready::<L>))
        .fallback(|| async { ApiError::not_found("no such route") })
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(Extension(ClientAuth(tokens.map(Arc::new))))
        .with_state(versions)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::fake::{Fate, FakeLog};
    use axum::body::Body;
    use axum::http::{header, Request};
    use http_body_util::BodyExt;
    use shared::namespaces::Namespaces;
    use shared::CanvasDims;
    use tower::ServiceExt;

    // HS256 secrets of at least 32 bytes, as the verifier requires (RFC 7518 §3.2).
    const PUB_SECRET: &str = "publisher-client-token-secret-0123";
    const OTHER_SECRET: &str = "another-client-token-secret-012345";

    fn token(secret: &str, channels: &[&str], allow: &[&str]) -> String {
        let exp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() + 600;
        jsonwebtoken::encode(
            &jsonwebtoken::Header::default(),
            &serde_json::json!({"exp": exp, "canvases": channels, "allow": allow}),
            &jsonwebtoken::EncodingKey::from_secret(secret.as_bytes()),
        )
        .unwrap()
    }

    async fn call_as(app: &Router, uri: &str, body: &str, bearer: Option<&str>) -> (StatusCode, serde_json::Value) {
        let mut req = Request::builder().method("POST").uri(uri).header("content-type", "application/json");
        if let Some(t) = bearer {
            req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
        }
        let resp = app.clone().oneshot(req.body(Body::from(body.to_owned())).unwrap()).await.unwrap();
        let status = resp.status();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        (status, serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null))
    }

    #[tokio::test]
    async fn publishing_needs_a_client_token_for_every_canvas() {
        let (_, v) = make_app(Fate::Commit, true).await;
        let app = router_with(v.clone(), Some(ClientTokens::hs256(PUB_SECRET.as_bytes()).unwrap()), Arc::new(PublishLimiter::new(0, 0, Default::default())), None);
        let one = r##"{"x":1,"y":1,"color":"#ff0000"}"##;
        let batch = r##"{"events":[{"canvas":"c1","x":1,"y":1,"color":"#ff0000"},{"canvas":"d1","x":1,"y":1,"color":"#ff0000"}]}"##;
        let good = token(PUB_SECRET, &["c*", "d1"], &["publish"]);
        let only_c = token(PUB_SECRET, &["c*"], &["publish"]);
        for (uri, body, bearer, status, code) in [
            ("/canvases/c1/pixels", one, None, 401, Some("missing_token")),
            ("/canvases/c1/pixels", one, Some("x.y.z".to_owned()), 401, Some("invalid_token")),
            ("/canvases/c1/pixels", one, Some(token(OTHER_SECRET, &["*"], &["publish"])), 401, Some("invalid_token")),
            ("/canvases/c1/pixels", one, Some(token(PUB_SECRET, &["*"], &["subscribe"])), 403, Some("token_not_allowed")),
            ("/canvases/e1/pixels", one, Some(good.clone()), 403, Some("token_not_allowed")),
            ("/canvases/c1/pixels", one, Some(good.clone()), 201, None),
            ("/pixels", batch, None, 401, Some("missing_token")),
            ("/pixels", batch, Some(only_c.clone()), 403, Some("token_not_allowed")),
            ("/pixels", batch, Some(good.clone()), 200, None),
        ] {
            let (got, json) = call_as(&app, uri, body, bearer.as_deref()).await;
            assert_eq!((got.as_u16(), json["error"].as_str()), (status, code), "{uri} {bearer:?}: {json}");
        }
        // Only the two accepted requests published: c1 at version 2, d1 at 1.
        for (channel, version) in [("c1", 2), ("d1", 1), ("e1", 0)] {
            let (s, j, _) = call(&app, "GET", &format!("/canvases/{channel}"), Body::empty()).await;
            assert_eq!((s, j["version"].as_u64()), (StatusCode::OK, Some(version)), "{channel}: {j}");
        }
    }

    async fn make_app(fate: Fate, rebuilt: bool) -> (Router, Arc<Versions<FakeLog>>) {
        let v = Arc::new(Versions::new(FakeLog::new(6, move |_| fate), CanvasDims::default(), 6, crate::versions::Timings::default()));
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
        let (app, v) = make_app(Fate::Commit, true).await;
        let (s, j, _) = call(&app, "POST", "/canvases/c1/pixels", r##"{"x":1,"y":2,"color":"#FF0000"}"##).await;
        assert_eq!(s, StatusCode::CREATED);
        assert_eq!(j["canvas"], "c1");
        assert_eq!(j["version"], 1);
        assert_eq!(j["partition"], v.partition_of(&shared::ChannelId::parse("c1").unwrap()));
        assert_eq!(j["offset"], 0);
        let (s, j, _) = call(&app, "GET", "/canvases/c1", Body::empty()).await;
        assert_eq!(s, StatusCode::OK);
        assert_eq!(j["version"], 1);
        assert_eq!(j["hash"].as_str().unwrap().len(), 64);
    }

    #[tokio::test]
    async fn a_publish_that_would_create_a_channel_past_the_limit_is_refused() {
        let v = Versions::new(FakeLog::new(6, |_| Fate::Commit), CanvasDims::default(), 6, crate::versions::Timings::default()).with_max_channels(2);
        let v = Arc::new(v);
        v.rebuild().await.unwrap();
        let app = router(v.clone());
        let px = r##"{"x":1,"y":2,"color":"#FF0000"}"##;
        for c in ["c1", "c2"] {
            assert_eq!(call(&app, "POST", &format!("/canvases/{c}/pixels"), px).await.0, StatusCode::CREATED, "{c}");
        }
        let (s, j, _) = call(&app, "POST", "/canvases/c3/pixels", px).await;
        assert_eq!((s, j["error"].as_str()), (StatusCode::CONFLICT, Some("channel_limit")), "{j}");
        assert!(j["message"].as_str().unwrap().contains("MAX_CHANNELS"), "{j}");
        assert_eq!(call(&app, "GET", "/canvases/c3", Body::empty()).await.1["version"], 0, "nothing of c3 was written");
        // Channels that exist keep taking writes.
        let (s, j, _) = call(&app, "POST", "/canvases/c1/pixels", px).await;
        assert_eq!((s, j["version"].as_u64()), (StatusCode::CREATED, Some(2)));
        let (_, h, _) = call(&app, "GET", "/health", Body::empty()).await;
        assert_eq!((h["channels"].as_u64(), h["channel_limit"]["max_channels"].as_u64(), h["channel_limit"]["near"].as_bool()), (Some(2), Some(2), Some(true)), "{h}");
        // The names before channels (deprecated) carry the same values.
        assert_eq!((h["canvases"].as_u64(), h["canvas_limit"]["max_canvases"].as_u64(), h["canvas_limit"]["near"].as_bool()), (Some(2), Some(2), Some(true)), "{h}");
        for (new, old) in [("uncovered_channels", "uncovered_canvases"), ("incomplete_channels", "incomplete_canvases")] {
            assert_eq!(h["snapshots"][new], h["snapshots"][old], "{h}");
            assert!(!h["snapshots"][new].is_null(), "{new}: {h}");
        }
    }

    /// `/health` names the namespaces by their fingerprint: the publisher's, the default
    /// namespace alone (`pixels` of its size) without `fleet.toml`.
    #[tokio::test]
    async fn health_shows_the_namespaces_fingerprint() {
        let (app, v) = make_app(Fate::Commit, true).await;
        let (_, h, _) = call(&app, "GET", "/health", Body::empty()).await;
        assert_eq!(h["namespaces_fingerprint"].as_str(), Some(Namespaces::pixels_only(CanvasDims::default()).fingerprint()), "{h}");
        let ns = Namespaces::from_toml("[namespaces.chat]\nmodel = \"stream\"", CanvasDims::default()).unwrap();
        let w = Arc::new(Versions::new(FakeLog::new(2, |_| Fate::Commit), ns.clone(), 2, crate::versions::Timings::default()));
        let (_, h, _) = call(&router(w), "GET", "/health", Body::empty()).await;
        assert_eq!(h["namespaces_fingerprint"].as_str(), Some(ns.fingerprint()), "{h}");
        assert_eq!(h["width"], v.namespaces().default_namespace().dims().unwrap().width, "the other fields stay");
    }

    /// Each bad request: (path, body, status, error code, field named). Nothing may be published.
    #[tokio::test]
    async fn bad_input_is_rejected_naming_the_field_and_nothing_is_published() {
        let (app, v) = make_app(Fate::Commit, true).await;
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
        assert_eq!(v.channel_count(), 0, "a rejected request created a canvas head");
        assert!(v.log.events_of("c1").is_empty());
    }

    #[tokio::test]
    async fn ready_is_503_until_the_heads_are_rebuilt() {
        let (app, v) = make_app(Fate::Commit, false).await;
        let (s, j, retry) = call(&app, "GET", "/ready", Body::empty()).await;
        assert_eq!((s, j["error"].as_str(), retry.as_deref()), (StatusCode::SERVICE_UNAVAILABLE, Some("not_ready"), Some("1")));
        v.rebuild().await.unwrap();
        let (s, j, _) = call(&app, "GET", "/ready", Body::empty()).await;
        assert_eq!((s, j["ready"].as_bool()), (StatusCode::OK, Some(true)));
    }

    /// A start held by another producer's open transaction says so in `/ready`'s message and in
    /// `/health`'s `start_error`, naming the partition, until the transaction ends.
    #[tokio::test]
    async fn a_start_held_by_an_open_transaction_names_it_in_ready_and_health() {
        let (app, v) = make_app(Fate::Commit, false).await;
        let stray = shared::PixelEvent { canvas: shared::ChannelId::parse("stray").unwrap(), version: 1, x: 0, y: 0, color: shared::Color([9, 9, 9]), published_at_ms: 0 };
        v.log.open_foreign(4, vec![(stray.into(), None)]);
        assert!(v.rebuild().await.is_err());
        let (s, j, _) = call(&app, "GET", "/ready", Body::empty()).await;
        let message = j["message"].as_str().unwrap_or_default();
        assert_eq!((s, j["error"].as_str()), (StatusCode::SERVICE_UNAVAILABLE, Some("not_ready")), "{j}");
        assert!(message.contains("partition 4") && message.contains("last stable offset 0, high watermark 1"), "{j}");
        let (_, h, _) = call(&app, "GET", "/health", Body::empty()).await;
        assert_eq!(h["state"], "preparing", "{h}");
        assert!(h["start_error"].as_str().is_some_and(|e| e.contains("partition 4")), "{h}");
        v.log.end_foreign(4, true);
        v.rebuild().await.expect("ended: the rebuild goes on");
        let (_, h, _) = call(&app, "GET", "/health", Body::empty()).await;
        assert_eq!((h["ready"].as_bool(), h["start_error"].is_null()), (Some(true), true), "{h}");
    }

    /// The orchestrators' probes: `/livez` answers whenever the process does; `/readyz` (and
    /// `/ready`, its alias) is 503 + `Retry-After` with the JSON error until writes are accepted.
    #[tokio::test]
    async fn livez_always_answers_and_readyz_follows_whether_writes_are_accepted() {
        let (app, v) = make_app(Fate::Commit, false).await;
        let (s, j, _) = call(&app, "GET", "/livez", Body::empty()).await;
        assert_eq!((s, j["status"].as_str()), (StatusCode::OK, Some("alive")), "{j}");
        for path in ["/readyz", "/ready"] {
            let (s, j, retry) = call(&app, "GET", path, Body::empty()).await;
            assert_eq!((s, j["error"].as_str(), retry.as_deref()), (StatusCode::SERVICE_UNAVAILABLE, Some("not_ready"), Some("1")), "{path}: {j}");
            assert!(j["message"].as_str().is_some_and(|m| !m.is_empty()), "{path}: {j}");
        }
        v.rebuild().await.unwrap();
        for path in ["/livez", "/readyz", "/ready"] {
            let (s, j, _) = call(&app, "GET", path, Body::empty()).await;
            assert_eq!(s, StatusCode::OK, "{path}: {j}");
        }
        let (_, j, _) = call(&app, "GET", "/readyz", Body::empty()).await;
        assert_eq!((j["status"].as_str(), j["ready"].as_bool()), (Some("ready"), Some(true)), "{j}");
    }

    #[tokio::test]
    async fn not_ready_and_kafka_failures_are_503_with_retry_after() {
        let (app, _) = make_app(Fate::Commit, false).await;
        let (s, j, retry) = call(&app, "POST", "/canvases/c1/pixels", r##"{"x":1,"y":1,"color":"#000000"}"##).await;
        assert_eq!((s, j["error"].as_str(), retry.as_deref()), (StatusCode::SERVICE_UNAVAILABLE, Some("not_ready"), Some("1")));
        let (app, _) = make_app(Fate::Abort, true).await;
        let (s, j, retry) = call(&app, "POST", "/canvases/c1/pixels", r##"{"x":1,"y":1,"color":"#000000"}"##).await;
        assert_eq!((s, j["error"].as_str(), retry.as_deref()), (StatusCode::SERVICE_UNAVAILABLE, Some("kafka_unavailable"), Some("1")));
    }

    #[tokio::test]
    async fn idempotency_keys_replay_the_first_answer_and_refuse_other_requests() {
        let (app, v) = make_app(Fate::Commit, true).await;
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

    /// Issue 32: with the key store full of keys younger than the window, a new key gets 503
    /// `idempotency_store_full` with `Retry-After` (single and batch), and an applied key still
    /// replays.
    #[tokio::test]
    async fn a_new_key_is_refused_503_while_the_key_store_is_full() {
        let v = Versions::new(FakeLog::new(6, |_| Fate::Commit), CanvasDims::default(), 6, crate::versions::Timings::default()).with_idempotency_keys(2);
        let v = Arc::new(v);
        v.rebuild().await.unwrap();
        let app = router(v.clone());
        let post = |key: &str, body: &'static str| {
            let req = Request::builder()
                .method("POST")
                .uri("/canvases/c1/pixels")
                .header("content-type", "application/json")
                .header("idempotency-key", key)
                .body(Body::from(body))
                .unwrap();
            let app = app.clone();
            async move { app.oneshot(req).await.unwrap() }
        };
        let px = r##"{"x":1,"y":1,"color":"#000000"}"##;
        for k in ["k1", "k2"] {
            assert_eq!(post(k, px).await.status(), StatusCode::CREATED, "{k}");
        }
        let full = post("k3", px).await;
        assert_eq!(full.status(), StatusCode::SERVICE_UNAVAILABLE);
        let retry: u64 = full.headers()[header::RETRY_AFTER].to_str().unwrap().parse().unwrap();
        assert!((599..=601).contains(&retry), "until the oldest key leaves the 600 s window: {retry}");
        let j: serde_json::Value = serde_json::from_slice(&full.into_body().collect().await.unwrap().to_bytes()).unwrap();
        assert_eq!(j["error"], "idempotency_store_full", "{j}");
        let message = j["message"].as_str().unwrap();
        assert!(message.contains("2 idempotency keys") && message.contains("600 s window") && message.contains("IDEMPOTENCY_KEYS_MAX"), "{message}");
        // The applied key is still a replay.
        let again = post("k1", px).await;
        assert_eq!((again.status(), again.headers().get(REPLAYED).map(|h| h.to_str().unwrap().to_owned())), (StatusCode::CREATED, Some("true".into())));
        // In a batch: the refused event and the channel's later ones are 503, with Retry-After.
        let mut keyed = ev("c2", 1);
        keyed["idempotency_key"] = "k4".into();
        let body = serde_json::json!({"events": [ev("c2", 0), keyed, ev("c2", 2), ev("c3", 0)]});
        let (s, j, retry) = call(&app, "POST", "/pixels", body.to_string()).await;
        assert_eq!(s, StatusCode::OK, "{j}");
        let r = j["results"].as_array().unwrap();
        let got: Vec<(Option<u64>, Option<&str>)> = r.iter().map(|r| (r["status"].as_u64(), r["error"].as_str())).collect();
        assert_eq!(got, vec![(Some(201), None), (Some(503), Some("idempotency_store_full")), (Some(503), Some("not_attempted")), (Some(201), None)]);
        assert!(retry.as_deref().is_some_and(|r| (599..=601).contains(&r.parse::<u64>().unwrap())), "{retry:?}");
        assert_eq!(v.log.events_of("c1"), vec![1, 2]);
        assert_eq!(v.log.events_of("c2"), vec![1]);
        let resp = app.clone().oneshot(Request::builder().uri("/metrics").body(Body::empty()).unwrap()).await.unwrap();
        let text = String::from_utf8(resp.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap();
        for line in ["publisher_idempotency_store_full_total 2", "publisher_idempotency_keys 2"] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
    }

    #[tokio::test]
    async fn unknown_routes_methods_and_types_get_json_errors() {
        let (app, v) = make_app(Fate::Commit, true).await;
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

    fn ev(channel: &str, x: u32) -> serde_json::Value {
        serde_json::json!({"canvas": channel, "x": x, "y": 0, "color": "#102030"})
    }

    #[tokio::test]
    async fn a_batch_publishes_each_canvas_in_order_and_answers_in_request_order() {
        let (app, v) = make_app(Fate::Commit, true).await;
        let body = serde_json::json!({"events": [ev("c1", 0), ev("c2", 1), ev("c1", 2), ev("c1", 3), ev("c2", 4)]});
        let (s, j, retry) = call(&app, "POST", "/pixels", body.to_string()).await;
        assert_eq!(s, StatusCode::OK, "{j}");
        assert_eq!(retry, None);
        let got: Vec<(String, u64, u64)> = j["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r["canvas"].as_str().unwrap().to_owned(), r["version"].as_u64().unwrap(), r["status"].as_u64().unwrap()))
            .collect();
        let want: Vec<(String, u64, u64)> =
            [("c1", 1), ("c2", 1), ("c1", 2), ("c1", 3), ("c2", 2)].iter().map(|(c, v)| (c.to_string(), *v, 201)).collect();
        assert_eq!(got, want);
        assert_eq!(v.log.events_of("c1"), vec![1, 2, 3]);
        assert_eq!(v.log.events_of("c2"), vec![1, 2]);
        // Each event is the pixel the request named, at the version answered.
        let xs: Vec<u32> = v.log.committed().into_iter().flatten().filter(|(e, _)| e.channel.as_str() == "c1").map(|(e, _)| e.paint().unwrap().x).collect();
        assert_eq!(xs, vec![0, 2, 3]);
        // The same batch again continues the versions (and a body over the single route's 4 KiB is fine).
        let many: Vec<serde_json::Value> = (0..200).map(|i| ev("c3", i % 64)).collect();
        let (s, j, _) = call(&app, "POST", "/pixels", serde_json::json!({ "events": many }).to_string()).await;
        assert_eq!(s, StatusCode::OK, "{j}");
        assert_eq!(j["results"][199]["version"], 200);
        assert_eq!(v.log.events_of("c3"), (1..=200).collect::<Vec<u64>>());
    }

    #[tokio::test]
    async fn a_canvas_s_events_commit_or_fail_together_and_stop_at_a_reused_key() {
        // Transaction 1 (the batch's c1 events, after c0's) aborts.
        let v = Arc::new(Versions::new(
            FakeLog::new(6, |n| if n == 1 { Fate::Abort } else { Fate::Commit }),
            CanvasDims::default(),
            6,
            crate::versions::Timings::default(),
        ));
        v.rebuild().await.unwrap();
        let app = router(v.clone());
        let (_, j, _) = call(&app, "POST", "/pixels", serde_json::json!({"events": [ev("c0", 0)]}).to_string()).await;
        assert_eq!(j["results"][0]["status"], 201);
        let body = serde_json::json!({"events": [ev("c1", 0), ev("c1", 1), ev("c1", 2)]});
        let (s, j, retry) = call(&app, "POST", "/pixels", body.to_string()).await;
        assert_eq!(s, StatusCode::OK, "{j}");
        assert_eq!(retry.as_deref(), Some("1"), "a 503 inside the batch sets Retry-After");
        for r in j["results"].as_array().unwrap() {
            assert_eq!((r["status"].as_u64(), r["error"].as_str()), (Some(503), Some("kafka_unavailable")), "{r}");
        }
        assert!(v.log.events_of("c1").is_empty(), "nothing of the aborted transaction is in the log");
        // Retrying gives them versions 1..=3, in order.
        let (_, j, _) = call(&app, "POST", "/pixels", body.to_string()).await;
        assert_eq!(j["results"][2]["version"], 3);
        assert_eq!(v.log.events_of("c1"), vec![1, 2, 3]);
        // A key used before with another pixel stops its channel there; other channels go on.
        let mut used = ev("c1", 9);
        used["idempotency_key"] = "k".into();
        call(&app, "POST", "/pixels", serde_json::json!({"events": [used]}).to_string()).await;
        let mut conflict = ev("c1", 10);
        conflict["idempotency_key"] = "k".into();
        let body = serde_json::json!({"events": [ev("c1", 3), conflict, ev("c2", 0), ev("c1", 4)]});
        let (_, j, retry) = call(&app, "POST", "/pixels", body.to_string()).await;
        let r = j["results"].as_array().unwrap();
        assert_eq!((r[0]["status"].as_u64(), r[0]["version"].as_u64()), (Some(201), Some(5)));
        assert_eq!((r[1]["status"].as_u64(), r[1]["error"].as_str()), (Some(409), Some("idempotency_key_conflict")));
        assert_eq!((r[2]["status"].as_u64(), r[2]["version"].as_u64()), (Some(201), Some(1)));
        assert_eq!((r[3]["status"].as_u64(), r[3]["error"].as_str()), (Some(409), Some("not_attempted")));
        assert_eq!(retry, None, "nothing in it is worth retrying as is");
        assert_eq!(v.log.events_of("c1"), vec![1, 2, 3, 4, 5]);
    }

    #[tokio::test]
    async fn a_fenced_publisher_answers_503_fenced_to_writes_and_readiness() {
        let (app, v) = make_app(Fate::Commit, true).await;
        let (s, _, _) = call(&app, "POST", "/canvases/c1/pixels", r##"{"x":1,"y":1,"color":"#000000"}"##).await;
        assert_eq!(s, StatusCode::CREATED);
        let successor = Versions::new(v.log.another_publisher(), CanvasDims::default(), 6, crate::versions::Timings::default());
        successor.rebuild().await.unwrap();
        let (s, j, retry) = call(&app, "POST", "/canvases/c1/pixels", r##"{"x":2,"y":1,"color":"#000000"}"##).await;
        assert_eq!((s, j["error"].as_str(), retry.as_deref()), (StatusCode::SERVICE_UNAVAILABLE, Some("fenced"), Some("1")));
        let (s, j, _) = call(&app, "GET", "/ready", Body::empty()).await;
        assert_eq!((s, j["error"].as_str()), (StatusCode::SERVICE_UNAVAILABLE, Some("fenced")));
        let (s, j, _) = call(&app, "GET", "/health", Body::empty()).await;
        assert_eq!((s, j["state"].as_str(), j["ready"].as_bool()), (StatusCode::OK, Some("fenced"), Some(false)));
        // A whole batch is refused at once, so the gateway may send it to the other publisher.
        let (s, j, _) = call(&app, "POST", "/pixels", serde_json::json!({"events": [ev("c1", 0), ev("c1", 1)]}).to_string()).await;
        assert_eq!((s, j["error"].as_str()), (StatusCode::SERVICE_UNAVAILABLE, Some("fenced")));
        assert_eq!(successor.log.events_of("c1"), vec![1], "the fenced publisher wrote nothing more");
    }

    #[tokio::test]
    async fn a_batch_with_idempotency_keys_applies_each_once() {
        let (app, v) = make_app(Fate::Commit, true).await;
        let mut a = ev("c1", 5);
        a["idempotency_key"] = "k-1".into();
        let body = serde_json::json!({ "events": [a.clone()] }).to_string();
        let (_, first, _) = call(&app, "POST", "/pixels", body.clone()).await;
        assert_eq!(first["results"][0]["replayed"], false);
        let (_, again, _) = call(&app, "POST", "/pixels", body).await;
        assert_eq!(again["results"][0]["replayed"], true);
        assert_eq!(again["results"][0]["version"], first["results"][0]["version"]);
        assert_eq!(v.log.events_of("c1"), vec![1]);
    }

    /// Each bad batch: (body, status, code, field). Nothing of it may be published.
    #[tokio::test]
    async fn a_bad_batch_is_refused_whole_naming_the_event_and_field() {
        let (app, v) = make_app(Fate::Commit, true).await;
        let keyed = |c: &str, k: &str| {
            let mut e = ev(c, 0);
            e["idempotency_key"] = k.into();
            e
        };
        let mut bad_key = ev("c1", 0);
        bad_key["idempotency_key"] = "".into();
        let huge: Vec<serde_json::Value> = (0..1001).map(|i| ev("c1", i % 64)).collect();
        let padded = format!(r##"{{"events":[{}]}}"##, vec![r##"{"canvas":"c1","x":1,"y":1,"color":"#000000"}"##; 12_000].join(","));
        let cases: Vec<(String, StatusCode, &str, Option<&str>)> = vec![
            (serde_json::json!({"events": [ev("c1", 0), ev("c1", 64)]}).to_string(), StatusCode::BAD_REQUEST, "invalid_field", Some("events[1].x")),
            (serde_json::json!({"events": [ev("c1", 0), ev("bad id", 1)]}).to_string(), StatusCode::BAD_REQUEST, "invalid_field", Some("events[1].canvas")),
            (serde_json::json!({"events": [ev("c1", 0), {"canvas":"c1","x":1,"y":1,"color":"#000000","z":1}]}).to_string(), StatusCode::BAD_REQUEST, "invalid_field", Some("events[1].z")),
            (serde_json::json!({"events": [ev("c1", 0), bad_key]}).to_string(), StatusCode::BAD_REQUEST, "invalid_field", Some("events[1].idempotency_key")),
            (serde_json::json!({"events": [keyed("c1", "k"), ev("c1", 1), keyed("c2", "k")]}).to_string(), StatusCode::BAD_REQUEST, "invalid_field", Some("events[2].idempotency_key")),
            (serde_json::json!({"events": []}).to_string(), StatusCode::BAD_REQUEST, "invalid_field", Some("events")),
            (serde_json::json!({"events": huge}).to_string(), StatusCode::BAD_REQUEST, "invalid_field", Some("events")),
            (serde_json::json!({"pixels": []}).to_string(), StatusCode::BAD_REQUEST, "invalid_field", Some("pixels")),
            (padded, StatusCode::PAYLOAD_TOO_LARGE, "body_too_large", None),
            ("{nope".into(), StatusCode::BAD_REQUEST, "malformed_json", None),
        ];
        for (body, status, code, field) in cases {
            let (s, j, _) = call(&app, "POST", "/pixels", body.clone()).await;
            assert_eq!(s, status, "{body:.80}: {j}");
            assert_eq!(j["error"], code, "{body:.80}");
            assert_eq!(j["field"].as_str(), field, "{body:.80}");
        }
        assert!(v.log.events_of("c1").is_empty());
        let (app, _) = make_app(Fate::Commit, false).await;
        let (s, j, retry) = call(&app, "POST", "/pixels", serde_json::json!({"events": [ev("c1", 0)]}).to_string()).await;
        assert_eq!((s, j["error"].as_str(), retry.as_deref()), (StatusCode::SERVICE_UNAVAILABLE, Some("not_ready"), Some("1")));
    }
}

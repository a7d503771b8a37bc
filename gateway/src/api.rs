//! HTTP routes of the gateway.
//!
//! | method and path | answer |
//! |---|---|
//! | `GET /ws?channel=<id>&since=<version>&epoch=<epoch>&refusal=http\|frame` | WebSocket (`channel=<id>`, or `canvas=<id>` for a `pixels` channel in today's `canvas` frames), proxied to the node that owns the channel; when none can serve it: `503` + `Retry-After`, or with `refusal=frame` an `error` frame with `retry_after_ms` and close 1013 (browsers cannot read a refused handshake); a page of a foreign `Origin` ([`shared::origin`]): `403 origin_not_allowed`, or with `refusal=frame` an `error` frame and close 1008 Policy Violation |
//! | `GET /api/fleet` | `200` node states, UP streaks, partitions, sessions, catch-up, the publishers (url, ready, preferred), recent decisions; node and publisher URLs and error texts only with the admin token ([`crate::redaction`]) |
//! | `GET /api/fleet/history?since_ms=<unix ms>` | `200` `{"poll_interval_ms","partition_count","history_ms","samples":[{"at_ms","nodes":[{"id","state","sessions","partitions","records_per_sec"}]}]}`: one sample per scheduled poll over the last 10 minutes, oldest first, only those after `since_ms` when given ([`crate::history`]) |
//! | `POST /api/fleet/nodes/{id}/drain` `{"grace_ms"?}` | `200` the node's drain report (reason `MAINTENANCE`); needs `Authorization: Bearer <ADMIN_TOKEN>` (401); the leader carries it out under its fencing token, a follower forwards it to the leader ([`crate::to_leader`]: `503 no_leader` / `not_leader` + `Retry-After` while leadership moves, `409 not_leader` when it cannot forward, `502 leader_unreachable`) |
//! | `POST /api/channels/{id}/publications`, `POST /api/publications` (batch), `GET /api/channels/{id}`, and the pixels model's `POST /api/canvases/{id}/pixels`, `POST /api/pixels` (batch), `GET /api/canvases/{id}` | forwarded to the publisher that accepts writes (one origin for pages; [`crate::publishers`]), with `X-Forwarded-For`: its answer; the publishes `429 rate_limited` + `Retry-After` over `PUBLISH_RATE_PER_SEC` ([`shared::rate_limit`]); the last `503` + `Retry-After` when every publisher refused (`fenced`, `not_ready`), `503 publisher_unavailable` when none could be reached; `504 publisher_outcome_unknown` when the request went out and no answer came |
//! | `GET /health` | `200` `{"up":true,"fresh":true,"ready",…,"nodes":{id: state},"polled_ms_ago":{id: ms},"namespaces_fingerprint"}` (the last: the gateway's namespaces, [`shared::namespaces::Namespaces::fingerprint`]) while every node was polled within a few intervals ([`crate::health`]); else `503 stale_view` + `Retry-After` with the same fields |
//! | `POST /api/channels/{id}/reset`, `DELETE /api/channels/{id}` | forwarded to the publisher like the publishes; need `Authorization: Bearer <ADMIN_TOKEN>` (401) and are absent without it (404) |
//! | `GET /readyz`, `GET /ready` (the same) | `200` (same body) when the view is fresh and some node serves; else `503 stale_view` or `503 no_node_serving` + `Retry-After` (readiness probes, load balancers) |
//! | `GET /livez` | `200 {"status":"alive"}` whenever the process answers ([`shared::probe`]) |
//! | `GET /metrics` | `200` Prometheus exposition ([`crate::metrics`]) |
//! | `GET /`, `/fleet`, `/assets/{file}`, `/client/{file}` | the live pages and the browser client library ([`crate::assets`]) |
//!
//! With client tokens required ([`shared::client_token`]), `/ws` needs `token=<jwt>` allowing
//! subscribing to the channel: `401`/`403` with the JSON body, or with `refusal=frame` an `error`
//! frame and close 1008 Policy Violation; the token is passed on to the node. Publishes pass the
//! client's `Authorization` header on to the publisher, which checks it.
//!
//! With no `ADMIN_TOKEN` the drain route is absent here (404) and `/api/fleet` is always the
//! redacted one; [`admin_router`] (the loopback `ADMIN_LISTEN_ADDR`) serves both in full. The
//! admin routes refuse what a browser page could send ([`shared::admin_guard`]): a POST not
//! declared `application/json` (415), any `Origin` (403), and on the loopback listener a `Host`
//! that is not loopback (403).

use crate::fleet::Fleet;
use crate::proxy;
use crate::publishers::Forward;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{ConnectInfo, RawQuery, State};
use axum::http::header::{HOST, ORIGIN};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use shared::admin_guard::AdminGuard;
use shared::api::{DEFAULT_GRACE_MS, MAX_GRACE_MS};
use shared::http::{
    method_not_allowed, parse_json, parse_query, ApiError, ChannelPath, JsonBody, JsonBodyUpTo, PathSegment, MAX_BATCH_BODY_BYTES,
    MAX_BODY_BYTES,
};
use shared::protocol::{Refusal, WsQuery};
use std::net::SocketAddr;
use std::sync::Arc;

/// The gateway's public router.
pub fn router(fleet: Arc<Fleet>) -> Router {
    // The publish rate limit per client address, on the forwarded publishes.
    let limited = || axum::middleware::from_fn_with_state(fleet.limiter.clone(), shared::rate_limit::enforce);
    let admin = match fleet.admin_token.clone() {
        // The token first (401), then what a page could send (415, 403).
        Some(token) => Router::new()
            .route("/api/fleet/nodes/{id}/drain", post(drain))
            .route("/api/channels/{id}/reset", post(forward_reset))
            .route("/api/channels/{id}", axum::routing::delete(forward_delete))
            .route_layer(axum::middleware::from_fn_with_state(AdminGuard::Token, shared::admin_guard::guard))
            .route_layer(axum::middleware::from_fn_with_state(token, shared::auth::require_admin)),
        None => Router::new(),
    };
    Router::new()
        .route("/ws", get(ws))
        .route("/api/fleet", get(fleet_state))
        .route("/api/fleet/history", get(fleet_history))
        .merge(admin)
        .route("/api/canvases/{id}/pixels", post(forward_pixel).layer(limited()))
        .route("/api/pixels", post(forward_batch).layer(axum::extract::DefaultBodyLimit::max(MAX_BATCH_BODY_BYTES)).layer(limited()))
        .route("/api/canvases/{id}", get(forward_canvas))
        .route(
            "/api/channels/{id}/publications",
            post(forward_publication).layer(axum::extract::DefaultBodyLimit::max(MAX_PUBLICATION_BODY_BYTES)).layer(limited()),
        )
        .route("/api/publications", post(forward_publications).layer(axum::extract::DefaultBodyLimit::max(MAX_PUBLICATIONS_BODY_BYTES)).layer(limited()))
        .route("/api/channels/{id}", get(forward_channel))
        .route("/health", get(health))
        // The orchestrators' probes ([`shared::probe`]); `/ready` is `/readyz` under its old name.
        .merge(shared::probe::routes(get(ready)))
        .route("/ready", get(ready))
        .route("/metrics", get(metrics))
        .route("/", get(crate::assets::index))
        .route("/fleet", get(crate::assets::fleet))
        .route("/assets/{file}", get(crate::assets::page_asset))
        .route("/client/{file}", get(crate::assets::client_asset))
        .route("/client/models/{file}", get(crate::assets::model_asset))
        .fallback(|| async { ApiError::not_found("no such route") })
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(fleet)
}

/// `?since_ms=` of `GET /api/fleet/history`: only samples taken after it.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct HistoryQuery {
    #[serde(default)]
    since_ms: u64,
}

async fn fleet_history(State(fleet): State<Arc<Fleet>>, RawQuery(raw): RawQuery) -> Result<Response, ApiError> {
    let q: HistoryQuery = parse_query(raw.as_deref().unwrap_or(""))?;
    let samples: Vec<_> = fleet.history().into_iter().filter(|s| s.at_ms > q.since_ms).collect();
    Ok(Json(serde_json::json!({
        "poll_interval_ms": fleet.config.poll_interval_ms,
        "partition_count": fleet.partition_count(),
        "history_ms": crate::history::HISTORY_MS,
        "samples": samples,
    }))
    .into_response())
}

/// The admin routes without a credential, for the loopback admin listener (served when no
/// `ADMIN_TOKEN` is set): the drain and the full `/api/fleet`.
pub fn admin_router(fleet: Arc<Fleet>) -> Router {
    Router::new()
        .route("/api/fleet", get(full_fleet_state))
        .route("/api/fleet/nodes/{id}/drain", post(drain))
        .route_layer(axum::middleware::from_fn_with_state(AdminGuard::Loopback, shared::admin_guard::guard))
        .fallback(|| async { ApiError::not_found("no such route") })
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(fleet)
}

async fn health(State(fleet): State<Arc<Fleet>>) -> Response {
    let (verdict, body) = view_verdict(&fleet);
    if verdict.fresh {
        Json(body).into_response()
    } else {
        let why = format!("the gateway's view of the fleet is stale: no finished poll of {} lately", verdict.stale_nodes.join(", "));
        with_body(ApiError::unavailable("stale_view", why, 1), body)
    }
}

/// `GET /readyz` and its alias `GET /ready`: a fresh view and a node that serves.
async fn ready(State(fleet): State<Arc<Fleet>>) -> Response {
    let (verdict, body) = view_verdict(&fleet);
    if verdict.ready {
        Json(body).into_response()
    } else if !verdict.fresh {
        with_body(ApiError::unavailable("stale_view", "the gateway's view of the fleet is stale", 1), body)
    } else {
        with_body(ApiError::unavailable("no_node_serving", "no node serves sessions right now", 1), body)
    }
}

/// The verdict on the gateway's view, and the body `/health` and `/ready` show:
/// `{"up":true,"fresh","ready","stale_after_ms","nodes":{id: state},"polled_ms_ago":{id: ms|null},"namespaces_fingerprint"}`.
fn view_verdict(fleet: &Fleet) -> (crate::health::Verdict, serde_json::Value) {
    let polls = fleet.poll_ages();
    let stale_after = crate::health::stale_after(fleet.config.poll_interval());
    let verdict = crate::health::judge(&polls, stale_after);
    let nodes: serde_json::Map<String, serde_json::Value> = polls.iter().map(|p| (p.id.clone(), serde_json::json!(p.state))).collect();
    let ages: serde_json::Map<String, serde_json::Value> =
        polls.iter().map(|p| (p.id.clone(), serde_json::json!(p.polled_ago.map(|a| a.as_millis() as u64)))).collect();
    let body = serde_json::json!({
        "up": true,
        "fresh": verdict.fresh,
        "ready": verdict.ready,
        "stale_after_ms": stale_after.as_millis() as u64,
        "nodes": nodes,
        "polled_ms_ago": ages,
        "namespaces_fingerprint": fleet.namespaces.fingerprint(),
    });
    (verdict, body)
}

/// A 503 that carries the view beside the error fields, so a probe sees why.
fn with_body(e: ApiError, view: serde_json::Value) -> Response {
    let mut body = view;
    body["error"] = serde_json::json!(e.body.error);
    body["message"] = serde_json::json!(e.body.message);
    let mut resp = (e.status, Json(body)).into_response();
    if let Some(secs) = e.retry_after_secs {
        resp.headers_mut().insert(axum::http::header::RETRY_AFTER, secs.into());
    }
    resp
}

async fn metrics(State(fleet): State<Arc<Fleet>>, headers: HeaderMap) -> Response {
    fleet.metrics.render(&fleet.figures(), headers.get(axum::http::header::ACCEPT))
}

/// `GET /api/fleet`: in full with the admin token, else without addresses and error texts.
async fn fleet_state(State(fleet): State<Arc<Fleet>>, headers: HeaderMap) -> Response {
    let mut snap = fleet.snapshot();
    if !fleet.admin_token.as_ref().is_some_and(|t| t.admits(&headers)) {
        crate::redaction::redact(&mut snap);
    }
    Json(snap).into_response()
}

async fn full_fleet_state(State(fleet): State<Arc<Fleet>>) -> Response {
    Json(fleet.snapshot()).into_response()
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct DrainBody {
    #[serde(default = "default_grace")]
    grace_ms: u64,
}

fn default_grace() -> u64 {
    DEFAULT_GRACE_MS
}

/// Parses and checks the body of `POST /api/fleet/nodes/{id}/drain`: its grace period in ms (an
/// empty body, or no `grace_ms`, is [`DEFAULT_GRACE_MS`]). Pure, so the fuzz targets and property
/// tests check exactly what the route does.
///
/// # Errors
/// 400 for a body that is not `{"grace_ms"?: <u64>}` or a `grace_ms` over [`MAX_GRACE_MS`].
pub fn check_drain_body(body: &[u8]) -> Result<u64, ApiError> {
    let req: DrainBody = if body.is_empty() { DrainBody { grace_ms: DEFAULT_GRACE_MS } } else { parse_json(body)? };
    if req.grace_ms > MAX_GRACE_MS {
        return Err(ApiError::field("grace_ms", format!("grace_ms must be at most {MAX_GRACE_MS}")));
    }
    Ok(req.grace_ms)
}

async fn drain(State(fleet): State<Arc<Fleet>>, PathSegment(id): PathSegment, headers: HeaderMap, JsonBody(body): JsonBody) -> Result<Response, ApiError> {
    let grace_ms = check_drain_body(&body)?;
    // The leader carries operator requests out under its fencing token; a follower forwards them.
    let forwarded_by = headers.get(crate::to_leader::FORWARDED_BY).and_then(|v| v.to_str().ok());
    let me = fleet.leadership.gateway.as_str();
    match crate::to_leader::route(fleet.leadership.authority(), forwarded_by, fleet.leadership.leader(), me, fleet.admin_token.is_some()) {
        crate::to_leader::Route::Here => {}
        crate::to_leader::Route::Refuse(r) => return Err(r.api_error()),
        crate::to_leader::Route::Forward { leader, url } => {
            let token = fleet.admin_token.clone().expect("route() forwards only with an admin token");
            tracing::info!("[GATEWAY] forwarding the operator's drain of {} to the leader {} at {}", id, leader, url);
            let target = crate::to_leader::target(&url, &["api", "fleet", "nodes", &id, "drain"])
                .map_err(|e| ApiError::conflict("not_leader", format!("the leader {leader} claimed with URL {url:?}, which is not usable ({e}): send the request to it")))?;
            let timeout = std::time::Duration::from_millis(grace_ms) + fleet.config.poll_interval() + std::time::Duration::from_secs(15);
            return Ok(crate::to_leader::forward(fleet.http(), target, body, &token, me, timeout).await);
        }
    }
    match fleet.maintenance_drain(&id, grace_ms).await {
        None => Err(ApiError::not_found(format!("no node {id}"))),
        Some(Ok(report)) => Ok(Json(report).into_response()),
        Some(Err(e)) => Err(e),
    }
}

/// Request headers passed on to the publisher with a forwarded request (`authorization`: the
/// client's token, which the publisher checks).
const FORWARDED_REQUEST_HEADERS: &[&str] = &["idempotency-key", "authorization"];

/// A forwarded request to `path` on the publisher that accepts writes ([`crate::publishers`]),
/// with `X-Forwarded-For`: the incoming one and the peer's address (the publisher's rate limit
/// then sees the client when it trusts the gateway, `TRUSTED_PROXIES`).
fn forward(
    method: reqwest::Method,
    path: String,
    body: Option<axum::body::Bytes>,
    headers: &HeaderMap,
    peer: SocketAddr,
    timeout: std::time::Duration,
) -> Forward {
    let mut out: Vec<_> = FORWARDED_REQUEST_HEADERS.iter().filter_map(|name| Some((*name, headers.get(*name)?.clone()))).collect();
    let incoming = headers.get_all("x-forwarded-for").into_iter().filter_map(|v| v.to_str().ok());
    if let Ok(v) = axum::http::HeaderValue::from_str(&shared::client_addr::forwarded_for(incoming, peer.ip())) {
        out.push(("x-forwarded-for", v));
    }
    Forward { method, path, body, headers: out, timeout }
}

async fn forward_pixel(
    State(fleet): State<Arc<Fleet>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    ChannelPath(canvas): ChannelPath,
    headers: HeaderMap,
    JsonBody(body): JsonBody,
) -> Response {
    let req = forward(reqwest::Method::POST, format!("/canvases/{canvas}/pixels"), Some(body), &headers, peer, fleet.config.publisher_timeout());
    fleet.publishers.forward(&req).await
}

/// `POST /api/pixels`: the batch is checked by the publisher (the body passed on as it came).
async fn forward_batch(
    State(fleet): State<Arc<Fleet>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    JsonBodyUpTo(body): JsonBodyUpTo<MAX_BATCH_BODY_BYTES>,
) -> Response {
    // Only X-Forwarded-For and Authorization of the request's headers go on (a batch carries its
    // keys inside).
    let mut only_xff = HeaderMap::new();
    for v in headers.get_all("x-forwarded-for") {
        only_xff.append("x-forwarded-for", v.clone());
    }
    if let Some(auth) = headers.get(axum::http::header::AUTHORIZATION) {
        only_xff.insert(axum::http::header::AUTHORIZATION, auth.clone());
    }
    let req = forward(reqwest::Method::POST, "/pixels".to_owned(), Some(body), &only_xff, peer, fleet.config.publisher_batch_timeout());
    fleet.publishers.forward(&req).await
}

async fn forward_canvas(State(fleet): State<Arc<Fleet>>, ConnectInfo(peer): ConnectInfo<SocketAddr>, ChannelPath(canvas): ChannelPath) -> Response {
    let req = forward(reqwest::Method::GET, format!("/canvases/{canvas}"), None, &HeaderMap::new(), peer, fleet.config.publisher_timeout());
    fleet.publishers.forward(&req).await
}

/// Largest body of `POST /api/channels/{id}/publications`: the largest data a namespace takes,
/// and room for the envelope (the publisher applies the namespace's own limit).
const MAX_PUBLICATION_BODY_BYTES: usize = shared::namespaces::MAX_DATA_BYTES + 4096;

/// Largest body of `POST /api/publications`.
const MAX_PUBLICATIONS_BODY_BYTES: usize = 4 * 1024 * 1024;

/// `POST /api/channels/{id}/publications`: passed on to the publisher as it came.
async fn forward_publication(
    State(fleet): State<Arc<Fleet>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    ChannelPath(channel): ChannelPath,
    headers: HeaderMap,
    JsonBodyUpTo(body): JsonBodyUpTo<MAX_PUBLICATION_BODY_BYTES>,
) -> Response {
    let req = forward(reqwest::Method::POST, format!("/channels/{channel}/publications"), Some(body), &headers, peer, fleet.config.publisher_timeout());
    fleet.publishers.forward(&req).await
}

/// `POST /api/publications`: a batch over channels, checked by the publisher.
async fn forward_publications(
    State(fleet): State<Arc<Fleet>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    JsonBodyUpTo(body): JsonBodyUpTo<MAX_PUBLICATIONS_BODY_BYTES>,
) -> Response {
    let mut only = HeaderMap::new();
    for v in headers.get_all("x-forwarded-for") {
        only.append("x-forwarded-for", v.clone());
    }
    if let Some(auth) = headers.get(axum::http::header::AUTHORIZATION) {
        only.insert(axum::http::header::AUTHORIZATION, auth.clone());
    }
    let req = forward(reqwest::Method::POST, "/publications".into(), Some(body), &only, peer, fleet.config.publisher_batch_timeout());
    fleet.publishers.forward(&req).await
}

/// `GET /api/channels/{id}`.
async fn forward_channel(State(fleet): State<Arc<Fleet>>, ConnectInfo(peer): ConnectInfo<SocketAddr>, ChannelPath(channel): ChannelPath) -> Response {
    let req = forward(reqwest::Method::GET, format!("/channels/{channel}"), None, &HeaderMap::new(), peer, fleet.config.publisher_timeout());
    fleet.publishers.forward(&req).await
}

/// A channel's reset or delete, forwarded to the publisher that accepts writes with the
/// gateway's own admin token (the caller's was checked here) and an empty JSON body, as the
/// publisher's admin routes want.
fn forward_admin(fleet: &Fleet, method: reqwest::Method, path: String, headers: &HeaderMap, peer: SocketAddr) -> Forward {
    let mut only = HeaderMap::new();
    for v in headers.get_all("x-forwarded-for") {
        only.append("x-forwarded-for", v.clone());
    }
    let mut req = forward(method, path, Some(axum::body::Bytes::from_static(b"{}")), &only, peer, fleet.config.publisher_timeout());
    if let Some(Ok(v)) = fleet.admin_token.as_ref().map(|t| axum::http::HeaderValue::from_str(&format!("Bearer {}", t.expose()))) {
        req.headers.push(("authorization", v));
    }
    req
}

/// `POST /api/channels/{id}/reset` (admin).
async fn forward_reset(State(fleet): State<Arc<Fleet>>, ConnectInfo(peer): ConnectInfo<SocketAddr>, ChannelPath(channel): ChannelPath, headers: HeaderMap) -> Response {
    let req = forward_admin(&fleet, reqwest::Method::POST, format!("/channels/{channel}/reset"), &headers, peer);
    fleet.publishers.forward(&req).await
}

/// `DELETE /api/channels/{id}` (admin).
async fn forward_delete(State(fleet): State<Arc<Fleet>>, ConnectInfo(peer): ConnectInfo<SocketAddr>, ChannelPath(channel): ChannelPath, headers: HeaderMap) -> Response {
    let req = forward_admin(&fleet, reqwest::Method::DELETE, format!("/channels/{channel}"), &headers, peer);
    fleet.publishers.forward(&req).await
}

/// Checks that the channel's namespace is configured and, for today's frames (`canvas=`), that it
/// is a `pixels` one: 400 `unknown_namespace`, or 400 naming `canvas`.
fn check_namespace(namespaces: &shared::namespaces::Namespaces, q: &WsQuery) -> Result<(), ApiError> {
    let ns = namespaces.of(q.id()).map_err(|e| ApiError::new(axum::http::StatusCode::BAD_REQUEST, "unknown_namespace", e.to_string()))?;
    if q.style() == shared::protocol::FrameStyle::Canvas && ns.kind() != shared::model::ModelKind::Pixels {
        return Err(ApiError::field("canvas", format!("canvas= serves pixels channels; {} is a {} channel: use channel=", q.id(), ns.kind())));
    }
    Ok(())
}

/// Parses the `/ws` query (`channel` or `canvas` required and valid, `since` an integer ≥ 0, default 0,
/// `epoch` optional and well-formed; passed on to the node).
#[cfg(test)]
fn parse_ws_query(raw: Option<&str>) -> Result<WsQuery, ApiError> {
    shared::http::parse_ws_query(raw.unwrap_or(""))
}

async fn ws(
    State(fleet): State<Arc<Fleet>>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let opening = shared::http::parse_ws_open(raw.as_deref().unwrap_or(""))?;
    let upgrade = upgrade.map_err(|r| ApiError::bad_request("not_a_websocket", r.body_text()))?;
    let header_str = |name: axum::http::header::HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
    let same = shared::origin::SameOrigin::Allowed;
    if let Err(refused) = shared::origin::check(header_str(ORIGIN), header_str(HOST), &fleet.config.allowed_origins, same) {
        tracing::info!(origin = header_str(ORIGIN).unwrap_or(""), "handshake refused: origin not allowed");
        let refusal = opening.as_ref().map_or(Refusal::Frame, |q| q.refusal);
        return Ok(match refusal {
            Refusal::Frame => proxy::refuse_origin_with_frame(upgrade, refused.0),
            Refusal::Http => ApiError::new(axum::http::StatusCode::FORBIDDEN, "origin_not_allowed", refused.0).into_response(),
        });
    }
    let header = |name: axum::http::header::HeaderName| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    let peer = proxy::Peer { origin: header(axum::http::header::ORIGIN), user_agent: header(axum::http::header::USER_AGENT) };
    let Some(q) = opening else {
        // No channel in the query: the first frame, `subscribe`, names it; its token may come in
        // the query (`token=`) when the frame carries none.
        let query_token: Option<String> = shared::http::parse_query::<WsQuery>(raw.as_deref().unwrap_or("")).ok().and_then(|q| q.token);
        let f = fleet.clone();
        let admit = move |q: &mut WsQuery| {
            if q.token.is_none() {
                q.token = query_token;
            }
            check_namespace(&f.namespaces, q)?;
            if let Some(tokens) = &f.client_tokens {
                tokens.authorize(q.token.as_deref(), q.id().as_str(), shared::client_token::Action::Subscribe).map_err(|e| e.api_error())?;
            }
            Ok(())
        };
        return Ok(proxy::upgrade_subscribing(fleet, upgrade, headers, peer, admit));
    };
    // A channel no node will serve as asked: refused here, for good (not a 503 to retry).
    if let Err(e) = check_namespace(&fleet.namespaces, &q) {
        tracing::info!(channel = %q.id(), code = %e.body.error, "handshake refused: namespace");
        return if q.refusal == Refusal::Frame { Ok(proxy::refuse_for_good_with_frame(upgrade, e)) } else { Err(e) };
    }
    // The client token, when required: checked before an upstream is opened (the node checks
    // it again, and closes the session when it expires).
    if let Some(tokens) = &fleet.client_tokens {
        if let Err(e) = tokens.authorize(q.token.as_deref(), q.id().as_str(), shared::client_token::Action::Subscribe) {
            tracing::info!(channel = %q.id(), code = e.code(), "handshake refused: client token");
            return if q.refusal == Refusal::Frame { Ok(proxy::refuse_token_with_frame(upgrade, e)) } else { Err(e.api_error()) };
        }
    }
    let (upstream, target) = match proxy::connect(&fleet, &q, &headers).await {
        Ok(open) => open,
        Err(refused) if q.refusal == Refusal::Frame => return Ok(proxy::refuse_with_frame(upgrade, refused)),
        Err(refused) => return Err(refused.into()),
    };
    tracing::debug!(channel = %q.id(), since = q.since, epoch = ?q.epoch.as_ref().map(|e| e.as_str()), node = %target.id, "proxying session");
    Ok(proxy::upgrade(fleet, upgrade, upstream, target, peer))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forwards_append_the_peer_to_x_forwarded_for() {
        let mut h = HeaderMap::new();
        h.append("x-forwarded-for", "198.51.100.7".parse().unwrap());
        h.append("x-forwarded-for", "203.0.113.1".parse().unwrap());
        h.insert("idempotency-key", "k1".parse().unwrap());
        let peer: SocketAddr = "10.0.0.1:4000".parse().unwrap();
        let f = forward(reqwest::Method::POST, "/pixels".into(), None, &h, peer, std::time::Duration::from_secs(1));
        let get = |name: &str| f.headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_str().unwrap().to_owned());
        assert_eq!(get("x-forwarded-for").as_deref(), Some("198.51.100.7, 203.0.113.1, 10.0.0.1"));
        assert_eq!(get("idempotency-key").as_deref(), Some("k1"));
        let f = forward(reqwest::Method::GET, "/c".into(), None, &HeaderMap::new(), peer, std::time::Duration::from_secs(1));
        assert_eq!(f.headers.iter().map(|(n, v)| (*n, v.to_str().unwrap())).collect::<Vec<_>>(), [("x-forwarded-for", "10.0.0.1")]);
    }

    #[test]
    fn ws_query_is_validated() {
        let q = parse_ws_query(Some("canvas=c1&since=7")).unwrap();
        assert_eq!((q.id().as_str(), q.since), ("c1", 7));
        let spaces = shared::namespaces::Namespaces::from_toml("[namespaces.chat]\nmodel = \"stream\"", shared::CanvasDims::default()).unwrap();
        let check = |raw: &str| check_namespace(&spaces, &parse_ws_query(Some(raw)).unwrap()).map_err(|e| (e.status.as_u16(), e.body.error, e.body.field));
        assert_eq!(check("channel=chat:a"), Ok(()));
        assert_eq!(check("canvas=c1"), Ok(()));
        assert_eq!(check("channel=nope:a"), Err((400, "unknown_namespace".into(), None)));
        assert_eq!(check("canvas=chat:a"), Err((400, "invalid_field".into(), Some("canvas".into()))));
        for (raw, field) in [("since=1", "channel"), ("channel=a&canvas=a", "canvas"), ("canvas=c1&since=-2", "since"), ("canvas=a%20b", "canvas"), ("canvas=c1&epoch=a%2Fb", "epoch")] {
            assert_eq!(parse_ws_query(Some(raw)).unwrap_err().body.field.as_deref(), Some(field), "{raw}");
        }
    }

    async fn get(app: &Router, path: &str) -> (u16, Option<String>, serde_json::Value) {
        use http_body_util::BodyExt;
        use tower::ServiceExt;
        let req = axum::http::Request::get(path).body(axum::body::Body::empty()).unwrap();
        let resp = app.clone().oneshot(req).await.unwrap();
        let status = resp.status().as_u16();
        let retry = resp.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned());
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (status, retry, serde_json::from_slice(&body).unwrap())
    }

    /// `/health` is 503 until every node was polled and again once the polls stop; `/ready` also
    /// wants a node that serves (none does here: the node's address refuses connections).
    #[tokio::test]
    async fn health_is_503_while_the_view_of_the_fleet_is_stale() {
        use clap::Parser;
        let config = crate::config::Config::try_parse_from([
            "gateway",
            "--nodes",
            "ws-1=http://127.0.0.1:1",
            "--poll-interval-ms",
            "100",
            "--poll-timeout-ms",
            "50",
        ])
        .unwrap();
        let fleet = Fleet::new(config, tokio_util::sync::CancellationToken::new());
        let app = router(fleet.clone());
        let (status, retry, body) = get(&app, "/health").await;
        assert_eq!((status, retry.as_deref()), (503, Some("1")), "never polled: {body}");
        assert_eq!(body["error"], "stale_view");
        assert_eq!(body["fresh"], false);

        fleet.poll(true).await;
        let (status, _, body) = get(&app, "/health").await;
        assert_eq!(status, 200, "a failed poll is a finished poll (the node is known DOWN): {body}");
        assert_eq!(body["nodes"]["ws-1"], "DOWN");
        assert!(body["polled_ms_ago"]["ws-1"].as_u64().is_some(), "{body}");
        let fingerprint = shared::namespaces::Namespaces::pixels_only(shared::CanvasDims { width: 64, height: 64 });
        assert_eq!(body["namespaces_fingerprint"].as_str(), Some(fingerprint.fingerprint()), "no fleet.toml: pixels 64 x 64");
        let (status, _, body) = get(&app, "/ready").await;
        assert_eq!((status, body["error"].as_str()), (503, Some("no_node_serving")), "{body}");

        tokio::time::sleep(std::time::Duration::from_millis(350)).await;
        let (status, _, body) = get(&app, "/health").await;
        assert_eq!(status, 503, "no poll for over three intervals: {body}");
        assert_eq!(body["stale_nodes"], serde_json::Value::Null, "the body is the view, not the verdict's internals");
        let (status, _, body) = get(&app, "/ready").await;
        assert_eq!((status, body["error"].as_str()), (503, Some("stale_view")), "{body}");
    }

    /// A channel's reset and delete are admin routes: 401 without the token, forwarded with it (no
    /// publisher answers here: 503, nothing applied); without an `ADMIN_TOKEN` they are not
    /// routed. `GET /api/channels/{id}` stays public beside them.
    #[tokio::test]
    async fn channel_reset_and_delete_need_the_admin_token() {
        use clap::Parser;
        use http_body_util::BodyExt;
        use tower::ServiceExt;
        let app_with = |token: Option<&str>| {
            let mut args = vec!["gateway", "--nodes", "ws-1=http://127.0.0.1:1", "--publisher-url", "http://127.0.0.1:1"];
            if let Some(t) = token {
                args.extend(["--admin-token", t]);
            }
            router(Fleet::new(crate::config::Config::try_parse_from(args).unwrap(), tokio_util::sync::CancellationToken::new()))
        };
        async fn send(app: Router, method: &'static str, path: &'static str, bearer: Option<&'static str>) -> (u16, String) {
            let mut req = axum::http::Request::builder().method(method).uri(path).header("content-type", "application/json");
            if let Some(b) = bearer {
                req = req.header("authorization", format!("Bearer {b}"));
            }
            let mut req = req.body(axum::body::Body::from("{}")).unwrap();
            req.extensions_mut().insert(ConnectInfo(SocketAddr::from(([127, 0, 0, 1], 9))));
            let resp = app.oneshot(req).await.unwrap();
            let status = resp.status().as_u16();
            let body: serde_json::Value = serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap_or_default();
            (status, body["error"].as_str().unwrap_or("").to_owned())
        }
        let secured = app_with(Some("a-long-enough-admin-token-for-tests"));
        for (method, path) in [("POST", "/api/channels/scores:a/reset"), ("DELETE", "/api/channels/scores:a")] {
            assert_eq!(send(secured.clone(), method, path, None).await.0, 401, "{method} {path}");
            let (status, code) = send(secured.clone(), method, path, Some("a-long-enough-admin-token-for-tests")).await;
            assert_eq!(status, 503, "{method} {path}: forwarded, no publisher answers ({code})");
            assert_eq!(send(app_with(None), method, path, None).await.0 / 100, 4, "{method} {path} without ADMIN_TOKEN");
        }
        assert_eq!(send(secured, "GET", "/api/channels/scores:a", None).await.0, 503, "the public GET is still routed");
    }

    /// `/health` (and `/ready`) name the gateway's namespaces, `fleet.toml`'s, by their fingerprint,
    /// whether the view is fresh or not.
    #[tokio::test]
    async fn health_shows_the_namespaces_fingerprint() {
        use clap::{CommandFactory, Parser};
        let mut config = crate::config::Config::try_parse_from(["gateway", "--nodes", "ws-1=http://127.0.0.1:1"]).unwrap();
        let reader = shared::fleet_config::Reader::new("gateway", "gateway", &crate::config::Config::command(), &[]);
        config.fleet = shared::fleet_config::FleetFile::parse("[namespaces.scores]\nmodel = \"json\"\n", std::path::Path::new("fleet.toml"), &reader);
        let want = config.namespaces().fingerprint().to_owned();
        let app = router(Fleet::new(config, tokio_util::sync::CancellationToken::new()));
        for path in ["/health", "/ready"] {
            let (status, _, body) = get(&app, path).await;
            assert_eq!((status, body["namespaces_fingerprint"].as_str()), (503, Some(want.as_str())), "{path}: {body}");
        }
    }

    /// `/livez` is 200 whatever the view; `/readyz` is `/ready`: 503 + `Retry-After` with the JSON
    /// error while the view is stale (the 200 of a gateway with a node serving: tests/edge.rs).
    #[tokio::test]
    async fn livez_is_200_and_readyz_503_while_the_view_is_stale() {
        use clap::Parser;
        let config = crate::config::Config::try_parse_from(["gateway", "--nodes", "ws-1=http://127.0.0.1:1"]).unwrap();
        let app = router(Fleet::new(config, tokio_util::sync::CancellationToken::new()));
        let (status, _, body) = get(&app, "/livez").await;
        assert_eq!((status, body["status"].as_str()), (200, Some("alive")), "{body}");
        let (status, retry, body) = get(&app, "/readyz").await;
        assert_eq!((status, retry.as_deref(), body["error"].as_str()), (503, Some("1"), Some("stale_view")), "{body}");
        assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()), "{body}");
    }
}

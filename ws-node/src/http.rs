//! HTTP and WebSocket routes of a node.
//!
//! | method and path | answer |
//! |---|---|
//! | `GET /health` | `200` [`shared::api::NodeHealth`], whatever the state (the gateway's poll); its `namespaces_fingerprint` names the node's namespaces ([`shared::namespaces::Namespaces::fingerprint`]) |
//! | `GET /livez` | `200 {"status":"alive"}` whenever the process answers ([`shared::probe`]) |
//! | `GET /readyz` | `200 {"status":"ready","ready":true}` while the node serves (HEALTHY: [`Node::is_ready`]), else `503 not_ready` + `Retry-After` saying why (UP, catching up, DRAINING, DEGRADED) |
//! | `GET /metrics` | `200` Prometheus exposition ([`crate::metrics`]) |
//! | `POST /admin/start-recovery` | `202` [`shared::api::RecoveryAck`] (`started`), `200` when already running or ready, `409` while draining |
//! | `POST /admin/drain` `{"reason","grace_ms"?,"partitions"?}` | `200` [`shared::api::DrainReport`] when the drain is over; `400` bad body; `409` |
//! | `POST /admin/hold` `{"partitions","for_ms"}` | `200` [`shared::api::HoldReport`]: the held ones among `partitions` are kept `for_ms` more; `400` bad body |
//! | `GET /ws?canvas=<id>&since=<version>&epoch=<epoch>&token=<jwt>` | WebSocket upgrade (`epoch` optional: another epoch than the channel's current one is served a snapshot); `503` + `Retry-After` when not ready, draining, not the owner of the channel's partition, the channel incomplete (`channel_incomplete`: versions skipped, until a snapshot heals it), full (`MAX_SESSIONS` seats taken: `full`), or behind the client; `403 origin_not_allowed` for an `Origin` not in `ALLOWED_ORIGINS` (none is fine: the gateway's upstream handshake sends none) |
//!
//! The `/admin/...` routes need `Authorization: Bearer <ADMIN_TOKEN>` (401 otherwise), and once a
//! gateway leader has claimed, its fencing token (409 `fencing_token_required`; [`shared::fence`]). With no
//! `ADMIN_TOKEN` they are not on the public router (404 there) but on [`admin_router`], which
//! [`crate::run`] serves on the loopback `ADMIN_LISTEN_ADDR`. On both, [`shared::admin_guard`]
//! refuses what a browser page could send: a POST not declared `application/json` (415), any
//! `Origin` (403 `origin_not_allowed`), and on the loopback listener a `Host` that is not loopback
//! (403 `host_not_allowed`).

use crate::metrics::{Figures, Metrics};
use crate::node::{DrainError, Node};
use crate::session::{self, Peer, SessionSpec};
use axum::body::Body;
use axum::extract::{RawQuery, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use shared::admin_guard::AdminGuard;
use shared::api::{DrainRequest, HoldRequest, MAX_GRACE_MS, MAX_HOLD_EXTENSION_MS};
use shared::http::{method_not_allowed, parse_json, ApiError, JsonBody, MAX_BODY_BYTES};
use shared::partitioner::partition_for;
use shared::client_token::Action;
use shared::control::Listener;
use shared::protocol::{close, DrainReason, FrameStyle, WsQuery};
use shared::ChannelId;
use std::sync::Arc;
use std::time::Duration;


/// The node's public router: `/health`, the probes, `/metrics` and `/ws`, and the admin routes
/// behind the admin token when one is configured.
pub fn router(node: Arc<Node>) -> Router {
    let metrics = Arc::new(Metrics::new(&node.config.node_id, &node.hub.counters, &node.hub.formats, &node.guard));
    let public = Router::new()
        .route("/health", get(health))
        .merge(shared::probe::routes(get(readyz)))
        .route("/metrics", get(move |State(node): State<Arc<Node>>, headers: HeaderMap| render_metrics(node, metrics.clone(), headers)))
        .route("/ws", get(ws));
    let app = match node.config.admin_token() {
        // The token first (401), then what a page could send (415, 403).
        Some(token) => public.merge(
            admin_routes(&node, Listener::Public, AdminGuard::Token).route_layer(axum::middleware::from_fn_with_state(token, shared::auth::require_admin)),
        ),
        None => public,
    };
    finish(app, node)
}

/// The admin routes alone, without a credential: for the loopback admin listener, served when
/// no `ADMIN_TOKEN` is set.
pub fn admin_router(node: Arc<Node>) -> Router {
    finish(admin_routes(&node, Listener::Loopback, AdminGuard::Loopback), node)
}

/// The admin routes on `listener`, refusing what a browser page could send (`mode`: where they
/// are served).
fn admin_routes(node: &Arc<Node>, listener: Listener, mode: AdminGuard) -> Router<Arc<Node>> {
    Router::new()
        .route("/admin/start-recovery", post(start_recovery))
        .route("/admin/drain", post(drain))
        .route("/admin/hold", post(hold))
        // A deposed leader's token is refused; each decision is carried out once ([`shared::fence`]).
        .route_layer(axum::middleware::from_fn_with_state((node.guard.clone(), listener), shared::fence::guard))
        // Outside the fence: a refused request is no decision, and is not remembered as one.
        .route_layer(axum::middleware::from_fn_with_state(mode, shared::admin_guard::guard))
}

fn finish(routes: Router<Arc<Node>>, node: Arc<Node>) -> Router {
    routes
        .fallback(|| async { ApiError::not_found("no such route") })
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(node)
}

async fn health(State(node): State<Arc<Node>>) -> Response {
    Json(node.health()).into_response()
}

/// `GET /readyz`: 200 while the node serves, else 503 saying why.
async fn readyz(State(node): State<Arc<Node>>) -> Result<Response, ApiError> {
    node.readiness().map_err(shared::probe::not_ready)?;
    Ok(shared::probe::ready())
}

async fn render_metrics(node: Arc<Node>, metrics: Arc<Metrics>, headers: HeaderMap) -> Response {
    let figures = Figures { outbox_frames: node.hub.outbox_frames(), fanout_queue: node.hub.queued_events() };
    metrics.render(&node.health(), figures, headers.get(header::ACCEPT))
}

async fn start_recovery(State(node): State<Arc<Node>>) -> Result<Response, ApiError> {
    let ack = node.start_recovery().map_err(|DrainError::Conflict(why)| ApiError::conflict("draining", why))?;
    let status = if ack.outcome == "started" { StatusCode::ACCEPTED } else { StatusCode::OK };
    Ok((status, Json(ack)).into_response())
}

async fn drain(State(node): State<Arc<Node>>, JsonBody(body): JsonBody) -> Result<Response, ApiError> {
    let req = check_drain(&body, node.partition_count())?;
    let report = node
        .drain(req.reason, Duration::from_millis(req.grace_ms), req.partitions, close::SERVICE_RESTART)
        .await
        .map_err(|DrainError::Conflict(why)| ApiError::conflict("drain_conflict", why))?;
    Ok(Json(report).into_response())
}

/// Parses and checks the body of `POST /admin/drain` on a node whose topic has
/// `partition_count` partitions (0: not read yet). Pure, so the fuzz targets and property tests
/// check exactly what the route does.
///
/// # Errors
/// 400 `invalid_field` for a bad body, a reason that is the node's own (only
/// `FAILBACK_TO_RECOVERED_SERVER`, `MAINTENANCE` and `NODE_DEGRADED` may be asked for), `grace_ms` over
/// [`MAX_GRACE_MS`] or a partition that does not exist; 409 `not_recovered` for `partitions`
/// while the partition count is unknown.
pub fn check_drain(body: &[u8], partition_count: u32) -> Result<DrainRequest, ApiError> {
    let req: DrainRequest = parse_json(body)?;
    if !matches!(req.reason, DrainReason::FailbackToRecoveredServer | DrainReason::Maintenance | DrainReason::NodeDegraded) {
        return Err(ApiError::field(
            "reason",
            format!("{} is the node's own reason; ask for FAILBACK_TO_RECOVERED_SERVER, MAINTENANCE or NODE_DEGRADED", req.reason),
        ));
    }
    if req.grace_ms > MAX_GRACE_MS {
        return Err(ApiError::field("grace_ms", format!("grace_ms must be at most {MAX_GRACE_MS}")));
    }
    if let Some(ps) = &req.partitions {
        let n = i32::try_from(partition_count).unwrap_or(i32::MAX);
        if n == 0 {
            return Err(ApiError::conflict("not_recovered", "the node has not read the topic yet: its partitions are unknown"));
        }
        if let Some(bad) = ps.iter().find(|p| **p < 0 || **p >= n) {
            return Err(ApiError::field("partitions", format!("partition {bad} does not exist (the topic has {n})")));
        }
    }
    Ok(req)
}

async fn hold(State(node): State<Arc<Node>>, JsonBody(body): JsonBody) -> Result<Response, ApiError> {
    let req = check_hold(&body)?;
    Ok(Json(node.extend_hold(&req.partitions, req.for_ms)).into_response())
}

/// Parses and checks the body of `POST /admin/hold`. Pure, like [`check_drain`].
///
/// # Errors
/// 400 `invalid_field` for a bad body or `for_ms` outside 1..=[`MAX_HOLD_EXTENSION_MS`].
pub fn check_hold(body: &[u8]) -> Result<HoldRequest, ApiError> {
    let req: HoldRequest = parse_json(body)?;
    if req.for_ms == 0 || req.for_ms > MAX_HOLD_EXTENSION_MS {
        return Err(ApiError::field("for_ms", format!("for_ms must be 1 to {MAX_HOLD_EXTENSION_MS}")));
    }
    Ok(req)
}

/// `Retry-After` of a refused handshake, seconds.
const RETRY_AFTER_SECS: u64 = 1;

/// `Retry-After` of a handshake for an incomplete channel, seconds: about one heal round.
const INCOMPLETE_RETRY_AFTER_SECS: u64 = 2;

#[cfg(test)]
fn parse_query(raw: Option<&str>) -> Result<(ChannelId, FrameStyle, u64, Option<shared::epoch::Epoch>, Option<String>), ApiError> {
    let q = shared::http::parse_ws_query(raw.unwrap_or(""))?;
    Ok((q.id().clone(), q.style(), q.since, q.epoch, q.token))
}

/// Checks that `channel`'s namespace is configured and, for today's frames (`canvas=`), that it
/// is a `pixels` one.
fn check_namespace(node: &Node, channel: &ChannelId, style: FrameStyle) -> Result<(), ApiError> {
    let ns = node.hub.namespaces().of(channel).map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "unknown_namespace", e.to_string()))?;
    if style == FrameStyle::Canvas && ns.kind() != shared::model::ModelKind::Pixels {
        return Err(ApiError::field("canvas", format!("canvas= serves pixels channels; {channel} is a {} channel: use channel=", ns.kind())));
    }
    Ok(())
}

/// Checks an upgrade request (RFC 6455 §4.2.1) and returns its `Sec-WebSocket-Accept` value.
fn accept_key(headers: &HeaderMap) -> Result<String, ApiError> {
    let has = |name: header::HeaderName, token: &str| {
        headers.get_all(name).iter().filter_map(|v| v.to_str().ok()).any(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
    };
    let bad = |why: &str| ApiError::bad_request("not_a_websocket", why.to_owned());
    if !has(header::CONNECTION, "upgrade") {
        return Err(bad("Connection header did not include 'upgrade'"));
    }
    if !has(header::UPGRADE, "websocket") {
        return Err(bad("`Upgrade` header did not include 'websocket'"));
    }
    if headers.get(header::SEC_WEBSOCKET_VERSION).map(|v| v.as_bytes()) != Some(b"13") {
        return Err(bad("`Sec-WebSocket-Version` header did not include '13'"));
    }
    let key = headers.get(header::SEC_WEBSOCKET_KEY).ok_or_else(|| bad("`Sec-WebSocket-Key` header missing"))?;
    Ok(tungstenite::handshake::derive_accept_key(key.as_bytes()))
}

/// `GET /ws`: the handshake is answered here (not with axum's `WebSocketUpgrade`) so the session
/// runs on tokio-tungstenite's stream, which can send a long message as fragments (see
/// [`shared::ws::text_frames`]).
///
/// A query that names the channel is checked before the upgrade (refusals are HTTP answers); one
/// that names none is upgraded at once and the client's first frame, `subscribe`, names it: the
/// same checks then refuse with an `error` frame and a close code ([`session::Opening`]).
async fn ws(State(node): State<Arc<Node>>, RawQuery(raw): RawQuery, mut req: Request) -> Result<Response, ApiError> {
    let opening = shared::http::parse_ws_open(raw.as_deref().unwrap_or(""))?;
    let accept = accept_key(req.headers())?;
    let headers = req.headers().clone();
    let origin = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok());
    shared::origin::check(origin, None, &node.config.allowed_origins, shared::origin::SameOrigin::NotAllowed)
        .map_err(|r| ApiError::new(StatusCode::FORBIDDEN, "origin_not_allowed", r.0))?;
    let opening = match opening {
        Some(q) => session::Opening::Admitted(admit(&node, &q, &headers, || take_seat(&node)).await?),
        None => {
            // Nothing about a channel to check yet; the seat is taken (the connection is one).
            if !node.is_ready() {
                return Err(not_serving(&node));
            }
            let seat = take_seat(&node)?;
            let (n, h) = (node.clone(), headers.clone());
            // The subscribe frame's token may come in the query (`token=`) when the frame
            // carries none, as at the gateway.
            let query_token: Option<String> = shared::http::parse_query::<shared::protocol::WsQuery>(raw.as_deref().unwrap_or("")).ok().and_then(|q| q.token);
            let admit: session::Admit = Box::new(move |mut q| {
                if q.token.is_none() {
                    q.token = query_token;
                }
                Box::pin(async move {
                    let mut seat = Some(seat);
                    admit(&n, &q, &h, move || seat.take().ok_or_else(|| ApiError::unavailable("full", "no seat", RETRY_AFTER_SECS))).await
                })
            });
            session::Opening::Subscribing { admit, peer: peer_of(&headers) }
        }
    };
    let c = &node.config;
    let cfg = tungstenite::protocol::WebSocketConfig::default()
        .read_buffer_size(c.ws_read_buffer as usize)
        .write_buffer_size(c.ws_write_buffer as usize)
        .max_write_buffer_size((c.ws_write_buffer as usize).max(64 * 1024) + c.session_queue as usize * 256)
        .max_message_size(Some(c.ws_max_message as usize))
        // A frame a little over the message limit is read whole and refused with 1009 (a clean
        // close); only a much larger one is cut off at its header.
        .max_frame_size(Some((c.ws_max_message as usize * 16).max(64 * 1024)));
    let on_upgrade = hyper::upgrade::on(&mut req);
    let tracker = node.sessions.clone();
    let node2 = node.clone();
    tokio::spawn(tracker.track_future(async move {
        match on_upgrade.await {
            Ok(upgraded) => {
                let io = hyper_util::rt::TokioIo::new(upgraded);
                let socket = tokio_tungstenite::WebSocketStream::from_raw_socket(io, tungstenite::protocol::Role::Server, Some(cfg)).await;
                session::run(socket, &node2.hub, opening).await;
            }
            Err(e) => tracing::debug!(error = %e, "the WebSocket upgrade did not complete"),
        }
    }));
    Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header(header::CONNECTION, "upgrade")
        .header(header::UPGRADE, "websocket")
        .header(header::SEC_WEBSOCKET_ACCEPT, accept)
        .body(Body::empty())
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))
}

/// 503 `not_ready` or `draining`: the node serves no session now.
fn not_serving(node: &Node) -> ApiError {
    let code = if node.phase() == crate::lifecycle::Phase::Draining { "draining" } else { "not_ready" };
    ApiError::unavailable(code, format!("node {} is not serving ({code})", node.config.node_id), RETRY_AFTER_SECS)
}

/// A seat for one more session: 503 `full` at `MAX_SESSIONS`.
fn take_seat(node: &Node) -> Result<crate::admission::Seat, ApiError> {
    node.seats.try_take().ok_or_else(|| {
        ApiError::unavailable("full", format!("node {} serves its capacity of {} sessions; try again later", node.config.node_id, node.seats.max()), RETRY_AFTER_SECS)
    })
}

/// Who is on the other end: a proxied session's origin comes in X-Forwarded-Origin (checked by
/// the gateway).
fn peer_of(headers: &HeaderMap) -> Peer {
    let header_str = |name: header::HeaderName| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    Peer {
        origin: Some(header_str(header::ORIGIN))
            .filter(|o| !o.is_empty())
            .unwrap_or_else(|| headers.get(shared::origin::FORWARDED_ORIGIN).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned()),
        user_agent: header_str(header::USER_AGENT),
    }
}

/// Whether the node serves a session for `q` now, and how: the namespace, the client token, the
/// node's phase, the partition's owner, a complete state, a seat (`seat`, taken once the rest
/// passed), and a state at the client's version (waited for, bounded).
///
/// # Errors
/// The refusal: 400 (`unknown_namespace`, `canvas`), 401/403 (client token), 503 + Retry-After
/// (`not_ready`, `draining`, `not_owner`, `channel_incomplete`, `full`, `behind`).
async fn admit(node: &Arc<Node>, q: &WsQuery, headers: &HeaderMap, seat: impl FnOnce() -> Result<crate::admission::Seat, ApiError>) -> Result<SessionSpec, ApiError> {
    let (channel, style, since, epoch, token) = (q.id().clone(), q.style(), q.since, q.epoch.clone(), q.token.clone());
    check_namespace(node, &channel, style)?;
    // The client token, when required: checked before anything else about the session.
    let expires = match &node.client_tokens {
        None => None,
        Some(tokens) => {
            let grant = tokens.authorize(token.as_deref(), channel.as_str(), Action::Subscribe).map_err(|e| {
                tracing::info!(channel = %channel, code = e.code(), "handshake refused: client token");
                e.api_error()
            })?;
            Some(tokio::time::Instant::now() + grant.remaining(std::time::SystemTime::now()))
        }
    };
    if !node.is_ready() {
        return Err(not_serving(node));
    }
    let n = node.partition_count();
    let partition = partition_for(channel.as_str().as_bytes(), n.max(1)) as i32;
    node.hub
        .admits(partition)
        .map_err(|r| ApiError::unavailable("not_owner", r.to_string(), RETRY_AFTER_SECS))?;
    // A channel whose versions skipped misses publications: never handed to a new session as its state
    // until a snapshot heals it (open sessions keep their events).
    if node.hub.is_incomplete(&channel) {
        return Err(ApiError::unavailable(
            "channel_incomplete",
            format!("node {}'s state of {channel} misses versions whose records were deleted; it heals from the next snapshot", node.config.node_id),
            INCOMPLETE_RETRY_AFTER_SECS,
        ));
    }
    // The seat is taken before the upgrade is answered (concurrent handshakes cannot pass the
    // limit) and goes with the session task: dropped when the session ends, when the upgrade never
    // completes, or when this handshake is refused below.
    let seat = seat()?;
    // A client of another epoch is not ahead, whatever its `since`: it gets a snapshot.
    let wanted = shared::epoch::resume_after(since, epoch.as_ref(), &node.hub.epoch_in(partition, &channel));
    let have = node.hub.version_of(&channel);
    if have < wanted {
        // The client is ahead of this node's state (it is still reading the partition): hold the
        // handshake until the state catches up, bounded.
        let waiting = std::time::Instant::now();
        let have = node.hub.wait_for_version(&channel, wanted, node.config.behind_wait()).await;
        if waiting.elapsed() > std::time::Duration::from_millis(100) {
            tracing::info!(channel = %channel, since, have, waited_ms = waiting.elapsed().as_millis() as u64,
                "handshake waited for its state to reach the client's version");
        }
        if have < wanted {
            return Err(ApiError::unavailable(
                "behind",
                format!("this node's state of {channel} is at version {have}, behind the client's {since}"),
                RETRY_AFTER_SECS,
            ));
        }
    }
    Ok(SessionSpec {
        channel,
        style,
        partition,
        since,
        epoch,
        queue: node.config.session_queue as usize,
        write_timeout: node.config.write_timeout(),
        ping_interval: Duration::from_millis(node.config.ping_interval_ms),
        node_id: node.config.node_id.clone(),
        peer: peer_of(headers),
        expires,
        seat: Some(seat),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    /// A node that never reached Kafka (phase UP: not serving), and its shutdown.
    fn up_node() -> (Arc<Node>, tokio_util::sync::DropGuard) {
        up_node_with(shared::fleet_config::FleetFile::default())
    }

    /// [`up_node`] with `fleet.toml`'s `fleet`.
    fn up_node_with(fleet: shared::fleet_config::FleetFile) -> (Arc<Node>, tokio_util::sync::DropGuard) {
        let mut config = crate::config::Config::for_node("ws-probe", "127.0.0.1:1");
        config.admin_token = None;
        config.fleet = fleet;
        let shutdown = tokio_util::sync::CancellationToken::new();
        (Node::new(config, shutdown.clone()), shutdown.drop_guard())
    }

    /// `req` through `app`: status, `Retry-After`, JSON body (`null` when not JSON).
    async fn send(app: &Router, req: axum::http::Request<Body>) -> (u16, Option<String>, serde_json::Value) {
        let resp = app.clone().oneshot(req).await.unwrap();
        let status = resp.status().as_u16();
        let retry = resp.headers().get(header::RETRY_AFTER).map(|v| v.to_str().unwrap().to_owned());
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (status, retry, serde_json::from_slice(&body).unwrap_or_default())
    }

    fn get(path: &str) -> axum::http::Request<Body> {
        axum::http::Request::get(path).body(Body::empty()).unwrap()
    }

    /// `/livez` answers whenever the process does; `/readyz` is 503 + `Retry-After` with the JSON
    /// error while the node does not serve (here: UP, waiting for start-recovery). The 200 of a
    /// HEALTHY node is in tests/node.rs (it needs a broker).
    #[tokio::test]
    async fn livez_is_200_and_readyz_503_while_the_node_is_up_not_ready() {
        let (node, _stop) = up_node();
        let app = router(node.clone());
        let (status, _, body) = send(&app, get("/livez")).await;
        assert_eq!((status, body["status"].as_str()), (200, Some("alive")), "{body}");
        let (status, retry, body) = send(&app, get("/readyz")).await;
        assert_eq!((status, retry.as_deref(), body["error"].as_str()), (503, Some("1"), Some("not_ready")), "{body}");
        assert!(body["message"].as_str().unwrap().contains("ws-probe"), "{body}");
        // /health stays the detailed view, 200 whatever the state.
        let (status, _, body) = send(&app, get("/health")).await;
        assert_eq!((status, body["state"].as_str()), (200, Some("UP")), "{body}");
    }

    /// `/health` names the node's namespaces by their fingerprint: `fleet.toml`'s, or without it
    /// the default namespace alone (pixels of the node's canvas size).
    #[tokio::test]
    async fn health_shows_the_namespaces_fingerprint() {
        use clap::CommandFactory;
        let (node, _stop) = up_node();
        let (_, _, body) = send(&router(node.clone()), get("/health")).await;
        let without = shared::namespaces::Namespaces::pixels_only(node.config.dims());
        assert_eq!(body["namespaces_fingerprint"].as_str(), Some(without.fingerprint()), "{body}");
        let reader = shared::fleet_config::Reader::new("ws-node", "node", &crate::config::Config::command(), &[]);
        let fleet = shared::fleet_config::FleetFile::parse("[namespaces.chat]\nmodel = \"stream\"\n", std::path::Path::new("fleet.toml"), &reader);
        let (node, _stop) = up_node_with(fleet);
        let (_, _, body) = send(&router(node.clone()), get("/health")).await;
        assert_eq!(body["namespaces_fingerprint"].as_str(), Some(node.config.namespaces().fingerprint()), "{body}");
        assert_ne!(node.config.namespaces().fingerprint(), without.fingerprint());
        assert_eq!(body["node_id"], "ws-probe", "the other fields stay");
    }

    fn admin_post(path: &str, content_type: Option<&str>, extra: &[(&str, &str)], body: &str) -> axum::http::Request<Body> {
        let mut req = axum::http::Request::post(path);
        if let Some(ct) = content_type {
            req = req.header(header::CONTENT_TYPE, ct);
        }
        for (k, v) in extra {
            req = req.header(*k, *v);
        }
        req.body(Body::from(body.to_owned())).unwrap()
    }

    /// The loopback admin listener takes only requests a browser page cannot forge: a POST
    /// without `Content-Type: application/json` is 415 (a `no-cors` fetch cannot declare JSON), a
    /// request with an `Origin` (every page's POST has one) or a `Host` that is not loopback (DNS
    /// rebinding) is 403; none of them reaches the node.
    #[tokio::test]
    async fn the_admin_listener_refuses_what_a_browser_page_could_send() {
        let (node, _stop) = up_node();
        let app = admin_router(node.clone());
        let json = Some("application/json");
        let drain = r#"{"reason":"MAINTENANCE"}"#;
        for (path, ct, extra, body, status, code) in [
            ("/admin/start-recovery", None, &[][..], "", 415, "unsupported_media_type"),
            ("/admin/start-recovery", Some("text/plain"), &[][..], "{}", 415, "unsupported_media_type"),
            ("/admin/drain", None, &[][..], drain, 415, "unsupported_media_type"),
            ("/admin/drain", Some("application/x-www-form-urlencoded"), &[][..], drain, 415, "unsupported_media_type"),
            ("/admin/start-recovery", json, &[("origin", "http://127.0.0.1:8000")][..], "{}", 403, "origin_not_allowed"),
            ("/admin/drain", json, &[("origin", "null")][..], drain, 403, "origin_not_allowed"),
            ("/admin/start-recovery", json, &[("host", "evil.example:9081")][..], "{}", 403, "host_not_allowed"),
        ] {
            let (got, _, body) = send(&app, admin_post(path, ct, extra, body)).await;
            assert_eq!((got, body["error"].as_str()), (status, Some(code)), "{path} {ct:?} {extra:?}: {body}");
            assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()), "{body}");
            assert_eq!(node.phase(), crate::lifecycle::Phase::Up, "{path} {ct:?} {extra:?} reached the node");
        }
        // A proper request goes through (a hold changes nothing on a node that holds nothing).
        let hold = r#"{"partitions":[0],"for_ms":1000}"#;
        let ok = [("host", "127.0.0.1:9081")];
        let (got, _, body) = send(&app, admin_post("/admin/hold", Some("application/json; charset=utf-8"), &ok, hold)).await;
        assert_eq!(got, 200, "{body}");
        assert_eq!(body["held"], serde_json::json!([]), "{body}");
    }

    #[test]
    fn query_parsing_names_the_bad_field() {
        assert_eq!(parse_query(Some("canvas=c1&since=12")).unwrap(), (ChannelId::parse("c1").unwrap(), FrameStyle::Canvas, 12, None, None));
        assert_eq!(parse_query(Some("channel=chat:a")).unwrap().1, FrameStyle::Channel);
        assert_eq!(parse_query(Some("canvas=c1&token=a.b.c")).unwrap().4.as_deref(), Some("a.b.c"));
        assert_eq!(parse_query(Some("since=0&canvas=a%2Db")).unwrap().0.as_str(), "a-b");
        assert_eq!(parse_query(Some("canvas=c1")).unwrap().2, 0);
        assert_eq!(parse_query(Some("canvas=c1&since=3&epoch=AAAA-0")).unwrap().3, Some(shared::epoch::Epoch::parse("AAAA-0").unwrap()));
        for (q, field) in [
            ("", "channel"),
            ("since=3", "channel"),
            ("canvas=c1&since=-1", "since"),
            ("canvas=c1&since=x", "since"),
            ("canvas=bad%20id", "canvas"),
            ("canvas=%zz", "canvas"),
            ("canvas=c1&epoch=a%20b", "epoch"),
        ] {
            let e = parse_query(Some(q)).unwrap_err();
            assert_eq!(e.body.field.as_deref(), Some(field), "{q}");
            assert_eq!(e.status, StatusCode::BAD_REQUEST);
        }
    }
}

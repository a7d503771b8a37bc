//! The gateway's edge, in-process (`gateway::run` on 127.0.0.1:0) over a tiny HTTP server posing
//! as a node: the orchestrators' probes (`/livez`, `/readyz`).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use clap::Parser;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

const ADMIN_TOKEN: &str = "gateway-edge-test-token";

#[derive(Clone)]
struct FakeNode {
    /// The `/health` state it reports (`UP`, `HEALTHY`).
    state: Arc<Mutex<&'static str>>,
}

async fn node_health(State(n): State<FakeNode>) -> Response {
    let state = *n.state.lock().unwrap();
    Json(serde_json::json!({
        "node_id": "ws-1", "state": state, "up": true, "ready": state == "HEALTHY", "draining": false,
        "assigned_partitions": if state == "HEALTHY" { vec![0, 1, 2, 3, 4, 5] } else { vec![] }, "partition_count": 6, "sessions": 0,
        "catchup": {"status": "completed", "target_offsets": {}, "last_consumed_offsets": {}, "replay_count": 0},
        "progress": {"since_poll_ms": 20, "assignment_at_ms": 1, "paused": null, "ownership_confirmed": true, "stalled_partitions": [], "degraded": null},
    }))
    .into_response()
}

async fn node_start_recovery() -> Response {
    (StatusCode::ACCEPTED, Json(serde_json::json!({"outcome": "started"}))).into_response()
}

/// A fake node reporting `state`; its URL and the guard that stops it.
async fn fake(state: &'static str) -> (FakeNode, String, tokio_util::sync::DropGuard) {
    let n = FakeNode { state: Arc::new(Mutex::new(state)) };
    let app = Router::new()
        .route("/health", get(node_health))
        .route("/admin/start-recovery", post(node_start_recovery))
        .with_state(n.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let stop = CancellationToken::new();
    let cancelled = stop.clone().cancelled_owned();
    tokio::spawn(async move { axum::serve(listener, app).with_graceful_shutdown(cancelled).await });
    (n, url, stop.drop_guard())
}

/// The gateway over node `ws-1` at `url`, polling every 100 ms, with `extra` flags; its base URL.
async fn gateway(url: &str, extra: &[&str]) -> (String, tokio_util::sync::DropGuard) {
    shared::telemetry::init();
    let nodes = format!("ws-1={url}");
    let mut args = vec!["gateway", "--nodes", &nodes, "--poll-interval-ms", "100", "--poll-timeout-ms", "80", "--up-threshold", "1"];
    args.extend_from_slice(extra);
    let config = gateway::config::Config::try_parse_from(args).unwrap();
    assert!(config.problems().is_empty(), "{:?}", config.problems());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let shutdown = CancellationToken::new();
    tokio::spawn(gateway::run(config, listener, shutdown.clone()));
    (base, shutdown.drop_guard())
}

/// Asks `what` every 50 ms until it answers `Some` (at most 5 s).
async fn until<T, F: std::future::Future<Output = Option<T>>>(what: &str, mut probe: impl FnMut() -> F) -> T {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: not within 5 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Status, `Retry-After` and JSON body of `GET url`.
async fn get_json(url: &str) -> (u16, Option<String>, serde_json::Value) {
    let r = reqwest::get(url).await.unwrap();
    let status = r.status().as_u16();
    let retry = r.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned());
    (status, retry, r.json().await.unwrap_or_default())
}

/// `/livez` answers at once; `/readyz` (and `/ready`, its alias) is 503 + `Retry-After` with the
/// JSON error while no node serves, 200 once one does. No token is needed.
#[tokio::test]
async fn readyz_is_503_until_a_node_serves_and_livez_always_200() {
    let (node, url, _n) = fake("UP").await;
    let (gw, _g) = gateway(&url, &["--admin-token", ADMIN_TOKEN]).await;
    let (status, _, body) = get_json(&format!("{gw}/livez")).await;
    assert_eq!((status, body["status"].as_str()), (200, Some("alive")), "{body}");
    for path in ["/readyz", "/ready"] {
        let (status, retry, body) = get_json(&format!("{gw}{path}")).await;
        assert_eq!((status, retry.as_deref()), (503, Some("1")), "{path}: {body}");
        assert!(matches!(body["error"].as_str(), Some("stale_view" | "no_node_serving")), "{path}: {body}");
        assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()), "{path}: {body}");
    }
    // Polled, the node UP: the view is fresh, but no node serves.
    until("the view to be fresh", || async { (get_json(&format!("{gw}/health")).await.0 == 200).then_some(()) }).await;
    let (status, _, body) = get_json(&format!("{gw}/readyz")).await;
    assert_eq!((status, body["error"].as_str()), (503, Some("no_node_serving")), "{body}");
    *node.state.lock().unwrap() = "HEALTHY";
    until("/readyz to answer 200", || async { (get_json(&format!("{gw}/readyz")).await.0 == 200).then_some(()) }).await;
    let (status, _, body) = get_json(&format!("{gw}/ready")).await;
    assert_eq!((status, body["ready"].as_bool()), (200, Some(true)), "{body}");
    assert_eq!(get_json(&format!("{gw}/livez")).await.0, 200);
}

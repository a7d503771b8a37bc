//! The gateway's edge, in-process (`gateway::run` on 127.0.0.1:0) over a tiny HTTP server posing
//! as a node: the orchestrators' probes (`/livez`, `/readyz`), the admin routes' refusal of what
//! a browser page could send (no JSON `Content-Type`, an `Origin`, a foreign `Host`), the
//! `Content-Type` of the gateway's own calls to the nodes' admin routes, and the public
//! `/api/fleet` naming no internal address, and a node's `/health` of before channels read.

#[path = "support/serve.rs"]
mod support;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use clap::Parser;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

const ADMIN_TOKEN: &str = "gateway-edge-test-token";

/// One admin call a fake node received: its path, `Content-Type` and body.
#[derive(Debug, Clone)]
struct Call {
    path: &'static str,
    content_type: Option<String>,
    body: String,
}

#[derive(Clone)]
struct FakeNode {
    /// The `/health` state it reports (`UP`, `HEALTHY`).
    state: Arc<Mutex<&'static str>>,
    calls: Arc<Mutex<Vec<Call>>>,
}

impl FakeNode {
    fn calls(&self, path: &str) -> Vec<Call> {
        self.calls.lock().unwrap().iter().filter(|c| c.path == path).cloned().collect()
    }
}

async fn node_health(State(n): State<FakeNode>) -> Response {
    let state = *n.state.lock().unwrap();
    Json(serde_json::json!({
        "node_id": "ws-1", "state": state, "up": true, "ready": state == "HEALTHY", "draining": false,
        "assigned_partitions": if state == "HEALTHY" { vec![0, 1, 2, 3, 4, 5] } else { vec![] }, "partition_count": 6, "sessions": 0,
        // A figure under its name before channels only, as a node older than channels writes it.
        "catchup": {"status": "completed", "target_offsets": {}, "last_consumed_offsets": {}, "replay_count": 0, "canvases_from_snapshots": 3},
        "progress": {"since_poll_ms": 20, "assignment_at_ms": 1, "paused": null, "ownership_confirmed": true, "stalled_partitions": [], "degraded": null},
    }))
    .into_response()
}

fn record(n: &FakeNode, path: &'static str, headers: &HeaderMap, body: axum::body::Bytes) {
    let content_type = headers.get(axum::http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_owned);
    n.calls.lock().unwrap().push(Call { path, content_type, body: String::from_utf8_lossy(&body).into_owned() });
}

async fn node_start_recovery(State(n): State<FakeNode>, headers: HeaderMap, body: axum::body::Bytes) -> Response {
    record(&n, "/admin/start-recovery", &headers, body);
    (StatusCode::ACCEPTED, Json(serde_json::json!({"outcome": "started"}))).into_response()
}

async fn node_drain(State(n): State<FakeNode>, headers: HeaderMap, body: axum::body::Bytes) -> Response {
    record(&n, "/admin/drain", &headers, body);
    Json(serde_json::json!({"reason": "MAINTENANCE", "notified_sessions": 0, "force_closed_sessions": 0, "duration_ms": 1})).into_response()
}

/// A fake node reporting `state`; its URL and the guard that stops it.
async fn fake(state: &'static str) -> (FakeNode, String, tokio_util::sync::DropGuard) {
    let n = FakeNode { state: Arc::new(Mutex::new(state)), calls: Arc::new(Mutex::new(Vec::new())) };
    let app = Router::new()
        .route("/health", get(node_health))
        .route("/admin/start-recovery", post(node_start_recovery))
        .route("/admin/drain", post(node_drain))
        .with_state(n.clone());
    let (url, guard) = support::on_loopback(app).await;
    (n, url, guard)
}

/// The gateway over node `ws-1` at `url`, polling every 100 ms, with `extra` flags; its base URL.
async fn gateway(url: &str, extra: &[&str]) -> (String, tokio_util::sync::DropGuard) {
    shared::telemetry::init();
    let nodes = format!("ws-1={url}");
    let mut args = vec!["gateway", "--nodes", &nodes, "--poll-interval-ms", "100", "--poll-timeout-ms", "80", "--up-threshold", "1"];
    args.extend_from_slice(extra);
    // The admin listener (served without `--admin-token`) on a port of its own: tests run at once.
    if !extra.contains(&"--admin-listen") {
        args.extend_from_slice(&["--admin-listen", "127.0.0.1:0"]);
    }
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

/// The gateway's calls to a node's admin routes are declared JSON and carry a JSON object, as
/// the nodes' admin routes require (start-recovery has nothing to say: `{}`).
#[tokio::test]
async fn the_gateway_s_admin_calls_to_nodes_are_declared_json() {
    let (node, url, _n) = fake("UP").await;
    let (gw, _g) = gateway(&url, &["--admin-token", ADMIN_TOKEN]).await;
    let calls = until("start-recovery to be sent", || async { Some(node.calls("/admin/start-recovery")).filter(|c| !c.is_empty()) }).await;
    let drain = reqwest::Client::new()
        .post(format!("{gw}/api/fleet/nodes/ws-1/drain"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&serde_json::json!({"grace_ms": 0}))
        .send()
        .await
        .unwrap();
    assert_eq!(drain.status(), 200);
    for c in calls.iter().chain(&node.calls("/admin/drain")) {
        assert_eq!(c.content_type.as_deref(), Some("application/json"), "{c:?}");
        assert!(serde_json::from_str::<serde_json::Value>(&c.body).is_ok_and(|v| v.is_object()), "{c:?}");
    }
    assert_eq!(node.calls("/admin/drain").len(), 1);
}

fn admin_post(client: &reqwest::Client, url: &str, content_type: Option<&str>, headers: &[(&str, &str)], body: &str) -> reqwest::RequestBuilder {
    let mut req = client.post(url).body(body.to_owned());
    if let Some(ct) = content_type {
        req = req.header("content-type", ct);
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req
}

/// What a page in a browser on the gateway's host could send to its admin routes is refused and
/// drains nothing: a POST not declared JSON (a `no-cors` fetch cannot declare it) is 415, a
/// request with an `Origin` (every page's POST has one) or, on the loopback listener, a `Host`
/// that is not loopback (DNS rebinding) is 403. The operator's request is carried out.
#[tokio::test]
async fn admin_routes_refuse_what_a_browser_page_could_send() {
    let (node, url, _n) = fake("HEALTHY").await;
    let admin_port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let listen = format!("127.0.0.1:{admin_port}");
    let (_gw, _g) = gateway(&url, &["--admin-listen", &listen]).await;
    let admin = format!("http://{listen}");
    let http = reqwest::Client::new();
    until("the admin listener", || async { http.get(format!("{admin}/api/fleet")).send().await.ok().map(|_| ()) }).await;
    let drain = format!("{admin}/api/fleet/nodes/ws-1/drain");
    let json = Some("application/json");
    for (ct, headers, body, status, code) in [
        (None, &[][..], "", 415, "unsupported_media_type"),
        (None, &[][..], "{}", 415, "unsupported_media_type"),
        (Some("text/plain;charset=UTF-8"), &[][..], "{}", 415, "unsupported_media_type"),
        (Some("multipart/form-data; boundary=x"), &[][..], "", 415, "unsupported_media_type"),
        (json, &[("origin", "http://localhost:3000")][..], "{}", 403, "origin_not_allowed"),
        (json, &[("host", "rebound.example:9000")][..], "{}", 403, "host_not_allowed"),
    ] {
        let r = admin_post(&http, &drain, ct, headers, body).send().await.unwrap();
        assert_eq!(r.status().as_u16(), status, "{ct:?} {headers:?}");
        assert_eq!(r.json::<serde_json::Value>().await.unwrap()["error"], code, "{ct:?} {headers:?}");
    }
    // Reads of the admin listener too: a page's fetch carries an Origin.
    let r = http.get(format!("{admin}/api/fleet")).header("origin", "http://localhost:3000").send().await.unwrap();
    assert_eq!(r.status(), 403);
    assert!(node.calls("/admin/drain").is_empty(), "a refused request drained the node");
    let r = admin_post(&http, &drain, json, &[], r#"{"grace_ms":0}"#).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(node.calls("/admin/drain").len(), 1);

    // On the public listener (with a token) the same rules, after the token.
    let (gw, _g2) = gateway(&url, &["--admin-token", ADMIN_TOKEN]).await;
    let drain = format!("{gw}/api/fleet/nodes/ws-1/drain");
    let r = admin_post(&http, &drain, None, &[], "").send().await.unwrap();
    assert_eq!(r.status(), 401, "the token first");
    let r = admin_post(&http, &drain, None, &[], "").bearer_auth(ADMIN_TOKEN).send().await.unwrap();
    assert_eq!(r.status(), 415);
    let r = admin_post(&http, &drain, json, &[("origin", "https://canvas.example")], "{}").bearer_auth(ADMIN_TOKEN).send().await.unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(node.calls("/admin/drain").len(), 1, "a refused request drained the node");
}

/// A node that stops answering is DOWN with a reason that names its URL: the full `/api/fleet`
/// shows it, the public one names the node instead, and no address at all.
#[tokio::test]
async fn the_public_fleet_view_names_no_internal_address() {
    let (_node, url, stop) = fake("HEALTHY").await;
    let (gw, _g) = gateway(&url, &["--admin-token", ADMIN_TOKEN]).await;
    let full = || async {
        reqwest::Client::new().get(format!("{gw}/api/fleet")).bearer_auth(ADMIN_TOKEN).send().await.unwrap().json::<serde_json::Value>().await.unwrap()
    };
    until("ws-1 HEALTHY", || async { (full().await["nodes"][0]["state"] == "HEALTHY").then_some(()) }).await;
    drop(stop);
    let f = until("ws-1 DOWN", || async { Some(full().await).filter(|f| f["nodes"][0]["state"] == "DOWN") }).await;
    let down = |f: &serde_json::Value| {
        f["decisions"].as_array().unwrap().iter().find(|d| d["action"] == "transition" && d["detail"]["to"] == "DOWN").cloned().unwrap()
    };
    let port = url.rsplit(':').next().unwrap();
    assert!(down(&f)["reason"].as_str().unwrap().contains(port), "the full view names the address: {f}");
    let (status, _, public) = get_json(&format!("{gw}/api/fleet")).await;
    assert_eq!(status, 200);
    let text = public.to_string();
    assert!(!text.contains("127.0.0.1") && !text.contains(&url), "{text}");
    let reason = down(&public)["reason"].as_str().unwrap().to_owned();
    assert!(reason.starts_with("no answer: ") && reason.contains("ws-1"), "{reason}");
}

/// A node older than channels writes its figures under their old names only: the gateway reads
/// them and shows them under the new names (and, for older readers, the old ones).
#[tokio::test]
async fn a_node_older_than_channels_is_read_under_the_new_names() {
    let (_node, url, _n) = fake("HEALTHY").await;
    let (gw, _g) = gateway(&url, &[]).await;
    let catchup = until("ws-1 polled", || async {
        let (_, _, f) = get_json(&format!("{gw}/api/fleet")).await;
        Some(f["nodes"][0]["catchup"].clone()).filter(|c| !c.is_null())
    })
    .await;
    assert_eq!((catchup["channels_from_snapshots"].as_u64(), catchup["canvases_from_snapshots"].as_u64()), (Some(3), Some(3)), "{catchup}");
}

/// The close code of the next close frame on `ws` (`None`: the connection ended without one),
/// within 5 s; other frames are skipped.
async fn close_code(ws: &mut tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>) -> Option<u16> {
    use futures::StreamExt;
    use tokio_tungstenite::tungstenite::Message;
    loop {
        match tokio::time::timeout(Duration::from_secs(5), ws.next()).await.expect("an answer within 5 s") {
            Some(Ok(Message::Close(f))) => return f.map(|f| u16::from(f.code)),
            Some(Ok(_)) => continue,
            Some(Err(_)) | None => return None,
        }
    }
}

/// A connection opened without a channel is upgraded at once, and its first frame names it. A
/// subscribe frame the gateway refuses is an `error` frame and 1008 (this holds); a first frame
/// the WebSocket layer refuses, over `WS_MAX_MESSAGE`, is a protocol problem that a proxied
/// session answers with 1009 Message Too Big, but before the subscribe `first_subscribe` takes it
/// for `connection_lost` and `refuse_open` sends nothing: the client gets no close code.
#[tokio::test]
async fn a_first_frame_the_websocket_layer_refuses_gets_its_close_code() {
    use futures::SinkExt;
    use tokio_tungstenite::tungstenite::Message;
    let (_node, url, _n) = fake("HEALTHY").await;
    let (gw, _g) = gateway(&url, &[]).await;
    let ws_url = format!("{}/ws", gw.replacen("http", "ws", 1));
    let (mut ws, _) = tokio_tungstenite::connect_async(&ws_url).await.unwrap();
    ws.send(Message::Text(r#"{"type":"subscribe","channel":"nope:a"}"#.into())).await.unwrap();
    assert_eq!(close_code(&mut ws).await, Some(1008), "an unknown namespace: refused for good");
    let (mut ws, _) = tokio_tungstenite::connect_async(&ws_url).await.unwrap();
    let big = format!(r#"{{"type":"subscribe","channel":"c1","token":"{}"}}"#, "x".repeat(8 * 1024));
    ws.send(Message::Text(big.into())).await.unwrap();
    assert_eq!(close_code(&mut ws).await, Some(1009), "a first frame over WS_MAX_MESSAGE");
}

//! The gateway in-process (`gateway::run` on 127.0.0.1:0) polling tiny HTTP servers posing as
//! nodes, whose `/health` the test scripts: the failover policy's ejection of a DEGRADED node
//! (once, never the last node serving), a failback only when the node's ownership moved away,
//! and the circuit breaker on the proxy path (a node that
//! stops answering handshakes gets none until trial handshakes succeed).

#[path = "support/serve.rs"]
mod support;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use clap::Parser;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// How a fake node answers `GET /ws`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WsAct {
    /// Never answers (a frozen node: its kernel accepted the connection).
    Hang,
    /// 503 `not_ready` (the node answers, refusing).
    Refuse,
    /// Accepts the WebSocket and keeps it open, sending nothing.
    Accept,
}

#[derive(Clone)]
struct FakeNode {
    id: &'static str,
    /// What `/health` says; `None`: 500 (the gateway counts it DOWN).
    health: Arc<Mutex<Option<serde_json::Value>>>,
    ws: Arc<Mutex<WsAct>>,
    /// Bodies of the `POST /admin/drain` calls received.
    drains: Arc<Mutex<Vec<serde_json::Value>>>,
    /// The `X-Decision-Id` of each `POST /admin/drain` call.
    decision_ids: Arc<Mutex<Vec<String>>>,
    /// The status `POST /admin/drain` answers with (200: a report).
    drain_status: Arc<Mutex<u16>>,
    /// `GET /ws` requests received.
    handshakes: Arc<Mutex<usize>>,
    /// WebSockets accepted and still open (the node's seats).
    open: Arc<std::sync::atomic::AtomicUsize>,
}

/// A `/health` body: `state`, owning `assigned` of 6 partitions, `degraded` set for a stall.
fn health(id: &str, state: &str, assigned: &[i32], degraded: Option<&str>) -> serde_json::Value {
    serde_json::json!({
        "node_id": id, "state": state, "up": true, "ready": state == "HEALTHY", "draining": false,
        "assigned_partitions": assigned, "partition_count": 6, "sessions": 0,
        "catchup": {"status": "completed", "target_offsets": {}, "last_consumed_offsets": {}, "replay_count": 0},
        "progress": {"since_poll_ms": 20, "assignment_at_ms": 1, "paused": null, "ownership_confirmed": true,
                     "stalled_partitions": if degraded.is_some() { assigned.to_vec() } else { vec![] }, "degraded": degraded},
    })
}

async fn node_health(State(n): State<FakeNode>) -> Response {
    match n.health.lock().unwrap().clone() {
        Some(h) => Json(h).into_response(),
        None => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

async fn node_drain(State(n): State<FakeNode>, headers: axum::http::HeaderMap, Json(body): Json<serde_json::Value>) -> Response {
    n.drains.lock().unwrap().push(body);
    let id = headers.get(shared::control::DECISION_HEADER).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    n.decision_ids.lock().unwrap().push(id);
    let status = *n.drain_status.lock().unwrap();
    if status != 200 {
        let code = StatusCode::from_u16(status).unwrap();
        return (code, Json(serde_json::json!({"error": "internal", "message": "fake node: the drain failed"}))).into_response();
    }
    Json(serde_json::json!({"reason": "NODE_DEGRADED", "notified_sessions": 0, "force_closed_sessions": 0, "duration_ms": 1})).into_response()
}

async fn node_ws(State(n): State<FakeNode>, upgrade: Result<axum::extract::ws::WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>) -> Response {
    *n.handshakes.lock().unwrap() += 1;
    let act = *n.ws.lock().unwrap();
    match act {
        WsAct::Accept => match upgrade {
            Ok(u) => {
                let open = n.open.clone();
                open.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                u.on_upgrade(move |mut ws| async move {
                    while let Some(Ok(_)) = ws.recv().await {}
                    open.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                })
            }
            Err(_) => StatusCode::BAD_REQUEST.into_response(),
        },
        WsAct::Hang => {
            tokio::time::sleep(Duration::from_secs(30)).await;
            StatusCode::SERVICE_UNAVAILABLE.into_response()
        }
        WsAct::Refuse => {
            let mut r = (StatusCode::SERVICE_UNAVAILABLE, Json(serde_json::json!({"error": "not_ready", "message": "fake node"}))).into_response();
            r.headers_mut().insert("retry-after", 1.into());
            r
        }
    }
}

/// A fake node answering `health`; its URL.
async fn fake(id: &'static str, h: serde_json::Value) -> (FakeNode, String, tokio_util::sync::DropGuard) {
    let n = FakeNode {
        id,
        health: Arc::new(Mutex::new(Some(h))),
        ws: Arc::new(Mutex::new(WsAct::Hang)),
        drains: Arc::new(Mutex::new(Vec::new())),
        decision_ids: Arc::new(Mutex::new(Vec::new())),
        drain_status: Arc::new(Mutex::new(200)),
        handshakes: Arc::new(Mutex::new(0)),
        open: Arc::new(std::sync::atomic::AtomicUsize::new(0)),
    };
    let app = Router::new()
        .route("/health", get(node_health))
        .route("/admin/drain", post(node_drain))
        .route("/ws", get(node_ws))
        .with_state(n.clone());
    let (url, guard) = support::on_loopback(app).await;
    (n, url, guard)
}

const ADMIN_TOKEN: &str = "gateway-policy-test-token";

/// The gateway over `nodes` (id, url), polling every 100 ms, with `extra` flags; its base URL.
async fn gateway(nodes: &[(&str, &str)], extra: &[&str]) -> (String, tokio_util::sync::DropGuard) {
    shared::telemetry::init();
    let list: Vec<String> = nodes.iter().map(|(id, url)| format!("{id}={url}")).collect();
    let list = list.join(",");
    let mut args = vec![
        "gateway",
        "--nodes",
        &list,
        "--poll-interval-ms",
        "100",
        "--poll-timeout-ms",
        "80",
        "--up-threshold",
        "1",
        "--degraded-checks",
        "3",
        "--min-samples",
        "3",
        "--admin-token",
        ADMIN_TOKEN,
    ];
    args.extend_from_slice(extra);
    let config = gateway::config::Config::try_parse_from(args).unwrap();
    assert!(config.problems().is_empty(), "{:?}", config.problems());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let shutdown = CancellationToken::new();
    tokio::spawn(gateway::run(config, listener, shutdown.clone()));
    (url, shutdown.drop_guard())
}

async fn fleet(gw: &str) -> serde_json::Value {
    reqwest::Client::new().get(format!("{gw}/api/fleet")).bearer_auth(ADMIN_TOKEN).send().await.unwrap().json().await.unwrap()
}

fn node<'a>(f: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    f["nodes"].as_array().unwrap().iter().find(|n| n["id"] == id).unwrap()
}

fn decisions(f: &serde_json::Value, action: &str) -> usize {
    f["decisions"].as_array().unwrap().iter().filter(|d| d["action"] == action).count()
}

/// Polls `/api/fleet` until `ok` holds (at most `max`).
async fn until(gw: &str, what: &str, max: Duration, ok: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let deadline = Instant::now() + max;
    loop {
        let f = fleet(gw).await;
        if ok(&f) {
            return f;
        }
        assert!(Instant::now() < deadline, "{what}: not within {max:?}: {f}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_stalled_node_is_ejected_once_and_never_the_last_serving() {
    let (a, a_url, _a) = fake("ws-1", health("ws-1", "HEALTHY", &[0, 1, 2], None)).await;
    let (b, b_url, _b) = fake("ws-2", health("ws-2", "HEALTHY", &[3, 4, 5], None)).await;
    let (gw, _g) = gateway(&[(a.id, &a_url), (b.id, &b_url)], &[]).await;
    until(&gw, "both HEALTHY", Duration::from_secs(5), |f| node(f, "ws-1")["state"] == "HEALTHY" && node(f, "ws-2")["state"] == "HEALTHY").await;

    // ws-2 dies and ws-1 stalls: ws-1 is the last node serving, so it stays.
    *b.health.lock().unwrap() = None;
    *a.health.lock().unwrap() = Some(health("ws-1", "DEGRADED", &[0, 1, 2], Some("the broadcast consumer has not returned from a poll for 12000ms")));
    let f = until(&gw, "ws-1 DEGRADED for a while", Duration::from_secs(5), |f| node(f, "ws-1")["degraded_streak"].as_u64() >= Some(8)).await;
    assert_eq!(node(&f, "ws-2")["state"], "DOWN");
    assert!(a.drains.lock().unwrap().is_empty(), "the last node serving was ejected: {f}");
    assert!(node(&f, "ws-1")["degraded"].as_str().unwrap().contains("poll"), "the node's reason is shown: {f}");

    // ws-2 is back: now ws-1 is drained out of the broadcast group, once.
    *b.health.lock().unwrap() = Some(health("ws-2", "HEALTHY", &[3, 4, 5], None));
    let f = until(&gw, "the ejection", Duration::from_secs(5), |f| decisions(f, "eject_completed") == 1).await;
    // (ws-2's return is no failback: it owns the partitions it owned before, nobody stood in.)
    let ejections = || a.drains.lock().unwrap().iter().filter(|d| d["reason"] == "NODE_DEGRADED").cloned().collect::<Vec<_>>();
    let drains = ejections();
    assert_eq!(drains.len(), 1, "{drains:?}");
    assert_eq!(drains[0]["reason"], "NODE_DEGRADED");
    assert!(drains[0].get("partitions").is_none() || drains[0]["partitions"].is_null(), "a whole-node drain: {drains:?}");
    assert_eq!(node(&f, "ws-1")["ejected"], true);
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(ejections().len(), 1, "ejected once, not on every DEGRADED poll");
    assert!(b.drains.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_node_that_stops_answering_handshakes_gets_none_until_trials_succeed() {
    let (a, a_url, _a) = fake("ws-1", health("ws-1", "HEALTHY", &[0, 1, 2, 3, 4, 5], None)).await;
    let (gw, _g) = gateway(
        &[(a.id, &a_url)],
        &["--upstream-connect-timeout-ms", "2000", "--breaker-failures", "2", "--breaker-open-ms", "1500", "--breaker-trials", "2"],
    )
    .await;
    until(&gw, "ws-1 HEALTHY", Duration::from_secs(5), |f| node(f, "ws-1")["state"] == "HEALTHY").await;
    let ws = format!("{}/ws?canvas=c1&since=0", gw.replacen("http", "ws", 1));
    let attempt = || async {
        let started = Instant::now();
        let r = tokio_tungstenite::connect_async(ws.as_str()).await;
        let status = match r {
            Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
                let body = resp.body().as_ref().map(|b| String::from_utf8_lossy(b).into_owned()).unwrap_or_default();
                (resp.status().as_u16(), body)
            }
            other => panic!("the gateway accepted a handshake no node answered: {:?}", other.map(|_| ())),
        };
        (status, started.elapsed())
    };
    // Two handshakes time out at the node (each tried twice: before and after a fresh poll).
    let ((s1, _), _) = attempt().await;
    assert_eq!(s1, 503);
    let f = until(&gw, "the circuit to open", Duration::from_secs(5), |f| node(f, "ws-1")["circuit"] == "open").await;
    assert_eq!(decisions(&f, "circuit_opened"), 1);
    // Open: the client is answered at once, and the node is sent nothing.
    let sent = *a.handshakes.lock().unwrap();
    let ((s, body), took) = attempt().await;
    assert_eq!(s, 503);
    assert!(body.contains("node_circuit_open"), "{body}");
    assert!(took < Duration::from_millis(1500), "an open circuit answers without waiting for the node: {took:?}");
    assert_eq!(*a.handshakes.lock().unwrap(), sent, "no handshake reached the node while the circuit was open");
    // The node answers again (refusing, which is an answer): after BREAKER_OPEN_MS the trials go
    // through and close the circuit.
    *a.ws.lock().unwrap() = WsAct::Refuse;
    tokio::time::sleep(Duration::from_millis(1600)).await;
    let ((s, body), _) = attempt().await;
    assert_eq!(s, 503);
    assert!(body.contains("not_ready"), "the trial reached the node: {body}");
    let f = until(&gw, "the circuit to close", Duration::from_secs(5), |f| node(f, "ws-1")["circuit"] == "closed").await;
    assert_eq!(decisions(&f, "circuit_closed"), 1);
}

/// A maintenance drain through a gateway named `id`, started afresh over `url`; the drain's
/// answer status.
async fn drain_through_a_new_gateway(url: &str, id: &str) -> u16 {
    let (gw, _stop) = gateway(&[("ws-1", url)], &["--gateway-id", id]).await;
    until(&gw, "ws-1 polled", Duration::from_secs(5), |f| node(f, "ws-1")["last_answer_ms_ago"].is_u64()).await;
    let r = reqwest::Client::new()
        .post(format!("{gw}/api/fleet/nodes/ws-1/drain"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&serde_json::json!({"grace_ms": 0}))
        .send()
        .await
        .unwrap();
    r.status().as_u16()
}

#[tokio::test]
async fn a_restarted_gateway_never_reuses_a_decision_id() {
    // Nodes answer a known decision id with its first answer, without acting: an id that a
    // restarted gateway (same GATEWAY_ID, its sequence back at 1) used before would get the old
    // answer for a new request.
    let (n, url, _n) = fake("ws-1", health("ws-1", "HEALTHY", &[0, 1, 2, 3, 4, 5], None)).await;
    assert_eq!(drain_through_a_new_gateway(&url, "gw-a").await, 200);
    assert_eq!(drain_through_a_new_gateway(&url, "gw-a").await, 200);
    let ids = n.decision_ids.lock().unwrap().clone();
    assert_eq!(ids.len(), 2, "{ids:?}");
    assert!(ids.iter().all(|i| i.starts_with("gw-a/")), "{ids:?}");
    assert_ne!(ids[0], ids[1], "the restarted gateway reused a decision id");
}

#[tokio::test]
async fn a_failed_ejection_is_rolled_back_and_tried_again_after_the_cooldown() {
    let (a, a_url, _a) = fake("ws-1", health("ws-1", "HEALTHY", &[0, 1, 2], None)).await;
    let (b, b_url, _b) = fake("ws-2", health("ws-2", "HEALTHY", &[3, 4, 5], None)).await;
    let (gw, _g) = gateway(&[(a.id, &a_url), (b.id, &b_url)], &["--eject-cooldown-ms", "500"]).await;
    until(&gw, "both HEALTHY", Duration::from_secs(5), |f| node(f, "ws-1")["state"] == "HEALTHY" && node(f, "ws-2")["state"] == "HEALTHY").await;
    // ws-1 stalls, and its drain fails.
    *a.drain_status.lock().unwrap() = 500;
    *a.health.lock().unwrap() = Some(health("ws-1", "DEGRADED", &[0, 1, 2], Some("the broadcast consumer has not returned from a poll for 12000ms")));
    let f = until(&gw, "the ejection to fail", Duration::from_secs(5), |f| decisions(f, "eject_failed") >= 1).await;
    assert_eq!(node(&f, "ws-1")["ejected"], false, "a failed ejection is rolled back: {f}");
    // Tried again after the cooldown, and this time the drain works.
    *a.drain_status.lock().unwrap() = 200;
    let f = until(&gw, "a second ejection", Duration::from_secs(10), |f| decisions(f, "eject_completed") == 1).await;
    assert!(decisions(&f, "eject") >= 2, "{f}");
    assert_eq!(node(&f, "ws-1")["ejected"], true);
    assert!(b.drains.lock().unwrap().iter().all(|d| d["reason"] != "NODE_DEGRADED"), "the healthy node was never ejected");
}

#[tokio::test]
async fn a_node_whose_health_fails_once_keeping_its_partitions_gets_no_failback() {
    let (a, a_url, _a) = fake("ws-1", health("ws-1", "HEALTHY", &[0, 1, 2], None)).await;
    let (b, b_url, _b) = fake("ws-2", health("ws-2", "HEALTHY", &[3, 4, 5], None)).await;
    let (gw, _g) = gateway(&[(a.id, &a_url), (b.id, &b_url)], &[]).await;
    until(&gw, "both HEALTHY", Duration::from_secs(5), |f| node(f, "ws-1")["state"] == "HEALTHY" && node(f, "ws-2")["state"] == "HEALTHY").await;
    // One failed poll of ws-1; ws-2 never owns its partitions meanwhile.
    *a.health.lock().unwrap() = None;
    until(&gw, "ws-1 DOWN for a poll", Duration::from_secs(5), |f| node(f, "ws-1")["state"] == "DOWN").await;
    *a.health.lock().unwrap() = Some(health("ws-1", "HEALTHY", &[0, 1, 2], None));
    until(&gw, "ws-1 HEALTHY again", Duration::from_secs(5), |f| node(f, "ws-1")["state"] == "HEALTHY").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let f = fleet(&gw).await;
    assert_eq!(decisions(&f, "failback_started"), 0, "a failback although ws-1 kept its partitions: {f}");
    assert!(b.drains.lock().unwrap().is_empty(), "ws-2 was drained: {:?}", b.drains.lock().unwrap());
    assert_eq!(node(&f, "ws-1")["awaiting_failback"], false);
    let said = f["decisions"].as_array().unwrap().iter().any(|d| d["action"] == "failback_not_needed" && d["node"] == "ws-1" && d["source"] == "local");
    assert!(said, "the decision log says why there was no failback: {f}");
}

#[tokio::test]
async fn a_restarted_node_back_with_its_partitions_gets_a_failback() {
    let (a, a_url, _a) = fake("ws-1", health("ws-1", "HEALTHY", &[0, 1, 2], None)).await;
    let (b, b_url, _b) = fake("ws-2", health("ws-2", "HEALTHY", &[3, 4, 5], None)).await;
    let (gw, _g) = gateway(&[(a.id, &a_url), (b.id, &b_url)], &[]).await;
    until(&gw, "both HEALTHY", Duration::from_secs(5), |f| node(f, "ws-1")["state"] == "HEALTHY" && node(f, "ws-2")["state"] == "HEALTHY").await;
    // ws-1 restarts: DOWN, then UP owning nothing (its ownership moved away), then HEALTHY.
    *a.health.lock().unwrap() = None;
    until(&gw, "ws-1 DOWN", Duration::from_secs(5), |f| node(f, "ws-1")["state"] == "DOWN").await;
    *a.health.lock().unwrap() = Some(health("ws-1", "UP", &[], None));
    let f = until(&gw, "ws-1 UP", Duration::from_secs(5), |f| node(f, "ws-1")["state"] == "UP").await;
    assert!(node(&f, "ws-1")["ownership_moved"].as_str().is_some_and(|w| w.contains("[0, 1, 2]")), "{f}");
    *a.health.lock().unwrap() = Some(health("ws-1", "HEALTHY", &[0, 1, 2], None));
    until(&gw, "the failback", Duration::from_secs(5), |f| decisions(f, "failback_completed") == 1).await;
    assert_eq!(scoped_drains(&b), vec![vec![0, 1, 2]], "ws-2 was asked for the sessions of ws-1's partitions");
}

#[tokio::test]
async fn a_node_ejected_twice_is_held_down_before_its_recovery() {
    let (a, a_url, _a) = fake("ws-1", health("ws-1", "HEALTHY", &[0, 1, 2], None)).await;
    let (b, b_url, _b) = fake("ws-2", health("ws-2", "HEALTHY", &[3, 4, 5], None)).await;
    let (gw, _g) = gateway(&[(a.id, &a_url), (b.id, &b_url)], &["--eject-cooldown-ms", "300", "--hold-down-base-ms", "2000"]).await;
    until(&gw, "both HEALTHY", Duration::from_secs(5), |f| node(f, "ws-1")["state"] == "HEALTHY" && node(f, "ws-2")["state"] == "HEALTHY").await;
    let stalled = || Some(health("ws-1", "DEGRADED", &[0, 1, 2], Some("the broadcast consumer has not returned from a poll for 12000ms")));
    // First ejection: no hold; ws-1 comes back HEALTHY.
    *a.health.lock().unwrap() = stalled();
    until(&gw, "the first ejection", Duration::from_secs(5), |f| decisions(f, "eject_completed") == 1).await;
    *a.health.lock().unwrap() = Some(health("ws-1", "HEALTHY", &[0, 1, 2], None));
    let f = until(&gw, "ws-1 HEALTHY again", Duration::from_secs(5), |f| node(f, "ws-1")["state"] == "HEALTHY").await;
    assert_eq!(decisions(&f, "held_down"), 0, "no hold after the first ejection: {f}");
    // It stalls again: the second ejection holds it down; drained, it answers UP.
    *a.health.lock().unwrap() = stalled();
    let f = until(&gw, "the hold-down", Duration::from_secs(5), |f| decisions(f, "held_down") == 1).await;
    *a.health.lock().unwrap() = Some(health("ws-1", "UP", &[], None));
    let recoveries_before = decisions(&f, "start_recovery");
    let held = f["decisions"].as_array().unwrap().iter().find(|d| d["action"] == "held_down").unwrap().clone();
    assert_eq!(held["detail"]["for_ms"], 2000, "{held}");
    assert_eq!(held["detail"]["ejections"], 2, "{held}");
    let until_ms = held["detail"]["until_ms"].as_u64().unwrap();
    let f = until(&gw, "ws-1 UP", Duration::from_secs(5), |f| node(f, "ws-1")["state"] == "UP").await;
    assert!(node(&f, "ws-1")["held_down_for_ms"].as_u64().is_some_and(|ms| ms > 0 && ms <= 2000), "{f}");
    assert_eq!(node(&f, "ws-1")["recent_ejections"], 2);
    // Its UP streak is long enough well before the hold ends; start-recovery waits for the end.
    let f = until(&gw, "start-recovery after the hold", Duration::from_secs(6), |f| decisions(f, "start_recovery") > recoveries_before).await;
    let first = f["decisions"].as_array().unwrap().iter().rev().find(|d| d["action"] == "start_recovery").unwrap();
    assert!(first["at_ms"].as_u64().unwrap() + 100 >= until_ms, "start-recovery at {} before the hold's end {until_ms}: {first}", first["at_ms"]);
    assert!(first["reason"].as_str().unwrap().contains("hold-down has ended"), "{first}");
}

/// `count` canvases of each partition in `partitions` (of 6).
fn canvases_of(partitions: &[i32], count: usize) -> Vec<String> {
    let mut out = Vec::new();
    for p in partitions {
        let of_p = (0..).map(|i| format!("c{i}")).filter(|c| shared::partitioner::partition_for(c.as_bytes(), 6) as i32 == *p).take(count);
        out.extend(of_p);
    }
    out
}

/// The drains `n` received for scoped partitions, as lists.
fn scoped_drains(n: &FakeNode) -> Vec<Vec<i64>> {
    n.drains.lock().unwrap().iter().filter_map(|d| d["partitions"].as_array().map(|a| a.iter().filter_map(|p| p.as_i64()).collect())).collect()
}

/// A failback in its first round: ws-1 came back with room for 4 of the 9 sessions that ws-2
/// took over (3 on each of partitions 0, 1, 2); partition 0 was drained, 1 and 2 wait.
struct PacedFailback {
    a: FakeNode,
    b: FakeNode,
    gw: String,
    _guards: Vec<tokio_util::sync::DropGuard>,
    _clients: Vec<tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>>,
}

fn with_capacity(mut h: serde_json::Value, max: usize) -> serde_json::Value {
    h["max_sessions"] = max.into();
    h["session_seats"] = 0.into();
    h
}

async fn paced_failback() -> PacedFailback {
    let (a, a_url, ga) = fake("ws-1", health("ws-1", "HEALTHY", &[0, 1, 2], None)).await;
    let (b, b_url, gb) = fake("ws-2", health("ws-2", "HEALTHY", &[3, 4, 5], None)).await;
    let (gw, gg) = gateway(&[(a.id, &a_url), (b.id, &b_url)], &["--failback-grace-ms", "200", "--failback-pace-limit-ms", "60000"]).await;
    until(&gw, "both HEALTHY", Duration::from_secs(5), |f| node(f, "ws-1")["state"] == "HEALTHY" && node(f, "ws-2")["state"] == "HEALTHY").await;
    // ws-1 goes away; ws-2 takes its partitions and its clients.
    *a.health.lock().unwrap() = None;
    *b.health.lock().unwrap() = Some(health("ws-2", "HEALTHY", &[0, 1, 2, 3, 4, 5], None));
    *b.ws.lock().unwrap() = WsAct::Accept;
    until(&gw, "ws-1 DOWN, ws-2 owning all", Duration::from_secs(5), |f| {
        node(f, "ws-1")["state"] == "DOWN" && node(f, "ws-2")["assigned_partitions"].as_array().is_some_and(|p| p.len() == 6)
    })
    .await;
    let ws_base = gw.replacen("http", "ws", 1);
    let mut clients = Vec::new();
    for c in canvases_of(&[0, 1, 2], 3) {
        let (ws, _) = tokio_tungstenite::connect_async(format!("{ws_base}/ws?canvas={c}&since=0")).await.expect("a client through the gateway");
        clients.push(ws);
    }
    until(&gw, "9 sessions proxied to ws-2", Duration::from_secs(5), |f| f["proxied_sessions"] == 9).await;
    *a.health.lock().unwrap() = Some(with_capacity(health("ws-1", "HEALTHY", &[0, 1, 2], None), 4));
    until(&gw, "the failback's first round", Duration::from_secs(10), |f| decisions(f, "failback_paced") >= 1).await;
    assert_eq!(scoped_drains(&b), vec![vec![0]], "the first round drains what fits");
    PacedFailback { a, b, gw, _guards: vec![ga, gb, gg], _clients: clients }
}

#[tokio::test]
async fn a_failback_stops_when_its_target_dies() {
    let p = paced_failback().await;
    let (a, b, gw) = (&p.a, &p.b, &p.gw);
    // ws-1 dies before the next round.
    *a.health.lock().unwrap() = None;
    until(&gw, "the failback to end", Duration::from_secs(20), |f| decisions(f, "failback_failed") + decisions(f, "failback_completed") >= 1).await;
    let f = fleet(&gw).await;
    assert_eq!(decisions(&f, "failback_completed"), 0, "a failback to a dead node did not complete: {f}");
    assert_eq!(scoped_drains(&b), vec![vec![0]], "nothing more was drained towards the dead node");
    assert!(decisions(&f, "failback_paused") >= 1, "the failback paused when its target stopped answering: {f}");
}

#[tokio::test]
async fn a_node_gets_one_failback_at_a_time() {
    let p = paced_failback().await;
    let (a, gw) = (&p.a, &p.gw);
    // ws-1 misses a poll and answers again: it is due a failback again (ws-2, which still reports
    // owning its partitions, was seen owning them while it was out), while the first runs.
    *a.health.lock().unwrap() = None;
    until(&gw, "ws-1 DOWN for a poll", Duration::from_secs(5), |f| node(f, "ws-1")["state"] == "DOWN").await;
    *a.health.lock().unwrap() = Some(with_capacity(health("ws-1", "HEALTHY", &[0, 1, 2], None), 4));
    until(&gw, "ws-1 HEALTHY again", Duration::from_secs(5), |f| node(f, "ws-1")["state"] == "HEALTHY").await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let f = fleet(&gw).await;
    assert_eq!(decisions(&f, "failback_started"), 1, "a second failback to ws-1 started while the first ran: {f}");
}

#[tokio::test]
async fn a_client_that_stops_answering_loses_its_node_seat() {
    let (a, a_url, _a) = fake("ws-1", health("ws-1", "HEALTHY", &[0, 1, 2, 3, 4, 5], None)).await;
    *a.ws.lock().unwrap() = WsAct::Accept;
    let (gw, _g) = gateway(&[(a.id, &a_url)], &["--client-ping-interval-ms", "200"]).await;
    until(&gw, "ws-1 HEALTHY", Duration::from_secs(5), |f| node(f, "ws-1")["state"] == "HEALTHY").await;
    let ws_base = gw.replacen("http", "ws", 1);
    // A client that answers (its stream is read, so tungstenite answers the pings) and one that
    // stops reading and answering, its socket left open.
    let (mut alive, _) = tokio_tungstenite::connect_async(format!("{ws_base}/ws?canvas=c1&since=0")).await.unwrap();
    let (_silent, _) = tokio_tungstenite::connect_async(format!("{ws_base}/ws?canvas=c2&since=0")).await.unwrap();
    let reader = tokio::spawn(async move { while let Some(Ok(_)) = futures::StreamExt::next(&mut alive).await {} });
    assert_eq!(a.open.load(std::sync::atomic::Ordering::SeqCst), 2);
    let deadline = Instant::now() + Duration::from_secs(5);
    while a.open.load(std::sync::atomic::Ordering::SeqCst) > 1 {
        assert!(Instant::now() < deadline, "the silent client still holds its node seat after 5 s (3 pings of 200 ms)");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(a.open.load(std::sync::atomic::Ordering::SeqCst), 1, "the client that answers stays");
    reader.abort();
}


/// `h` with these partitions held, each with its open sessions (partition, sessions).
fn with_partition_sessions(mut h: serde_json::Value, counts: &[(i32, usize)]) -> serde_json::Value {
    let parts: Vec<serde_json::Value> =
        counts.iter().map(|(p, n)| serde_json::json!({"partition": p, "role": "held", "position": 0, "end": null, "lag": null, "sessions": n})).collect();
    h["partitions"] = parts.into();
    h["sessions"] = counts.iter().map(|(_, n)| n).sum::<usize>().into();
    h
}

#[tokio::test]
async fn a_failback_is_paced_on_the_sessions_the_nodes_count() {
    let (a, a_url, _ga) = fake("ws-1", health("ws-1", "HEALTHY", &[0, 1, 2], None)).await;
    let (b, b_url, _gb) = fake("ws-2", health("ws-2", "HEALTHY", &[3, 4, 5], None)).await;
    let (gw, _gg) = gateway(&[(a.id, &a_url), (b.id, &b_url)], &["--failback-grace-ms", "3000", "--failback-pace-limit-ms", "60000"]).await;
    until(&gw, "both HEALTHY", Duration::from_secs(5), |f| node(f, "ws-1")["state"] == "HEALTHY" && node(f, "ws-2")["state"] == "HEALTHY").await;
    // ws-1 goes away; ws-2 takes its partitions and serves 60 of their sessions, proxied by other
    // gateway replicas: this one proxies none of them.
    *a.health.lock().unwrap() = None;
    *b.health.lock().unwrap() = Some(with_partition_sessions(health("ws-2", "HEALTHY", &[0, 1, 2, 3, 4, 5], None), &[(1, 30), (2, 30)]));
    until(&gw, "ws-1 DOWN, ws-2 owning all", Duration::from_secs(5), |f| {
        node(f, "ws-1")["state"] == "DOWN" && node(f, "ws-2")["assigned_partitions"].as_array().is_some_and(|p| p.len() == 6)
    })
    .await;
    // ws-1 comes back with room for 40.
    *a.health.lock().unwrap() = Some(with_capacity(health("ws-1", "HEALTHY", &[0, 1, 2], None), 40));
    let f = until(&gw, "the failback's first round", Duration::from_secs(10), |f| decisions(f, "failback_paced") + decisions(f, "failback_completed") >= 1).await;
    assert_eq!(scoped_drains(&b), vec![vec![0, 1]], "the first round drains only what fits by the stand-in's count: {f}");
    // Partition 1's 30 sessions arrive at ws-1 through other replicas (and it has room for the
    // rest): the next round goes on by ws-1's own count, well before the wait for them runs out
    // (grace 3 s + 5 s).
    *b.health.lock().unwrap() = Some(with_partition_sessions(health("ws-2", "HEALTHY", &[0, 1, 2, 3, 4, 5], None), &[(1, 0), (2, 30)]));
    let mut back = with_capacity(health("ws-1", "HEALTHY", &[0, 1, 2], None), 70);
    (back["sessions"], back["session_seats"]) = (30.into(), 30.into());
    *a.health.lock().unwrap() = Some(back);
    let deadline = Instant::now() + Duration::from_secs(4);
    while scoped_drains(&b).len() < 2 {
        assert!(Instant::now() < deadline, "the second round waited although ws-1 reported the sessions arrived: {:?}", scoped_drains(&b));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(scoped_drains(&b), vec![vec![0, 1], vec![2]]);
}

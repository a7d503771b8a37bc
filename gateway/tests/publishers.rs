//! The gateway in-process (`gateway::run` on 127.0.0.1:0) in front of two tiny HTTP servers
//! posing as publishers: a request moves to the next publisher only when the answer proves that
//! nothing was applied, and an ambiguous one is never sent twice.

#[path = "support/serve.rs"]
mod support;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use clap::Parser;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The gateway's forwarding timeout in these tests, ms.
const TIMEOUT_MS: u64 = 300;

/// How a fake publisher answers `POST /canvases/{id}/pixels`.
#[derive(Debug, Clone, Copy)]
enum Act {
    /// 201 with a version, the `Idempotency-Key` it got echoed, `Idempotent-Replayed: true`.
    Accept,
    /// 503 `fenced` + `Retry-After: 2`: a newer publisher took over.
    Fenced,
    /// 503 `not_ready` + `Retry-After: 1`: still rebuilding.
    NotReady,
    /// 503 `kafka_outcome_unknown`: it may have landed.
    OutcomeUnknown,
    /// No answer for 5 s (far past the gateway's timeout).
    Hang,
}

#[derive(Clone)]
struct FakeState {
    act: Act,
    ready: bool,
    writes: Arc<AtomicUsize>,
}

/// A fake publisher: its URL and how many publishes reached it.
struct Fake {
    url: String,
    writes: Arc<AtomicUsize>,
    _stop: tokio_util::sync::DropGuard,
}

impl Fake {
    fn writes(&self) -> usize {
        self.writes.load(Ordering::SeqCst)
    }
}

fn error(status: StatusCode, code: &str, retry_after: u64) -> Response {
    let mut r = (status, Json(serde_json::json!({"error": code, "message": format!("fake publisher: {code}")}))).into_response();
    r.headers_mut().insert("retry-after", retry_after.into());
    r
}

async fn pixel(State(s): State<FakeState>, headers: HeaderMap) -> Response {
    s.writes.fetch_add(1, Ordering::SeqCst);
    match s.act {
        Act::Accept => {
            let key = headers.get("idempotency-key").and_then(|v| v.to_str().ok()).map(str::to_owned);
            let auth = headers.get("authorization").and_then(|v| v.to_str().ok()).map(str::to_owned);
            let mut r = (StatusCode::CREATED, Json(serde_json::json!({"canvas": "c1", "version": 7, "key": key, "auth": auth}))).into_response();
            r.headers_mut().insert("idempotent-replayed", "true".parse().unwrap());
            r
        }
        Act::Fenced => error(StatusCode::SERVICE_UNAVAILABLE, "fenced", 2),
        Act::NotReady => error(StatusCode::SERVICE_UNAVAILABLE, "not_ready", 1),
        Act::OutcomeUnknown => error(StatusCode::SERVICE_UNAVAILABLE, "kafka_outcome_unknown", 1),
        Act::Hang => {
            tokio::time::sleep(Duration::from_secs(5)).await;
            (StatusCode::CREATED, Json(serde_json::json!({"version": 1}))).into_response()
        }
    }
}

async fn ready(State(s): State<FakeState>) -> Response {
    if s.ready { Json(serde_json::json!({"ready": true})).into_response() } else { error(StatusCode::SERVICE_UNAVAILABLE, "not_ready", 1) }
}

/// A fake publisher acting `act`; its `/ready` answers 200 when `ready` (a fenced publisher says
/// ready until it learns it was fenced, which keeps it the one tried first here).
async fn fake(act: Act, ready_flag: bool) -> Fake {
    let writes = Arc::new(AtomicUsize::new(0));
    let state = FakeState { act, ready: ready_flag, writes: writes.clone() };
    let app = Router::new()
        .route("/canvases/{id}/pixels", post(pixel))
        .route("/canvases/{id}", get(|| async { Json(serde_json::json!({"canvas": "c1", "version": 7, "hash": "h"})) }))
        .route("/ready", get(ready))
        .with_state(state);
    let (url, guard) = support::on_loopback(app).await;
    Fake { url, writes, _stop: guard }
}

/// An address nothing listens on (connect refused).
async fn closed_url() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    format!("http://{}", listener.local_addr().unwrap())
}

/// The admin token of the gateways of these tests.
const ADMIN_TOKEN: &str = "gateway-test-admin-token";

/// The gateway in front of `publishers`, with a short forwarding timeout; its base URL.
async fn gateway(publishers: &[&str]) -> (String, tokio_util::sync::DropGuard) {
    shared::telemetry::init();
    let list = publishers.join(",");
    let timeout = TIMEOUT_MS.to_string();
    let config = gateway::config::Config::try_parse_from([
        "gateway",
        "--nodes",
        "ws-1=http://127.0.0.1:1",
        "--publisher-url",
        &list,
        "--publisher-timeout-ms",
        &timeout,
        "--poll-interval-ms",
        "200",
        "--poll-timeout-ms",
        "150",
        // With a token the admin API is on this listener: no loopback listener on a fixed port
        // for the tests running side by side to share.
        "--admin-token",
        ADMIN_TOKEN,
    ])
    .unwrap();
    assert!(config.problems().is_empty(), "{:?}", config.problems());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let shutdown = CancellationToken::new();
    tokio::spawn(gateway::run(config, listener, shutdown.clone()));
    (url, shutdown.drop_guard())
}

/// `POST /api/canvases/c1/pixels` with an idempotency key: status, `Retry-After`, JSON body.
async fn publish(gw: &str) -> (StatusCode, Option<String>, serde_json::Value) {
    let resp = reqwest::Client::new()
        .post(format!("{gw}/api/canvases/c1/pixels"))
        .header("idempotency-key", "k-1")
        .json(&serde_json::json!({"x": 1, "y": 2, "color": "#ff0000"}))
        .send()
        .await
        .unwrap();
    let status = StatusCode::from_u16(resp.status().as_u16()).unwrap();
    let retry = resp.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned());
    (status, retry, resp.json().await.unwrap())
}

async fn publishers_view(gw: &str) -> Vec<serde_json::Value> {
    let f: serde_json::Value =
        reqwest::Client::new().get(format!("{gw}/api/fleet")).bearer_auth(ADMIN_TOKEN).send().await.unwrap().json().await.unwrap();
    f["publishers"].as_array().cloned().unwrap()
}

/// Waits (at most 5 s) until `/api/fleet` names `url` the preferred publisher.
async fn wait_preferred(gw: &str, url: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let list = publishers_view(gw).await;
        if list.iter().any(|p| p["url"] == url && p["preferred"] == true) {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "{url} never became preferred: {list:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_fenced_publisher_s_request_goes_to_the_next_one_once() {
    let (first, second) = (fake(Act::Fenced, true).await, fake(Act::Accept, true).await);
    let (gw, _g) = gateway(&[&first.url, &second.url]).await;
    let (status, _, body) = publish(&gw).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!((body["version"].as_u64(), body["key"].as_str()), (Some(7), Some("k-1")), "the second's answer, the key passed on");
    assert_eq!((first.writes(), second.writes()), (1, 1));
    // The one that accepted the write is preferred now: the next publish goes straight to it.
    wait_preferred(&gw, &second.url).await;
    let (status, _, _) = publish(&gw).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!((first.writes(), second.writes()), (1, 2));
    let list = publishers_view(&gw).await;
    assert_eq!(list.len(), 2);
    assert_eq!((list[0]["url"].as_str(), list[0]["preferred"].as_bool()), (Some(first.url.as_str()), Some(false)), "{list:?}");
}

#[tokio::test]
async fn a_publisher_that_refuses_connections_is_skipped() {
    let closed = closed_url().await;
    let second = fake(Act::Accept, false).await;
    let (gw, _g) = gateway(&[&closed, &second.url]).await;
    let resp = reqwest::Client::new()
        .post(format!("{gw}/api/canvases/c1/pixels"))
        .header("idempotency-key", "k-1")
        .json(&serde_json::json!({"x": 1, "y": 2, "color": "#ff0000"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 201);
    assert_eq!(resp.headers().get("idempotent-replayed").map(|v| v.as_bytes()), Some(&b"true"[..]), "answer headers passed back");
    assert_eq!(second.writes(), 1);
    // Reads go the same way.
    let canvas: serde_json::Value = reqwest::get(format!("{gw}/api/canvases/c1")).await.unwrap().json().await.unwrap();
    assert_eq!(canvas["version"], 7, "{canvas}");
}

#[tokio::test]
async fn a_publisher_that_times_out_is_not_skipped_the_client_gets_504() {
    let (first, second) = (fake(Act::Hang, true).await, fake(Act::Accept, true).await);
    let (gw, _g) = gateway(&[&first.url, &second.url]).await;
    let started = std::time::Instant::now();
    let (status, _, body) = publish(&gw).await;
    assert_eq!((status, body["error"].as_str()), (StatusCode::GATEWAY_TIMEOUT, Some("publisher_outcome_unknown")), "{body}");
    assert!(started.elapsed() < Duration::from_secs(3), "answered after the gateway's timeout, not the publisher's sleep");
    assert!(body["message"].as_str().unwrap().contains(&first.url), "{body}");
    assert_eq!((first.writes(), second.writes()), (1, 0), "an ambiguous request is never sent to another publisher");
}

#[tokio::test]
async fn an_unknown_kafka_outcome_is_passed_through_and_not_sent_again() {
    let (first, second) = (fake(Act::OutcomeUnknown, true).await, fake(Act::Accept, true).await);
    let (gw, _g) = gateway(&[&first.url, &second.url]).await;
    let (status, retry, body) = publish(&gw).await;
    assert_eq!((status, body["error"].as_str(), retry.as_deref()), (StatusCode::SERVICE_UNAVAILABLE, Some("kafka_outcome_unknown"), Some("1")));
    assert_eq!((first.writes(), second.writes()), (1, 0));
}

#[tokio::test]
async fn when_every_publisher_refuses_the_last_refusal_is_the_answer() {
    let (first, second) = (fake(Act::NotReady, true).await, fake(Act::Fenced, true).await);
    let closed = closed_url().await;
    let (gw, _g) = gateway(&[&first.url, &second.url, &closed]).await;
    let (status, retry, body) = publish(&gw).await;
    assert_eq!((status, body["error"].as_str(), retry.as_deref()), (StatusCode::SERVICE_UNAVAILABLE, Some("fenced"), Some("2")), "{body}");
    assert_eq!((first.writes(), second.writes()), (1, 1));

    let (a, b) = (closed_url().await, closed_url().await);
    let (gw, _g) = gateway(&[&a, &b]).await;
    let (status, retry, body) = publish(&gw).await;
    assert_eq!((status, body["error"].as_str(), retry.as_deref()), (StatusCode::SERVICE_UNAVAILABLE, Some("publisher_unavailable"), Some("1")), "{body}");
}

#[tokio::test]
async fn the_probe_prefers_the_publisher_whose_ready_answers_200() {
    let (first, second) = (fake(Act::NotReady, false).await, fake(Act::Accept, true).await);
    let (gw, _g) = gateway(&[&first.url, &second.url]).await;
    wait_preferred(&gw, &second.url).await;
    let (status, _, _) = publish(&gw).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!((first.writes(), second.writes()), (0, 1), "the preferred one is tried first");
    let list = publishers_view(&gw).await;
    assert_eq!((list[0]["ready"].as_bool(), list[1]["ready"].as_bool()), (Some(false), Some(true)), "{list:?}");
    assert_eq!((list[0]["state"].as_str(), list[1]["state"].as_str()), (Some("not_ready"), Some("ready")), "{list:?}");
    assert!(list[0]["last_error"].as_str().unwrap_or_default().contains("503"), "{list:?}");
}

#[tokio::test]
async fn the_admin_api_needs_the_token_and_the_fleet_view_hides_addresses_without_it() {
    let publisher = fake(Act::Accept, true).await;
    let (gw, _g) = gateway(&[&publisher.url]).await;
    let http = reqwest::Client::new();
    // The client's own token goes on to the publisher with the publish.
    let r = http.post(format!("{gw}/api/canvases/c1/pixels")).bearer_auth("client-jwt").json(&serde_json::json!({"x": 1, "y": 1, "color": "#ffffff"})).send().await.unwrap();
    assert_eq!(r.status(), 201);
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["auth"], "Bearer client-jwt");
    // Without the admin token (or with a wrong one): states stay, addresses and errors go.
    for token in [None, Some("wrong")] {
        let mut req = http.get(format!("{gw}/api/fleet"));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let f: serde_json::Value = req.send().await.unwrap().json().await.unwrap();
        let node = &f["nodes"][0];
        assert_eq!(node["id"], "ws-1", "{f}");
        assert!(node.get("state").is_some() && node.get("url").is_none() && node.get("last_error").is_none(), "{f}");
        assert_eq!(f["publishers"][0]["url"], "publisher-1", "{f}");
        assert!(!f.to_string().contains("127.0.0.1"), "{f}");
    }
    let full = publishers_view(&gw).await;
    assert_eq!(full[0]["url"].as_str(), Some(publisher.url.as_str()));
    // The drain needs the token: 401 without it or with a wrong one, with the JSON body.
    let drain = format!("{gw}/api/fleet/nodes/ws-1/drain");
    let r = http.post(&drain).send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert!(r.headers()["www-authenticate"].to_str().unwrap().starts_with("Bearer"));
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["error"], "missing_token");
    let r = http.post(&drain).bearer_auth("wrong").send().await.unwrap();
    assert_eq!((r.status().as_u16(), r.json::<serde_json::Value>().await.unwrap()["error"].clone()), (401, serde_json::json!("invalid_token")));
    // With it the gateway tries the node (which does not exist here): not a 401.
    let r = http.post(&drain).bearer_auth(ADMIN_TOKEN).json(&serde_json::json!({})).send().await.unwrap();
    assert_ne!(r.status(), 401);
}

/// A standby publisher: `/ready` and writes answer 503 `standby` until a `POST /admin/promote`
/// it answers with 200 (then 200 and 201); each promotion request is kept.
#[derive(Clone)]
struct StandbyState {
    /// The status `POST /admin/promote` answers: 200 (promoted), 202 (promoted a moment
    /// later) or 409 (`not_standby`: it stays as it is).
    answer: u16,
    active: Arc<std::sync::atomic::AtomicBool>,
    promotions: Arc<std::sync::Mutex<Vec<(std::time::Instant, HeaderMap, serde_json::Value)>>>,
}

struct Standby {
    url: String,
    state: StandbyState,
    _stop: tokio_util::sync::DropGuard,
}

impl Standby {
    fn promotions(&self) -> Vec<(std::time::Instant, HeaderMap, serde_json::Value)> {
        self.state.promotions.lock().unwrap().clone()
    }
}

async fn standby_publisher(answer: u16) -> Standby {
    let state = StandbyState { answer, active: Arc::default(), promotions: Arc::default() };
    let refuse = || error(StatusCode::SERVICE_UNAVAILABLE, "standby", 1);
    let app = Router::new()
        .route(
            "/ready",
            get(move |State(s): State<StandbyState>| async move {
                if s.active.load(Ordering::SeqCst) { Json(serde_json::json!({"ready": true})).into_response() } else { refuse() }
            }),
        )
        .route(
            "/canvases/{id}/pixels",
            post(move |State(s): State<StandbyState>| async move {
                if s.active.load(Ordering::SeqCst) { (StatusCode::CREATED, Json(serde_json::json!({"version": 1}))).into_response() } else { refuse() }
            }),
        )
        .route(
            "/admin/promote",
            post(|State(s): State<StandbyState>, headers: HeaderMap, Json(body): Json<serde_json::Value>| async move {
                s.promotions.lock().unwrap().push((std::time::Instant::now(), headers, body));
                match s.answer {
                    200 => {
                        s.active.store(true, Ordering::SeqCst);
                        Json(serde_json::json!({"active": true})).into_response()
                    }
                    202 => {
                        let active = s.active.clone();
                        tokio::spawn(async move {
                            tokio::time::sleep(Duration::from_millis(300)).await;
                            active.store(true, Ordering::SeqCst);
                        });
                        (StatusCode::ACCEPTED, Json(serde_json::json!({"active": false, "promoting": true}))).into_response()
                    }
                    _ => error(StatusCode::CONFLICT, "not_standby", 0),
                }
            }),
        )
        .with_state(state.clone());
    let (url, guard) = support::on_loopback(app).await;
    Standby { url, state, _stop: guard }
}

/// The decisions of `/api/fleet` (newest first) with `action`.
async fn decisions_of(gw: &str, action: &str) -> Vec<serde_json::Value> {
    let f: serde_json::Value =
        reqwest::Client::new().get(format!("{gw}/api/fleet")).bearer_auth(ADMIN_TOKEN).send().await.unwrap().json().await.unwrap();
    f["decisions"].as_array().unwrap().iter().filter(|d| d["action"] == action).cloned().collect()
}

#[tokio::test]
async fn a_standby_is_promoted_after_three_probes_without_a_ready_publisher() {
    for answer in [200, 202] {
        let (dead, standby) = (closed_url().await, standby_publisher(answer).await);
        let started = std::time::Instant::now();
        let (gw, _g) = gateway(&[&dead, &standby.url]).await;
        wait_preferred(&gw, &standby.url).await;
        let promotions = standby.promotions();
        assert_eq!(promotions.len(), 1, "{answer}: one promotion");
        let (at, headers, body) = &promotions[0];
        // Probes at 0, 200 and 400 ms at the earliest: the third miss.
        assert!(at.duration_since(started) >= Duration::from_millis(400), "{answer}: promoted after {:?}", at.duration_since(started));
        assert_eq!(headers["authorization"], format!("Bearer {ADMIN_TOKEN}").as_str());
        assert_eq!(headers["content-type"], "application/json");
        assert!(headers.get("x-decision-id").is_some() && headers.get("x-fencing-token").is_none(), "standalone: a decision id, no token: {headers:?}");
        assert_eq!(*body, serde_json::json!({}));
        let decided = decisions_of(&gw, "promote_publisher").await;
        assert_eq!(decided.len(), 1, "{decided:?}");
        let d = &decided[0];
        assert_eq!((d["node"].as_str(), d["id"].as_str()), (Some(standby.url.as_str()), headers["x-decision-id"].to_str().ok()), "{d}");
        assert_eq!((d["detail"]["misses"].as_u64(), &d["detail"]["states"]), (Some(3), &serde_json::json!(["unreachable", "standby"])), "{d}");
        assert!(d["reason"].as_str().unwrap().starts_with("no publisher accepted writes in the last 3 polls"), "{d}");
        let done = decisions_of(&gw, "promote_publisher_completed").await;
        assert_eq!((done.len(), done[0]["of"].as_str(), done[0]["detail"]["promoting"].as_bool()), (1, d["id"].as_str(), Some(answer == 202)), "{done:?}");
        let list = publishers_view(&gw).await;
        assert_eq!((list[0]["state"].as_str(), list[1]["state"].as_str()), (Some("unreachable"), Some("ready")), "{list:?}");
        let (status, _, _) = publish(&gw).await;
        assert_eq!(status, StatusCode::CREATED, "{answer}: the promoted one takes writes");
        // Without the admin token the decisions name the publisher, not its address.
        let f: serde_json::Value = reqwest::get(format!("{gw}/api/fleet")).await.unwrap().json().await.unwrap();
        assert!(!f.to_string().contains("127.0.0.1"), "{f}");
        let d = f["decisions"].as_array().unwrap().iter().find(|d| d["action"] == "promote_publisher").cloned().unwrap();
        assert_eq!((d["node"].as_str(), d["detail"]["publisher"].as_str()), (Some("publisher-2"), Some("publisher-2")), "{d}");
    }
}

#[tokio::test]
async fn a_refused_promotion_is_tried_again_only_after_three_more_misses() {
    let (dead, standby) = (closed_url().await, standby_publisher(409).await);
    let (gw, _g) = gateway(&[&dead, &standby.url]).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while standby.promotions().len() < 2 {
        assert!(tokio::time::Instant::now() < deadline, "no second attempt: {:?}", standby.promotions().len());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let p = standby.promotions();
    let gap = p[1].0.duration_since(p[0].0);
    assert!(gap >= Duration::from_millis(550), "three more probes of 200 ms between the attempts, not {gap:?}");
    let failed = decisions_of(&gw, "promote_publisher_failed").await;
    assert!(!failed.is_empty(), "{failed:?}");
    assert_eq!((failed[0]["detail"]["status"].as_u64(), failed[0]["detail"]["code"].as_str()), (Some(409), Some("not_standby")), "{failed:?}");
    assert!(failed[0]["reason"].as_str().unwrap().contains("not_standby"), "{failed:?}");

    // With a publisher that accepts writes, a standby is left alone.
    let (active, standby) = (fake(Act::Accept, true).await, standby_publisher(200).await);
    let (gw, _g) = gateway(&[&active.url, &standby.url]).await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(standby.promotions().is_empty());
    let list = publishers_view(&gw).await;
    assert_eq!((list[0]["state"].as_str(), list[1]["state"].as_str()), (Some("ready"), Some("standby")), "{list:?}");
}

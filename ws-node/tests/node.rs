//! A node in-process against librdkafka's mock cluster, driven over real HTTP and WebSocket:
//! readiness, catch-up, resume, drains.

use futures::StreamExt;
use rdkafka::producer::FutureRecord;
use shared::partitioner::partition_for;
use shared::protocol::ServerMessage;
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::Message;
use ws_node::config::Config;

// Not every helper of the shared harness is used here.
#[path = "support/harness.rs"]
#[allow(dead_code)]
mod harness;
use harness::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuses_sessions_until_recovered_then_replays_what_it_missed() {
    let mut h = Harness::start(|_| {}).await;
    for _ in 0..5 {
        h.publish("a").await;
    }
    for _ in 0..3 {
        h.publish("b").await;
    }
    let health = h.health().await;
    assert_eq!((health["state"].as_str(), health["ready"].as_bool()), (Some("UP"), Some(false)));
    let (status, body, retry) = h.connect("a", 0).await.expect_err("refused before recovery");
    assert_eq!((status, body["error"].as_str(), retry.as_deref()), (503, Some("not_ready"), Some("1")));
    let (status, body, _) = h.connect("bad%20id", 0).await.expect_err("bad canvas refused");
    assert_eq!((status, body["field"].as_str()), (400, Some("canvas")));

    let health = h.recover().await;
    assert_eq!(health["catchup"]["status"], "completed");
    assert_eq!(health["catchup"]["replay_count"], 8, "{health}");
    // Targets are the partitions' ends (no transactions here: the high watermarks); the last
    // consumed offset of each replayed partition is one less, and the position reached the target.
    for (p, target) in health["catchup"]["target_offsets"].as_object().unwrap() {
        let target = target.as_i64().unwrap();
        if target > 0 {
            assert_eq!(health["catchup"]["last_consumed_offsets"][p].as_i64(), Some(target - 1), "{health}");
        }
        assert!(health["catchup"]["positions"][p].as_i64().is_some_and(|pos| pos >= target), "{health}");
    }
    let (status, again) = h.post("/admin/start-recovery", serde_json::json!({})).await;
    assert_eq!((status, again["outcome"].as_str()), (200, Some("already_ready")));

    // A new client gets a welcome naming the node, a snapshot of version 5, then live events; a
    // resuming one gets events.
    let mut fresh = h.connect("a", 0).await.expect("served");
    match next_frame(&mut fresh).await.unwrap() {
        ServerMessage::Welcome { node, canvas, since: 0, epoch: Some(_), .. } => assert_eq!((node.as_str(), canvas.as_deref()), ("ws-test", Some("a"))),
        other => panic!("expected a welcome naming the node and the epoch, got {other:?}"),
    }
    assert!(matches!(next(&mut fresh).await.unwrap(), ServerMessage::Snapshot { version: 5, .. }));
    let mut resumed = h.connect("a", 2).await.expect("served");
    for want in 3..=5 {
        assert_eq!(version(&next(&mut resumed).await.unwrap()), want);
    }
    for _ in 0..3 {
        h.publish("a").await;
    }
    for want in 6..=8 {
        assert_eq!(version(&next(&mut fresh).await.unwrap()), want);
        assert_eq!(version(&next(&mut resumed).await.unwrap()), want);
    }
    h.stop().await;
}

/// The welcome's epoch, after checking its shape: the topic's ID (not the zero one) and reset 0.
async fn welcome_epoch(ws: &mut Ws, want_since: u64) -> shared::epoch::Epoch {
    match next_frame(ws).await.unwrap() {
        ServerMessage::Welcome { since, epoch: Some(epoch), .. } => {
            assert_eq!(since, want_since, "the backlog starts after {want_since}");
            let (topic_id, resets) = epoch.as_str().rsplit_once('-').expect("<topic id>-<resets>");
            assert_eq!((topic_id.len(), resets), (22, "0"), "{epoch}");
            assert_ne!(topic_id, shared::epoch::ZERO_TOPIC_ID, "the mock cluster's topic has an id");
            epoch
        }
        other => panic!("expected a welcome with an epoch, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_epoch_gets_a_snapshot_and_the_current_one_resumes_by_events() {
    let mut h = Harness::start(|c| c.behind_wait_ms = 300).await;
    for _ in 0..5 {
        h.publish("a").await;
    }
    h.recover().await;
    let mut first = h.connect("a", 0).await.expect("served");
    let epoch = welcome_epoch(&mut first, 0).await;
    assert!(matches!(next(&mut first).await.unwrap(), ServerMessage::Snapshot { version: 5, .. }));

    // The same epoch: the events after since, nothing else.
    let mut same = h.connect_with(&format!("canvas=a&since=2&epoch={epoch}")).await.expect("served");
    assert_eq!(welcome_epoch(&mut same, 2).await, epoch);
    for want in 3..=5 {
        assert!(matches!(next(&mut same).await.unwrap(), ServerMessage::Event(e) if e.version == want));
    }

    // Another topic's epoch (as after the topic was deleted and created again): a snapshot of this
    // history, never its events 3..5 on top of the client's own version 2.
    let stale = shared::epoch::Epoch::of("AAAAAAAAAAAAAAAAAAAAAQ", 0);
    let mut other = h.connect_with(&format!("canvas=a&since=2&epoch={stale}")).await.expect("served");
    assert_eq!(welcome_epoch(&mut other, 0).await, epoch, "the welcome names the current epoch to keep");
    assert!(matches!(next(&mut other).await.unwrap(), ServerMessage::Snapshot { version: 5, .. }));

    // Ahead of this node in another history is no reason to wait or refuse: a snapshot at once.
    let started = Instant::now();
    let mut ahead = h.connect_with(&format!("canvas=a&since=40&epoch={stale}")).await.expect("served, not 503 behind");
    assert!(started.elapsed() < Duration::from_millis(300), "did not wait for version 40");
    assert_eq!(welcome_epoch(&mut ahead, 0).await, epoch);
    assert!(matches!(next(&mut ahead).await.unwrap(), ServerMessage::Snapshot { version: 5, .. }));
    // ...but ahead in this epoch still is.
    let (status, body, _) = h.connect_with(&format!("canvas=a&since=40&epoch={epoch}")).await.expect_err("refused");
    assert_eq!((status, body["error"].as_str()), (503, Some("behind")));
    let (status, body, _) = h.connect_with("canvas=a&since=1&epoch=not%20one").await.expect_err("refused");
    assert_eq!((status, body["field"].as_str()), (400, Some("epoch")));

    // Live events reach every session, each after its own backlog.
    let v = h.publish("a").await;
    for ws in [&mut first, &mut same, &mut other, &mut ahead] {
        assert!(matches!(next(ws).await.unwrap(), ServerMessage::Event(e) if e.version == v));
    }
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_ahead_of_the_node_waits_then_gets_503_behind() {
    let mut h = Harness::start(|c| c.behind_wait_ms = 300).await;
    h.publish("a").await;
    h.recover().await;
    let started = Instant::now();
    let (status, body, retry) = h.connect("a", 7).await.expect_err("refused");
    assert_eq!((status, body["error"].as_str(), retry.is_some()), (503, Some("behind"), true));
    assert!(started.elapsed() >= Duration::from_millis(300), "did not wait for the state to catch up");
    // Held while the node catches up: published during the wait, served as events.
    h.publish("a").await;
    let mut ws = h.connect("a", 1).await.expect("served");
    assert_eq!(version(&next(&mut ws).await.unwrap()), 2);
    h.stop().await;
}

/// The `sessions` of each partition in a `/health` body.
fn partition_sessions(health: &serde_json::Value) -> std::collections::BTreeMap<i32, u64> {
    health["partitions"].as_array().unwrap().iter().map(|p| (p["partition"].as_i64().unwrap() as i32, p["sessions"].as_u64().unwrap())).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_drain_hands_over_only_the_held_partitions_it_names() {
    // Holds last long enough for the drain below to find them.
    let mut h = Harness::start(|c| c.revoke_hold_ms = 60_000).await;
    // One channel on each partition.
    let canvases: Vec<String> = (0..PARTITIONS)
        .map(|p| (0..1000).map(|i| format!("c{i}")).find(|c| partition_for(c.as_bytes(), PARTITIONS as u32) as i32 == p).unwrap())
        .collect();
    for c in &canvases {
        h.publish(c).await;
    }
    h.recover().await;
    let mut clients = Vec::new();
    for c in &canvases {
        clients.push(h.connect(c, 1).await.expect("served"));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let counts = partition_sessions(&h.health().await);
    assert!((0..PARTITIONS).all(|p| counts.get(&p) == Some(&1)), "each partition counts its session: {counts:?}");
    let (http, url) = (h.http.clone(), h.url.clone());
    let drain = move |partitions: Vec<i32>| {
        let (http, url) = (http.clone(), url.clone());
        tokio::spawn(async move {
            let r = http
                .post(format!("{url}/admin/drain"))
                .json(&serde_json::json!({"reason": "FAILBACK_TO_RECOVERED_SERVER", "grace_ms": 500, "partitions": partitions}))
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.json::<serde_json::Value>().await.unwrap())
        })
    };

    // An owned partition named in a drain is refused: its sessions would come straight back here.
    let (status, report) = drain(vec![0]).await.unwrap();
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["refused_partitions"], serde_json::json!([0]), "{report}");
    assert_eq!(report["notified_sessions"].as_u64(), Some(0), "{report}");
    let v = h.publish(&canvases[0]).await;
    assert_eq!(version(&next(&mut clients[0]).await.unwrap()), v, "the owned partition's session keeps its events");

    // A second node joins the group and takes some partitions: this node holds them.
    let _peer = h.join("ws-peer").await;
    let health = h
        .wait_health("some partitions held after the second node joined", |h| {
            h["partitions"].as_array().is_some_and(|ps| ps.iter().any(|p| p["role"] == "held"))
        })
        .await;
    let role_of = |p: i32| health["partitions"].as_array().unwrap().iter().find(|e| e["partition"] == p).map(|e| e["role"].as_str().unwrap_or("").to_owned());
    let held: Vec<i32> = (0..PARTITIONS).filter(|p| role_of(*p).as_deref() == Some("held")).collect();
    let kept: Vec<i32> = (0..PARTITIONS).filter(|p| !held.contains(p)).collect();
    assert!(!kept.is_empty(), "with two members this node keeps a partition: {health}");

    // A drain naming every partition hands over only the held ones' sessions.
    let pending = drain(vec![0, 1, 2]);
    for p in &held {
        match next(&mut clients[*p as usize]).await.unwrap() {
            ServerMessage::Reconnect { reason, retry_after_ms } => {
                assert_eq!(reason.as_str(), "FAILBACK_TO_RECOVERED_SERVER");
                // A scoped drain paces the notices themselves: each says "now".
                assert_eq!(retry_after_ms, 0);
            }
            other => panic!("expected a reconnect notice on held partition {p}, got {other:?}"),
        }
        // This client ignores the notice: it is closed with 1012 after the grace period.
        assert_eq!(next(&mut clients[*p as usize]).await.err(), Some(Some(1012)));
    }
    let (status, report) = pending.await.unwrap();
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["refused_partitions"], serde_json::json!(kept), "{report}");
    assert_eq!((report["notified_sessions"].as_u64(), report["force_closed_sessions"].as_u64()), (Some(held.len() as u64), Some(held.len() as u64)), "{report}");
    let counts = partition_sessions(&h.health().await);
    assert!(held.iter().all(|p| counts.get(p).copied().unwrap_or(0) == 0), "the held partitions' sessions left: {counts:?}");
    assert!(kept.iter().all(|p| counts.get(p) == Some(&1)), "the kept partitions' sessions stay: {counts:?}");
    // The kept partitions' sessions are untouched and keep getting events.
    for p in &kept {
        let v = h.publish(&canvases[*p as usize]).await;
        assert_eq!(version(&next(&mut clients[*p as usize]).await.unwrap()), v, "partition {p} kept its session");
    }
    assert_eq!(h.health().await["state"], "HEALTHY");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_drain_ends_up_and_recovery_brings_the_node_back_with_its_state() {
    let mut h = Harness::start(|_| {}).await;
    for _ in 0..4 {
        h.publish("a").await;
    }
    h.recover().await;
    let mut ws = h.connect("a", 4).await.expect("served");
    let drain = {
        let (http, url) = (h.http.clone(), h.url.clone());
        tokio::spawn(async move {
            let r = http.post(format!("{url}/admin/drain")).json(&serde_json::json!({"reason": "MAINTENANCE", "grace_ms": 2000})).send().await.unwrap();
            (r.status().as_u16(), r.json::<serde_json::Value>().await.unwrap())
        })
    };
    assert!(matches!(next(&mut ws).await.unwrap(), ServerMessage::Reconnect { .. }));
    let health = h.health().await;
    assert_eq!((health["state"].as_str(), health["draining"].as_bool()), (Some("DRAINING"), Some(true)));
    let (status, body, _) = h.connect("a", 4).await.expect_err("refused while draining");
    assert_eq!((status, body["error"].as_str()), (503, Some("draining")));
    drop(ws); // the client leaves: the drain ends before the grace period
    let (status, report) = drain.await.unwrap();
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["force_closed_sessions"], 0);
    let (status, _) = h.post("/admin/drain", serde_json::json!({"reason": "MAINTENANCE", "grace_ms": 99999999})).await;
    assert_eq!(status, 400);
    let health = h.wait_health("UP after the drain", |h| h["state"] == "UP").await;
    assert_eq!(health["assigned_partitions"].as_array().map(|a| a.len()), Some(0), "left the group: {health}");
    assert_eq!(health["catchup"]["status"], "idle");
    // Recovery again: only what was published meanwhile is replayed (the state was kept).
    h.publish("a").await;
    let health = h.recover().await;
    assert_eq!(health["catchup"]["replay_count"], 1, "{health}");
    let mut ws = h.connect("a", 4).await.expect("served again");
    assert_eq!(version(&next(&mut ws).await.unwrap()), 5);
    h.stop().await;
}

/// A free loopback port (bound and released; the node binds it right after).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_routes_need_the_admin_token() {
    let h = Harness::start(|_| {}).await;
    let plain = reqwest::Client::new();
    let url = format!("{}/admin/start-recovery", h.url);
    let r = plain.post(&url).send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert!(r.headers()["www-authenticate"].to_str().unwrap().starts_with("Bearer"));
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["error"], "missing_token");
    let r = plain.post(&url).bearer_auth("not-the-token").send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["error"], "invalid_token");
    let r = plain.post(format!("{}/admin/drain", h.url)).json(&serde_json::json!({"reason": "MAINTENANCE"})).send().await.unwrap();
    assert_eq!(r.status(), 401);
    // The token is checked first; with it, a POST must still be declared JSON and carry no Origin.
    let r = h.http.post(&url).send().await.unwrap();
    assert_eq!(r.status(), 415);
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["error"], "unsupported_media_type");
    let r = h.http.post(&url).header("origin", "https://canvas.example").json(&serde_json::json!({})).send().await.unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["error"], "origin_not_allowed");
    // Nothing started: the node is still waiting for start-recovery.
    assert_eq!(h.health().await["state"], "UP");
    // With the token (the harness's client sends it) it works.
    h.recover().await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_admin_token_the_admin_routes_are_on_loopback_only() {
    let admin_port = free_port();
    let h = Harness::start(|c| {
        c.admin_token = None;
        c.admin_listen = format!("127.0.0.1:{admin_port}").parse().unwrap();
    })
    .await;
    let plain = reqwest::Client::new();
    let r = plain.post(format!("{}/admin/start-recovery", h.url)).send().await.unwrap();
    assert_eq!(r.status(), 404, "the public listener has no admin routes");
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["error"], "not_found");
    let admin = format!("http://127.0.0.1:{admin_port}");
    // What a page in a browser on this host could send (a `no-cors` fetch: no JSON content type;
    // any fetch: an `Origin`) is refused, and does nothing.
    let r = plain.post(format!("{admin}/admin/start-recovery")).send().await.unwrap();
    assert_eq!(r.status(), 415, "a POST without Content-Type: application/json");
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["error"], "unsupported_media_type");
    let r = plain.post(format!("{admin}/admin/start-recovery")).header("origin", "http://localhost:8000").json(&serde_json::json!({})).send().await.unwrap();
    assert_eq!(r.status(), 403, "a request with an Origin");
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["error"], "origin_not_allowed");
    assert_eq!(h.health().await["state"], "UP", "no refused request started the recovery");
    let r = plain.post(format!("{admin}/admin/start-recovery")).json(&serde_json::json!({})).send().await.unwrap();
    assert_eq!(r.status(), 202);
    h.wait_health("HEALTHY", |h| h["state"] == "HEALTHY").await;
    // A drain as a page could send it: text/plain, or no body at all; the node keeps serving.
    let r = plain.post(format!("{admin}/admin/drain")).body(r#"{"reason":"MAINTENANCE"}"#).send().await.unwrap();
    assert_eq!(r.status(), 415);
    let r = plain.post(format!("{admin}/admin/drain")).header("content-type", "text/plain").body(r#"{"reason":"MAINTENANCE"}"#).send().await.unwrap();
    assert_eq!(r.status(), 415);
    let r = plain.post(format!("{admin}/admin/drain")).header("origin", "null").json(&serde_json::json!({"reason": "MAINTENANCE"})).send().await.unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(h.health().await["state"], "HEALTHY", "no refused request drained the node");
    let r = plain.get(format!("{admin}/health")).send().await.unwrap();
    assert_eq!(r.status(), 404, "the admin listener serves only the admin routes");
    // The operator's drain, declared as JSON, is done.
    let r = plain.post(format!("{admin}/admin/drain")).json(&serde_json::json!({"reason": "MAINTENANCE", "grace_ms": 0})).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(h.health().await["state"], "UP", "drained");
    h.stop().await;
}

/// The orchestrators' probes over HTTP: `/livez` 200 at once; `/readyz` 503 + `Retry-After`
/// until the node is HEALTHY, then 200; `/health` 200 throughout. No token needed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_is_503_until_the_node_is_healthy_and_livez_always_200() {
    let h = Harness::start(|_| {}).await;
    let plain = reqwest::Client::new();
    let r = plain.get(format!("{}/livez", h.url)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["status"], "alive");
    let r = plain.get(format!("{}/readyz", h.url)).send().await.unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["retry-after"], "1");
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["error"], "not_ready", "{body}");
    assert!(body["message"].as_str().unwrap().contains("start-recovery"), "{body}");
    assert_eq!(plain.get(format!("{}/health", h.url)).send().await.unwrap().status(), 200);
    h.recover().await;
    let r = plain.get(format!("{}/readyz", h.url)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["status"], "ready");
    assert_eq!(plain.get(format!("{}/livez", h.url)).send().await.unwrap().status(), 200);
    h.stop().await;
}

#[test]
fn a_public_admin_listener_without_a_token_is_a_config_problem() {
    let mut c = Config::for_node("ws-1", "k:9092");
    c.admin_listen = "0.0.0.0:9081".parse().unwrap();
    assert!(c.problems().iter().any(|p| p.contains("ADMIN_LISTEN_ADDR")), "{:?}", c.problems());
    c.admin_token = Some("t".into());
    assert!(c.problems().is_empty(), "{:?}", c.problems());
}

// HS256 secrets of at least 32 bytes, as the verifier requires (RFC 7518 §3.2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribing_needs_a_client_token_for_the_canvas_and_ends_when_it_expires() {
    let mut h = Harness::start(|c| c.client_tokens.hs256_secret = Some(NODE_SECRET.into())).await;
    h.publish("a").await;
    h.recover().await;
    for (query, status, code) in [
        ("canvas=a".to_owned(), 401, "missing_token"),
        ("canvas=a&token=garbage".to_owned(), 401, "invalid_token"),
        (format!("canvas=a&token={}", client_token(OTHER_SECRET, &["a"], 600)), 401, "invalid_token"),
        (format!("canvas=a&token={}", client_token(NODE_SECRET, &["b", "a-*"], 600)), 403, "token_not_allowed"),
    ] {
        let (got, body, _) = h.connect_with(&query).await.expect_err("refused");
        assert_eq!((got, body["error"].as_str()), (status, Some(code)), "{query}");
    }
    let mut ws = h.connect_with(&format!("canvas=a&token={}", client_token(NODE_SECRET, &["a"], 600))).await.expect("served");
    assert!(matches!(next(&mut ws).await.unwrap(), ServerMessage::Snapshot { version: 1, .. }));
    // A token that expires in a second or two: served, then closed with 1008 when it expires.
    let mut short = h.connect_with(&format!("canvas=a&token={}", client_token(NODE_SECRET, &["*"], 2))).await.expect("served");
    assert!(matches!(next(&mut short).await.unwrap(), ServerMessage::Snapshot { .. }));
    let started = Instant::now();
    let end = loop {
        match tokio::time::timeout(Duration::from_secs(5), short.next()).await.expect("closed within 5 s") {
            Some(Ok(Message::Close(f))) => break f.expect("a close frame with a code"),
            Some(Ok(_)) => continue,
            other => panic!("expected a close frame, got {other:?}"),
        }
    };
    assert_eq!((u16::from(end.code), end.reason.as_str()), (1008, "token expired"));
    assert!(started.elapsed() <= Duration::from_secs(3), "{:?}", started.elapsed());
    // The long-lived session is still served.
    h.publish("a").await;
    assert_eq!(version(&next(&mut ws).await.unwrap()), 2);
    h.stop().await;
}

/// Writes a leader's claim to `topic` on the harness's cluster; returns its offset (the token).
async fn write_claim(h: &Harness, topic: &str, gateway: &str) -> u64 {
    let claim = shared::control::ControlRecord::Claim { gateway: gateway.into(), at_ms: shared::event::now_ms(), url: None };
    let value = serde_json::to_vec(&claim).unwrap();
    let key = shared::control::record_key(&claim);
    let delivery = h.producer.send(FutureRecord::to(topic).partition(0).key(&key).payload(&value), Duration::from_secs(5)).await.expect("produce the claim");
    delivery.offset as u64
}

/// A hold request (harmless: the node holds nothing) under fencing `token`.
async fn hold_with_token(h: &Harness, token: &str) -> (u16, serde_json::Value) {
    let r = h
        .http
        .post(format!("{}/admin/hold", h.url))
        .header(shared::control::FENCING_HEADER, token)
        .json(&serde_json::json!({"partitions": [0], "for_ms": 1000}))
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_that_no_claim_backs_is_refused_and_locks_nobody_out() {
    let control = format!("control-{:08x}", rand_u32());
    let c2 = control.clone();
    let h = Harness::start(move |c| c.control_topic = c2).await;
    h._cluster.create_topic(&control, 1, 1).expect("control topic");
    let real = write_claim(&h, &control, "gw-real").await;
    // Anyone with the admin secret forging the highest token there is.
    let (status, body) = hold_with_token(&h, &u64::MAX.to_string()).await;
    assert_eq!((status, body["error"].as_str()), (409, Some("unknown_claim")), "a token no claim backs: {body}");
    // The real leader is not locked out.
    let (status, body) = hold_with_token(&h, &real.to_string()).await;
    assert_eq!(status, 200, "the real leader's token after a forged one: {body}");
    // A newer leader's claim: its token acts once the node's reader has read it (the request
    // waits for that), and the older token is stale from then on.
    let newer = write_claim(&h, &control, "gw-next").await;
    let (status, body) = hold_with_token(&h, &newer.to_string()).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = hold_with_token(&h, &real.to_string()).await;
    assert_eq!((status, body["error"].as_str()), (409, Some("stale_leader")), "{body}");
    h.stop().await;
}

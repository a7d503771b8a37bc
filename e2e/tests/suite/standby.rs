//! A standby publisher, promoted by the gateway leader, on a real Kafka broker: one fleet with two
//! publishers, `publisher-2` started with `PUBLISHER_STANDBY=true`, clients and a careful writer
//! through the gateway.
//!
//! 1. The standby answers `/ready` and writes with 503 `standby`, follows the log, and shows
//!    `publisher_standby 1` in `/metrics` (0 once promoted).
//! 2. kill -9 of the active publisher: after 3 polls with no publisher ready, the gateway leader
//!    decides `promote_publisher` (read back from the control topic) and promotes the standby
//!    under its fencing token; the time from the kill to the first 201 through the gateway is
//!    printed (the target is the poll interval × 3 + 2 s).
//! 3. A promotion without the leader's token is refused (409 `fencing_token_required`), and one
//!    with a forged token too (409 `unknown_claim`).
//! 4. The killed publisher comes back as a standby; the active one (the promoted standby) gets
//!    SIGSTOP past the next promotion, then SIGCONT: it is fenced, answers 503 `fenced` and exits
//!    by itself. Two publishers never both accept a write: every acknowledged publish is in the
//!    log once at its version, no version is used twice (read back from the log), and every
//!    client ends with every version of its canvas, once, in order, and the publisher's hash.

use e2e::broker::{Broker, BrokerKind};
use e2e::client::{Client, ClientTiming};
use e2e::fleet::{Fleet, FleetSpec, ADMIN_TOKEN};
use e2e::procs::{eventually, get_json, Service, Timeline};
use e2e::scenario::{finish, pick_canvases, wait_for_heads};
use e2e::writer::Writer;
use shared::CanvasDims;
use std::time::{Duration, Instant};

const CLIENTS: usize = 6;
const CANVASES: usize = 3;

#[test]
fn a_standby_publisher_takes_over_and_a_frozen_one_is_fenced() {
    crate::block_on(run());
}

/// The publisher's role in its `/health` (`standby`, `promoting`, `active`).
async fn role(http: &reqwest::Client, p: &Service) -> Result<String, String> {
    let h = get_json(http, &format!("{}/health", p.url())).await?;
    h["role"].as_str().map(str::to_owned).ok_or_else(|| format!("no role in {h}"))
}

/// The publisher's `publisher_standby` gauge.
async fn standby_gauge(http: &reqwest::Client, p: &Service) -> i64 {
    let text = http.get(format!("{}/metrics", p.url())).send().await.unwrap().text().await.unwrap();
    text.lines().find_map(|l| l.strip_prefix("publisher_standby ")).and_then(|v| v.trim().parse().ok()).expect("publisher_standby in /metrics")
}

/// The control topic's decisions of `action`, as the gateway shows them.
fn decisions(f: &serde_json::Value, action: &str) -> usize {
    f["decisions"].as_array().map_or(0, |d| d.iter().filter(|e| e["action"] == action && e["source"] == "control_topic").count())
}

/// Publishes through the gateway until one is answered 201; returns when that was.
async fn first_write(http: &reqwest::Client, gateway: &str, canvas: &str) -> Instant {
    loop {
        let r = http
            .post(format!("{gateway}/api/canvases/{canvas}/pixels"))
            .json(&serde_json::json!({"x": 1, "y": 1, "color": "#102030"}))
            .timeout(Duration::from_secs(1))
            .send()
            .await;
        if r.is_ok_and(|r| r.status() == 201) {
            return Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn run() {
    let kind = BrokerKind::real_from_env();
    let broker = Broker::start(kind).await.expect("a Kafka broker");
    let tl = Timeline::new(true);
    let spec = FleetSpec { publishers: 2, ..FleetSpec::default() };
    let (dims, partitions, poll) = (CanvasDims { width: spec.width, height: spec.height }, spec.partitions, spec.poll_interval_ms);
    let mut fleet = Fleet::start(&broker, spec, tl.clone()).await.expect("the fleet");
    let http = reqwest::Client::new();

    // 1. The standby follows and refuses writes.
    fleet.more_publishers[0].env.insert("PUBLISHER_STANDBY".into(), "true".into());
    fleet.more_publishers[0].start().expect("the standby starts");
    let standby_url = fleet.more_publishers[0].url();
    eventually("the standby to say standby", Duration::from_secs(60), || async {
        let r = http.get(format!("{standby_url}/ready")).send().await.map_err(|e| e.to_string())?;
        let (status, body) = (r.status().as_u16(), r.text().await.unwrap_or_default());
        if status == 503 && body.contains("\"standby\"") { Ok(Some(())) } else { Err(format!("{status} {body}")) }
    })
    .await
    .unwrap();
    let refused = http
        .post(format!("{standby_url}/canvases/c1/pixels"))
        .json(&serde_json::json!({"x": 0, "y": 0, "color": "#000000"}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 503);
    assert!(refused.text().await.unwrap().contains("\"standby\""));
    assert_eq!(role(&http, &fleet.more_publishers[0]).await.unwrap(), "standby");
    assert_eq!(standby_gauge(&http, &fleet.more_publishers[0]).await, 1, "publisher_standby while following");

    fleet.wait_fleet("a leader", Duration::from_secs(60), |f| f["leadership"]["leader"]["token"].as_u64().ok_or("no leader".to_owned())).await.unwrap();
    let state = fleet.fleet_state().await.unwrap();
    let node_ids: Vec<String> = fleet.nodes.iter().map(|n| n.name.clone()).collect();
    let canvases = pick_canvases(&state, partitions, CANVASES, &node_ids);
    let ws = format!("ws://127.0.0.1:{}", fleet.gateway.port);
    let clients: Vec<Client> = (0..CLIENTS).map(|i| Client::spawn(&format!("client-{i}"), &ws, &canvases[i % canvases.len()], dims, ClientTiming::default())).collect();
    let gateway = fleet.gateway.url();
    let writer = Writer::start(&gateway, canvases.clone(), 40.0, dims.width, dims.height);
    tokio::time::sleep(Duration::from_secs(4)).await;

    // 2. kill -9 of the active publisher: the leader promotes the standby.
    tl.mark("kill -9 of the active publisher");
    let killed = Instant::now();
    fleet.publisher.kill9().await;
    let answered = first_write(&http, &gateway, &canvases[0]).await;
    let failover = answered - killed;
    tl.mark(format!("first 201 through the gateway {} ms after the kill", failover.as_millis()));
    assert_eq!(role(&http, &fleet.more_publishers[0]).await.unwrap(), "active");
    assert_eq!(standby_gauge(&http, &fleet.more_publishers[0]).await, 0, "publisher_standby once promoted");
    fleet
        .wait_fleet("the promotion in the control topic", Duration::from_secs(10), |f| {
            let (d, done) = (decisions(f, "promote_publisher"), decisions(f, "promote_publisher_completed"));
            (d == 1 && done == 1).then_some(()).ok_or(format!("{d} promote_publisher, {done} completed"))
        })
        .await
        .unwrap();

    // 3. A promotion needs the leader's token.
    let promote_url = format!("{}/admin/promote", fleet.publisher.url());
    let promote = |token: Option<&str>| {
        let mut r = http.post(&promote_url).bearer_auth(ADMIN_TOKEN).json(&serde_json::json!({}));
        if let Some(t) = token {
            r = r.header(shared::control::FENCING_HEADER, t);
        }
        r
    };

    // 4. The killed one comes back as a standby; the active one is frozen past a promotion.
    fleet.publisher.env.insert("PUBLISHER_STANDBY".into(), "true".into());
    fleet.publisher.start().expect("the killed publisher restarts");
    eventually("the restarted publisher to stand by", Duration::from_secs(60), || async {
        let r = role(&http, &fleet.publisher).await?;
        if r == "standby" { Ok(Some(())) } else { Err(r) }
    })
    .await
    .unwrap();
    for (token, error) in [(None, "fencing_token_required"), (Some("999999"), "unknown_claim")] {
        let r = promote(token).send().await.unwrap();
        let (status, body) = (r.status().as_u16(), r.text().await.unwrap_or_default());
        assert_eq!(status, 409, "{body}");
        assert!(body.contains(error), "{error}: {body}");
    }
    assert_eq!(role(&http, &fleet.publisher).await.unwrap(), "standby", "refused promotions changed nothing");
    tokio::time::sleep(Duration::from_secs(2)).await;
    tl.mark("SIGSTOP of the active publisher (publisher-2)");
    let frozen = Instant::now();
    fleet.more_publishers[0].freeze();
    let answered = first_write(&http, &gateway, &canvases[1]).await;
    let second = answered - frozen;
    tl.mark(format!("first 201 through the gateway {} ms after the SIGSTOP", second.as_millis()));
    assert_eq!(role(&http, &fleet.publisher).await.unwrap(), "active");
    tokio::time::sleep(Duration::from_secs(2)).await;
    tl.mark("SIGCONT of publisher-2");
    fleet.more_publishers[0].thaw();
    // A new connection: a pooled one may have been closed by the server's idle timeout while
    // the process was stopped.
    let late = reqwest::Client::new()
        .post(format!("{standby_url}/canvases/{}/pixels", canvases[2]))
        .json(&serde_json::json!({"x": 2, "y": 2, "color": "#203040"}))
        .timeout(Duration::from_secs(15))
        .send()
        .await
        .expect("the thawed publisher answers");
    let (status, body) = (late.status().as_u16(), late.text().await.unwrap_or_default());
    assert_eq!(status, 503, "the thawed publisher applies nothing: {body}");
    assert!(body.contains("\"fenced\""), "{body}");
    let exit = fleet.more_publishers[0].exited_within(Duration::from_secs(15)).await.expect("the fenced publisher exits by itself");
    assert!(exit.success(), "a fenced publisher exits 0: {exit:?}");

    // Every acknowledged write once in the log; every client every version once, in order.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let stats = writer.stop().await;
    assert!(stats.failed.lock().unwrap().is_empty(), "the writer gave up on publishes: {:?}", stats.failed.lock().unwrap());
    let acked = stats.acked.lock().unwrap().clone();
    let audit = e2e::audit::audit(&broker.bootstrap, &fleet.topic, acked).await.expect("the log reads");
    assert!(audit.ok(), "{}: {audit:?}", audit.summary());
    let truths = wait_for_heads(&fleet, &clients, &canvases).await.unwrap();
    let (_, verdicts) = finish(clients, &truths).await;
    for v in &verdicts {
        assert!(v.ok(), "client {} did not get exactly its canvas's versions: {v:?}", v.name);
    }
    println!(
        "standby promotion: kill -9 → first 201 through the gateway {} ms (the bench's bar: poll interval {poll} ms × 3 + 2 s = {} ms); \
         SIGSTOP → first 201 {} ms (probes of a frozen publisher wait out POLL_TIMEOUT_MS, and a publish stuck there its 1 s); {}",
        failover.as_millis(),
        poll * 3 + 2000,
        second.as_millis(),
        audit.summary()
    );
    fleet.stop().await;
}

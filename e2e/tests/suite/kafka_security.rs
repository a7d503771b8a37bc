//! Kafka's own security with the real processes on real Apache Kafka: the broker has a
//! `SASL_SSL` listener (TLS with a self-signed certificate, SASL/PLAIN), and the publisher and
//! every node reach it only through the `KAFKA_CLIENT_<NAME>` pass-through, as an operator would
//! configure them (docs/configuration.md#kafka-security-settings). The fleet comes up, a node
//! killed with SIGKILL catches up again over TLS, and every client sees every version once, in
//! order. A node with a wrong password, and one that does not trust the broker's certificate,
//! never finish catch-up, and their `/health` says why; a publisher with a wrong password never
//! accepts writes, and its `/ready` says why.

use e2e::broker::{free_port, security, Broker};
use e2e::fleet::{Fleet, FleetSpec, ADMIN_TOKEN};
use e2e::load::Load;
use e2e::procs::{get_json, Service, Timeline};
use e2e::scenario::{finish, pick_canvases, spawn_clients, wait_for_heads};
use shared::CanvasDims;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_fleet_runs_on_a_sasl_ssl_listener_through_the_pass_through() {
    let _turn = crate::one_at_a_time();
    let tl = Timeline::new(true);
    let (broker, secured) = Broker::start_sasl_ssl().await.expect("Kafka with a SASL_SSL listener");
    let spec = FleetSpec { env: secured.client_env(security::PASSWORD), ..FleetSpec::default() };
    let mut fleet = Fleet::start(&broker, spec, tl.clone()).await.expect("the fleet over SASL_SSL");
    let state = fleet.fleet_state().await.unwrap();
    let canvases = pick_canvases(&state, fleet.spec.partitions, 2, &["ws-1".to_owned(), "ws-2".to_owned()]);
    let dims = CanvasDims { width: fleet.spec.width, height: fleet.spec.height };
    let clients = spawn_clients(&fleet, &canvases, 4, dims).await.unwrap();
    let load = Load::start(&fleet.publisher.url(), canvases.clone(), 20.0, dims.width, dims.height);
    tokio::time::sleep(Duration::from_secs(2)).await;

    // ws-1 dies; when it comes back it replays what it missed over TLS before it serves.
    tl.mark("SIGKILL ws-1 and start it again");
    fleet.nodes[0].kill9().await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    fleet.nodes[0].start().unwrap();
    fleet
        .wait_fleet("ws-1 HEALTHY with partitions after its catch-up over SASL_SSL", Duration::from_secs(90), |f| {
            let ws1 = f["nodes"].as_array().and_then(|ns| ns.iter().find(|n| n["id"] == "ws-1").cloned()).unwrap_or_default();
            let owned = ws1["assigned_partitions"].as_array().map_or(0, Vec::len);
            (ws1["state"] == "HEALTHY" && owned > 0).then_some(()).ok_or(format!("ws-1 {} owns {owned}", ws1["state"]))
        })
        .await
        .unwrap();
    let h = get_json(&fleet.http, &format!("{}/health", fleet.nodes[0].url())).await.unwrap();
    assert_eq!(h["catchup"]["status"], "completed", "{}", h["catchup"]);
    assert!(h["catchup"]["replay_count"].as_u64().unwrap() > 0, "ws-1 replayed the events it missed: {}", h["catchup"]);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let published = load.stop().await;
    let accepted = published.accepted.load(std::sync::atomic::Ordering::Relaxed);
    assert!(accepted > 0, "the publisher accepted writes over SASL_SSL");
    let truths = wait_for_heads(&fleet, &clients, &canvases).await.expect("every client at its canvas's head");
    let (_, verdicts) = finish(clients, &truths).await;
    for v in &verdicts {
        assert!(v.ok(), "every version once, in order: {v:?}");
    }

    // Services outside the fleet on its topic, each with `kafka` as its broker settings.
    let outsider = |name: &str, bin: &str, own: &[(&str, String)], kafka: Vec<(String, String)>| -> Service {
        let port = free_port().unwrap();
        let base = [
            ("KAFKA_TOPIC", fleet.topic.clone()),
            ("TOPIC_PARTITIONS", fleet.spec.partitions.to_string()),
            ("LISTEN_ADDR", format!("127.0.0.1:{port}")),
            ("ADMIN_TOKEN", ADMIN_TOKEN.to_owned()),
            // Not the fleet's: no gateway leads it, so no control topic to read (the harness
            // calls its admin routes without a leader's token).
            ("CONTROL_TOPIC", String::new()),
        ];
        let mut env: BTreeMap<String, String> = base.into_iter().chain(own.iter().cloned()).map(|(k, v)| (k.to_owned(), v)).collect();
        env.extend(kafka);
        Service::new(name, bin, port, env, tl.clone())
    };
    let node = |name: &str, kafka: Vec<(String, String)>| -> Service {
        let own = [("NODE_ID", name.to_owned()), ("BROADCAST_GROUP", format!("{}-{name}", fleet.group)), ("CATCHUP_GROUP", format!("{name}-catchup"))];
        outsider(name, "ws-node", &own, kafka)
    };
    // The wrong password, and no CA that trusts the broker's certificate: neither node gets in.
    let mut bad_password = node("ws-badpw", secured.client_env("not-the-password"));
    let mut untrusting =
        node("ws-noca", secured.client_env(security::PASSWORD).into_iter().filter(|(k, _)| k != "KAFKA_CLIENT_SSL_CA_LOCATION").collect());
    let mut refused = Vec::new();
    for node in [&mut bad_password, &mut untrusting] {
        node.start().unwrap();
        refused.push(node.url());
    }
    // And a publisher with the wrong password: it never accepts writes, and /ready says why.
    let mut bad_publisher =
        outsider("publisher-badpw", "core-publisher", &[("TRANSACTIONAL_ID", "badpw-publisher".to_owned())], secured.client_env("not-the-password"));
    bad_publisher.start().unwrap();
    let http = reqwest::Client::new();
    let started = Instant::now();
    let mut sent = vec![false; refused.len()];
    let mut errors = vec![String::new(); refused.len()];
    let mut publisher_says = String::new();
    while started.elapsed() < Duration::from_secs(40) && (errors.iter().any(String::is_empty) || publisher_says.is_empty()) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        if let Ok(r) = http.get(format!("{}/ready", bad_publisher.url())).send().await {
            assert_eq!(r.status().as_u16(), 503, "a publisher with the wrong password is not ready");
            let body: serde_json::Value = r.json().await.unwrap_or_default();
            assert_eq!(body["error"], "not_ready", "{body}");
            // Named once its first metadata request has failed (librdkafka's 10 s timeout).
            let message = body["message"].as_str().unwrap_or_default();
            if message.contains("last error") {
                publisher_says = message.to_owned();
            }
        }
        for (i, url) in refused.iter().enumerate() {
            if !sent[i] {
                if let Ok(r) = http.post(format!("{url}/admin/start-recovery")).bearer_auth(ADMIN_TOKEN).json(&serde_json::json!({})).send().await {
                    assert_eq!(r.status().as_u16(), 202);
                    sent[i] = true;
                }
            }
            if let Ok(h) = get_json(&http, &format!("{url}/health")).await {
                assert_ne!(h["ready"], true, "a node the broker should refuse finished catch-up: {h}");
                if h["catchup"]["status"] == "failed" {
                    errors[i] = h["catchup"]["error"].as_str().unwrap_or("(no error text)").to_owned();
                }
            }
        }
    }
    println!("[test] catch-up errors: wrong password: {:?}; no CA: {:?}", errors[0], errors[1]);
    assert!(publisher_says.contains("SASL authentication error"), "the publisher names the refused login: {publisher_says:?}");
    assert!(errors[0].contains("SASL authentication error"), "the wrong password is named: {:?}", errors[0]);
    assert!(errors[1].contains("certificate verify failed"), "the untrusted certificate is named: {:?}", errors[1]);
    bad_publisher.terminate(Duration::from_secs(5)).await;
    bad_password.terminate(Duration::from_secs(5)).await;
    untrusting.terminate(Duration::from_secs(5)).await;
    fleet.stop().await;
}

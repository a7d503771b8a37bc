//! `KAFKA_CLIENT_<NAME>` pass-through with the real processes on the embedded broker (a plaintext
//! listener): a fleet whose services all get `security.protocol=plaintext` (and another harmless
//! setting) comes up and serves; a publisher and a node given `security.protocol=ssl` never get to
//! the broker, so the publisher never accepts writes and the node never finishes catch-up, its
//! `/health` naming the setting (this workspace builds librdkafka without OpenSSL, so the client
//! refuses `ssl` outright).
//!
//! Not proven here: SASL or TLS against a broker that requires them (the tests' brokers have
//! plaintext listeners only); this shows that a passed-through setting reaches the publisher's and
//! the node's Kafka clients and takes effect.

use e2e::broker::{free_port, Broker, BrokerKind};
use e2e::fleet::{Fleet, FleetSpec, ADMIN_TOKEN};
use e2e::procs::{get_json, Service, Timeline};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kafka_client_settings_reach_every_service_s_clients() {
    let tl = Timeline::new(true);
    let broker = Broker::start(BrokerKind::Embedded).await.expect("broker");
    let env = vec![
        ("KAFKA_CLIENT_SECURITY_PROTOCOL".to_owned(), "plaintext".to_owned()),
        ("KAFKA_CLIENT_SOCKET_KEEPALIVE_ENABLE".to_owned(), "true".to_owned()),
    ];
    // The right setting: the fleet comes up (publisher ready, every node HEALTHY with partitions).
    let mut fleet = Fleet::start(&broker, FleetSpec { env, ..FleetSpec::default() }, tl.clone()).await.expect("fleet with plaintext");
    let http = reqwest::Client::new();
    let r = http.post(format!("{}/canvases/k1/pixels", fleet.publisher.url())).json(&serde_json::json!({"x": 0, "y": 0, "color": "#000000"})).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 201);

    // A wrong one: SSL to a plaintext listener.
    let wrong = |name: &str, port: u16, extra: &[(&str, String)]| -> Service {
        let mut env: BTreeMap<String, String> = [
            ("KAFKA_BOOTSTRAP", broker.bootstrap.clone()),
            ("KAFKA_TOPIC", fleet.topic.clone()),
            ("TOPIC_PARTITIONS", fleet.spec.partitions.to_string()),
            ("LISTEN_ADDR", format!("127.0.0.1:{port}")),
            ("ADMIN_TOKEN", ADMIN_TOKEN.to_owned()),
            ("KAFKA_CLIENT_SECURITY_PROTOCOL", "ssl".to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        env.extend(extra.iter().map(|(k, v)| ((*k).to_owned(), v.clone())));
        Service::new(name, if name.starts_with("ws") { "ws-node" } else { "core-publisher" }, port, env, tl.clone())
    };
    let mut publisher = wrong("publisher-ssl", free_port().unwrap(), &[("TRANSACTIONAL_ID", "ssl-test".to_owned())]);
    let mut node = wrong(
        "ws-ssl",
        free_port().unwrap(),
        &[("NODE_ID", "ws-ssl".to_owned()), ("BROADCAST_GROUP", format!("{}-ssl", fleet.group)), ("CATCHUP_GROUP", "ws-ssl-catchup".to_owned())],
    );
    publisher.start().unwrap();
    node.start().unwrap();
    let (purl, nurl) = (publisher.url(), node.url());
    let started = Instant::now();
    let mut recovery_sent = false;
    while started.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        if let Ok(h) = get_json(&http, &format!("{purl}/health")).await {
            assert_ne!(h["ready"], true, "a publisher speaking SSL to a plaintext broker became ready: {h}");
        }
        if !recovery_sent {
            if let Ok(r) = http.post(format!("{nurl}/admin/start-recovery")).bearer_auth(ADMIN_TOKEN).send().await {
                assert_eq!(r.status().as_u16(), 202);
                recovery_sent = true;
            }
        }
        if let Ok(h) = get_json(&http, &format!("{nurl}/health")).await {
            assert_ne!(h["ready"], true, "a node speaking SSL to a plaintext broker finished catch-up: {h}");
        }
    }
    assert!(recovery_sent, "the node answered start-recovery");
    let h = get_json(&http, &format!("{nurl}/health")).await.expect("the node answers");
    assert_eq!(h["catchup"]["status"], "failed", "{h}");
    assert!(h["catchup"]["error"].as_str().is_some_and(|e| e.contains("security.protocol")), "{h}");
    let h = get_json(&http, &format!("{purl}/ready")).await;
    assert!(h.map_or(true, |h| h["ready"] != true));
    // The fleet with the right setting kept serving all along.
    let r = http.post(format!("{}/canvases/k1/pixels", fleet.publisher.url())).json(&serde_json::json!({"x": 1, "y": 0, "color": "#000000"})).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 201);
    publisher.terminate(Duration::from_secs(5)).await;
    node.terminate(Duration::from_secs(5)).await;
    fleet.stop().await;
}

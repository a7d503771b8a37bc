//! `KAFKA_CLIENT_<NAME>` pass-through with the real processes on the embedded broker (a plaintext
//! listener): a fleet whose services all get `security.protocol=plaintext` (and another harmless
//! setting) comes up and serves; a publisher and a node given `sasl.mechanisms=GSSAPI` (Kerberos,
//! which this build of librdkafka leaves out, so the client refuses it when it is created) never
//! get to the broker, so the publisher never accepts writes and the node never finishes catch-up,
//! its `/health` naming the mechanism. This shows that a passed-through setting reaches the
//! publisher's and the node's Kafka clients and takes effect; `kafka_security.rs` runs the fleet
//! against real Kafka on a SASL_SSL listener.

use e2e::broker::{free_port, Broker, BrokerKind};
use e2e::fleet::{Fleet, FleetSpec, ADMIN_TOKEN};
use e2e::procs::{get_json, Service, Timeline};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kafka_client_settings_reach_every_service_s_clients() {
    let _turn = crate::one_at_a_time();
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

    // A wrong one: a SASL mechanism this build does not have.
    let wrong = |name: &str, port: u16, extra: &[(&str, String)]| -> Service {
        let mut env: BTreeMap<String, String> = [
            ("KAFKA_BOOTSTRAP", broker.bootstrap.clone()),
            ("KAFKA_TOPIC", fleet.topic.clone()),
            ("TOPIC_PARTITIONS", fleet.spec.partitions.to_string()),
            ("LISTEN_ADDR", format!("127.0.0.1:{port}")),
            ("ADMIN_TOKEN", ADMIN_TOKEN.to_owned()),
            // Not the fleet's: no gateway leads it, so no control topic to read (the harness
            // calls its admin routes without a leader's token).
            ("CONTROL_TOPIC", String::new()),
            ("KAFKA_CLIENT_SECURITY_PROTOCOL", "sasl_plaintext".to_owned()),
            ("KAFKA_CLIENT_SASL_MECHANISMS", "GSSAPI".to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        env.extend(extra.iter().map(|(k, v)| ((*k).to_owned(), v.clone())));
        Service::new(name, if name.starts_with("ws") { "ws-node" } else { "core-publisher" }, port, env, tl.clone())
    };
    let mut publisher = wrong("publisher-gssapi", free_port().unwrap(), &[("TRANSACTIONAL_ID", "gssapi-test".to_owned())]);
    let mut node = wrong(
        "ws-gssapi",
        free_port().unwrap(),
        &[("NODE_ID", "ws-gssapi".to_owned()), ("BROADCAST_GROUP", format!("{}-gssapi", fleet.group)), ("CATCHUP_GROUP", "ws-gssapi-catchup".to_owned())],
    );
    publisher.start().unwrap();
    node.start().unwrap();
    let (purl, nurl) = (publisher.url(), node.url());
    let started = Instant::now();
    let mut recovery_sent = false;
    while started.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        if let Ok(h) = get_json(&http, &format!("{purl}/health")).await {
            assert_ne!(h["ready"], true, "a publisher with an unavailable SASL mechanism became ready: {h}");
        }
        if !recovery_sent {
            if let Ok(r) = http.post(format!("{nurl}/admin/start-recovery")).bearer_auth(ADMIN_TOKEN).json(&serde_json::json!({})).send().await {
                assert_eq!(r.status().as_u16(), 202);
                recovery_sent = true;
            }
        }
        if let Ok(h) = get_json(&http, &format!("{nurl}/health")).await {
            assert_ne!(h["ready"], true, "a node with an unavailable SASL mechanism finished catch-up: {h}");
        }
    }
    assert!(recovery_sent, "the node answered start-recovery");
    let h = get_json(&http, &format!("{nurl}/health")).await.expect("the node answers");
    assert_eq!(h["catchup"]["status"], "failed", "{h}");
    assert!(h["catchup"]["error"].as_str().is_some_and(|e| e.contains("GSSAPI")), "{h}");
    let h = get_json(&http, &format!("{purl}/ready")).await;
    assert!(h.map_or(true, |h| h["ready"] != true));
    // The fleet with the right setting kept serving all along.
    let r = http.post(format!("{}/canvases/k1/pixels", fleet.publisher.url())).json(&serde_json::json!({"x": 1, "y": 0, "color": "#000000"})).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 201);
    publisher.terminate(Duration::from_secs(5)).await;
    node.terminate(Duration::from_secs(5)).await;
    fleet.stop().await;
}

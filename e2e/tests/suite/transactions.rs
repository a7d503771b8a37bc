//! What transactions change for the fleet's readers, on a real Apache Kafka broker (librdkafka's
//! mock cluster writes no markers and shows aborted records, so none of this can be checked on
//! it): records of an aborted transaction are never read; a partition that ends in a commit
//! marker has no record at its end − 1 and a replay still completes there, by the consumer's
//! position; an open transaction holds the readable end (the last stable offset) below the high
//! watermark; and the publisher rebuilt from such a log has the committed heads only.
//!
//! Needs `scripts/kafka/fetch.sh` (the README's test command runs it).

use e2e::broker::{create_topic, Broker, BrokerKind};
use e2e::fleet::{Fleet, FleetSpec};
use e2e::load::Load;
use e2e::procs::{eventually, get_json, Service, Timeline};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use rdkafka::producer::DefaultProducerContext;
use rdkafka::Message;
use shared::kafka::KafkaSettings;
use shared::replay::{self, Offsets};
use shared::{ChannelId, Color, PixelEvent};
use std::time::{Duration, Instant};

type TxnProducer = ThreadedProducer<DefaultProducerContext>;

fn producer(bootstrap: &str, id: &str) -> TxnProducer {
    let p: TxnProducer = KafkaSettings::new(bootstrap)
        .transactional_producer("e2e-txn", id, Duration::from_secs(10), Duration::from_secs(60))
        .create()
        .expect("a transactional producer");
    p.init_transactions(Duration::from_secs(30)).expect("init_transactions");
    p
}

fn event(canvas: &str, version: u64) -> String {
    PixelEvent { canvas: ChannelId::parse(canvas).unwrap(), version, x: version as u32 % 8, y: 0, color: Color([9, 9, 9]), published_at_ms: 0 }.to_json()
}

/// Writes `events` of `canvas` (versions) to partition 0 in one transaction, then commits or aborts.
fn transaction(p: &TxnProducer, topic: &str, canvas: &str, versions: std::ops::RangeInclusive<u64>, commit: bool) {
    p.begin_transaction().expect("begin");
    for v in versions {
        let value = event(canvas, v);
        p.send(BaseRecord::<str, String>::to(topic).partition(0).key(canvas).payload(&value)).map_err(|(e, _)| e).expect("send");
    }
    let started = Instant::now();
    while p.in_flight_count() > 0 && started.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(1));
    }
    if commit {
        p.commit_transaction(Duration::from_secs(10)).expect("commit");
    } else {
        p.abort_transaction(Duration::from_secs(10)).expect("abort");
    }
}

/// Replays partition 0 of `topic` with a read_committed reader: (versions read, final position,
/// target, last offset read).
fn replay(bootstrap: &str, topic: &str) -> (Vec<u64>, i64, i64, Option<i64>) {
    let consumer: BaseConsumer = KafkaSettings::new(bootstrap).reader(&format!("e2e-txn-{:08x}", rand::random::<u32>())).create().expect("a reader");
    let (plan, _) = replay::plan(&consumer, topic, &Offsets::new(), Duration::from_secs(10)).expect("a plan");
    let mut versions = Vec::new();
    let progress = replay::run(
        &consumer,
        topic,
        &plan,
        Duration::from_secs(20),
        &|| false,
        |m| {
            let format = shared::record::RecordHeaders::of(m).format;
            versions.extend(shared::record::Publication::decode_record(format, m.payload()).expect("publications").into_iter().map(|e| e.version))
        },
        |_| {},
    )
    .expect("the replay completes");
    (versions, progress.positions[&0], plan.targets[&0], progress.last_consumed.get(&0).copied())
}

fn watermarks(bootstrap: &str, topic: &str) -> (i64, i64) {
    let c: BaseConsumer = KafkaSettings::new(bootstrap).reader("e2e-txn-wm").create().expect("a reader");
    c.fetch_watermarks(topic, 0, Duration::from_secs(10)).expect("watermarks")
}

#[test]
fn readers_see_committed_records_only_and_complete_at_markers() {
    crate::block_on(async {
        let broker = Broker::start(BrokerKind::Real).await.expect("a real Kafka broker (scripts/kafka/fetch.sh must have run)");
        let topic = format!("txn-{:08x}", rand::random::<u32>());
        create_topic(&broker.bootstrap, &topic, 1, 1).await.expect("a topic");
        let (bootstrap, t) = (broker.bootstrap.clone(), topic.clone());
        tokio::task::spawn_blocking(move || {
            let p = producer(&bootstrap, &format!("{t}-a"));
            transaction(&p, &t, "c1", 1..=3, true);
            transaction(&p, &t, "c1", 4..=6, false); // aborted: versions 4..=6 are written again below
            transaction(&p, &t, "c1", 4..=5, true);

            // Committed 1..=3, aborted, committed 4..=5: 8 records and 3 markers, offsets 0..=10.
            let (low, high) = watermarks(&bootstrap, &t);
            assert_eq!((low, high), (0, 11), "8 records and 3 markers");
            let (versions, position, target, last) = replay(&bootstrap, &t);
            assert_eq!(versions, vec![1, 2, 3, 4, 5], "the aborted records are never read");
            assert_eq!(target, 11, "no transaction is open: the readable end is the high watermark");
            assert_eq!(last, Some(9), "the last record is at 9; offset 10 is a commit marker");
            assert!(position >= target, "the replay completed at the consumer's position ({position}), past the marker");

            // An open transaction holds the last stable offset at its first record.
            let open = producer(&bootstrap, &format!("{t}-b"));
            open.begin_transaction().expect("begin");
            let value = event("c2", 1);
            open.send(BaseRecord::<str, String>::to(&t).partition(0).key("c2").payload(&value)).map_err(|(e, _)| e).expect("send");
            let started = Instant::now();
            while open.in_flight_count() > 0 && started.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(1));
            }
            let (_, target_open, _, _) = {
                let (v, pos, target, last) = replay(&bootstrap, &t);
                assert_eq!(v, vec![1, 2, 3, 4, 5], "an open transaction's record is not read");
                (v, pos, target, last)
            };
            assert_eq!(target_open, 11, "read_committed: the readable end is the LSO (11), not the high watermark (12)");
            open.commit_transaction(Duration::from_secs(10)).expect("commit");
            let (versions, _, target, _) = replay(&bootstrap, &t);
            assert_eq!(target, 13, "committed: the record and its marker are below the end");
            assert_eq!(versions, vec![1, 2, 3, 4, 5, 1]);
        })
        .await
        .expect("the checks ran");

        // A publisher started on this log rebuilds the committed heads only: c1 at 5, c2 at 1,
        // and continues at 6.
        let mut publisher = publisher_on(&broker, "publisher", &topic, Timeline::new(true));
        publisher.start().expect("the publisher starts");
        let http = reqwest::Client::new();
        let url = publisher.url();
        eventually("the publisher to accept writes", Duration::from_secs(60), || {
            let (http, url) = (http.clone(), url.clone());
            async move { Ok(get_json(&http, &format!("{url}/ready")).await?["ready"].as_bool().unwrap_or(false).then_some(())) }
        })
        .await
        .expect("ready");
        let c1 = get_json(&http, &format!("{url}/canvases/c1")).await.expect("c1");
        assert_eq!(c1["version"], 5, "{c1}");
        let c2 = get_json(&http, &format!("{url}/canvases/c2")).await.expect("c2");
        assert_eq!(c2["version"], 1, "{c2}");
        let r: serde_json::Value = http
            .post(format!("{url}/canvases/c1/pixels"))
            .json(&serde_json::json!({"x": 1, "y": 1, "color": "#010203"}))
            .send()
            .await
            .expect("a publish")
            .json()
            .await
            .expect("json");
        assert_eq!(r["version"], 6, "{r}");
        publisher.terminate(Duration::from_secs(5)).await;

        a_publisher_waits_out_a_foreign_transaction_and_refuses_a_broker_without_verification(&broker).await;
        idle_partitions_end_in_markers_and_are_not_stalled(&broker).await;
    });
}

/// A publisher process on `topic` (one partition, 8×8 canvases), not started.
fn publisher_on(broker: &Broker, name: &str, topic: &str, tl: std::sync::Arc<Timeline>) -> Service {
    let port = e2e::broker::free_port().expect("a port");
    let env = [
        ("KAFKA_BOOTSTRAP", broker.bootstrap.clone()),
        ("KAFKA_TOPIC", topic.to_owned()),
        ("TOPIC_PARTITIONS", "1".to_owned()),
        ("LISTEN_ADDR", format!("127.0.0.1:{port}")),
        ("CANVAS_WIDTH", "8".to_owned()),
        ("CANVAS_HEIGHT", "8".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    Service::new(name, "core-publisher", port, env, tl)
}

/// Sets (`Some`) or removes (`None`: back to the broker's static setting, true by default) the
/// per-broker `transaction.partition.verification.enable` of every broker, and waits until each
/// reports `want` (the setting is dynamic: no restart). AlterConfigs replaces a broker's dynamic
/// settings; the brokers of this test have none of their own.
async fn set_verification(bootstrap: &str, value: Option<&str>, want: &str) {
    const SETTING: &str = "transaction.partition.verification.enable";
    let settings = KafkaSettings::new(bootstrap);
    let brokers = shared::kafka::broker_config(&settings, "e2e-verify", SETTING).await.expect("the brokers");
    let admin: rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext> = settings.admin("e2e-verify-admin").create().expect("admin");
    let opts = rdkafka::admin::AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    for (id, _) in &brokers {
        let mut alter = rdkafka::admin::AlterConfig::new(rdkafka::admin::ResourceSpecifier::Broker(*id));
        if let Some(v) = value {
            alter = alter.set(SETTING, v);
        }
        for r in admin.alter_configs([&alter], &opts).await.expect("AlterConfigs") {
            r.expect("the broker setting altered");
        }
    }
    eventually(&format!("every broker to report {SETTING}={want}"), Duration::from_secs(20), || {
        let settings = settings.clone();
        async move {
            let now = shared::kafka::broker_config(&settings, "e2e-verify", SETTING).await?;
            Ok(now.iter().all(|(_, v)| v.as_ref().ok().and_then(|v| v.as_deref()) == Some(want)).then_some(()))
        }
    })
    .await
    .expect("the setting changed");
}

/// On the same broker: (a) another producer's transaction, open on the events topic, holds a
/// publisher started meanwhile out of ready, and its `/health` and `/ready` name the partition;
/// once that transaction is aborted the publisher becomes ready. (b) With the broker's
/// `transaction.partition.verification.enable` turned off, a publisher exits at once, non-zero,
/// naming the setting; it is turned back on for the cases after this one.
async fn a_publisher_waits_out_a_foreign_transaction_and_refuses_a_broker_without_verification(broker: &Broker) {
    let started = Instant::now();
    let topic = format!("hang-{:08x}", rand::random::<u32>());
    create_topic(&broker.bootstrap, &topic, 1, 1).await.expect("a topic");
    let (bootstrap, t) = (broker.bootstrap.clone(), topic.clone());
    // Another producer (not a publisher: its own transactional.id) leaves a transaction open.
    let foreign = tokio::task::spawn_blocking(move || {
        let p = producer(&bootstrap, &format!("{t}-foreign"));
        p.begin_transaction().expect("begin");
        let value = event("stray", 1);
        p.send(BaseRecord::<str, String>::to(&t).partition(0).key("stray").payload(&value)).map_err(|(e, _)| e).expect("send");
        let sent = Instant::now();
        while p.in_flight_count() > 0 && sent.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(1));
        }
        p
    })
    .await
    .expect("a foreign transaction open");

    let tl = Timeline::new(true);
    let mut publisher = publisher_on(broker, "publisher-held", &topic, tl.clone());
    publisher.start().expect("the publisher starts");
    let (http, url) = (reqwest::Client::new(), publisher.url());
    let health = eventually("the publisher to name the open transaction", Duration::from_secs(30), || {
        let (http, url) = (http.clone(), url.clone());
        async move {
            let h = get_json(&http, &format!("{url}/health")).await?;
            Ok(h["start_error"].as_str().is_some_and(|e| e.contains("partition 0 of")).then_some(h))
        }
    })
    .await
    .expect("the hanging partition named in /health");
    let why = health["start_error"].as_str().unwrap_or_default();
    assert!(why.contains(&format!("partition 0 of {topic} (last stable offset 0, high watermark 1)")) && why.contains("abort"), "{health}");
    assert_eq!((health["ready"].as_bool(), health["state"].as_str()), (Some(false), Some("preparing")), "{health}");
    let ready = get_json(&http, &format!("{url}/ready")).await.expect("/ready");
    assert!(ready["error"] == "not_ready" && ready["message"].as_str().is_some_and(|m| m.contains("partition 0 of")), "{ready}");

    tl.mark("the foreign producer aborts its transaction");
    tokio::task::spawn_blocking(move || foreign.abort_transaction(Duration::from_secs(10)).expect("abort"))
        .await
        .expect("aborted");
    eventually("the publisher to accept writes once the transaction ended", Duration::from_secs(30), || {
        let (http, url) = (http.clone(), url.clone());
        async move { Ok(get_json(&http, &format!("{url}/ready")).await?["ready"].as_bool().unwrap_or(false).then_some(())) }
    })
    .await
    .expect("ready");
    let h = get_json(&http, &format!("{url}/health")).await.expect("health");
    assert!(h["start_error"].is_null(), "{h}");
    publisher.terminate(Duration::from_secs(5)).await;

    // (b) Partition verification off: the publisher stops, non-zero, naming the setting.
    set_verification(&broker.bootstrap, Some("false"), "false").await;
    let mut refused = publisher_on(broker, "publisher-unverified", &topic, tl.clone());
    refused.start().expect("the publisher starts");
    let status = refused.exited_within(Duration::from_secs(30)).await;
    set_verification(&broker.bootstrap, None, "true").await;
    let status = status.expect("the publisher exits by itself");
    assert!(!status.success(), "{status}");
    let said = tl.logs_of("publisher-unverified").join("\n");
    assert!(said.contains("transaction.partition.verification.enable=false") && said.contains("--add-config transaction.partition.verification.enable=true"), "{said}");
    tl.mark(format!("open-transaction and verification cases took {:?}", started.elapsed()));
}

/// A fleet on the same broker: once publishing stops, every partition ends in a commit marker
/// (no record at its end − 1). A node reads past the marker: each owned partition's position
/// reaches its readable end (lag 0) and the node stays HEALTHY, instead of calling the partition
/// stalled after `STALL_AFTER_MS` (1 s here) and being ejected by the gateway.
async fn idle_partitions_end_in_markers_and_are_not_stalled(broker: &Broker) {
    let spec = FleetSpec { node_env: vec![("STALL_AFTER_MS".into(), "1000".into())], ..FleetSpec::default() };
    let mut fleet = Fleet::start(broker, spec, Timeline::new(true)).await.expect("a fleet");
    let canvases: Vec<String> = (0..12).map(|i| format!("idle-{i}")).collect();
    let load = Load::start(&fleet.publisher.url(), canvases, 40.0, fleet.spec.width, fleet.spec.height);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let stats = load.stop().await;
    assert!(stats.accepted.load(std::sync::atomic::Ordering::Relaxed) > 0, "nothing published");
    fleet.timeline.mark("publishing stopped: every partition ends in a commit marker");
    // Past STALL_AFTER_MS, with the ends read (once a second) and the gateway's polls (500 ms).
    tokio::time::sleep(Duration::from_secs(4)).await;
    for node in &fleet.nodes {
        let h = get_json(&fleet.http, &format!("{}/health", node.url())).await.expect("health");
        let owned: Vec<&serde_json::Value> = h["partitions"].as_array().expect("partitions").iter().filter(|p| p["role"] == "owned").collect();
        assert!(!owned.is_empty(), "{h}");
        for p in owned {
            assert_eq!(p["lag"], 0, "an idle partition ending in a commit marker shows lag: {p}");
        }
        assert_eq!(h["state"], "HEALTHY", "{h}");
    }
    let f = fleet.fleet_state().await.expect("the gateway's view");
    assert!(f["nodes"].as_array().expect("nodes").iter().all(|n| n["state"] == "HEALTHY"), "the gateway sees every node HEALTHY: {f}");
    fleet.stop().await;
}

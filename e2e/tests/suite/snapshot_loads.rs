//! Loads of the snapshot topic while its cleaner runs, on a real Apache Kafka broker: 500
//! canvases snapshotted as often as the publisher allows, the snapshot topic's cleaner made as
//! eager as Kafka lets it be (`segment.ms` 100, `min.cleanable.dirty.ratio` 0.01, the broker's
//! `log.cleaner.backoff.ms` 100) and its `min.compaction.lag.ms` set to 0, so nothing but the
//! node's own load guards against a pass that removes a canvas's older snapshot (and the older
//! checkpoint) before the load reaches it. ws-1 is restarted (SIGTERM) five times; after each
//! restart's catch-up, once it owns partitions again, fresh `since=0` clients through the
//! gateway must get the publisher's canvas on every canvas ws-1 serves. At the end the topic must
//! hold far fewer records than offsets: the cleaner ran during the loads.
//!
//! librdkafka's mock cluster has no compaction, so this runs on real Kafka only. Needs
//! `scripts/kafka/fetch.sh` (the README's test command runs it).

use crate::block_on;
use e2e::broker::{Broker, BrokerKind};
use e2e::fleet::{Fleet, FleetSpec};
use e2e::load::Load;
use e2e::procs::{eventually, get_json, Timeline};
use e2e::scenario::{finish, spawn_clients, wait_for_heads};
use rdkafka::admin::{AdminClient, AdminOptions, AlterConfig, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use shared::kafka::KafkaSettings;
use shared::CanvasDims;
use std::time::Duration;

/// Canvases written and snapshotted.
const CANVASES: usize = 500;
/// Restarts of ws-1.
const RESTARTS: usize = 5;

/// Makes the snapshot topic's cleaner as eager as Kafka allows, and removes the
/// `min.compaction.lag.ms` the publisher gave the topic.
async fn eager_cleaner(bootstrap: &str, snapshot_topic: &str) {
    let admin: AdminClient<DefaultClientContext> = KafkaSettings::new(bootstrap).admin("e2e-cleaner-admin").create().expect("admin");
    let max_bytes = shared::snapshot::MAX_RECORD_BYTES.to_string();
    // AlterConfigs replaces a resource's dynamic settings: the topic's own ones are given again.
    let topic = AlterConfig::new(ResourceSpecifier::Topic(snapshot_topic))
        .set("cleanup.policy", "compact")
        .set("max.message.bytes", &max_bytes)
        .set("segment.ms", "100")
        .set("min.cleanable.dirty.ratio", "0.01")
        .set("min.compaction.lag.ms", "0");
    let broker = AlterConfig::new(ResourceSpecifier::Broker(1)).set("log.cleaner.backoff.ms", "100");
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    for r in admin.alter_configs([&topic, &broker], &opts).await.expect("AlterConfigs") {
        r.expect("config altered");
    }
}

/// Records readable on `topic` now, and the sum of its partitions' high watermarks: far fewer
/// records than offsets means the cleaner removed superseded snapshots.
fn records_and_offsets(bootstrap: &str, topic: &str) -> (u64, i64) {
    let consumer: BaseConsumer = KafkaSettings::new(bootstrap).reader(&format!("e2e-cleaner-{:08x}", rand::random::<u32>())).create().expect("a reader");
    let loaded = shared::snapshot::load(&consumer, topic, Duration::from_secs(30), &|| false).expect("the snapshot topic");
    let n = shared::replay::partition_count(&consumer, topic, Duration::from_secs(10)).expect("partitions");
    let offsets = (0..n as i32).map(|p| consumer.fetch_watermarks(topic, p, Duration::from_secs(10)).expect("watermarks").1).sum();
    (loaded.records, offsets)
}

async fn loads_under_an_eager_cleaner() {
    let tl = Timeline::new(true);
    let broker = Broker::start(BrokerKind::Real).await.expect("broker");
    let spec = FleetSpec {
        // Every canvas is due for a snapshot at each of its versions, or 200 ms after one.
        publisher_env: vec![("SNAPSHOT_EVERY_MS".into(), "200".into()), ("SNAPSHOT_EVERY_VERSIONS".into(), "1".into())],
        ..FleetSpec::default()
    };
    let mut fleet = Fleet::start(&broker, spec, tl.clone()).await.expect("fleet");
    let snapshot_topic = shared::snapshot::topic_for(&fleet.topic);
    eager_cleaner(&broker.bootstrap, &snapshot_topic).await;
    tl.mark("the snapshot topic's cleaner made eager, its min.compaction.lag.ms 0");
    let dims = CanvasDims { width: fleet.spec.width, height: fleet.spec.height };
    let canvases: Vec<String> = (0..CANVASES).map(|i| format!("cl-{i}")).collect();
    for round in 1..=RESTARTS {
        let load = Load::start(&format!("{}/api", fleet.gateway.url()), canvases.clone(), 400.0, dims.width, dims.height);
        tokio::time::sleep(Duration::from_secs(3)).await;
        // A graceful restart (the node leaves the group at once): what is measured is the new
        // process's catch-up, which loads the snapshot topic while the cleaner works on it.
        fleet.nodes[0].terminate(Duration::from_secs(15)).await;
        fleet.nodes[0].start().expect("restart ws-1");
        let (http, url) = (fleet.http.clone(), fleet.nodes[0].url());
        let h = eventually("ws-1 to catch up and own partitions again", Duration::from_secs(60), || {
            let (http, url) = (http.clone(), url.clone());
            async move {
                let h = get_json(&http, &format!("{url}/health")).await?;
                let owned = h["assigned_partitions"].as_array().map_or(0, Vec::len);
                let ok = h["state"] == "HEALTHY" && h["catchup"]["status"] == "completed" && owned > 0;
                if ok { Ok(Some(h)) } else { Err(format!("{} catch-up {} owns {owned}", h["state"], h["catchup"]["status"])) }
            }
        })
        .await
        .expect("ws-1 serving again");
        assert!(h["catchup"]["channels_from_snapshots"].as_u64().unwrap_or(0) > 0, "round {round}: ws-1 restored nothing from snapshots: {h}");
        let stats = load.stop().await;
        assert!(stats.accepted.load(std::sync::atomic::Ordering::Relaxed) > 0, "round {round}: nothing published");
        // Fresh clients on the canvases ws-1 serves, through the gateway.
        let owned: Vec<i64> = h["assigned_partitions"].as_array().expect("partitions").iter().filter_map(|p| p.as_i64()).collect();
        let mine: Vec<String> =
            canvases.iter().filter(|c| owned.contains(&(shared::partitioner::partition_for(c.as_bytes(), fleet.spec.partitions) as i64))).cloned().collect();
        assert!(!mine.is_empty(), "round {round}: ws-1 serves none of the canvases: {h}");
        let fresh = spawn_clients(&fleet, &mine, mine.len(), dims).await.expect("fresh clients");
        let truths = wait_for_heads(&fleet, &fresh, &mine).await.expect("fresh clients at the heads");
        let (_, verdicts) = finish(fresh, &truths).await;
        let bad: Vec<String> = verdicts.iter().filter(|v| !v.ok()).map(|v| format!("{}: {v:?}", v.channel)).collect();
        assert!(bad.is_empty(), "round {round}: fresh clients did not get the publisher's canvas on {} of {}: {bad:?}", bad.len(), mine.len());
        tl.mark(format!("round {round}: {} fresh clients on ws-1's canvases got the publisher's canvas", mine.len()));
    }
    let (b, t) = (broker.bootstrap.clone(), snapshot_topic.clone());
    let (records, offsets) = tokio::task::spawn_blocking(move || records_and_offsets(&b, &t)).await.expect("the snapshot topic read");
    tl.mark(format!("the snapshot topic holds {records} records over {offsets} offsets"));
    assert!((records as i64) * 2 < offsets, "the cleaner removed too little to have run during the loads: {records} records over {offsets} offsets");
    fleet.stop().await;
}

#[test]
fn loads_of_the_snapshot_topic_under_an_eager_cleaner_real_kafka() {
    block_on(loads_under_an_eager_cleaner());
}

//! Finite retention on a real Apache Kafka broker: the publisher snapshots canvases into the
//! compacted snapshot topic; the test then deletes every partition's records below its checkpoint
//! (Kafka's DeleteRecords, as retention would) and runs a kill -9 of a node (its partitions move to
//! the survivor, whose position for them is below the new log start), the node's restart,
//! catch-up and failback, and a kill -9 and restart of the publisher. Every client still gets every
//! version once and in order and ends with the publisher's canvas; the versions continue after the
//! publisher's restart.
//!
//! librdkafka's mock cluster has no DeleteRecords and no compaction, so this runs on real Kafka
//! only. Needs `scripts/kafka/fetch.sh` (the README's test command runs it).

use e2e::broker::{Broker, BrokerKind};
use e2e::fleet::{Fleet, FleetSpec};
use e2e::load::Load;
use e2e::procs::{eventually, get_json, Timeline};
use e2e::scenario::{all_receiving, finish, pick_canvases, spawn_clients, wait_failback, wait_for_heads};
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use shared::kafka::KafkaSettings;
use shared::replay::Offsets;
use shared::CanvasDims;
use std::time::Duration;

/// The snapshot topic's checkpoints now.
fn checkpoints(bootstrap: &str, topic: &str) -> Offsets {
    let consumer: BaseConsumer = KafkaSettings::new(bootstrap).reader(&format!("e2e-ret-{:08x}", rand::random::<u32>())).create().expect("a reader");
    shared::snapshot::load(&consumer, topic, Duration::from_secs(30), &|| false).expect("the snapshot topic").checkpoints
}

fn low_watermarks(bootstrap: &str, topic: &str, partitions: u32) -> Offsets {
    let consumer: BaseConsumer = KafkaSettings::new(bootstrap).reader("e2e-ret-watermarks").create().expect("a reader");
    (0..partitions as i32).map(|p| (p, consumer.fetch_watermarks(topic, p, Duration::from_secs(10)).expect("watermarks").0)).collect()
}

async fn trimmed_log_through_kill_failback_and_publisher_restart() {
    let tl = Timeline::new(true);
    let broker = Broker::start(BrokerKind::Real).await.expect("broker");
    let spec = FleetSpec {
        publisher_env: vec![("SNAPSHOT_EVERY_MS".into(), "300".into()), ("SNAPSHOT_EVERY_VERSIONS".into(), "40".into())],
        ..FleetSpec::default()
    };
    let mut fleet = Fleet::start(&broker, spec, tl.clone()).await.expect("fleet");
    let snapshot_topic = shared::snapshot::topic_for(&fleet.topic);
    let state = fleet.fleet_state().await.unwrap();
    let nodes = vec!["ws-1".to_owned(), "ws-2".to_owned()];
    let canvases = pick_canvases(&state, fleet.spec.partitions, 4, &nodes);
    let dims = CanvasDims { width: fleet.spec.width, height: fleet.spec.height };
    let clients = spawn_clients(&fleet, &canvases, 8, dims).await.expect("clients");
    let load = Load::start(&format!("{}/api", fleet.gateway.url()), canvases.clone(), 60.0, dims.width, dims.height);
    tokio::time::sleep(Duration::from_secs(4)).await;

    // Retention, at once: every partition loses its records below its checkpoint.
    let partitions: Vec<i32> = canvases.iter().map(|c| shared::partitioner::partition_for(c.as_bytes(), fleet.spec.partitions) as i32).collect();
    let cps = eventually("a checkpoint past offset 0 on every partition with canvases", Duration::from_secs(30), || {
        let (b, t, parts) = (broker.bootstrap.clone(), snapshot_topic.clone(), partitions.clone());
        async move {
            let cps = tokio::task::spawn_blocking(move || checkpoints(&b, &t)).await.map_err(|e| e.to_string())?;
            Ok(parts.iter().all(|p| cps.get(p).is_some_and(|o| *o > 0)).then_some(cps))
        }
    })
    .await
    .expect("checkpoints");
    let admin: AdminClient<DefaultClientContext> = KafkaSettings::new(&broker.bootstrap).admin("e2e-ret-admin").create().expect("admin");
    let mut tpl = TopicPartitionList::new();
    for (p, o) in &cps {
        tpl.add_partition_offset(&fleet.topic, *p, Offset::Offset(*o)).unwrap();
    }
    admin.delete_records(&tpl, &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)))).await.expect("DeleteRecords");
    let (b, t, n) = (broker.bootstrap.clone(), fleet.topic.clone(), fleet.spec.partitions);
    let lows = tokio::task::spawn_blocking(move || low_watermarks(&b, &t, n)).await.unwrap();
    for (p, o) in &cps {
        assert_eq!(lows[p], *o, "partition {p} starts at its checkpoint now");
    }
    tl.mark(format!("deleted the records below the checkpoints {cps:?}"));

    // kill -9 of ws-1: ws-2 takes its partitions from below their new log start.
    let kill_at = shared::event::now_ms();
    fleet.nodes[0].kill9().await;
    fleet
        .wait_fleet("ws-2 to own every partition", Duration::from_secs(60), |f| {
            let ws2 = f["nodes"].as_array().and_then(|n| n.iter().find(|n| n["id"] == "ws-2").cloned()).unwrap_or_default();
            let owned = ws2["assigned_partitions"].as_array().map_or(0, |a| a.len());
            (owned == f["partition_count"].as_u64().unwrap_or(0) as usize).then_some(()).ok_or(format!("ws-2 owns {owned}"))
        })
        .await
        .expect("takeover");
    all_receiving(&clients, kill_at, "every client to receive again after the kill", Duration::from_secs(60)).await.expect("failover");

    // ws-1 comes back: catch-up from the snapshots, then the failback.
    let restart_at = shared::event::now_ms();
    fleet.nodes[0].start().expect("restart ws-1");
    wait_failback(&fleet, "ws-1", restart_at).await.expect("failback");
    let h = get_json(&fleet.http, &format!("{}/health", fleet.nodes[0].url())).await.unwrap();
    assert_eq!(h["catchup"]["status"], "completed", "{h}");
    assert!(h["catchup"]["canvases_from_snapshots"].as_u64().unwrap_or(0) > 0, "ws-1 restored nothing from snapshots: {h}");

    // kill -9 of the publisher, restart: its heads come from the snapshots and the tail.
    fleet.publisher.kill9().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    fleet.publisher.start().expect("restart the publisher");
    let (http, url) = (fleet.http.clone(), fleet.publisher.url());
    eventually("the restarted publisher to accept writes", Duration::from_secs(60), || {
        let (http, url) = (http.clone(), url.clone());
        async move { Ok(get_json(&http, &format!("{url}/health")).await?["ready"].as_bool().unwrap_or(false).then_some(())) }
    })
    .await
    .expect("publisher ready");
    let ph = get_json(&fleet.http, &format!("{}/health", fleet.publisher.url())).await.unwrap();
    assert_eq!(ph["snapshots"]["incomplete_canvases"], serde_json::json!([]), "{ph}");
    tokio::time::sleep(Duration::from_secs(3)).await;

    let stats = load.stop().await;
    let accepted = stats.accepted.load(std::sync::atomic::Ordering::Relaxed);
    let truths = wait_for_heads(&fleet, &clients, &canvases).await.expect("heads");
    let (_, verdicts) = finish(clients, &truths).await;
    fleet.stop().await;
    for v in &verdicts {
        assert!(v.ok(), "client {} ({}) did not get exactly the canvas's versions: {v:?}", v.name, v.canvas);
    }
    let versions: u64 = truths.values().map(|(v, _)| *v).sum();
    assert!(versions >= accepted, "{accepted} publishes accepted but the canvases' versions add up to {versions}");
}

#[test]
fn real_kafka() {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(trimmed_log_through_kill_failback_and_publisher_restart());
}

//! A history that changes under a running fleet, on a real Apache Kafka broker: the events topic
//! deleted and created again (a) with the snapshot topic kept, (b) with both topics recreated,
//! each time with only the publisher restarted. The nodes must notice (an offset out of range,
//! a position past the end, or a changed topic ID), stop serving the old history, rebuild, and
//! serve the new one: every connected client ends with every version of the new history once, in
//! order, with the publisher's hash, and fresh `since=0` clients get the publisher's canvas.
//!
//! librdkafka's mock cluster reports no topic IDs and cannot delete topics, so this runs on real
//! Kafka only. Needs `scripts/kafka/fetch.sh` (the README's test command runs it).

use crate::block_on;
use e2e::broker::{Broker, BrokerKind};
use e2e::checker::check_history;
use e2e::client::Client;
use e2e::fleet::{Fleet, FleetSpec};
use e2e::load::Load;
use e2e::procs::{eventually, get_json, wait_ready, Timeline};
use e2e::scenario::{pick_canvases, spawn_clients, wait_for_heads};
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use shared::kafka::KafkaSettings;
use shared::CanvasDims;
use std::collections::BTreeMap;
use std::time::Duration;

/// Deletes `topics` and waits until the broker no longer lists them.
async fn delete_topics(bootstrap: &str, topics: &[String]) {
    let admin: AdminClient<DefaultClientContext> = KafkaSettings::new(bootstrap).admin("e2e-history-admin").create().expect("admin");
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    for r in admin.delete_topics(&names, &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)))).await.expect("DeleteTopics") {
        r.expect("topic deleted");
    }
    let (b, ts) = (bootstrap.to_owned(), topics.to_vec());
    eventually("the deleted topics to be gone from the metadata", Duration::from_secs(30), || {
        let (b, ts) = (b.clone(), ts.clone());
        async move {
            tokio::task::spawn_blocking(move || {
                let c: BaseConsumer = KafkaSettings::new(&b).reader("e2e-history-md").create().map_err(|e| e.to_string())?;
                let md = c.fetch_metadata(None, Duration::from_secs(5)).map_err(|e| e.to_string())?;
                let left: Vec<String> = md.topics().iter().filter(|t| ts.iter().any(|n| n == t.name()) && t.error().is_none()).map(|t| t.name().to_owned()).collect();
                if left.is_empty() { Ok(Some(())) } else { Err(format!("still listed: {left:?}")) }
            })
            .await
            .map_err(|e| e.to_string())?
        }
    })
    .await
    .expect("topics gone");
}

/// kill -9 of the publisher, `topics` deleted, the publisher started again (it creates them), and
/// 50 events/s for 4 s over `canvases`; returns the publisher's truths once every client has them.
async fn recreate(fleet: &mut Fleet, broker: &Broker, topics: &[String], canvases: &[String], clients: &[Client], what: &str) -> BTreeMap<String, (u64, String)> {
    fleet.publisher.kill9().await;
    delete_topics(&broker.bootstrap, topics).await;
    fleet.timeline.mark(format!("{what}: deleted {topics:?} with the publisher down; starting it again"));
    fleet.publisher.start().expect("restart the publisher");
    wait_ready(&fleet.http, &fleet.publisher.url(), "the restarted publisher to accept writes", Duration::from_secs(60)).await.expect("publisher ready");
    let dims = CanvasDims { width: fleet.spec.width, height: fleet.spec.height };
    let load = Load::start(&format!("{}/api", fleet.gateway.url()), canvases.to_vec(), 50.0, dims.width, dims.height);
    tokio::time::sleep(Duration::from_secs(4)).await;
    let stats = load.stop().await;
    assert!(stats.accepted.load(std::sync::atomic::Ordering::Relaxed) > 0, "{what}: nothing published on the new topic");
    let truths = wait_for_heads(fleet, clients, canvases).await.expect("every client at the new history's heads");
    fleet.timeline.mark(format!("{what}: every client at the publisher's heads"));
    truths
}

/// Every client's current history is complete, in order, and ends with the publisher's canvas;
/// `changed`: each must also have seen the epoch change (it was connected across it).
fn assert_new_history(clients: &[Client], truths: &BTreeMap<String, (u64, String)>, changed: bool, what: &str) {
    for c in clients {
        let r = c.report();
        let (head, hash) = &truths[&r.channel];
        let v = check_history(&r, *head, hash);
        assert!(v.ok(), "{what}: client {} ({}) did not get exactly the new history's versions: {v:?}", r.name, r.channel);
        if changed {
            assert!(r.epoch_changes >= 1, "{what}: client {} never saw the new epoch", r.name);
        }
    }
}

async fn recreated_topics_under_a_running_fleet() {
    let tl = Timeline::new(true);
    let broker = Broker::start(BrokerKind::Real).await.expect("broker");
    let spec = FleetSpec {
        publisher_env: vec![("SNAPSHOT_EVERY_MS".into(), "300".into()), ("SNAPSHOT_EVERY_VERSIONS".into(), "40".into())],
        node_env: vec![("HISTORY_CHECK_MS".into(), "5000".into())],
        ..FleetSpec::default()
    };
    let mut fleet = Fleet::start(&broker, spec, tl.clone()).await.expect("fleet");
    let state = fleet.fleet_state().await.unwrap();
    let nodes = vec!["ws-1".to_owned(), "ws-2".to_owned()];
    let canvases = pick_canvases(&state, fleet.spec.partitions, 4, &nodes);
    let dims = CanvasDims { width: fleet.spec.width, height: fleet.spec.height };
    let clients = spawn_clients(&fleet, &canvases, 5, dims).await.expect("clients");
    let load = Load::start(&format!("{}/api", fleet.gateway.url()), canvases.clone(), 50.0, dims.width, dims.height);
    tokio::time::sleep(Duration::from_secs(5)).await;
    load.stop().await;
    let truths = wait_for_heads(&fleet, &clients, &canvases).await.expect("heads of the first history");
    assert_new_history(&clients, &truths, false, "first history");

    // (a) The events topic recreated, the snapshot topic kept: the new history continues from
    // the snapshots' versions on a log whose end is far below every checkpoint.
    let events = vec![fleet.topic.clone()];
    let truths = recreate(&mut fleet, &broker, &events, &canvases, &clients, "(a) events topic recreated").await;
    assert_new_history(&clients, &truths, true, "(a)");
    let fresh = spawn_clients(&fleet, &canvases, canvases.len(), dims).await.expect("fresh clients");
    let truths_fresh = wait_for_heads(&fleet, &fresh, &canvases).await.expect("fresh clients at the heads");
    assert_new_history(&fresh, &truths_fresh, false, "(a) fresh since=0");

    // (b) Both topics recreated: versions start again at 1.
    let both = vec![fleet.topic.clone(), shared::snapshot::topic_for(&fleet.topic)];
    let all: Vec<Client> = clients.into_iter().chain(fresh).collect();
    let truths = recreate(&mut fleet, &broker, &both, &canvases, &all, "(b) both topics recreated").await;
    assert_new_history(&all, &truths, true, "(b)");
    let fresh = spawn_clients(&fleet, &canvases, canvases.len(), dims).await.expect("fresh clients");
    let truths_fresh = wait_for_heads(&fleet, &fresh, &canvases).await.expect("fresh clients at the heads");
    assert_new_history(&fresh, &truths_fresh, false, "(b) fresh since=0");

    // The recreated snapshot topic keeps records past any load before the cleaner may remove them.
    let lag = shared::kafka::topic_config(&KafkaSettings::new(&broker.bootstrap), "e2e-history", &shared::snapshot::topic_for(&fleet.topic), "min.compaction.lag.ms").await;
    assert_eq!(lag, Ok(Some("600000".to_owned())), "the snapshot topic's min.compaction.lag.ms");
    for n in &fleet.nodes {
        let h = get_json(&fleet.http, &format!("{}/health", n.url())).await.unwrap();
        assert_eq!(h["state"], "HEALTHY", "{h}");
        assert!(h["history_changes"].as_u64().unwrap_or(0) + h["log_moved_back"].as_u64().unwrap_or(0) > 0, "the node never noticed: {h}");
    }
    for c in all.into_iter().chain(fresh) {
        c.stop().await;
    }
    fleet.stop().await;
}

#[test]
fn recreated_topics_real_kafka() {
    block_on(recreated_topics_under_a_running_fleet());
}

//! The brief's whole scenario against real processes and a Kafka-protocol broker:
//! kill -9, takeover, restart, UP×5, start-recovery, catch-up with replayCount > 0, failback
//! drain, and for every client: no version lost, duplicated or out of order, and the final canvas
//! hash equal to the publisher's.
//!
//! `embedded_broker` runs against librdkafka's mock cluster (always). `real_kafka` runs against
//! Apache Kafka 4.x from Maven Central; it needs `scripts/kafka/fetch.sh` to have run (the README's
//! test command does) and fails, not skips, when the jars are missing. `kafka_cluster` runs against
//! three such brokers (replication factor 3, min ISR 2: the publisher creates the topic with 3
//! replicas); same needs.

use e2e::broker::BrokerKind;
use e2e::scenario::{run, ScenarioConfig};

fn scenario(broker: BrokerKind) {
    crate::block_on(scenario_on(broker));
}

async fn scenario_on(broker: BrokerKind) {
    let cfg = ScenarioConfig { broker, echo: true, ..ScenarioConfig::default() };
    let report = run(cfg).await.expect("the scenario ran to the end");
    println!("\n{}", report.table());
    for v in report.verdicts.iter().filter(|v| !v.ok()) {
        println!("client {} ({}): {:?}", v.name, v.channel, v);
    }
    assert!(report.published >= 200, "steady publishing: only {} events", report.published);
    assert_eq!(report.lost(), 0, "lost events");
    assert_eq!(report.duplicated(), 0, "duplicated events");
    assert_eq!(report.out_of_order(), 0, "out-of-order events");
    for v in &report.verdicts {
        assert!(v.ok(), "client {} did not get exactly the canvas's versions: {v:?}", v.name);
    }
    assert!(report.replay_count > 0, "catch-up replayed nothing: {}", report.catchup_report);
    assert_eq!(report.burst_events, e2e::scenario::BURST, "every publish of the burst was accepted");
    assert!(
        report.burst_records < report.burst_events,
        "{} concurrent publishes to one canvas took {} records: the publisher grouped nothing",
        report.burst_events,
        report.burst_records
    );
    assert!(report.lifecycle_missing.is_empty(), "lifecycle steps missing: {:?} (saw {:?})", report.lifecycle_missing, report.lifecycle);
    assert!(report.ws1_sessions_after > 0, "no client came back to ws-1 after the failback");
    // The channel reset mid-run: its clients followed it into its next epoch.
    let (channel, epoch) = report.reset.clone().expect("the scenario resets a channel");
    assert!(epoch.ends_with("-1"), "the reset's epoch is reset count 1: {epoch}");
    for r in report.reports.iter().filter(|r| r.channel == channel) {
        assert_eq!(r.epoch.as_ref().map(|e| e.as_str()), Some(epoch.as_str()), "{} ends in the reset's epoch", r.name);
        assert!(r.epoch_changes >= 1, "{} saw the reset", r.name);
    }
    assert!(report.passed());
}

#[test]
fn embedded_broker() {
    scenario(BrokerKind::Embedded);
}

#[test]
fn real_kafka() {
    let kind = BrokerKind::real_from_env();
    scenario(kind);
}

#[test]
fn kafka_cluster() {
    scenario(BrokerKind::Cluster);
}

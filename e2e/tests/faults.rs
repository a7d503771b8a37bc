//! Broker and publisher faults on a real three-node Kafka cluster, with the whole fleet, clients
//! through the gateway and a writer that publishes with idempotency keys throughout
//! (`e2e::faults`): kill -9 of the busiest partition's leader broker, SIGSTOP of a follower past
//! the produce timeout, a second publisher on the topic, kill -9 of the publisher with requests
//! in flight. Each asserts zero lost / duplicated / out of order events, every client's hash equal
//! to the publisher's, and every acknowledged publish in the log once at its version.
//!
//! The cases share one cluster (three JVMs on two cores: starting one takes about 10 s) and take
//! turns; each leaves it whole for the next (`faults::heal`). Needs `scripts/kafka/fetch.sh` (the
//! README's test command runs it).

use e2e::broker::{Broker, BrokerKind};
use e2e::faults::{self, Case};
use std::sync::OnceLock;

/// One case at a time, on one cluster.
static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
static CLUSTER: OnceLock<Broker> = OnceLock::new();

fn cluster() -> &'static Broker {
    CLUSTER.get_or_init(|| {
        runtime().block_on(Broker::start(BrokerKind::Cluster)).expect("a three-node Kafka cluster (scripts/kafka/fetch.sh must have run)")
    })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("a runtime")
}

fn case(c: Case) {
    let _turn = TURN.lock().unwrap_or_else(|p| p.into_inner());
    let broker = cluster();
    let report = runtime().block_on(faults::run(broker, c, true)).unwrap_or_else(|e| panic!("{c:?} ran to the end: {e:#}"));
    println!("\n{}", report.text());
    for v in report.verdicts.iter().filter(|v| !v.ok()) {
        println!("client {} ({}): {v:?}", v.name, v.channel);
    }
    let p = report.promise();
    assert_eq!((p.lost, p.duplicated, p.out_of_order), (0, 0, 0), "{c:?}: lost / duplicated / out of order");
    assert_eq!((p.extra_snapshots, p.hash_mismatches), (0, 0), "{c:?}: extra snapshots / hash mismatches");
    assert!(report.audit.ok(), "{c:?}: the log: {} ({:?})", report.audit.summary(), report.audit);
    assert!(report.writer_failed.is_empty(), "{c:?}: the writer gave up on or was refused: {:?}", report.writer_failed);
    assert!(report.acked > 0, "{c:?}: nothing was acknowledged");
    assert!(report.problems.is_empty(), "{c:?}: {:?}", report.problems);
    assert!(report.ok());
}

#[test]
fn leader_broker_killed_mid_stream() {
    case(Case::LeaderKill);
}

#[test]
fn follower_paused_past_the_produce_timeout() {
    case(Case::FollowerPause);
}

#[test]
fn a_second_publisher_fences_the_first() {
    case(Case::SecondPublisher);
}

#[test]
fn publisher_killed_with_requests_in_flight() {
    case(Case::PublisherKill);
}

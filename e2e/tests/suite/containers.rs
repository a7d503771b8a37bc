//! The brief's scenario with Apache Kafka in a Docker container (testcontainers, the official
//! `apache/kafka` image): exactly the same scenario code as the embedded and JVM brokers.
//!
//! It needs a Docker engine, so it is ignored by default (the test run lists it as ignored, with
//! that reason) and runs on demand: `cargo test --release -p e2e --test suite containers:: -- --ignored`.
//! Run that way without an engine it fails, naming what it could not reach.

use e2e::broker::{docker_unreachable, BrokerKind};
use e2e::scenario::{run, ScenarioConfig};

#[test]
#[ignore = "needs a Docker engine: run with --ignored where one answers"]
fn scenario_against_kafka_in_a_container() {
    crate::block_on(async {
        if let Some(why) = docker_unreachable().await {
            panic!("this test needs a Docker engine, and {why}");
        }
        let report = run(ScenarioConfig { broker: BrokerKind::Container, echo: true, ..ScenarioConfig::default() })
            .await
            .expect("the scenario ran to the end");
        println!("\n{}", report.table());
        assert!(report.passed(), "lost {}, duplicated {}, out of order {}, lifecycle missing {:?}",
            report.lost(), report.duplicated(), report.out_of_order(), report.lifecycle_missing);
    });
}

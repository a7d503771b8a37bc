//! The brief's scenario with Apache Kafka in a Docker container (testcontainers, the official
//! `apache/kafka` image): exactly the same scenario code as the embedded and JVM brokers.
//!
//! Where no Docker engine is reachable the test says so and is skipped, unless the run asked for
//! this broker (`E2E_BROKER=container`), in which case it fails: it never passes silently.

use e2e::broker::{docker_unreachable, BrokerKind};
use e2e::scenario::{run, ScenarioConfig};

#[test]
fn scenario_against_kafka_in_a_container() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let asked = std::env::var("E2E_BROKER").as_deref() == Ok("container");
        if let Some(why) = docker_unreachable().await {
            assert!(!asked, "E2E_BROKER=container, but {why}");
            println!("SKIPPED scenario_against_kafka_in_a_container: {why}. Set E2E_BROKER=container where Docker runs.");
            return;
        }
        let report = run(ScenarioConfig { broker: BrokerKind::Container, echo: true, ..ScenarioConfig::default() })
            .await
            .expect("the scenario ran to the end");
        println!("\n{}", report.table());
        assert!(report.passed(), "lost {}, duplicated {}, out of order {}, lifecycle missing {:?}",
            report.lost(), report.duplicated(), report.out_of_order(), report.lifecycle_missing);
    });
}

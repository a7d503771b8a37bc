//! The link proxy carries all of a client's broker traffic (what the chaos tool's link faults rely
//! on), on real Apache Kafka with one proxied listener ([`Broker::start_with_links`]): a producer
//! bootstrapped at the link delivers; with the link frozen its deliveries stop (it does not go
//! around the proxy to the broker's plain listener), and they resume when the link passes again;
//! with the link cut a new client cannot even fetch metadata, while the plain listener still
//! serves.

use e2e::broker::Broker;
use e2e::link::LinkMode;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::ClientConfig;
use std::time::Duration;

fn producer(bootstrap: &str) -> FutureProducer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("message.timeout.ms", "3000")
        .set("socket.timeout.ms", "3000")
        .create()
        .expect("a producer")
}

async fn deliver(p: &FutureProducer, topic: &str, n: u32) -> Result<(), String> {
    let key = n.to_string();
    let record = FutureRecord::to(topic).key(&key).payload("x");
    p.send(record, Duration::from_secs(3)).await.map(|_| ()).map_err(|(e, _)| e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_carries_all_of_a_clients_broker_traffic() {
    let _turn = crate::one_at_a_time();
    let broker = Broker::start_with_links(1).await.expect("Kafka with one proxied listener");
    let topic = format!("links-{}", std::process::id());
    let settings = shared::kafka::KafkaSettings::new(broker.bootstrap.clone());
    e2e::procs::eventually("the topic", Duration::from_secs(30), || async {
        shared::kafka::ensure_topic(&settings, "links-test", &topic, 1, 1, &[]).await.map(Some)
    })
    .await
    .unwrap();
    let direct = producer(&broker.bootstrap);
    // Through the plain listener: a first record.
    e2e::procs::eventually("the topic to take a record", Duration::from_secs(30), || async {
        deliver(&direct, &topic, 0).await.map(Some)
    })
    .await
    .unwrap();

    let link = broker.link(0).unwrap();
    let linked = producer(&broker.link_bootstrap(0).unwrap());
    deliver(&linked, &topic, 1).await.expect("through the link");

    link.set(LinkMode::Freeze);
    let frozen = deliver(&linked, &topic, 2).await;
    assert!(frozen.is_err(), "a frozen link stops the deliveries: the client's traffic all goes through it");
    deliver(&direct, &topic, 3).await.expect("the plain listener still serves");

    link.set(LinkMode::Pass);
    e2e::procs::eventually("deliveries through the link again", Duration::from_secs(30), || async {
        deliver(&linked, &topic, 4).await.map(Some)
    })
    .await
    .unwrap();

    link.set(LinkMode::Cut);
    let fresh = producer(&broker.link_bootstrap(0).unwrap());
    let meta = fresh.client().fetch_metadata(Some(&topic), Duration::from_secs(3));
    assert!(meta.is_err(), "a cut link refuses new clients");
    link.set(LinkMode::Pass);
    let meta = fresh.client().fetch_metadata(Some(&topic), Duration::from_secs(10)).expect("metadata through the link once it passes");
    // What the broker advertises to a client of the link: the proxy's port, not its own.
    let port = broker.link(0).unwrap().port;
    assert!(meta.brokers().iter().all(|b| b.port() == i32::from(port)), "advertised: {:?}", meta.brokers().iter().map(|b| b.port()).collect::<Vec<_>>());
}
